"""Loss family, reference: cross_entropy on (M, C) logits, torch's exact normalisation;
nll_loss on (M, C) log-probabilities; the elementwise losses (MSE, L1, smooth L1, Huber,
BCE, BCE with logits, KL divergence) as one op keyed by ``kind``.

Every form is "loss_i = sum_c a_ic * (lse_i - x_ic)" for nonnegative coefficients a_ic:
  class index t (not ignored):  a_ic = (1 - eps) w_t [c == t] + (eps / C) w_c
  class index t == ignore_index: a_ic = 0
  probabilities q_i:            a_ic = w_c (q_ic (1 - eps) + eps / C)
(w_c = 1 without a weight), so d loss_i / d x_ic = p_ic A_i - a_ic with A_i = sum_c a_ic.
Reduction (torch): "none" -> loss_i; "sum" -> sum_i loss_i; "mean" -> for class indices
sum_i loss_i / sum over non-ignored i of w_{t_i} (the label-smoothing term is divided by
the same sum, as torch does); for probabilities sum_i loss_i / M.  M = 0 or every target
ignored gives NaN for "mean", like torch.
"""
import numpy as np

from ._util import cast, f64

OPS = ("cross_entropy", "cross_entropy_backward", "nll_loss", "nll_loss_backward",
       "elementwise_loss", "elementwise_loss_backward")


def _coefficients(x, target, weight, ignore_index, label_smoothing):
    M, C = x.shape
    w = np.ones(C) if weight is None else f64(weight)
    if target.dtype.kind == "f":
        q = f64(target)
        if label_smoothing > 0:
            q = q * (1 - label_smoothing) + label_smoothing / C
        return q * w, float(M)
    t = target.astype(np.int64)
    valid = t != ignore_index
    tv = np.where(valid, t, 0)
    a = np.zeros((M, C))
    a[np.arange(M), tv] = (1 - label_smoothing) * w[tv]
    if label_smoothing > 0:
        a += (label_smoothing / C) * w[None, :]
    a[~valid] = 0.0
    denom = float(np.sum(w[tv][valid]))
    return a, denom


def cross_entropy(x, target, weight, ignore_index, reduction, label_smoothing):
    z = f64(x)
    M, C = z.shape
    a, denom = _coefficients(x, target, weight, ignore_index, label_smoothing)
    if C:
        m = z.max(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", over="ignore"):
            lse = m + np.log(np.exp(z - m).sum(axis=1, keepdims=True))
    else:
        lse = np.zeros((M, 1))
    with np.errstate(invalid="ignore"):
        # a_ic * (lse - x): a zero coefficient contributes 0 even for an infinite logit
        per = np.where(a != 0, a * (lse - z), 0.0).sum(axis=1)
    if reduction == "none":
        loss = per
        scale = None
    elif reduction == "sum":
        loss = np.asarray(per.sum())
        scale = 1.0
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = np.asarray(per.sum() / denom)
        # every target ignored: the loss is NaN (0/0) and the gradient 0, as torch's
        scale = 1.0 / denom if denom != 0 else 0.0
    return cast(loss, x), (x, target, weight, ignore_index, reduction, label_smoothing, scale)


def cross_entropy_backward(d_loss, saved):
    x, target, weight, ignore_index, reduction, label_smoothing, scale = saved
    z = f64(x)
    M, C = z.shape
    a, _ = _coefficients(x, target, weight, ignore_index, label_smoothing)
    if C:
        m = z.max(axis=1, keepdims=True)
        e = np.exp(z - m)
        p = e / e.sum(axis=1, keepdims=True)
    else:
        p = np.zeros((M, 0))
    A = a.sum(axis=1, keepdims=True)
    g = f64(d_loss).reshape(-1)[:, None] if reduction == "none" else float(f64(d_loss)) * scale
    return cast(g * (p * A - a), x)


# ------------------------------------------------------------------ nll_loss
def nll_loss(x, target, weight, ignore_index, reduction):
    """x (M, C) log-probabilities, target (M,) int64 (valid or ignore_index), weight (C,)
    or None -> (loss, saved); loss_i = -w_t x_it (0 when ignored); "mean" divides by the
    sum of the non-ignored targets' weights (NaN when that is 0, like torch)."""
    z = f64(x)
    M, C = z.shape
    w = np.ones(C) if weight is None else f64(weight)
    t = target.astype(np.int64)
    valid = t != ignore_index
    tv = np.where(valid, t, 0)
    wt = np.where(valid, w[tv] if C else 0.0, 0.0)
    with np.errstate(invalid="ignore"):
        per = -wt * (z[np.arange(M), tv] if C else np.zeros(M))
    per = np.where(valid, per, 0.0)
    denom = float(wt.sum())
    if reduction == "none":
        loss, scale = per, None
    elif reduction == "sum":
        loss, scale = np.asarray(per.sum()), 1.0
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = np.asarray(per.sum() / denom)
        scale = 1.0 / denom if denom != 0 else 0.0
    return cast(loss, x), (x, target, weight, ignore_index, reduction, scale)


def nll_loss_backward(d_loss, saved):
    x, target, weight, ignore_index, reduction, scale = saved
    M, C = x.shape
    w = np.ones(C) if weight is None else f64(weight)
    t = target.astype(np.int64)
    valid = t != ignore_index
    tv = np.where(valid, t, 0)
    g = f64(d_loss).reshape(-1) if reduction == "none" else np.full(M, float(f64(d_loss)) * scale)
    dx = np.zeros((M, C))
    if C:
        dx[np.arange(M), tv] = np.where(valid, -w[tv] * g, 0.0)
    return cast(dx, x)


# ------------------------------------------------------------------ elementwise losses
# kind: "mse", "l1", "smooth_l1" (param = beta), "huber" (param = delta), "bce",
# "bce_logits", "kl_div", "kl_div_log" (log_target=True).  weight and pos_weight are None
# or arrays of x's shape (the shell broadcasts them).  divisor: None for reduction "none",
# else the loss is sum / divisor (1 for "sum", numel for "mean", N for "batchmean").
ELEMENTWISE_KINDS = ("mse", "l1", "smooth_l1", "huber", "bce", "bce_logits", "kl_div",
                     "kl_div_log")


def _terms(kind, x, y, pw, p):
    d = x - y
    a = np.abs(d)
    if kind == "mse":
        return d * d
    if kind == "l1":
        return a
    if kind == "smooth_l1":
        if p == 0:
            return a
        return np.where(a < p, 0.5 * d * d / p, a - 0.5 * p)
    if kind == "huber":
        return np.where(a < p, 0.5 * d * d, p * (a - 0.5 * p))
    if kind == "bce":
        # torch clamps each log at -100, so x = 0 or 1 gives a finite loss
        with np.errstate(divide="ignore"):
            return -(y * np.maximum(np.log(x), -100.0) + (1 - y) * np.maximum(np.log1p(-x), -100.0))
    if kind == "bce_logits":
        # (1 - y) x - lw log_sigmoid(x), lw = 1 + (pw - 1) y, log_sigmoid stable
        log_sig = np.minimum(x, 0.0) - np.log1p(np.exp(-np.abs(x)))
        lw = 1.0 if pw is None else 1.0 + (pw - 1.0) * y
        return (1 - y) * x - lw * log_sig
    if kind == "kl_div":
        # torch: xlogy(y, y) - y x  (0 log 0 = 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ylogy = np.where(y == 0, 0.0, y * np.log(np.where(y == 0, 1.0, y)))
        return ylogy - y * x
    if kind == "kl_div_log":
        return np.exp(y) * (y - x)
    raise ValueError(kind)


def _term_grads(kind, x, y, pw, p):
    d = x - y
    if kind == "mse":
        return 2 * d
    if kind == "l1" or (kind == "smooth_l1" and p == 0):
        # torch's sign: 0 for d = 0 and for NaN
        return (d > 0).astype(np.float64) - (d < 0)
    if kind == "smooth_l1":
        return np.where(d < -p, -1.0, np.where(d > p, 1.0, d / p))
    if kind == "huber":
        return np.where(d < -p, -p, np.where(d > p, p, d))
    if kind == "bce":
        # torch's binary_cross_entropy_backward: (x - y) / max(x (1 - x), 1e-12)
        return d / np.maximum((1 - x) * x, 1e-12)
    if kind == "bce_logits":
        sig = 0.5 * (1 + np.tanh(0.5 * x))
        if pw is None:
            return sig - y
        return (1.0 + (pw - 1.0) * y) * sig - pw * y
    if kind == "kl_div":
        return -y
    if kind == "kl_div_log":
        return -np.exp(y)
    raise ValueError(kind)


def elementwise_loss(kind, x, y, weight, pos_weight, param, divisor):
    """-> (loss, saved): loss of x's shape ("none", divisor None) or a 0-d array."""
    with np.errstate(invalid="ignore", over="ignore"):
        per = _terms(kind, f64(x), f64(y), f64(pos_weight), float(param))
        if weight is not None:
            per = per * f64(weight)
        if divisor is None:
            loss = per
        else:
            with np.errstate(divide="ignore"):
                loss = np.asarray(per.sum() / float(divisor))
    return cast(loss, x), (kind, x, y, weight, pos_weight, param, divisor)


def elementwise_loss_backward(d_loss, saved):
    kind, x, y, weight, pos_weight, param, divisor = saved
    with np.errstate(invalid="ignore", over="ignore"):
        g = _term_grads(kind, f64(x), f64(y), f64(pos_weight), float(param))
        if weight is not None:
            g = g * f64(weight)
        if divisor is None:
            g = g * f64(d_loss)
        else:
            g = g * (float(f64(d_loss)) / float(divisor) if divisor else 0.0)
    return cast(g, x)
