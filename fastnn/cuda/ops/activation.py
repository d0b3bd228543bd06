"""Activation family on the GPU: elementwise grid-stride kernels, one per op and dtype.

Every constant and hyperparameter is a scalar of the input's dtype (``T(0.5)``), so
float32 kernels stay float32 (math.erf / tanh / exp / expm1 / log1p on float32 arguments
lower to erff / tanhf / expf / ...).  Forwards take ``out`` (None, or a C-contiguous
device array of the input's shape to write into, possibly the input itself); an op whose
backward needs the input copies it first when ``out`` aliases it, as the reference does.
prelu's dweight is a per-channel block reduction (deterministic); rrelu draws its slopes
from the same Philox stream as the cpu backend.
"""
import math

import numpy as np

from .. import _kit
from .._kit import (ROW_THREADS, SBUF, THREADS, U8, block_sum, cuda, dm, gid, gsz, int32, kernel,
                    philox4x32)

OPS = ("relu", "relu_backward",
       "leaky_relu", "leaky_relu_backward",
       "prelu", "prelu_backward",
       "rrelu", "rrelu_backward",
       "elu", "elu_backward",
       "gelu", "gelu_backward",
       "silu", "silu_backward",
       "softplus", "softplus_backward",
       "sigmoid", "sigmoid_backward",
       "tanh", "tanh_backward",
       "hardtanh", "hardtanh_backward",
       "hardsigmoid", "hardsigmoid_backward",
       "hardswish", "hardswish_backward",
       "mish", "mish_backward",
       "neg")


@_kit.per_dtype
def _k(dt):
    T = dt.type
    NT = _kit.shared_type(dt)
    zero = T(0)
    half = T(0.5)
    one = T(1)
    k0 = T(math.sqrt(2.0 / math.pi))
    k1 = T(0.044715)
    k3 = T(3 * 0.044715)
    inv_sqrt2 = T(1 / math.sqrt(2.0))
    inv_sqrt_2pi = T(1 / math.sqrt(2 * math.pi))
    u24 = T(2.0 ** -24)
    U64 = np.uint64

    @cuda.jit(device=True)
    def sigm(v):
        return one / (one + math.exp(-v))

    @kernel
    def relu_f(x, y, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            y[i] = zero if v < zero else v

    @kernel
    def relu_b(dy, y, dx, n):
        for i in range(gid(), n, gsz()):
            dx[i] = zero if y[i] <= zero else dy[i]

    @kernel
    def leaky_f(x, y, n, slope):
        for i in range(gid(), n, gsz()):
            v = x[i]
            y[i] = v if v > zero else v * slope

    @kernel
    def leaky_b(dy, s, dx, n, slope):
        for i in range(gid(), n, gsz()):
            g = dy[i]
            dx[i] = g if s[i] > zero else g * slope

    @kernel
    def prelu_f(x, w, y, n, C, inner):
        for i in range(gid(), n, gsz()):
            v = x[i]
            y[i] = v if v > zero else w[dm(dm(i, inner)[0], C)[1]] * v

    @kernel
    def prelu_b(dy, x, w, dx, dw, outer, C, inner):
        # one block per channel: dx for the channel's elements and dw[c] as a block sum
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        m = int32(outer * inner)
        for c in range(cuda.blockIdx.x, C, cuda.gridDim.x):
            wc = w[c]
            s = zero
            for e in range(t, m, cuda.blockDim.x):
                o, ei = dm(e, inner)
                i = (o * C + c) * inner + ei
                v = x[i]
                g = dy[i]
                if v > zero:
                    dx[i] = g
                else:
                    dx[i] = wc * g
                    s += v * g
            s = block_sum(s, sbuf)
            if t == 0:
                dw[c] = s

    @kernel
    def rrelu_f(x, y, noise, n, lower, width, off_lo, off_hi, key0, key1):
        for b in range(gid(), int32((n + 3) >> 2), gsz()):
            r0, r1, r2, r3 = philox4x32(U64(b), off_lo, off_hi, key0, key1)
            for lane in range(4):
                i = 4 * b + lane
                if i < n:
                    r = r0
                    if lane == 1:
                        r = r1
                    elif lane == 2:
                        r = r2
                    elif lane == 3:
                        r = r3
                    v = x[i]
                    a = one
                    if v <= zero:
                        a = lower + width * (T(r >> U8) * u24)
                    noise[i] = a
                    y[i] = v * a

    @kernel
    def mul_b(dy, s, dx, n):
        for i in range(gid(), n, gsz()):
            dx[i] = dy[i] * s[i]

    @kernel
    def elu_f(x, y, n, alpha, scale, input_scale):
        for i in range(gid(), n, gsz()):
            v = x[i]
            if v > zero:
                y[i] = scale * v
            else:
                y[i] = scale * alpha * math.expm1(v * input_scale)

    @kernel
    def elu_b(dy, s, dx, n, from_out, alpha, scale, input_scale):
        for i in range(gid(), n, gsz()):
            g = dy[i]
            v = s[i]
            if v > zero:
                dx[i] = g * scale
            elif from_out:
                dx[i] = g * input_scale * (v + alpha * scale)
            else:
                dx[i] = g * input_scale * alpha * scale * math.exp(v * input_scale)

    @kernel
    def gelu_f(x, y, n, approx):
        for i in range(gid(), n, gsz()):
            v = x[i]
            if approx:
                y[i] = half * v * (one + math.tanh(k0 * (v + k1 * v * v * v)))
            else:
                y[i] = half * v * (one + math.erf(v * inv_sqrt2))

    @kernel
    def gelu_b(dy, x, dx, n, approx):
        for i in range(gid(), n, gsz()):
            v = x[i]
            if approx:
                t = math.tanh(k0 * (v + k1 * v * v * v))
                d = half * (one + t) + half * v * (one - t * t) * k0 * (one + k3 * v * v)
            else:
                d = half * (one + math.erf(v * inv_sqrt2)) + v * math.exp(-half * v * v) * inv_sqrt_2pi
            dx[i] = dy[i] * d

    @kernel
    def silu_f(x, y, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            y[i] = v / (one + math.exp(-v))

    @kernel
    def silu_b(dy, x, dx, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            s = sigm(v)
            dx[i] = dy[i] * s * (one + v * (one - s))

    @kernel
    def softplus_f(x, y, n, beta, threshold):
        for i in range(gid(), n, gsz()):
            v = x[i]
            bx = v * beta
            if bx > threshold:
                y[i] = v
            else:
                y[i] = (max(bx, zero) + math.log1p(math.exp(-abs(bx)))) / beta

    @kernel
    def softplus_b(dy, x, dx, n, beta, threshold):
        for i in range(gid(), n, gsz()):
            bx = x[i] * beta
            g = dy[i]
            dx[i] = g if bx > threshold else g * sigm(bx)

    @kernel
    def sigmoid_f(x, y, n):
        for i in range(gid(), n, gsz()):
            y[i] = sigm(x[i])

    @kernel
    def sigmoid_b(dy, y, dx, n):
        for i in range(gid(), n, gsz()):
            v = y[i]
            dx[i] = dy[i] * v * (one - v)

    @kernel
    def tanh_f(x, y, n):
        for i in range(gid(), n, gsz()):
            y[i] = math.tanh(x[i])

    @kernel
    def tanh_b(dy, y, dx, n):
        for i in range(gid(), n, gsz()):
            v = y[i]
            dx[i] = dy[i] * (one - v * v)

    @kernel
    def neg_f(x, y, n):
        for i in range(gid(), n, gsz()):
            y[i] = -x[i]

    three = T(3)
    six = T(6)
    sixth = T(1.0 / 6.0)
    third = T(1.0 / 3.0)
    two = T(2)
    cap = T(20)

    @kernel
    def hardtanh_f(x, y, n, lo, hi):
        for i in range(gid(), n, gsz()):
            v = x[i]
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            y[i] = v

    @kernel
    def hardtanh_b(dy, y, dx, n, lo, hi):
        for i in range(gid(), n, gsz()):
            v = y[i]
            dx[i] = dy[i] if (v > lo and v < hi) else zero

    @cuda.jit(device=True)
    def relu6_of(v):
        if v < zero:
            v = zero
        if v > six:
            v = six
        return v

    @kernel
    def hardsig_f(x, y, n):
        for i in range(gid(), n, gsz()):
            y[i] = relu6_of(x[i] + three) * sixth

    @kernel
    def hardsig_b(dy, x, dx, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            dx[i] = dy[i] * sixth if (v > -three and v < three) else zero

    @kernel
    def hardswish_f(x, y, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            y[i] = v * relu6_of(v + three) * sixth

    @kernel
    def hardswish_b(dy, x, dx, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            g = dy[i]
            if v <= -three:
                g = zero
            elif not v >= three:          # NaN too: NaN, as torch's vector kernel
                g = g * (v * third + half)
            dx[i] = g

    @cuda.jit(device=True)
    def tanh_softplus(v):
        e = math.exp(v if v < cap else cap)
        m = e * (e + two)
        return m / (m + two)

    @kernel
    def mish_f(x, y, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            y[i] = v * tanh_softplus(v)

    @kernel
    def mish_b(dy, x, dx, n):
        for i in range(gid(), n, gsz()):
            v = x[i]
            t = tanh_softplus(v)
            dx[i] = dy[i] * (t + v * sigm(v) * (one - t * t))

    return {k: v for k, v in locals().items() if isinstance(v, _kit._Kernel)}


# ------------------------------------------------------------------ launch helpers
def _out(x, out):
    """(x, y, aliased): device input, the array to write, whether y is x's memory."""
    x = _kit.dev(x)
    if out is None:
        return x, _kit.empty_like(x), False
    y = _kit.inplace_target(out, "out", [])
    if _kit.shape_of(y) != _kit.shape_of(x) or _kit.dtype_of(y) != _kit.dtype_of(x):
        raise ValueError(f"out must have the input's shape {_kit.shape_of(x)} and dtype "
                         f"{_kit.dtype_of(x)}, got {_kit.shape_of(y)} {_kit.dtype_of(y)}")
    return x, y, _kit.same_memory(x, y)


def _keep_input(x, aliased):
    return _kit.copy(x) if aliased else x


def _run(name, dt, n, *args):
    if n:
        _k(dt)[name][_kit.blocks_for(n), THREADS](*args)


def _fwd(name, x, out, *params, keep="x"):
    """Run forward kernel ``name``; returns (y, what backward reads: the input or y)."""
    x, y, aliased = _out(x, out)
    src = x if keep == "y" else _keep_input(x, aliased)
    dt = _kit.dtype_of(x)
    n = _kit.numel(_kit.shape_of(x))
    _run(name, dt, n, _kit.flat(x), _kit.flat(y), n, *params)
    return y, (y if keep == "y" else src)


def _bwd(name, dy, src, *params):
    dy = _kit.dev(dy)
    dx = _kit.empty_like(src)
    n = _kit.numel(_kit.shape_of(src))
    _run(name, _kit.dtype_of(src), n, _kit.flat(dy), _kit.flat(src), _kit.flat(dx), n, *params)
    return dx


def _t(x, v):
    return np.dtype(x.dtype).type(v)


# ------------------------------------------------------------------ ops
def relu(x, out):
    y, _ = _fwd("relu_f", x, out, keep="y")
    return y, y


def relu_backward(dy, saved):
    return _bwd("relu_b", dy, saved)


def leaky_relu(x, negative_slope, out):
    keep = "y" if negative_slope >= 0 else "x"
    y, src = _fwd("leaky_f", x, out, _t(x, negative_slope), keep=keep)
    return y, (src, negative_slope)


def leaky_relu_backward(dy, saved):
    src, slope = saved
    return _bwd("leaky_b", dy, src, _t(src, slope))


def _prelu_view(shape, c):
    if c == 1:
        return 1, 1, _kit.numel(shape)
    return shape[0], c, _kit.numel(shape[2:])


def prelu(x, weight):
    x, w = _kit.dev(x), _kit.dev(weight)
    y = _kit.empty_like(x)
    shape = _kit.shape_of(x)
    _, C, inner = _prelu_view(shape, _kit.numel(_kit.shape_of(w)))
    n = _kit.numel(shape)
    _run("prelu_f", _kit.dtype_of(x), n, _kit.flat(x), _kit.flat(w), _kit.flat(y), n, C,
         max(inner, 1))
    return y, (x, w)


def prelu_backward(dy, saved):
    x, w = saved
    dy = _kit.dev(dy)
    dt = _kit.dtype_of(x)
    shape = _kit.shape_of(x)
    outer, C, inner = _prelu_view(shape, _kit.numel(_kit.shape_of(w)))
    dx = _kit.empty(shape, dt)
    dw = _kit.empty((C,), dt)
    if _kit.numel(shape):
        _k(dt)["prelu_b"][_kit.row_blocks(C), ROW_THREADS](
            _kit.flat(dy), _kit.flat(x), _kit.flat(w), _kit.flat(dx), dw, outer, C, inner)
    else:
        _kit.fill(dw, 0)
    return dx, _kit.reshape(dw, _kit.shape_of(w))


def rrelu(x, lower, upper, training, seed, offset, out):
    if not training:
        return leaky_relu(x, (lower + upper) / 2.0, out)
    x, y, _ = _out(x, out)
    dt = _kit.dtype_of(x)
    noise = _kit.empty_like(x)
    n = _kit.numel(_kit.shape_of(x))
    if n:
        _k(dt)["rrelu_f"][_kit.blocks_for(_kit.cdiv(n, 4)), THREADS](
            _kit.flat(x), _kit.flat(y), _kit.flat(noise), n, dt.type(lower),
            dt.type(upper - lower), *_kit.philox_args(seed, offset))
    return y, noise


def rrelu_backward(dy, saved):
    if isinstance(saved, tuple):               # eval mode: leaky_relu's saved state
        return leaky_relu_backward(dy, saved)
    return _bwd("mul_b", dy, saved)


def elu(x, alpha, scale, input_scale, out):
    from_out = alpha * scale * input_scale >= 0 and scale > 0
    y, src = _fwd("elu_f", x, out, _t(x, alpha), _t(x, scale), _t(x, input_scale),
                  keep="y" if from_out else "x")
    return y, (src, from_out, alpha, scale, input_scale)


def elu_backward(dy, saved):
    src, from_out, alpha, scale, input_scale = saved
    return _bwd("elu_b", dy, src, from_out, _t(src, alpha), _t(src, scale),
                _t(src, input_scale))


def gelu(x, approximate, out=None):
    approx = approximate == "tanh"
    y, src = _fwd("gelu_f", x, out, approx)
    return y, (src, approx)


def gelu_backward(dy, saved):
    x, approx = saved
    return _bwd("gelu_b", dy, x, approx)


def silu(x, out):
    return _fwd("silu_f", x, out)


def silu_backward(dy, saved):
    return _bwd("silu_b", dy, saved)


def softplus(x, beta, threshold, out):
    y, src = _fwd("softplus_f", x, out, _t(x, beta), _t(x, threshold))
    return y, (src, beta, threshold)


def softplus_backward(dy, saved):
    x, beta, threshold = saved
    return _bwd("softplus_b", dy, x, _t(x, beta), _t(x, threshold))


def sigmoid(x, out):
    return _fwd("sigmoid_f", x, out, keep="y")


def sigmoid_backward(dy, saved):
    return _bwd("sigmoid_b", dy, saved)


def tanh(x, out):
    return _fwd("tanh_f", x, out, keep="y")


def tanh_backward(dy, saved):
    return _bwd("tanh_b", dy, saved)


def hardtanh(x, min_val, max_val, out):
    y, _ = _fwd("hardtanh_f", x, out, _t(x, min_val), _t(x, max_val), keep="y")
    return y, (y, min_val, max_val)


def hardtanh_backward(dy, saved):
    y, lo, hi = saved
    return _bwd("hardtanh_b", dy, y, _t(y, lo), _t(y, hi))


def _from_input(name, fwd_kernel, bwd_kernel):
    """The (op, op_backward) pair of an activation with no parameters whose backward
    reads its input: ``fwd_kernel`` over x, ``bwd_kernel`` over (dy, x)."""
    def op(x, out):
        return _fwd(fwd_kernel, x, out)

    def op_backward(dy, saved):
        return _bwd(bwd_kernel, dy, saved)
    for fn, n in ((op, name), (op_backward, name + "_backward")):
        fn.__name__ = fn.__qualname__ = n
    return op, op_backward


hardsigmoid, hardsigmoid_backward = _from_input("hardsigmoid", "hardsig_f", "hardsig_b")
hardswish, hardswish_backward = _from_input("hardswish", "hardswish_f", "hardswish_b")
mish, mish_backward = _from_input("mish", "mish_f", "mish_b")


def neg(x, out):
    """-x (inference only: returns just the result)."""
    return _fwd("neg_f", x, out, keep="y")[0]
