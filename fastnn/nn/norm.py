"""Normalisation modules: LayerNorm."""
from .. import functional as F
from . import init
from .module import Module, Parameter

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, dtype=None):
        super().__init__()
        from .._validate import positive_float
        self.normalized_shape = F.normalized_shape_tuple(normalized_shape)
        self.eps = positive_float(eps, "eps")
        self.elementwise_affine = bool(elementwise_affine)
        dt = dtype or "float32"
        if self.elementwise_affine:
            self.weight = Parameter(init.ones(self.normalized_shape, dt))
            if bias:
                self.bias = Parameter(init.zeros(self.normalized_shape, dt))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        w, b = self.weight, self.bias
        y, ctx = F.layer_norm_fwd(x, self.normalized_shape, None if w is None else w.data,
                                  None if b is None else b.data, self.eps)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dw, db = F.layer_norm_bwd(self._take(), dy)
        if self.weight is not None:
            self.weight.accumulate_grad(dw)
        if self.bias is not None:
            self.bias.accumulate_grad(db)
        return dx

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
