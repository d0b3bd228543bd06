"""Layout family on the GPU: the device helpers of the layers as backend ops (see
fastnn/reference/layout.py).  Host operands are copied to the device once (``_kit.dev``),
so a host array may join a device one; results are fresh device arrays (accumulate works
in place).  add broadcasts ``b`` over ``a``'s leading dims with one grid-stride kernel
(b's flat index is a's modulo b's size)."""
import numpy as np

from .. import _kit
from .._kit import THREADS, cuda, dm, gid, gsz, kernel
from .._runtime import to_device, to_numpy

OPS = ("add", "accumulate", "transpose2d", "swap_last_two", "broadcast_to", "to_host",
       "to_backend", "first_outside")


@_kit.per_dtype
def _kernels(dt):
    @kernel
    def add_bcast(a, b, out, n, nb):
        # out[i] = a[i] + b[i % nb]
        for i in range(gid(), n, gsz()):
            out[i] = a[i] + b[dm(i, nb)[1]]

    return _kit.named(add_bcast=add_bcast)


def add(a, b):
    a, b = _kit.dev(a), _kit.dev(b)
    sa, sb = _kit.shape_of(a), _kit.shape_of(b)
    if len(sb) > len(sa) or sa[len(sa) - len(sb):] != sb:
        raise ValueError(f"add: shape {sb} is not a suffix of {sa}")
    if _kit.dtype_of(a) != _kit.dtype_of(b):
        raise TypeError(f"add: dtypes differ: {_kit.dtype_of(a)} vs {_kit.dtype_of(b)}")
    out = _kit.empty(sa, _kit.dtype_of(a))
    n, nb = _kit.numel(sa), _kit.numel(sb)
    if n:
        _kernels(_kit.dtype_of(a)).add_bcast[_kit.blocks_for(n), THREADS](
            _kit.flat(a), _kit.flat(b), _kit.flat(out), n, nb)
    return out


def accumulate(dst, src):
    host = []
    d = _kit.inplace_target(dst, "dst", host)   # a host dst: copied back below
    _kit.accumulate(d, _kit.dev(src))
    _kit.copy_back(host)
    return dst


def transpose2d(a):
    return _kit.transpose2d(a)


def swap_last_two(a):
    return _kit.swap_last_two(a)


def broadcast_to(a, shape):
    shape = tuple(int(s) for s in shape)
    if type(a) is not np.ndarray and tuple(a.shape) == shape:
        return _kit.dev(a)
    # broadcasting copies are rare (mismatched batch dims, loss weights): through the host
    return to_device(np.ascontiguousarray(np.broadcast_to(to_numpy(a), shape)))


def to_host(a):
    if type(a) is np.ndarray or not (hasattr(a, "__cuda_array_interface__")
                                     or hasattr(a, "copy_to_host")):
        return a
    return to_numpy(a)


def first_outside(x, lo, hi):
    """Device arrays are not scanned (a device-to-host sync per call): None."""
    return None


def to_backend(a, dtype=None):
    if type(a) is np.ndarray:
        return to_device(np.ascontiguousarray(a, dtype=dtype))
    d = _kit.dev(a)
    if dtype is not None and _kit.dtype_of(d) != np.dtype(dtype):
        raise TypeError(f"to_backend: a device array of dtype {_kit.dtype_of(d)}, expected "
                        f"{np.dtype(dtype)}")
    return d
