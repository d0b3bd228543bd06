"""Loss family on the GPU: cross_entropy on (M, C) logits, fused log-softmax + NLL.

One block per row: max and sum of exp are block reductions (lse), and the row's loss
sum_c a_ic (lse - x_ic) with the reference's coefficients a_ic (class index with label
smoothing and class weights, ignore_index, or probability targets) is a third block
sum; the row also reports its weight in the "mean" denominator.  "sum"/"mean" reduce the
M row values in one block in a fixed order (deterministic).  Backward recomputes lse per
row: dx_ic = g_i (p_ic A_i - a_ic), A_i = sum_c a_ic, g_i = d_loss_i or d_loss / denom.
The target (already on the host after the shell's range check) is copied once.

nll_loss: one thread per row gathers -w_t x_it and the row's weight; the same ordered
block reduction (reduce2) gives "sum"/"mean".  Backward zero-fills and scatters.

Elementwise losses: one grid-stride kernel computes each term (kind switched by an
integer; the formulas are the reference's) and either stores it ("none") or sums fixed
chunks of CHUNK_EL elements into one partial per chunk (a block reduction); one block
then adds the partials in chunk order -- deterministic.  Backward is one elementwise pass
that recomputes from x and y.
"""
import math

import numpy as np

from .. import _kit
from .._kit import ROW_THREADS, SBUF, block_max, block_sum, cuda, gid, gsz, int32, kernel

OPS = ("cross_entropy", "cross_entropy_backward", "nll_loss", "nll_loss_backward",
       "elementwise_loss", "elementwise_loss_backward")

_KINDS = {"mse": 0, "l1": 1, "smooth_l1": 2, "huber": 3, "bce": 4, "bce_logits": 5, "kl_div": 6,
          "kl_div_log": 7}
CHUNK_EL = 64 if _kit.SIM else 8192


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

    @cuda.jit(device=True)
    def row_grad(g, i, per_row, tot, mean):
        # row i's upstream gradient: its own ("none"), or the scalar (divided by the "mean"
        # denominator tot[1]; 0 when every target is ignored)
        if per_row:
            return g[i]
        if mean:
            d = tot[1]
            return g[0] / d if d != zero else zero
        return g[0]

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
            gi = row_grad(g, i, per_row, tot, mean)
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

    # fetched by name (DESIGN.md: never by tuple position)
    return _kit.named(fwd=fwd, bwd=bwd, reduce2=reduce2, row_grad=row_grad)


def _targets(target, dt, M, C):
    probs = np.dtype(target.dtype).kind == "f"
    if probs:
        return True, _kit.empty((1,), np.int64), _kit.dev(target)
    return False, _kit.dev(target), _kit.empty((1, 1), dt)


def _reduce_rows(per, wt, reduction, dt, M):
    """(loss, tot) from per-row losses and "mean" weights: per itself for "none", else the
    ordered block sum (tot = (sum per, sum wt)), "mean" dividing by sum wt (NaN for M = 0)."""
    tot = _kit.zeros((2,), dt)
    if reduction == "none":
        return per, tot
    out = _kit.zeros((1,), dt)
    mean = reduction == "mean"
    if M:
        _kernels(dt).reduce2[1, ROW_THREADS](per, wt, tot, out, M, mean)
    elif mean:
        _kit.fill(out, np.nan)
    return _kit.reshape(out, ()), tot


def _row_grads(d_loss):
    """The upstream gradient as a flat device array (one per row, or one scalar)."""
    g = _kit.dev(d_loss)
    return _kit.reshape(g, (_kit.numel(_kit.shape_of(g)),))


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
        ks.fwd[_kit.row_blocks(M), ROW_THREADS](x, tgt, q, wdev, per, wt, M, C, *args)
    elif M:
        _kit.fill(per, 0)
        _kit.fill(wt, 0 if not probs else 1)
    loss, tot = _reduce_rows(per, wt, reduction, dt, M)
    saved = (x, tgt, q, wdev, args, reduction, tot)
    return loss, saved


def cross_entropy_backward(d_loss, saved):
    x, tgt, q, wdev, args, reduction, tot = saved
    dt = _kit.dtype_of(x)
    M, C = _kit.shape_of(x)
    g = _row_grads(d_loss)
    dx = _kit.empty((M, C), dt)
    if M and C:
        _kernels(dt).bwd[_kit.row_blocks(M), ROW_THREADS](
            x, tgt, q, wdev, g, dx, M, C, *args, reduction == "none", tot,
            reduction == "mean")
    return dx


# ------------------------------------------------------------------ nll_loss
@_kit.per_dtype
def _nll_kernels(dt):
    T = dt.type
    zero = T(0)
    one = T(1)
    row_grad = _kernels(dt).row_grad

    @kernel
    def nll_f(x, tgt, w, per, wt, M, has_w, ignore_index):
        for i in range(gid(), M, gsz()):
            t = tgt[i]
            if t == ignore_index:
                per[i] = zero
                wt[i] = zero
            else:
                wi = w[t] if has_w else one
                per[i] = -wi * x[i, t]
                wt[i] = wi

    @kernel
    def nll_b(tgt, w, g, dx, M, has_w, ignore_index, per_row, tot, mean):
        for i in range(gid(), M, gsz()):
            t = tgt[i]
            if t == ignore_index:
                continue
            dx[i, t] = -(w[t] if has_w else one) * row_grad(g, i, per_row, tot, mean)

    return _kit.named(fwd=nll_f, bwd=nll_b)


def nll_loss(x, target, weight, ignore_index, reduction):
    x, w = _kit.dev(x), _kit.dev(weight)
    dt = _kit.dtype_of(x)
    M, C = _kit.shape_of(x)
    tgt = _kit.dev(target)
    wdev = w if w is not None else _kit.empty((1,), dt)
    per = _kit.empty((M,), dt)
    wt = _kit.empty((M,), dt)
    if M:
        _nll_kernels(dt).fwd[_kit.blocks_for(M), _kit.THREADS](
            x, tgt, wdev, per, wt, M, w is not None, int(ignore_index))
    loss, tot = _reduce_rows(per, wt, reduction, dt, M)
    return loss, (x, tgt, wdev, w is not None, int(ignore_index), reduction, tot)


def nll_loss_backward(d_loss, saved):
    x, tgt, wdev, has_w, ignore_index, reduction, tot = saved
    dt = _kit.dtype_of(x)
    M, C = _kit.shape_of(x)
    g = _row_grads(d_loss)
    dx = _kit.zeros((M, C), dt)
    if M and C:
        _nll_kernels(dt).bwd[_kit.blocks_for(M), _kit.THREADS](
            tgt, wdev, g, dx, M, has_w, ignore_index, reduction == "none", tot,
            reduction == "mean")
    return dx


# ------------------------------------------------------------------ elementwise losses
@_kit.per_dtype
def _ew_kernels(dt):
    T = dt.type
    NT = _kit.shared_type(dt)
    zero = T(0)
    half = T(0.5)
    one = T(1)
    two = T(2)
    m100 = T(-100)
    tiny = T(1e-12)
    nan = T(np.nan)

    @cuda.jit(device=True)
    def nls(v):   # -log_sigmoid(v), stable
        return (-v if v < zero else zero) + math.log1p(math.exp(-abs(v)))

    @cuda.jit(device=True)
    def sig(v):
        e = math.exp(-abs(v))
        r = one / (one + e)
        return r if v >= zero else e * r

    @cuda.jit(device=True)
    def clog(v):
        return m100 if v < m100 else v

    @cuda.jit(device=True)
    def term(kind, xv, yv, pwv, has_pw, p):
        d = xv - yv
        a = abs(d)
        if kind == 0:
            return d * d
        if kind == 1:
            return a
        if kind == 2:
            return half * d * d / p if a < p else a - half * p
        if kind == 3:
            return half * d * d if a < p else p * (a - half * p)
        if kind == 4:
            # the shell keeps x in [0, 1] (NaN passes); log(0) = -inf is clamped to -100
            if xv != xv:
                return xv
            lx = clog(math.log(xv)) if xv > zero else m100
            l1x = clog(math.log1p(-xv)) if xv < one else m100
            return -(yv * lx + (one - yv) * l1x)
        if kind == 5:
            lw = one + (pwv - one) * yv if has_pw else one
            return (one - yv) * xv + lw * nls(xv)
        if kind == 6:
            ylogy = yv * math.log(yv) if yv > zero else (zero if yv == zero else nan)
            return ylogy - yv * xv
        return math.exp(yv) * (yv - xv)

    @cuda.jit(device=True)
    def dterm(kind, xv, yv, pwv, has_pw, p):
        d = xv - yv
        if kind == 0:
            return two * d
        if kind == 1 or (kind == 2 and p == zero):
            return one if d > zero else (-one if d < zero else zero)
        if kind == 2:
            return -one if d < -p else (one if d > p else d / p)
        if kind == 3:
            return -p if d < -p else (p if d > p else d)
        if kind == 4:
            return d / max((one - xv) * xv, tiny)
        if kind == 5:
            if has_pw:
                return (one + (pwv - one) * yv) * sig(xv) - pwv * yv
            return sig(xv) - yv
        if kind == 6:
            return -yv
        return -math.exp(yv)

    @kernel
    def ew_none(kind, x, y, w, pw, has_w, has_pw, p, out, n):
        for i in range(gid(), n, gsz()):
            v = term(kind, x[i], y[i], pw[i] if has_pw else one, has_pw, p)
            out[i] = v * w[i] if has_w else v

    @kernel
    def ew_partial(kind, x, y, w, pw, has_w, has_pw, p, part, n, K, chunk):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        for c in range(cuda.blockIdx.x, K, cuda.gridDim.x):
            s = zero
            for i in range(int32(c * chunk + t), int32(min(c * chunk + chunk, n)),
                           cuda.blockDim.x):
                v = term(kind, x[i], y[i], pw[i] if has_pw else one, has_pw, p)
                s += v * w[i] if has_w else v
            s = block_sum(s, sbuf)
            if t == 0:
                part[c] = s

    @kernel
    def ew_total(part, out, K, inv):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        s = zero
        for c in range(t, K, cuda.blockDim.x):
            s += part[c]
        s = block_sum(s, sbuf)
        if t == 0:
            out[0] = s * inv

    @kernel
    def ew_b(kind, x, y, w, pw, has_w, has_pw, p, g, dx, n, per_elem, inv):
        for i in range(gid(), n, gsz()):
            gi = g[i] if per_elem else g[0] * inv
            v = dterm(kind, x[i], y[i], pw[i] if has_pw else one, has_pw, p) * gi
            dx[i] = v * w[i] if has_w else v

    return _kit.named(none=ew_none, partial=ew_partial, total=ew_total, bwd=ew_b)


def _inverse(divisor, T):
    return T(np.inf) if divisor == 0 else T(1.0 / float(divisor))


def elementwise_loss(kind, x, y, weight, pos_weight, param, divisor):
    x, y, w, pw = (_kit.dev(a) for a in (x, y, weight, pos_weight))
    dt = _kit.dtype_of(x)
    T = dt.type
    shape = _kit.shape_of(x)
    n = _kit.numel(shape)
    k = _kit.empty((1,), dt)   # stand-in for an absent weight / pos_weight
    args = (_KINDS[kind], _kit.flat(x), _kit.flat(y), _kit.flat(w) if w is not None else k,
            _kit.flat(pw) if pw is not None else k, w is not None, pw is not None, T(param))
    ks = _ew_kernels(dt)
    if divisor is None:
        out = _kit.empty(shape, dt)
        if n:
            ks.none[_kit.blocks_for(n), _kit.THREADS](*args, _kit.flat(out), n)
    else:
        K = _kit.cdiv(n, CHUNK_EL)
        out = _kit.zeros((1,), dt)
        if K:
            part = _kit.empty((K,), dt)
            ks.partial[_kit.row_blocks(K), ROW_THREADS](*args, part, n, K, CHUNK_EL)
            ks.total[1, ROW_THREADS](part, out, K, _inverse(divisor, T))
        elif divisor == 0:
            _kit.fill(out, np.nan)
        out = _kit.reshape(out, ())
    return out, (args, shape, divisor)


def elementwise_loss_backward(d_loss, saved):
    args, shape, divisor = saved
    dt = _kit.dtype_of(args[1])
    n = _kit.numel(shape)
    g = _kit.flat(_kit.dev(d_loss)) if divisor is None else _kit.reshape(_kit.dev(d_loss), (1,))
    dx = _kit.empty(shape, dt)
    if n:
        _ew_kernels(dt).bwd[_kit.blocks_for(n), _kit.THREADS](
            *args, g, _kit.flat(dx), n, divisor is None,
            _inverse(divisor, dt.type) if divisor else dt.type(0))
    return dx
