"""The one module that imports numba: device arrays, conversions, backend assembly."""
import numpy as np
from numba import cuda  # noqa: F401  (the single numba import of fastnn)

from .._backend import Backend, collect_ops


def is_simulator():
    from numba.cuda import simulator_enabled  # type: ignore[attr-defined]
    return bool(simulator_enabled)


def as_device(a):
    """A numba device array viewing ``a`` (anything with __cuda_array_interface__), no copy."""
    if hasattr(a, "copy_to_host"):   # numba device array (or the simulator's)
        return a
    if cuda.is_cuda_array(a):
        return cuda.as_cuda_array(a)
    raise TypeError(f"expected a device array, got {type(a).__name__}")


def to_device(a):
    if type(a) is np.ndarray:
        return cuda.to_device(np.ascontiguousarray(a))
    if hasattr(a, "__cuda_array_interface__") or hasattr(a, "copy_to_host"):
        return as_device(a)
    return cuda.to_device(np.ascontiguousarray(np.asarray(a)))


def to_numpy(a):
    if type(a) is np.ndarray:
        return a
    return as_device(a).copy_to_host()


def accumulate(dst, src):
    from . import kernels_common
    kernels_common.accumulate(as_device(dst), as_device(src))


def make_backend():
    from .._backend import backend
    import fastnn.cuda.ops as pkg
    ref = backend("reference")
    ops = collect_ops(pkg)
    fallbacks = sorted(set(ref.ops) - set(ops))
    # Ops with no device kernel are not silently run on the host: they raise.
    table = dict(ops)
    for name in fallbacks:
        table[name] = _missing(name)
    return Backend("cuda", table, fallbacks)


class MissingKernel(NotImplementedError):
    """Raised by ops the cuda backend does not implement (listed in its ``fallbacks``)."""


def _missing(name):
    def f(*args, **kwargs):
        raise MissingKernel(f"op {name!r} has no cuda kernel yet")
    f.__name__ = name
    return f
