"""Dense family, reference: y = x W^T + b."""
import numpy as np

from ._util import cast, f64

OPS = ("linear", "linear_backward", "linear_act", "linear_act_backward", "linear_backward_act",
       "linear_residual", "linear_act_infer", "skinny_linear", "pack_linear_weight",
       "packed_linear_infer")


def linear(x, weight, bias):
    y = f64(x) @ f64(weight).T
    if bias is not None:
        y = y + f64(bias)
    return cast(y, x), (x, weight, bias is not None)


def linear_backward(dy, saved, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None); ``weight_grad`` / ``bias_grad`` False: that
    gradient is not computed (a frozen parameter) and comes back None."""
    x, weight, has_bias = saved
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))  # not -1: zero-size dims are allowed
    g = f64(dy).reshape(rows, weight.shape[0])
    dx = (g @ f64(weight)).reshape(x.shape)
    dw = g.T @ f64(x).reshape(rows, weight.shape[1]) if weight_grad else None
    db = g.sum(axis=0) if has_bias and bias_grad else None
    return cast(dx, x), cast(dw, x), cast(db, x)


_TRAIN_ACT = {"gelu": "none", "gelu_tanh": "tanh"}


def _approximate(activation):
    """gelu's ``approximate`` for a fused training activation ("gelu", "gelu_tanh")."""
    if activation not in _TRAIN_ACT:
        raise ValueError(f"activation must be 'gelu' or 'gelu_tanh', got {activation!r}")
    return _TRAIN_ACT[activation]


def linear_act(x, weight, bias, activation):
    """h = act(x W^T + b) for training, activation "gelu" (erf) or "gelu_tanh" -> (h,
    saved); saved = (x, weight, has_bias, u, activation), u = x W^T + b (the activation's
    input, rounded to x's dtype as linear returns it)."""
    from .activation import gelu
    approximate = _approximate(activation)
    u, saved = linear(x, weight, bias)
    return gelu(u, approximate, None)[0], saved + (u, activation)


def linear_act_backward(dh, saved, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None): d_u = dh act'(u), then linear_backward."""
    from .activation import gelu_backward
    x, weight, has_bias, u, activation = saved
    du = gelu_backward(dh, (u, _approximate(activation) == "tanh"))
    return linear_backward(du, (x, weight, has_bias), weight_grad, bias_grad)


def linear_backward_act(dy, saved, u, activation, weight_grad=True, bias_grad=True):
    """linear_backward for a layer whose input was act(u) (linear_act's output): d_input
    comes back multiplied by act'(u), the gradient of u."""
    from .activation import gelu_backward
    approximate = _approximate(activation)
    dx, dw, db = linear_backward(dy, saved, weight_grad, bias_grad)
    return gelu_backward(dx, (u, approximate == "tanh")), dw, db


def linear_residual(x, weight, bias, residual):
    """y = x W^T + b + residual (residual: y's shape) -> (y, saved), saved as linear's (the
    residual's gradient is d_y itself).  y rounds as linear's output plus the residual."""
    y, saved = linear(x, weight, bias)
    return cast(f64(y) + f64(residual), x), saved


def linear_act_infer(x, weight_t, bias, activation):
    """act(x weight_t + b), weight_t (in, out): the inference GEMM with its bias and
    activation fused ("none", "relu", "gelu" (erf), "gelu_tanh")."""
    from .activation import gelu, relu
    y = f64(x) @ f64(weight_t)
    if bias is not None:
        y = y + f64(bias)
    if activation == "relu":
        y = relu(y, None)[0]
    elif activation in ("gelu", "gelu_tanh"):
        y = gelu(y, "tanh" if activation == "gelu_tanh" else "none", None)[0]
    elif activation != "none":
        raise ValueError(f"unknown activation {activation!r}")
    return cast(y, x)


def skinny_linear(x, weight, bias, weight_in_out):
    """The few-row product of decoding, inference only: x (M, in) @ weight (in, out) when
    ``weight_in_out`` (GPT-2's Conv1D layout), else x @ weight (out, in)^T; + bias."""
    w = f64(weight) if weight_in_out else f64(weight).T
    y = f64(x) @ w
    if bias is not None:
        y = y + f64(bias)
    return cast(y, x)


PANEL = 16   # columns per panel of a packed weight


def pack_linear_weight(weight, weight_in_out):
    """The weight's column panels (ceil(out / 16), in, 16), zero past out: packed[p, k, j] =
    W[k, 16 p + j] with W = weight (in, out) when ``weight_in_out``, else weight.T."""
    w = np.asarray(weight) if weight_in_out else np.asarray(weight).T
    K, N = w.shape
    P = -(-N // PANEL)
    pad = np.zeros((K, P * PANEL), w.dtype)
    pad[:, :N] = w
    return np.ascontiguousarray(pad.reshape(K, P, PANEL).transpose(1, 0, 2))


def packed_linear_infer(x, packed, n_out, bias, activation):
    """act(x W + b) with W unpacked from pack_linear_weight's panels (the first n_out
    columns); activation as linear_act_infer's."""
    P, K, nr = packed.shape
    w = np.asarray(packed).transpose(1, 0, 2).reshape(K, P * nr)[:, :n_out]
    return linear_act_infer(x, w, bias, activation)
