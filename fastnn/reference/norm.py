"""Norm family, reference: layer_norm over the last D elements."""
import numpy as np

from ._util import cast, f64

OPS = ("layer_norm", "layer_norm_backward", "layer_norm_backward_plus", "layer_norm_infer",
       "add_layer_norm_infer")


def layer_norm(x, weight, bias, D, eps):
    rows = x.size // D if D else 0  # not -1: D (and so x.size) may be 0
    x2 = f64(x).reshape(rows, D)
    mean = x2.sum(axis=1, keepdims=True) / max(D, 1)  # sum / D: no warning at D = 0
    var = ((x2 - mean) ** 2).sum(axis=1, keepdims=True) / max(D, 1)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x2 - mean) * rstd
    y = xhat
    if weight is not None:
        y = y * f64(weight).reshape(-1)
    if bias is not None:
        y = y + f64(bias).reshape(-1)
    return cast(y.reshape(x.shape), x), (x, weight, bias is not None, mean[:, 0], rstd[:, 0], D)


def layer_norm_backward(dy, saved):
    x, weight, has_bias, mean, rstd, D = saved
    rows = x.size // D if D else 0
    x2 = f64(x).reshape(rows, D)
    g0 = f64(dy).reshape(rows, D)
    xhat = (x2 - mean[:, None]) * rstd[:, None]
    g = g0 * f64(weight).reshape(-1) if weight is not None else g0
    dx = rstd[:, None] * (g - g.sum(axis=1, keepdims=True) / max(D, 1)
                          - xhat * (g * xhat).sum(axis=1, keepdims=True) / max(D, 1))
    dw = (g0 * xhat).sum(axis=0) if weight is not None else None
    db = g0.sum(axis=0) if has_bias else None
    if weight is not None:
        dw = cast(dw.reshape(weight.shape), x)
    if db is not None:
        db = cast(db.reshape(weight.shape if weight is not None else (D,)), x)
    return cast(dx.reshape(x.shape), x), dw, db

def layer_norm_backward_plus(dy, saved, plus):
    """layer_norm_backward with ``plus`` (the input's shape) added to d_input: a pre-LN
    residual block's two input gradients in one call."""
    dx, dw, db = layer_norm_backward(dy, saved)
    return cast(f64(dx) + f64(plus), dx), dw, db


def layer_norm_infer(x, weight, bias, D, eps):
    """layer_norm's output alone (inference-only: returns just y, saves nothing)."""
    return layer_norm(x, weight, bias, D, eps)[0]


def add_layer_norm_infer(x, residual, weight, bias, D, eps):
    """layer_norm(x + residual) (inference-only): the post-LN transformer's residual step.
    The sum is rounded to the input dtype first, as the unfused x + residual would be."""
    s = cast(f64(x) + f64(residual), x)
    return layer_norm(s, weight, bias, D, eps)[0]
