"""fastnn: NumPy-native neural-network layers with forward and backward passes.

Compiled Cython + OpenMP kernels on the CPU, a plain NumPy reference backend (the
test oracle), and numba.cuda kernels on the GPU, behind one torch-shaped API.
"""
from ._version import __version__
from ._backend import (available_backends, get_backend, get_num_threads, set_backend,
                       set_num_threads, use_backend)
from ._random import manual_seed, initial_seed
from . import functional
from . import nn
from . import optim  # noqa: E402
from . import models  # noqa: E402
from .io import load, save  # noqa: E402

__all__ = ["__version__", "set_backend", "get_backend", "use_backend", "available_backends",
           "set_num_threads", "get_num_threads", "manual_seed", "initial_seed", "functional",
           "nn", "optim", "models", "save", "load", "to_numpy", "to_device"]


def to_numpy(a):
    """A NumPy array of ``a`` (device arrays are copied to the host)."""
    from .cuda import to_numpy as _t
    return _t(a)


def to_device(a):
    """``a`` on the GPU (cuda backend); NumPy arrays are copied once."""
    from .cuda import to_device as _t
    return _t(a)
