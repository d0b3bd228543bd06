"""BatchNorm family on the GPU: batch_norm over channel axis 1 of (N, C, *).

One block per channel (grid-stride over channels), the input seen as (N, C, S).
Training forward: per-thread Welford over the channel's N*S elements combined with
Chan's formula through two block sums (as layer_norm); thread 0 writes mean/rstd and
updates the running statistics in place (running_var with the unbiased variance).
Backward: one block per channel computes sum(dy) and sum(dy * xhat) -- which ARE dbias
and dweight -- and then dx, so the parameter gradients need no second pass and are
deterministic.
"""
import math

from .. import _kit
from .._kit import ROW_THREADS, SBUF, block_sum, cuda, dm, int32, kernel

OPS = ("batch_norm", "batch_norm_backward")


@_kit.per_dtype
def _kernels(dt):
    NT, T, zero, one = _kit.scalars(dt)
    w = _kit.welford(dt)
    step, combine = w.step, w.combine

    @kernel
    def fwd(x, rm, rv, w, b, y, mean, rstd, N, C, S, eps, training, has_rm, has_rv, has_w,
            has_b, mom, one_minus_mom, unbias):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        M = int32(N * S)
        for c in range(cuda.blockIdx.x, C, cuda.gridDim.x):
            if training:
                cnt = 0
                mu = zero
                m2 = zero
                for e in range(t, M, B):
                    n, s = dm(e, S)
                    cnt, mu, m2 = step(x[n, c, s], cnt, mu, m2)
                mean_c, ss = combine(cnt, mu, m2, M, sbuf)
                var = ss / T(M)
            else:
                mean_c = rm[c]
                var = rv[c]
            rs = one / math.sqrt(var + eps)
            if t == 0:
                mean[c] = mean_c
                rstd[c] = rs
                if training:
                    if has_rm:
                        rm[c] = one_minus_mom * rm[c] + mom * mean_c
                    if has_rv:
                        rv[c] = one_minus_mom * rv[c] + mom * var * unbias
            for e in range(t, M, B):
                n, s = dm(e, S)
                v = (x[n, c, s] - mean_c) * rs
                if has_w:
                    v = v * w[c]
                if has_b:
                    v = v + b[c]
                y[n, c, s] = v

    @kernel
    def bwd(dy, x, w, mean, rstd, dx, dw, db, N, C, S, training, has_w):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        M = int32(N * S)
        for c in range(cuda.blockIdx.x, C, cuda.gridDim.x):
            mu = mean[c]
            rs = rstd[c]
            wc = w[c] if has_w else one
            s1 = zero
            s2 = zero
            for e in range(t, M, B):
                n, s = dm(e, S)
                g0 = dy[n, c, s]
                s1 += g0
                s2 += g0 * ((x[n, c, s] - mu) * rs)
            s1 = block_sum(s1, sbuf)
            s2 = block_sum(s2, sbuf)
            if t == 0:
                dw[c] = s2
                db[c] = s1
            m1 = wc * s1 / T(M)
            m2 = wc * s2 / T(M)
            for e in range(t, M, B):
                n, s = dm(e, S)
                g = dy[n, c, s] * wc
                if training:
                    dx[n, c, s] = rs * (g - m1 - (x[n, c, s] - mu) * rs * m2)
                else:
                    dx[n, c, s] = g * rs

    return _kit.named(fwd=fwd, bwd=bwd)


def _ncs(x):
    """(dtype, shape, N, C, S) of x seen as (N, C, S)."""
    shape = _kit.shape_of(x)
    return _kit.dtype_of(x), shape, shape[0], shape[1], _kit.numel(shape[2:])


def batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps):
    host = []
    rm = _kit.inplace_target(running_mean, "running_mean", host)
    rv = _kit.inplace_target(running_var, "running_var", host)
    x, w, b = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    dt, shape, N, C, S = _ncs(x)
    y = _kit.empty(shape, dt)
    mean = _kit.empty((C,), dt)
    rstd = _kit.empty((C,), dt)
    if N * C * S:
        M = int32(N * S)
        fwd = _kernels(dt).fwd
        dummy = _kit.empty((1,), dt)
        T = dt.type
        fwd[_kit.row_blocks(C), ROW_THREADS](
            _kit.reshape(x, (N, C, S)), dummy if rm is None else rm, dummy if rv is None else rv,
            dummy if w is None else w, dummy if b is None else b, _kit.reshape(y, (N, C, S)),
            mean, rstd, N, C, S, T(eps), bool(training), rm is not None, rv is not None,
            w is not None, b is not None, T(momentum), T(1 - momentum),
            T(M / (M - 1) if M > 1 else 1.0))
        _kit.copy_back(host)
    return y, (x, w, b is not None, mean, rstd, bool(training))


def batch_norm_backward(dy, saved):
    x, w, has_bias, mean, rstd, training = saved
    dy = _kit.dev(dy)
    dt, shape, N, C, S = _ncs(x)
    dx = _kit.empty(shape, dt)
    dw = _kit.empty((C,), dt)
    db = _kit.empty((C,), dt)
    if N * C * S:
        bwd = _kernels(dt).bwd
        g = (N, C, S)
        bwd[_kit.row_blocks(C), ROW_THREADS](
            _kit.reshape(dy, g), _kit.reshape(x, g), _kit.empty((1,), dt) if w is None else w,
            mean, rstd, _kit.reshape(dx, g), dw, db, N, C, S, training, w is not None)
    else:
        _kit.fill(dw, 0)
        _kit.fill(db, 0)
    return dx, (dw if w is not None else None), (db if has_bias else None)
