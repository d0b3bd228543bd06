"""Activation family."""
from .._backend import dispatch
from .._validate import float_array
from ._core import grad_in, make_ctx

__all__ = ["gelu", "gelu_fwd", "gelu_bwd"]


def gelu_fwd(x, approximate="none"):
    x = float_array(x, "input")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    be = dispatch(x)
    y, saved = be.gelu(x, approximate)
    return y, make_ctx(be, saved, y)


def gelu_bwd(ctx, dy):
    be, saved, dy = grad_in(ctx, dy)
    return be.gelu_backward(dy, saved)


def gelu(x, approximate="none"):
    """x * Phi(x) (approximate='none', erf) or its tanh approximation (approximate='tanh')."""
    return gelu_fwd(x, approximate)[0]
