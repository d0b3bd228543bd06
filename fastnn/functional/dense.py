"""Dense family: linear."""
import numpy as np

from .._backend import dispatch, host_backend
from .._validate import float_array, host_floats, same_dtype
from ._core import grad_in, make_ctx

__all__ = ["linear", "linear_fwd", "linear_bwd"]


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


def linear_fwd(x, weight, bias=None):
    """y = x @ weight.T + bias, for x of any rank (..., in_features) -> (y, ctx)."""
    be = _fast(x, weight, bias)
    if be is not None:
        y, saved = be.linear(x, weight, bias)
        return y, make_ctx(be, saved, y)
    x, weight, bias = _check(x, weight, bias)
    be = dispatch(x, weight, bias)
    y, saved = be.linear(x, weight, bias)
    return y, make_ctx(be, saved, y)


def linear_bwd(ctx, dy):
    """-> (d_input, d_weight, d_bias or None)."""
    be, saved, dy = grad_in(ctx, dy)
    return be.linear_backward(dy, saved)


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
