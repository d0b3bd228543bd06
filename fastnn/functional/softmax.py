"""Softmax family: softmax, log_softmax along any dim."""
from .._backend import dispatch, host_backend
from .._validate import float_array, host_floats, norm_dim
from ._core import grad_in

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


def _fast_dim(x, dim):
    """dim >= 0 when the fast path applies (contiguous float ndarray, int dim in range)."""
    if type(dim) is int and host_floats(x):
        nd = x.ndim
        if nd and -nd <= dim < nd:
            be = host_backend()
            if be is not None:
                return dim % nd, be
    return -1, None


def softmax(x, dim=-1):
    """exp(x) / sum(exp(x)) along ``dim`` (computed stably)."""
    d, be = _fast_dim(x, dim)
    if be is not None:
        return be.softmax(x, d)[0]
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
    d, be = _fast_dim(x, dim)
    if be is not None:
        return be.log_softmax(x, d)[0]
    return log_softmax_fwd(x, dim)[0]
