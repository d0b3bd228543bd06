import numpy as np

from reliability_registry import op


def _ln(shape, k, affine, bias, eps=1e-5):
    def make(rng, dt):
        ns = shape[len(shape) - k:]
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
        w = (1 + 0.3 * rng.standard_normal(ns)).astype(dt) if affine else None
        b = rng.standard_normal(ns).astype(dt) if (affine and bias) else None
        return (x, ns, w, b, eps), {}
    return make


layer_norm = op("layer_norm")
CASES = [
    layer_norm.case("layer_norm_last", _ln((4, 9), 1, True, True)),
    layer_norm.case("layer_norm_two_dims", _ln((2, 3, 4, 5), 2, True, True)),
    layer_norm.case("layer_norm_no_affine", _ln((3, 8), 1, False, False)),
    layer_norm.case("layer_norm_no_bias", _ln((3, 2, 6), 1, True, False, 1e-3)),
]
