"""Backend registry and dispatch.

A backend is an object whose attributes are the kernels: the same names and
signatures on ``reference`` (NumPy), ``cpu`` (compiled) and ``cuda`` (numba.cuda).
Each op is a pair ``op(...) -> (out, saved)`` and ``op_backward(d_out, saved) -> grads``;
some inference-only kernels return just ``out`` (documented where they are defined).

The reference backend is the base: the cpu and cuda backends start from its table
and override op by op.  Every op that a compiled backend does *not* override is
listed in that backend's ``fallbacks`` -- one visible table, which the tests assert
is empty for the ops the project promises to compile.
"""
import contextlib
import importlib
import os
import pkgutil
import threading
from typing import TYPE_CHECKING

import numpy as np

__all__ = ["set_backend", "get_backend", "use_backend", "available_backends",
           "set_num_threads", "get_num_threads", "backend", "current", "dispatch", "placed"]

if TYPE_CHECKING:   # the ops' signatures, for editors (fastnn/_ops.pyi, tools/gen_ops_stub.py)
    from ._ops import Ops

_BACKEND_NAMES = ("reference", "cpu", "cuda")


class Backend:
    """A table of kernels with attribute access (attributes are plain functions)."""

    def __init__(self, name, ops, fallbacks=()):
        self.name = name
        self.ops = dict(ops)
        self.fallbacks = tuple(sorted(fallbacks))
        self.__dict__.update(self.ops)

    def __repr__(self):
        return f"<fastnn backend {self.name!r}: {len(self.ops)} ops, {len(self.fallbacks)} fallbacks>"


def collect_ops(package):
    """Collect the ops of every family module in ``package`` (modules not starting with '_').

    A family module lists its kernels in ``OPS`` (a tuple of names); each must be a
    module-level callable.  Families are discovered, so adding a family is adding a file.
    """
    ops = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{package.__name__}.{info.name}")
        for name in getattr(mod, "OPS", ()):
            if name in ops:
                raise RuntimeError(f"op {name!r} defined twice ({package.__name__}.{info.name})")
            ops[name] = getattr(mod, name)
    return ops


class _State(threading.local):
    def __init__(self):
        self.backend = None


_backends = {}
_default_name = [None]
_default_be = [None]
_state = _State()
_lock = threading.RLock()


def backend(name) -> "Ops":
    """The Backend object called ``name`` (loaded on first use)."""
    be = _backends.get(name)
    if be is not None:
        return be
    with _lock:
        be = _backends.get(name)
        if be is None:
            if name == "reference":
                from . import reference as mod
            elif name == "cpu":
                from . import cpu as mod
            elif name == "cuda":
                from . import cuda as mod
            else:
                raise ValueError(f"unknown backend {name!r}; expected one of {_BACKEND_NAMES}")
            be = mod.make_backend()
            _backends[name] = be
    return be


def available_backends():
    """Backends usable on this machine: 'cuda' only where a GPU (or the simulator) works."""
    out = ["reference"]
    try:
        backend("cpu")
        out.append("cpu")
    except ImportError:
        pass
    from . import cuda
    if cuda.is_available():
        out.append("cuda")
    return out


def _default():
    if _default_name[0] is None:
        name = os.environ.get("FASTNN_BACKEND", "cpu")
        try:
            backend(name)
        except ImportError:
            if name != "cpu":
                raise
            import warnings
            warnings.warn("fastnn: compiled cpu kernels are not built; using the NumPy "
                          "reference backend (pip install . builds them)", RuntimeWarning)
            name = "reference"
        _default_name[0] = name
    be = _default_be[0]
    if be is None or be.name != _default_name[0]:
        be = _default_be[0] = backend(_default_name[0])
    return be


def host_backend() -> "Ops | None":
    """The backend in force if it takes NumPy arrays (reference or cpu), else None.
    The shells' fast path: no per-array dispatch."""
    be = _state.backend or _default_be[0] or _default()
    return None if be.name == "cuda" else be


def current() -> "Ops":
    """The Backend in force for this thread."""
    be = _state.backend
    if be is None:
        be = _default()
    return be


def _resolve(name):
    if not isinstance(name, str):
        raise TypeError(f"backend name must be a str, got {type(name).__name__}")
    if name not in _BACKEND_NAMES:
        raise ValueError(f"unknown backend {name!r}; expected one of {list(_BACKEND_NAMES)}")
    if name == "cuda":
        from . import cuda
        if not cuda.is_available():
            raise RuntimeError("the cuda backend needs a CUDA GPU with numba-cuda installed "
                               "(pip install fastnn[cuda]) or numba's CUDA simulator "
                               "(NUMBA_ENABLE_CUDASIM=1 set before numba is imported)")
    return backend(name)


def set_backend(name):
    """Select the backend for this process (every thread without a ``use_backend`` block)."""
    be = _resolve(name)
    _default_name[0] = be.name
    _default_be[0] = be
    _state.backend = None


def get_backend():
    """Name of the backend in force for this thread."""
    return current().name


@contextlib.contextmanager
def use_backend(name):
    """Context manager: run the block on backend ``name`` (this thread only), then restore."""
    be = _resolve(name)
    prev = _state.backend
    _state.backend = be
    try:
        yield be
    finally:
        _state.backend = prev


def dispatch(*arrays) -> "Ops":
    """The backend for a call on ``arrays``.

    NumPy inputs run on the backend in force.  Device arrays (anything with
    ``__cuda_array_interface__``) run on the cuda backend whatever is in force;
    mixing host and device arrays in one call is an error.
    """
    be = _state.backend or _default()
    host = dev = False
    for a in arrays:
        if a is None:
            continue
        if type(a) is np.ndarray:
            host = True
        elif hasattr(a, "__cuda_array_interface__") or hasattr(a, "copy_to_host"):
            dev = True
        else:
            host = True
    if dev:
        if host:
            raise ValueError("mixing host (NumPy) and device (CUDA) arrays in one call; "
                             "move them to one place first (fastnn.to_device / fastnn.to_numpy)")
        if be.name != "cuda":
            be = backend("cuda")
    return be


def placed(*arrays):
    """The backend whose memory holds ``arrays``, for the layout ops (fastnn/reference/
    layout.py: add, transpose, accumulate, moves), which keep data where it is.

    Any device array -> cuda (its ops copy host operands over, so a host array may join a
    device one: a residual added to a module's device output); otherwise the host backend
    in force (cpu, or reference), also while the cuda backend is in force.  This is the
    one place that asks where an array lives: nn/ and functional/ call these ops instead.
    """
    for a in arrays:
        if a is not None and type(a) is not np.ndarray and (
                hasattr(a, "__cuda_array_interface__") or hasattr(a, "copy_to_host")):
            return backend("cuda")
    be = _state.backend or _default()
    return be if be.name != "cuda" else _host_default()


def _host_default():
    try:
        return backend("cpu")
    except ImportError:
        return backend("reference")


# ---------------------------------------------------------------- threads
_num_threads = [None]


def _cpu_modules():
    try:
        from . import cpu
    except ImportError:
        return []
    return cpu.compiled_modules()


def set_num_threads(n):
    """Threads for the compiled kernels: OpenMP loops *and* the BLAS pool (never stacked).

    Process-wide, as torch.set_num_threads.  The count lives in OpenMP itself (what
    omp_get_max_threads reads; each kernel reads it at call time), so OMP_NUM_THREADS,
    threadpoolctl's threadpool_limits and this function all govern the same number, and
    threadpoolctl.threadpool_info() shows it."""
    from ._validate import is_int   # here: _validate loads fastnn.cpu, which imports this module
    if not is_int(n):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    n = int(n)
    if n < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n}")
    _num_threads[0] = n
    from . import cpu
    omp = cpu.openmp_module()
    if omp is not None:
        omp._set_num_threads(n)
    for mod in _cpu_modules():
        mod._set_num_threads(n)
    from . import _threads
    _threads.set_blas_threads(n)


def get_num_threads():
    """Threads a compiled kernel called from this thread may use now (default:
    OMP_NUM_THREADS, else the CPUs this process may run on; inside
    threadpoolctl.threadpool_limits(n), at most n)."""
    from . import cpu
    omp = cpu.openmp_module()
    if omp is not None:      # OpenMP's own count, as the kernels read it
        n = omp._get_num_threads()
        if n > 0:
            return n         # (0: a build without OpenMP that was never given a count)
    if _num_threads[0] is None:
        _num_threads[0] = default_num_threads()
    return _num_threads[0]


def default_num_threads():
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.split(",")[0].strip().isdigit() and int(env.split(",")[0]) > 0:
        return int(env.split(",")[0])
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)
