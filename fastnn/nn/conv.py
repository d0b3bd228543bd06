"""Convolution modules: Conv1d, Conv2d, ConvTranspose2d and DepthwiseSeparableConv2d."""
import math

from .. import functional as F
from ..functional.conv import transpose_output_size
from .._validate import conv_padding, groups_arg, int_arg, pair, single
from . import init
from .module import Module, Parameter, grad_flags

__all__ = ["Conv1d", "Conv2d", "ConvTranspose2d", "DepthwiseSeparableConv2d"]


def _channels(m, in_channels, out_channels, groups, padding_mode):
    m.in_channels = int_arg(in_channels, "in_channels", 1)
    m.out_channels = int_arg(out_channels, "out_channels", 1)
    m.groups = groups_arg(groups)
    if m.in_channels % m.groups:
        raise ValueError(f"in_channels ({m.in_channels}) must be divisible by groups ({m.groups})")
    if m.out_channels % m.groups:
        raise ValueError(f"out_channels ({m.out_channels}) must be divisible by groups ({m.groups})")
    if padding_mode != "zeros":
        raise ValueError(f"padding_mode {padding_mode!r} is not supported (only 'zeros')")
    m.padding_mode = padding_mode


def _init_params(m, shape, n_bias, bias, dtype):
    """torch's _ConvNd.reset_parameters: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    (kaiming_uniform_(a=sqrt(5))), fan_in from the weight's dims 1.. (so a transposed
    conv's fan_in counts its out_channels/groups, as torch's does)."""
    dt = dtype or "float32"
    m.weight = Parameter(init.zeros(shape, dt))
    if bias:
        m.bias = Parameter(init.zeros((n_bias,), dt))
    else:
        m.register_parameter("bias", None)
    _reset_conv(m)


def _reset_conv(m):
    """The draws of _init_params, again, written in place (reset_parameters)."""
    fan_in, _ = init.fan_in_out(m.weight.shape)
    bound = init.kaiming_uniform_bound(fan_in)
    init.uniform_(m.weight, -bound, bound)
    if m.bias is not None:
        bb = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(m.bias, -bb, bb)


class _ConvNd(Module):
    """Forward, backward and repr of Conv1d / Conv2d: the F pair in ``_op`` (fwd, bwd)."""

    def forward(self, x):
        b = self.bias
        y, ctx = self._op[0](x, self.weight.data, None if b is None else b.data, self.stride,
                             self.padding, self.dilation, self.groups)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return _conv_backward(self, self._op[1], dy)

    def reset_parameters(self):
        """torch's init (weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))), in place."""
        _reset_conv(self)

    def extra_repr(self):
        return _conv_repr(self)


class Conv2d(_ConvNd):
    """torch.nn.Conv2d (padding_mode 'zeros'): weight (out, in/groups, kH, kW), bias (out,),
    both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch's kaiming_uniform_(a=sqrt(5)))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", dtype=None):
        super().__init__()
        _channels(self, in_channels, out_channels, groups, padding_mode)
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = pair(stride, "stride")
        self.dilation = pair(dilation, "dilation")
        if isinstance(padding, str):
            conv_padding(padding, self.kernel_size, self.stride, self.dilation)  # validates
            self.padding = padding
        else:
            self.padding = pair(padding, "padding", minimum=0)
        _init_params(self, (self.out_channels, self.in_channels // self.groups) + self.kernel_size,
                     self.out_channels, bias, dtype)

    _op = (F.conv2d_fwd, F.conv2d_bwd)   # a tuple: not bound as methods


def _conv_repr(m, extra=("padding", "dilation")):
    """torch's _ConvNd.extra_repr: the arguments that differ from their defaults."""
    ones = (1,) * len(m.kernel_size)
    s = (f"{m.in_channels}, {m.out_channels}, kernel_size={m.kernel_size}, stride={m.stride}")
    for name in extra:
        v = getattr(m, name)
        default = ones if name == "dilation" else (0,) * len(m.kernel_size)
        if v != default and v != "valid":
            s += f", {name}={v!r}" if isinstance(v, str) else f", {name}={v}"
    if m.groups != 1:
        s += f", groups={m.groups}"
    if m.bias is None:
        s += ", bias=False"
    return s


def _conv_backward(m, bwd, dy):
    dx, dw, db = bwd(m._take(), dy, **grad_flags(m.weight, m.bias))
    m.weight.accumulate_grad(dw)
    if m.bias is not None:
        m.bias.accumulate_grad(db)
    return dx


class Conv1d(_ConvNd):
    """torch.nn.Conv1d (padding_mode 'zeros'): weight (out, in/groups, k), bias (out,), torch's
    init; input (N, C, L) or (C, L).  Runs conv2d's kernels on an (N, C, 1, L) view."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", dtype=None):
        super().__init__()
        _channels(self, in_channels, out_channels, groups, padding_mode)
        self.kernel_size = (single(kernel_size, "kernel_size"),)
        self.stride = (single(stride, "stride"),)
        self.dilation = (single(dilation, "dilation"),)
        if isinstance(padding, str):
            conv_padding(padding, (1,) + self.kernel_size, (1,) + self.stride,
                           (1,) + self.dilation)  # validates
            self.padding = padding
        else:
            self.padding = (single(padding, "padding", minimum=0),)
        _init_params(self, (self.out_channels, self.in_channels // self.groups) + self.kernel_size,
                     self.out_channels, bias, dtype)

    _op = (F.conv1d_fwd, F.conv1d_bwd)   # a tuple: not bound as methods


class ConvTranspose2d(Module):
    """torch.nn.ConvTranspose2d (padding_mode 'zeros'): weight (in, out/groups, kH, kW),
    bias (out,), torch's init.  forward(x, output_size=None): output_size (the (H, W) or a
    full shape) picks output_padding as torch does."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 dtype=None):
        super().__init__()
        _channels(self, in_channels, out_channels, groups, padding_mode)
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = pair(stride, "stride")
        self.dilation = pair(dilation, "dilation")
        if isinstance(padding, str):
            raise ValueError(f"padding must be an int or a pair of ints for ConvTranspose2d, "
                             f"got {padding!r}")
        self.padding = pair(padding, "padding", minimum=0)
        self.output_padding = pair(output_padding, "output_padding", minimum=0)
        for a in (0, 1):
            if self.output_padding[a] >= self.stride[a] and self.output_padding[a] >= self.dilation[a]:
                raise ValueError(f"output_padding {self.output_padding} must be smaller than "
                                 f"either stride {self.stride} or dilation {self.dilation}")
        _init_params(self, (self.in_channels, self.out_channels // self.groups) + self.kernel_size,
                     self.out_channels, bias, dtype)

    def reset_parameters(self):
        """torch's init (fan_in from the weight's dims 1..), drawn again, in place."""
        _reset_conv(self)

    def _output_padding(self, x, output_size):
        if output_size is None:
            return self.output_padding
        size = tuple(int(v) for v in output_size)[-2:]
        if len(size) != 2:
            raise ValueError(f"output_size must end in (H, W), got {output_size!r}")
        out = []
        for a in (0, 1):
            n = x.shape[x.ndim - 2 + a]
            lo = transpose_output_size(n, self.kernel_size[a], self.stride[a], self.padding[a],
                                         0, self.dilation[a])
            hi = lo + self.stride[a] - 1
            if not lo <= size[a] <= hi:
                raise ValueError(f"output_size {tuple(output_size)} is not reachable: dimension "
                                 f"{a} must be in [{lo}, {hi}] for this input")
            out.append(size[a] - lo)
        return tuple(out)

    def forward(self, x, output_size=None):
        b = self.bias
        opad = self._output_padding(x, output_size)
        y, ctx = F.conv_transpose2d_fwd(x, self.weight.data, None if b is None else b.data,
                                        self.stride, self.padding, opad, self.groups,
                                        self.dilation)
        self._keep(ctx)
        return y

    def backward(self, dy):
        return _conv_backward(self, F.conv_transpose2d_bwd, dy)

    def extra_repr(self):
        return _conv_repr(self, ("padding", "output_padding", "dilation"))


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
