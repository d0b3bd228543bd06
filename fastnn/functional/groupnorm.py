"""GroupNorm family: group_norm (like torch.nn.functional.group_norm)."""
from .._backend import dispatch
from .._validate import float_array, int_arg, param_arrays, positive_float
from ._core import grad_in, make_ctx

__all__ = ["group_norm", "group_norm_fwd", "group_norm_bwd"]


def _check(x, num_groups, weight, bias, eps):
    x = float_array(x, "input")
    if x.ndim < 2:
        raise ValueError(f"group_norm: input must be at least 2-D (N, C, *), got shape "
                         f"{tuple(x.shape)}")
    G = int_arg(num_groups, "num_groups", 1)
    C = x.shape[1]
    if C % G:
        raise ValueError(f"group_norm: num_groups={G} must divide the input channels {C} "
                         f"(input shape {tuple(x.shape)})")
    weight, bias = param_arrays(x, (C,), "(num_channels,)", ("weight", weight), ("bias", bias))
    eps = positive_float(eps, "eps")
    return x, G, weight, bias, eps


def group_norm_fwd(x, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise each of the num_groups channel groups of every sample -> (y, ctx)."""
    x, G, weight, bias, eps = _check(x, num_groups, weight, bias, eps)
    be = dispatch(x, weight, bias)
    y, saved = be.group_norm(x, weight, bias, G, eps)
    return y, make_ctx(be, saved, y)


def group_norm_bwd(ctx, dy):
    """-> (d_input, d_weight or None, d_bias or None)."""
    be, saved, dy = grad_in(ctx, dy)
    return be.group_norm_backward(dy, saved)


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """y = (x - mean_g) / sqrt(var_g + eps) * weight[c] + bias[c], statistics over each group
    of C/num_groups channels and all positions of a sample (biased variance)."""
    return group_norm_fwd(x, num_groups, weight, bias, eps)[0]
