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


VARIANTS = ("avx512", "avx2", "base")     # best first
# what each variant needs (setup.py: -march=x86-64-v4 / x86-64-v3), as NumPy names them
_NEEDS = {"avx512": ("AVX2", "FMA3", "AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL"),
          "avx2": ("AVX2", "FMA3"), "base": ()}
_WHAT = {"avx512": "AVX-512F/CD/BW/DQ/VL with the ZMM and opmask state enabled by the OS",
         "avx2": "AVX2 and FMA", "base": "nothing beyond the x86-64 baseline"}


class VariantError(RuntimeError):
    """FASTNN_VARIANT names a variant that is unknown, not built, or not runnable here."""


def _cpu_features():
    """NumPy's run-time CPU feature table.  Sound for the OS side too: NumPy reports AVX,
    AVX2/FMA3 only when XCR0 (xgetbv) shows the YMM state enabled, and the AVX512* flags
    only when XCR0 bits 5-7 (opmask, ZMM0-15 upper halves, ZMM16-31) are set as well --
    a kernel or hypervisor that does not save the ZMM registers hides them."""
    try:
        import numpy._core._multiarray_umath as mu
        return dict(mu.__cpu_features__)
    except (ImportError, AttributeError):  # pragma: no cover - numpy < 2
        try:
            import numpy.core._multiarray_umath as mu
            return dict(mu.__cpu_features__)
        except (ImportError, AttributeError):
            return {}


def cpu_variants(features=None):
    """Variants this CPU (and OS) can run, best first; ``features``: a NumPy-style
    feature dict to judge instead of this machine's (tests)."""
    feats = _cpu_features() if features is None else features
    return [v for v in VARIANTS if all(feats.get(f) for f in _NEEDS[v])]


def _built(variant):
    import importlib.util
    try:
        return importlib.util.find_spec(f"fastnn._cpu.{variant}._openmp") is not None
    except ImportError:
        return False


def forced_variant():
    """The variant FASTNN_VARIANT forces (checked: known, built, runnable), or None."""
    import os
    name = os.environ.get("FASTNN_VARIANT", "").strip().lower()
    if not name:
        return None
    if name not in VARIANTS:
        raise VariantError(f"FASTNN_VARIANT={name!r} is not a kernel variant; expected one of "
                           f"{', '.join(VARIANTS)} (or unset: the best this CPU runs)")
    runs = cpu_variants()
    if name not in runs:
        raise VariantError(f"FASTNN_VARIANT={name}: this CPU cannot run it (it needs "
                           f"{_WHAT[name]}); it runs: {', '.join(runs)}")
    if not _built(name):
        built = [v for v in VARIANTS if _built(v)]
        raise VariantError(f"FASTNN_VARIANT={name}: that variant is not built in this "
                           f"installation (built: {', '.join(built) or 'none'})")
    return name


def load_order():
    """Variants to load from, best first: the forced one and those below it, else every
    variant this CPU runs.  A family missing from a better variant (a partial development
    build) comes from the next one down."""
    runs = cpu_variants()
    forced = forced_variant()
    if forced is not None:
        return runs[runs.index(forced):]
    return runs


def compiled_modules():
    """The loaded family modules, one per family, best variant each."""
    global _modules
    if _modules is None:
        import fastnn._cpu as pkg
        families = {}
        for variant in reversed(load_order()):   # base first, better ones override
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
        from .. import _backend, _threads
        _threads.check_address_space("loading the compiled kernels",
                                     _threads._kernel_load_bytes())
        try:
            mods = [importlib.import_module(families[name]) for name in sorted(families)]
        except ImportError as e:
            # the loader cannot map a built module: memory, not a missing build
            if "failed to map segment" in str(e) or "allocate memory" in str(e):
                raise MemoryError(f"fastnn: loading the compiled kernels failed: {e}") from e
            raise
        # the thread count is OpenMP's own (fnn_runtime.pxi): only a count the user set
        # before the kernels were loaded needs passing on
        if _backend._num_threads[0] is not None:
            for mod in mods:
                mod._set_num_threads(_backend._num_threads[0])
        _modules = mods
        omp = openmp_module()
        _threads.kernels_loaded(mods + ([omp] if omp is not None else []))
    return _modules


_openmp = []


def openmp_module():
    """fastnn._cpu.<variant>._openmp (the kernels' OpenMP runtime and its thread-count
    entry points, nothing else), best variant; None where the kernels are not built."""
    if not _openmp:
        mod = None
        for variant in load_order():
            try:
                mod = importlib.import_module(f"fastnn._cpu.{variant}._openmp")
                break
            except ImportError:
                continue
        _openmp.append(mod)
    return _openmp[0]


def load_openmp():
    """At ``import fastnn``: load the OpenMP runtime the kernels use, so that a
    threadpoolctl.threadpool_limits block entered before the first kernel call (which
    loads the families) still governs it.  About a millisecond; no BLAS is loaded."""
    try:
        openmp_module()
    except MemoryError:  # pragma: no cover - the kernels' own load reports it later
        _openmp.clear()


def shell_module():
    """The compiled fast-check helpers (fastnn._cpu.<variant>._shell), best variant."""
    for variant in load_order():
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
    # the layout ops (add, transpose, host/device moves) are NumPy's own compiled loops
    # on the host: the reference's functions are the cpu's, not fallbacks
    from ..reference import layout
    for name in layout.OPS:
        ops[name] = getattr(layout, name)
        compiled.add(name)
    fallbacks = sorted(set(ref.ops) - compiled)
    be = Backend("cpu", ops, fallbacks)
    be.variant = {m.__name__.split(".")[-1]: m.__name__.split(".")[-2] for m in compiled_modules()}
    return be


