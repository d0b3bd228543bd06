"""fastnn: NumPy-native neural-network layers with forward and backward passes.

Compiled Cython + OpenMP kernels on the CPU, a plain NumPy reference backend (the
test oracle), and numba.cuda kernels on the GPU, behind one torch-shaped API.
"""
import os as _os

# libgomp's workers spin for a while after each parallel region (GOMP_SPINCOUNT, 300k
# iterations by default) before they sleep.  fastnn alternates OpenMP kernels with BLAS
# calls whose own threads need the same cores, and spinning OpenMP workers steal them
# (measured 2-3x slower layer_norm -> linear chains on 2 cores).  A short spin keeps a
# region's start-up fast and then yields the cores.  It must be set before libgomp
# loads (the compiled kernels load lazily); a user's own OMP_WAIT_POLICY or
# GOMP_SPINCOUNT wins.
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# Freed large buffers stay in the process instead of being unmapped and page-faulted
# again on the next call (see _malloc.py; FASTNN_MALLOC_TUNE=0 opts out).
from ._malloc import tune as _tune_malloc  # noqa: E402
_tune_malloc()

# The kernels' OpenMP runtime is loaded now (not at the first kernel call) so that
# threadpoolctl sees it: a threadpool_limits block entered before that call must govern it.
from .cpu import load_openmp as _load_openmp  # noqa: E402
from .cpu import VariantError as _VariantError  # noqa: E402


def _run_as_command():
    """This import is the ``fastnn`` command's own (``python -m fastnn``, the console
    script): a bad setting then ends in one line on stderr, not a traceback."""
    import sys
    argv = getattr(sys, "orig_argv", None) or []
    if sys.argv and sys.argv[0] == "-m":    # python -m <module>: argv[0] while it is found
        return any((a == "-m" and b.split(".")[0] == "fastnn")
                   or a.split(".")[0] == "-mfastnn" for a, b in zip(argv, argv[1:] + [""]))
    return bool(sys.argv) and _os.path.basename(sys.argv[0]) in ("fastnn", "fastnn.exe")


try:
    _load_openmp()
except _VariantError as _e:
    if _run_as_command():
        raise SystemExit(f"fastnn: {_e}") from None
    raise

from ._version import __version__  # noqa: E402
from ._backend import (available_backends, get_backend, get_num_threads,  # noqa: E402
                       set_backend, set_num_threads, use_backend)
from ._random import manual_seed, initial_seed  # noqa: E402
from ._grad import (enable_grad, inference_mode, is_grad_enabled, no_grad,  # noqa: E402
                    set_grad_enabled)
from . import functional  # noqa: E402
from . import nn  # noqa: E402
from .nn.module import PendingCallsWarning  # noqa: E402
from . import optim  # noqa: E402
from . import models  # noqa: E402
from .io import load, save  # noqa: E402

__all__ = ["__version__", "set_backend", "get_backend", "use_backend", "available_backends",
           "set_num_threads", "get_num_threads", "manual_seed", "initial_seed", "functional",
           "nn", "optim", "models", "save", "load", "to_numpy", "to_device", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "inference_mode", "PendingCallsWarning"]


def to_numpy(a):
    """A NumPy array of ``a`` (device arrays are copied to the host)."""
    from .cuda import to_numpy as _t
    return _t(a)


def to_device(a):
    """``a`` on the GPU (cuda backend); NumPy arrays are copied once."""
    from .cuda import to_device as _t
    return _t(a)
