"""Pool family: max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d (NCHW) and
max_pool1d / avg_pool1d (run as the 2-d pools on an (N, C, 1, L) view), like
torch.nn.functional."""
from .._backend import dispatch
from .._validate import float_array, grad_like, int_arg, output_size_pair, pair, single
from ._core import grad_in, make_ctx

__all__ = ["max_pool2d", "max_pool2d_fwd", "max_pool2d_bwd",
           "avg_pool2d", "avg_pool2d_fwd", "avg_pool2d_bwd",
           "adaptive_avg_pool2d", "adaptive_avg_pool2d_fwd", "adaptive_avg_pool2d_bwd",
           "adaptive_max_pool2d", "adaptive_max_pool2d_fwd", "adaptive_max_pool2d_bwd",
           "max_pool1d", "max_pool1d_fwd", "max_pool1d_bwd",
           "avg_pool1d", "avg_pool1d_fwd", "avg_pool1d_bwd"]


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
        divisor_override = int_arg(divisor_override, "divisor_override", what="an int or None")
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


# ---------------------------------------------------------------- adaptive pooling
def _adaptive_input(fn, x):
    x = float_array(x, "input")
    if x.ndim not in (3, 4):
        raise ValueError(f"{fn}: input must be 3-D (C, H, W) or 4-D (N, C, H, W), got shape "
                         f"{tuple(x.shape)}")
    for d in range(x.ndim - 3, x.ndim):
        if x.shape[d] == 0:
            raise ValueError(f"{fn}: input must have non-zero size in its non-batch dimensions, "
                             f"got shape {tuple(x.shape)}")
    return x, (x.reshape((1,) + tuple(x.shape)) if x.ndim == 3 else x)


def _adaptive_fwd(fn, op, x, output_size):
    x, x4 = _adaptive_input(fn, x)
    out_hw = output_size_pair(output_size, x4.shape[2:])
    be = dispatch(x4)
    y4, saved = getattr(be, op)(x4, out_hw)
    y = y4.reshape(y4.shape[1:]) if x.ndim == 3 else y4
    return y, (make_ctx(be, saved, y4), y.shape, x.shape)


def _adaptive_bwd(op, ctx, dy):
    ctx4, y_shape, x_shape = ctx
    dy = grad_like(dy, y_shape, ctx4[3])
    be, saved, dy4 = grad_in(ctx4, dy.reshape(ctx4[2]))
    return getattr(be, op)(dy4, saved).reshape(x_shape)


def adaptive_avg_pool2d_fwd(x, output_size):
    """Mean over torch's adaptive windows (rows floor(p*H/OH) .. ceil((p+1)*H/OH)) -> (y, ctx)."""
    return _adaptive_fwd("adaptive_avg_pool2d", "adaptive_avg_pool2d", x, output_size)


def adaptive_avg_pool2d_bwd(ctx, dy):
    """-> d_input."""
    return _adaptive_bwd("adaptive_avg_pool2d_backward", ctx, dy)


def adaptive_avg_pool2d(x, output_size):
    """torch.nn.functional.adaptive_avg_pool2d (output_size entries may be None)."""
    return adaptive_avg_pool2d_fwd(x, output_size)[0]


def adaptive_max_pool2d_fwd(x, output_size):
    """Max over torch's adaptive windows (NaN propagates, ties keep the first) -> (y, ctx)."""
    return _adaptive_fwd("adaptive_max_pool2d", "adaptive_max_pool2d", x, output_size)


def adaptive_max_pool2d_bwd(ctx, dy):
    """-> d_input (each window's gradient goes to its argmax)."""
    return _adaptive_bwd("adaptive_max_pool2d_backward", ctx, dy)


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """torch.nn.functional.adaptive_max_pool2d; with return_indices also the int64 argmax
    of each window as the flat index h*W + w inside its input plane (torch's indices)."""
    y, ctx = adaptive_max_pool2d_fwd(x, output_size)
    if not return_indices:
        return y
    idx = ctx[0][1][0]
    return y, (idx.reshape(y.shape) if idx.shape != y.shape else idx)


# ---------------------------------------------------------------- 1-d pooling
def _pool1d_input(fn, x):
    x = float_array(x, "input")
    if x.ndim not in (2, 3):
        raise ValueError(f"{fn}: input must be 2-D (C, L) or 3-D (N, C, L), got shape "
                         f"{tuple(x.shape)}")
    x3 = x.reshape((1,) + tuple(x.shape)) if x.ndim == 2 else x
    return x, x3.reshape(x3.shape[0], x3.shape[1], 1, x3.shape[2])


def _pool1d_stride(stride, kernel):
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        return kernel
    return single(stride, "stride")


def _pool1d_out(x, y4, ctx4):
    y = y4.reshape(y4.shape[1], y4.shape[3]) if x.ndim == 2 else y4.reshape(
        y4.shape[0], y4.shape[1], y4.shape[3])
    return y, (ctx4, y.shape, x.shape)


def _pool1d_bwd(bwd2d, ctx, dy):
    ctx4, y_shape, x_shape = ctx
    dy = grad_like(dy, y_shape, ctx4[3])
    return bwd2d(ctx4, dy.reshape(ctx4[2])).reshape(x_shape)


def max_pool1d_fwd(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over windows of x (N, C, L) or (C, L) -> (y, ctx): max_pool2d's kernels on the
    (N, C, 1, L) view."""
    x, x4 = _pool1d_input("max_pool1d", x)
    k = single(kernel_size, "kernel_size")
    y4, ctx4 = max_pool2d_fwd(x4, (1, k), (1, _pool1d_stride(stride, k)),
                              (0, single(padding, "padding", 0)),
                              (1, single(dilation, "dilation")), ceil_mode)
    return _pool1d_out(x, y4, ctx4)


def max_pool1d_bwd(ctx, dy):
    """-> d_input."""
    return _pool1d_bwd(max_pool2d_bwd, ctx, dy)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """torch.nn.functional.max_pool1d (stride defaults to kernel_size)."""
    if return_indices:
        raise ValueError("max_pool1d: return_indices=True is not supported")
    return max_pool1d_fwd(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def avg_pool1d_fwd(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over windows of x (N, C, L) or (C, L) -> (y, ctx) (avg_pool2d's kernels)."""
    x, x4 = _pool1d_input("avg_pool1d", x)
    k = single(kernel_size, "kernel_size")
    y4, ctx4 = avg_pool2d_fwd(x4, (1, k), (1, _pool1d_stride(stride, k)),
                              (0, single(padding, "padding", 0)), ceil_mode, count_include_pad)
    return _pool1d_out(x, y4, ctx4)


def avg_pool1d_bwd(ctx, dy):
    """-> d_input."""
    return _pool1d_bwd(avg_pool2d_bwd, ctx, dy)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """torch.nn.functional.avg_pool1d (stride defaults to kernel_size)."""
    return avg_pool1d_fwd(x, kernel_size, stride, padding, ceil_mode, count_include_pad)[0]
