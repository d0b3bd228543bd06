"""Layout family, reference: the device helpers of the layers as backend ops.

Adding, transposing, accumulating and moving arrays between host and device are ops like
any other, so fastnn/nn and fastnn/functional never import fastnn.cuda or ask where an
array lives: they call ``fastnn._backend.placed(a).<op>`` (the backend holding ``a``).
On the host these are NumPy's own compiled loops, so the cpu backend uses this module's
functions as they are (fastnn/cpu lists them among its ops, not its fallbacks); the cuda
backend has kernels (fastnn/cuda/ops/layout.py).

    add(a, b)              a + b, fresh; b's shape a suffix of a's (broadcast over the
                           leading dims, e.g. a (T, D) table added to a (B, T, D) batch)
    accumulate(dst, src)   dst += src in place (same shape and dtype); returns dst
    transpose2d(a)         a.T of a 2-D array, fresh and C-contiguous
    swap_last_two(a)       (A, B, C) -> fresh C-contiguous (A, C, B)
    broadcast_to(a, shape) a broadcast to ``shape``, fresh and C-contiguous (``a`` itself
                           when it already has that shape and is C-contiguous)
    to_host(a)             a NumPy array of ``a`` (host arrays and non-arrays unchanged)
    to_backend(a, dtype)   ``a`` in this backend's memory, C-contiguous, of ``dtype`` (None:
                           its own); the host backends: np.ascontiguousarray
    first_outside(x, lo, hi)  the first element outside [lo, hi] (NaN is inside) as a
                           float, or None; argument checks of the host backends (the cuda
                           backend does not scan: a host sync per call; returns None)
"""
import numpy as np

OPS = ("add", "accumulate", "transpose2d", "swap_last_two", "broadcast_to", "to_host",
       "to_backend", "first_outside")


def _suffix(a, b):
    sa, sb = tuple(a.shape), tuple(b.shape)
    if len(sb) > len(sa) or sa[len(sa) - len(sb):] != sb:
        raise ValueError(f"add: shape {sb} is not a suffix of {sa}")


def add(a, b):
    _suffix(a, b)
    return np.add(a, b)


def accumulate(dst, src):
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"accumulate: shapes differ: {tuple(dst.shape)} vs {tuple(src.shape)}")
    np.add(dst, src, out=dst)
    return dst


def transpose2d(a):
    return np.ascontiguousarray(a.T)


def swap_last_two(a):
    return np.ascontiguousarray(np.swapaxes(a, 1, 2))


def broadcast_to(a, shape):
    shape = tuple(int(s) for s in shape)
    if tuple(a.shape) == shape and a.flags.c_contiguous:
        return a
    return np.ascontiguousarray(np.broadcast_to(a, shape))


def to_host(a):
    return a


def to_backend(a, dtype=None):
    return np.ascontiguousarray(a, dtype=dtype)


def first_outside(x, lo, hi):
    if x.size == 0:
        return None
    out = (x < lo) | (x > hi)
    if not out.any():
        return None
    return float(x[out].reshape(-1)[0])
