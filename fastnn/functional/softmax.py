"""Softmax family: softmax, log_softmax along any dim."""
from .._backend import dispatch
from .._validate import float_array, norm_dim
from ._core import grad_in, make_ctx

__all__ = ["softmax", "softmax_fwd", "softmax_bwd", "log_softmax", "log_softmax_fwd",
           "log_softmax_bwd"]


def _prep(x, dim):
    x = float_array(x, "input")
    d = norm_dim(dim, x.ndim)
    if x.ndim == 0:
        x = x.reshape(1)
    return x, d


def _wrap(y, shape):
    return y.reshape(shape) if y.shape != shape else y


def softmax_fwd(x, dim=-1):
    shape = getattr(x, "shape", None)
    x, d = _prep(x, dim)
    be = dispatch(x)
    y, saved = be.softmax(x, d)
    y = _wrap(y, shape)
    return y, (be, saved, y.shape, y.dtype)


def softmax_bwd(ctx, dy):
    be, saved, dy = grad_in(ctx, dy)
    return _wrap(be.softmax_backward(dy if dy.ndim else dy.reshape(1), saved), ctx[2])


def softmax(x, dim=-1):
    """exp(x) / sum(exp(x)) along ``dim`` (computed stably)."""
    return softmax_fwd(x, dim)[0]


def log_softmax_fwd(x, dim=-1):
    shape = getattr(x, "shape", None)
    x, d = _prep(x, dim)
    be = dispatch(x)
    y, saved = be.log_softmax(x, d)
    y = _wrap(y, shape)
    return y, (be, saved, y.shape, y.dtype)


def log_softmax_bwd(ctx, dy):
    be, saved, dy = grad_in(ctx, dy)
    return _wrap(be.log_softmax_backward(dy if dy.ndim else dy.reshape(1), saved), ctx[2])


def log_softmax(x, dim=-1):
    """x - logsumexp(x) along ``dim``."""
    return log_softmax_fwd(x, dim)[0]
