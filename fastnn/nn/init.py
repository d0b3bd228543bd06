"""Parameter initialisation (torch.nn.init's rules), drawing from fastnn's seeded generator."""
import contextlib
import math
import threading

import numpy as np

from .._random import generator

__all__ = ["uniform", "normal", "zeros", "ones", "kaiming_uniform_bound", "fan_in_out",
           "skip_init"]

_skip = threading.local()


@contextlib.contextmanager
def skip_init():
    """Within: random initialisers return zeros and draw nothing from the generator --
    for models whose every parameter is loaded right after construction (from_pretrained):
    drawing 20M+ normals costs seconds and would move the seeded stream."""
    prev = getattr(_skip, "on", False)
    _skip.on = True
    try:
        yield
    finally:
        _skip.on = prev


def fan_in_out(shape):
    """torch's _calculate_fan_in_and_fan_out for a weight of ``shape``."""
    if len(shape) < 2:
        raise ValueError("fan in/out needs a weight of at least 2 dimensions")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def kaiming_uniform_bound(fan_in, a=math.sqrt(5)):
    """Bound of torch's kaiming_uniform_(a) (leaky_relu gain): sqrt(6 / ((1 + a^2) fan_in))."""
    gain = math.sqrt(2.0 / (1 + a * a))
    return gain * math.sqrt(3.0 / fan_in) if fan_in > 0 else 0.0


def uniform(shape, low, high, dtype=np.float32):
    if getattr(_skip, "on", False):
        return np.zeros(shape, dtype=dtype)
    return generator().uniform(low, high, size=shape).astype(dtype)


def normal(shape, std=1.0, mean=0.0, dtype=np.float32):
    if getattr(_skip, "on", False):
        return np.zeros(shape, dtype=dtype)
    return (generator().standard_normal(size=shape) * std + mean).astype(dtype)


def zeros(shape, dtype=np.float32):
    return np.zeros(shape, dtype=dtype)


def ones(shape, dtype=np.float32):
    return np.ones(shape, dtype=dtype)
