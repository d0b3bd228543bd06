import numpy as np

import fastnn.functional as F
from harness import OpCase


def _ce(shape, prob=False, weight=False, ignore=False, reduction="mean", ls=0.0, ignore_index=-100):
    def make(rng, dt):
        x = (rng.standard_normal(shape) * 2).astype(dt)
        C = shape[0] if len(shape) == 1 else shape[1]
        if prob:
            t = rng.random(shape)
            t = (t / t.sum(axis=0 if len(shape) == 1 else 1, keepdims=True)).astype(dt)
        else:
            t = rng.integers(0, C, shape[:1] + shape[2:] if len(shape) > 1 else ())
            if ignore and t.size > 1:
                t.reshape(-1)[1] = ignore_index
        w = (rng.random(C) + 0.3).astype(dt) if weight else None
        return (x, t, w, ignore_index, reduction, ls), {}
    return make


def _torch_ce(torch, x, t, w, ignore_index, reduction, ls):
    w = None if w is None else w.detach()       # torch: nll_loss is not differentiable in weight
    return torch.nn.functional.cross_entropy(x, t, weight=w, ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=ls)


def _case(name, make, **kw):
    return OpCase(name, F.cross_entropy_fwd, F.cross_entropy_bwd, make, (0,), _torch_ce, **kw)


CASES = [
    _case("ce_mean", _ce((6, 5))),
    _case("ce_sum_weight_ignore", _ce((7, 4), weight=True, ignore=True, reduction="sum")),
    _case("ce_mean_weight_ignore_ls", _ce((8, 5), weight=True, ignore=True, ls=0.2, ignore_index=3)),
    _case("ce_none_ls", _ce((5, 6), ignore=True, reduction="none", ls=0.1)),
    _case("ce_prob_mean", _ce((6, 5), prob=True)),
    _case("ce_prob_weight_ls_none", _ce((4, 7), prob=True, weight=True, ls=0.3, reduction="none")),
    _case("ce_unbatched", _ce((9,))),
    _case("ce_unbatched_prob_sum", _ce((5,), prob=True, reduction="sum")),
    # (N, C, d1, d2): the class axis is moved last on the host, so these run on the cpu only
    _case("ce_4d_weight_ignore_ls", _ce((2, 5, 3, 2), weight=True, ignore=True, ls=0.15),
          backends=("cpu",)),
    _case("ce_3d_prob_none", _ce((2, 4, 3), prob=True, reduction="none"), backends=("cpu",)),
]
