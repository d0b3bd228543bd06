"""Dropout family, reference: inverted dropout with a Philox mask.

Element i of a call (seed, offset) is kept when its uniform u_i >= p, and kept
elements are scaled by 1 / (1 - p).  The output is ``x * m`` with m in {0, 1/(1-p)}
(a multiply, as torch does, so NaN/inf in dropped elements still propagate).
p = 0 keeps everything (u >= 0 always, scale 1); p = 1 drops everything (m = 0).
The mask is a pure function of (seed, offset, i): backward regenerates it instead of
saving it, and every backend and thread count gives the same mask.
"""
import numpy as np

from .._random import philox_uniform
from ._util import cast, f64

OPS = ("dropout", "dropout_backward")


def dropout_multiplier(n, p, seed, offset):
    """The float64 multiplier m_i (0 or 1/(1-p)) of elements 0..n-1."""
    u = philox_uniform(n, seed, offset, np.float64)
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    return np.where(u >= p, scale, 0.0)


def dropout(x, p, seed, offset):
    m = dropout_multiplier(x.size, p, seed, offset).reshape(x.shape)
    return cast(f64(x) * m, x), (p, seed, offset)


def dropout_backward(dy, saved):
    p, seed, offset = saved
    m = dropout_multiplier(dy.size, p, seed, offset).reshape(dy.shape)
    return cast(f64(dy) * m, dy)
