"""Layout family on the GPU: the device helpers of the layers as backend ops (see
fastnn/reference/layout.py).  Host operands are copied to the device once (``_kit.dev``),
so a host array may join a device one; results are fresh device arrays (accumulate works
in place).  add broadcasts ``b`` over ``a``'s leading dims with one grid-stride kernel
(b's flat index is a's modulo b's size); split_columns / concat_columns move column
blocks with one strided-copy kernel; scale_ and clamp_ work in place (a host array given
to them is updated through a device copy)."""
import numpy as np

from .. import _kit
from .._kit import THREADS, dm, gid, gsz, kernel
from .._runtime import to_device, to_numpy

OPS = ("add", "accumulate", "transpose2d", "swap_last_two", "broadcast_to", "to_host",
       "to_backend", "first_outside", "split_columns", "concat_columns", "clone", "cast",
       "scale_", "clamp_", "scalar_result", "out_target", "copy_into",
       "zero_")


@_kit.per_dtype
def _kernels(dt):
    @kernel
    def add_bcast(a, b, out, n, nb):
        # out[i] = a[i] + b[i % nb]
        for i in range(gid(), n, gsz()):
            out[i] = a[i] + b[dm(i, nb)[1]]

    @kernel
    def copy_cols(src, dst, n, w, cs, os_, cd, od):
        # rows of w columns: dst[r, od:od+w] = src[r, os_:os_+w] (flat (R, cs) and (R, cd))
        for i in range(gid(), n, gsz()):
            r, c = dm(i, w)
            dst[r * cd + od + c] = src[r * cs + os_ + c]

    @kernel
    def scale(a, c, n):
        for i in range(gid(), n, gsz()):
            a[i] *= c

    @kernel
    def clamp(a, lo, hi, n):
        for i in range(gid(), n, gsz()):
            v = a[i]
            if v < lo:
                a[i] = lo
            elif v > hi:
                a[i] = hi

    return _kit.named(add_bcast=add_bcast, copy_cols=copy_cols, scale=scale, clamp=clamp)


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
    return to_device(np.array(np.broadcast_to(to_numpy(a), shape), order="C"))   # 0-d stays 0-d


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
        return to_device(np.asarray(a, dtype=dtype, order="C"))
    d = _kit.dev(a)
    if dtype is not None and _kit.dtype_of(d) != np.dtype(dtype):
        raise TypeError(f"to_backend: a device array of dtype {_kit.dtype_of(d)}, expected "
                        f"{np.dtype(dtype)}")
    return d


def _copy_cols(src, dst, w, os_, od):
    """Columns os_ .. os_+w of the rows of ``src`` into columns od .. od+w of ``dst`` (both
    C-contiguous device arrays with the same leading dims)."""
    cs, cd = _kit.shape_of(src)[-1], _kit.shape_of(dst)[-1]
    rows = _kit.numel(_kit.shape_of(src)[:-1])
    n = rows * w
    if n:
        _kernels(_kit.dtype_of(src)).copy_cols[_kit.blocks_for(n), THREADS](
            _kit.flat(src), _kit.flat(dst), n, w, cs, os_, cd, od)


def split_columns(a, widths):
    a = _kit.dev(a)
    shape = _kit.shape_of(a)
    if sum(int(w) for w in widths) != shape[-1]:
        raise ValueError(f"split_columns: widths {tuple(widths)} do not cover {shape[-1]} columns")
    out, at = [], 0
    for w in widths:
        w = int(w)
        b = _kit.empty(shape[:-1] + (w,), _kit.dtype_of(a))
        _copy_cols(a, b, w, at, 0)
        out.append(b)
        at += w
    return tuple(out)


def concat_columns(blocks):
    blocks = [_kit.dev(b) for b in blocks]
    lead = _kit.shape_of(blocks[0])[:-1]
    dt = _kit.dtype_of(blocks[0])
    for b in blocks:
        if _kit.shape_of(b)[:-1] != lead or _kit.dtype_of(b) != dt:
            raise ValueError("concat_columns: blocks differ in leading shape or dtype")
    widths = [_kit.shape_of(b)[-1] for b in blocks]
    out = _kit.empty(lead + (sum(widths),), dt)
    at = 0
    for b, w in zip(blocks, widths):
        _copy_cols(b, out, w, 0, at)
        at += w
    return out


def clone(a):
    return _kit.copy(_kit.dev(a))


def cast(a, dtype):
    """Through the host: dtype changes of a device array are rare (a loss weight given in
    another dtype than the input's)."""
    h = to_numpy(a) if type(a) is not np.ndarray else a
    return to_device(np.asarray(h, dtype=dtype, order="C"))


def _in_place(a, launch):
    host = []
    d = _kit.inplace_target(a, "a", host)
    n = _kit.numel(_kit.shape_of(d))
    if n:
        launch(_kernels(_kit.dtype_of(d)), _kit.flat(d), n)
    _kit.copy_back(host)
    return a


def scale_(a, c):
    return _in_place(a, lambda ks, f, n: ks.scale[_kit.blocks_for(n), THREADS](
        f, _kit.dtype_of(f).type(c), n))


def clamp_(a, lo, hi):
    return _in_place(a, lambda ks, f, n: ks.clamp[_kit.blocks_for(n), THREADS](
        f, _kit.dtype_of(f).type(lo), _kit.dtype_of(f).type(hi), n))


def scalar_result(a):
    """The 0-d device array itself: reading it would sync the device per call."""
    return a


def out_target(out, x):
    """A device ``out``: written directly by the kernel (shape and dtype checked)."""
    if tuple(out.shape) != tuple(x.shape):
        raise ValueError(f"out must have the input's shape {tuple(x.shape)}, got {tuple(out.shape)}")
    if np.dtype(out.dtype) != np.dtype(x.dtype):
        raise TypeError(f"out has dtype {out.dtype} but the input has dtype {x.dtype}")
    return out


def copy_into(dst, src):
    host = []
    d = _kit.inplace_target(dst, "dst", host)
    s = _kit.dev(src)
    if _kit.shape_of(d) != _kit.shape_of(s):
        raise ValueError(f"copy_into: shapes differ: {_kit.shape_of(d)} vs {_kit.shape_of(s)}")
    n = _kit.numel(_kit.shape_of(d))
    if n:
        _copy_cols(_kit.reshape(s, (1, n)), _kit.reshape(d, (1, n)), n, 0, 0)
    _kit.copy_back(host)
    return dst


def zero_(a):
    return _in_place(a, lambda ks, f, n: _kit.fill(f, 0))
