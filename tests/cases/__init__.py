"""Op and module cases, one file per family; every file's CASES / MODULE_CASES join the harness."""
import importlib
import pkgutil


def _collect(attr):
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        out.extend(getattr(mod, attr, ()))
    names = [c.name for c in out]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names: {sorted(dup)}"
    return out


def all_cases():
    return _collect("CASES")


def all_module_cases():
    return _collect("MODULE_CASES")
