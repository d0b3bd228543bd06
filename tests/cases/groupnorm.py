import numpy as np

import fastnn.functional as F
from harness import OpCase


def _gn(shape, G, affine, eps=1e-5):
    def make(rng, dt):
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
        w = (1 + 0.3 * rng.standard_normal(shape[1])).astype(dt) if affine else None
        b = rng.standard_normal(shape[1]).astype(dt) if affine else None
        return (x, G, w, b, eps), {}
    return make


def _torch_gn(torch, x, G, w, b, eps):
    return torch.nn.functional.group_norm(x, G, w, b, eps)


def _case(name, *a, **k):
    return OpCase(name, F.group_norm_fwd, F.group_norm_bwd, _gn(*a, **k), (0, 2, 3), _torch_gn)


CASES = [
    _case("group_norm_4d", (2, 6, 3, 4), 3, True),
    _case("group_norm_one_group", (3, 4, 5), 1, True, 1e-3),
    _case("group_norm_instance", (2, 4, 2, 3), 4, True),   # G == C: instance norm
    _case("group_norm_no_affine", (2, 6, 7), 2, False),
    _case("group_norm_2d_input", (4, 6), 3, True),          # (N, C): no spatial dims
    _case("group_norm_5d", (1, 4, 2, 3, 2), 2, True),
]
