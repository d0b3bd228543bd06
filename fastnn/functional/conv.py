"""Conv family: conv2d (NCHW cross-correlation, like torch.nn.functional.conv2d), conv1d
(run as conv2d on an (N, C, 1, L) view: the same kernels, no copy) and conv_transpose2d
(conv2d's adjoint: its own backend op pair, built on the conv2d kernels)."""
from .._backend import dispatch
from .._validate import conv_padding, float_array, grad_like, groups_arg, pair, param_arrays
from .._validate import same_dtype, single
from ._core import grad_in, make_ctx

__all__ = ["conv2d", "conv2d_fwd", "conv2d_bwd", "conv1d", "conv1d_fwd", "conv1d_bwd",
           "conv_transpose2d", "conv_transpose2d_fwd", "conv_transpose2d_bwd"]


def _check(x, weight, bias, stride, padding, dilation, groups, fn="conv2d"):
    x = float_array(x, "input")
    weight = float_array(weight, "weight")
    if x.ndim != 4:
        raise ValueError(f"{fn}: input must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    if weight.ndim != 4:
        raise ValueError(f"{fn}: weight must be 4-D (out_channels, in_channels/groups, kH, kW), "
                         f"got shape {tuple(weight.shape)}")
    same_dtype(x, weight, "weight")
    groups = groups_arg(groups)
    N, C, H, W = x.shape
    O, Cg, kh, kw = weight.shape
    if C % groups:
        raise ValueError(f"conv2d: groups={groups} must divide the input channels {C} "
                         f"(input shape {tuple(x.shape)})")
    if O % groups:
        raise ValueError(f"conv2d: groups={groups} must divide out_channels = weight.shape[0] = {O} "
                         f"(weight shape {tuple(weight.shape)})")
    if Cg * groups != C:
        raise ValueError(f"conv2d: input has {C} channels (shape {tuple(x.shape)}) but weight "
                         f"{tuple(weight.shape)} with groups={groups} expects "
                         f"{Cg * groups} = weight.shape[1] * groups")
    if kh < 1 or kw < 1:
        raise ValueError(f"conv2d: weight has an empty kernel, shape {tuple(weight.shape)}")
    stride = pair(stride, "stride")
    dilation = pair(dilation, "dilation")
    pad = conv_padding(padding, (kh, kw), stride, dilation)
    ekh, ekw = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    Hp, Wp = H + pad[0] + pad[1], W + pad[2] + pad[3]
    if ekh > Hp or ekw > Wp:
        raise ValueError(f"conv2d: kernel size {ekh}x{ekw} (dilation {dilation}) is larger than "
                         f"the padded input {Hp}x{Wp} (input shape {tuple(x.shape)}, "
                         f"padding {padding!r})")
    bias, = param_arrays(x, (O,), "(out_channels,)", ("bias", bias))
    return x, weight, bias, stride, pad, dilation, groups


def conv2d_fwd(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation of x (N, C, H, W) with weight (O, C/groups, kH, kW) -> (y, ctx)."""
    x, weight, bias, stride, pad, dilation, groups = _check(x, weight, bias, stride, padding,
                                                            dilation, groups)
    be = dispatch(x, weight, bias)
    y, saved = be.conv2d(x, weight, bias, stride, pad, dilation, groups)
    return y, make_ctx(be, saved, y)


def conv2d_bwd(ctx, dy, *, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None).  ``weight_grad`` / ``bias_grad`` False (a
    frozen parameter, torch's requires_grad=False): that gradient is not computed and comes
    back None."""
    be, saved, dy = grad_in(ctx, dy)
    return be.conv2d_backward(dy, saved, bool(weight_grad), bool(bias_grad))


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d: padding is an int, a pair, 'valid' or 'same'."""
    return conv2d_fwd(x, weight, bias, stride, padding, dilation, groups)[0]


# ---------------------------------------------------------------- conv1d
def _conv1d_args(x, weight, stride, padding, dilation):
    x = float_array(x, "input")
    weight = float_array(weight, "weight")
    if x.ndim not in (2, 3):
        raise ValueError(f"conv1d: input must be 2-D (C, L) or 3-D (N, C, L), got shape "
                         f"{tuple(x.shape)}")
    if weight.ndim != 3:
        raise ValueError(f"conv1d: weight must be 3-D (out_channels, in_channels/groups, kernel_size), "
                         f"got shape {tuple(weight.shape)}")
    unbatched = x.ndim == 2
    x3 = x.reshape((1,) + tuple(x.shape)) if unbatched else x
    stride = (1, single(stride, "stride"))
    dilation = (1, single(dilation, "dilation"))
    if not isinstance(padding, str):
        padding = (0, single(padding, "padding", minimum=0))
    x4 = x3.reshape(x3.shape[0], x3.shape[1], 1, x3.shape[2])
    w4 = weight.reshape(weight.shape[0], weight.shape[1], 1, weight.shape[2])
    return x4, w4, stride, padding, dilation, unbatched


def conv1d_fwd(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation of x (N, C, L) or (C, L) with weight (O, C/groups, k) -> (y, ctx).
    Runs conv2d's kernels on the (N, C, 1, L) view (a reshape of contiguous memory)."""
    x4, w4, stride, padding, dilation, unbatched = _conv1d_args(x, weight, stride, padding, dilation)
    y4, ctx4 = conv2d_fwd(x4, w4, bias, stride, padding, dilation, groups)
    N, O, _, L = y4.shape
    y = y4.reshape(O, L) if unbatched else y4.reshape(N, O, L)
    return y, (ctx4, tuple(x.shape), weight.shape, y.shape)


def conv1d_bwd(ctx, dy, *, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None); the flags as conv2d_bwd's."""
    ctx4, x_shape, w_shape, y_shape = ctx
    dy = grad_like(dy, y_shape, ctx4[3])
    dx, dw, db = conv2d_bwd(ctx4, dy.reshape(ctx4[2]), weight_grad=weight_grad,
                            bias_grad=bias_grad)
    return dx.reshape(x_shape), (None if dw is None else dw.reshape(w_shape)), db


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv1d: padding is an int, 'valid' or 'same'."""
    return conv1d_fwd(x, weight, bias, stride, padding, dilation, groups)[0]


# ---------------------------------------------------------------- conv_transpose2d
def transpose_output_size(n, k, s, p, op, d):
    return (n - 1) * s - 2 * p + d * (k - 1) + op + 1


def _check_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation):
    x = float_array(x, "input")
    weight = float_array(weight, "weight")
    if x.ndim != 4:
        raise ValueError(f"conv_transpose2d: input must be 4-D (N, C, H, W), got shape "
                         f"{tuple(x.shape)}")
    if weight.ndim != 4:
        raise ValueError(f"conv_transpose2d: weight must be 4-D (in_channels, out_channels/groups, "
                         f"kH, kW), got shape {tuple(weight.shape)}")
    same_dtype(x, weight, "weight")
    groups = groups_arg(groups)
    N, C, H, W = x.shape
    Ci, Og, kh, kw = weight.shape
    if Ci != C:
        raise ValueError(f"conv_transpose2d: input has {C} channels (shape {tuple(x.shape)}) but "
                         f"weight {tuple(weight.shape)} expects in_channels = weight.shape[0] = {Ci}")
    if C % groups:
        raise ValueError(f"conv_transpose2d: groups={groups} must divide the input channels {C}")
    if kh < 1 or kw < 1 or Og < 1:
        raise ValueError(f"conv_transpose2d: weight has an empty kernel or no output channels, "
                         f"shape {tuple(weight.shape)}")
    stride = pair(stride, "stride")
    dilation = pair(dilation, "dilation")
    if isinstance(padding, str):
        raise ValueError(f"padding must be an int or a pair of ints for conv_transpose2d, "
                         f"got {padding!r}")
    pad = pair(padding, "padding", minimum=0)
    opad = pair(output_padding, "output_padding", minimum=0)
    for a in (0, 1):
        if opad[a] >= stride[a] and opad[a] >= dilation[a]:
            raise ValueError(f"output_padding {opad} must be smaller than either stride {stride} "
                             f"or dilation {dilation}")
    OH = transpose_output_size(H, kh, stride[0], pad[0], opad[0], dilation[0])
    OW = transpose_output_size(W, kw, stride[1], pad[1], opad[1], dilation[1])
    if OH < 1 or OW < 1:
        raise ValueError(f"conv_transpose2d: padding {pad} leaves an empty output {OH}x{OW} "
                         f"(input shape {tuple(x.shape)}, kernel {kh}x{kw})")
    bias, = param_arrays(x, (Og * groups,), "(out_channels,)", ("bias", bias))
    return x, weight, bias, stride, pad, opad, dilation, groups, (OH, OW)


def _transpose_rows(n, n_out, k, s, p, d):
    """Rows the conv2d over an n_out-long output produces with padding p on both sides:
    n + output_padding // s (more than n only when output_padding >= stride, which
    torch allows when dilation is larger still)."""
    return (n_out + 2 * p - d * (k - 1) - 1) // s + 1


def conv_transpose2d_fwd(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1):
    """Transposed 2-D convolution (the gradient of conv2d w.r.t. its input) -> (y, ctx).
    x (N, Cin, H, W), weight (Cin, Cout/groups, kH, kW)."""
    x, weight, bias, stride, pad, opad, dilation, groups, out_hw = _check_transpose(
        x, weight, bias, stride, padding, output_padding, groups, dilation)
    kh, kw = weight.shape[2], weight.shape[3]
    H, W = x.shape[2], x.shape[3]
    rows = _transpose_rows(H, out_hw[0], kh, stride[0], pad[0], dilation[0])
    cols = _transpose_rows(W, out_hw[1], kw, stride[1], pad[1], dilation[1])
    xk = x
    if rows != H or cols != W:
        # the conv2d that maps y onto x yields rows x cols outputs: its extra outputs read
        # past every x position, so x is padded with zeros there (rare: output_padding >= stride)
        import numpy as np
        if type(x) is not np.ndarray:
            raise ValueError("conv_transpose2d: output_padding >= stride is not supported on the "
                             "cuda backend")
        xk = np.zeros(x.shape[:2] + (rows, cols), x.dtype)
        xk[:, :, :H, :W] = x
    be = dispatch(xk, weight, bias)
    y, saved = be.conv_transpose2d(xk, weight, bias, stride, (pad[0], pad[0], pad[1], pad[1]),
                                   out_hw, dilation, groups)
    return y, (make_ctx(be, saved, y), (H, W))


def conv_transpose2d_bwd(ctx, dy, *, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None); the flags as conv2d_bwd's."""
    ctx, (H, W) = ctx
    be, saved, dy = grad_in(ctx, dy)
    dx, dw, db = be.conv_transpose2d_backward(dy, saved, bool(weight_grad), bool(bias_grad))
    if dx.shape[2] != H or dx.shape[3] != W:
        import numpy as np
        dx = np.ascontiguousarray(dx[:, :, :H, :W])
    return dx, dw, db


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """torch.nn.functional.conv_transpose2d (argument order as torch: groups before dilation)."""
    return conv_transpose2d_fwd(x, weight, bias, stride, padding, output_padding, groups,
                                dilation)[0]
