"""The cpu backend: compiled Cython + OpenMP kernels (fastnn._cpu.<variant>.<family>).

Each family is built for several instruction-set variants (setup.py); the best one
this CPU runs is loaded.  Ops the compiled families do not define fall back to the
reference and are listed in ``FALLBACKS`` -- the tests assert that list holds none
of the ops the project promises to compile.
"""
import importlib
import pkgutil

from .._backend import Backend

_modules = None


def cpu_variants():
    """Variants this CPU can run, best first."""
    out = []
    try:
        import numpy._core._multiarray_umath as mu
        feats = mu.__cpu_features__
    except (ImportError, AttributeError):  # pragma: no cover - numpy < 2
        try:
            import numpy.core._multiarray_umath as mu
            feats = mu.__cpu_features__
        except (ImportError, AttributeError):
            feats = {}
    if feats.get("AVX2") and feats.get("FMA3"):
        out.append("avx2")
    out.append("base")
    return out


def compiled_modules():
    """The loaded family modules, one per family, best variant each."""
    global _modules
    if _modules is None:
        import fastnn._cpu as pkg
        families = {}
        for variant in reversed(cpu_variants()):   # base first, better ones override
            try:
                vpkg = importlib.import_module(f"fastnn._cpu.{variant}")
            except ImportError:
                continue
            for info in pkgutil.iter_modules(vpkg.__path__):
                if not info.name.startswith("_"):
                    families[info.name] = f"fastnn._cpu.{variant}.{info.name}"
        if not families:
            raise ImportError("fastnn's compiled kernels are not built "
                              "(pip install . or python setup.py build_ext --inplace)")
        from .._backend import get_num_threads
        n = get_num_threads()
        mods = []
        for name in sorted(families):
            mod = importlib.import_module(families[name])
            mod._set_num_threads(n)
            mods.append(mod)
        _modules = mods
    return _modules


def shell_module():
    """The compiled fast-check helpers (fastnn._cpu.<variant>._shell), best variant."""
    for variant in cpu_variants():
        try:
            return importlib.import_module(f"fastnn._cpu.{variant}._shell")
        except ImportError:
            continue
    raise ImportError("fastnn's compiled helpers are not built")


def make_backend():
    from .._backend import backend
    ref = backend("reference")
    ops = dict(ref.ops)
    compiled = set()
    for mod in compiled_modules():
        for name in mod.OPS:
            if name in compiled:
                raise RuntimeError(f"op {name!r} compiled twice ({mod.__name__})")
            ops[name] = getattr(mod, name)
            compiled.add(name)
    fallbacks = sorted(set(ref.ops) - compiled)
    be = Backend("cpu", ops, fallbacks)
    be.variant = {m.__name__.split(".")[-1]: m.__name__.split(".")[-2] for m in compiled_modules()}
    return be


