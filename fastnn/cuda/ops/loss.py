"""Loss family on the GPU: cross_entropy on (M, C) logits, fused log-softmax + NLL.

One block per row: max and sum of exp are block reductions (lse), and the row's loss
sum_c a_ic (lse - x_ic) with the reference's coefficients a_ic (class index with label
smoothing and class weights, ignore_index, or probability targets) is a third block
sum; the row also reports its weight in the "mean" denominator.  "sum"/"mean" reduce the
M row values in one block in a fixed order (deterministic).  Backward recomputes lse per
row: dx_ic = g_i (p_ic A_i - a_ic), A_i = sum_c a_ic, g_i = d_loss_i or d_loss / denom.
The target (already on the host after the shell's range check) is copied once.
"""
import math

import numpy as np

from .. import _kit
from .._kit import ROW_THREADS, SBUF, block_max, block_sum, cuda, kernel

OPS = ("cross_entropy", "cross_entropy_backward")


@_kit.per_dtype
def _kernels(dt):
    T = dt.type
    NT = _kit.shared_type(dt)
    zero = T(0)
    one = T(1)
    ninf = T(-np.inf)

    @cuda.jit(device=True)
    def coef(c, t, q, w, i, C, probs, has_w, valid, ls_keep, ls_each):
        # a_ic of the reference (see fastnn/reference/loss.py)
        wc = w[c] if has_w else one
        if probs:
            return wc * (q[i, c] * ls_keep + ls_each)
        if not valid:
            return zero
        a = ls_each * wc
        if c == t:
            a += ls_keep * wc
        return a

    @cuda.jit(device=True)
    def row_lse(x, i, C, sbuf):
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        m = ninf
        for c in range(t, C, B):
            m = max(m, x[i, c])
        m = block_max(m, sbuf)
        s = zero
        for c in range(t, C, B):
            s += math.exp(x[i, c] - m)
        s = block_sum(s, sbuf)
        return m + math.log(s)

    @kernel
    def fwd(x, tgt, q, w, per, wt, M, C, probs, has_w, ignore_index, ls_keep, ls_each):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for i in range(cuda.blockIdx.x, M, cuda.gridDim.x):
            ti = tgt[i] if not probs else 0
            valid = probs or ti != ignore_index
            lse = row_lse(x, i, C, sbuf)
            s = zero
            for c in range(t, C, B):
                a = coef(c, ti, q, w, i, C, probs, has_w, valid, ls_keep, ls_each)
                if a != zero:
                    s += a * (lse - x[i, c])
            s = block_sum(s, sbuf)
            if t == 0:
                per[i] = s
                if probs:
                    wt[i] = one
                elif valid:
                    wt[i] = w[ti] if has_w else one
                else:
                    wt[i] = zero

    @kernel
    def bwd(x, tgt, q, w, g, dx, M, C, probs, has_w, ignore_index, ls_keep, ls_each,
            per_row, tot, mean):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for i in range(cuda.blockIdx.x, M, cuda.gridDim.x):
            ti = tgt[i] if not probs else 0
            valid = probs or ti != ignore_index
            if per_row:
                gi = g[i]
            elif mean:
                d = tot[1]
                gi = g[0] / d if d != zero else zero
            else:
                gi = g[0]
            lse = row_lse(x, i, C, sbuf)
            A = zero
            for c in range(t, C, B):
                A += coef(c, ti, q, w, i, C, probs, has_w, valid, ls_keep, ls_each)
            A = block_sum(A, sbuf)
            for c in range(t, C, B):
                a = coef(c, ti, q, w, i, C, probs, has_w, valid, ls_keep, ls_each)
                dx[i, c] = gi * (math.exp(x[i, c] - lse) * A - a)

    @kernel
    def reduce2(per, wt, tot, out, M, mean):
        # tot = (sum per, sum wt) in index order, out[()] = sum or sum / denominator
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        s = zero
        d = zero
        for i in range(t, M, cuda.blockDim.x):
            s += per[i]
            d += wt[i]
        s = block_sum(s, sbuf)
        d = block_sum(d, sbuf)
        if t == 0:
            tot[0] = s
            tot[1] = d
            if mean:
                out[0] = s / d
            else:
                out[0] = s

    return fwd, bwd, reduce2


def _targets(target, dt, M, C):
    probs = np.dtype(target.dtype).kind == "f"
    if probs:
        return True, _kit.empty((1,), np.int64), _kit.dev(target)
    return False, _kit.dev(target), _kit.empty((1, 1), dt)


def cross_entropy(x, target, weight, ignore_index, reduction, label_smoothing):
    x, w = _kit.dev(x), _kit.dev(weight)
    dt = _kit.dtype_of(x)
    M, C = _kit.shape_of(x)
    probs, tgt, q = _targets(target, dt, M, C)
    T = dt.type
    ls = float(label_smoothing)
    args = (probs, w is not None, int(ignore_index), T(1 - ls), T(ls / C if C else 0.0))
    per = _kit.empty((M,), dt)
    wt = _kit.empty((M,), dt)
    ks = _kernels(dt)
    wdev = w if w is not None else _kit.empty((1,), dt)
    if M and C:
        ks[0][_kit.row_blocks(M), ROW_THREADS](x, tgt, q, wdev, per, wt, M, C, *args)
    elif M:
        _kit.fill(per, 0)
        _kit.fill(wt, 0 if not probs else 1)
    tot = _kit.zeros((2,), dt)
    if reduction == "none":
        loss = per
    else:
        out = _kit.zeros((1,), dt)
        mean = reduction == "mean"
        if M:
            ks[2][1, ROW_THREADS](per, wt, tot, out, M, mean)
        elif mean:
            _kit.fill(out, np.nan)
        loss = _kit.reshape(out, ())
    saved = (x, tgt, q, wdev, args, reduction, tot)
    return loss, saved


def cross_entropy_backward(d_loss, saved):
    x, tgt, q, wdev, args, reduction, tot = saved
    dt = _kit.dtype_of(x)
    M, C = _kit.shape_of(x)
    g = _kit.dev(d_loss)
    g = _kit.reshape(g, (_kit.numel(_kit.shape_of(g)),))
    dx = _kit.empty((M, C), dt)
    if M and C:
        _kernels(dt)[1][_kit.row_blocks(M), ROW_THREADS](
            x, tgt, q, wdev, g, dx, M, C, *args, reduction == "none", tot,
            reduction == "mean")
    return dx
