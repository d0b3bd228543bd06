"""Convolution modules: Conv2d and DepthwiseSeparableConv2d."""
import math
import numbers

from .. import functional as F
from .._validate import int_arg
from . import init
from .module import Module, Parameter

__all__ = ["Conv2d", "DepthwiseSeparableConv2d"]


class Conv2d(Module):
    """torch.nn.Conv2d (padding_mode 'zeros'): weight (out, in/groups, kH, kW), bias (out,),
    both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch's kaiming_uniform_(a=sqrt(5)))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", dtype=None):
        super().__init__()
        self.in_channels = int_arg(in_channels, "in_channels", 1)
        self.out_channels = int_arg(out_channels, "out_channels", 1)
        self.groups = int_arg(groups, "groups", 1)
        if self.in_channels % self.groups:
            raise ValueError(f"in_channels ({self.in_channels}) must be divisible by groups ({self.groups})")
        if self.out_channels % self.groups:
            raise ValueError(f"out_channels ({self.out_channels}) must be divisible by groups ({self.groups})")
        if padding_mode != "zeros":
            raise ValueError(f"padding_mode {padding_mode!r} is not supported (only 'zeros')")
        self.kernel_size = F.pair(kernel_size, "kernel_size")
        self.stride = F.pair(stride, "stride")
        self.dilation = F.pair(dilation, "dilation")
        if isinstance(padding, str):
            F.conv_padding(padding, self.kernel_size, self.stride, self.dilation)  # validates
            self.padding = padding
        else:
            self.padding = F.pair(padding, "padding", minimum=0)
        self.padding_mode = padding_mode
        dt = dtype or "float32"
        shape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        fan_in, _ = init.fan_in_out(shape)
        bound = init.kaiming_uniform_bound(fan_in)
        self.weight = Parameter(init.uniform(shape, -bound, bound, dt))
        if bias:
            bb = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            self.bias = Parameter(init.uniform((self.out_channels,), -bb, bb, dt))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        b = self.bias
        y, ctx = F.conv2d_fwd(x, self.weight.data, None if b is None else b.data, self.stride,
                              self.padding, self.dilation, self.groups)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dw, db = F.conv2d_bwd(self._take(), dy)
        self.weight.accumulate_grad(dw)
        if self.bias is not None:
            self.bias.accumulate_grad(db)
        return dx

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding not in ((0, 0), "valid"):
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class DepthwiseSeparableConv2d(Module):
    """``depthwise`` (Conv2d with groups=in_channels) then ``pointwise`` (1x1 Conv2d)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 bias=True, dtype=None):
        super().__init__()
        self.depthwise = Conv2d(in_channels, in_channels, kernel_size, stride, padding, dilation,
                                groups=in_channels, bias=bias, dtype=dtype)
        self.pointwise = Conv2d(in_channels, out_channels, 1, bias=bias, dtype=dtype)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))

    def backward(self, dy):
        return self.depthwise.backward(self.pointwise.backward(dy))
