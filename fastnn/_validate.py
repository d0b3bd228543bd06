"""Argument checks shared by the functional shell.

Validation happens once, here, before any kernel runs: kernels get C-contiguous,
aligned memory of one float dtype and trust it.  Errors name the argument and say
what was expected.
"""
import numbers

import numpy as np

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def is_device(x):
    """A CUDA device array: anything with __cuda_array_interface__ (numba, CuPy, torch),
    or a numba simulator array (which has copy_to_host but no interface)."""
    return type(x) is not np.ndarray and (hasattr(x, "__cuda_array_interface__")
                                          or hasattr(x, "copy_to_host"))


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


def check_shape(a, shape, name, what=""):
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}{what}, got {tuple(a.shape)}")


def positive_float(v, name, allow_zero=False):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    v = float(v)
    if not (v > 0 or (allow_zero and v == 0)) or v != v:
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {v}")
    return v


def int_arg(v, name, minimum=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def norm_dim(dim, ndim, name="dim"):
    """Normalise a possibly negative axis; ValueError outside [-ndim, ndim)."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__}")
    d = int(dim)
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
