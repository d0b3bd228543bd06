import numpy as np

from reliability_registry import op


def _x(shape, dim, scale=3.0):
    def make(rng, dt):
        return (rng.standard_normal(shape).astype(dt) * scale, dim), {}
    return make


CASES = []
for shape, dim in [((4, 10), -1), ((3, 5, 4), 1), ((2, 3, 70), 1), ((6,), 0), ((2, 3, 4), 0)]:
    tag = "x".join(map(str, shape)) + f"_d{dim}"
    CASES.append(op("softmax").case(f"softmax_{tag}", _x(shape, dim)))
    CASES.append(op("log_softmax").case(f"log_softmax_{tag}", _x(shape, dim)))
