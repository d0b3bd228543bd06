"""StdNorm family, reference: the Annotated Transformer's layer norm.

    y = a * (x - mean) / (std + eps) + b,   std = sqrt(sum((x - mean)^2) / (D - 1))

over the last D elements (the UNBIASED std, eps added to the std, not the variance:
not the same function as layer_norm).  With d = x - mean, r = 1 / (std + eps), g = dy * a:

    dx = r * (g - mean(g)) - r^2 * sum(g * d) / ((D - 1) * std) * d

A row with std == 0 (all elements equal) takes the std's subgradient 0 there, so its
gradient is r * (g - mean(g)) instead of torch autograd's NaN (0/0).
"""
import numpy as np

from ._util import cast, f64

OPS = ("std_layer_norm", "std_layer_norm_backward")


def std_layer_norm(x, a, b, D, eps):
    x2 = f64(x).reshape(-1, D)
    mean = x2.mean(axis=1, keepdims=True) if D else np.zeros((x2.shape[0], 1))
    d = x2 - mean
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt((d * d).sum(axis=1, keepdims=True) / (D - 1))
        r = 1.0 / (std + eps)
    y = d * r
    if a is not None:
        y = y * f64(a).reshape(-1)
    if b is not None:
        y = y + f64(b).reshape(-1)
    return cast(y.reshape(x.shape), x), (x, a, b is not None, mean[:, 0], std[:, 0], eps, D)


def std_layer_norm_backward(dy, saved):
    x, a, has_b, mean, std, eps, D = saved
    x2 = f64(x).reshape(-1, D)
    g0 = f64(dy).reshape(-1, D)
    d = x2 - mean[:, None]
    s = std[:, None]
    r = 1.0 / (s + eps)
    g = g0 * f64(a).reshape(-1) if a is not None else g0
    with np.errstate(invalid="ignore", divide="ignore"):
        coef = np.where(s == 0, 0.0, r * r * (g * d).sum(axis=1, keepdims=True) / ((D - 1) * s))
    dx = r * (g - g.mean(axis=1, keepdims=True)) - coef * d
    da = cast((g0 * d * r).sum(axis=0).reshape(a.shape), x) if a is not None else None
    db = cast(g0.sum(axis=0).reshape((D,) if a is None else a.shape), x) if has_b else None
    return cast(dx.reshape(x.shape), x), da, db
