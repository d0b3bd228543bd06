"""Loss family, reference: cross_entropy on (M, C) logits, torch's exact normalisation.

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

OPS = ("cross_entropy", "cross_entropy_backward")


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
