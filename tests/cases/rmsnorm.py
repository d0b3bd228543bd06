import numpy as np

from reliability_registry import op


def _rms(shape, k, affine, eps=1e-5):
    def make(rng, dt):
        ns = shape[len(shape) - k:]
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
        w = (1 + 0.3 * rng.standard_normal(ns)).astype(dt) if affine else None
        return (x, ns, w, eps), {}
    return make


def _case(name, *a, **k):
    return op("rms_norm").case(name, _rms(*a, **k))


CASES = [
    _case("rms_norm_last", (4, 9), 1, True),
    _case("rms_norm_two_dims", (2, 3, 4, 5), 2, True),
    _case("rms_norm_no_affine", (3, 8), 1, False),
    _case("rms_norm_eps_none", (3, 2, 40), 1, True, None),   # eps = finfo(dtype).eps
    _case("rms_norm_long_row", (2, 600), 1, True),           # more than one 512-element block
]
