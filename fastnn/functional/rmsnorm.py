"""RMSNorm family: rms_norm (like torch.nn.functional.rms_norm, torch >= 2.4)."""
import numpy as np

from .._backend import dispatch
from .._validate import float_array, normalized_dims, param_arrays, positive_float
from ._core import grad_in, make_ctx

__all__ = ["rms_norm", "rms_norm_fwd", "rms_norm_bwd"]


def _check(x, normalized_shape, weight, eps):
    x = float_array(x, "input")
    ns, D = normalized_dims(x, normalized_shape)
    weight, = param_arrays(x, ns, "normalized_shape", ("weight", weight))
    # torch: eps=None means the machine epsilon of the input's dtype
    eps = float(np.finfo(x.dtype).eps) if eps is None else positive_float(eps, "eps")
    return x, weight, D, eps


def rms_norm_fwd(x, normalized_shape, weight=None, eps=None):
    """y = x / sqrt(mean(x^2) + eps) * weight over the trailing dims -> (y, ctx)."""
    x, weight, D, eps = _check(x, normalized_shape, weight, eps)
    be = dispatch(x, weight)
    y, saved = be.rms_norm(x, weight, D, eps)
    return y, make_ctx(be, saved, y)


def rms_norm_bwd(ctx, dy):
    """-> (d_input, d_weight or None)."""
    be, saved, dy = grad_in(ctx, dy)
    return be.rms_norm_backward(dy, saved)


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm (eps=None: torch.finfo(x.dtype).eps)."""
    return rms_norm_fwd(x, normalized_shape, weight, eps)[0]
