"""Norm family on the GPU: layer_norm over the last D elements.

The stdnorm family (ops/stdnorm.py) uses the std_* kernels built here: the same
structure with the unbiased std, and the same parameter pass with rstd = 1 / (std + eps).

Forward: one block per row.  Each thread runs Welford over its strided elements, and the
block combines the per-thread (count, mean, M2) exactly with Chan's formula using two
block sums (sum of count*mean -> mean; sum of M2 + count*(mean_t - mean)^2 -> variance),
so no catastrophic cancellation at any row length.  mean and rstd are saved.
Backward: one block per row for dx (two block sums: mean(g), mean(g*xhat));
dweight/dbias are column sums over rows computed in fixed row chunks and reduced in
order (deterministic, no atomics).
add_layer_norm_infer (the post-LN residual step): the same row kernel on s = x + residual,
the sum rounded to the dtype and recomputed in both passes, never written to memory.
"""
import math

from .. import _kit
from .._kit import ROW_THREADS, SBUF, THREADS, block_sum, cuda, gid, gsz, kernel

OPS = ("layer_norm", "layer_norm_backward", "layer_norm_backward_plus", "layer_norm_infer",
       "add_layer_norm_infer")


@_kit.per_dtype
def _kernels(dt):
    NT, T, zero, one = _kit.scalars(dt)
    w = _kit.welford(dt)
    step, combine = w.step, w.combine

    @cuda.jit(device=True)
    def row_moments(x, r, D, sbuf):
        """(mean, sum of squared deviations) of row r (the whole block calls it)."""
        cnt = 0
        mu = zero
        m2 = zero
        for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
            cnt, mu, m2 = step(x[r, j], cnt, mu, m2)
        return combine(cnt, mu, m2, D, sbuf)

    @cuda.jit(device=True)
    def normalise_row(x, w, b, y, r, D, mean_r, scale, has_w, has_b):
        """y[r] = (x[r] - mean_r) * scale [* w] [+ b], this thread's elements."""
        for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
            v = (x[r, j] - mean_r) * scale
            if has_w:
                v = v * w[j]
            if has_b:
                v = v + b[j]
            y[r, j] = v

    @cuda.jit(device=True)
    def g_at(dy, w, r, j, has_w):
        """The gradient reaching the normalised value: dy [* w]."""
        g = dy[r, j]
        if has_w:
            g = g * w[j]
        return g

    @cuda.jit(device=True)
    def row_g_sums(dy, x, w, r, D, mu, scale, has_w, sbuf):
        """Block sums over row r of g and of g * ((x - mu) * scale)."""
        s1 = zero
        s2 = zero
        for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
            g = g_at(dy, w, r, j, has_w)
            s1 += g
            s2 += g * ((x[r, j] - mu) * scale)
        return block_sum(s1, sbuf), block_sum(s2, sbuf)

    @kernel
    def fwd(x, w, b, y, mean, rstd, R, D, eps, has_w, has_b):
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            mean_r, ss = row_moments(x, r, D, sbuf)
            rs = one / math.sqrt(ss / T(D) + eps)
            if cuda.threadIdx.x == 0:
                mean[r] = mean_r
                rstd[r] = rs
            normalise_row(x, w, b, y, r, D, mean_r, rs, has_w, has_b)

    @kernel
    def add_fwd(x, res, w, b, y, R, D, eps, has_w, has_b):
        # y = layer_norm(x + res): statistics of the rounded sum, then the normalised row
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            cnt = 0
            mu = zero
            m2 = zero
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                cnt, mu, m2 = step(x[r, j] + res[r, j], cnt, mu, m2)
            mean_r, ss = combine(cnt, mu, m2, D, sbuf)
            rs = one / math.sqrt(ss / T(D) + eps)
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                v = (x[r, j] + res[r, j] - mean_r) * rs
                if has_w:
                    v = v * w[j]
                if has_b:
                    v = v + b[j]
                y[r, j] = v

    @kernel
    def bwd(dy, x, w, mean, rstd, dx, R, D, has_w):
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            mu = mean[r]
            rs = rstd[r]
            s1, s2 = row_g_sums(dy, x, w, r, D, mu, rs, has_w, sbuf)
            s1 = s1 / T(D)
            s2 = s2 / T(D)
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                g = g_at(dy, w, r, j, has_w)
                dx[r, j] = rs * (g - s1 - (x[r, j] - mu) * rs * s2)

    @kernel
    def param_partial(dy, x, mean, rstd, pw, pb, R, D, chunk):
        ch = cuda.blockIdx.y
        r0 = ch * chunk
        r1 = min(r0 + chunk, R)
        for c in range(gid(), D, gsz()):
            sw = zero
            sb = zero
            for r in range(r0, r1):
                g = dy[r, c]
                sw += g * ((x[r, c] - mean[r]) * rstd[r])
                sb += g
            pw[ch, c] = sw
            pb[ch, c] = sb

    @kernel
    def std_fwd(x, w, b, y, mean, std, rinv, R, D, eps, has_w, has_b):
        # the Annotated Transformer's norm: (x - mean) / (unbiased std + eps)
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            mean_r, ss = row_moments(x, r, D, sbuf)
            sd = math.sqrt(ss / T(D - 1))
            ri = one / (sd + eps)
            if cuda.threadIdx.x == 0:
                mean[r] = mean_r
                std[r] = sd
                rinv[r] = ri
            normalise_row(x, w, b, y, r, D, mean_r, ri, has_w, has_b)

    @kernel
    def std_bwd(dy, x, w, mean, std, rinv, dx, R, D, has_w):
        sbuf = cuda.shared.array(SBUF, NT)
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            mu = mean[r]
            sd = std[r]
            ri = rinv[r]
            s1, s2 = row_g_sums(dy, x, w, r, D, mu, one, has_w, sbuf)   # (x - mu) * 1 exact
            s1 = s1 / T(D)
            coef = zero
            if sd != zero:
                coef = ri * ri * s2 / (T(D - 1) * sd)
            for j in range(cuda.threadIdx.x, D, cuda.blockDim.x):
                g = g_at(dy, w, r, j, has_w)
                dx[r, j] = ri * (g - s1) - coef * (x[r, j] - mu)

    return _kit.named(fwd=fwd, add_fwd=add_fwd, bwd=bwd, param_partial=param_partial, std_fwd=std_fwd,
                      std_bwd=std_bwd)


def layer_norm(x, weight, bias, D, eps):
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    dt = _kit.dtype_of(x)
    shape = _kit.shape_of(x)
    n = _kit.numel(shape)
    R = n // D if D else 0
    y = _kit.empty(shape, dt)
    mean = _kit.empty((R,), dt)
    rstd = _kit.empty((R,), dt)
    if n:
        fwd = _kernels(dt).fwd
        dummy = _kit.empty((1,), dt)
        fwd[_kit.row_blocks(R), ROW_THREADS](
            _kit.reshape(x, (R, D)), dummy if weight is None else _kit.flat(weight),
            dummy if bias is None else _kit.flat(bias), _kit.reshape(y, (R, D)), mean, rstd,
            R, D, dt.type(eps), weight is not None, bias is not None)
    return y, (x, weight, bias is not None, mean, rstd, D)


def layer_norm_infer(x, weight, bias, D, eps):
    """layer_norm's output alone (inference-only: returns just y)."""
    return layer_norm(x, weight, bias, D, eps)[0]


def add_layer_norm_infer(x, residual, weight, bias, D, eps):
    """layer_norm(x + residual)'s output alone (inference-only: returns just y)."""
    x, res = _kit.dev(x), _kit.dev(residual)
    weight, bias = _kit.dev(weight), _kit.dev(bias)
    dt = _kit.dtype_of(x)
    shape = _kit.shape_of(x)
    n = _kit.numel(shape)
    R = n // D if D else 0
    y = _kit.empty(shape, dt)
    if n:
        dummy = _kit.empty((1,), dt)
        _kernels(dt).add_fwd[_kit.row_blocks(R), ROW_THREADS](
            _kit.reshape(x, (R, D)), _kit.reshape(res, (R, D)),
            dummy if weight is None else _kit.flat(weight),
            dummy if bias is None else _kit.flat(bias), _kit.reshape(y, (R, D)), R, D,
            dt.type(eps), weight is not None, bias is not None)
    return y


def layer_norm_backward(dy, saved):
    x, weight, has_bias, mean, rstd, D = saved
    return _norm_backward(dy, x, weight, has_bias, mean, rstd, D, None)

def layer_norm_backward_plus(dy, saved, plus):
    """layer_norm_backward with ``plus`` added to d_input."""
    from .layout import add
    dx, dw, db = layer_norm_backward(dy, saved)
    return add(dx, plus), dw, db


def _norm_backward(dy, x, weight, has_bias, mean, rstd, D, std):
    """Shared backward: dx by the layer_norm (std None) or std_layer_norm row kernel; the
    parameter gradients sum dy * (x - mean) * rstd and dy over rows in fixed chunks
    (rstd is 1 / (std + eps) for std_layer_norm)."""
    dt = _kit.dtype_of(x)
    shape = _kit.shape_of(x)
    n = _kit.numel(shape)
    R = n // D if D else 0
    dy = _kit.dev(dy)
    dx = _kit.empty(shape, dt)
    need_params = weight is not None or has_bias
    dw = db = None
    if need_params:
        dw = _kit.empty((D,), dt)
        db = _kit.empty((D,), dt)
    if n:
        ks = _kernels(dt)
        param_partial = ks.param_partial
        dy2 = _kit.reshape(dy, (R, D))
        x2 = _kit.reshape(x, (R, D))
        w = _kit.empty((1,), dt) if weight is None else _kit.flat(weight)
        if std is None:
            ks.bwd[_kit.row_blocks(R), ROW_THREADS](dy2, x2, w, mean, rstd, _kit.reshape(dx, (R, D)),
                                                   R, D, weight is not None)
        else:
            ks.std_bwd[_kit.row_blocks(R), ROW_THREADS](dy2, x2, w, mean, std, rstd,
                                                   _kit.reshape(dx, (R, D)), R, D,
                                                   weight is not None)
        if need_params:
            chunk, K = _kit.chunking(R)
            pw = _kit.empty((K, D), dt)
            pb = _kit.empty((K, D), dt)
            param_partial[(_kit.blocks_for(D), K), THREADS](dy2, x2, mean, rstd, pw, pb, R, D,
                                                            chunk)
            _kit.reduce_partials(pw, dw)
            _kit.reduce_partials(pb, db)
    elif need_params:
        _kit.fill(dw, 0)
        _kit.fill(db, 0)
    if weight is not None:
        dw = _kit.reshape(dw, _kit.shape_of(weight))
        db = _kit.reshape(db, _kit.shape_of(weight)) if has_bias else None
    else:
        dw = None
        db = db if has_bias else None
    return dx, dw, db
