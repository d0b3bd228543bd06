# Attention family: flash-style scaled dot-product attention, forward and backward.
#
# Layout (see fastnn/reference/attention.py): q (B, L, H*E) or, seq_first, (L, B, H*E);
# head h of batch entry b is the column block h*E..(h+1)*E, so a head's rows are a
# strided matrix (leading dimension H*E or B*H*E) that BLAS reads in place: the
# multi-head layers never transpose.  Work unit: (b*H + h, block of BQ query rows).
#
# Forward (FlashAttention-2): for each block of FBQ query rows, walk key blocks of BK keys:
#   S = scale * Q K^T (BLAS), + mask, causal -inf inside diagonal tiles;
#   online softmax: running row max m and row sum l (double), the accumulator
#   acc (BQ x Ev) rescaled by exp(m_old - m_new); acc += dropout(P) V (BLAS).
# out = acc / l, and lse = m + log(l) is saved.  Only a BQ x BK tile of scores exists
# at a time (per thread): memory is O(tile) beyond inputs and outputs.  Causal key
# blocks past the diagonal are never visited (the loop stops at the block's last row).
#
# Backward recomputes each tile's P = exp(S - lse) and, with D = rowsum(dO * O),
#   dV += P_d^T dO,  dP = dO V^T (* dropout mask),  dS = P (dP - D) scale,
#   dK += dS^T Q,    dQ += dS K                                        (all BLAS).
# Every output element is written by exactly one task, in a fixed tile order, so
# results do not depend on the thread count.  With many (b, h) pairs one task owns a
# whole (b, h) (key blocks outer, query blocks inner: dK/dV tiles stay in cache and dQ
# accumulates in place); with few pairs (< SERIAL_BH, chosen by shape, never by thread
# count) dK/dV are computed per (b, h, key block) and dQ per (b, h, query block) in a
# second pass, which recomputes the tiles but keeps every thread busy.
#
# A row whose every key is masked gets zero weights (output 0, zero gradients), as
# torch's scaled_dot_product_attention.  Tile GEMMs run inside OpenMP regions, so the
# Python wrappers hold BLAS to one thread around them (fastnn._threads).
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange, parallel
from libc.math cimport exp, log, INFINITY, NAN
from libc.stdint cimport uint32_t, uint64_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset

from fnn_blas cimport gemm as _scipy_gemm, real

import numpy as np

from fastnn._threads import single_threaded_blas

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_gemm.pxi"

cdef extern from "fnn_math.h" nogil:
    float fnn_expf(float x)

cdef extern from "fnn_philox.h" nogil:
    ctypedef struct fnn_philox_out:
        uint32_t v[4]
    fnn_philox_out fnn_philox4x32(uint64_t block, uint64_t offset, uint64_t seed)

OPS = ("scaled_dot_product_attention", "scaled_dot_product_attention_backward")

cdef enum:
    BQ = 128           # query rows per tile (backward)
    FBQ = 64           # query rows per tile (forward: smaller diagonal waste when causal)
    BK = 128          # keys per tile (the score tile is BQ x BK, 32 KiB in float32)
    SERIAL_BH = 16    # >= this many (b, h) pairs: one task per pair in backward


cdef struct Geo:
    Py_ssize_t B, H, L, S, E, Ev
    Py_ssize_t qb, qld, kb, kld, vb, vld, ob, old   # batch stride and row stride (elements)
    Py_ssize_t mmat, mrow, mcol                      # mask: matrix size, row / column strides
    int causal
    int dropout
    double scale, p, keep
    uint64_t seed, offset


cdef inline real _exp(real x) noexcept nogil:
    if real is float:
        return fnn_expf(x)
    else:
        return exp(x)


cdef inline real _rowmax(const real* x, Py_ssize_t n) noexcept nogil:
    cdef real m8[8]
    cdef Py_ssize_t c = 0, u
    cdef real mx = -INFINITY
    for u in range(8):
        m8[u] = -INFINITY
    # vectorises to max instructions; NaN is skipped here (the exp/sum pass carries a NaN
    # score into its row), and a row of only NaN / -inf is told apart by _has_nan
    while c + 8 <= n:
        for u in range(8):
            m8[u] = x[c + u] if x[c + u] > m8[u] else m8[u]
        c += 8
    for u in range(8):
        mx = m8[u] if m8[u] > mx else mx
    while c < n:
        mx = x[c] if x[c] > mx else mx
        c += 1
    return mx


cdef inline bint _has_nan(const real* x, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t c
    for c in range(n):
        if x[c] != x[c]:
            return True
    return False


cdef inline double _rowsum(const real* x, Py_ssize_t n) noexcept nogil:
    cdef double s8[8]
    cdef Py_ssize_t c = 0, u
    cdef double s = 0.0
    for u in range(8):
        s8[u] = 0.0
    while c + 8 <= n:
        for u in range(8):
            s8[u] += x[c + u]
        c += 8
    for u in range(8):
        s += s8[u]
    while c < n:
        s += x[c]
        c += 1
    return s


cdef inline double _dot(const real* a, const real* b, Py_ssize_t n) noexcept nogil:
    cdef double s8[8]
    cdef Py_ssize_t c = 0, u
    cdef double s = 0.0
    for u in range(8):
        s8[u] = 0.0
    while c + 8 <= n:
        for u in range(8):
            s8[u] += <double>a[c + u] * b[c + u]
        c += 8
    for u in range(8):
        s += s8[u]
    while c < n:
        s += <double>a[c] * b[c]
        c += 1
    return s


cdef inline void _mask_tile(real* s, Py_ssize_t nq, Py_ssize_t nk, Py_ssize_t i0, Py_ssize_t j0,
                            const real* mk, const int64_t* midx, Py_ssize_t bh,
                            const Geo* g) noexcept nogil:
    """Add the mask to a score tile (rows i0.., keys j0..; row stride BK) and set the
    causal -inf above the diagonal."""
    cdef Py_ssize_t r, c, c0
    cdef const real* base
    cdef const real* mr
    cdef real* row
    cdef real mv
    if mk != NULL:
        base = mk + midx[bh] * g.mmat
        for r in range(nq):
            row = s + r * BK
            mr = base + (i0 + r) * g.mrow
            if g.mcol:
                mr = mr + j0
                for c in range(nk):
                    row[c] = row[c] + mr[c]
            else:
                mv = mr[0]
                for c in range(nk):
                    row[c] = row[c] + mv
    if g.causal and j0 + nk - 1 > i0:
        for r in range(nq):
            c0 = i0 + r - j0 + 1          # first key after query i0 + r
            if c0 < 0:
                c0 = 0
            row = s + r * BK
            for c in range(c0, nk):
                row[c] = -INFINITY


cdef inline void _drop_tile(real* p, real* p2, Py_ssize_t nq, Py_ssize_t nk, Py_ssize_t i0,
                            Py_ssize_t j0, Py_ssize_t bh, const Geo* g) noexcept nogil:
    """Multiply a tile (and, when p2 != NULL, a second one) by the dropout multipliers
    of weights (bh, i0 + r, j0 + c): Philox element ((bh*L + i)*S + j)."""
    cdef Py_ssize_t r, c
    cdef uint64_t idx, blk, last = <uint64_t>(-1)
    cdef fnn_philox_out o
    cdef real keep = <real>g.keep
    cdef real mlt
    cdef double u
    for r in range(nq):
        idx = (<uint64_t>(bh * g.L + i0 + r)) * <uint64_t>g.S + <uint64_t>j0
        for c in range(nk):
            blk = idx >> 2
            if blk != last:
                o = fnn_philox4x32(blk, g.offset, g.seed)
                last = blk
            u = <double>(o.v[idx & 3] >> 8) * (1.0 / 16777216.0)
            mlt = keep if u >= g.p else 0
            p[r * BK + c] = p[r * BK + c] * mlt
            if p2 != NULL:
                p2[r * BK + c] = p2[r * BK + c] * mlt
            idx += 1


# ---------------------------------------------------------------- forward
cdef void _fwd_block(const real* q, const real* k, const real* v, real* o, real* lse,
                     const real* mk, const int64_t* midx, const Geo* g, Py_ssize_t bh,
                     Py_ssize_t i0, real* sb, real* acc, double* mrow,
                     double* lrow) noexcept nogil:
    cdef Py_ssize_t b = bh // g.H, h = bh % g.H
    cdef Py_ssize_t E = g.E, Ev = g.Ev
    cdef Py_ssize_t nq = g.L - i0
    cdef Py_ssize_t kend = g.S, j0, nk, r, c
    cdef const real* Qp
    cdef const real* Kp = k + b * g.kb + h * E
    cdef const real* Vp = v + b * g.vb + h * Ev
    cdef real* Op
    cdef real* row
    cdef real* ar
    cdef real mx, mnew, al
    cdef double alpha, s, inv
    if nq > FBQ:
        nq = FBQ
    Qp = q + b * g.qb + h * E + i0 * g.qld
    Op = o + b * g.ob + h * Ev + i0 * g.old
    if g.causal and i0 + nq < kend:
        kend = i0 + nq
    for r in range(nq):
        mrow[r] = -INFINITY
        lrow[r] = 0.0
    memset(acc, 0, nq * Ev * sizeof(real))
    j0 = 0
    while j0 < kend:
        nk = kend - j0
        if nk > BK:
            nk = BK
        gemm(False, True, <int>nq, <int>nk, <int>E, <real>g.scale, Qp, <int>g.qld,
                   Kp + j0 * g.kld, <int>g.kld, 0, sb, BK)
        _mask_tile(sb, nq, nk, i0, j0, mk, midx, bh, g)
        for r in range(nq):
            row = sb + r * BK
            mx = _rowmax(row, nk)
            mnew = <real>mrow[r]
            if mx > mnew:
                mnew = mx
            if mnew == -INFINITY:
                if _has_nan(row, nk):      # NaN scores only: the row is NaN (as torch)
                    mnew = <real>NAN
                else:                      # no key of this row may be attended yet
                    memset(row, 0, nk * sizeof(real))
                    continue
            for c in range(nk):
                row[c] = _exp(row[c] - mnew)
            s = _rowsum(row, nk)
            alpha = exp(mrow[r] - mnew)
            lrow[r] = lrow[r] * alpha + s
            mrow[r] = mnew
            if alpha != 1.0:
                al = <real>alpha
                ar = acc + r * Ev
                for c in range(Ev):
                    ar[c] = ar[c] * al
        if g.dropout:
            _drop_tile(sb, NULL, nq, nk, i0, j0, bh, g)
        gemm(False, False, <int>nq, <int>Ev, <int>nk, 1, sb, BK, Vp + j0 * g.vld,
                   <int>g.vld, 1, acc, <int>Ev)
        j0 += BK
    for r in range(nq):
        row = Op + r * g.old
        ar = acc + r * Ev
        if lrow[r] == 0:                   # every key masked: zero weights
            for c in range(Ev):
                row[c] = 0
            lse[bh * g.L + i0 + r] = -INFINITY
        else:                              # (NaN scores make l NaN: the row is NaN)
            inv = 1.0 / lrow[r]
            for c in range(Ev):
                row[c] = <real>(ar[c] * inv)
            lse[bh * g.L + i0 + r] = <real>(mrow[r] + log(lrow[r]))


cdef void _fwd(const real* q, const real* k, const real* v, real* o, real* lse,
               const real* mk, const int64_t* midx, const Geo* g) noexcept nogil:
    cdef Py_ssize_t nqb = (g.L + FBQ - 1) // FBQ
    cdef Py_ssize_t ntask = g.B * g.H * nqb, t
    cdef int nt = _threads_for(ntask * FBQ * (g.S + 1) * (g.E + g.Ev + 1), 1 << 18)
    cdef real* sb
    cdef real* acc
    cdef double* mrow
    cdef double* lrow
    if ntask == 0:
        return
    if nt > ntask:
        nt = <int>ntask
    with parallel(num_threads=nt):
        sb = <real*>malloc(FBQ * BK * sizeof(real))
        acc = <real*>malloc((FBQ * g.Ev + 1) * sizeof(real))
        mrow = <double*>malloc(2 * FBQ * sizeof(double))
        lrow = mrow + FBQ
        for t in prange(ntask, schedule="static"):
            _fwd_block(q, k, v, o, lse, mk, midx, g, t // nqb, (t % nqb) * FBQ,
                             sb, acc, mrow, lrow)
        free(sb)
        free(acc)
        free(mrow)


# ---------------------------------------------------------------- backward
cdef void _bwd_tile(const real* q, const real* k, const real* v, const real* do_,
                    const real* lse, const real* D, real* dq, real* dk, real* dv,
                    const real* mk, const int64_t* midx, const Geo* g, Py_ssize_t bh,
                    Py_ssize_t i0, Py_ssize_t j0, bint want_kv, bint want_q,
                    real* sb, real* dp, real* pd) noexcept nogil:
    """One (query block, key block) tile of the backward: recompute P, then the
    contributions to dV, dK (want_kv) and dQ (want_q)."""
    cdef Py_ssize_t b = bh // g.H, h = bh % g.H
    cdef Py_ssize_t E = g.E, Ev = g.Ev
    cdef Py_ssize_t nq = g.L - i0, nk = g.S - j0, r, c
    cdef real* row
    cdef real* drow
    cdef real lr, dr, sc = <real>g.scale
    cdef const real* pv
    if nq > BQ:
        nq = BQ
    if nk > BK:
        nk = BK
    cdef const real* Qp = q + b * g.qb + h * E + i0 * g.qld
    cdef const real* dOp = do_ + b * g.ob + h * Ev + i0 * g.old
    cdef const real* Kp = k + b * g.kb + h * E + j0 * g.kld
    cdef const real* Vp = v + b * g.vb + h * Ev + j0 * g.vld
    gemm(False, True, <int>nq, <int>nk, <int>E, sc, Qp, <int>g.qld, Kp, <int>g.kld,
               0, sb, BK)
    _mask_tile(sb, nq, nk, i0, j0, mk, midx, bh, g)
    for r in range(nq):
        row = sb + r * BK
        lr = lse[bh * g.L + i0 + r]
        if lr == -INFINITY:                 # fully masked row: zero weights
            memset(row, 0, nk * sizeof(real))
        else:
            for c in range(nk):
                row[c] = _exp(row[c] - lr)
    gemm(False, True, <int>nq, <int>nk, <int>Ev, 1, dOp, <int>g.old, Vp, <int>g.vld,
               0, dp, BK)
    pv = sb
    if g.dropout:
        for r in range(nq):
            for c in range(nk):
                pd[r * BK + c] = sb[r * BK + c]
        _drop_tile(pd, dp, nq, nk, i0, j0, bh, g)
        pv = pd
    if want_kv:
        gemm(True, False, <int>nk, <int>Ev, <int>nq, 1, pv, BK, dOp, <int>g.old, 1,
                   dv + b * g.vb + h * Ev + j0 * g.vld, <int>g.vld)
    for r in range(nq):
        row = sb + r * BK
        drow = dp + r * BK
        dr = D[bh * g.L + i0 + r]
        for c in range(nk):
            drow[c] = row[c] * (drow[c] - dr) * sc
    if want_kv:
        gemm(True, False, <int>nk, <int>E, <int>nq, 1, dp, BK, Qp, <int>g.qld, 1,
                   dk + b * g.kb + h * E + j0 * g.kld, <int>g.kld)
    if want_q:
        gemm(False, False, <int>nq, <int>E, <int>nk, 1, dp, BK, Kp, <int>g.kld, 1,
                   dq + b * g.qb + h * E + i0 * g.qld, <int>g.qld)


cdef void _bwd(const real* q, const real* k, const real* v, const real* o, const real* do_,
               const real* lse, real* D, real* dq, real* dk, real* dv, const real* mk,
               const int64_t* midx, const Geo* g) noexcept nogil:
    cdef Py_ssize_t BH = g.B * g.H, L = g.L, Ev = g.Ev
    cdef Py_ssize_t nqb = (g.L + BQ - 1) // BQ
    cdef Py_ssize_t kmax = g.S
    cdef Py_ssize_t nkb, t, bh, i, i0, j0, jend, b, h
    cdef int nt
    cdef real* sb
    cdef real* dp
    cdef real* pd
    if g.causal and kmax > g.L:
        kmax = g.L                       # keys after the last query are never attended
    nkb = (kmax + BK - 1) // BK
    if BH == 0 or L == 0:
        return
    nt = _threads_for(BH * L * (Ev + 1), 1 << 14)
    # D[bh, i] = dO_i . O_i  (in double)
    for t in prange(BH * L, nogil=True, schedule="static", num_threads=nt):
        bh = t // L
        i = t % L
        b = bh // g.H
        h = bh % g.H
        D[t] = <real>_dot(do_ + b * g.ob + h * Ev + i * g.old,
                                o + b * g.ob + h * Ev + i * g.old, Ev)
    if nkb == 0:
        return
    nt = _threads_for(BH * nqb * nkb * BQ * BK * (g.E + g.Ev + 1), 1 << 18)
    if BH >= SERIAL_BH:
        if nt > BH:
            nt = <int>BH
        with parallel(num_threads=nt):
            sb = <real*>malloc(3 * BQ * BK * sizeof(real))
            dp = sb + BQ * BK
            pd = dp + BQ * BK
            for bh in prange(BH, schedule="static"):
                j0 = 0
                while j0 < kmax:
                    i0 = (j0 // BQ) * BQ if g.causal else 0
                    while i0 < L:
                        _bwd_tile(q, k, v, do_, lse, D, dq, dk, dv, mk, midx, g, bh,
                                        i0, j0, True, True, sb, dp, pd)
                        i0 = i0 + BQ
                    j0 = j0 + BK
            free(sb)
    else:
        with parallel(num_threads=nt):
            sb = <real*>malloc(3 * BQ * BK * sizeof(real))
            dp = sb + BQ * BK
            pd = dp + BQ * BK
            for t in prange(BH * nkb, schedule="static"):
                bh = t // nkb
                j0 = (t % nkb) * BK
                i0 = (j0 // BQ) * BQ if g.causal else 0
                while i0 < L:
                    _bwd_tile(q, k, v, do_, lse, D, dq, dk, dv, mk, midx, g, bh,
                                    i0, j0, True, False, sb, dp, pd)
                    i0 = i0 + BQ
            for t in prange(BH * nqb, schedule="static"):
                bh = t // nqb
                i0 = (t % nqb) * BQ
                jend = kmax
                if g.causal and i0 + BQ < jend:
                    jend = i0 + BQ
                j0 = 0
                while j0 < jend:
                    _bwd_tile(q, k, v, do_, lse, D, dq, dk, dv, mk, midx, g, bh,
                                    i0, j0, False, True, sb, dp, pd)
                    j0 = j0 + BK
            free(sb)


# ---------------------------------------------------------------- Python entry points
cdef Geo _geometry(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, int H, bint seq_first,
                   object mask, bint causal, double p, double scale, uint64_t seed,
                   uint64_t offset):
    cdef Geo g
    cdef Py_ssize_t HE = q.shape[2], HEv = v.shape[2]
    g.H = H
    g.E = HE // H
    g.Ev = HEv // H
    if seq_first:
        g.L = q.shape[0]
        g.B = q.shape[1]
        g.S = k.shape[0]
        g.qb = HE
        g.qld = g.B * HE
        g.kb = HE
        g.kld = g.B * HE
        g.vb = HEv
        g.vld = g.B * HEv
        g.ob = HEv
        g.old = g.B * HEv
    else:
        g.B = q.shape[0]
        g.L = q.shape[1]
        g.S = k.shape[1]
        g.qb = g.L * HE
        g.qld = HE
        g.kb = g.S * HE
        g.kld = HE
        g.vb = g.S * HEv
        g.vld = HEv
        g.ob = g.L * HEv
        g.old = HEv
    if mask is not None:
        g.mmat = mask.shape[1] * mask.shape[2]
        g.mrow = mask.shape[2] if mask.shape[1] > 1 else 0
        g.mcol = 1 if mask.shape[2] > 1 else 0
    else:
        g.mmat = g.mrow = g.mcol = 0
    g.causal = causal
    g.dropout = p > 0
    g.p = p
    g.keep = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    g.scale = scale
    g.seed = seed
    g.offset = offset
    return g


cdef inline void* _ptr(object a):
    return NULL if a is None else cnp.PyArray_DATA(<cnp.ndarray>a)


def scaled_dot_product_attention(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, int num_heads,
                                 bint seq_first, object mask, object mask_index,
                                 double dropout_p, bint is_causal, double scale, uint64_t seed,
                                 uint64_t offset):
    """-> (out, saved).  IN q, k, v C-contiguous (B, L|S, H*E|H*Ev) (or sequence-first),
    one dtype; mask None or additive (M, Lm, Sm) of that dtype with mask_index (B*H,) int64."""
    cdef Geo g = _geometry(q, k, v, num_heads, seq_first, mask, is_causal, dropout_p, scale,
                           seed, offset)
    shape = (g.L, g.B, num_heads * g.Ev) if seq_first else (g.B, g.L, num_heads * g.Ev)
    cdef cnp.ndarray out = np.empty(shape, dtype=q.dtype)
    cdef cnp.ndarray lse = np.empty(g.B * g.H * g.L, dtype=q.dtype)
    cdef void* pm = _ptr(mask)
    cdef const int64_t* pi = <const int64_t*>_ptr(mask_index)
    with single_threaded_blas():
        if q.dtype == np.float32:
            with nogil:
                _fwd[float](<const float*>cnp.PyArray_DATA(q), <const float*>cnp.PyArray_DATA(k),
                            <const float*>cnp.PyArray_DATA(v), <float*>cnp.PyArray_DATA(out),
                            <float*>cnp.PyArray_DATA(lse), <const float*>pm, pi, &g)
        else:
            with nogil:
                _fwd[double](<const double*>cnp.PyArray_DATA(q),
                             <const double*>cnp.PyArray_DATA(k),
                             <const double*>cnp.PyArray_DATA(v), <double*>cnp.PyArray_DATA(out),
                             <double*>cnp.PyArray_DATA(lse), <const double*>pm, pi, &g)
    return out, (q, k, v, out, lse, num_heads, seq_first, mask, mask_index, dropout_p,
                 is_causal, scale, seed, offset)


def scaled_dot_product_attention_backward(cnp.ndarray d_out, tuple saved):
    """-> (d_q, d_k, d_v) in the layouts of q, k, v.  d_out C-contiguous like out."""
    cdef cnp.ndarray q = saved[0], k = saved[1], v = saved[2], out = saved[3], lse = saved[4]
    cdef int H = saved[5]
    cdef bint seq_first = saved[6]
    mask = saved[7]
    mask_index = saved[8]
    cdef Geo g = _geometry(q, k, v, H, seq_first, mask, saved[10], saved[9], saved[11],
                           saved[12], saved[13])
    cdef cnp.ndarray dq = np.zeros_like(q)
    cdef cnp.ndarray dk = np.zeros_like(k)
    cdef cnp.ndarray dv = np.zeros_like(v)
    cdef cnp.ndarray D = np.empty(g.B * g.H * g.L, dtype=q.dtype)
    cdef void* pm = _ptr(mask)
    cdef const int64_t* pi = <const int64_t*>_ptr(mask_index)
    with single_threaded_blas():
        if q.dtype == np.float32:
            with nogil:
                _bwd[float](<const float*>cnp.PyArray_DATA(q), <const float*>cnp.PyArray_DATA(k),
                            <const float*>cnp.PyArray_DATA(v), <const float*>cnp.PyArray_DATA(out),
                            <const float*>cnp.PyArray_DATA(d_out),
                            <const float*>cnp.PyArray_DATA(lse), <float*>cnp.PyArray_DATA(D),
                            <float*>cnp.PyArray_DATA(dq), <float*>cnp.PyArray_DATA(dk),
                            <float*>cnp.PyArray_DATA(dv), <const float*>pm, pi, &g)
        else:
            with nogil:
                _bwd[double](<const double*>cnp.PyArray_DATA(q),
                             <const double*>cnp.PyArray_DATA(k),
                             <const double*>cnp.PyArray_DATA(v),
                             <const double*>cnp.PyArray_DATA(out),
                             <const double*>cnp.PyArray_DATA(d_out),
                             <const double*>cnp.PyArray_DATA(lse), <double*>cnp.PyArray_DATA(D),
                             <double*>cnp.PyArray_DATA(dq), <double*>cnp.PyArray_DATA(dk),
                             <double*>cnp.PyArray_DATA(dv), <const double*>pm, pi, &g)
    return dq, dk, dv
