"""Argument checks shared by the functional shell.

Validation happens once, here, before any kernel runs: kernels get C-contiguous,
aligned memory of one float dtype and trust it.  Errors name the argument and say
what was expected.
"""
import math
import numbers

import numpy as np

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def is_device(x):
    """A CUDA device array: anything with __cuda_array_interface__ (numba, CuPy, torch),
    or a numba simulator array (which has copy_to_host but no interface)."""
    return type(x) is not np.ndarray and (hasattr(x, "__cuda_array_interface__")
                                          or hasattr(x, "copy_to_host"))


def is_array(x):
    """A NumPy array (subclasses too) or a CUDA device array: what an array argument may be."""
    return isinstance(x, np.ndarray) or is_device(x)


def parameter_data(data):
    """A Parameter's values: a device array as it is; anything else a fresh C-contiguous
    float32/float64 host copy (integer and bool data become float32)."""
    if is_device(data):
        return data
    arr = np.array(data, copy=True, order="C")
    if arr.dtype not in (F32, F64):
        if arr.dtype.kind in "iub":
            return arr.astype(np.float32)
        raise TypeError(f"Parameter data must be float32 or float64, got {arr.dtype}")
    return arr


def array_of(x):
    """``x`` as an array where it lives: device arrays as they are, anything else through
    np.asarray (lists, scalars, NumPy subclasses)."""
    return x if is_device(x) else np.asarray(x)


def _type_name(x):
    dt = getattr(x, "dtype", None)
    return f"{type(x).__name__} of dtype {dt}" if dt is not None else type(x).__name__


def _python_host_floats(a, b=None, c=None):
    return 0


def _load_host_floats():
    try:
        from .cpu import shell_module
        return shell_module().host_floats
    except ImportError:
        return _python_host_floats


# host_floats(a, b=None, c=None) -> nonzero when every given array is a C-contiguous,
# aligned, native float32/float64 NumPy array of one dtype: the shells' fast path.
host_floats = _load_host_floats()


def _python_norm_fast_args(x, normalized_shape, weight, bias, eps):
    return -1


def _load_norm_fast_args():
    try:
        from .cpu import shell_module
        return shell_module().norm_fast_args
    except (ImportError, AttributeError):
        return _python_norm_fast_args


# norm_fast_args(x, normalized_shape, weight, bias, eps) -> D >= 0 when F.layer_norm may
# take its fast path (see _shell.pyx), -1 otherwise.
norm_fast_args = _load_norm_fast_args()


def float_array(x, name):
    """``x`` as a C-contiguous, aligned float32/float64 array (device arrays pass through)."""
    if type(x) is np.ndarray:
        dt = x.dtype
        if dt is not F32 and dt is not F64:
            return _float_slow(x, name)
        if not (x.flags.c_contiguous and x.flags.aligned):
            # a copy is C-contiguous and aligned; np.ascontiguousarray would keep an
            # unaligned C-contiguous array as it is and turn a 0-d one into shape (1,)
            x = np.array(x, order="C")
        return x
    if is_device(x):
        dt = np.dtype(x.dtype)
        if dt != F32 and dt != F64:
            raise TypeError(f"{name} must be float32 or float64, got a device array of dtype {dt}")
        return x
    if isinstance(x, np.ndarray):  # subclasses (np.matrix, masked arrays)
        return float_array(np.asarray(x), name)
    raise TypeError(f"{name} must be a float32 or float64 NumPy array, got {_type_name(x)}")


def _float_slow(x, name):
    dt = x.dtype
    if dt.kind == "f" and dt.itemsize in (4, 8):  # non-native byte order
        return np.array(x, dtype=dt.newbyteorder("="), order="C")
    raise TypeError(f"{name} must be a float32 or float64 array, got dtype {dt}")


def same_dtype(x, other, name, xname="input"):
    if other is not None and other.dtype != x.dtype:
        raise TypeError(f"{name} has dtype {other.dtype} but {xname} has dtype {x.dtype}; "
                        f"fastnn does not mix float32 and float64 (cast one of them)")


# ---------------------------------------------------------------- scalar arguments
# Every check of a Python scalar argument lives here, written once.  bool is an int
# subclass in Python, but True is never a meaningful size, slope or probability.

def is_int(v):
    """An integer that is not a bool (Python int, NumPy integer)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_real(v):
    """A real number that is not a bool (int, float, NumPy scalar)."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def real(v, name, finite=False, what="a real number"):
    """``v`` as a float; TypeError unless a real number, ValueError if ``finite`` and not."""
    if not is_real(v):
        raise TypeError(f"{name} must be {what}, got {type(v).__name__}")
    v = float(v)
    if finite and not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


def positive_float(v, name, allow_zero=False):
    """``v`` as a float > 0 (>= 0 with ``allow_zero``); NaN is rejected."""
    v = real(v, name)
    if not (v > 0 or (allow_zero and v == 0)) or v != v:
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {v}")
    return v


def probability(p, name, allow_one=True):
    """``p`` as a float in [0, 1] (torch's rule for dropout), or [0, 1) where a kernel
    divides by 1 - p (``allow_one=False``)."""
    p = real(p, name)
    if allow_one:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {p}")
    elif not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p}")
    return p


def int_arg(v, name, minimum=None, what="an int"):
    """``v`` as an int (not a bool), >= ``minimum`` when given."""
    if not is_int(v):
        raise TypeError(f"{name} must be {what}, got {type(v).__name__}")
    v = int(v)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def bool_arg(v, name, allow_int=False):
    """``v`` as a bool: Python or NumPy bool only (1 and 0 are not flags unless ``allow_int``)."""
    if not (isinstance(v, (bool, np.bool_)) or (allow_int and isinstance(v, numbers.Integral))):
        raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    return bool(v)


def groups_arg(groups):
    """Convolution groups: an int >= 1 (divisibility is checked against the channels)."""
    return int_arg(groups, "groups", minimum=1)


# ---------------------------------------------------------------- sizes and geometry
def pair(v, name, minimum=1):
    """An int or a pair of ints -> (a, b), each >= ``minimum``."""
    if is_int(v):
        t = (int(v), int(v))
    else:
        try:
            t = tuple(v)
        except TypeError:
            raise TypeError(f"{name} must be an int or a pair of ints, got {type(v).__name__}") from None
        if len(t) == 1:
            t = t * 2
        if len(t) != 2 or not all(is_int(a) for a in t):
            raise TypeError(f"{name} must be an int or a pair of ints, got {v!r}")
        t = (int(t[0]), int(t[1]))
    if t[0] < minimum or t[1] < minimum:
        what = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return t


def single(v, name, minimum=1):
    """An int or a 1-sequence of ints -> int >= ``minimum`` (the 1-d layers' arguments)."""
    if not is_int(v):
        try:
            t = tuple(v)
        except TypeError:
            raise TypeError(f"{name} must be an int or a 1-tuple of ints, got {type(v).__name__}") from None
        if len(t) != 1:
            raise TypeError(f"{name} must be an int or a 1-tuple of ints, got {v!r}")
        v = t[0]
    return pair(v, name, minimum)[0]


def conv_padding(padding, kernel, stride, dilation):
    """torch's padding argument -> (top, bottom, left, right).  "same" puts the odd extra
    pixel of an even effective kernel at the bottom/right, as torch does."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"padding='same' is not supported for strided convolutions "
                                 f"(stride={stride})")
            th = dilation[0] * (kernel[0] - 1)
            tw = dilation[1] * (kernel[1] - 1)
            return (th // 2, th - th // 2, tw // 2, tw - tw // 2)
        raise ValueError(f"padding must be an int, a pair of ints, 'same' or 'valid', got {padding!r}")
    ph, pw = pair(padding, "padding", minimum=0)
    return (ph, ph, pw, pw)


def output_size_pair(output_size, in_hw, name="output_size"):
    """torch's adaptive-pool output_size: an int, or a pair whose entries are ints or None
    (None keeps that input dimension) -> (OH, OW)."""
    if is_int(output_size):
        t = (output_size, output_size)
    else:
        try:
            t = tuple(output_size)
        except TypeError:
            raise TypeError(f"{name} must be an int or a pair of ints / None, got "
                            f"{type(output_size).__name__}") from None
        if len(t) != 2:
            raise ValueError(f"{name} must have 2 entries, got {output_size!r}")
    out = []
    for v, n in zip(t, in_hw):
        if v is None:
            out.append(int(n))
            continue
        if not is_int(v):
            raise TypeError(f"{name} entries must be ints or None, got {output_size!r}")
        if v < 0:
            raise ValueError(f"{name} must be non-negative, got {output_size!r}")
        out.append(int(v))
    return tuple(out)


def normalized_shape_arg(ns, name="normalized_shape"):
    """torch's normalized_shape: an int or a non-empty sequence of ints >= 0 -> tuple."""
    if is_int(ns):
        t = (int(ns),)
    else:
        try:
            t = tuple(ns)
        except TypeError:
            raise TypeError(f"{name} must be an int or a sequence of ints, "
                            f"got {type(ns).__name__}") from None
        if not all(is_int(d) for d in t):
            raise TypeError(f"{name} must contain ints, got {ns!r}")
        t = tuple(int(d) for d in t)
    if len(t) == 0:
        raise ValueError(f"{name} must name at least one dimension, got ()")
    if any(d < 0 for d in t):
        raise ValueError(f"{name} must be non-negative, got {t}")
    return t


def norm_dim(dim, ndim, name="dim"):
    """Normalise a possibly negative axis; ValueError outside [-ndim, ndim)."""
    d = int_arg(dim, name)
    lo = -max(ndim, 1)
    hi = max(ndim, 1) - 1
    if d < lo or d > hi:
        raise ValueError(f"{name}={dim} is out of range for an input of {ndim} dimensions "
                         f"(expected in [{lo}, {hi}])")
    return d % max(ndim, 1)


def grad_like(dy, ctx_shape, ctx_dtype, name="grad_output"):
    """Validate an incoming gradient against the forward output's shape and dtype."""
    dy = float_array(dy, name)
    if tuple(dy.shape) != tuple(ctx_shape):
        raise ValueError(f"{name} must have the forward output's shape {tuple(ctx_shape)}, "
                         f"got {tuple(dy.shape)}")
    if dy.dtype != ctx_dtype:
        raise TypeError(f"{name} has dtype {dy.dtype} but the forward output has dtype {ctx_dtype}")
    return dy


def normalized_dims(x, ns):
    """normalized_shape checked against ``x``'s trailing dims -> (ns tuple, their product D)."""
    ns = normalized_shape_arg(ns)
    k = len(ns)
    if x.ndim < k or tuple(x.shape)[x.ndim - k:] != ns:
        raise ValueError(f"input of shape {tuple(x.shape)} does not end in normalized_shape {ns}")
    D = 1
    for d in ns:
        D *= d
    return ns, D


def param_arrays(x, shape, what, *named):
    """Optional parameter arrays ``(name, array)``, each of shape ``shape`` (named ``what``
    in the message) and ``x``'s dtype -> the arrays as float_array gives them (None stays
    None).  All are converted before any shape is checked (a list has no .shape)."""
    arrays = [None if a is None else float_array(a, name) for name, a in named]
    for (name, _), a in zip(named, arrays):
        if a is not None:
            if tuple(a.shape) != shape:
                raise ValueError(f"{name} must have shape {what} = {shape}, got {tuple(a.shape)}")
            same_dtype(x, a, name)
    return arrays


# ---------------------------------------------------------------- indices and enums
I64 = np.dtype(np.int64)
REDUCTIONS = ("none", "mean", "sum")


def index_array(idx, num, name="input"):
    """``idx`` as a C-contiguous int64 array of row numbers in [0, num).

    TypeError for a non-integer dtype, IndexError (naming ``name``) for a value out of range."""
    if is_device(idx):
        dt = np.dtype(idx.dtype)
        if dt.kind not in "iu":
            raise TypeError(f"{name} must be an integer array of indices, got a device array of dtype {dt}")
        from . import to_numpy
        _check_range(to_numpy(idx), num, name)
        return idx
    if not isinstance(idx, np.ndarray):
        if is_int(idx) or isinstance(idx, (list, tuple)):
            idx = np.asarray(idx)
        else:
            raise TypeError(f"{name} must be an integer NumPy array of indices, got {type(idx).__name__}")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array of indices (int32/int64), got dtype {idx.dtype}")
    _check_range(idx, num, name)
    if idx.dtype != I64 or not idx.flags.c_contiguous or not idx.flags.aligned:
        # a copy (aligned, C order), not np.ascontiguousarray: that keeps a misaligned
        # int64 array as it is, and makes a 0-d index (a single token) 1-d
        idx = np.array(idx, dtype=I64, order="C")
    return idx


def _check_range(idx, num, name):
    if idx.size == 0:
        return
    lo, hi = idx.min(), idx.max()
    if lo < 0 or hi >= num:
        bad = int(lo) if lo < 0 else int(hi)
        raise IndexError(f"{name} contains index {bad}, out of range for an embedding table of "
                         f"{num} rows (expected 0 <= index < {num})")


def padding_index(p, num):
    """torch's rule: None, or an int in [-num, num); negative counts from the end."""
    if p is None:
        return None
    p = int_arg(p, "padding_idx")
    if not -num <= p < num:
        raise ValueError(f"padding_idx must be within num_embeddings: expected -{num} <= "
                         f"padding_idx < {num}, got {p}")
    return p + num if p < 0 else p


def reduction(reduction, batchmean=False):
    """A loss's reduction: 'none', 'mean', 'sum' (and 'batchmean' for kl_div)."""
    allowed = REDUCTIONS + (("batchmean",) if batchmean else ())
    if not isinstance(reduction, str) or reduction not in allowed:
        raise ValueError(f"reduction must be one of {allowed}, got {reduction!r}")
    return reduction


def loss_args(ignore_index, reduction_, label_smoothing):
    """cross_entropy's scalar arguments -> (ignore_index, reduction, label_smoothing)."""
    return (int_arg(ignore_index, "ignore_index"), reduction(reduction_),
            probability(label_smoothing, "label_smoothing"))
