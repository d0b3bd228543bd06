"""Batch normalisation modules: BatchNorm1d ((N, C) or (N, C, L)) and BatchNorm2d ((N, C, H, W)).

torch's names and state: ``weight``, ``bias`` (affine), buffers ``running_mean``,
``running_var`` and ``num_batches_tracked`` (int64, 0-d) when track_running_stats.
momentum=None makes the running statistics a cumulative average (factor
1 / num_batches_tracked)."""

import numpy as np

from .. import functional as F
from .._validate import int_arg, positive_float, real
from . import init
from .module import Module, Parameter

__all__ = ["BatchNorm1d", "BatchNorm2d"]


class _BatchNorm(Module):
    _ndims = ()
    _what = ""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 dtype=None):
        super().__init__()
        self.num_features = int_arg(num_features, "num_features", 1)
        self.eps = positive_float(eps, "eps")
        if momentum is not None:
            momentum = real(momentum, "momentum", what="a float or None")
        self.momentum = momentum
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        dt = dtype or "float32"
        C = self.num_features
        if self.affine:
            self.weight = Parameter(init.ones((C,), dt))
            self.bias = Parameter(init.zeros((C,), dt))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", init.zeros((C,), dt))
            self.register_buffer("running_var", init.ones((C,), dt))
            self.register_buffer("num_batches_tracked", np.array(0, dtype=np.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        """running_mean 0, running_var 1, num_batches_tracked 0 (in place, where they live)."""
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            self.num_batches_tracked[...] = 0

    def reset_parameters(self):
        """torch's: the running statistics reset, weight 1, bias 0 (in place)."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, x):
        nd = getattr(x, "ndim", None)
        if nd not in self._ndims:
            raise ValueError(f"{type(self).__name__}: expected {self._what} input, got shape "
                             f"{tuple(getattr(x, 'shape', ()))}")

    def forward(self, x):
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked[...] += 1
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        w, b = self.weight, self.bias
        y, ctx = F.batch_norm_fwd(x, self.running_mean if track else None,
                                  self.running_var if track else None,
                                  None if w is None else w.data, None if b is None else b.data,
                                  use_batch, factor, self.eps)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dw, db = F.batch_norm_bwd(self._take(), dy)
        if self.weight is not None:
            self.weight.accumulate_grad(dw)
            self.bias.accumulate_grad(db)
        return dx

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    _ndims = (2, 3)
    _what = "2-D (N, C) or 3-D (N, C, L)"


class BatchNorm2d(_BatchNorm):
    _ndims = (4,)
    _what = "4-D (N, C, H, W)"
