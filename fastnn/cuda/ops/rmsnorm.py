"""RMSNorm family on the GPU: rms_norm over the last D elements.

Forward: one block per row, a block sum of x^2 -> rstd = 1 / sqrt(mean(x^2) + eps), then
y = x * rstd * w.  Backward: one block per row for dx (one block sum: sum(g x), g = dy*w);
d_weight sums dy * x * rstd over fixed row chunks, reduced in order (deterministic).
"""
import math

from .. import _kit
from .._kit import ROW_THREADS, SBUF, THREADS, block_sum, cuda, gid, gsz, kernel

OPS = ("rms_norm", "rms_norm_backward")


@_kit.per_dtype
def _kernels(dt):
    NT, T, zero, one = _kit.scalars(dt)

    @kernel
    def fwd(x, w, y, rstd, R, D, eps, has_w):
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            s = zero
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                s += x[r, j] * x[r, j]
            s = block_sum(s, sbuf)
            rs = one / math.sqrt(s / T(D) + eps)
            if cuda.threadIdx.x == 0:
                rstd[r] = rs
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                v = x[r, j] * rs
                if has_w:
                    v = v * w[j]
                y[r, j] = v

    @kernel
    def bwd(dy, x, w, rstd, dx, R, D, has_w):
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            rs = rstd[r]
            s = zero
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                g = dy[r, j]
                if has_w:
                    g = g * w[j]
                s += g * x[r, j]
            k = block_sum(s, sbuf) * rs * rs * rs / T(D)
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                g = dy[r, j]
                if has_w:
                    g = g * w[j]
                dx[r, j] = rs * g - x[r, j] * k

    @kernel
    def param_partial(dy, x, rstd, pw, R, D, chunk):
        ch = cuda.blockIdx.y
        r0 = ch * chunk
        r1 = min(r0 + chunk, R)
        for c in range(gid(), D, gsz()):
            sw = zero
            for r in range(r0, r1):
                sw += dy[r, c] * (x[r, c] * rstd[r])
            pw[ch, c] = sw

    return _kit.named(fwd=fwd, bwd=bwd, param_partial=param_partial)


def rms_norm(x, weight, D, eps):
    x, weight = _kit.dev(x), _kit.dev(weight)
    dt = _kit.dtype_of(x)
    shape = _kit.shape_of(x)
    n = _kit.numel(shape)
    R = n // D if D else 0
    y = _kit.empty(shape, dt)
    rstd = _kit.empty((R,), dt)
    if n:
        _kernels(dt).fwd[_kit.row_blocks(R), ROW_THREADS](
            _kit.reshape(x, (R, D)), _kit.empty((1,), dt) if weight is None else _kit.flat(weight),
            _kit.reshape(y, (R, D)), rstd, R, D, dt.type(eps), weight is not None)
    return y, (x, weight, rstd, D)


def rms_norm_backward(dy, saved):
    x, weight, rstd, D = saved
    dy = _kit.dev(dy)
    dt = _kit.dtype_of(x)
    shape = _kit.shape_of(x)
    n = _kit.numel(shape)
    R = n // D if D else 0
    dx = _kit.empty(shape, dt)
    ks = _kernels(dt)
    dw = None
    if n:
        dy2, x2 = _kit.reshape(dy, (R, D)), _kit.reshape(x, (R, D))
        w = _kit.empty((1,), dt) if weight is None else _kit.flat(weight)
        ks.bwd[_kit.row_blocks(R), ROW_THREADS](dy2, x2, w, rstd, _kit.reshape(dx, (R, D)), R, D,
                                               weight is not None)
    if weight is not None:
        dw = _kit.empty((D,), dt)
        if n:
            chunk, K = _kit.chunking(R)
            pw = _kit.empty((K, D), dt)
            ks.param_partial[(_kit.blocks_for(D), K), THREADS](dy2, x2, rstd, pw, R, D, chunk)
            _kit.reduce_partials(pw, dw)
        else:
            _kit.fill(dw, 0)
        dw = _kit.reshape(dw, _kit.shape_of(weight))
    return dx, dw
