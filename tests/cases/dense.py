import numpy as np

from reliability_registry import op


def _linear(shape_x, n_out, bias):
    def make(rng, dt):
        n_in = shape_x[-1]
        x = rng.standard_normal(shape_x).astype(dt)
        w = rng.standard_normal((n_out, n_in)).astype(dt)
        b = rng.standard_normal(n_out).astype(dt) if bias else None
        return (x, w, b), {}
    return make


linear = op("linear")
CASES = [
    linear.case("linear_2d", _linear((5, 7), 3, True)),
    linear.case("linear_3d_nobias", _linear((2, 3, 6), 4, False)),
    linear.case("linear_1d", _linear((6,), 2, True)),
    linear.case("linear_zero_rows", _linear((0, 4), 3, True), gradcheck=False),
]
