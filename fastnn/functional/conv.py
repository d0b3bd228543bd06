"""Conv family: conv2d (NCHW cross-correlation, like torch.nn.functional.conv2d)."""
import numbers

from .._backend import dispatch
from .._validate import float_array, same_dtype
from ._core import grad_in, make_ctx

__all__ = ["conv2d", "conv2d_fwd", "conv2d_bwd", "pair", "conv_padding"]


def pair(v, name, minimum=1):
    """An int or a pair of ints -> (a, b), each >= ``minimum``."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        t = (int(v), int(v))
    else:
        try:
            t = tuple(v)
        except TypeError:
            raise TypeError(f"{name} must be an int or a pair of ints, got {type(v).__name__}") from None
        if len(t) == 1:
            t = t * 2
        if len(t) != 2 or any(isinstance(a, bool) or not isinstance(a, numbers.Integral) for a in t):
            raise TypeError(f"{name} must be an int or a pair of ints, got {v!r}")
        t = (int(t[0]), int(t[1]))
    if t[0] < minimum or t[1] < minimum:
        what = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return t


def conv_padding(padding, kernel, stride, dilation):
    """torch's padding argument -> (top, bottom, left, right).  "same" puts the odd extra
    pixel of an even effective kernel at the bottom/right, as torch does."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"padding='same' is not supported for strided convolutions "
                                 f"(stride={stride})")
            th = dilation[0] * (kernel[0] - 1)
            tw = dilation[1] * (kernel[1] - 1)
            return (th // 2, th - th // 2, tw // 2, tw - tw // 2)
        raise ValueError(f"padding must be an int, a pair of ints, 'same' or 'valid', got {padding!r}")
    ph, pw = pair(padding, "padding", minimum=0)
    return (ph, ph, pw, pw)


def _check(x, weight, bias, stride, padding, dilation, groups):
    x = float_array(x, "input")
    weight = float_array(weight, "weight")
    if x.ndim != 4:
        raise ValueError(f"conv2d: input must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    if weight.ndim != 4:
        raise ValueError(f"conv2d: weight must be 4-D (out_channels, in_channels/groups, kH, kW), "
                         f"got shape {tuple(weight.shape)}")
    same_dtype(x, weight, "weight")
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral):
        raise TypeError(f"groups must be an int, got {type(groups).__name__}")
    groups = int(groups)
    if groups < 1:
        raise ValueError(f"groups must be positive, got {groups}")
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
    if bias is not None:
        bias = float_array(bias, "bias")
        if tuple(bias.shape) != (O,):
            raise ValueError(f"bias must have shape (out_channels,) = ({O},), got {tuple(bias.shape)}")
        same_dtype(x, bias, "bias")
    return x, weight, bias, stride, pad, dilation, groups


def conv2d_fwd(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation of x (N, C, H, W) with weight (O, C/groups, kH, kW) -> (y, ctx)."""
    x, weight, bias, stride, pad, dilation, groups = _check(x, weight, bias, stride, padding,
                                                            dilation, groups)
    be = dispatch(x, weight, bias)
    y, saved = be.conv2d(x, weight, bias, stride, pad, dilation, groups)
    return y, make_ctx(be, saved, y)


def conv2d_bwd(ctx, dy):
    """-> (d_input, d_weight, d_bias or None)."""
    be, saved, dy = grad_in(ctx, dy)
    return be.conv2d_backward(dy, saved)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d: padding is an int, a pair, 'valid' or 'same'."""
    return conv2d_fwd(x, weight, bias, stride, padding, dilation, groups)[0]
