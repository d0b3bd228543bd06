"""Pool family: max_pool2d and avg_pool2d (NCHW, like torch.nn.functional)."""
import numbers

from .._backend import dispatch
from .._validate import float_array
from ._core import grad_in, make_ctx
from .conv import pair

__all__ = ["max_pool2d", "max_pool2d_fwd", "max_pool2d_bwd",
           "avg_pool2d", "avg_pool2d_fwd", "avg_pool2d_bwd", "pool_output_size"]


def pool_output_size(n, k, s, p, d, ceil_mode):
    """torch's pooling_output_shape: with ceil_mode the last window must start inside
    the input or the left padding."""
    eff = d * (k - 1) + 1
    num = n + 2 * p - eff + ((s - 1) if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _geometry(fn, x, kernel_size, stride, padding, dilation, ceil_mode):
    x = float_array(x, "input")
    if x.ndim != 4:
        raise ValueError(f"{fn}: input must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    kernel = pair(kernel_size, "kernel_size")
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = kernel
    else:
        stride = pair(stride, "stride")
    pad = pair(padding, "padding", minimum=0)
    dilation = pair(dilation, "dilation")
    if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
        raise ValueError(f"{fn}: padding {pad} must be at most half of kernel_size {kernel}")
    N, C, H, W = x.shape
    oh = pool_output_size(H, kernel[0], stride[0], pad[0], dilation[0], bool(ceil_mode))
    ow = pool_output_size(W, kernel[1], stride[1], pad[1], dilation[1], bool(ceil_mode))
    if oh < 1 or ow < 1:
        raise ValueError(f"{fn}: kernel_size {kernel} (dilation {dilation}, padding {pad}) is "
                         f"larger than the padded input: input shape {tuple(x.shape)} gives "
                         f"output size {oh}x{ow}")
    return x, kernel, stride, pad, dilation, (oh, ow)


def max_pool2d_fwd(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over each window (padding counts as -inf, NaN propagates) -> (y, ctx)."""
    x, kernel, stride, pad, dilation, out_hw = _geometry("max_pool2d", x, kernel_size, stride,
                                                         padding, dilation, ceil_mode)
    be = dispatch(x)
    y, saved = be.max_pool2d(x, kernel, stride, pad, dilation, out_hw)
    return y, make_ctx(be, saved, y)


def max_pool2d_bwd(ctx, dy):
    """-> d_input (each window's gradient goes to its argmax)."""
    be, saved, dy = grad_in(ctx, dy)
    return be.max_pool2d_backward(dy, saved)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """torch.nn.functional.max_pool2d (stride defaults to kernel_size)."""
    return max_pool2d_fwd(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def avg_pool2d_fwd(x, kernel_size, stride=None, padding=0, ceil_mode=False,
                   count_include_pad=True, divisor_override=None):
    """Mean over each window with torch's divisor rule -> (y, ctx)."""
    x, kernel, stride, pad, _, out_hw = _geometry("avg_pool2d", x, kernel_size, stride,
                                                  padding, 1, ceil_mode)
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, numbers.Integral):
            raise TypeError(f"divisor_override must be an int or None, got "
                            f"{type(divisor_override).__name__}")
        divisor_override = int(divisor_override)
        if divisor_override == 0:
            raise ValueError("divisor_override must be non-zero")
    be = dispatch(x)
    y, saved = be.avg_pool2d(x, kernel, stride, pad, out_hw, bool(count_include_pad),
                             divisor_override)
    return y, make_ctx(be, saved, y)


def avg_pool2d_bwd(ctx, dy):
    """-> d_input."""
    be, saved, dy = grad_in(ctx, dy)
    return be.avg_pool2d_backward(dy, saved)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """torch.nn.functional.avg_pool2d (stride defaults to kernel_size)."""
    return avg_pool2d_fwd(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override)[0]
