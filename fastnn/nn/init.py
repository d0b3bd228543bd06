"""Parameter initialisation (torch.nn.init's rules), drawing from fastnn's seeded generator.

The factories (``uniform``, ``normal``, ...) make new arrays for the modules' constructors;
the torch-named in-place initialisers (``xavier_uniform_``, ``kaiming_normal_``,
``trunc_normal_``, ``orthogonal_``, ...) overwrite a Parameter's values, or a float array,
in place and return it, as ``torch.nn.init``'s do -- the usual ``model.apply(init_fn)``
pattern.  Draws come from fastnn's generator (``fastnn.manual_seed``) unless a
``generator`` (a ``numpy.random.Generator``) is given."""
import contextlib
import math
import threading

import numpy as np

from .._random import generator
from .._validate import is_real

__all__ = ["uniform", "normal", "zeros", "ones", "kaiming_uniform_bound", "fan_in_out",
           "skip_init", "calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_",
           "ones_", "zeros_", "eye_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_"]

_skip = threading.local()


@contextlib.contextmanager
def skip_init():
    """Within: random initialisers return zeros and draw nothing from the generator --
    for models whose every parameter is loaded right after construction (from_pretrained):
    drawing 20M+ normals costs seconds and would move the seeded stream."""
    prev = getattr(_skip, "on", False)
    _skip.on = True
    try:
        yield
    finally:
        _skip.on = prev


def _skipping():
    return getattr(_skip, "on", False)


def fan_in_out(shape):
    """torch's _calculate_fan_in_and_fan_out for a weight of ``shape``."""
    if len(shape) < 2:
        raise ValueError("fan in/out needs a weight of at least 2 dimensions")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def kaiming_uniform_bound(fan_in, a=math.sqrt(5)):
    """Bound of torch's kaiming_uniform_(a) (leaky_relu gain): sqrt(6 / ((1 + a^2) fan_in))."""
    gain = math.sqrt(2.0 / (1 + a * a))
    return gain * math.sqrt(3.0 / fan_in) if fan_in > 0 else 0.0


def uniform(shape, low, high, dtype=np.float32):
    if _skipping():
        return np.zeros(shape, dtype=dtype)
    return generator().uniform(low, high, size=shape).astype(dtype)


def normal(shape, std=1.0, mean=0.0, dtype=np.float32):
    if _skipping():
        return np.zeros(shape, dtype=dtype)
    return (generator().standard_normal(size=shape) * std + mean).astype(dtype)


def zeros(shape, dtype=np.float32):
    return np.zeros(shape, dtype=dtype)


def ones(shape, dtype=np.float32):
    return np.ones(shape, dtype=dtype)


# ---------------------------------------------------------------- torch.nn.init, in place
_LINEAR_GAIN = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                "conv_transpose2d", "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity, param=None):
    """torch.nn.init.calculate_gain: the recommended scale for ``nonlinearity``."""
    if nonlinearity in _LINEAR_GAIN or nonlinearity == "identity":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif is_real(param):
            slope = float(param)
        else:
            raise ValueError(f"negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _values(tensor):
    """The array that ``tensor`` (a Parameter or a float array) holds."""
    from .module import Parameter
    a = tensor.data if isinstance(tensor, Parameter) else tensor
    dt = getattr(a, "dtype", None)
    if dt is None or np.dtype(dt).kind != "f" or not hasattr(a, "shape"):
        raise TypeError(f"expected a Parameter or a float array, got {type(tensor).__name__}"
                        + (f" of dtype {dt}" if dt is not None else ""))
    return a


def write_values(tensor, values):
    """Copy ``values`` (a host array of the tensor's shape) into ``tensor`` (a Parameter or
    a float array, on the host or a device) in place; returns ``tensor``.  The modules'
    ``reset_parameters`` write their constructors' draws through this."""
    from .._backend import placed
    a = _values(tensor)
    values = np.asarray(values).astype(a.dtype, copy=False)
    if type(a) is np.ndarray:
        if not a.flags.writeable:
            raise ValueError("the array is read-only")
        np.copyto(a, values)
    else:
        placed(a).copy_into(a, values)
    return tensor


def _gen(generator_):
    if generator_ is None:
        return generator()
    if not isinstance(generator_, np.random.Generator):
        raise TypeError(f"generator must be a numpy.random.Generator or None, got "
                        f"{type(generator_).__name__}")
    return generator_


def _shape(tensor):
    return tuple(int(n) for n in _values(tensor).shape)


def _fans(tensor):
    shape = _shape(tensor)
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than "
                         "2 dimensions")
    return fan_in_out(shape)


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _fans(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with U(a, b).  The random initialisers draw and write nothing inside
    ``skip_init()``."""
    if _skipping():
        return tensor
    return write_values(tensor, _gen(generator).uniform(a, b, size=_shape(tensor)))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with N(mean, std^2)."""
    if _skipping():
        return tensor
    return write_values(tensor, _gen(generator).standard_normal(size=_shape(tensor)) * std + mean)


def _ndtri(p):
    """The standard normal quantile of p in (0, 1): Acklam's rational approximations
    (relative error < 1.2e-9; the tails through sqrt(-2 log p), no cancellation)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
         1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
         6.680131188771972e+01, -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
         -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
         3.754408661907416e+00)
    p = np.asarray(p, np.float64)
    out = np.empty_like(p)
    low = p < 0.02425
    high = p > 1 - 0.02425
    mid = ~(low | high)
    q = p[mid] - 0.5
    r = q * q
    out[mid] = ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
                / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1))
    for sel, sign, pp in ((low, 1.0, p[low]), (high, -1.0, 1 - p[high])):
        t = np.sqrt(-2 * np.log(pp))
        out[sel] = sign * (((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5]) \
            / ((((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1)
    return out


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fill with N(mean, std^2) truncated to [a, b] (a and b are values, not multiples of
    std, as in torch), by inverse-CDF sampling: exact in the far tails too (the interval
    is taken on the lower side of the mean, where the CDF keeps its relative accuracy)."""
    if not a < b:
        raise ValueError(f"trunc_normal_: need a < b, got a={a}, b={b}")
    if not std > 0:
        raise ValueError(f"trunc_normal_: std must be > 0, got {std}")
    if _skipping():
        return tensor
    za, zb = (a - mean) / std, (b - mean) / std
    flip = za + zb > 0
    if flip:
        za, zb = -zb, -za
    lo = 0.5 * math.erfc(-za / math.sqrt(2.0))
    hi = 0.5 * math.erfc(-zb / math.sqrt(2.0))
    u = _gen(generator).uniform(lo, hi, size=_shape(tensor))
    z = _ndtri(np.clip(u, np.finfo(np.float64).tiny, 1 - np.finfo(np.float64).epsneg))
    return write_values(tensor, np.clip(mean + std * (-z if flip else z), a, b))


def constant_(tensor, val):
    """Fill with ``val``."""
    return write_values(tensor, np.full(_shape(tensor), val, np.float64))


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def eye_(tensor):
    """The identity on a 2-D tensor (ones on the diagonal of a rectangular one)."""
    shape = _shape(tensor)
    if len(shape) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return write_values(tensor, np.eye(*shape))


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = _fans(tensor)
    b = gain * math.sqrt(6.0 / float(fan_in + fan_out)) if fan_in + fan_out else 0.0
    return uniform_(tensor, -b, b, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, s^2), s = gain sqrt(2 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = _fans(tensor)
    s = gain * math.sqrt(2.0 / float(fan_in + fan_out)) if fan_in + fan_out else 0.0
    return normal_(tensor, 0.0, s, generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan = _fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-b, b), b = gain sqrt(3 / fan) (He); ``a``: the leaky_relu negative slope."""
    b = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -b, b, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, s^2), s = gain / sqrt(fan) (He)."""
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def orthogonal_(tensor, gain=1.0, generator=None):
    """A (semi-)orthogonal matrix, the tensor seen as (shape[0], rest): the Q of a QR
    factorisation of a normal matrix, signs fixed by R's diagonal, times ``gain``."""
    shape = _shape(tensor)
    if len(shape) < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = shape[0]
    cols = int(np.prod(shape[1:])) if rows else 0
    if rows == 0 or cols == 0 or _skipping():
        return tensor
    flat = _gen(generator).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.where(np.diag(r) < 0, -1.0, 1.0)
    if rows < cols:
        q = q.T
    return write_values(tensor, (q * gain).reshape(shape))
