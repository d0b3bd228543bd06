"""Loss family: cross_entropy (fused log-softmax + NLL), torch's semantics and normalisation."""
import numbers

import numpy as np

from .._backend import dispatch
from .._validate import float_array, is_device, same_dtype
from ._core import grad_in

__all__ = ["cross_entropy", "cross_entropy_fwd", "cross_entropy_bwd", "check_loss_args"]

_REDUCTIONS = ("none", "mean", "sum")
I64 = np.dtype(np.int64)


def check_loss_args(ignore_index, reduction, label_smoothing):
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real):
        raise TypeError(f"label_smoothing must be a real number, got {type(label_smoothing).__name__}")
    ls = float(label_smoothing)
    if not 0.0 <= ls <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {ls}")
    return int(ignore_index), reduction, ls


def _to_rows(a, C):
    """(N, C, d1, ...) -> (N*d1*..., C) C-contiguous (class axis last)."""
    if a.ndim == 1:
        return a.reshape(1, C)
    if a.ndim == 2:
        return a
    if is_device(a):   # (N, C, S) -> (N, S, C) on the device
        from ..cuda import swap_last_two
        S = int(np.prod(a.shape[2:]))
        return swap_last_two(a.reshape(a.shape[0], C, S)).reshape(a.shape[0] * S, C)
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)).reshape(-1, C)


def _host_target(target):
    if is_device(target):
        from .. import to_numpy
        return to_numpy(target)
    if isinstance(target, np.ndarray):
        return target
    if isinstance(target, numbers.Integral) and not isinstance(target, bool):
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


def cross_entropy_bwd(ctx, d_loss=1.0):
    """-> d_input (the input's shape).  ``d_loss`` may be a Python float for "mean"/"sum"."""
    if not is_device(d_loss) and not isinstance(d_loss, np.ndarray):
        if isinstance(d_loss, bool) or not isinstance(d_loss, (numbers.Real, np.generic)):
            raise TypeError(f"grad_output must be a float or an array, got {type(d_loss).__name__}")
        d_loss = np.asarray(d_loss, dtype=ctx[3])
    be, (saved, in_shape), d_loss = grad_in(ctx, d_loss)
    dx = be.cross_entropy_backward(d_loss.reshape(-1) if d_loss.ndim else d_loss, saved)
    if len(in_shape) == 1:
        return dx.reshape(in_shape)
    if len(in_shape) == 2:
        return dx
    moved = in_shape[:1] + in_shape[2:] + in_shape[1:2]
    if is_device(dx):
        from ..cuda import swap_last_two
        S = int(np.prod(in_shape[2:]))
        return swap_last_two(dx.reshape(in_shape[0], S, in_shape[1])).reshape(in_shape)
    return np.ascontiguousarray(np.moveaxis(dx.reshape(moved), -1, 1))


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """torch.nn.functional.cross_entropy: log-softmax over dim 1 (dim 0 for a (C,) input) and
    the negative log-likelihood of class-index or class-probability targets."""
    return cross_entropy_fwd(input, target, weight, ignore_index, reduction, label_smoothing)[0]
