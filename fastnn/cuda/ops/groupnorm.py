"""GroupNorm family on the GPU: group_norm over (N, C, S) with C split into G groups.

Forward: one block per (n, g) block of M = (C/G)*S contiguous elements (layer_norm's
Welford + Chan block statistics, fastnn/cuda/_kit.welford), then the normalise + per-channel
affine pass.  Backward: one block per (n, g) for dx (two block sums: sum(g), sum(g*xhat),
g = dy*w[c]); the parameter gradients from one block per (n, c) (sums of dy*xhat and dy
over S), reduced over n in order (deterministic, no atomics).
"""
import math

from .. import _kit
from .._kit import ROW_THREADS, SBUF, block_sum, cuda, dm, kernel

OPS = ("group_norm", "group_norm_backward")


@_kit.per_dtype
def _kernels(dt):
    NT, T, zero, one = _kit.scalars(dt)
    w = _kit.welford(dt)
    step, combine = w.step, w.combine

    @kernel
    def fwd(x, w, b, y, mean, rstd, R, M, S, G, Cg, eps, has_w, has_b):
        # x, y: (R = N*G, M); w, b: (C,)
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            cnt = 0
            mu = zero
            m2 = zero
            for j in range(cuda.threadIdx.x, M, cuda.blockDim.x):
                cnt, mu, m2 = step(x[r, j], cnt, mu, m2)
            mean_r, ss = combine(cnt, mu, m2, M, sbuf)
            rs = one / math.sqrt(ss / T(M) + eps)
            if cuda.threadIdx.x == 0:
                mean[r] = mean_r
                rstd[r] = rs
            c0 = dm(r, G)[1] * Cg
            for j in range(cuda.threadIdx.x, M, cuda.blockDim.x):
                c = c0 + dm(j, S)[0]
                v = (x[r, j] - mean_r) * rs
                if has_w:
                    v = v * w[c]
                if has_b:
                    v = v + b[c]
                y[r, j] = v

    @kernel
    def bwd(dy, x, w, mean, rstd, dx, R, M, S, G, Cg, has_w):
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            mu = mean[r]
            rs = rstd[r]
            c0 = dm(r, G)[1] * Cg
            s1 = zero
            s2 = zero
            for j in range(cuda.threadIdx.x, M, cuda.blockDim.x):
                g = dy[r, j]
                if has_w:
                    g = g * w[c0 + dm(j, S)[0]]
                s1 += g
                s2 += g * ((x[r, j] - mu) * rs)
            s1 = block_sum(s1, sbuf) / T(M)
            s2 = block_sum(s2, sbuf) / T(M)
            for j in range(cuda.threadIdx.x, M, cuda.blockDim.x):
                g = dy[r, j]
                if has_w:
                    g = g * w[c0 + dm(j, S)[0]]
                dx[r, j] = rs * (g - s1 - (x[r, j] - mu) * rs * s2)

    @kernel
    def param_partial(dy, x, mean, rstd, pw, pb, NC, C, S, G, Cg):
        # one block per (n, c) plane of S elements: pw[n, c] = sum dy*xhat, pb[n, c] = sum dy
        sbuf = cuda.shared.array(SBUF, NT)
        for u in range(cuda.blockIdx.x, NC, cuda.gridDim.x):
            n, c = dm(u, C)
            r = n * G + dm(c, Cg)[0]
            mu = mean[r]
            rs = rstd[r]
            sw = zero
            sb = zero
            for j in range(cuda.threadIdx.x, S, cuda.blockDim.x):
                g = dy[u, j]
                sw += g * ((x[u, j] - mu) * rs)
                sb += g
            sw = block_sum(sw, sbuf)
            sb = block_sum(sb, sbuf)
            if cuda.threadIdx.x == 0:
                pw[n, c] = sw
                pb[n, c] = sb

    return _kit.named(fwd=fwd, bwd=bwd, param_partial=param_partial)


def _dims(x, G):
    shape = _kit.shape_of(x)
    N, C = shape[0], shape[1]
    S = _kit.numel(shape) // (N * C) if N * C else 0
    return shape, N, C, S, C // G


def group_norm(x, weight, bias, G, eps):
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    dt = _kit.dtype_of(x)
    shape, N, C, S, Cg = _dims(x, G)
    R, M = N * G, Cg * S
    y = _kit.empty(shape, dt)
    mean = _kit.empty((R,), dt)
    rstd = _kit.empty((R,), dt)
    if R:
        dummy = _kit.empty((1,), dt)
        _kernels(dt).fwd[_kit.row_blocks(R), ROW_THREADS](
            _kit.reshape(x, (R, M)), dummy if weight is None else weight,
            dummy if bias is None else bias, _kit.reshape(y, (R, M)), mean, rstd, R, M, S, G, Cg,
            dt.type(eps), weight is not None, bias is not None)
    return y, (x, weight, bias is not None, mean, rstd, G)


def group_norm_backward(dy, saved):
    x, weight, has_bias, mean, rstd, G = saved
    dy = _kit.dev(dy)
    dt = _kit.dtype_of(x)
    shape, N, C, S, Cg = _dims(x, G)
    R, M = N * G, Cg * S
    dx = _kit.empty(shape, dt)
    ks = _kernels(dt)
    if R:
        w = _kit.empty((1,), dt) if weight is None else weight
        ks.bwd[_kit.row_blocks(R), ROW_THREADS](_kit.reshape(dy, (R, M)), _kit.reshape(x, (R, M)),
                                               w, mean, rstd, _kit.reshape(dx, (R, M)), R, M, S,
                                               G, Cg, weight is not None)
    if weight is None and not has_bias:
        return dx, None, None
    dw = _kit.empty((C,), dt)
    db = _kit.empty((C,), dt)
    if N:
        pw = _kit.empty((N, C), dt)
        pb = _kit.empty((N, C), dt)
        ks.param_partial[_kit.row_blocks(N * C), ROW_THREADS](_kit.reshape(dy, (N * C, S)),
                                                   _kit.reshape(x, (N * C, S)), mean, rstd, pw,
                                                   pb, N * C, C, S, G, Cg)
        _kit.reduce_partials(pw, dw)
        _kit.reduce_partials(pb, db)
    else:
        _kit.fill(dw, 0)
        _kit.fill(db, 0)
    return dx, (dw if weight is not None else None), (db if has_bias else None)
