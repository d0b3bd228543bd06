"""Pooling modules (no parameters): MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool2d,
AdaptiveMaxPool2d."""
from .. import functional as F
from .._validate import output_size_pair, pair, single
from .module import Module

__all__ = ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool2d"]


class MaxPool2d(Module):
    """torch.nn.MaxPool2d (stride defaults to kernel_size)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__()
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else pair(stride, "stride")
        self.padding = pair(padding, "padding", minimum=0)
        self.dilation = pair(dilation, "dilation")
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
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else pair(stride, "stride")
        self.padding = pair(padding, "padding", minimum=0)
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


class MaxPool1d(Module):
    """torch.nn.MaxPool1d (stride defaults to kernel_size; return_indices unsupported)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        if return_indices:
            raise ValueError("MaxPool1d: return_indices=True is not supported")
        self.kernel_size = single(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else single(stride, "stride")
        self.padding = single(padding, "padding", minimum=0)
        self.dilation = single(dilation, "dilation")
        self.return_indices = False
        self.ceil_mode = bool(ceil_mode)
        if self.padding > self.kernel_size // 2:
            raise ValueError(f"MaxPool1d: padding {self.padding} must be at most half of "
                             f"kernel_size {self.kernel_size}")

    def forward(self, x):
        y, ctx = F.max_pool1d_fwd(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                  self.ceil_mode)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return F.max_pool1d_bwd(self._take(), dy)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool1d(Module):
    """torch.nn.AvgPool1d (stride defaults to kernel_size)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size = single(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else single(stride, "stride")
        self.padding = single(padding, "padding", minimum=0)
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        if self.padding > self.kernel_size // 2:
            raise ValueError(f"AvgPool1d: padding {self.padding} must be at most half of "
                             f"kernel_size {self.kernel_size}")

    def forward(self, x):
        y, ctx = F.avg_pool1d_fwd(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                  self.count_include_pad)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return F.avg_pool1d_bwd(self._take(), dy)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}")


class _AdaptivePool2d(Module):
    _fwd = _bwd = None

    def __init__(self, output_size):
        super().__init__()
        output_size_pair(output_size, (1, 1))  # validates
        self.output_size = output_size

    def forward(self, x):
        y, ctx = type(self)._fwd(x, self.output_size)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return type(self)._bwd(self._take(), dy)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(_AdaptivePool2d):
    """torch.nn.AdaptiveAvgPool2d(output_size): an int or a pair of ints / None."""
    _fwd = staticmethod(F.adaptive_avg_pool2d_fwd)
    _bwd = staticmethod(F.adaptive_avg_pool2d_bwd)


class AdaptiveMaxPool2d(_AdaptivePool2d):
    """torch.nn.AdaptiveMaxPool2d(output_size, return_indices=False); with return_indices
    forward returns (output, indices) and backward takes d_output."""
    _fwd = staticmethod(F.adaptive_max_pool2d_fwd)
    _bwd = staticmethod(F.adaptive_max_pool2d_bwd)

    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size)
        self.return_indices = bool(return_indices)

    def forward(self, x):
        y, ctx = F.adaptive_max_pool2d_fwd(x, self.output_size)
        self._keep(ctx)
        if self.return_indices:
            idx = ctx[0][1][0]
            return y, (idx.reshape(y.shape) if idx.shape != y.shape else idx)
        return y
