import numpy as np

import fastnn.functional as F
from harness import OpCase


def _x(shape, p, training=True):
    def make(rng, dt):
        return (rng.standard_normal(shape).astype(dt), p, training), {}
    return make


CASES = [
    OpCase("dropout_p03", F.dropout_fwd, F.dropout_bwd, _x((6, 17), 0.3), (0,), random=True),
    OpCase("dropout_p05_3d", F.dropout_fwd, F.dropout_bwd, _x((2, 3, 11), 0.5), (0,), random=True),
    OpCase("dropout_p0", F.dropout_fwd, F.dropout_bwd, _x((5, 7), 0.0), (0,), random=True,
           torch_fn=lambda torch, x, p, t: torch.nn.functional.dropout(x, p, t)),
    OpCase("dropout_p1", F.dropout_fwd, F.dropout_bwd, _x((5, 7), 1.0), (0,), random=True,
           torch_fn=lambda torch, x, p, t: torch.nn.functional.dropout(x, p, t)),
    OpCase("dropout_eval", F.dropout_fwd, F.dropout_bwd, _x((4, 5), 0.5, False), (0,), random=True,
           torch_fn=lambda torch, x, p, t: torch.nn.functional.dropout(x, p, t)),
    OpCase("dropout_empty", F.dropout_fwd, F.dropout_bwd, _x((0, 3), 0.2), (0,), random=True,
           gradcheck=False),
]
