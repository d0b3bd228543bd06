import numpy as np

import fastnn.functional as F
from harness import OpCase


def _linear(shape_x, n_out, bias):
    def make(rng, dt):
        n_in = shape_x[-1]
        x = rng.standard_normal(shape_x).astype(dt)
        w = rng.standard_normal((n_out, n_in)).astype(dt)
        b = rng.standard_normal(n_out).astype(dt) if bias else None
        return (x, w, b), {}
    return make


def _torch_linear(torch, x, w, b):
    return torch.nn.functional.linear(x, w, b)


CASES = [
    OpCase("linear_2d", F.linear_fwd, F.linear_bwd, _linear((5, 7), 3, True), (0, 1, 2), _torch_linear),
    OpCase("linear_3d_nobias", F.linear_fwd, F.linear_bwd, _linear((2, 3, 6), 4, False), (0, 1, 2),
           _torch_linear),
    OpCase("linear_1d", F.linear_fwd, F.linear_bwd, _linear((6,), 2, True), (0, 1, 2), _torch_linear),
    OpCase("linear_zero_rows", F.linear_fwd, F.linear_bwd, _linear((0, 4), 3, True), (0, 1, 2),
           _torch_linear, gradcheck=False),
]
