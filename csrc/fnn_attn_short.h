/* Attention of one (sequence, head) whose keys fit L1: up to FNN_ATS_LMAX keys, head
 * widths up to FNN_ATS_EMAX (float32, inference).  The varlen path of a short sentence
 * (MiniLM at batch 1: 25 tokens, 6 heads of 64) spent ~100 us per layer in per-head BLAS
 * calls around tiles of 25 x 25 (and in the BLAS thread-limit context around them); here
 * a (sequence, head) is ~1-3 us of plain loops, no BLAS, no allocation.
 *
 * Per (sequence, head): the keys are transposed onto the stack, scaled (kt[e][j] = scale *
 * k[j][e], j padded with zeros to a multiple of 16), so a query row's scores are one
 * axpy per feature over <= 4 vectors kept in registers; softmax over the row (<= 64 terms
 * <= 1: the sum in float on AVX-512, in double in the plain C form); the output row is
 * the probability-weighted sum of value rows, then times 1 / sum.  No reduction across
 * vector lanes: every score and every output element is summed in an order fixed by the
 * shapes alone, whatever the thread count (one FMA chain over the features per score,
 * over the keys per output element; on AVX-512 and AVX2 four query rows run side by side, which
 * gives the FMA units independent chains and loads each key and value row once for
 * four rows).  A NaN score makes its row NaN; a range
 * without keys, or a row whose scores are all -inf, gives zeros (the tiled path's
 * conventions). */
#ifndef FNN_ATTN_SHORT_H
#define FNN_ATTN_SHORT_H
#include <stddef.h>
#include <math.h>
#include <string.h>
#include "fnn_math.h"
#include "fnn_philox.h"
#include "fnn_transpose16.h"

/* Dropout on the attention weights (training): weight (row, j) of a (sequence, head) is
 * kept with the multiplier `keep` when Philox element (row0 + row) * S + j is >= p, as the
 * tiled path's _drop_tile (the same mask, the same bits of the multipliers). */
typedef struct {
    double p;
    float keep;
    uint64_t seed, offset;
} fnn_ats_drop;

/* mult[0..n) = the row's multipliers (element idx0 + j), zeros up to np */
static inline void fnn_ats_drop_row(const fnn_ats_drop *d, uint64_t idx0, ptrdiff_t n,
                                    ptrdiff_t np, float *mult)
{
    uint64_t last = ~(uint64_t)0;
    fnn_philox_out o = {{0, 0, 0, 0}};
    ptrdiff_t j;
    for (j = 0; j < n; j++) {
        const uint64_t idx = idx0 + (uint64_t)j, blk = idx >> 2;
        if (blk != last) {
            o = fnn_philox4x32(blk, d->offset, d->seed);
            last = blk;
        }
        const double u = (double)(o.v[idx & 3] >> 8) * (1.0 / 16777216.0);
        mult[j] = u >= d->p ? d->keep : 0.0f;
    }
    for (; j < np; j++)
        mult[j] = 0.0f;
}

#define FNN_ATS_LMAX 64     /* keys per (sequence, head) */
#define FNN_ATS_EMAX 128    /* features per head (query/key and value) */

/* t[e * FNN_ATS_LMAX + j] = scale * x[j * ld + e] for j < n, e < E, and zeros for the
 * padding columns n <= j < 16 ceil(n / 16): the keys (scaled) or values of a (sequence,
 * head) turned feature-major on the stack.  AVX-512: 16 x 16 blocks transposed in
 * registers (compiled as scalar stores, the transposes were ~14% of the training
 * backward's time at the GPT demo's 64 x 32 heads); the same products, the same bits. */
static inline void fnn_ats_transpose(const float *x, ptrdiff_t ld, ptrdiff_t n, ptrdiff_t E,
                                     float scale, float *t)
{
#if defined(__AVX512F__)
    const __m512 vs = _mm512_set1_ps(scale);
    for (ptrdiff_t j0 = 0; j0 < n; j0 += 16) {
        const int rows = n - j0 < 16 ? (int)(n - j0) : 16;
        for (ptrdiff_t e0 = 0; e0 < E; e0 += 16) {
            const int w = E - e0 < 16 ? (int)(E - e0) : 16;
            const __mmask16 m = (__mmask16)((1u << w) - 1u);
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = i < rows ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + (j0 + i) * ld + e0), vs)
                                : _mm512_setzero_ps();
            fnn_transpose16_ps(r);
            for (int i = 0; i < w; i++)
                _mm512_store_ps(t + (e0 + i) * FNN_ATS_LMAX + j0, r[i]);
        }
    }
#elif defined(FNN_HAVE_AVX2)
    /* 8 x 8 blocks (fnn_transpose8_ps): key rows past n are zeros, features past E are
     * masked off the loads and not stored */
    const __m256 vs = _mm256_set1_ps(scale);
    const ptrdiff_t lp = (n + 15) / 16 * 16;
    for (ptrdiff_t j0 = 0; j0 < lp; j0 += 8) {
        const int rows = n - j0 >= 8 ? 8 : n - j0 > 0 ? (int)(n - j0) : 0;
        for (ptrdiff_t e0 = 0; e0 < E; e0 += 8) {
            const int w = E - e0 < 8 ? (int)(E - e0) : 8;
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(w),
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                r[i] = i < rows ? _mm256_mul_ps(_mm256_maskload_ps(x + (j0 + i) * ld + e0, m), vs)
                                : _mm256_setzero_ps();
            fnn_transpose8_ps(r);
            for (int i = 0; i < w; i++)
                _mm256_store_ps(t + (e0 + i) * FNN_ATS_LMAX + j0, r[i]);
        }
    }
#else
    const ptrdiff_t lp = (n + 15) / 16 * 16;
    ptrdiff_t j, e;
    for (j = 0; j < n; j++)                 /* contiguous reads of each row */
        for (e = 0; e < E; e++)
            t[e * FNN_ATS_LMAX + j] = scale * x[j * ld + e];
    for (j = n; j < lp; j++)
        for (e = 0; e < E; e++)
            t[e * FNN_ATS_LMAX + j] = 0.0f;
#endif
}

#if defined(FNN_HAVE_AVX512)
/* x[r][u] = sum_e a_r[e] * t[e][16u..16u+16) for four rows a_r and u < nu: one FMA
 * chain over e in order per (row, vector), the 4 nu chains side by side, each t row
 * loaded once for the four rows; nu a compile-time constant here.  The forward's scores
 * and the backward's recomputation of them are this one function: the same bits. */
static inline __attribute__((always_inline)) void
fnn_ats_dots4(const int nu, const float *const *a, const float *t, ptrdiff_t E,
                  __m512 (*x)[4])
{
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int u = 0; u < nu; u++)
            acc[r][u] = _mm512_setzero_ps();
    for (ptrdiff_t e = 0; e < E; e++) {
        const float *te = t + e * FNN_ATS_LMAX;
        __m512 tv[4];
        for (int u = 0; u < nu; u++)
            tv[u] = _mm512_load_ps(te + 16 * u);
        for (int r = 0; r < 4; r++) {
            const __m512 b = _mm512_set1_ps(a[r][e]);
            for (int u = 0; u < nu; u++)
                acc[r][u] = _mm512_fmadd_ps(b, tv[u], acc[r][u]);
        }
    }
    for (int r = 0; r < 4; r++)
        for (int u = 0; u < nu; u++)
            x[r][u] = acc[r][u];
}

/* Four query rows with AVX-512 (rows q + r qld, r < 4, n[r] keys each, nv = the vectors
 * of the most keys): the scores of each row and key vector are one FMA chain over the
 * features in order (fnn_ats_dots4, which the backward's recomputation shares); softmax
 * per row on whole vectors (lanes past n[r] are -inf: exp gives
 * 0); each output vector one FMA chain over the keys in order, each value row loaded
 * once for the rows that see it.  out[r] = rows of Ev = 16 nc; s: 4 rows of
 * FNN_ATS_LMAX (the weights); lse (may be NULL): 4 values; mult (may be NULL): 4 rows
 * of dropout multipliers (the denominator is taken before them).  nv and nc are
 * compile-time constants in each inlined copy.  A row with a NaN score is NaN (as
 * torch), one without a finite score zeros, its lse NaN / -inf.  fnn_ats_row_c sums in
 * the same orders (one chain per score, one per output element). */
static inline __attribute__((always_inline)) void
fnn_ats_rows4_512(int nv, int nc, const float *q, ptrdiff_t qld, const float *kt,
                  ptrdiff_t E, const float *v, ptrdiff_t vld, const ptrdiff_t *n,
                  float *const *out, float *s, float *lse, const float *mult)
{
    const float *qr[4] = {q, q + qld, q + 2 * qld, q + 3 * qld};
    __m512 a[4][4];
    fnn_ats_dots4(nv, qr, kt, E, a);
    float inv[4];
    int bad[4];
    for (int r = 0; r < 4; r++) {
        float *sr = s + r * FNN_ATS_LMAX;
        __m512 mx = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
        __mmask16 nan = 0;
        for (int u = 0; u < nv; u++) {
            const ptrdiff_t left = n[r] - 16 * u;
            const __mmask16 live = left >= 16 ? (__mmask16)0xffff
                                 : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
            a[r][u] = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), a[r][u]);
            nan |= _mm512_cmp_ps_mask(a[r][u], a[r][u], _CMP_UNORD_Q);
            mx = _mm512_max_ps(mx, a[r][u]);
        }
        const float m = _mm512_reduce_max_ps(mx);
        bad[r] = nan ? 1 : m == -INFINITY ? 2 : 0;
        if (bad[r]) {
            for (int u = 0; u < nv; u++)
                _mm512_store_ps(sr + 16 * u, _mm512_setzero_ps());
            inv[r] = 0.0f;
            if (lse)
                lse[r] = bad[r] == 1 ? NAN : -INFINITY;
            continue;
        }
        const __m512 vm = _mm512_set1_ps(m);
        for (int u = 0; u < nv; u++) {
            __m512 p = fnn_exp_nonpos_ps16(_mm512_sub_ps(a[r][u], vm));
            sum = _mm512_add_ps(sum, p);      /* the denominator: weights before dropout */
            if (mult)
                p = _mm512_mul_ps(p, _mm512_load_ps(mult + r * FNN_ATS_LMAX + 16 * u));
            _mm512_store_ps(sr + 16 * u, p);
        }
        const float tot = _mm512_reduce_add_ps(sum);
        inv[r] = 1.0f / tot;
        if (lse)
            lse[r] = m + logf(tot);
    }
    __m512 o[4][8];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < nc; c++)
            o[r][c] = _mm512_setzero_ps();
    /* keys all four rows see, then each row's own (causal rows see one key more each) */
    ptrdiff_t jc = n[0];
    for (int r = 1; r < 4; r++)
        jc = n[r] < jc ? n[r] : jc;
    for (ptrdiff_t j = 0; j < jc; j++) {
        const float *vr = v + j * vld;
        __m512 vv[8];
        for (int c = 0; c < nc; c++)
            vv[c] = _mm512_loadu_ps(vr + 16 * c);
        for (int r = 0; r < 4; r++) {
            const __m512 p = _mm512_set1_ps(s[r * FNN_ATS_LMAX + j]);
            for (int c = 0; c < nc; c++)
                o[r][c] = _mm512_fmadd_ps(p, vv[c], o[r][c]);
        }
    }
    for (int r = 0; r < 4; r++)
        for (ptrdiff_t j = jc; j < n[r]; j++) {
            const __m512 p = _mm512_set1_ps(s[r * FNN_ATS_LMAX + j]);
            for (int c = 0; c < nc; c++)
                o[r][c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + j * vld + 16 * c), o[r][c]);
        }
    for (int r = 0; r < 4; r++) {
        const __m512 vi = bad[r] == 1 ? _mm512_set1_ps(NAN) : _mm512_set1_ps(inv[r]);
        for (int c = 0; c < nc; c++)
            _mm512_storeu_ps(out[r] + 16 * c, bad[r] ? (bad[r] == 1 ? vi : _mm512_setzero_ps())
                                                      : _mm512_mul_ps(o[r][c], vi));
    }
}

#define FNN_ATS_NV4(nc)                                                                  \
    switch (nv) {                                                                        \
    case 1: fnn_ats_rows4_512(1, nc, q, qld, kt, E, v, vld, n, out, s, lse, mult); return 1; \
    case 2: fnn_ats_rows4_512(2, nc, q, qld, kt, E, v, vld, n, out, s, lse, mult); return 1; \
    case 3: fnn_ats_rows4_512(3, nc, q, qld, kt, E, v, vld, n, out, s, lse, mult); return 1; \
    default: fnn_ats_rows4_512(4, nc, q, qld, kt, E, v, vld, n, out, s, lse, mult); return 1; \
    }

/* Four rows (fnn_ats_rows4_512) -> 1 when done here (Ev a multiple of 16 up to 128), else
 * 0 with nothing written */
static int fnn_ats_rows4_vec(int nv, const float *q, ptrdiff_t qld, const float *kt,
                             ptrdiff_t E, const float *v, ptrdiff_t vld, const ptrdiff_t *n,
                             ptrdiff_t Ev, float *const *out, float *s, float *lse,
                             const float *mult)
{
    if (Ev % 16)
        return 0;
    switch (Ev / 16) {
    case 1: FNN_ATS_NV4(1)
    case 2: FNN_ATS_NV4(2)
    case 3: FNN_ATS_NV4(3)
    case 4: FNN_ATS_NV4(4)
    case 5: FNN_ATS_NV4(5)
    case 6: FNN_ATS_NV4(6)
    case 7: FNN_ATS_NV4(7)
    case 8: FNN_ATS_NV4(8)
    default: return 0;
    }
}
#undef FNN_ATS_NV4
#elif defined(FNN_HAVE_AVX2)
/* The avx2 build's forms.  Sixteen ymm registers hold a tile of four rows by 16 keys or
 * 16 features (8 sums) with its operands, so every pass below works on one 16-float chunk
 * at a time and walks the chunks; each score, weight sum and gradient element is still one
 * FMA chain in an order fixed by the shapes. */

/* x[r][0..1] = sum_e a_r[e] * t[e][0..16) for four rows a_r: one FMA chain over e in order
 * per score, the 8 chains side by side, each t row loaded once for the four rows.  The
 * forward's scores and the backward's recomputation of them are this one function: the
 * same bits. */
static inline __attribute__((always_inline)) void
fnn_ats_dots4x16(const float *const *a, const float *t, ptrdiff_t E, __m256 (*x)[2])
{
    __m256 acc[4][2];
    for (int r = 0; r < 4; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (ptrdiff_t e = 0; e < E; e++) {
        const __m256 t0 = _mm256_load_ps(t + e * FNN_ATS_LMAX);
        const __m256 t1 = _mm256_load_ps(t + e * FNN_ATS_LMAX + 8);
        for (int r = 0; r < 4; r++) {
            const __m256 b = _mm256_broadcast_ss(a[r] + e);
            acc[r][0] = _mm256_fmadd_ps(b, t0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(b, t1, acc[r][1]);
        }
    }
    for (int r = 0; r < 4; r++) {
        x[r][0] = acc[r][0];
        x[r][1] = acc[r][1];
    }
}

/* all-ones in the lanes below `left` (clamped to 0..8) */
static inline __m256 fnn_ats_live8(ptrdiff_t left)
{
    const int l = left >= 8 ? 8 : left > 0 ? (int)left : 0;
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(l),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/* a[0..1] += sum_{j0 <= j < n} p[j] x_j (16 floats of rows x + j xld) */
static inline __attribute__((always_inline)) void
fnn_ats_wsum_rest(const float *p, const float *x, ptrdiff_t xld, ptrdiff_t j0, ptrdiff_t n,
                  __m256 *a)
{
    __m256 a0 = a[0], a1 = a[1];
    for (ptrdiff_t j = j0; j < n; j++) {
        const __m256 b = _mm256_broadcast_ss(p + j);
        a0 = _mm256_fmadd_ps(b, _mm256_loadu_ps(x + j * xld), a0);
        a1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(x + j * xld + 8), a1);
    }
    a[0] = a0;
    a[1] = a1;
}

/* o[r][0..1] = sum_{j < n[r]} p_r[j] x_j (16 floats of rows x + j xld; p rows of
 * FNN_ATS_LMAX) for four rows: one FMA chain over the keys in order per output element,
 * each x row loaded once for the rows that see it (the keys all four see first, then each
 * row's own). */
static inline __attribute__((always_inline)) void
fnn_ats_wsum4x16(const float *p, const float *x, ptrdiff_t xld, const ptrdiff_t *n,
                 __m256 (*o)[2])
{
    __m256 acc[4][2];
    for (int r = 0; r < 4; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    ptrdiff_t jc = n[0];
    for (int r = 1; r < 4; r++)
        jc = n[r] < jc ? n[r] : jc;
    for (ptrdiff_t j = 0; j < jc; j++) {
        const __m256 x0 = _mm256_loadu_ps(x + j * xld), x1 = _mm256_loadu_ps(x + j * xld + 8);
        for (int r = 0; r < 4; r++) {
            const __m256 b = _mm256_broadcast_ss(p + r * FNN_ATS_LMAX + j);
            acc[r][0] = _mm256_fmadd_ps(b, x0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(b, x1, acc[r][1]);
        }
    }
    /* each row's own keys: a call per row with its accumulators (a loop over the rows
     * kept them in memory) */
    fnn_ats_wsum_rest(p, x, xld, jc, n[0], acc[0]);
    fnn_ats_wsum_rest(p + FNN_ATS_LMAX, x, xld, jc, n[1], acc[1]);
    fnn_ats_wsum_rest(p + 2 * FNN_ATS_LMAX, x, xld, jc, n[2], acc[2]);
    fnn_ats_wsum_rest(p + 3 * FNN_ATS_LMAX, x, xld, jc, n[3], acc[3]);
    for (int r = 0; r < 4; r++) {
        o[r][0] = acc[r][0];
        o[r][1] = acc[r][1];
    }
}

/* Four query rows (as fnn_ats_rows4_512, in 16-key and 16-feature chunks): the scores
 * into s, softmax per row on whole vectors (lanes past n[r] -inf: exp gives 0), then each
 * 16-float chunk of the output rows.  Ev a multiple of 16 up to FNN_ATS_EMAX. */
static int fnn_ats_rows4_vec(int nv, const float *q, ptrdiff_t qld, const float *kt,
                             ptrdiff_t E, const float *v, ptrdiff_t vld, const ptrdiff_t *n,
                             ptrdiff_t Ev, float *const *out, float *s, float *lse,
                             const float *mult)
{
    if (Ev % 16 || Ev > FNN_ATS_EMAX)
        return 0;
    const float *qr[4] = {q, q + qld, q + 2 * qld, q + 3 * qld};
    __m256 x[4][2];
    for (int u = 0; u < nv; u++) {
        fnn_ats_dots4x16(qr, kt + 16 * u, E, x);
        for (int r = 0; r < 4; r++) {
            _mm256_store_ps(s + r * FNN_ATS_LMAX + 16 * u, x[r][0]);
            _mm256_store_ps(s + r * FNN_ATS_LMAX + 16 * u + 8, x[r][1]);
        }
    }
    float inv[4];
    int bad[4];
    for (int r = 0; r < 4; r++) {
        float *sr = s + r * FNN_ATS_LMAX;
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        __m256 mx = ninf, nan = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
        for (int h = 0; h < 2 * nv; h++) {
            const __m256 a = _mm256_blendv_ps(ninf, _mm256_load_ps(sr + 8 * h),
                                              fnn_ats_live8(n[r] - 8 * h));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
            mx = _mm256_max_ps(mx, a);
            _mm256_store_ps(sr + 8 * h, a);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float m = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
        bad[r] = _mm256_movemask_ps(nan) ? 1 : m == -INFINITY ? 2 : 0;
        if (bad[r]) {
            inv[r] = 0.0f;
            if (lse)
                lse[r] = bad[r] == 1 ? NAN : -INFINITY;
            for (int h = 0; h < 2 * nv; h++)
                _mm256_store_ps(sr + 8 * h, _mm256_setzero_ps());
            continue;
        }
        const __m256 vm = _mm256_set1_ps(m);
        for (int h = 0; h < 2 * nv; h++) {
            __m256 p = fnn_exp_nonpos_ps(_mm256_sub_ps(_mm256_load_ps(sr + 8 * h), vm));
            sum = _mm256_add_ps(sum, p);      /* the denominator: weights before dropout */
            if (mult)
                p = _mm256_mul_ps(p, _mm256_load_ps(mult + r * FNN_ATS_LMAX + 8 * h));
            _mm256_store_ps(sr + 8 * h, p);
        }
        const float tot = fnn_hsum8(sum);
        inv[r] = 1.0f / tot;
        if (lse)
            lse[r] = m + logf(tot);
    }
    for (ptrdiff_t c0 = 0; c0 < Ev; c0 += 16) {
        __m256 o[4][2];
        fnn_ats_wsum4x16(s, v + c0, vld, n, o);
        for (int r = 0; r < 4; r++) {
            const __m256 vi = bad[r] == 1 ? _mm256_set1_ps(NAN)
                            : bad[r] ? _mm256_setzero_ps() : _mm256_set1_ps(inv[r]);
            _mm256_storeu_ps(out[r] + c0, bad[r] ? vi : _mm256_mul_ps(o[r][0], vi));
            _mm256_storeu_ps(out[r] + c0 + 8, bad[r] ? vi : _mm256_mul_ps(o[r][1], vi));
        }
    }
    return 1;
}
#else
static int fnn_ats_rows4_vec(int nv, const float *q, ptrdiff_t qld, const float *kt,
                             ptrdiff_t E, const float *v, ptrdiff_t vld, const ptrdiff_t *n,
                             ptrdiff_t Ev, float *const *out, float *s, float *lse,
                             const float *mult)
{
    (void)nv; (void)q; (void)qld; (void)kt; (void)E; (void)v; (void)vld; (void)n; (void)Ev;
    (void)out; (void)s; (void)lse; (void)mult;
    return 0;
}
#endif

/* One query row in plain C (other variants, or Ev not a multiple of 16). */
static void fnn_ats_row_c(const float *q, const float *kt, ptrdiff_t E, const float *v,
                          ptrdiff_t vld, ptrdiff_t Lk, ptrdiff_t lp, ptrdiff_t Ev, float *out,
                          float *s, float *acc, float *lse, const float *mult)
{
    float mx = -INFINITY, inv;
    double sum = 0.0;
    int nan = 0;
    ptrdiff_t j, e, c;
    for (j = 0; j < lp; j++)
        s[j] = 0.0f;
    for (e = 0; e < E; e++) {
        const float a = q[e];
        const float *kr = kt + e * FNN_ATS_LMAX;
        for (j = 0; j < lp; j++)
            s[j] += a * kr[j];
    }
    for (j = 0; j < Lk; j++) {
        if (s[j] != s[j])
            nan = 1;
        mx = s[j] > mx ? s[j] : mx;
    }
    if (nan || mx == -INFINITY) {
        for (c = 0; c < Ev; c++)
            out[c] = nan ? NAN : 0.0f;
        if (lse)
            *lse = nan ? NAN : -INFINITY;
        return;
    }
    for (j = 0; j < Lk; j++) {
        s[j] = fnn_expf_nonpos(s[j] - mx);
        sum += s[j];
    }
    if (mult)                       /* dropout after the denominator */
        for (j = 0; j < Lk; j++)
            s[j] *= mult[j];
    for (c = 0; c < Ev; c++)
        acc[c] = 0.0f;
    for (j = 0; j < Lk; j++) {
        const float p = s[j];
        const float *vr = v + j * vld;
        for (c = 0; c < Ev; c++)
            acc[c] += p * vr[c];
    }
    inv = (float)(1.0 / sum);
    if (lse)
        *lse = mx + (float)log(sum);
    for (c = 0; c < Ev; c++)
        out[c] = acc[c] * inv;
}

/* Query rows q[0..Lq) (row stride qld) against keys k[0..Lk) / values v[0..Lk) (row
 * strides kld, vld) of one head -> out rows (stride old).  Lk <= FNN_ATS_LMAX,
 * E, Ev <= FNN_ATS_EMAX.  causal: query row i sees keys 0..i only (top-left aligned, as
 * the tiled path).  lse (may be NULL): per query row, the log of its softmax denominator
 * in the scaled scores' units (max + log(sum)), -inf for a row without keys: what the
 * training backward needs.  drop (may be NULL): dropout on the weights, row i's mask at
 * Philox elements (row0 + i) * Lk + j (fnn_ats_drop). */
static void fnn_ats_head_f32(const float *q, ptrdiff_t qld, const float *k, ptrdiff_t kld,
                             const float *v, ptrdiff_t vld, float *out, ptrdiff_t old,
                             ptrdiff_t Lq, ptrdiff_t Lk, ptrdiff_t E, ptrdiff_t Ev, float scale,
                             int causal, float *lse, const fnn_ats_drop *drop, uint64_t row0)
{
    float mult[4 * FNN_ATS_LMAX] __attribute__((aligned(64)));
    float kt[FNN_ATS_EMAX * FNN_ATS_LMAX] __attribute__((aligned(64)));
    float s[4 * FNN_ATS_LMAX] __attribute__((aligned(64)));
    float acc[FNN_ATS_EMAX] __attribute__((aligned(64)));
    float qbuf[4 * FNN_ATS_EMAX], spare[FNN_ATS_EMAX], lse4[4];
    ptrdiff_t i;
    if (Lk == 0) {
        for (i = 0; i < Lq; i++) {
            memset(out + i * old, 0, (size_t)Ev * sizeof(float));
            if (lse)
                lse[i] = -INFINITY;
        }
        return;
    }
    fnn_ats_transpose(k, kld, Lk, E, scale, kt);
    for (i = 0; i < Lq; i += 4) {
        /* four rows at a time (fnn_ats_rows4_vec); past Lq the last row again, into a
         * spare output */
        const int rows = Lq - i < 4 ? (int)(Lq - i) : 4;
        const float *qq = q + i * qld;
        ptrdiff_t ql = qld, nn[4], nmax = 0;
        float *op[4];
        if (rows < 4) {
            for (int r = 0; r < 4; r++)
                memcpy(qbuf + r * E, q + (i + (r < rows ? r : rows - 1)) * qld,
                       (size_t)E * sizeof(float));
            qq = qbuf;
            ql = E;
        }
        for (int r = 0; r < 4; r++) {
            const ptrdiff_t ir = i + (r < rows ? r : rows - 1);
            nn[r] = causal && ir + 1 < Lk ? ir + 1 : Lk;
            nmax = nn[r] > nmax ? nn[r] : nmax;
            op[r] = r < rows ? out + (i + r) * old : spare;
        }
        const int nv = (int)((nmax + 15) / 16);
        if (drop)
            for (int r = 0; r < 4; r++)
                fnn_ats_drop_row(drop, (row0 + (uint64_t)(i + (r < rows ? r : rows - 1)))
                                 * (uint64_t)Lk, nn[r], (ptrdiff_t)nv * 16,
                                 mult + r * FNN_ATS_LMAX);
        if (fnn_ats_rows4_vec(nv, qq, ql, kt, E, v, vld, nn, Ev, op, s, lse4,
                              drop ? mult : NULL)) {
            if (lse)
                for (int r = 0; r < rows; r++)
                    lse[i + r] = lse4[r];
            continue;
        }
        for (int r = 0; r < rows; r++) {
            const ptrdiff_t n = nn[r], lp = (n + 15) / 16 * 16;
            if (drop)
                fnn_ats_drop_row(drop, (row0 + (uint64_t)(i + r)) * (uint64_t)Lk, n, lp, mult);
            fnn_ats_row_c(q + (i + r) * qld, kt, E, v, vld, n, lp, Ev, out + (i + r) * old, s,
                          acc, lse ? lse + i + r : NULL, drop ? mult : NULL);
        }
    }
}

/* Training backward of one (sequence, head) whose queries and keys fit L1 (L, S <=
 * FNN_ATS_LMAX; E, Ev multiples of 16 up to FNN_ATB_EMAX; AVX-512, or AVX2 in 16-float
 * chunks: fnn_atb_pair256).  The tiled path spent
 * ~1 ms per GPT-demo layer (64 pairs of 64 x 64 x 32) in per-tile BLAS calls; here a pair
 * is a few microseconds of register-tiled loops.  Per query row i: P_i = exp(scores_i -
 * lse_i) (the forward's scores: scaled keys transposed on the stack, the same sums),
 * dP_i = dO_i V^T, dS_i = P_i (dP_i - D_i) scale, dQ_i = dS_i K, written in place; P and
 * dS rows are kept (64 x 64 each) for dK = dS^T Q and dV = P^T dO, four keys at a time
 * over the query rows.  Every sum runs in an order fixed by the shapes: the same bits
 * at any thread count. */
#define FNN_ATB_EMAX 64

/* The workspace of a pair (both vector forms): keys (scaled) and values transposed at
 * kt / vt, the P and dS rows after them. */
static inline __attribute__((always_inline)) void
fnn_atb_stage(const float *k, ptrdiff_t kld, const float *v, ptrdiff_t vld, ptrdiff_t S,
              ptrdiff_t E, ptrdiff_t Ev, float scale, float *ws, float **kt, float **vt,
              float **P, float **dS)
{
    *kt = ws;
    *vt = ws + FNN_ATB_EMAX * FNN_ATS_LMAX;
    *P = *vt + FNN_ATB_EMAX * FNN_ATS_LMAX;
    *dS = *P + FNN_ATS_LMAX * FNN_ATS_LMAX;
    fnn_ats_transpose(k, kld, S, E, scale, *kt);
    fnn_ats_transpose(v, vld, S, Ev, 1.0f, *vt);
}

/* The group of four query rows from row i that both vector forms work on (past L, the
 * last row again, not stored): the rows of Q and dO, each row's key count (causal: up to
 * its own) -> the most keys in the group. */
static inline __attribute__((always_inline)) ptrdiff_t
fnn_atb_group4(ptrdiff_t i, int rows, const float *q, ptrdiff_t qld, const float *dout,
               ptrdiff_t old, ptrdiff_t S, int causal, const float **qr, const float **dr,
               ptrdiff_t *nn)
{
    ptrdiff_t nmax = 0;
    for (int r = 0; r < 4; r++) {
        const ptrdiff_t ir = i + (r < rows ? r : rows - 1);
        qr[r] = q + ir * qld;
        dr[r] = dout + ir * old;
        nn[r] = causal && ir + 1 < S ? ir + 1 : S;
        nmax = nn[r] > nmax ? nn[r] : nmax;
    }
    return nmax;
}

#if defined(FNN_HAVE_AVX512)
static inline __attribute__((always_inline)) void
fnn_atb_rowdot4(const float *const *a, const float *t, ptrdiff_t E, int nu, __m512 (*x)[4])
{
    switch (nu) {
    case 1: fnn_ats_dots4(1, a, t, E, x); break;
    case 2: fnn_ats_dots4(2, a, t, E, x); break;
    case 3: fnn_ats_dots4(3, a, t, E, x); break;
    default: fnn_ats_dots4(4, a, t, E, x); break;
    }
}

/* one dQ row's keys j0..n past the pairs it shares with its neighbour (fnn_atb_dq2): key
 * pairs into the even (c0) and odd (c1) chains, an odd last key into the even one.  A
 * function of its own, called with each row's arrays: selecting the arrays by a pointer
 * kept them in memory (a store of every accumulator per key pair). */
static inline __attribute__((always_inline)) void
fnn_atb_dq_rest(int ne, const float *d, ptrdiff_t j0, ptrdiff_t n, const float *k,
                ptrdiff_t kld, __m512 *c0, __m512 *c1)
{
    ptrdiff_t jj = j0;
    for (; jj + 2 <= n; jj += 2) {
        const __m512 s0 = _mm512_set1_ps(d[jj]), s1 = _mm512_set1_ps(d[jj + 1]);
        const float *kr = k + jj * kld;
        for (int c = 0; c < ne; c++) {
            c0[c] = _mm512_fmadd_ps(s0, _mm512_loadu_ps(kr + 16 * c), c0[c]);
            c1[c] = _mm512_fmadd_ps(s1, _mm512_loadu_ps(kr + kld + 16 * c), c1[c]);
        }
    }
    if (jj < n) {
        const __m512 s0 = _mm512_set1_ps(d[jj]);
        for (int c = 0; c < ne; c++)
            c0[c] = _mm512_fmadd_ps(s0, _mm512_loadu_ps(k + jj * kld + 16 * c), c0[c]);
    }
}

/* dQ rows i (n0 keys) and i + 1 (n1 keys): dq_r = sum_j dS_rj K_j, each row in two chains
 * (even and odd keys; an odd last key into the even chain), the two rows side by side
 * over their common key pairs (each K row loaded once for both), then each row's rest:
 * per row the same FMAs in the same order as a row on its own */
static inline __attribute__((always_inline)) void
fnn_atb_dq2(int ne, const float *d0, ptrdiff_t n0, const float *d1, ptrdiff_t n1,
            const float *k, ptrdiff_t kld, float *q0, float *q1)
{
    __m512 a0[4], a1[4], b0[4], b1[4];
    for (int c = 0; c < ne; c++)
        a0[c] = a1[c] = b0[c] = b1[c] = _mm512_setzero_ps();
    const ptrdiff_t jc = (n0 < n1 ? n0 : n1) & ~(ptrdiff_t)1;
    ptrdiff_t j;
    for (j = 0; j < jc; j += 2) {
        const __m512 s0 = _mm512_set1_ps(d0[j]), s1 = _mm512_set1_ps(d0[j + 1]);
        const __m512 t0 = _mm512_set1_ps(d1[j]), t1 = _mm512_set1_ps(d1[j + 1]);
        const float *kr = k + j * kld;
        for (int c = 0; c < ne; c++) {
            const __m512 x0 = _mm512_loadu_ps(kr + 16 * c), x1 = _mm512_loadu_ps(kr + kld + 16 * c);
            a0[c] = _mm512_fmadd_ps(s0, x0, a0[c]);
            a1[c] = _mm512_fmadd_ps(s1, x1, a1[c]);
            b0[c] = _mm512_fmadd_ps(t0, x0, b0[c]);
            b1[c] = _mm512_fmadd_ps(t1, x1, b1[c]);
        }
    }
    fnn_atb_dq_rest(ne, d0, jc, n0, k, kld, a0, a1);
    fnn_atb_dq_rest(ne, d1, jc, n1, k, kld, b0, b1);
    for (int c = 0; c < ne; c++) {
        _mm512_storeu_ps(q0 + 16 * c, _mm512_add_ps(a0[c], a1[c]));
        if (q1)
            _mm512_storeu_ps(q1 + 16 * c, _mm512_add_ps(b0[c], b1[c]));
    }
}

/* out[j] (rows of width 16 ne, stride old) = sum_{i = i0}^{L-1} w[i][j] a_i for the four
 * keys j0..j0+3 (w rows of FNN_ATS_LMAX, a rows of stride ald); rows j >= S not written */
static inline __attribute__((always_inline)) void
fnn_atb_cols4(int ne, const float *w, const float *a, ptrdiff_t ald, ptrdiff_t i0,
              ptrdiff_t L, ptrdiff_t j0, ptrdiff_t S, float *out, ptrdiff_t old)
{
    __m512 c0[4], c1[4], c2[4], c3[4];
    for (int c = 0; c < ne; c++)
        c0[c] = c1[c] = c2[c] = c3[c] = _mm512_setzero_ps();
    for (ptrdiff_t i = i0; i < L; i++) {
        const float *wr = w + i * FNN_ATS_LMAX + j0, *ar = a + i * ald;
        const __m512 w0 = _mm512_set1_ps(wr[0]), w1 = _mm512_set1_ps(wr[1]);
        const __m512 w2 = _mm512_set1_ps(wr[2]), w3 = _mm512_set1_ps(wr[3]);
        for (int c = 0; c < ne; c++) {
            const __m512 x = _mm512_loadu_ps(ar + 16 * c);
            c0[c] = _mm512_fmadd_ps(w0, x, c0[c]);
            c1[c] = _mm512_fmadd_ps(w1, x, c1[c]);
            c2[c] = _mm512_fmadd_ps(w2, x, c2[c]);
            c3[c] = _mm512_fmadd_ps(w3, x, c3[c]);
        }
    }
    for (int c = 0; c < ne; c++) {
        _mm512_storeu_ps(out + j0 * old + 16 * c, c0[c]);
        if (j0 + 1 < S) _mm512_storeu_ps(out + (j0 + 1) * old + 16 * c, c1[c]);
        if (j0 + 2 < S) _mm512_storeu_ps(out + (j0 + 2) * old + 16 * c, c2[c]);
        if (j0 + 3 < S) _mm512_storeu_ps(out + (j0 + 3) * old + 16 * c, c3[c]);
    }
}

static inline __attribute__((always_inline)) void
fnn_atb_pair512(int ne, int nev, const float *q, ptrdiff_t qld, const float *k, ptrdiff_t kld,
                const float *v, ptrdiff_t vld, const float *dout, ptrdiff_t old,
                const float *lse, const float *D, float *dq, ptrdiff_t dqld, float *dk,
                ptrdiff_t dkld, float *dv, ptrdiff_t dvld, ptrdiff_t L, ptrdiff_t S,
                float scale, int causal, float *ws, const fnn_ats_drop *drop, uint64_t row0)
{
    float mult[FNN_ATS_LMAX] __attribute__((aligned(64)));
    const ptrdiff_t E = 16 * ne, Ev = 16 * nev, LM = FNN_ATS_LMAX;
    float *kt, *vt, *P, *dS;
    const int nvs = (int)((S + 15) / 16);
    ptrdiff_t i, j;
    fnn_atb_stage(k, kld, v, vld, S, E, Ev, scale, ws, &kt, &vt, &P, &dS);
    const __m512 vsc = _mm512_set1_ps(scale);
    for (i = 0; i < L; i += 4) {
        /* four rows' scores and dP rows at a time (fnn_atb_rowdot4; past L the last row
         * again, not stored) */
        const int rows = L - i < 4 ? (int)(L - i) : 4;
        const float *qr[4], *dr[4];
        ptrdiff_t nn[4];
        const ptrdiff_t nmax = fnn_atb_group4(i, rows, q, qld, dout, old, S, causal, qr, dr, nn);
        const int nu = (int)((nmax + 15) / 16);
        __m512 sc[4][4], dp[4][4];
        fnn_atb_rowdot4(qr, kt, E, nu, sc);
        fnn_atb_rowdot4(dr, vt, Ev, nu, dp);
        for (int r = 0; r < rows; r++) {
            const ptrdiff_t n = nn[r];
            float *Pr = P + (i + r) * LM, *dSr = dS + (i + r) * LM;
            const float li = lse[i + r];
            if (drop)
                fnn_ats_drop_row(drop, (row0 + (uint64_t)(i + r)) * (uint64_t)S, n, 16 * nu,
                                 mult);
            const __m512 vl = _mm512_set1_ps(li), vd = _mm512_set1_ps(D[i + r]);
            for (int u = 0; u < nu; u++) {
                const ptrdiff_t left = n - 16 * u;
                const __mmask16 live = left >= 16 ? (__mmask16)0xffff
                                     : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
                /* a row without keys (lse -inf) has zero weights; a NaN lse gives NaN */
                __m512 p = li == -INFINITY ? _mm512_setzero_ps()
                           : _mm512_maskz_mov_ps(live, fnn_exp_nonpos_ps16(_mm512_sub_ps(sc[r][u], vl)));
                __m512 g = dp[r][u], pd = p;
                if (drop) {                 /* dV takes the dropped weights, dP the mask */
                    const __m512 mu = _mm512_load_ps(mult + 16 * u);
                    pd = _mm512_mul_ps(p, mu);
                    g = _mm512_mul_ps(g, mu);
                }
                _mm512_store_ps(Pr + 16 * u, pd);
                _mm512_store_ps(dSr + 16 * u,
                                _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(g, vd)), vsc));
            }
            for (int u = nu; u < nvs; u++) {
                _mm512_store_ps(Pr + 16 * u, _mm512_setzero_ps());
                _mm512_store_ps(dSr + 16 * u, _mm512_setzero_ps());
            }
        }
    }
    /* dQ_i = sum_j dS_ij K_j, two rows at a time (fnn_atb_dq2) */
    for (i = 0; i < L; i += 2) {
        const ptrdiff_t n0 = causal && i + 1 < S ? i + 1 : S;
        if (i + 1 < L) {
            const ptrdiff_t n1 = causal && i + 2 < S ? i + 2 : S;
            fnn_atb_dq2(ne, dS + i * LM, n0, dS + (i + 1) * LM, n1, k, kld, dq + i * dqld,
                        dq + (i + 1) * dqld);
        } else {
            fnn_atb_dq2(ne, dS + i * LM, n0, dS + i * LM, 0, k, kld, dq + i * dqld, NULL);
        }
    }
    /* dK_j = sum_i dS_ij Q_i, dV_j = sum_i P_ij dO_i; causal: rows i >= j only (the
     * others are zero); the padded columns j >= S are zero and not written */
    for (j = 0; j < S; j += 4) {
        const ptrdiff_t i0 = causal ? (j < L ? j : L) : 0;
        fnn_atb_cols4(ne, dS, q, qld, i0, L, j, S, dk, dkld);
        fnn_atb_cols4(nev, P, dout, old, i0, L, j, S, dv, dvld);
    }
}

#define FNN_ATB_NEV(ne)                                                                  \
    switch (nev) {                                                                       \
    case 1: fnn_atb_pair512(ne, 1, q, qld, k, kld, v, vld, dout, old, lse, D, dq, dqld,  \
                            dk, dkld, dv, dvld, L, S, scale, causal, ws, drop, row0); return 1; \
    case 2: fnn_atb_pair512(ne, 2, q, qld, k, kld, v, vld, dout, old, lse, D, dq, dqld,  \
                            dk, dkld, dv, dvld, L, S, scale, causal, ws, drop, row0); return 1; \
    case 3: fnn_atb_pair512(ne, 3, q, qld, k, kld, v, vld, dout, old, lse, D, dq, dqld,  \
                            dk, dkld, dv, dvld, L, S, scale, causal, ws, drop, row0); return 1; \
    case 4: fnn_atb_pair512(ne, 4, q, qld, k, kld, v, vld, dout, old, lse, D, dq, dqld,  \
                            dk, dkld, dv, dvld, L, S, scale, causal, ws, drop, row0); return 1; \
    default: return 0;                                                                   \
    }
#elif defined(FNN_HAVE_AVX2)
/* fnn_atb_dq_rest on 16 features in two 8-lane vectors */
static inline __attribute__((always_inline)) void
fnn_atb_dq_rest8(const float *d, ptrdiff_t j0, ptrdiff_t n, const float *k, ptrdiff_t kld,
                 __m256 *c0, __m256 *c1)
{
    ptrdiff_t jj = j0;
    for (; jj + 2 <= n; jj += 2) {
        const __m256 s0 = _mm256_broadcast_ss(d + jj), s1 = _mm256_broadcast_ss(d + jj + 1);
        const float *kr = k + jj * kld;
        for (int c = 0; c < 2; c++) {
            c0[c] = _mm256_fmadd_ps(s0, _mm256_loadu_ps(kr + 8 * c), c0[c]);
            c1[c] = _mm256_fmadd_ps(s1, _mm256_loadu_ps(kr + kld + 8 * c), c1[c]);
        }
    }
    if (jj < n) {
        const __m256 s0 = _mm256_broadcast_ss(d + jj);
        for (int c = 0; c < 2; c++)
            c0[c] = _mm256_fmadd_ps(s0, _mm256_loadu_ps(k + jj * kld + 8 * c), c0[c]);
    }
}

/* dQ rows i (n0 keys) and i + 1 (n1 keys), the 16 features from k's first column (k, q0
 * and q1 offset to the chunk): as fnn_atb_dq2 -- two chains per element (even and odd
 * keys; an odd last key into the even chain), the rows side by side over their common key
 * pairs, then each row's rest */
static inline __attribute__((always_inline)) void
fnn_atb_dq2x16(const float *d0, ptrdiff_t n0, const float *d1, ptrdiff_t n1, const float *k,
               ptrdiff_t kld, float *q0, float *q1)
{
    __m256 a0[2], a1[2], b0[2], b1[2];
    for (int c = 0; c < 2; c++)
        a0[c] = a1[c] = b0[c] = b1[c] = _mm256_setzero_ps();
    const ptrdiff_t jc = (n0 < n1 ? n0 : n1) & ~(ptrdiff_t)1;
    ptrdiff_t j;
    for (j = 0; j < jc; j += 2) {
        const __m256 s0 = _mm256_broadcast_ss(d0 + j), s1 = _mm256_broadcast_ss(d0 + j + 1);
        const __m256 t0 = _mm256_broadcast_ss(d1 + j), t1 = _mm256_broadcast_ss(d1 + j + 1);
        const float *kr = k + j * kld;
        for (int c = 0; c < 2; c++) {
            const __m256 x0 = _mm256_loadu_ps(kr + 8 * c), x1 = _mm256_loadu_ps(kr + kld + 8 * c);
            a0[c] = _mm256_fmadd_ps(s0, x0, a0[c]);
            a1[c] = _mm256_fmadd_ps(s1, x1, a1[c]);
            b0[c] = _mm256_fmadd_ps(t0, x0, b0[c]);
            b1[c] = _mm256_fmadd_ps(t1, x1, b1[c]);
        }
    }
    fnn_atb_dq_rest8(d0, jc, n0, k, kld, a0, a1);
    fnn_atb_dq_rest8(d1, jc, n1, k, kld, b0, b1);
    for (int c = 0; c < 2; c++) {
        _mm256_storeu_ps(q0 + 8 * c, _mm256_add_ps(a0[c], a1[c]));
        if (q1)
            _mm256_storeu_ps(q1 + 8 * c, _mm256_add_ps(b0[c], b1[c]));
    }
}

/* out[j] (16 floats from out's first column, stride old) = sum_{i = i0}^{L-1} w[i][j] a_i
 * for the four keys j0..j0+3 (w rows of FNN_ATS_LMAX, a rows of stride ald, offset to the
 * chunk); rows j >= S not written */
static inline __attribute__((always_inline)) void
fnn_atb_cols4x16(const float *w, const float *a, ptrdiff_t ald, ptrdiff_t i0, ptrdiff_t L,
                 ptrdiff_t j0, ptrdiff_t S, float *out, ptrdiff_t old)
{
    __m256 c0[2], c1[2], c2[2], c3[2];
    for (int c = 0; c < 2; c++)
        c0[c] = c1[c] = c2[c] = c3[c] = _mm256_setzero_ps();
    for (ptrdiff_t i = i0; i < L; i++) {
        const float *wr = w + i * FNN_ATS_LMAX + j0, *ar = a + i * ald;
        const __m256 w0 = _mm256_broadcast_ss(wr), w1 = _mm256_broadcast_ss(wr + 1);
        const __m256 w2 = _mm256_broadcast_ss(wr + 2), w3 = _mm256_broadcast_ss(wr + 3);
        for (int c = 0; c < 2; c++) {
            const __m256 x = _mm256_loadu_ps(ar + 8 * c);
            c0[c] = _mm256_fmadd_ps(w0, x, c0[c]);
            c1[c] = _mm256_fmadd_ps(w1, x, c1[c]);
            c2[c] = _mm256_fmadd_ps(w2, x, c2[c]);
            c3[c] = _mm256_fmadd_ps(w3, x, c3[c]);
        }
    }
    for (int c = 0; c < 2; c++) {
        _mm256_storeu_ps(out + j0 * old + 8 * c, c0[c]);
        if (j0 + 1 < S) _mm256_storeu_ps(out + (j0 + 1) * old + 8 * c, c1[c]);
        if (j0 + 2 < S) _mm256_storeu_ps(out + (j0 + 2) * old + 8 * c, c2[c]);
        if (j0 + 3 < S) _mm256_storeu_ps(out + (j0 + 3) * old + 8 * c, c3[c]);
    }
}

/* The backward of one pair on the avx2 build: fnn_atb_pair512's steps in 16-key and
 * 16-feature chunks.  Per four query rows and 16-key chunk: the scores (fnn_ats_dots4x16,
 * the forward's sums), P into the dS rows, then dP (the same function over dO and the
 * values transposed) and dS over them. */
static void fnn_atb_pair256(const float *q, ptrdiff_t qld, const float *k, ptrdiff_t kld,
                            const float *v, ptrdiff_t vld, const float *dout, ptrdiff_t old,
                            const float *lse, const float *D, float *dq, ptrdiff_t dqld,
                            float *dk, ptrdiff_t dkld, float *dv, ptrdiff_t dvld, ptrdiff_t L,
                            ptrdiff_t S, ptrdiff_t E, ptrdiff_t Ev, float scale, int causal,
                            float *ws, const fnn_ats_drop *drop, uint64_t row0)
{
    float mult[4 * FNN_ATS_LMAX] __attribute__((aligned(64)));
    const ptrdiff_t LM = FNN_ATS_LMAX;
    float *kt, *vt, *P, *dS;
    const int nvs = (int)((S + 15) / 16);
    ptrdiff_t i, j, c0;
    fnn_atb_stage(k, kld, v, vld, S, E, Ev, scale, ws, &kt, &vt, &P, &dS);
    const __m256 vsc = _mm256_set1_ps(scale);
    for (i = 0; i < L; i += 4) {
        /* past L the last row again, not stored */
        const int rows = L - i < 4 ? (int)(L - i) : 4;
        const float *qr[4], *dr[4];
        ptrdiff_t nn[4];
        const ptrdiff_t nmax = fnn_atb_group4(i, rows, q, qld, dout, old, S, causal, qr, dr, nn);
        const int nu = (int)((nmax + 15) / 16);
        if (drop)
            for (int r = 0; r < rows; r++)
                fnn_ats_drop_row(drop, (row0 + (uint64_t)(i + r)) * (uint64_t)S, nn[r],
                                 16 * nu, mult + r * LM);
        for (int u = 0; u < nu; u++) {
            __m256 x[4][2];
            fnn_ats_dots4x16(qr, kt + 16 * u, E, x);
            for (int r = 0; r < rows; r++) {
                const float li = lse[i + r];
                const __m256 vl = _mm256_set1_ps(li);
                for (int h = 0; h < 2; h++) {
                    /* a row without keys (lse -inf) has zero weights; a NaN lse gives NaN */
                    const __m256 p = li == -INFINITY ? _mm256_setzero_ps()
                        : _mm256_and_ps(fnn_ats_live8(nn[r] - 16 * u - 8 * h),
                                        fnn_exp_nonpos_ps(_mm256_sub_ps(x[r][h], vl)));
                    _mm256_store_ps(dS + (i + r) * LM + 16 * u + 8 * h, p);
                }
            }
            fnn_ats_dots4x16(dr, vt + 16 * u, Ev, x);
            for (int r = 0; r < rows; r++) {
                const __m256 vd = _mm256_set1_ps(D[i + r]);
                for (int h = 0; h < 2; h++) {
                    const ptrdiff_t off = (i + r) * LM + 16 * u + 8 * h;
                    const __m256 p = _mm256_load_ps(dS + off);
                    __m256 g = x[r][h], pd = p;
                    if (drop) {             /* dV takes the dropped weights, dP the mask */
                        const __m256 mu = _mm256_load_ps(mult + r * LM + 16 * u + 8 * h);
                        pd = _mm256_mul_ps(p, mu);
                        g = _mm256_mul_ps(g, mu);
                    }
                    _mm256_store_ps(P + off, pd);
                    _mm256_store_ps(dS + off,
                                    _mm256_mul_ps(_mm256_mul_ps(p, _mm256_sub_ps(g, vd)), vsc));
                }
            }
        }
        for (int r = 0; r < rows; r++)
            for (int u = 16 * nu; u < 16 * nvs; u += 8) {
                _mm256_store_ps(P + (i + r) * LM + u, _mm256_setzero_ps());
                _mm256_store_ps(dS + (i + r) * LM + u, _mm256_setzero_ps());
            }
    }
    /* dQ_i = sum_j dS_ij K_j, two rows at a time (fnn_atb_dq2x16) */
    for (i = 0; i < L; i += 2) {
        const ptrdiff_t n0 = causal && i + 1 < S ? i + 1 : S;
        const ptrdiff_t n1 = causal && i + 2 < S ? i + 2 : S;
        for (c0 = 0; c0 < E; c0 += 16) {
            if (i + 1 < L)
                fnn_atb_dq2x16(dS + i * LM, n0, dS + (i + 1) * LM, n1, k + c0, kld,
                               dq + i * dqld + c0, dq + (i + 1) * dqld + c0);
            else
                fnn_atb_dq2x16(dS + i * LM, n0, dS + i * LM, 0, k + c0, kld, dq + i * dqld + c0,
                               NULL);
        }
    }
    /* dK_j = sum_i dS_ij Q_i, dV_j = sum_i P_ij dO_i; causal: rows i >= j only (the
     * others are zero); the padded columns j >= S are zero and not written */
    for (j = 0; j < S; j += 4) {
        const ptrdiff_t i0 = causal ? (j < L ? j : L) : 0;
        for (c0 = 0; c0 < E; c0 += 16)
            fnn_atb_cols4x16(dS, q + c0, qld, i0, L, j, S, dk + c0, dkld);
        for (c0 = 0; c0 < Ev; c0 += 16)
            fnn_atb_cols4x16(P, dout + c0, old, i0, L, j, S, dv + c0, dvld);
    }
}
#endif

/* Floats of workspace fnn_atb_pair_f32 needs (64-byte aligned): keys and values
 * transposed, the P and dS rows. */
#define FNN_ATB_WS (2 * FNN_ATB_EMAX * FNN_ATS_LMAX + 2 * FNN_ATS_LMAX * FNN_ATS_LMAX)

/* 1 when this build has the short backward for these shapes (AVX-512 or AVX2; L, S <=
 * FNN_ATS_LMAX; E, Ev multiples of 16 up to FNN_ATB_EMAX), else 0 */
static inline int fnn_atb_fits(ptrdiff_t L, ptrdiff_t S, ptrdiff_t E, ptrdiff_t Ev)
{
#if defined(FNN_HAVE_AVX512) || defined(FNN_HAVE_AVX2)
    return L <= FNN_ATS_LMAX && S <= FNN_ATS_LMAX && E > 0 && Ev > 0 && E % 16 == 0
           && Ev % 16 == 0 && E <= FNN_ATB_EMAX && Ev <= FNN_ATB_EMAX;
#else
    (void)L; (void)S; (void)E; (void)Ev;
    return 0;
#endif
}

/* One (sequence, head) of the backward (see above): D (per query row, dO . O), lse (the
 * forward's); writes dq rows 0..L, dk / dv rows 0..S.  drop (may be NULL): the forward's
 * dropout (fnn_ats_head_f32's drop and row0): dV takes the dropped weights, dP the mask.  ws: FNN_ATB_WS floats, 64-byte
 * aligned.  -> 1, or 0 (nothing written) when fnn_atb_fits is false. */
static int fnn_atb_pair_f32(const float *q, ptrdiff_t qld, const float *k, ptrdiff_t kld,
                            const float *v, ptrdiff_t vld, const float *dout, ptrdiff_t old,
                            const float *lse, const float *D, float *dq, ptrdiff_t dqld,
                            float *dk, ptrdiff_t dkld, float *dv, ptrdiff_t dvld, ptrdiff_t L,
                            ptrdiff_t S, ptrdiff_t E, ptrdiff_t Ev, float scale, int causal,
                            float *ws, const fnn_ats_drop *drop, uint64_t row0)
{
    if (!fnn_atb_fits(L, S, E, Ev))
        return 0;
#if defined(FNN_HAVE_AVX512)
    const int nev = (int)(Ev / 16);
    switch (E / 16) {
    case 1: FNN_ATB_NEV(1)
    case 2: FNN_ATB_NEV(2)
    case 3: FNN_ATB_NEV(3)
    default: FNN_ATB_NEV(4)
    }
#elif defined(FNN_HAVE_AVX2)
    fnn_atb_pair256(q, qld, k, kld, v, vld, dout, old, lse, D, dq, dqld, dk, dkld, dv, dvld,
                    L, S, E, Ev, scale, causal, ws, drop, row0);
    return 1;
#else
    (void)q; (void)qld; (void)k; (void)kld; (void)v; (void)vld; (void)dout; (void)old;
    (void)lse; (void)D; (void)dq; (void)dqld; (void)dk; (void)dkld; (void)dv; (void)dvld;
    (void)scale; (void)causal; (void)ws; (void)drop; (void)row0;
    return 0;
#endif
}
#undef FNN_ATB_NEV

#endif
