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
# count) each pair's key blocks are dealt to P groups, a task per (pair, group): the task
# owns its key blocks' dK/dV and adds its dQ into a zeroed per-group partial (L x E per
# pair), summed in group order afterwards -- every tile is still computed once.
#
# A row whose every key is masked gets zero weights (output 0, zero gradients), as
# torch's scaled_dot_product_attention.  Tile GEMMs run inside OpenMP regions, so the
# Python wrappers hold BLAS to one thread around them (fastnn._threads).
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange, parallel
from libc.math cimport exp, log, INFINITY, NAN
from libc.stdint cimport uint32_t, uint64_t, int64_t, uintptr_t
from libc.stdlib cimport free
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.string cimport memset

from fnn_blas cimport gemm as _scipy_gemm, real

import numpy as np

from fastnn._threads import single_threaded_blas

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"
include "fnn_gemm.pxi"

cdef extern from *:
    """
    #include <stddef.h>
    #include "fnn_math.h"
    #include "fnn_reduce.h"
    #include "fnn_softmax.h"
    /* Row helpers of the float score tiles.  exp arguments are s - rowmax or s - lse
       (<= 0 up to rounding): fnn_expf_nonpos, 8 lanes at a time on AVX2+FMA. */

    /* max over 32 lanes; NaN is skipped (v > m is false for it), -inf for n == 0 */
    static inline float fnn_att_max_f(const float* x, ptrdiff_t n) {
        ptrdiff_t j = 0;
        float r = -INFINITY;
    #if defined(FNN_HAVE_AVX2)
        /* max_ps(v, m) is v > m ? v : m: a NaN v leaves m */
        __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
        for (; j + 32 <= n; j += 32) {
            m0 = _mm256_max_ps(_mm256_loadu_ps(x + j), m0);
            m1 = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), m1);
            m2 = _mm256_max_ps(_mm256_loadu_ps(x + j + 16), m2);
            m3 = _mm256_max_ps(_mm256_loadu_ps(x + j + 24), m3);
        }
        m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        r = _mm_cvtss_f32(h);
    #else
        float m[32];
        for (int k = 0; k < 32; ++k) m[k] = -INFINITY;
        for (; j + 32 <= n; j += 32)
            for (int k = 0; k < 32; ++k) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
        for (int k = 0; k < 32; ++k) r = m[k] > r ? m[k] : r;
    #endif
        for (; j < n; ++j) r = x[j] > r ? x[j] : r;
        return r;
    }

    /* x[j] = exp(x[j] - m) in place (m may be NaN: NaN propagates); returns the sum,
       32 float lanes per block of FNN_BLOCK folded in double: softmax's row pass */
    static inline double fnn_att_exp_sum_f(float* x, float m, ptrdiff_t n) {
        return fnn_exp_shift_sum_f(x, m, x, n, NULL);
    }

    /* x[j] = exp(x[j] - m) in place */
    static inline void fnn_att_exp_f(float* x, float m, ptrdiff_t n) {
        ptrdiff_t j = 0;
    #if defined(FNN_HAVE_AVX2)
        __m256 vm = _mm256_set1_ps(m);
        for (; j + 8 <= n; j += 8)
            _mm256_storeu_ps(x + j, fnn_exp_nonpos_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm)));
    #endif
        for (; j < n; ++j) x[j] = fnn_expf_nonpos(x[j] - m);
    }
    """
    float fnn_att_max_f(const float* x, Py_ssize_t n) noexcept nogil
    double fnn_att_exp_sum_f(float* x, float m, Py_ssize_t n) noexcept nogil
    void fnn_att_exp_f(float* x, float m, Py_ssize_t n) noexcept nogil
    double fnn_dot_f(const float* x, const float* y, Py_ssize_t n) noexcept nogil

cdef extern from "fnn_philox.h" nogil:
    ctypedef struct fnn_philox_out:
        uint32_t v[4]
    fnn_philox_out fnn_philox4x32(uint64_t block, uint64_t offset, uint64_t seed)

OPS = ("scaled_dot_product_attention", "scaled_dot_product_attention_backward",
       "varlen_attention")

cdef enum:
    SERIAL_BH = 16    # >= this many (b, h) pairs: one task per pair in backward
    MAX_KV_GROUPS = 8 # fewer pairs: at most this many key-block groups (tasks) per pair


cdef struct Geo:
    Py_ssize_t B, H, L, S, E, Ev
    Py_ssize_t qb, qld, kb, kld, vb, vld, ob, old   # batch stride and row stride (elements)
    Py_ssize_t dqb, dqld, dkb, dkld, dvb, dvld      # the same for the gradients (backward)
    Py_ssize_t fbq, fbk, bq, bk                      # tile sizes (forward, backward); by shape
    Py_ssize_t mmat, mrow, mcol                      # mask: matrix size, row / column strides
    int causal
    int dropout
    double scale, p, keep
    uint64_t seed, offset


cdef inline real _rowmax(const real* x, Py_ssize_t n) noexcept nogil:
    """Row maximum; NaN is skipped here (the exp/sum pass carries a NaN score into its
    row), and a row of only NaN / -inf is told apart by _has_nan."""
    cdef Py_ssize_t c
    cdef real mx = -INFINITY
    if real is float:
        mx = fnn_att_max_f(x, n)
    else:
        for c in range(n):
            mx = x[c] if x[c] > mx else mx
    return mx


cdef inline double _exp_sum(real* x, Py_ssize_t n, real m) noexcept nogil:
    """x = exp(x - m) in place; returns the sum (in double)."""
    cdef Py_ssize_t c
    if real is float:
        return fnn_att_exp_sum_f(x, m, n)
    else:
        for c in range(n):
            x[c] = exp(x[c] - m)
        return _rowsum(x, n)


cdef inline void _exp_shift(real* x, Py_ssize_t n, real m) noexcept nogil:
    cdef Py_ssize_t c
    if real is float:
        fnn_att_exp_f(x, m, n)
    else:
        for c in range(n):
            x[c] = exp(x[c] - m)


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
    if real is float:               # float lanes folded in double (fnn_reduce.h)
        s = fnn_dot_f(a, b, n)
    else:
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


cdef inline void _mask_tile(real* s, Py_ssize_t ld, Py_ssize_t nq, Py_ssize_t nk, Py_ssize_t i0,
                            Py_ssize_t j0, const real* mk, const int64_t* midx, Py_ssize_t bh,
                            const Geo* g) noexcept nogil:
    """Add the mask to a score tile (rows i0.., keys j0..; row stride ld) and set the
    causal -inf above the diagonal."""
    cdef Py_ssize_t r, c, c0
    cdef const real* base
    cdef const real* mr
    cdef real* row
    cdef real mv
    if mk != NULL:
        base = mk + midx[bh] * g.mmat
        for r in range(nq):
            row = s + r * ld
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
            row = s + r * ld
            for c in range(c0, nk):
                row[c] = -INFINITY


cdef inline void _drop_tile(real* p, real* p2, Py_ssize_t ld, Py_ssize_t nq, Py_ssize_t nk,
                            Py_ssize_t i0, Py_ssize_t j0, Py_ssize_t bh, const Geo* g) noexcept nogil:
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
            p[r * ld + c] = p[r * ld + c] * mlt
            if p2 != NULL:
                p2[r * ld + c] = p2[r * ld + c] * mlt
            idx += 1


cdef extern from "fnn_attn_short.h" nogil:
    enum:
        FNN_ATS_LMAX
        FNN_ATS_EMAX
        FNN_ATB_WS
    ctypedef struct fnn_ats_drop:
        double p
        float keep
        uint64_t seed, offset
    void fnn_ats_head_f32(const float* q, Py_ssize_t qld, const float* k, Py_ssize_t kld,
                          const float* v, Py_ssize_t vld, float* out, Py_ssize_t old,
                          Py_ssize_t Lq, Py_ssize_t Lk, Py_ssize_t E, Py_ssize_t Ev,
                          float scale, int causal, float* lse, const fnn_ats_drop* drop,
                          uint64_t row0)
    int fnn_atb_fits(Py_ssize_t L, Py_ssize_t S, Py_ssize_t E, Py_ssize_t Ev)
    int fnn_atb_pair_f32(const float* q, Py_ssize_t qld, const float* k, Py_ssize_t kld,
                         const float* v, Py_ssize_t vld, const float* dout, Py_ssize_t old,
                         const float* lse, const float* D, float* dq, Py_ssize_t dqld,
                         float* dk, Py_ssize_t dkld, float* dv, Py_ssize_t dvld, Py_ssize_t L,
                         Py_ssize_t S, Py_ssize_t E, Py_ssize_t Ev, float scale, int causal,
                         float* ws, const fnn_ats_drop* drop, uint64_t row0)


cdef inline bint _short_train(const Geo* g, const void* mk) noexcept nogil:
    """The training forward / backward of every (b, h) pair runs fnn_attn_short.h's
    whole-pair kernels (no tiles, no BLAS): float32, no mask beyond is_causal (dropout
    with the tiled path's Philox mask), queries and keys <= FNN_ATS_LMAX, head widths
    multiples of 16 <= 64, and a build with them (AVX-512 or AVX2).  By shape and build only, the
    same for both passes."""
    return mk == NULL and fnn_atb_fits(g.L, g.S, g.E, g.Ev) != 0


cdef inline fnn_ats_drop _drop_of(const Geo* g) noexcept nogil:
    cdef fnn_ats_drop d
    d.p = g.p
    d.keep = <float>g.keep
    d.seed = g.seed
    d.offset = g.offset
    return d


cdef void _short_fwd(const float* q, const float* k, const float* v, float* o, float* lse,
                     const Geo* g) noexcept nogil:
    """The forward of _short_train shapes: a task per (b, h) pair, its own output rows."""
    cdef Py_ssize_t bh, b, h, BH = g.B * g.H
    cdef int nt = _threads_for(BH * g.L * g.S * (g.E + g.Ev), 1 << 20)
    cdef fnn_ats_drop d = _drop_of(g)
    cdef const fnn_ats_drop* pd = &d if g.dropout else NULL
    if nt > BH:
        nt = <int>BH
    for bh in prange(BH, schedule="static", num_threads=nt):
        b = bh // g.H
        h = bh % g.H
        fnn_ats_head_f32(q + b * g.qb + h * g.E, g.qld, k + b * g.kb + h * g.E, g.kld,
                         v + b * g.vb + h * g.Ev, g.vld, o + b * g.ob + h * g.Ev, g.old,
                         g.L, g.S, g.E, g.Ev, <float>g.scale, g.causal, lse + bh * g.L, pd,
                         <uint64_t>(bh * g.L))


cdef int _short_bwd(const float* q, const float* k, const float* v, const float* do_,
                    const float* lse, const float* D, float* dq, float* dk, float* dv,
                    const Geo* g) except -1 nogil:
    """The backward of _short_train shapes: a task per (b, h) pair writing its own dq, dk,
    dv rows (fnn_atb_pair_f32), a workspace per thread."""
    cdef Py_ssize_t bh, b, h, BH = g.B * g.H
    cdef int nt = _threads_for(BH * g.L * g.S * (g.E + g.Ev), 1 << 19)
    cdef float* raw
    cdef float* ws
    cdef int failed = 0
    cdef fnn_ats_drop d = _drop_of(g)
    cdef const fnn_ats_drop* pd = &d if g.dropout else NULL
    if nt > BH:
        nt = <int>BH
    with parallel(num_threads=nt):
        raw = <float*>fnn_alloc(FNN_ATB_WS + 16, sizeof(float))
        if raw == NULL:
            fnn_flag_set(&failed)
        # 64-byte aligned (the kernel's aligned vector loads)
        ws = <float*>((<uintptr_t>raw + 63) & ~(<uintptr_t>63))
        for bh in prange(BH, schedule="static"):
            if raw == NULL:
                continue
            b = bh // g.H
            h = bh % g.H
            fnn_atb_pair_f32(q + b * g.qb + h * g.E, g.qld, k + b * g.kb + h * g.E, g.kld,
                             v + b * g.vb + h * g.Ev, g.vld, do_ + b * g.ob + h * g.Ev, g.old,
                             lse + bh * g.L, D + bh * g.L, dq + b * g.dqb + h * g.E, g.dqld,
                             dk + b * g.dkb + h * g.E, g.dkld, dv + b * g.dvb + h * g.Ev,
                             g.dvld, g.L, g.S, g.E, g.Ev, <float>g.scale, g.causal, ws, pd,
                             <uint64_t>(bh * g.L))
        free(raw)
    if failed:
        _raise_nomem(FNN_ATB_WS + 16, sizeof(float))
    return 0


# ---------------------------------------------------------------- forward
cdef int _fwd_block(const real* q, const real* k, const real* v, real* o, real* lse,
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
    cdef Py_ssize_t BK = g.fbk
    if nq > g.fbq:
        nq = g.fbq
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
        if gemm(False, True, <int>nq, <int>nk, <int>E, <real>g.scale, Qp, <int>g.qld,
                Kp + j0 * g.kld, <int>g.kld, 0, sb, BK):
            return -1
        _mask_tile(sb, BK, nq, nk, i0, j0, mk, midx, bh, g)
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
            s = _exp_sum(row, nk, mnew)
            alpha = exp(mrow[r] - mnew)
            lrow[r] = lrow[r] * alpha + s
            mrow[r] = mnew
            if alpha != 1.0:
                al = <real>alpha
                ar = acc + r * Ev
                for c in range(Ev):
                    ar[c] = ar[c] * al
        if g.dropout:
            _drop_tile(sb, NULL, BK, nq, nk, i0, j0, bh, g)
        if gemm(False, False, <int>nq, <int>Ev, <int>nk, 1, sb, BK, Vp + j0 * g.vld,
                <int>g.vld, 1, acc, <int>Ev):
            return -1
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
    return 0


cdef int _fwd(const real* q, const real* k, const real* v, real* o, real* lse,
              const real* mk, const int64_t* midx, const Geo* g) except -1 nogil:
    cdef Py_ssize_t FBQ = g.fbq
    cdef Py_ssize_t nqb = (g.L + FBQ - 1) // FBQ
    cdef Py_ssize_t ntask = g.B * g.H * nqb, t
    cdef int nt = _threads_for(ntask * FBQ * (g.S + 1) * (g.E + g.Ev + 1), 1 << 18)
    cdef real* sb
    cdef real* acc
    cdef double* mrow
    cdef double* lrow
    cdef int failed = 0, gfail = 0
    if ntask == 0:
        return 0
    if real is float:
        if _short_train(g, mk):
            _short_fwd(q, k, v, o, lse, g)
            return 0
    if nt > ntask:
        nt = <int>ntask
    with parallel(num_threads=nt):
        sb = <real*>fnn_alloc(FBQ * g.fbk, sizeof(real))
        acc = <real*>fnn_alloc(FBQ * g.Ev + 1, sizeof(real))
        mrow = <double*>fnn_alloc(2 * FBQ, sizeof(double))
        lrow = mrow + FBQ
        if sb == NULL or acc == NULL or mrow == NULL:
            fnn_flag_set(&failed)
        for t in prange(ntask, schedule="static"):
            if sb != NULL and acc != NULL and mrow != NULL:
                if _fwd_block(q, k, v, o, lse, mk, midx, g, t // nqb, (t % nqb) * FBQ,
                              sb, acc, mrow, lrow):
                    fnn_flag_set(&gfail)
        free(sb)
        free(acc)
        free(mrow)
    if failed:
        _raise_nomem(FBQ * (g.fbk + g.Ev + 2) + 1, sizeof(double))
    if gfail:
        _raise_gemm_nomem()
    return 0


# ---------------------------------------------------------------- backward
cdef int _bwd_tile(const real* q, const real* k, const real* v, const real* do_,
                    const real* lse, const real* D, real* dq, real* dk, real* dv,
                    const real* mk, const int64_t* midx, const Geo* g, Py_ssize_t bh,
                    Py_ssize_t i0, Py_ssize_t j0, int kv_mode, int q_mode,
                    real* sb, real* dp, real* pd) noexcept nogil:
    """One (query block, key block) tile of the backward: recompute P, then the
    contributions to dV, dK (kv_mode) and dQ (q_mode).  Modes: 0 skip, 1 write (the
    first tile to reach those rows: the gradients need no zeroing), 2 accumulate.
    -> 0, or -1 when a GEMM could not get its work buffer."""
    cdef Py_ssize_t b = bh // g.H, h = bh % g.H
    cdef Py_ssize_t E = g.E, Ev = g.Ev
    cdef Py_ssize_t nq = g.L - i0, nk = g.S - j0, r, c
    cdef real* row
    cdef real* drow
    cdef real lr, dr, sc = <real>g.scale
    cdef const real* pv
    cdef Py_ssize_t BQ = g.bq, BK = g.bk
    if nq > BQ:
        nq = BQ
    if nk > BK:
        nk = BK
    cdef const real* Qp = q + b * g.qb + h * E + i0 * g.qld
    cdef const real* dOp = do_ + b * g.ob + h * Ev + i0 * g.old
    cdef const real* Kp = k + b * g.kb + h * E + j0 * g.kld
    cdef const real* Vp = v + b * g.vb + h * Ev + j0 * g.vld
    if gemm(False, True, <int>nq, <int>nk, <int>E, sc, Qp, <int>g.qld, Kp, <int>g.kld,
            0, sb, BK):
        return -1
    _mask_tile(sb, BK, nq, nk, i0, j0, mk, midx, bh, g)
    for r in range(nq):
        row = sb + r * BK
        lr = lse[bh * g.L + i0 + r]
        if lr == -INFINITY:                 # fully masked row: zero weights
            memset(row, 0, nk * sizeof(real))
        else:
            _exp_shift(row, nk, lr)
    if gemm(False, True, <int>nq, <int>nk, <int>Ev, 1, dOp, <int>g.old, Vp, <int>g.vld,
            0, dp, BK):
        return -1
    pv = sb
    if g.dropout:
        for r in range(nq):
            for c in range(nk):
                pd[r * BK + c] = sb[r * BK + c]
        _drop_tile(pd, dp, BK, nq, nk, i0, j0, bh, g)
        pv = pd
    if kv_mode:
        if gemm(True, False, <int>nk, <int>Ev, <int>nq, 1, pv, BK, dOp, <int>g.old,
                kv_mode - 1, dv + b * g.dvb + h * Ev + j0 * g.dvld, <int>g.dvld):
            return -1
    for r in range(nq):
        row = sb + r * BK
        drow = dp + r * BK
        dr = D[bh * g.L + i0 + r]
        for c in range(nk):
            drow[c] = row[c] * (drow[c] - dr) * sc
    if kv_mode:
        if gemm(True, False, <int>nk, <int>E, <int>nq, 1, dp, BK, Qp, <int>g.qld, kv_mode - 1,
                dk + b * g.dkb + h * E + j0 * g.dkld, <int>g.dkld):
            return -1
    if q_mode:
        if gemm(False, False, <int>nq, <int>E, <int>nk, 1, dp, BK, Kp, <int>g.kld, q_mode - 1,
                dq + b * g.dqb + h * E + i0 * g.dqld, <int>g.dqld):
            return -1
    return 0


cdef inline void _sum_groups(const real* part, Py_ssize_t stride, Py_ssize_t P, real* out,
                             Py_ssize_t n) noexcept nogil:
    """out[:n] = part[:n] + part[stride:stride + n] + ... (P terms, in order)."""
    cdef Py_ssize_t c, j
    cdef real acc
    for c in range(n):
        acc = part[c]
        for j in range(1, P):
            acc = acc + part[j * stride + c]
        out[c] = acc


cdef inline Py_ssize_t _kv_groups(const Geo* g) noexcept nogil:
    """Key-block groups per (b, h) pair in the few-pairs backward: enough tasks for
    SERIAL_BH-way parallelism, at most one group per key block.  Shape only."""
    cdef Py_ssize_t BH = g.B * g.H, kmax = g.S, nkb, P
    if g.causal and kmax > g.L:
        kmax = g.L
    nkb = (kmax + g.bk - 1) // g.bk
    if BH == 0 or BH >= SERIAL_BH or nkb <= 1:
        return 1
    P = (SERIAL_BH + BH - 1) // BH
    if P > MAX_KV_GROUPS:
        P = MAX_KV_GROUPS               # the partials cost P x the size of dq
    return P if P < nkb else nkb


cdef int _bwd(const real* q, const real* k, const real* v, const real* o, const real* do_,
              const real* lse, real* D, real* dq, real* dk, real* dv, const real* mk,
              const int64_t* midx, const Geo* g, real* dqp) except -1 nogil:
    cdef Py_ssize_t BH = g.B * g.H, L = g.L, Ev = g.Ev
    cdef Py_ssize_t BQ = g.bq, BK = g.bk
    cdef Py_ssize_t nqb = (g.L + BQ - 1) // BQ
    cdef Py_ssize_t kmax = g.S
    cdef Py_ssize_t nkb, t, bh, i, i0, j0, jend, b, h, istart
    cdef int nt
    cdef Py_ssize_t P
    cdef real* sb
    cdef real* dp
    cdef real* pd
    cdef Geo gp = g[0]
    if g.causal and kmax > g.L:
        kmax = g.L                       # keys after the last query are never attended
    cdef int failed = 0, gfail = 0
    nkb = (kmax + BK - 1) // BK
    if BH == 0 or L == 0:
        return 0
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
        return 0
    if real is float:
        if _short_train(g, mk):
            return _short_bwd(q, k, v, do_, lse, D, dq, dk, dv, g)
    nt = _threads_for(BH * nqb * nkb * BQ * BK * (g.E + g.Ev + 1), 1 << 18)
    if BH >= SERIAL_BH:
        if nt > BH:
            nt = <int>BH
        with parallel(num_threads=nt):
            sb = <real*>fnn_alloc(3 * BQ * BK, sizeof(real))
            dp = sb + BQ * BK
            pd = dp + BQ * BK
            if sb == NULL:
                fnn_flag_set(&failed)
            for bh in prange(BH, schedule="static"):
                if sb == NULL:
                    continue
                j0 = 0
                while j0 < kmax:
                    i0 = (j0 // BQ) * BQ if g.causal else 0
                    istart = i0
                    while i0 < L:
                        if _bwd_tile(q, k, v, do_, lse, D, dq, dk, dv, mk, midx, g, bh,
                                     i0, j0, 1 if i0 == istart else 2, 1 if j0 == 0 else 2,
                                     sb, dp, pd):
                            fnn_flag_set(&gfail)
                        i0 = i0 + BQ
                    j0 = j0 + BK
            free(sb)
    else:
        # Few (b, h) pairs: each pair's key blocks are dealt round-robin to P groups (P by
        # shape, _kv_groups); a task (pair, group) owns its key blocks' dK / dV and adds
        # its dQ contributions to its own zeroed partial dqp[group] (L x E per pair).  One
        # pass, every tile computed once; the partials are added in group order after.
        P = _kv_groups(g)
        gp.dqb = L * g.H * g.E            # partials: [group][b][i][h * E]
        gp.dqld = g.H * g.E
        with parallel(num_threads=nt):
            sb = <real*>fnn_alloc(3 * BQ * BK, sizeof(real))
            dp = sb + BQ * BK
            pd = dp + BQ * BK
            if sb == NULL:
                fnn_flag_set(&failed)
            for t in prange(BH * P, schedule="dynamic"):
                if sb == NULL:
                    continue
                bh = t // P
                j0 = (t % P) * BK
                while j0 < kmax:
                    i0 = (j0 // BQ) * BQ if g.causal else 0
                    istart = i0
                    while i0 < L:
                        if _bwd_tile(q, k, v, do_, lse, D, dqp + (t % P) * BH * L * g.E, dk,
                                     dv, mk, midx, &gp, bh, i0, j0, 1 if i0 == istart else 2,
                                     2, sb, dp, pd):
                            fnn_flag_set(&gfail)
                        i0 = i0 + BQ
                    j0 = j0 + P * BK
            free(sb)
        if failed:
            _raise_nomem(3 * BQ * BK, sizeof(real))
        if gfail:
            _raise_gemm_nomem()
        # dq[b, i, h] = sum over groups of dqp[group][bh, i], in group order
        nt = _threads_for(BH * L * g.E * P, 1 << 16)
        for t in prange(BH * L, nogil=True, schedule="static", num_threads=nt):
            bh = t // L
            i = t % L
            _sum_groups(dqp + (bh // g.H) * gp.dqb + i * gp.dqld + (bh % g.H) * g.E,
                        BH * L * g.E, P,
                        dq + (bh // g.H) * g.dqb + (bh % g.H) * g.E + i * g.dqld, g.E)
        return 0
    if failed:
        _raise_nomem(3 * BQ * BK, sizeof(real))
    if gfail:
        _raise_gemm_nomem()
    return 0


# ---------------------------------------------------------------- Python entry points
cdef void _tiles(Geo* g) noexcept:
    """Tile sizes, by shape only (never by thread count: results stay bit-identical)."""
    if g.causal:
        # small forward query blocks waste less of the diagonal tiles
        g.fbq = 64
        g.fbk = 128
        g.bq = 128
        g.bk = 128
    else:
        # no diagonal: bigger tiles, fewer and larger tile GEMMs (less packing per
        # flop: K and V are packed once per 256 query rows); with few (b, h) pairs
        # smaller query blocks keep more tasks for the threads
        g.bq = 256 if g.B * g.H >= SERIAL_BH else 128
        g.bk = g.bq
        g.fbq = g.bq
        g.fbk = 256


cdef bint _rows_ok(cnp.ndarray a, int row_axis):
    """True when the kernels can read ``a`` in place: 3-D, aligned, unit stride along
    the features, the other strides whole non-negative elements, and a row stride BLAS
    accepts as a leading dimension (>= the row length)."""
    cdef Py_ssize_t isz = a.itemsize
    cdef int ax
    if a.ndim != 3 or not cnp.PyArray_ISALIGNED(a):
        return False
    if a.shape[2] > 1 and a.strides[2] != isz:
        return False
    for ax in range(2):
        if a.shape[ax] > 1 and (a.strides[ax] < 0 or a.strides[ax] % isz):
            return False
    if a.shape[row_axis] > 1 and a.strides[row_axis] < a.shape[2] * isz:
        return False
    return True


cdef inline void _strides(cnp.ndarray a, int row_axis, Py_ssize_t* bs,
                          Py_ssize_t* ld) noexcept:
    """Batch stride and row stride of ``a`` in elements (a length-1 axis gets a valid
    value: 0 for the batch, the row length for the rows, as BLAS wants ld >= it)."""
    cdef Py_ssize_t isz = a.itemsize
    cdef int bax = 1 - row_axis
    bs[0] = a.strides[bax] // isz if a.shape[bax] > 1 else 0
    ld[0] = a.strides[row_axis] // isz if a.shape[row_axis] > 1 else a.shape[2]
    if ld[0] < 1:
        ld[0] = 1


cdef Geo _geometry(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, int H, bint seq_first,
                   object mask, bint causal, double p, double scale, uint64_t seed,
                   uint64_t offset):
    cdef Geo g
    cdef Py_ssize_t HE = q.shape[2], HEv = v.shape[2]
    cdef int ra = 0 if seq_first else 1
    g.H = H
    g.E = HE // H
    g.Ev = HEv // H
    g.L = q.shape[ra]
    g.B = q.shape[1 - ra]
    g.S = k.shape[ra]
    _strides(q, ra, &g.qb, &g.qld)
    _strides(k, ra, &g.kb, &g.kld)
    _strides(v, ra, &g.vb, &g.vld)
    if seq_first:                       # out / d_out: C-contiguous
        g.ob = HEv
        g.old = g.B * HEv
    else:
        g.ob = g.L * HEv
        g.old = HEv
    g.dqb, g.dqld, g.dkb, g.dkld, g.dvb, g.dvld = g.qb, g.qld, g.kb, g.kld, g.vb, g.vld
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
    _tiles(&g)
    return g


cdef tuple _readable(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, bint seq_first):
    """q, k, v as the kernels read them: in place when _rows_ok, else C-contiguous copies."""
    cdef int ra = 0 if seq_first else 1
    if not _rows_ok(q, ra):
        q = np.ascontiguousarray(q)
    if not _rows_ok(k, ra):
        k = np.ascontiguousarray(k)
    if not _rows_ok(v, ra):
        v = np.ascontiguousarray(v)
    return q, k, v


cdef object _joint_grads(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, bint zero):
    """(d_q, d_k, d_v) (zeroed when ``zero``) as column blocks of one C-contiguous (.., Fq+Fk+Fv) array
    when q, k, v are such blocks of one array (the fused QKV projection), else None: the
    caller then gets the projection's gradient without a concatenation."""
    cdef Py_ssize_t isz = q.itemsize
    cdef Py_ssize_t fq = q.shape[2], fk = k.shape[2], W = q.shape[2] + k.shape[2] + v.shape[2]
    cdef char* pq = <char*>cnp.PyArray_DATA(q)
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        return None
    if not (q.shape[0] == k.shape[0] == v.shape[0] and q.shape[1] == k.shape[1] == v.shape[1]):
        return None
    if <char*>cnp.PyArray_DATA(k) != pq + fq * isz or \
            <char*>cnp.PyArray_DATA(v) != pq + (fq + fk) * isz:
        return None
    cs = (q.shape[1] * W * isz, W * isz, isz)
    for a in (q, k, v):
        if tuple((<object>a).strides) != cs:
            return None
    j = (np.zeros if zero else np.empty)((q.shape[0], q.shape[1], W), dtype=q.dtype)
    return j[:, :, :fq], j[:, :, fq:fq + fk], j[:, :, fq + fk:]


def scaled_dot_product_attention(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, int num_heads,
                                 bint seq_first, object mask, object mask_index,
                                 double dropout_p, bint is_causal, double scale, uint64_t seed,
                                 uint64_t offset):
    """-> (out, saved).  IN q, k, v (B, L|S, H*E|H*Ev) (or sequence-first), one dtype,
    read in place when their rows are unit-stride (views of a fused projection; others
    are copied C-contiguous); mask None or additive (M, Lm, Sm) of that dtype with
    mask_index (B*H,) int64.  OUT out C-contiguous."""
    q, k, v = _readable(q, k, v, seq_first)
    cdef Geo g = _geometry(q, k, v, num_heads, seq_first, mask, is_causal, dropout_p, scale,
                           seed, offset)
    shape = (g.L, g.B, num_heads * g.Ev) if seq_first else (g.B, g.L, num_heads * g.Ev)
    cdef cnp.ndarray out = np.empty(shape, dtype=q.dtype)
    cdef cnp.ndarray lse = np.empty(g.B * g.H * g.L, dtype=q.dtype)
    cdef int T = F32 if q.dtype == np.float32 else F64
    cdef void* pm = _data_or_null(mask, 0 if mask is None else cnp.PyArray_SIZE(mask), T)
    cdef const int64_t* pi = <const int64_t*>_data_or_null(mask_index, g.B * g.H, I64)
    # q, k, v: read by their own strides (_rows_ok); out and lse C-contiguous
    cdef const void* pq = _data_strided(q, T)
    cdef const void* pk = _data_strided(k, T)
    cdef const void* pv = _data_strided(v, T)
    cdef void* po = _data(out, g.B * g.L * g.H * g.Ev, T)
    cdef void* pl = _data(lse, g.B * g.H * g.L, T)
    with single_threaded_blas():
        if T == F32:
            with nogil:
                _fwd[float](<const float*>pq, <const float*>pk, <const float*>pv, <float*>po,
                            <float*>pl, <const float*>pm, pi, &g)
        else:
            with nogil:
                _fwd[double](<const double*>pq, <const double*>pk, <const double*>pv,
                             <double*>po, <double*>pl, <const double*>pm, pi, &g)
    return out, (q, k, v, out, lse, num_heads, seq_first, mask, mask_index, dropout_p,
                 is_causal, scale, seed, offset)


def scaled_dot_product_attention_backward(cnp.ndarray d_out, tuple saved):
    """-> (d_q, d_k, d_v): views of one array when q, k, v were adjacent column blocks of
    one C-contiguous array (see _joint_grads), else C-contiguous.  d_out C-contiguous
    like out."""
    cdef cnp.ndarray q = saved[0], k = saved[1], v = saved[2], out = saved[3], lse = saved[4]
    cdef int H = saved[5]
    cdef bint seq_first = saved[6]
    mask = saved[7]
    mask_index = saved[8]
    cdef Geo g = _geometry(q, k, v, H, seq_first, mask, saved[10], saved[9], saved[11],
                           saved[12], saved[13])
    cdef cnp.ndarray dq, dk, dv
    cdef int ra = 0 if seq_first else 1
    # The kernel writes every gradient element it reaches (first tile beta = 0), so the
    # buffers start empty; only what no tile reaches is zeroed here: everything when
    # there is no query, key or head, and with is_causal the keys after the last query.
    cdef bint blank = g.L == 0 or g.S == 0 or g.B * g.H == 0
    joint = _joint_grads(q, k, v, blank)
    if joint is not None:
        dq, dk, dv = joint
    else:
        alloc = np.zeros if blank else np.empty
        dq = alloc((<object>q).shape, dtype=q.dtype)
        dk = alloc((<object>k).shape, dtype=k.dtype)
        dv = alloc((<object>v).shape, dtype=v.dtype)
    if g.causal and g.S > g.L and not blank:
        if seq_first:
            dk[g.L:] = 0
            dv[g.L:] = 0
        else:
            dk[:, g.L:] = 0
            dv[:, g.L:] = 0
    _strides(dq, ra, &g.dqb, &g.dqld)
    _strides(dk, ra, &g.dkb, &g.dkld)
    _strides(dv, ra, &g.dvb, &g.dvld)
    cdef cnp.ndarray D = np.empty(g.B * g.H * g.L, dtype=q.dtype)
    cdef int T = F32 if q.dtype == np.float32 else F64
    cdef void* pm = _data_or_null(mask, 0 if mask is None else cnp.PyArray_SIZE(mask), T)
    cdef const int64_t* pi = <const int64_t*>_data_or_null(mask_index, g.B * g.H, I64)
    cdef Py_ssize_t no = g.B * g.L * g.H * g.Ev, nrow = g.B * g.H * g.L
    cdef const void* pq = _data_strided(q, T)
    cdef const void* pk = _data_strided(k, T)
    cdef const void* pv = _data_strided(v, T)
    cdef const void* po = _data(out, no, T)
    cdef const void* pdo = _data(d_out, no, T)
    cdef const void* pl = _data(lse, nrow, T)
    cdef void* pD = _data(D, nrow, T)
    cdef void* pdq = _data_strided(dq, T)
    cdef void* pdk = _data_strided(dk, T)
    cdef void* pdv = _data_strided(dv, T)
    # dQ partials of the few-pairs tiled path (_bwd): zeroed, one L x E block per (group,
    # pair); none for the whole-pair kernels
    cdef Py_ssize_t nqp = 0
    if 0 < g.B * g.H < SERIAL_BH and g.L > 0 and g.S > 0 and not (
            T == F32 and _short_train(&g, pm)):
        nqp = _kv_groups(&g) * g.B * g.H * g.L * g.E
    cdef cnp.ndarray dqp = np.zeros(nqp, dtype=q.dtype)
    cdef void* pqp = _data(dqp, nqp, T)
    with single_threaded_blas():
        if T == F32:
            with nogil:
                _bwd[float](<const float*>pq, <const float*>pk, <const float*>pv,
                            <const float*>po, <const float*>pdo, <const float*>pl, <float*>pD,
                            <float*>pdq, <float*>pdk, <float*>pdv, <const float*>pm, pi, &g,
                            <float*>pqp)
        else:
            with nogil:
                _bwd[double](<const double*>pq, <const double*>pk, <const double*>pv,
                             <const double*>po, <const double*>pdo, <const double*>pl,
                             <double*>pD, <double*>pdq, <double*>pdk, <double*>pdv,
                             <const double*>pm, pi, &g, <double*>pqp)
    return dq, dk, dv


# ---------------------------------------------------------------- variable-length attention
# Inference over sequences of different lengths without padding (FlashAttention's varlen):
# batch entry b attends query rows q_start[b] .. + q_len[b] to key rows k_start[b] ..
# + k_len[b] of its own sequence.  A packed batch (the real tokens of every sequence one
# after another, B = 1, starts = cu_seqlens[:-1]) never computes a padded query or key;
# a padded batch with right padding (k_len = real lengths) never reads a padded key.
# Each task (b, h, block of query rows) is the forward's _fwd_block on a Geo narrowed to
# that range: pointers moved to the range's first row, L = q_len[b], S = k_len[b].
# Tasks go longest-first to the threads (dynamic schedule); each writes its own output
# rows only, so results do not depend on the thread count.

cdef int _varlen_fwd(const real* q, const real* k, const real* v, real* o,
                      const int64_t* qs, const int64_t* ql, const int64_t* ks,
                      const int64_t* kl, const int64_t* tasks, Py_ssize_t ntask,
                      Py_ssize_t maxlen, const Geo* g, int nt) except -1 nogil:
    cdef Py_ssize_t t, b, h, i0, FBQ = g.fbq
    cdef Geo gl
    cdef real* sb
    cdef real* acc
    cdef real* lse
    cdef double* mrow
    cdef double* lrow
    cdef int failed = 0, gfail = 0
    with parallel(num_threads=nt):
        sb = <real*>fnn_alloc(FBQ * g.fbk, sizeof(real))
        acc = <real*>fnn_alloc(FBQ * g.Ev + 1, sizeof(real))
        lse = <real*>fnn_alloc(g.H * maxlen + 1, sizeof(real))
        mrow = <double*>fnn_alloc(2 * FBQ, sizeof(double))
        lrow = mrow + FBQ
        if sb == NULL or acc == NULL or lse == NULL or mrow == NULL:
            fnn_flag_set(&failed)
        for t in prange(ntask, schedule="dynamic"):
            if failed:      # this thread's buffers (or another's) are missing: skip the task
                continue
            b = tasks[3 * t]
            h = tasks[3 * t + 1]
            i0 = tasks[3 * t + 2]
            gl = g[0]
            gl.B = 1
            gl.L = ql[b]
            gl.S = kl[b]
            if _fwd_block(q + b * g.qb + qs[b] * g.qld, k + b * g.kb + ks[b] * g.kld,
                          v + b * g.vb + ks[b] * g.vld, o + b * g.ob + qs[b] * g.old, lse,
                          NULL, NULL, &gl, h, i0, sb, acc, mrow, lrow):
                fnn_flag_set(&gfail)
        free(sb)
        free(acc)
        free(lse)
        free(mrow)
    if failed:
        _raise_nomem(FBQ * g.fbk + FBQ * g.Ev + g.H * maxlen + 4 * FBQ, sizeof(double))
    if gfail:
        _raise_gemm_nomem()
    return 0


cdef inline void _short_task(const float* q, const float* k, const float* v, float* o,
                             const int64_t* qs, const int64_t* ql, const int64_t* ks,
                             const int64_t* kl, const Geo* g, Py_ssize_t t) noexcept nogil:
    """Task t = b * H + h of _varlen_short: sequence b, head h."""
    cdef Py_ssize_t b = t // g.H, h = t % g.H
    fnn_ats_head_f32(q + b * g.qb + qs[b] * g.qld + h * g.E, g.qld,
                     k + b * g.kb + ks[b] * g.kld + h * g.E, g.kld,
                     v + b * g.vb + ks[b] * g.vld + h * g.Ev, g.vld,
                     o + b * g.ob + qs[b] * g.old + h * g.Ev, g.old,
                     ql[b], kl[b], g.E, g.Ev, <float>g.scale, g.causal, NULL, NULL, 0)


# a sentence's attention heads on the dense family's pool (OpenMP, from a larger size,
# where it is not built)
include "fnn_sgpool.pxi"
SHORT_ATTENTION_POOL = _sg_pool != NULL
# this build runs training attention of short sequences as whole-pair kernels
# (_short_train: the avx512 and avx2 builds)
SHORT_TRAIN = fnn_atb_fits(1, 1, 16, 16) != 0


ctypedef struct _ShortJob:
    const float* q
    const float* k
    const float* v
    float* o
    const int64_t* qs
    const int64_t* ql
    const int64_t* ks
    const int64_t* kl
    const Geo* g


cdef void _short_job(void* arg, int t) noexcept nogil:
    cdef _ShortJob* j = <_ShortJob*>arg
    _short_task(j.q, j.k, j.v, j.o, j.qs, j.ql, j.ks, j.kl, j.g, t)


cdef void _varlen_short(const float* q, const float* k, const float* v, float* o,
                        const int64_t* qs, const int64_t* ql, const int64_t* ks,
                        const int64_t* kl, Py_ssize_t nb, const Geo* g, int nt) noexcept nogil:
    """Every (sequence, head) of a varlen call whose key ranges fit fnn_attn_short.h (no
    BLAS, no allocation; each task writes its own output rows: the same bits at any
    thread count).  On the dense pool when there is one (tasks claimed one at a time),
    else an OpenMP loop."""
    cdef Py_ssize_t t
    cdef _ShortJob job
    if nt <= 1:
        for t in range(nb * g.H):
            _short_task(q, k, v, o, qs, ql, ks, kl, g, t)
        return
    if _sg_pool != NULL and nb * g.H < (1 << 30):
        job.q = q
        job.k = k
        job.v = v
        job.o = o
        job.qs = qs
        job.ql = ql
        job.ks = ks
        job.kl = kl
        job.g = g
        _sg_pool(_short_job, &job, <int>(nb * g.H), nt)
        return
    for t in prange(nb * g.H, schedule="dynamic", num_threads=nt):
        _short_task(q, k, v, o, qs, ql, ks, kl, g, t)


def varlen_attention(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, object q_start,
                     object q_len, object k_start, object k_len, int num_heads,
                     bint seq_first, bint is_causal, double scale):
    """-> out.  IN q, k, v as scaled_dot_product_attention (read in place when their rows
    are unit-stride); q_start, q_len, k_start, k_len: int64 (nb,) with nb == B, or any nb
    when B == 1 (a packed batch).  OUT out C-contiguous, q's row layout; query rows outside
    every range are 0.  Inference-only (no dropout, no mask, nothing saved)."""
    q, k, v = _readable(q, k, v, seq_first)
    cdef Geo g = _geometry(q, k, v, num_heads, seq_first, None, is_causal, 0.0, scale, 0, 0)
    if g.B == 1:            # a packed batch: every range lies in batch entry 0
        g.qb = g.kb = g.vb = g.ob = 0
    cdef cnp.ndarray[int64_t, ndim=1] qs = np.ascontiguousarray(q_start, dtype=np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] ql = np.ascontiguousarray(q_len, dtype=np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] ks = np.ascontiguousarray(k_start, dtype=np.int64)
    cdef cnp.ndarray[int64_t, ndim=1] kl = np.ascontiguousarray(k_len, dtype=np.int64)
    shape = (g.L, g.B, num_heads * g.Ev) if seq_first else (g.B, g.L, num_heads * g.Ev)
    # ranges do not overlap (checked by the caller): all rows covered when the lengths add up
    cdef Py_ssize_t nq_total = 0, r
    for r in range(ql.shape[0]):
        nq_total += ql[r]
    cdef bint covered = nq_total == g.B * g.L
    cdef const void* pq
    cdef const void* pk
    cdef const void* pv
    cdef void* po
    cdef cnp.ndarray out = (np.empty if covered else np.zeros)(shape, dtype=q.dtype)
    # tasks (b, h, first query row), longest key range first
    cdef Py_ssize_t nb = ql.shape[0], i, j, h, n, ntask = 0, maxlen = 0, work = 0
    cdef Py_ssize_t maxk = 0
    for i in range(nb):
        ntask += (ql[i] + g.fbq - 1) // g.fbq * num_heads
        maxlen = ql[i] if ql[i] > maxlen else maxlen
        maxk = kl[i] if kl[i] > maxk else maxk
        work += ql[i] * (kl[i] + 1)
    if ntask == 0:
        return out
    cdef int nt
    if q.dtype == np.float32 and maxk <= FNN_ATS_LMAX \
            and g.E <= FNN_ATS_EMAX and g.Ev <= FNN_ATS_EMAX:
        # short key ranges (a sentence): fnn_attn_short.h, plain loops per (sequence,
        # head).  The pool's worker is already spinning between a sentence's GEMMs: two
        # threads from ~130k multiply-adds (a 12-token sentence; one head of a 25-token
        # one is ~2 us).  An OpenMP team costs a wake-up: one thread below ~2M.
        nt = _threads_for(work * num_heads * (g.E + g.Ev),
                          (1 << 16) if _sg_pool != NULL else (1 << 20))
        if nt > nb * num_heads:
            nt = <int>(nb * num_heads)
        pq = _data_strided(q, F32)
        pk = _data_strided(k, F32)
        pv = _data_strided(v, F32)
        po = _data(out, g.B * g.L * g.H * g.Ev, F32)
        with nogil:
            _varlen_short(<const float*>pq, <const float*>pk, <const float*>pv, <float*>po,
                          &qs[0], &ql[0], &ks[0], &kl[0], nb, &g, nt)
        return out
    cdef cnp.ndarray[int64_t, ndim=1] order = np.argsort(-(kl * np.minimum(ql, g.fbq)),
                                                         kind="stable").astype(np.int64)
    cdef cnp.ndarray[int64_t, ndim=2] tasks = np.empty((ntask, 3), dtype=np.int64)
    n = 0
    for i in range(nb):
        for h in range(num_heads):
            j = 0
            while j < ql[order[i]]:
                tasks[n, 0] = order[i]
                tasks[n, 1] = h
                tasks[n, 2] = j
                n += 1
                j += g.fbq
    nt = _threads_for(work * num_heads * (g.E + g.Ev + 1), 1 << 18)
    if nt > ntask:
        nt = <int>ntask
    cdef int T = F32 if q.dtype == np.float32 else F64
    pq = _data_strided(q, T)
    pk = _data_strided(k, T)
    pv = _data_strided(v, T)
    po = _data(out, g.B * g.L * g.H * g.Ev, T)
    with single_threaded_blas():
        if T == F32:
            with nogil:
                _varlen_fwd[float](<const float*>pq, <const float*>pk, <const float*>pv,
                                   <float*>po, &qs[0], &ql[0], &ks[0],
                                   &kl[0], &tasks[0, 0], ntask, maxlen, &g, nt)
        else:
            with nogil:
                _varlen_fwd[double](<const double*>pq, <const double*>pk, <const double*>pv,
                                    <double*>po, &qs[0], &ql[0], &ks[0],
                                    &kl[0], &tasks[0, 0], ntask, maxlen, &g, nt)
    return out
