"""BatchNorm family, reference: batch_norm over the channel axis 1 of (N, C, *).

Training: statistics of the batch (biased variance normalises); running_mean /
running_var (when given) are updated IN PLACE, running_var with the unbiased batch
variance, ``new = (1 - momentum) * old + momentum * batch``.  Eval: the running
statistics normalise.  Backward in training goes through the batch statistics
(dx = w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat))), in eval it is
dx = w * rstd * dy.
"""
import numpy as np

from ._util import cast, f64

OPS = ("batch_norm", "batch_norm_backward")


def _spatial(x):
    """Elements per (sample, channel): not -1, zero-size batches are allowed."""
    return int(np.prod(x.shape[2:], dtype=np.int64))


def batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps):
    N, C = x.shape[0], x.shape[1]
    x3 = f64(x).reshape(N, C, _spatial(x))
    if training:
        m = x3.shape[0] * x3.shape[2]
        mean = x3.mean(axis=(0, 2))
        var = ((x3 - mean[:, None]) ** 2).mean(axis=(0, 2))
        if running_mean is not None:
            running_mean[...] = (1 - momentum) * f64(running_mean) + momentum * mean
        if running_var is not None:
            running_var[...] = (1 - momentum) * f64(running_var) + momentum * var * (m / (m - 1))
    else:
        mean = f64(running_mean)
        var = f64(running_var)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (x3 - mean[:, None]) * rstd[:, None]
    if weight is not None:
        y = y * f64(weight)[:, None]
    if bias is not None:
        y = y + f64(bias)[:, None]
    return cast(y.reshape(x.shape), x), (x, weight, bias is not None, mean, rstd, bool(training))


def batch_norm_backward(dy, saved):
    """-> (d_input, d_weight or None, d_bias or None)."""
    x, weight, has_bias, mean, rstd, training = saved
    N, C = x.shape[0], x.shape[1]
    x3 = f64(x).reshape(N, C, _spatial(x))
    g0 = f64(dy).reshape(N, C, _spatial(x))
    xhat = (x3 - mean[:, None]) * rstd[:, None]
    w = f64(weight)[:, None] if weight is not None else 1.0
    g = g0 * w
    if training:
        dx = rstd[:, None] * (g - g.mean(axis=(0, 2))[:, None]
                              - xhat * (g * xhat).mean(axis=(0, 2))[:, None])
    else:
        dx = g * rstd[:, None]
    dw = cast((g0 * xhat).sum(axis=(0, 2)), x) if weight is not None else None
    db = cast(g0.sum(axis=(0, 2)), x) if has_bias else None
    return cast(dx.reshape(x.shape), x), dw, db
