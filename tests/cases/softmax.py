import numpy as np

import fastnn.functional as F
from harness import OpCase


def _x(shape, dim, scale=3.0):
    def make(rng, dt):
        return (rng.standard_normal(shape).astype(dt) * scale, dim), {}
    return make


CASES = []
for shape, dim in [((4, 10), -1), ((3, 5, 4), 1), ((2, 3, 70), 1), ((6,), 0), ((2, 3, 4), 0)]:
    tag = "x".join(map(str, shape)) + f"_d{dim}"
    CASES.append(OpCase(f"softmax_{tag}", F.softmax_fwd, F.softmax_bwd, _x(shape, dim), (0,),
                        lambda torch, x, d: torch.softmax(x, d)))
    CASES.append(OpCase(f"log_softmax_{tag}", F.log_softmax_fwd, F.log_softmax_bwd, _x(shape, dim), (0,),
                        lambda torch, x, d: torch.log_softmax(x, d)))
