"""StdNorm family: std_layer_norm (a * (x - mean) / (std + eps) + b, unbiased std)."""
from .._backend import dispatch
from .._validate import float_array, positive_float, same_dtype
from ._core import grad_in, make_ctx

__all__ = ["std_layer_norm", "std_layer_norm_fwd", "std_layer_norm_bwd"]


def _check(x, a, b, eps):
    x = float_array(x, "input")
    if x.ndim < 1:
        raise ValueError("input must have at least one dimension (..., features), got a 0-d array")
    D = tuple(x.shape)[-1]
    for v, name in ((a, "a"), (b, "b")):
        if v is not None and tuple(getattr(v, "shape", ())) != (D,):
            raise ValueError(f"{name} must have shape (features,) = ({D},) to match the input's "
                             f"last dimension, got {tuple(getattr(v, 'shape', ()))}")
    if a is not None:
        a = float_array(a, "a")
        same_dtype(x, a, "a")
    if b is not None:
        b = float_array(b, "b")
        same_dtype(x, b, "b")
    eps = positive_float(eps, "eps", allow_zero=True)
    return x, a, b, D, eps


def std_layer_norm_fwd(x, a=None, b=None, eps=1e-6):
    """a * (x - mean) / (std + eps) + b over the last dimension -> (y, ctx)."""
    x, a, b, D, eps = _check(x, a, b, eps)
    be = dispatch(x, a, b)
    y, saved = be.std_layer_norm(x, a, b, D, eps)
    return y, make_ctx(be, saved, y)


def std_layer_norm_bwd(ctx, dy):
    """-> (d_input, d_a or None, d_b or None)."""
    be, saved, dy = grad_in(ctx, dy)
    return be.std_layer_norm_backward(dy, saved)


def std_layer_norm(x, a=None, b=None, eps=1e-6):
    """The Annotated Transformer's LayerNorm: a * (x - mean) / (std + eps) + b over the last
    dimension, with the UNBIASED std (divides by D - 1; D = 1 gives NaN, as torch.std)."""
    return std_layer_norm_fwd(x, a, b, eps)[0]
