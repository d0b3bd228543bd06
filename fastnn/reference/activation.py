"""Activation family, reference."""
import math

import numpy as np

from ._util import cast, f64

OPS = ("gelu", "gelu_backward")

_erf = np.vectorize(math.erf, otypes=[np.float64])
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def erf(z):
    """erf in float64 (scipy.special.erf where scipy is there; math.erf otherwise)."""
    try:
        from scipy.special import erf as sp_erf
    except ImportError:  # pragma: no cover
        return _erf(z)
    return sp_erf(z)


def gelu(x, approximate):
    v = f64(x)
    if approximate == "tanh":
        y = 0.5 * v * (1.0 + np.tanh(_SQRT_2_OVER_PI * (v + 0.044715 * v ** 3)))
    else:
        y = 0.5 * v * (1.0 + erf(v / math.sqrt(2.0)))
    return cast(y, x), (x, approximate == "tanh")


def gelu_backward(dy, saved):
    x, approx_tanh = saved
    v, g = f64(x), f64(dy)
    if approx_tanh:
        t = np.tanh(_SQRT_2_OVER_PI * (v + 0.044715 * v ** 3))
        d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * v * v)
    else:
        d = 0.5 * (1.0 + erf(v / math.sqrt(2.0))) + v * np.exp(-0.5 * v * v) / math.sqrt(2 * math.pi)
    return cast(g * d, x)
