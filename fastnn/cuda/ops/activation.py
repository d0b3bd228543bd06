"""Activation family on the GPU: elementwise grid-stride kernels, one per op and dtype.

Every constant is typed (``T(0.5)``) so float32 kernels stay float32 (math.erf / tanh /
exp on float32 arguments lower to erff / tanhf / expf).
"""
import math

from .. import _kit
from .._kit import kernel, THREADS, cuda

OPS = ("gelu", "gelu_backward")


@_kit.per_dtype
def _gelu_kernels(dt):
    T = dt.type
    half = T(0.5)
    one = T(1)
    k0 = T(math.sqrt(2.0 / math.pi))
    k1 = T(0.044715)
    k3 = T(3 * 0.044715)
    inv_sqrt2 = T(1 / math.sqrt(2.0))
    inv_sqrt_2pi = T(1 / math.sqrt(2 * math.pi))

    @kernel
    def fwd(x, y, n, approx):
        for i in range(cuda.grid(1), n, cuda.gridsize(1)):
            v = x[i]
            if approx:
                y[i] = half * v * (one + math.tanh(k0 * (v + k1 * v * v * v)))
            else:
                y[i] = half * v * (one + math.erf(v * inv_sqrt2))

    @kernel
    def bwd(dy, x, dx, n, approx):
        for i in range(cuda.grid(1), n, cuda.gridsize(1)):
            v = x[i]
            if approx:
                t = math.tanh(k0 * (v + k1 * v * v * v))
                d = half * (one + t) + half * v * (one - t * t) * k0 * (one + k3 * v * v)
            else:
                d = half * (one + math.erf(v * inv_sqrt2)) + v * math.exp(-half * v * v) * inv_sqrt_2pi
            dx[i] = dy[i] * d

    return fwd, bwd


def gelu(x, approximate, out=None):
    x = _kit.dev(x)
    y = _kit.empty_like(x) if out is None else _kit.dev(out)
    if out is not None and _kit.same_memory(y, x):
        x = _kit.copy(x)   # backward needs the input the forward overwrites
    n = _kit.numel(_kit.shape_of(x))
    approx = approximate == "tanh"
    if n:
        fwd, _ = _gelu_kernels(x.dtype)
        fwd[_kit.blocks_for(n), THREADS](_kit.flat(x), _kit.flat(y), n, approx)
    return y, (x, approx)


def gelu_backward(dy, saved):
    x, approx = saved
    dy = _kit.dev(dy)
    dx = _kit.empty_like(x)
    n = _kit.numel(_kit.shape_of(x))
    if n:
        _, bwd = _gelu_kernels(x.dtype)
        bwd[_kit.blocks_for(n), THREADS](_kit.flat(dy), _kit.flat(x), _kit.flat(dx), n, approx)
    return dx
