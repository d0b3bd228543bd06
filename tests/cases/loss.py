import numpy as np

from reliability_registry import op


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


def _case(name, make, **kw):
    return op("cross_entropy").case(name, make, **kw)


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


# ------------------------------------------------------------------ nll_loss
def _nll(shape, weight=False, ignore=False, reduction="mean", ignore_index=-100):
    def make(rng, dt):
        x = rng.standard_normal(shape).astype(dt)
        C = shape[0] if len(shape) == 1 else shape[1]
        t = rng.integers(0, C, shape[:1] + shape[2:] if len(shape) > 1 else ())
        if ignore and t.size > 1:
            t.reshape(-1)[1] = ignore_index
        w = (rng.random(C) + 0.3).astype(dt) if weight else None
        return (x, t, w, ignore_index, reduction), {}
    return make


def _nll_case(name, make, **kw):
    return op("nll_loss").case(name, make, **kw)


CASES += [
    _nll_case("nll_mean", _nll((6, 5))),
    _nll_case("nll_sum_weight_ignore", _nll((7, 4), weight=True, ignore=True, reduction="sum")),
    _nll_case("nll_mean_weight_ignore", _nll((8, 5), weight=True, ignore=True, ignore_index=2)),
    _nll_case("nll_none", _nll((5, 6), ignore=True, reduction="none")),
    _nll_case("nll_unbatched", _nll((9,))),
    _nll_case("nll_4d_weight", _nll((2, 5, 3, 2), weight=True, ignore=True), backends=("cpu",)),
]


# ------------------------------------------------------------------ elementwise losses
def _pair(shape, x_kind="normal", y_kind="normal", weight=False, pos_weight=False):
    """(input, target[, weight, pos_weight]) of one shape; kinds pick the value ranges."""
    def values(rng, kind, dt):
        if kind == "normal":
            return np.asarray(rng.standard_normal(shape) * 2, dt)
        if kind == "prob":     # probabilities away from 0 and 1 (finite differences)
            return np.asarray(0.05 + 0.9 * rng.random(shape), dt)
        if kind == "logprob":
            return np.asarray(np.log(0.05 + 0.9 * rng.random(shape)), dt)
        raise ValueError(kind)

    def make(rng, dt):
        x, y = values(rng, x_kind, dt), values(rng, y_kind, dt)
        w = (rng.random(shape) + 0.3).astype(dt) if weight else None
        pw = (rng.random(shape[-1:]) + 0.5).astype(dt) if pos_weight else None
        return x, y, w, pw
    return make


def _ew_case(name, op_name, shape, args=lambda x, y, w, pw: (x, y), kw=None,
             x_kind="normal", y_kind="normal", weight=False, pos_weight=False, **case_kw):
    """One elementwise-loss case of op ``op_name``: F.<op>_fwd(*args(x, y, w, pw), **kw)."""
    pair = _pair(shape, x_kind, y_kind, weight, pos_weight)
    kw = dict(kw or {})

    def make(rng, dt):
        x, y, w, pw = pair(rng, dt)
        return args(x, y, w, pw), dict(kw)
    return op(op_name).case(name, make, **case_kw)


CASES += [
    _ew_case("mse_mean", "mse_loss", (4, 5)),
    _ew_case("mse_sum_3d", "mse_loss", (2, 3, 4), kw=dict(reduction="sum")),
    _ew_case("mse_none_weight", "mse_loss", (3, 5), weight=True,
             args=lambda x, y, w, pw: (x, y, "none", w)),
    _ew_case("mse_mean_weight", "mse_loss", (3, 5), weight=True,
             args=lambda x, y, w, pw: (x, y, "mean", w)),
    _ew_case("l1_mean", "l1_loss", (4, 5)),
    _ew_case("l1_none_1d", "l1_loss", (7,), kw=dict(reduction="none")),
    _ew_case("smooth_l1_mean_beta", "smooth_l1_loss", (5, 6),
             kw=dict(reduction="mean", beta=0.7)),
    _ew_case("smooth_l1_sum_beta0", "smooth_l1_loss", (5, 6),
             kw=dict(reduction="sum", beta=0.0)),
    _ew_case("huber_none_delta", "huber_loss", (4, 6),
             kw=dict(reduction="none", delta=1.5)),
    _ew_case("huber_mean_weight", "huber_loss", (4, 6), weight=True,
             args=lambda x, y, w, pw: (x, y, "mean", 0.5, w)),
    _ew_case("bce_mean", "binary_cross_entropy", (4, 5),
             x_kind="prob", y_kind="prob"),
    _ew_case("bce_weight_sum", "binary_cross_entropy", (4, 5),
             x_kind="prob", y_kind="prob", weight=True,
             args=lambda x, y, w, pw: (x, y, w, "sum")),
    _ew_case("bce_logits_mean", "binary_cross_entropy_with_logits", (4, 5), y_kind="prob"),
    _ew_case("bce_logits_weight_pos_weight_none", "binary_cross_entropy_with_logits", (3, 4, 5), y_kind="prob", weight=True,
             pos_weight=True, args=lambda x, y, w, pw: (x, y, w, "none", pw)),
    _ew_case("bce_logits_pos_weight_sum", "binary_cross_entropy_with_logits", (6, 3), y_kind="prob", pos_weight=True,
             args=lambda x, y, w, pw: (x, y, None, "sum", pw)),
    _ew_case("kl_div_batchmean", "kl_div", (4, 5), x_kind="logprob",
             y_kind="prob", kw=dict(reduction="batchmean")),
    _ew_case("kl_div_mean", "kl_div", (4, 5), x_kind="logprob", y_kind="prob"),
    _ew_case("kl_div_log_target_sum", "kl_div_log_target", (3, 2, 4), x_kind="logprob",
             y_kind="logprob", kw=dict(reduction="sum", log_target=True)),
    _ew_case("kl_div_none", "kl_div", (3, 4), x_kind="logprob", y_kind="prob",
             kw=dict(reduction="none")),
]
