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
                           its own; 0-d arrays stay 0-d); the host backends: np.asarray(order='C')
    first_outside(x, lo, hi)  the first element outside [lo, hi] (NaN is inside) as a
                           float, or None; argument checks of the host backends (the cuda
                           backend does not scan: a host sync per call; returns None)
    split_columns(a, widths)  the column blocks of ``a``'s last axis, widths in order
                           (summing to its size): views on the host (a kernel reads them in
                           place), fresh C-contiguous arrays on the device
    concat_columns(blocks) the blocks joined along the last axis, fresh and C-contiguous
    clone(a)               a fresh C-contiguous copy of ``a`` in the same memory
    cast(a, dtype)         a fresh copy of ``a`` converted to ``dtype``
    scale_(a, c)           a *= c in place (inf * 0 gives NaN); returns a
    clamp_(a, lo, hi)      a clipped to [lo, hi] in place (NaN stays NaN); returns a
    scalar_result(a)       a reduced (0-d) result as a caller receives it: a Python float on
                           the host; on the device the 0-d device array (reading it syncs)
    out_target(out, x)     checks ``out`` as the destination of an elementwise result of x's
                           shape and dtype -> what the kernel should write: ``x`` itself when
                           out views exactly x's elements, ``out`` when the kernel can write
                           it directly, or None (the kernel writes a fresh array, then
                           ``copy_into(out, y)``)
    copy_into(dst, src)    dst[...] = src; returns dst
    zero_(a)               a filled with zeros in place; returns a
"""
import numpy as np

OPS = ("add", "accumulate", "transpose2d", "swap_last_two", "broadcast_to", "to_host",
       "to_backend", "first_outside", "split_columns", "concat_columns", "clone", "cast",
       "scale_", "clamp_", "scalar_result", "out_target", "copy_into",
       "zero_")


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
    return np.asarray(a, dtype=dtype, order="C")   # (np.ascontiguousarray makes 0-d 1-d)


def first_outside(x, lo, hi):
    if x.size == 0:
        return None
    out = (x < lo) | (x > hi)
    if not out.any():
        return None
    return float(x[out].reshape(-1)[0])


def split_columns(a, widths):
    out, at = [], 0
    for w in widths:
        out.append(a[..., at:at + w])
        at += w
    if at != a.shape[-1]:
        raise ValueError(f"split_columns: widths {tuple(widths)} do not cover {a.shape[-1]} columns")
    return tuple(out)


def concat_columns(blocks):
    return np.concatenate(blocks, axis=-1)


def clone(a):
    return np.array(a, order="C", copy=True)


def cast(a, dtype):
    return np.asarray(a).astype(dtype)


def scale_(a, c):
    with np.errstate(invalid="ignore"):   # inf * 0 -> nan, as torch gives
        a *= a.dtype.type(c)
    return a


def clamp_(a, lo, hi):
    np.clip(a, lo, hi, out=a)
    return a


def scalar_result(a):
    return float(a)


def _same_memory(a, b):
    """a and b view exactly the same elements (same start, shape and strides)."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides)


def out_target(out, x):
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a NumPy array, got {type(out).__name__}")
    if out.dtype.kind != "f" or out.dtype.itemsize not in (4, 8):
        raise TypeError(f"out must be a float32 or float64 array, got dtype {out.dtype}")
    if out.shape != x.shape:
        raise ValueError(f"out must have the input's shape {x.shape}, got {out.shape}")
    if np.dtype(out.dtype.newbyteorder("=")) != x.dtype:
        raise TypeError(f"out has dtype {out.dtype} but the input has dtype {x.dtype}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    direct = out.flags.c_contiguous and out.flags.aligned and out.dtype.isnative
    kout = out
    if np.may_share_memory(out, x):
        if not _same_memory(out, x):
            raise ValueError("out overlaps the input without being the same elements "
                             "(only exact in-place aliasing is supported)")
        kout = x          # exact aliasing: the kernel sees out is x
    return kout if direct else None


def copy_into(dst, src):
    np.copyto(dst, src)
    return dst


def zero_(a):
    a.fill(0)
    return a
