"""RMSNorm family, reference: rms_norm over the last D elements,
y = x / sqrt(mean(x^2) + eps) * weight (torch.nn.functional.rms_norm)."""
import numpy as np

from ._util import cast, f64

OPS = ("rms_norm", "rms_norm_backward")


def rms_norm(x, weight, D, eps):
    rows = x.size // D if D else 0
    x2 = f64(x).reshape(rows, D)
    rstd = 1.0 / np.sqrt((x2 * x2).sum(axis=1) / max(D, 1) + eps)
    y = x2 * rstd[:, None]
    if weight is not None:
        y = y * f64(weight).reshape(-1)
    return cast(y.reshape(x.shape), x), (x, weight, rstd, D)


def rms_norm_backward(dy, saved):
    """-> (d_input, d_weight or None)."""
    x, weight, rstd, D = saved
    rows = x.size // D if D else 0
    x2 = f64(x).reshape(rows, D)
    g0 = f64(dy).reshape(rows, D)
    xhat = x2 * rstd[:, None]
    g = g0 * f64(weight).reshape(-1) if weight is not None else g0
    dx = rstd[:, None] * (g - xhat * (g * xhat).sum(axis=1, keepdims=True) / max(D, 1))
    dw = cast((g0 * xhat).sum(axis=0).reshape(weight.shape), x) if weight is not None else None
    return cast(dx.reshape(x.shape), x), dw
