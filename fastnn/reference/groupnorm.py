"""GroupNorm family, reference: group_norm over (N, C, *) with C split into G groups.

Each (n, g) block -- C/G channels times every spatial position -- is normalised with its
mean and biased variance; the affine weight and bias are per channel (torch's numerics).
"""
import numpy as np

from ._util import cast, f64

OPS = ("group_norm", "group_norm_backward")


def group_norm(x, weight, bias, G, eps):
    N, C = x.shape[0], x.shape[1]
    S = x.size // (N * C) if N * C else 0
    x3 = f64(x).reshape(N, G, (C // G) * S)
    M = max(x3.shape[2], 1)
    mean = x3.sum(axis=2) / M
    var = ((x3 - mean[..., None]) ** 2).sum(axis=2) / M
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = ((x3 - mean[..., None]) * rstd[..., None]).reshape(N, C, S)
    y = xhat
    if weight is not None:
        y = y * f64(weight)[None, :, None]
    if bias is not None:
        y = y + f64(bias)[None, :, None]
    return cast(y.reshape(x.shape), x), (x, weight, bias is not None, mean, rstd, G)


def group_norm_backward(dy, saved):
    """-> (d_input, d_weight or None, d_bias or None)."""
    x, weight, has_bias, mean, rstd, G = saved
    N, C = x.shape[0], x.shape[1]
    S = x.size // (N * C) if N * C else 0
    x3 = f64(x).reshape(N, C, S)
    g0 = f64(dy).reshape(N, C, S)
    mean_c = np.repeat(mean, C // G, axis=1)[..., None]
    rstd_c = np.repeat(rstd, C // G, axis=1)[..., None]
    xhat = (x3 - mean_c) * rstd_c
    g = g0 * f64(weight)[None, :, None] if weight is not None else g0
    M = max((C // G) * S, 1)
    gg = g.reshape(N, G, (C // G) * S)   # explicit sizes: any of them may be 0
    xg = xhat.reshape(N, G, (C // G) * S)
    dx = rstd[..., None] * (gg - gg.sum(axis=2, keepdims=True) / M
                            - xg * (gg * xg).sum(axis=2, keepdims=True) / M)
    dw = cast((g0 * xhat).sum(axis=(0, 2)), x) if weight is not None else None
    db = cast(g0.sum(axis=(0, 2)), x) if has_bias else None
    return cast(dx.reshape(x.shape), x), dw, db
