"""BatchNorm family: batch_norm over channel axis 1 of (N, C, *), like torch's."""
import numpy as np

from .._backend import dispatch
from .._validate import float_array, is_array, positive_float, real, same_dtype
from ._core import grad_in, make_ctx

__all__ = ["batch_norm", "batch_norm_fwd", "batch_norm_bwd"]


def _stat(a, name, x, C):
    """A per-channel vector; returns (contiguous array for the kernel, original)."""
    if a is None:
        return None
    if is_array(a):
        c = float_array(a, name)
    else:
        raise TypeError(f"{name} must be a float array of shape ({C},), got {type(a).__name__}")
    if tuple(c.shape) != (C,):
        raise ValueError(f"{name} must have shape (num_features,) = ({C},) for input of shape "
                         f"{tuple(x.shape)}, got {tuple(c.shape)}")
    same_dtype(x, c, name)
    return c


def batch_norm_fwd(x, running_mean, running_var, weight=None, bias=None, training=False,
                   momentum=0.1, eps=1e-5):
    """Batch normalisation of x (N, C, *) per channel -> (y, ctx).

    training: batch statistics; running_mean / running_var (if given) are updated in
    place with ``momentum`` (running_var from the unbiased batch variance).
    Otherwise the running statistics normalise."""
    x = float_array(x, "input")
    if x.ndim < 2:
        raise ValueError(f"batch_norm: input must have at least 2 dimensions (N, C, *), "
                         f"got shape {tuple(x.shape)}")
    C = x.shape[1]
    rm = _stat(running_mean, "running_mean", x, C)
    rv = _stat(running_var, "running_var", x, C)
    w = _stat(weight, "weight", x, C)
    b = _stat(bias, "bias", x, C)
    training = bool(training)
    eps = positive_float(eps, "eps")
    momentum = real(momentum, "momentum")
    if training:
        m = x.shape[0] * int(np.prod(x.shape[2:], dtype=np.int64))   # values per channel
        if m <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                             f"got input of shape {tuple(x.shape)}")
        for a, name in ((running_mean, "running_mean"), (running_var, "running_var")):
            if isinstance(a, np.ndarray) and not a.flags.writeable:
                raise ValueError(f"batch_norm: {name} is read-only, but training updates it "
                                 f"in place (pass a writeable array, or training=False)")
    elif rm is None or rv is None:
        raise ValueError("batch_norm: running_mean and running_var are required when "
                         "training=False (they normalise in evaluation mode)")
    be = dispatch(x, rm, rv, w, b)
    y, saved = be.batch_norm(x, rm, rv, w, b, training, momentum, eps)
    if training:
        # the kernels update contiguous arrays in place; hand the result back to a
        # caller that passed a strided view
        for new, orig in ((rm, running_mean), (rv, running_var)):
            if new is not None and new is not orig:
                orig[...] = new
    return y, make_ctx(be, saved, y)


def batch_norm_bwd(ctx, dy):
    """-> (d_input, d_weight or None, d_bias or None)."""
    be, saved, dy = grad_in(ctx, dy)
    return be.batch_norm_backward(dy, saved)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm."""
    return batch_norm_fwd(x, running_mean, running_var, weight, bias, training, momentum, eps)[0]
