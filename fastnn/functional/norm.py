"""Norm family: layer_norm."""
from .._backend import dispatch, host_backend
from .._validate import float_array, norm_fast_args, normalized_dims, param_arrays, positive_float
from .._validate import grad_like, same_dtype
from ._core import grad_in, make_ctx

__all__ = ["layer_norm", "layer_norm_fwd", "layer_norm_bwd",
           "add_layer_norm"]


def _check(x, ns, weight, bias, eps):
    x = float_array(x, "input")
    ns, D = normalized_dims(x, ns)
    weight, bias = param_arrays(x, ns, "normalized_shape", ("weight", weight), ("bias", bias))
    if eps.__class__ is not float or not eps > 0:
        eps = positive_float(eps, "eps")
    return x, weight, bias, D, eps


def layer_norm_fwd(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer normalisation over the trailing ``normalized_shape`` dims -> (y, ctx)."""
    D = norm_fast_args(x, normalized_shape, weight, bias, eps)   # layer_norm's fast path
    if D >= 0:
        be = host_backend()
        if be is not None:
            y, saved = be.layer_norm(x, weight, bias, D, eps)
            return y, make_ctx(be, saved, y)
    x, weight, bias, D, eps = _check(x, normalized_shape, weight, bias, eps)
    be = dispatch(x, weight, bias)
    y, saved = be.layer_norm(x, weight, bias, D, eps)
    return y, make_ctx(be, saved, y)


def layer_norm_bwd(ctx, dy, plus=None):
    """-> (d_input, d_weight or None, d_bias or None).  ``plus`` (the input's shape and
    dtype): added to d_input as each row is made (a pre-LN residual block's other input
    gradient), the same values as d_input + plus."""
    be, saved, dy = grad_in(ctx, dy)
    if plus is None:
        return be.layer_norm_backward(dy, saved)
    plus = grad_like(plus, ctx[2], ctx[3], "plus")     # the output's shape is the input's
    return be.layer_norm_backward_plus(dy, saved, plus)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing dims (biased var)."""
    # Fast path (one trailing dim, contiguous float arrays of one dtype, host backend):
    # one compiled test instead of the full validation, for small per-call latency.
    D = norm_fast_args(x, normalized_shape, weight, bias, eps)
    if D >= 0:
        be = host_backend()
        if be is not None:
            return be.layer_norm_infer(x, weight, bias, D, eps)
    return layer_norm_fwd(x, normalized_shape, weight, bias, eps)[0]


def add_layer_norm(x, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    """layer_norm(x + residual, ...) in one pass (inference: no gradient): the residual
    step of post-LN transformers.  x and residual: same shape and dtype."""
    x, weight, bias, D, eps = _check(x, normalized_shape, weight, bias, eps)
    r = float_array(residual, "residual")
    same_dtype(x, r, "residual", "input")
    if tuple(r.shape) != tuple(x.shape):
        raise ValueError(f"residual must have the input's shape {tuple(x.shape)}, got "
                         f"{tuple(r.shape)}")
    return dispatch(x, r, weight, bias).add_layer_norm_infer(x, r, weight, bias, D, eps)
