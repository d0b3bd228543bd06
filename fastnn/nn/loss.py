"""Loss modules: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, SmoothL1Loss, HuberLoss, BCELoss,
BCEWithLogitsLoss, KLDivLoss.  ``loss = crit(input, target)`` is a Python float (an array for
reduction="none"); ``crit.backward()`` returns d_input."""
import numpy as np

from .. import functional as F
from .._backend import placed
from .._validate import array_of, bool_arg, float_array, positive_float
from .._validate import loss_args as check_loss_args, reduction as check_reduction
from ..functional.loss import _legacy_reduction
from .module import Module

__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
           "BCELoss", "BCEWithLogitsLoss", "KLDivLoss"]


def _weight_buffer(weight, name="weight", one_d=False):
    if weight is None:
        return None
    weight = float_array(array_of(weight), name)
    if one_d and weight.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one weight per class), got shape {tuple(weight.shape)}")
    return placed(weight).clone(weight)


def _as_dtype_of(w, input):
    """A weight buffer cast to the input's dtype when they differ (torch's module behaviour)."""
    dt = getattr(input, "dtype", None)
    if w is not None and dt is not None and np.dtype(dt) != np.dtype(w.dtype):
        return placed(w).cast(w, dt)
    return w


class _Loss(Module):
    """Shared shell: forward keeps the ctx, returns a float (or the per-element array);
    backward(grad_output=None) returns d_input through ``_bwd``."""

    _bwd = staticmethod(F.mse_loss_bwd)

    def __init__(self, size_average=None, reduce=None, reduction="mean", batchmean=False):
        super().__init__()
        self.reduction = check_reduction(
            _legacy_reduction(size_average, reduce, reduction), batchmean)

    def _finish(self, loss, ctx):
        self._keep(ctx)
        if self.reduction == "none":
            return loss
        return placed(loss).scalar_result(loss)

    def backward(self, grad_output=None):
        ctx = self._take()
        if grad_output is None:
            grad_output = 1.0 if len(ctx[2]) == 0 else np.ones(ctx[2], ctx[3])
        return self._bwd(ctx, grad_output)

    def extra_repr(self):
        return f"reduction={self.reduction!r}"


class MSELoss(_Loss):
    """torch.nn.MSELoss: mean of (input - target)^2."""

    def forward(self, input, target):
        return self._finish(*F.mse_loss_fwd(input, target, self.reduction))


class L1Loss(_Loss):
    """torch.nn.L1Loss: mean of |input - target|."""

    def forward(self, input, target):
        return self._finish(*F.l1_loss_fwd(input, target, self.reduction))


class SmoothL1Loss(_Loss):
    """torch.nn.SmoothL1Loss(beta): quadratic below beta, linear above (beta = 0: L1)."""

    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = positive_float(beta, "beta", allow_zero=True)

    def forward(self, input, target):
        return self._finish(*F.smooth_l1_loss_fwd(input, target, self.reduction, self.beta))

    def extra_repr(self):
        return f"reduction={self.reduction!r}, beta={self.beta}"


class HuberLoss(_Loss):
    """torch.nn.HuberLoss(delta): 0.5 d^2 below delta, delta (|d| - delta/2) above."""

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = positive_float(delta, "delta")

    def forward(self, input, target):
        return self._finish(*F.huber_loss_fwd(input, target, self.reduction, self.delta))

    def extra_repr(self):
        return f"reduction={self.reduction!r}, delta={self.delta}"


class BCELoss(_Loss):
    """torch.nn.BCELoss(weight): binary cross-entropy of probabilities (logs clamped at -100);
    ``weight`` (a buffer) broadcasts to the input."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _weight_buffer(weight))

    def forward(self, input, target):
        return self._finish(*F.binary_cross_entropy_fwd(
            input, target, _as_dtype_of(self.weight, input), self.reduction))


class BCEWithLogitsLoss(_Loss):
    """torch.nn.BCEWithLogitsLoss(weight, pos_weight): sigmoid + binary cross-entropy in one
    numerically stable expression; pos_weight (a buffer) weighs the positive term per class
    (broadcast along the last dimension)."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _weight_buffer(weight))
        self.register_buffer("pos_weight", _weight_buffer(pos_weight, "pos_weight"))

    def forward(self, input, target):
        return self._finish(*F.binary_cross_entropy_with_logits_fwd(
            input, target, _as_dtype_of(self.weight, input), self.reduction,
            _as_dtype_of(self.pos_weight, input)))


class KLDivLoss(_Loss):
    """torch.nn.KLDivLoss(reduction, log_target): input holds log-probabilities; "batchmean"
    divides the sum by the batch size (the KL divergence's definition)."""

    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction, batchmean=True)
        self.log_target = bool_arg(log_target, "log_target")

    def forward(self, input, target):
        return self._finish(*F.kl_div_fwd(input, target, self.reduction, self.log_target))

    def extra_repr(self):
        return f"reduction={self.reduction!r}, log_target={self.log_target}"


class NLLLoss(_Loss):
    """torch.nn.NLLLoss(weight, ignore_index): input holds log-probabilities (C,), (N, C) or
    (N, C, d1, ...); target class indices."""

    _bwd = staticmethod(F.nll_loss_bwd)

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.ignore_index = check_loss_args(ignore_index, self.reduction, 0.0)[0]
        self.register_buffer("weight", _weight_buffer(weight, one_d=True))

    def forward(self, input, target):
        return self._finish(*F.nll_loss_fwd(input, target, _as_dtype_of(self.weight, input),
                                            self.ignore_index, self.reduction))

    def extra_repr(self):
        s = f"reduction={self.reduction!r}"
        if self.ignore_index != -100:
            s += f", ignore_index={self.ignore_index}"
        return s


class CrossEntropyLoss(_Loss):
    """torch.nn.CrossEntropyLoss.  ``loss = crit(logits, target)`` is a Python float (an array
    of per-sample losses for reduction="none"); ``crit.backward()`` returns d_logits (scaled by
    an optional upstream gradient, default 1).  ``weight`` is a buffer like torch's, cast to
    the logits' dtype when they differ."""

    _bwd = staticmethod(F.cross_entropy_bwd)

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        Module.__init__(self)
        self.ignore_index, self.reduction, self.label_smoothing = check_loss_args(
            ignore_index, reduction, label_smoothing)
        self.register_buffer("weight", _weight_buffer(weight, one_d=True))

    def forward(self, input, target):
        return self._finish(*F.cross_entropy_fwd(
            input, target, _as_dtype_of(self.weight, input), self.ignore_index, self.reduction,
            self.label_smoothing))

    def extra_repr(self):
        s = f"reduction={self.reduction!r}"
        if self.ignore_index != -100:
            s += f", ignore_index={self.ignore_index}"
        if self.label_smoothing:
            s += f", label_smoothing={self.label_smoothing}"
        return s
