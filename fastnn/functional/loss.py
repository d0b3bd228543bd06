"""Loss family: cross_entropy (fused log-softmax + NLL), nll_loss and the elementwise losses
(mse, l1, smooth_l1, huber, binary_cross_entropy[_with_logits], kl_div), torch's semantics
and normalisation.  Every loss has the three forms of _core.py; backward returns d_input."""

import numpy as np

from .._backend import dispatch, placed
from .._validate import float_array, same_dtype
from .._validate import bool_arg, is_int, is_real, positive_float, reduction as check_reduction
from .._validate import loss_args as check_loss_args
from ._core import grad_in

__all__ = ["cross_entropy", "cross_entropy_fwd", "cross_entropy_bwd",
           "nll_loss", "nll_loss_fwd", "nll_loss_bwd",
           "mse_loss", "mse_loss_fwd", "mse_loss_bwd", "l1_loss", "l1_loss_fwd", "l1_loss_bwd",
           "smooth_l1_loss", "smooth_l1_loss_fwd", "smooth_l1_loss_bwd",
           "huber_loss", "huber_loss_fwd", "huber_loss_bwd",
           "binary_cross_entropy", "binary_cross_entropy_fwd", "binary_cross_entropy_bwd",
           "binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits_fwd",
           "binary_cross_entropy_with_logits_bwd", "kl_div", "kl_div_fwd", "kl_div_bwd"]

I64 = np.dtype(np.int64)


def _to_rows(a, C):
    """(N, C, d1, ...) -> (N*d1*..., C) C-contiguous (class axis last)."""
    if a.ndim == 1:
        return a.reshape(1, C)
    if a.ndim == 2:
        return a
    S = int(np.prod(a.shape[2:]))     # (N, C, S) -> (N, S, C) where a is
    return placed(a).swap_last_two(a.reshape(a.shape[0], C, S)).reshape(a.shape[0] * S, C)


def _host_target(target):
    target = placed(target).to_host(target)
    if isinstance(target, np.ndarray):
        return target
    if is_int(target):
        return np.asarray(target, dtype=I64)
    raise TypeError(f"target must be an integer array of class indices or a float array of "
                    f"class probabilities, got {type(target).__name__}")


def _check(x, target, weight, ignore_index, reduction, label_smoothing):
    x = float_array(x, "input")
    ignore_index, reduction, label_smoothing = check_loss_args(ignore_index, reduction, label_smoothing)
    shape = tuple(x.shape)
    if len(shape) == 0:
        raise ValueError("input must be (C,), (N, C) or (N, C, d1, ...) logits, got a 0-d array")
    C = shape[0] if len(shape) == 1 else shape[1]
    idx_shape = () if len(shape) == 1 else shape[:1] + shape[2:]
    t = _host_target(target)
    kind = t.dtype.kind
    if kind == "f":
        if tuple(t.shape) != shape:
            raise ValueError(f"probability target must have the input's shape {shape}, "
                             f"got {tuple(t.shape)}")
        t = float_array(t, "target")
        same_dtype(x, t, "target")
        t = _to_rows(t, C)
    elif kind in "iu":
        if tuple(t.shape) != idx_shape:
            raise ValueError(f"class-index target must have shape {idx_shape} for input of shape "
                             f"{shape} (or the input's shape for probability targets), got "
                             f"{tuple(t.shape)}")
        t = np.ascontiguousarray(t, dtype=I64).reshape(-1)
        if t.size:
            bad = (t != ignore_index) & ((t < 0) | (t >= C))
            if bad.any():
                v = int(t[np.argmax(bad)])
                raise IndexError(f"target contains class index {v}, out of range for {C} classes "
                                 f"(expected 0 <= target < {C}, or ignore_index = {ignore_index})")
    else:
        raise TypeError(f"target must be an integer array of class indices (int64) or a float "
                        f"array of class probabilities, got dtype {t.dtype}")
    if weight is not None:
        weight = float_array(weight, "weight")
        if tuple(weight.shape) != (C,):
            raise ValueError(f"weight must have shape (C,) = ({C},), one weight per class, "
                             f"got {tuple(weight.shape)}")
        same_dtype(x, weight, "weight")
    return x, _to_rows(x, C), t, weight, ignore_index, reduction, label_smoothing, idx_shape


def cross_entropy_fwd(input, target, weight=None, ignore_index=-100, reduction="mean",
                      label_smoothing=0.0):
    """-> (loss, ctx): loss is a 0-d array ("mean"/"sum") or one loss per sample ("none",
    the target's shape for class indices, input.shape without dim 1 for probabilities)."""
    x, x2, t, weight, ignore_index, reduction, ls, idx_shape = _check(
        input, target, weight, ignore_index, reduction, label_smoothing)
    be = dispatch(x2, weight)
    loss, saved = be.cross_entropy(x2, t, weight, ignore_index, reduction, ls)
    if reduction == "none":
        loss = loss.reshape(idx_shape)
    return loss, (be, (saved, tuple(x.shape)), loss.shape, loss.dtype)


def _loss_grad(ctx, d_loss):
    """(backend, saved, validated d_loss): a Python float is accepted for "mean"/"sum"."""
    if isinstance(d_loss, np.generic) or not hasattr(d_loss, "shape"):
        if not (is_real(d_loss) or isinstance(d_loss, np.generic)):
            raise TypeError(f"grad_output must be a float or an array, got {type(d_loss).__name__}")
        d_loss = np.asarray(d_loss, dtype=ctx[3])
    return grad_in(ctx, d_loss)


def _from_rows(dx, in_shape):
    """(M, C) rows back to the input's layout (the inverse of _to_rows)."""
    if len(in_shape) == 1:
        return dx.reshape(in_shape)
    if len(in_shape) == 2:
        return dx
    S = int(np.prod(in_shape[2:]))
    return placed(dx).swap_last_two(dx.reshape(in_shape[0], S, in_shape[1])).reshape(in_shape)


def cross_entropy_bwd(ctx, d_loss=1.0):
    """-> d_input (the input's shape).  ``d_loss`` may be a Python float for "mean"/"sum"."""
    be, (saved, in_shape), d_loss = _loss_grad(ctx, d_loss)
    dx = be.cross_entropy_backward(d_loss.reshape(-1) if d_loss.ndim else d_loss, saved)
    return _from_rows(dx, in_shape)


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """torch.nn.functional.cross_entropy: log-softmax over dim 1 (dim 0 for a (C,) input) and
    the negative log-likelihood of class-index or class-probability targets."""
    return cross_entropy_fwd(input, target, weight, ignore_index, reduction, label_smoothing)[0]


# ------------------------------------------------------------------ nll_loss
def nll_loss_fwd(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """-> (loss, ctx); input holds log-probabilities, (C,), (N, C) or (N, C, d1, ...)."""
    t = _host_target(target)
    if t.dtype.kind not in "iu":
        raise TypeError(f"target must be an integer array of class indices (int64), got dtype "
                        f"{t.dtype}")
    x, x2, t, weight, ignore_index, reduction, _, idx_shape = _check(
        input, t, weight, ignore_index, reduction, 0.0)
    be = dispatch(x2, weight)
    loss, saved = be.nll_loss(x2, t, weight, ignore_index, reduction)
    if reduction == "none":
        loss = loss.reshape(idx_shape)
    return loss, (be, (saved, tuple(x.shape)), loss.shape, loss.dtype)


def nll_loss_bwd(ctx, d_loss=1.0):
    """-> d_input (the input's shape)."""
    be, (saved, in_shape), d_loss = _loss_grad(ctx, d_loss)
    dx = be.nll_loss_backward(d_loss.reshape(-1) if d_loss.ndim else d_loss, saved)
    return _from_rows(dx, in_shape)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """torch.nn.functional.nll_loss: -input[i, target_i] (weighted), reduced."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return nll_loss_fwd(input, target, weight, ignore_index, reduction)[0]


# ------------------------------------------------------------------ elementwise losses
def _legacy_reduction(size_average, reduce, reduction):
    """torch's deprecated size_average/reduce pair, mapped onto ``reduction`` as torch does."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _broadcast_arg(w, x, name):
    """An optional per-element weight broadcast to x's shape, C-contiguous, x's dtype."""
    if w is None:
        return None
    w = float_array(w, name)
    same_dtype(x, w, name)
    if tuple(w.shape) == tuple(x.shape):
        return w
    try:
        shape = np.broadcast_shapes(tuple(w.shape), tuple(x.shape))
    except ValueError:
        shape = None
    if shape != tuple(x.shape):
        raise ValueError(f"{name} of shape {tuple(w.shape)} does not broadcast to the input's "
                         f"shape {tuple(x.shape)}")
    return placed(w).broadcast_to(w, x.shape)


def _elementwise_fwd(kind, input, target, weight, pos_weight, param, reduction, batchmean=False,
                     weight_mean=False):
    """weight_mean: torch's mse_loss/l1_loss with a weight divide "mean" by sum(weight)
    (and need the weight in the input's exact shape)."""
    x = float_array(input, "input")
    y = float_array(target, "target")
    reduction = check_reduction(reduction, batchmean)
    if tuple(y.shape) != tuple(x.shape):
        raise ValueError(f"target must have the input's shape {tuple(x.shape)}, got "
                         f"{tuple(y.shape)}")
    same_dtype(x, y, "target")
    if weight_mean and weight is not None and tuple(getattr(weight, "shape", ())) != tuple(x.shape):
        raise ValueError(f"weight must have the input's shape {tuple(x.shape)}, got "
                         f"{tuple(getattr(weight, 'shape', ()))}")
    w = _broadcast_arg(weight, x, "weight")
    pw = _broadcast_arg(pos_weight, x, "pos_weight")
    n = int(np.prod(x.shape))
    if weight_mean and w is not None and reduction == "mean":
        n = float(np.sum(placed(w).to_host(w), dtype=np.float64))
    divisor = {"none": None, "sum": 1, "mean": n,
               "batchmean": x.shape[0] if len(x.shape) else 1}[reduction]
    be = dispatch(x, y, w, pw)
    loss, saved = be.elementwise_loss(kind, x, y, w, pw, param, divisor)
    return loss, (be, saved, loss.shape, loss.dtype)


def _elementwise_bwd(ctx, d_loss=1.0):
    be, saved, d_loss = _loss_grad(ctx, d_loss)
    return be.elementwise_loss_backward(d_loss, saved)


def mse_loss_fwd(input, target, reduction="mean", weight=None):
    """-> (loss, ctx): (input - target)^2 (times weight), reduced ("mean" with a weight:
    divided by sum(weight), as torch)."""
    return _elementwise_fwd("mse", input, target, weight, None, 0.0, reduction, weight_mean=True)


def l1_loss_fwd(input, target, reduction="mean", weight=None):
    """-> (loss, ctx): |input - target| (times weight), reduced."""
    return _elementwise_fwd("l1", input, target, weight, None, 0.0, reduction, weight_mean=True)


def smooth_l1_loss_fwd(input, target, reduction="mean", beta=1.0):
    """-> (loss, ctx): 0.5 d^2 / beta for |d| < beta, else |d| - beta / 2 (beta = 0: L1)."""
    return _elementwise_fwd("smooth_l1", input, target, None, None,
                            positive_float(beta, "beta", allow_zero=True), reduction)


def huber_loss_fwd(input, target, reduction="mean", delta=1.0, weight=None):
    """-> (loss, ctx): 0.5 d^2 for |d| < delta, else delta (|d| - delta / 2)."""
    return _elementwise_fwd("huber", input, target, weight, None,
                            positive_float(delta, "delta"), reduction)


def _check_probabilities(x):
    """torch refuses inputs outside [0, 1] (NaN passes, as there).  Device inputs are not
    scanned: that would cost a device-to-host sync per call; the kernel gives NaN there."""
    bad = placed(x).first_outside(x, 0.0, 1.0)
    if bad is not None:
        raise ValueError(f"input of binary_cross_entropy must hold probabilities in [0, 1], "
                         f"found {float(bad)!r}")


def binary_cross_entropy_fwd(input, target, weight=None, reduction="mean"):
    """-> (loss, ctx): -(y log x + (1 - y) log(1 - x)), each log clamped at -100 (torch)."""
    x = float_array(input, "input")
    _check_probabilities(x)
    return _elementwise_fwd("bce", x, target, weight, None, 0.0, reduction)


def binary_cross_entropy_with_logits_fwd(input, target, weight=None, reduction="mean",
                                         pos_weight=None):
    """-> (loss, ctx): (1 - y) x - (1 + (pos_weight - 1) y) log_sigmoid(x), computed stably."""
    return _elementwise_fwd("bce_logits", input, target, weight, pos_weight, 0.0, reduction)


def kl_div_fwd(input, target, reduction="mean", log_target=False):
    """-> (loss, ctx): target (log target - input) (input holds log-probabilities); with
    log_target, exp(target) (target - input).  "batchmean" divides the sum by input.shape[0]."""
    log_target = bool_arg(log_target, "log_target")
    return _elementwise_fwd("kl_div_log" if log_target else "kl_div", input, target, None, None,
                            0.0, reduction, batchmean=True)


mse_loss_bwd = l1_loss_bwd = smooth_l1_loss_bwd = huber_loss_bwd = _elementwise_bwd
binary_cross_entropy_bwd = binary_cross_entropy_with_logits_bwd = kl_div_bwd = _elementwise_bwd


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """torch.nn.functional.mse_loss."""
    return mse_loss_fwd(input, target, _legacy_reduction(size_average, reduce, reduction),
                        weight)[0]


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """torch.nn.functional.l1_loss."""
    return l1_loss_fwd(input, target, _legacy_reduction(size_average, reduce, reduction),
                       weight)[0]


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """torch.nn.functional.smooth_l1_loss."""
    return smooth_l1_loss_fwd(input, target, _legacy_reduction(size_average, reduce, reduction),
                              beta)[0]


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """torch.nn.functional.huber_loss."""
    return huber_loss_fwd(input, target, reduction, delta, weight)[0]


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """torch.nn.functional.binary_cross_entropy (input: probabilities in [0, 1])."""
    return binary_cross_entropy_fwd(input, target, weight,
                                    _legacy_reduction(size_average, reduce, reduction))[0]


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """torch.nn.functional.binary_cross_entropy_with_logits."""
    return binary_cross_entropy_with_logits_fwd(
        input, target, weight, _legacy_reduction(size_average, reduce, reduction), pos_weight)[0]


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """torch.nn.functional.kl_div (input: log-probabilities)."""
    return kl_div_fwd(input, target, _legacy_reduction(size_average, reduce, reduction),
                      log_target)[0]
