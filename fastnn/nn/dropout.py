"""Dropout module."""
from .. import functional as F
from .._validate import probability
from .module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """Inverted dropout in training mode, identity in eval mode (torch.nn.Dropout)."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        self.p = probability(p, "dropout probability p")
        self.inplace = bool(inplace)   # accepted for torch compatibility; outputs are fresh

    def forward(self, x):
        y, ctx = F.dropout_fwd(x, self.p, self.training)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return F.dropout_bwd(self._take(), dy)

    def extra_repr(self):
        return f"p={self.p}"
