"""The cuda backend: numba.cuda kernels (+ cuBLAS through CuPy for GEMMs).

numba is imported in one place only (``fastnn.cuda._runtime``) and only when the
cuda backend is asked for, so ``import fastnn`` works without numba or a GPU.
Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set before numba is first
imported) every kernel runs on the CPU; CI tests the backend that way.
"""
import importlib.util

import numpy as np

__all__ = ["is_available", "to_device", "to_numpy", "accumulate", "transpose2d", "swap_last_two",
           "make_backend"]

_available = [None]


def is_available():
    """True where numba-cuda is installed and a GPU (or the simulator) is usable."""
    if _available[0] is None:
        if importlib.util.find_spec("numba") is None:
            _available[0] = False
        else:
            try:
                from . import _runtime
                _available[0] = bool(_runtime.cuda.is_available())
            except Exception:
                _available[0] = False
    return _available[0]


def _rt():
    if not is_available():
        raise RuntimeError("the cuda backend needs a CUDA GPU with numba-cuda installed "
                           "(pip install fastnn[cuda]) or numba's CUDA simulator "
                           "(NUMBA_ENABLE_CUDASIM=1 set before numba is imported)")
    from . import _runtime
    return _runtime


def to_device(a):
    """Copy a host array to the device (device arrays pass through unchanged)."""
    return _rt().to_device(a)


def to_numpy(a):
    """Copy a device array to a NumPy array (NumPy arrays pass through unchanged)."""
    if type(a) is np.ndarray:
        return a
    if not (hasattr(a, "__cuda_array_interface__") or hasattr(a, "copy_to_host")):
        return np.asarray(a)   # host scalars and array-likes
    return _rt().to_numpy(a)


def accumulate(dst, src):
    """dst += src on the device."""
    _rt().accumulate(dst, src)


def transpose2d(a):
    """A fresh C-contiguous device array holding the transpose of 2-D device array ``a``."""
    _rt()
    from . import _kit
    return _kit.transpose2d(a)


def swap_last_two(a):
    """(A, B, C) device array -> a fresh C-contiguous (A, C, B) one (e.g. (N, C, S) logits
    to (N, S, C) rows)."""
    _rt()
    from . import _kit
    return _kit.swap_last_two(a)


def make_backend():
    rt = _rt()
    return rt.make_backend()
