import numpy as np

from reliability_registry import op


def _gn(shape, G, affine, eps=1e-5):
    def make(rng, dt):
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
        w = (1 + 0.3 * rng.standard_normal(shape[1])).astype(dt) if affine else None
        b = rng.standard_normal(shape[1]).astype(dt) if affine else None
        return (x, G, w, b, eps), {}
    return make


def _case(name, *a, **k):
    return op("group_norm").case(name, _gn(*a, **k))


CASES = [
    _case("group_norm_4d", (2, 6, 3, 4), 3, True),
    _case("group_norm_one_group", (3, 4, 5), 1, True, 1e-3),
    _case("group_norm_instance", (2, 4, 2, 3), 4, True),   # G == C: instance norm
    _case("group_norm_no_affine", (2, 6, 7), 2, False),
    _case("group_norm_2d_input", (4, 6), 3, True),          # (N, C): no spatial dims
    _case("group_norm_5d", (1, 4, 2, 3, 2), 2, True),
]
