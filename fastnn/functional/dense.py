"""Dense family: linear, and linear fused with what surrounds it in a transformer's MLP and
residual stream (linear_act_fwd / linear_act_bwd, linear_bwd's ``act``, linear_fwd's
``residual``): the same values as the separate ops, without their passes over memory."""
import numpy as np

from .._backend import dispatch, host_backend
from .._validate import float_array, host_floats, same_dtype
from ._core import grad_in, make_ctx

__all__ = ["linear", "linear_fwd", "linear_bwd", "linear_act_fwd", "linear_act_bwd"]

_TRAIN_ACTS = ("gelu", "gelu_tanh")


def _check(x, weight, bias):
    x = float_array(x, "input")
    weight = float_array(weight, "weight")
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D (out_features, in_features), got shape {tuple(weight.shape)}")
    if x.ndim < 1:
        raise ValueError("input must have at least one dimension (..., in_features), got a 0-d array")
    if tuple(x.shape)[-1] != weight.shape[1]:
        raise ValueError(f"input's last dimension must equal in_features = weight.shape[1] = "
                         f"{weight.shape[1]}; got input of shape {tuple(x.shape)} and weight of "
                         f"shape {tuple(weight.shape)}")
    same_dtype(x, weight, "weight")
    if bias is not None:
        bias = float_array(bias, "bias")
        if tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(f"bias must have shape (out_features,) = ({weight.shape[0]},), "
                             f"got {tuple(bias.shape)}")
        same_dtype(x, bias, "bias")
    return x, weight, bias


def linear_fwd(x, weight, bias=None, residual=None):
    """y = x @ weight.T + bias, for x of any rank (..., in_features) -> (y, ctx).
    ``residual`` (y's shape and dtype): y = x @ weight.T + bias + residual, the sum made
    as each block of the product is finished (a transformer's residual connection; its
    gradient is d_y itself, so linear_bwd is unchanged)."""
    be = _fast(x, weight, bias)
    if residual is None:
        if be is None:
            x, weight, bias = _check(x, weight, bias)
            be = dispatch(x, weight, bias)
        y, saved = be.linear(x, weight, bias)
        return y, make_ctx(be, saved, y)
    out_shape = tuple(x.shape)[:-1] + (weight.shape[0],)
    if be is None or not host_floats(x, residual) or residual.shape != out_shape:
        x, weight, bias = _check(x, weight, bias)
        residual = float_array(residual, "residual")
        if tuple(residual.shape) != out_shape:
            raise ValueError(f"residual must have the output's shape {out_shape}, got "
                             f"{tuple(residual.shape)}")
        same_dtype(x, residual, "residual")
        be = dispatch(x, weight, bias, residual)
    y, saved = be.linear_residual(x, weight, bias, residual)
    return y, make_ctx(be, saved, y)


def linear_bwd(ctx, dy, act=None, *, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None).  ``act``: the ctx of the linear_act_fwd whose
    output was this layer's input -- d_input then comes back as the gradient of that
    activation's input (d_input * act'(u), made as each block of d_input is finished),
    for linear_act_bwd(act, ..., pre_activation=True).  ``weight_grad`` / ``bias_grad``
    False (a frozen parameter, torch's requires_grad=False): that gradient is not computed
    -- for the weight, a third of the backward's FLOPs -- and comes back None."""
    be, saved, dy = grad_in(ctx, dy)
    weight_grad, bias_grad = bool(weight_grad), bool(bias_grad)
    if act is None:
        return be.linear_backward(dy, saved, weight_grad, bias_grad)
    abe, asaved, ashape, _ = act
    u, activation = asaved[3], asaved[4]
    if abe is not be or tuple(u.shape) != tuple(saved[0].shape) or u.dtype != dy.dtype:
        raise ValueError("linear_bwd: act must be the ctx of the linear_act_fwd whose output "
                         "was this layer's input")
    return be.linear_backward_act(dy, saved, u, activation, weight_grad, bias_grad)


def linear_act_fwd(x, weight, bias, activation):
    """h = act(x @ weight.T + bias) -> (h, ctx), the activation ("gelu" (erf) or
    "gelu_tanh", as gelu's approximate "none" / "tanh") applied as each block of the
    product is finished; ctx keeps the activation's input for the backward."""
    if activation not in _TRAIN_ACTS:
        raise ValueError(f"activation must be one of {_TRAIN_ACTS}, got {activation!r}")
    be = _fast(x, weight, bias)
    if be is None:
        x, weight, bias = _check(x, weight, bias)
        be = dispatch(x, weight, bias)
    h, saved = be.linear_act(x, weight, bias, activation)
    return h, make_ctx(be, saved, h)


def linear_act_bwd(ctx, dh, pre_activation=False, *, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None).  ``pre_activation``: ``dh`` is already the
    gradient of the activation's input (linear_bwd(.., act=ctx) made it).  ``weight_grad``
    / ``bias_grad``: as linear_bwd's."""
    be, saved, dh = grad_in(ctx, dh)
    weight_grad, bias_grad = bool(weight_grad), bool(bias_grad)
    if pre_activation:
        return be.linear_backward(dh, saved[:3], weight_grad, bias_grad)
    return be.linear_act_backward(dh, saved, weight_grad, bias_grad)


def _fast(x, weight, bias):
    """The host backend when the arguments need no validation beyond one compiled check
    (contiguous native float arrays of one dtype, the shapes fit), else None: the small
    calls' fast path; anything else takes _check, which owns every error message."""
    if host_floats(x, weight, bias) or (
            # a weight that is the transpose of a C-contiguous (in, out) array (GPT-2's
            # Conv1D passes its weight so): taken as it is, no copy
            type(weight) is np.ndarray and weight.ndim == 2 and host_floats(x, weight.T, bias)):
        ws = weight.shape
        if (len(ws) == 2 and x.ndim and x.shape[-1] == ws[1]
                and (bias is None or bias.shape == (ws[0],))):
            return host_backend()
    return None


def linear(x, weight, bias=None):
    """y = x @ weight.T + bias.  weight (out_features, in_features), bias (out_features,)."""
    be = _fast(x, weight, bias)
    if be is not None:
        return be.linear(x, weight, bias)[0]
    return linear_fwd(x, weight, bias)[0]
