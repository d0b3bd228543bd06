"""The one module that imports numba: device arrays, conversions, backend assembly.

Everything else in fastnn.cuda takes ``cuda`` (and the numba scalar types) from here,
so the import of numba happens in exactly one place and only when the cuda backend is
first used.
"""
import numpy as np
import numba
from numba import cuda  # noqa: F401  (the single numba import of fastnn)
from numba import int32, uint32  # noqa: F401  (the 32-bit index types of the kernels)

from .._backend import Backend, collect_ops

#: True under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1 before numba's import).
SIM = bool(numba.config.ENABLE_CUDASIM)

if SIM:
    import sys as _sys
    import threading as _threading

    # On a GPU a device array's .shape is a plain tuple; the simulator's is a FakeShape
    # that refuses negative indices (x.shape[k] with k < 0), which would make host code that runs
    # on a GPU fail only under the simulator.  Give host code the GPU's behaviour (the
    # kernels never index shapes from the end: tests/test_cuda.py checks the source).
    from numba.cuda.simulator.cudadrv import devicearray as _sim_devicearray
    _sim_devicearray.FakeCUDAArray.shape = property(lambda self: tuple(self._ary.shape))

    # The simulator's cuda.shared.array looks the array up in a per-launch dict and,
    # when it is missing, creates and stores it -- unlocked.  All threads of the first
    # block reach it at once; a thread switch between the lookup and the store (numpy's
    # allocation can let one happen) gives two threads two different "shared" arrays,
    # one of them uninitialised, and the block reduction reads garbage: seen as a rare
    # wrong element 0 of a row sum (later blocks reuse the stored array).  On a GPU
    # there is one array per block; here the lookup-or-create is made atomic.
    from numba.cuda.simulator import kernelapi as _sim_kernelapi
    _shared_lock = _threading.Lock()
    _shared_array = _sim_kernelapi.FakeCUDAShared.array

    def _locked_shared_array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:   # dynamic shared memory; or the error
            return _shared_array(self, shape, dtype, alignment)
        from numba.core import types as _types
        from numba.np import numpy_support as _ns
        if isinstance(dtype, _types.Type):
            dtype = _ns.as_dtype(dtype)
        caller = _sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)   # the simulator's own key
        with _shared_lock:
            res = self._allocations.get(key)
            if res is None:
                res = _sim_kernelapi.np.empty(shape, dtype)
                self._allocations[key] = res
        return res

    _sim_kernelapi.FakeCUDAShared.array = _locked_shared_array

    # When one simulated thread raises, the simulator's BlockManager flags the block's
    # other threads to abort and re-raises at once, without waiting for them.  Those
    # threads run on until their next syncthreads (or to the end) and, while they do,
    # keep the kernel module's `cuda` global swapped to their block's fake module
    # (the swap is reference-counted): the next launch then gets the stale module --
    # its blockDim and its shared arrays, still being written by the leftovers.  Here
    # the failing block's threads are joined before the error goes on, so a launch
    # never overlaps the remains of the previous one (as on a GPU).
    from numba.cuda.simulator import kernel as _sim_kernel
    _block_run = _sim_kernel.BlockManager.run

    def _block_run_joined(self, grid_point, *args):
        before = set(_threading.enumerate())
        try:
            return _block_run(self, grid_point, *args)
        except BaseException:
            for t in set(_threading.enumerate()) - before:
                if isinstance(t, _sim_kernel.BlockThread):
                    t.join(timeout=60)
            raise

    _sim_kernel.BlockManager.run = _block_run_joined

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def numba_type(dtype):
    """The numba scalar type of a NumPy dtype (for cuda.shared/local.array)."""
    return numba.from_dtype(np.dtype(dtype))


def is_device_array(a):
    return type(a) is not np.ndarray and (hasattr(a, "copy_to_host")
                                          or hasattr(a, "__cuda_array_interface__"))


def as_device(a):
    """A numba device array viewing ``a`` (anything with __cuda_array_interface__), no copy."""
    if hasattr(a, "copy_to_host"):   # numba device array (or the simulator's)
        return a
    if hasattr(a, "__cuda_array_interface__"):
        return cuda.as_cuda_array(a)
    raise TypeError(f"expected a device array, got {type(a).__name__}")


def _from_dlpack(a):
    """A device array from a DLPack-only CUDA tensor (e.g. JAX), through CuPy (zero copy).
    None when ``a`` is not a CUDA DLPack producer."""
    dev_fn = getattr(a, "__dlpack_device__", None)
    if dev_fn is None or not hasattr(a, "__dlpack__"):
        return None
    try:
        kind = int(dev_fn()[0])
    except Exception:
        return None
    if kind not in (2, 3):   # kDLCUDA, kDLCUDAHost
        return None
    try:
        import cupy
    except ImportError:
        raise TypeError(f"{type(a).__name__} is a CUDA DLPack tensor without "
                        f"__cuda_array_interface__; reading it needs CuPy "
                        f"(pip install cupy-cuda12x)") from None
    return cuda.as_cuda_array(cupy.from_dlpack(a))


def to_device(a):
    if type(a) is np.ndarray:
        return cuda.to_device(np.asarray(a, order="C"))  # not ascontiguousarray: 0-d -> (1,)
    if is_device_array(a):
        return as_device(a)
    d = _from_dlpack(a)
    if d is not None:
        return d
    return cuda.to_device(np.asarray(a, order="C"))


def to_numpy(a):
    if type(a) is np.ndarray:
        return a
    return as_device(a).copy_to_host()


def accumulate(dst, src):
    from . import _kit
    _kit.accumulate(as_device(dst), _kit.dev(src))


def make_backend():
    import fastnn.cuda.ops as pkg
    from .._backend import backend
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
