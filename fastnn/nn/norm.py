"""Normalisation modules: LayerNorm, GroupNorm, RMSNorm."""
from .. import functional as F
from .._grad import _tls
from .._validate import normalized_shape_arg
from . import init
from .module import Module, Parameter

__all__ = ["LayerNorm", "GroupNorm", "RMSNorm"]


def _ones_zeros(m):
    """A norm's reset_parameters: weight 1 and bias 0 where it has them, in place."""
    if getattr(m, "weight", None) is not None:
        init.ones_(m.weight)
    if getattr(m, "bias", None) is not None:
        init.zeros_(m.bias)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, dtype=None):
        super().__init__()
        from .._validate import positive_float
        self.normalized_shape = normalized_shape_arg(normalized_shape)
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

    def reset_parameters(self):
        """weight 1, bias 0 (in place)."""
        _ones_zeros(self)

    def __call__(self, x):
        # a leaf: straight to forward, without Module.__call__'s *args/**kwargs packing
        # (~0.3 us of the small-call latency, issue #16); given submodules (or forward
        # hooks), the general call
        if self._modules or self._fhooks is not None:
            return Module.__call__(self, x)
        return self.forward(x)

    def forward(self, x):
        w, b = self.weight, self.bias
        w = None if w is None else w.data
        b = None if b is None else b.data
        if not self.training or _tls.rec is False:    # nothing to keep: the inference kernel
            return F.layer_norm(x, self.normalized_shape, w, b, self.eps)
        y, ctx = F.layer_norm_fwd(x, self.normalized_shape, w, b, self.eps)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return self._grads(F.layer_norm_bwd(self._take(), dy))

    def _backward_plus(self, dy, plus):
        """backward(dy) + plus, the sum made as each row of d_input is (a pre-LN residual
        block's two input gradients).  For a container's backward, when this module has no
        backward hooks (they would be handed d_input alone)."""
        return self._grads(F.layer_norm_bwd(self._take(), dy, plus=plus))

    def _grads(self, grads):
        dx, dw, db = grads
        if self.weight is not None:
            self.weight.accumulate_grad(dw)
        if self.bias is not None:
            self.bias.accumulate_grad(db)
        return dx

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """torch.nn.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True): per-channel
    ``weight`` (ones) and ``bias`` (zeros); input (N, C, *)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, dtype=None):
        super().__init__()
        from .._validate import int_arg, positive_float
        self.num_groups = int_arg(num_groups, "num_groups", 1)
        self.num_channels = int_arg(num_channels, "num_channels", 1)
        if self.num_channels % self.num_groups:
            raise ValueError(f"num_channels ({self.num_channels}) must be divisible by "
                             f"num_groups ({self.num_groups})")
        self.eps = positive_float(eps, "eps")
        self.affine = bool(affine)
        dt = dtype or "float32"
        if self.affine:
            self.weight = Parameter(init.ones((self.num_channels,), dt))
            self.bias = Parameter(init.zeros((self.num_channels,), dt))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        """weight 1, bias 0 (in place)."""
        _ones_zeros(self)

    def forward(self, x):
        nd = getattr(x, "ndim", 0)
        if nd < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm: expected input (N, {self.num_channels}, *), got shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
        w, b = self.weight, self.bias
        y, ctx = F.group_norm_fwd(x, self.num_groups, None if w is None else w.data,
                                  None if b is None else b.data, self.eps)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dw, db = F.group_norm_bwd(self._take(), dy)
        if self.weight is not None:
            self.weight.accumulate_grad(dw)
            self.bias.accumulate_grad(db)
        return dx

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    """torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True): ``weight``
    (ones); eps=None uses the machine epsilon of the input's dtype (torch >= 2.4)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, dtype=None):
        super().__init__()
        from .._validate import positive_float
        self.normalized_shape = normalized_shape_arg(normalized_shape)
        self.eps = None if eps is None else positive_float(eps, "eps")
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine:
            self.weight = Parameter(init.ones(self.normalized_shape, dtype or "float32"))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self):
        """weight 1 (in place)."""
        _ones_zeros(self)

    def forward(self, x):
        w = self.weight
        y, ctx = F.rms_norm_fwd(x, self.normalized_shape, None if w is None else w.data, self.eps)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dw = F.rms_norm_bwd(self._take(), dy)
        if self.weight is not None:
            self.weight.accumulate_grad(dw)
        return dx

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
