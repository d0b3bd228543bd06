"""Activation family: elementwise activations (and softmin on the softmax kernels).

Each op has the three forms of the functional shell (``op``, ``op_fwd``, ``op_bwd``).
Unary ops take ``out=`` (write the result there; it may be the input itself) and,
where torch has it, ``inplace=True`` (the result overwrites the input, which is
returned).  Backward through an in-place forward works: each backend saves what its
backward starts from and an in-place write cannot spoil (the compiled cpu kernels: a bit
mask of where the gradient passes for relu, leaky_relu, hardtanh, relu6 and hardsigmoid;
the output for sigmoid, tanh, and elu/selu/celu in place; a copy of the input otherwise).
"""


from .._backend import dispatch, host_backend, placed
from .._random import next_offset
from .._validate import bool_arg, float_array, host_floats, norm_dim, real, same_dtype
from ._core import grad_in, make_ctx

__all__ = [
    "relu", "relu_fwd", "relu_bwd",
    "leaky_relu", "leaky_relu_fwd", "leaky_relu_bwd",
    "prelu", "prelu_fwd", "prelu_bwd",
    "rrelu", "rrelu_fwd", "rrelu_bwd",
    "elu", "elu_fwd", "elu_bwd",
    "selu", "selu_fwd", "selu_bwd",
    "celu", "celu_fwd", "celu_bwd",
    "gelu", "gelu_fwd", "gelu_bwd",
    "silu", "silu_fwd", "silu_bwd",
    "softplus", "softplus_fwd", "softplus_bwd",
    "sigmoid", "sigmoid_fwd", "sigmoid_bwd",
    "tanh", "tanh_fwd", "tanh_bwd",
    "hardtanh", "hardtanh_fwd", "hardtanh_bwd",
    "relu6", "relu6_fwd", "relu6_bwd",
    "hardsigmoid", "hardsigmoid_fwd", "hardsigmoid_bwd",
    "hardswish", "hardswish_fwd", "hardswish_bwd",
    "mish", "mish_fwd", "mish_bwd",
    "softmin", "softmin_fwd", "softmin_bwd",
]

# torch's SELU constants (torch/csrc/.../Activation.cpp)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _launch(kernel_name, x, args, out, inplace):
    """Validate, run ``be.<kernel_name>(x, *args, out)`` -> (result, backend, saved).

    The kernel gets C-contiguous memory; an ``out`` (or in-place input) that is not
    contiguous gets the result copied in afterwards (``out_target`` / ``copy_into``, the
    layout ops of the memory holding ``out``)."""
    if out is None and inplace is False and host_floats(x):
        # the hot path (a new output, a contiguous native float array, a host backend):
        # one compiled check instead of float_array + bool_arg + dispatch -- small calls
        be = host_backend()
        if be is not None:
            y, saved = getattr(be, kernel_name)(x, *args, None)
            return y, be, saved
    src = x
    x = float_array(x, "input")
    if bool_arg(inplace, "inplace"):
        if out is not None:
            raise ValueError("pass either out= or inplace=True, not both")
        out = src
    if out is None:
        be = dispatch(x)
        y, saved = getattr(be, kernel_name)(x, *args, None)
        return y, be, saved
    be = dispatch(x, out)
    lay = placed(out)
    kout = lay.out_target(out, x)
    if kout is not None:
        _, saved = getattr(be, kernel_name)(x, *args, kout)
    else:
        y, saved = getattr(be, kernel_name)(x, *args, None)
        lay.copy_into(out, y)
    return out, be, saved


def _fwd(kernel_name, x, args, out, inplace):
    y, be, saved = _launch(kernel_name, x, args, out, inplace)
    return y, make_ctx(be, saved, y)


def _bwd(kernel_name, ctx, dy):
    be, saved, dy = grad_in(ctx, dy)
    return getattr(be, kernel_name)(dy, saved)


# ---------------------------------------------------------------- relu
def relu_fwd(x, inplace=False, out=None):
    return _fwd("relu", x, (), out, inplace)


def relu_bwd(ctx, dy):
    return _bwd("relu_backward", ctx, dy)


def relu(x, inplace=False, out=None):
    """max(x, 0) (NaN propagates)."""
    return relu_fwd(x, inplace, out)[0]


# ---------------------------------------------------------------- leaky_relu
def _leaky_args(negative_slope, inplace):
    s = real(negative_slope, "negative_slope", finite=True)
    if inplace and s < 0:
        raise ValueError(f"in-place leaky_relu needs negative_slope >= 0 (got {s}): its backward "
                         f"starts from the output, which a negative slope makes ambiguous; "
                         f"use inplace=False")
    return (s,)


def leaky_relu_fwd(x, negative_slope=0.01, inplace=False, out=None):
    return _fwd("leaky_relu", x, _leaky_args(negative_slope, inplace), out, inplace)


def leaky_relu_bwd(ctx, dy):
    return _bwd("leaky_relu_backward", ctx, dy)


def leaky_relu(x, negative_slope=0.01, inplace=False, out=None):
    """x for x > 0, negative_slope * x otherwise."""
    return leaky_relu_fwd(x, negative_slope, inplace, out)[0]


# ---------------------------------------------------------------- prelu
def prelu_fwd(x, weight):
    x = float_array(x, "input")
    weight = float_array(weight, "weight")
    same_dtype(x, weight, "weight")
    if weight.ndim > 1:
        raise ValueError(f"weight must be 1-D (num_parameters,), got shape {tuple(weight.shape)}")
    channels = x.shape[1] if x.ndim >= 2 else 1
    if weight.size not in (1, channels):
        raise ValueError(f"weight must have 1 or {channels} elements (the input's channel dim 1 "
                         f"of shape {tuple(x.shape)}), got shape {tuple(weight.shape)}")
    be = dispatch(x, weight)
    y, saved = be.prelu(x, weight)
    return y, make_ctx(be, saved, y)


def prelu_bwd(ctx, dy):
    """-> (d_input, d_weight)."""
    return _bwd("prelu_backward", ctx, dy)


def prelu(x, weight):
    """x for x > 0, weight[c] * x otherwise; weight (1 or C values) broadcast on dim 1."""
    return prelu_fwd(x, weight)[0]


# ---------------------------------------------------------------- rrelu
def _rrelu_args(lower, upper, training):
    lo = real(lower, "lower", finite=True)
    hi = real(upper, "upper", finite=True)
    if lo > hi:
        raise ValueError(f"rrelu: lower ({lo}) must be <= upper ({hi})")
    training = bool_arg(training, "training")
    seed, offset = next_offset() if training else (0, 0)
    return lo, hi, training, seed, offset


def rrelu_fwd(x, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False, out=None):
    args = _rrelu_args(lower, upper, training)
    if not args[2] and inplace and (args[0] + args[1]) < 0:
        raise ValueError("in-place rrelu in eval mode needs lower + upper >= 0")
    return _fwd("rrelu", x, args, out, inplace)


def rrelu_bwd(ctx, dy):
    return _bwd("rrelu_backward", ctx, dy)


def rrelu(x, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False, out=None):
    """Randomized leaky ReLU: slopes ~ U(lower, upper) per element when training
    (counter-based, fastnn.manual_seed), the fixed slope (lower + upper) / 2 otherwise."""
    return rrelu_fwd(x, lower, upper, training, inplace, out)[0]


# ---------------------------------------------------------------- elu / selu / celu
def _elu_check_inplace(alpha, scale, input_scale, inplace):
    if inplace and not (alpha * scale * input_scale >= 0 and scale > 0):
        raise ValueError(f"in-place elu needs alpha >= 0 (got {alpha}): its backward starts from "
                         f"the output; use inplace=False")


def elu_fwd(x, alpha=1.0, inplace=False, out=None):
    a = real(alpha, "alpha", finite=True)
    _elu_check_inplace(a, 1.0, 1.0, inplace)
    return _fwd("elu", x, (a, 1.0, 1.0), out, inplace)


def elu_bwd(ctx, dy):
    return _bwd("elu_backward", ctx, dy)


def elu(x, alpha=1.0, inplace=False, out=None):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    return elu_fwd(x, alpha, inplace, out)[0]


def selu_fwd(x, inplace=False, out=None):
    return _fwd("elu", x, (SELU_ALPHA, SELU_SCALE, 1.0), out, inplace)


selu_bwd = elu_bwd


def selu(x, inplace=False, out=None):
    """scale * elu(x, alpha) with torch's constants (alpha 1.6732..., scale 1.0507...)."""
    return selu_fwd(x, inplace, out)[0]


def celu_fwd(x, alpha=1.0, inplace=False, out=None):
    a = real(alpha, "alpha", finite=True)
    if a == 0:
        raise ValueError("celu: alpha must not be 0 (the formula divides by alpha)")
    return _fwd("elu", x, (a, 1.0, 1.0 / a), out, inplace)


celu_bwd = elu_bwd


def celu(x, alpha=1.0, inplace=False, out=None):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    return celu_fwd(x, alpha, inplace, out)[0]


# ---------------------------------------------------------------- gelu
def gelu_fwd(x, approximate="none", out=None):
    if out is None and host_floats(x) and (approximate == "none" or approximate == "tanh"):
        # _launch's hot path written out (the small-call latency, issue #16: two Python
        # calls and an argument tuple fewer); the ctx is make_ctx's
        be = host_backend()
        if be is not None:
            y, saved = be.gelu(x, approximate, None)
            return y, (be, saved, y.shape, y.dtype)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _fwd("gelu", x, (approximate,), out, False)


def gelu_bwd(ctx, dy):
    return _bwd("gelu_backward", ctx, dy)


def gelu(x, approximate="none", out=None):
    """x * Phi(x) (approximate='none', erf) or its tanh approximation (approximate='tanh')."""
    return gelu_fwd(x, approximate, out)[0]


# ---------------------------------------------------------------- silu
def silu_fwd(x, inplace=False, out=None):
    return _fwd("silu", x, (), out, inplace)


def silu_bwd(ctx, dy):
    return _bwd("silu_backward", ctx, dy)


def silu(x, inplace=False, out=None):
    """x * sigmoid(x)."""
    return silu_fwd(x, inplace, out)[0]


# ---------------------------------------------------------------- softplus
def softplus_fwd(x, beta=1.0, threshold=20.0, out=None):
    b = real(beta, "beta", finite=True)
    if b == 0:
        raise ValueError("softplus: beta must not be 0 (the result is divided by beta)")
    t = real(threshold, "threshold", finite=True)
    if t < 0:
        raise ValueError(f"softplus: threshold must be >= 0, got {t}")
    return _fwd("softplus", x, (b, t), out, False)


def softplus_bwd(ctx, dy):
    return _bwd("softplus_backward", ctx, dy)


def softplus(x, beta=1.0, threshold=20.0, out=None):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    return softplus_fwd(x, beta, threshold, out)[0]


# ---------------------------------------------------------------- sigmoid / tanh
def sigmoid_fwd(x, out=None):
    return _fwd("sigmoid", x, (), out, False)


def sigmoid_bwd(ctx, dy):
    return _bwd("sigmoid_backward", ctx, dy)


def sigmoid(x, out=None):
    """1 / (1 + exp(-x))."""
    return sigmoid_fwd(x, out)[0]


def tanh_fwd(x, out=None):
    return _fwd("tanh", x, (), out, False)


def tanh_bwd(ctx, dy):
    return _bwd("tanh_backward", ctx, dy)


def tanh(x, out=None):
    """Hyperbolic tangent."""
    return tanh_fwd(x, out)[0]


# ---------------------------------------------------------------- hardtanh / relu6
def _hardtanh_args(min_val, max_val):
    lo, hi = real(min_val, "min_val"), real(max_val, "max_val")
    if not lo <= hi:       # NaN too
        raise ValueError(f"hardtanh: min_val must be <= max_val, got min_val={lo} and "
                         f"max_val={hi}")
    return lo, hi


def hardtanh_fwd(x, min_val=-1.0, max_val=1.0, inplace=False, out=None):
    return _fwd("hardtanh", x, _hardtanh_args(min_val, max_val), out, inplace)


def hardtanh_bwd(ctx, dy):
    return _bwd("hardtanh_backward", ctx, dy)


def hardtanh(x, min_val=-1.0, max_val=1.0, inplace=False, out=None):
    """min(max(x, min_val), max_val) (NaN propagates); the gradient is 0 at and past the
    bounds, as torch's."""
    return hardtanh_fwd(x, min_val, max_val, inplace, out)[0]


def relu6_fwd(x, inplace=False, out=None):
    return _fwd("hardtanh", x, (0.0, 6.0), out, inplace)


relu6_bwd = hardtanh_bwd


def relu6(x, inplace=False, out=None):
    """min(max(x, 0), 6): hardtanh(x, 0, 6), as torch's."""
    return relu6_fwd(x, inplace, out)[0]


# ---------------------------------------------------------------- hardsigmoid / hardswish / mish
def hardsigmoid_fwd(x, inplace=False, out=None):
    return _fwd("hardsigmoid", x, (), out, inplace)


def hardsigmoid_bwd(ctx, dy):
    return _bwd("hardsigmoid_backward", ctx, dy)


def hardsigmoid(x, inplace=False, out=None):
    """relu6(x + 3) / 6."""
    return hardsigmoid_fwd(x, inplace, out)[0]


def hardswish_fwd(x, inplace=False, out=None):
    return _fwd("hardswish", x, (), out, inplace)


def hardswish_bwd(ctx, dy):
    return _bwd("hardswish_backward", ctx, dy)


def hardswish(x, inplace=False, out=None):
    """x relu6(x + 3) / 6 (MobileNetV3's)."""
    return hardswish_fwd(x, inplace, out)[0]


def mish_fwd(x, inplace=False, out=None):
    return _fwd("mish", x, (), out, inplace)


def mish_bwd(ctx, dy):
    return _bwd("mish_backward", ctx, dy)


def mish(x, inplace=False, out=None):
    """x tanh(softplus(x))."""
    return mish_fwd(x, inplace, out)[0]


# ---------------------------------------------------------------- softmin
def softmin_fwd(x, dim=-1):
    """softmax(-x) along ``dim``, on the softmax kernels."""
    shape = getattr(x, "shape", None)
    x = float_array(x, "input")
    d = norm_dim(dim, x.ndim)
    be = dispatch(x)
    nx = be.neg(x.reshape(1) if x.ndim == 0 else x, None)
    y, saved = be.softmax(nx, d)
    if y.shape != shape:
        y = y.reshape(shape)
    return y, make_ctx(be, saved, y)


def softmin_bwd(ctx, dy):
    be, saved, dy = grad_in(ctx, dy)
    shape = ctx[2]
    g = be.softmax_backward(dy if dy.ndim else dy.reshape(1), saved)
    g = be.neg(g, g)
    return g.reshape(shape) if g.shape != shape else g


def softmin(x, dim=-1):
    """softmax(-x) along ``dim``."""
    return softmin_fwd(x, dim)[0]
