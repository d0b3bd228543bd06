"""Dense modules: Linear."""
import math

from .. import functional as F
from . import init
from .module import Module, Parameter, grad_flags

__all__ = ["Linear", "Identity"]


class Linear(Module):
    """y = x W^T + b with torch's init: W, b ~ U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features, out_features, bias=True, dtype=None):
        super().__init__()
        from .._validate import int_arg
        self.in_features = int_arg(in_features, "in_features", 0)
        self.out_features = int_arg(out_features, "out_features", 0)
        dt = dtype or "float32"
        self.weight = Parameter(init.zeros((self.out_features, self.in_features), dt))
        if bias:
            self.bias = Parameter(init.zeros((self.out_features,), dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """torch's init, drawn again, in place: weight kaiming_uniform_(a=sqrt(5)), i.e.
        U(-1/sqrt(in_features), 1/sqrt(in_features)), and the bias likewise."""
        bound = init.kaiming_uniform_bound(self.in_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            bb = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            init.uniform_(self.bias, -bb, bb)

    def forward(self, x):
        b = self.bias
        y, ctx = F.linear_fwd(x, self.weight.data, None if b is None else b.data)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dw, db = F.linear_bwd(self._take(), dy, **grad_flags(self.weight, self.bias))
        self.weight.accumulate_grad(dw)
        if self.bias is not None:
            self.bias.accumulate_grad(db)
        return dx

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    def forward(self, x):
        return x

    def backward(self, dy):
        return dy
