"""Pooling modules: MaxPool2d and AvgPool2d (no parameters)."""
from .. import functional as F
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d"]


class MaxPool2d(Module):
    """torch.nn.MaxPool2d (stride defaults to kernel_size)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__()
        self.kernel_size = F.pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else F.pair(stride, "stride")
        self.padding = F.pair(padding, "padding", minimum=0)
        self.dilation = F.pair(dilation, "dilation")
        self.ceil_mode = bool(ceil_mode)
        if self.padding[0] > self.kernel_size[0] // 2 or self.padding[1] > self.kernel_size[1] // 2:
            raise ValueError(f"MaxPool2d: padding {self.padding} must be at most half of "
                             f"kernel_size {self.kernel_size}")

    def forward(self, x):
        y, ctx = F.max_pool2d_fwd(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                  self.ceil_mode)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return F.max_pool2d_bwd(self._take(), dy)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """torch.nn.AvgPool2d (stride defaults to kernel_size)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size = F.pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else F.pair(stride, "stride")
        self.padding = F.pair(padding, "padding", minimum=0)
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override
        if self.padding[0] > self.kernel_size[0] // 2 or self.padding[1] > self.kernel_size[1] // 2:
            raise ValueError(f"AvgPool2d: padding {self.padding} must be at most half of "
                             f"kernel_size {self.kernel_size}")

    def forward(self, x):
        y, ctx = F.avg_pool2d_fwd(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                  self.count_include_pad, self.divisor_override)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return F.avg_pool2d_bwd(self._take(), dy)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}")
