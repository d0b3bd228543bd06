"""Activation family, reference: elementwise activations, forward and backward.

Every forward takes an ``out`` argument: None (a fresh result) or a C-contiguous array
of the input's shape and dtype to write into, which may be the input itself (in-place).
What a forward saves for its backward stays valid when ``out`` is the input: ops whose
backward needs the input then keep a copy of it.  Formulas follow PyTorch's, including
the derivative at the kinks (ReLU'(0) = 0) and how NaN / inf propagate; they are
evaluated in float64 and the result cast to the input's dtype.
"""
import math

import numpy as np

from .._random import philox_uniform
from ._util import cast, f64

OPS = ("relu", "relu_backward",
       "leaky_relu", "leaky_relu_backward",
       "prelu", "prelu_backward",
       "rrelu", "rrelu_backward",
       "elu", "elu_backward",
       "gelu", "gelu_backward",
       "silu", "silu_backward",
       "softplus", "softplus_backward",
       "sigmoid", "sigmoid_backward",
       "tanh", "tanh_backward",
       "hardtanh", "hardtanh_backward",
       "hardsigmoid", "hardsigmoid_backward",
       "hardswish", "hardswish_backward",
       "mish", "mish_backward",
       "neg")

_erf = np.vectorize(math.erf, otypes=[np.float64])
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


def erf(z):
    """erf in float64 (scipy.special.erf where scipy is there; math.erf otherwise)."""
    try:
        from scipy.special import erf as sp_erf
    except ImportError:  # pragma: no cover
        return _erf(z)
    return sp_erf(z)


def _emit(y, x, out):
    """The float64 result ``y`` in ``x``'s dtype, written into ``out`` when given."""
    if out is None:
        return cast(y, x)
    out[...] = y
    return out


def _keep_input(x, out):
    """The input as backward needs it: a copy when ``out`` is about to overwrite it."""
    return x.copy() if out is x else x


def _errstate():
    return np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore")


def _sigmoid(v):
    """1 / (1 + exp(-v)), without overflow warnings (exp(+large) -> inf -> 0)."""
    with _errstate():
        return 1.0 / (1.0 + np.exp(-v))


# ---------------------------------------------------------------- relu
def relu(x, out):
    v = f64(x)
    y = _emit(np.where(v < 0, 0.0, v), x, out)
    return y, y


def relu_backward(dy, saved):
    y = saved                       # torch's threshold_backward on the result: y <= 0 -> 0
    return cast(np.where(f64(y) <= 0, 0.0, f64(dy)), y)


# ---------------------------------------------------------------- leaky_relu
def leaky_relu(x, negative_slope, out):
    v = f64(x)
    # from the output when the slope keeps signs (slope >= 0): y > 0 exactly where x > 0
    src = None if negative_slope >= 0 else _keep_input(x, out)
    with _errstate():
        y = _emit(np.where(v > 0, v, v * negative_slope), x, out)
    return y, (y if src is None else src, negative_slope)


def leaky_relu_backward(dy, saved):
    src, slope = saved
    g = f64(dy)
    return cast(np.where(f64(src) > 0, g, g * slope), src)


# ---------------------------------------------------------------- prelu
def _prelu_view(x, weight):
    """(outer, C, inner) view shape for weight broadcast on dim 1 (C = 1 for one weight)."""
    c = weight.size
    if c == 1:
        return (1, 1, x.size)
    return (x.shape[0], c, int(np.prod(x.shape[2:], dtype=np.int64)))


def prelu(x, weight):
    v = f64(x).reshape(_prelu_view(x, weight))
    w = f64(weight).reshape(1, -1, 1)
    with _errstate():
        y = np.where(v > 0, v, w * v)
    return cast(y.reshape(x.shape), x), (x, weight)


def prelu_backward(dy, saved):
    x, weight = saved
    shp = _prelu_view(x, weight)
    v = f64(x).reshape(shp)
    g = f64(dy).reshape(shp)
    w = f64(weight).reshape(1, -1, 1)
    with _errstate():
        dx = np.where(v > 0, g, w * g)
        dw = np.where(v > 0, 0.0, v * g).sum(axis=(0, 2))
    return cast(dx.reshape(x.shape), x), cast(dw.reshape(weight.shape), weight)


# ---------------------------------------------------------------- rrelu
def rrelu_slopes(n, lower, upper, seed, offset):
    """Slope of element i (flat index) of a training call: lower + (upper - lower) * u_i,
    u_i the Philox uniform of (seed, offset, i); the same numbers on every backend."""
    return lower + (upper - lower) * philox_uniform(n, seed, offset)


def rrelu(x, lower, upper, training, seed, offset, out):
    """Training: x for x > 0, else slope_i * x with slope_i ~ U(lower, upper) (saved);
    eval: leaky_relu with slope (lower + upper) / 2.  seed/offset unused in eval."""
    if not training:
        return leaky_relu(x, (lower + upper) / 2.0, out)
    v = f64(x)
    r = rrelu_slopes(x.size, lower, upper, seed, offset).reshape(x.shape)
    noise = np.where(v <= 0, r, 1.0)           # torch: x <= 0 draws the slope
    with _errstate():
        y = _emit(v * noise, x, out)
    return y, cast(noise, x)


def rrelu_backward(dy, saved):
    if isinstance(saved, tuple):               # eval mode: the leaky_relu saved state
        return leaky_relu_backward(dy, saved)
    noise = saved
    with _errstate():
        return cast(f64(dy) * f64(noise), noise)


# ---------------------------------------------------------------- elu / selu / celu
def _elu_from_output(x, out, alpha, scale, input_scale):
    """Backward from the output only in place (the input is gone), as torch: from the
    input it keeps its relative accuracy in the far negative tail, where y + alpha
    cancels.  In place needs y <= 0 exactly where x <= 0 (the shell checks)."""
    return out is x and alpha * scale * input_scale >= 0 and scale > 0


def elu(x, alpha, scale, input_scale, out):
    """torch's elu kernel: x > 0 ? scale * x : scale * alpha * expm1(x * input_scale).
    SELU and CELU are this with their constants."""
    v = f64(x)
    from_out = _elu_from_output(x, out, alpha, scale, input_scale)
    src = None if from_out else _keep_input(x, out)
    with _errstate():
        y = np.where(v > 0, scale * v, scale * alpha * np.expm1(v * input_scale))
    y = _emit(y, x, out)
    return y, (y if from_out else src, from_out, alpha, scale, input_scale)


def elu_backward(dy, saved):
    src, from_out, alpha, scale, input_scale = saved
    g = f64(dy)
    s = f64(src)
    with _errstate():
        if from_out:
            neg = g * input_scale * (s + alpha * scale)
        else:
            neg = g * input_scale * alpha * scale * np.exp(s * input_scale)
        return cast(np.where(s > 0, g * scale, neg), src)    # NaN takes the NaN branch


# ---------------------------------------------------------------- gelu
def gelu(x, approximate, out):
    v = f64(x)
    with _errstate():
        if approximate == "tanh":
            y = 0.5 * v * (1.0 + np.tanh(_SQRT_2_OVER_PI * (v + _GELU_C * v ** 3)))
        else:
            y = 0.5 * v * (1.0 + erf(v / math.sqrt(2.0)))
    saved = (_keep_input(x, out), approximate == "tanh")
    return _emit(y, x, out), saved


def gelu_backward(dy, saved):
    x, approx_tanh = saved
    v, g = f64(x), f64(dy)
    with _errstate():
        if approx_tanh:
            t = np.tanh(_SQRT_2_OVER_PI * (v + _GELU_C * v ** 3))
            d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * _GELU_C * v * v)
        else:
            d = 0.5 * (1.0 + erf(v / math.sqrt(2.0))) + v * np.exp(-0.5 * v * v) / math.sqrt(2 * math.pi)
        return cast(g * d, x)


# ---------------------------------------------------------------- silu
def silu(x, out):
    v = f64(x)
    with _errstate():
        y = v / (1.0 + np.exp(-v))
    saved = _keep_input(x, out)
    return _emit(y, x, out), saved


def silu_backward(dy, saved):
    x = saved
    v = f64(x)
    s = _sigmoid(v)
    with _errstate():
        return cast(f64(dy) * s * (1.0 + v * (1.0 - s)), x)


# ---------------------------------------------------------------- softplus
def softplus(x, beta, threshold, out):
    """x * beta > threshold ? x : log1p(exp(beta * x)) / beta (computed without overflow)."""
    v = f64(x)
    bx = v * beta
    with _errstate():
        sp = (np.maximum(bx, 0.0) + np.log1p(np.exp(-np.abs(bx)))) / beta
        y = np.where(bx > threshold, v, sp)
    saved = (_keep_input(x, out), beta, threshold)
    return _emit(y, x, out), saved


def softplus_backward(dy, saved):
    x, beta, threshold = saved
    v, g = f64(x), f64(dy)
    bx = v * beta
    with _errstate():
        return cast(np.where(bx > threshold, g, g * _sigmoid(bx)), x)


# ---------------------------------------------------------------- sigmoid / tanh
def sigmoid(x, out):
    y = _emit(_sigmoid(f64(x)), x, out)
    return y, y


def sigmoid_backward(dy, saved):
    y = f64(saved)
    return cast(f64(dy) * y * (1.0 - y), saved)


def tanh(x, out):
    y = _emit(np.tanh(f64(x)), x, out)
    return y, y


def tanh_backward(dy, saved):
    y = f64(saved)
    return cast(f64(dy) * (1.0 - y * y), saved)


# ---------------------------------------------------------------- hardtanh / hardsigmoid / hardswish
def hardtanh(x, min_val, max_val, out):
    """min(max(x, min_val), max_val), NaN passing (torch's clamp); saved = (y, min_val,
    max_val): y is at a bound exactly where x is at or past it, so in place works."""
    v = f64(x)
    lo, hi = (float(x.dtype.type(b)) for b in (min_val, max_val))   # the bounds in x's dtype
    y = _emit(np.where(v < lo, lo, np.where(v > hi, hi, v)), x, out)
    return y, (y, min_val, max_val)


def hardtanh_backward(dy, saved):
    """dy strictly inside (min_val, max_val), 0 at and past the bounds and for NaN (torch's
    test)."""
    y, lo, hi = saved
    v = f64(y)
    lo, hi = (float(y.dtype.type(b)) for b in (lo, hi))   # the bounds y was clamped to
    with _errstate():
        return cast(np.where((v > lo) & (v < hi), f64(dy), 0.0), y)


def hardsigmoid(x, out):
    """min(max(x + 3, 0), 6) / 6."""
    v = f64(x) + 3.0
    y = np.where(v < 0.0, 0.0, np.where(v > 6.0, 6.0, v)) / 6.0
    saved = _keep_input(x, out)
    return _emit(y, x, out), saved


def hardsigmoid_backward(dy, saved):
    """dy / 6 inside (-3, 3), else 0 (NaN: 0), as torch."""
    v = f64(saved)
    with _errstate():
        return cast(np.where((v > -3.0) & (v < 3.0), f64(dy) / 6.0, 0.0), saved)


def hardswish(x, out):
    """x min(max(x + 3, 0), 6) / 6."""
    v = f64(x)
    r = v + 3.0
    with _errstate():
        y = v * np.where(r < 0.0, 0.0, np.where(r > 6.0, 6.0, r)) / 6.0
    saved = _keep_input(x, out)
    return _emit(y, x, out), saved


def hardswish_backward(dy, saved):
    """0 at and below -3, dy (x / 3 + 1/2) inside, dy at and above 3: torch's vector
    kernel's tests (a NaN input gives NaN)."""
    v, g = f64(saved), f64(dy)
    with _errstate():
        return cast(np.where(v <= -3.0, 0.0, np.where(v >= 3.0, g, g * (v / 3.0 + 0.5))), saved)


# ---------------------------------------------------------------- mish
def mish(x, out):
    """x tanh(softplus(x)), softplus(x) = log1p(exp(x)) (torch's formula)."""
    v = f64(x)
    with _errstate():
        y = v * np.tanh(np.log1p(np.exp(v)))
    saved = _keep_input(x, out)
    return _emit(y, x, out), saved


def mish_backward(dy, saved):
    """dy (t + x sigmoid(x) (1 - t^2)), t = tanh(softplus(x)) (torch's; +inf gives NaN)."""
    v = f64(saved)
    with _errstate():
        t = np.tanh(np.log1p(np.exp(v)))
        return cast(f64(dy) * (t + v * _sigmoid(v) * (1.0 - t * t)), saved)


# ---------------------------------------------------------------- neg (softmin's helper)
def neg(x, out):
    """-x (inference-only: returns just the result).  Softmin is softmax(-x)."""
    return _emit(-f64(x), x, out)
