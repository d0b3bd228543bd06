import numpy as np

import fastnn.functional as F
from harness import OpCase


def _x(shape, scale=2.0):
    def make(rng, dt, approximate="none"):
        return (rng.standard_normal(shape).astype(dt) * scale,), {}
    return make


def _gelu(approx):
    def make(rng, dt):
        return (rng.standard_normal((5, 13)).astype(dt) * 3, approx), {}
    return make


CASES = [
    OpCase("gelu_exact", F.gelu_fwd, F.gelu_bwd, _gelu("none"), (0,),
           lambda torch, x, a: torch.nn.functional.gelu(x, approximate=a)),
    OpCase("gelu_tanh", F.gelu_fwd, F.gelu_bwd, _gelu("tanh"), (0,),
           lambda torch, x, a: torch.nn.functional.gelu(x, approximate=a)),
]
