"""Activation modules."""
from .. import functional as F
from .module import Module

__all__ = ["GELU", "Softmax", "LogSoftmax"]


class _Elementwise(Module):
    """An activation with no parameters: forward/backward through an F op pair."""

    _fwd = None
    _bwd = None

    def _args(self):
        return ()

    def forward(self, x):
        y, ctx = type(self)._fwd(x, *self._args())
        self._keep(ctx)
        return y

    def backward(self, dy):
        return type(self)._bwd(self._take(), dy)


class GELU(_Elementwise):
    _fwd = staticmethod(F.gelu_fwd)
    _bwd = staticmethod(F.gelu_bwd)

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def _args(self):
        return (self.approximate,)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Softmax(_Elementwise):
    _fwd = staticmethod(F.softmax_fwd)
    _bwd = staticmethod(F.softmax_bwd)

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def _args(self):
        return (self.dim,)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    _fwd = staticmethod(F.log_softmax_fwd)
    _bwd = staticmethod(F.log_softmax_bwd)
