import numpy as np

import fastnn.functional as F
from harness import OpCase


def _ln(shape, k, affine, bias, eps=1e-5):
    def make(rng, dt):
        ns = shape[len(shape) - k:]
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
        w = (1 + 0.3 * rng.standard_normal(ns)).astype(dt) if affine else None
        b = rng.standard_normal(ns).astype(dt) if (affine and bias) else None
        return (x, ns, w, b, eps), {}
    return make


def _torch_ln(torch, x, ns, w, b, eps):
    return torch.nn.functional.layer_norm(x, ns, w, b, eps)


CASES = [
    OpCase("layer_norm_last", F.layer_norm_fwd, F.layer_norm_bwd, _ln((4, 9), 1, True, True),
           (0, 2, 3), _torch_ln),
    OpCase("layer_norm_two_dims", F.layer_norm_fwd, F.layer_norm_bwd, _ln((2, 3, 4, 5), 2, True, True),
           (0, 2, 3), _torch_ln),
    OpCase("layer_norm_no_affine", F.layer_norm_fwd, F.layer_norm_bwd, _ln((3, 8), 1, False, False),
           (0, 2, 3), _torch_ln),
    OpCase("layer_norm_no_bias", F.layer_norm_fwd, F.layer_norm_bwd, _ln((3, 2, 6), 1, True, False, 1e-3),
           (0, 2, 3), _torch_ln),
]
