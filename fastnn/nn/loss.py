"""Loss modules: CrossEntropyLoss."""
import numpy as np

from .. import functional as F
from .._validate import float_array, is_device
from .module import Module

__all__ = ["CrossEntropyLoss"]


class CrossEntropyLoss(Module):
    """torch.nn.CrossEntropyLoss.  ``loss = crit(logits, target)`` is a Python float (an array
    of per-sample losses for reduction="none"); ``crit.backward()`` returns d_logits (scaled by
    an optional upstream gradient, default 1).  ``weight`` is a buffer like torch's, cast to
    the logits' dtype when they differ."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.ignore_index, self.reduction, self.label_smoothing = F.check_loss_args(
            ignore_index, reduction, label_smoothing)
        if weight is not None:
            weight = float_array(weight if is_device(weight) else np.asarray(weight), "weight")
            if weight.ndim != 1:
                raise ValueError(f"weight must be 1-D (one weight per class), got shape {tuple(weight.shape)}")
            weight = weight.copy() if not is_device(weight) else weight
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        w = self.weight
        dt = getattr(input, "dtype", None)
        if w is not None and dt is not None and np.dtype(dt) != np.dtype(w.dtype) and not is_device(w):
            w = w.astype(dt)
        loss, ctx = F.cross_entropy_fwd(input, target, w, self.ignore_index, self.reduction,
                                        self.label_smoothing)
        self._keep(ctx)
        if self.reduction == "none" or is_device(loss):
            return loss
        return float(loss)

    def backward(self, grad_output=None):
        ctx = self._take()
        if grad_output is None:
            grad_output = 1.0 if len(ctx[2]) == 0 else np.ones(ctx[2], ctx[3])
        return F.cross_entropy_bwd(ctx, grad_output)

    def extra_repr(self):
        s = f"reduction={self.reduction!r}"
        if self.ignore_index != -100:
            s += f", ignore_index={self.ignore_index}"
        if self.label_smoothing:
            s += f", label_smoothing={self.label_smoothing}"
        return s
