"""Softmax family, reference: softmax / log_softmax along axis ``dim``."""
import numpy as np

from ._util import cast, f64

OPS = ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward")


def softmax(x, dim):
    z = f64(x)
    m = np.max(z, axis=dim, keepdims=True, initial=-np.inf)  # initial: empty dims
    with np.errstate(invalid="ignore"):
        e = np.exp(z - m)
        y = e / e.sum(axis=dim, keepdims=True)
    y = cast(y, x)
    return y, (y, dim)


def softmax_backward(dy, saved):
    y, dim = saved
    y64, g = f64(y), f64(dy)
    return cast(y64 * (g - (g * y64).sum(axis=dim, keepdims=True)), y)


def log_softmax(x, dim):
    z = f64(x)
    m = np.max(z, axis=dim, keepdims=True, initial=-np.inf)  # initial: empty dims
    with np.errstate(invalid="ignore", divide="ignore"):
        lse = m + np.log(np.exp(z - m).sum(axis=dim, keepdims=True))
    y = cast(z - lse, x)
    return y, (y, dim)


def log_softmax_backward(dy, saved):
    y, dim = saved
    g = f64(dy)
    return cast(g - np.exp(f64(y)) * g.sum(axis=dim, keepdims=True), y)
