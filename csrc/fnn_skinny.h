/* Products of a few rows (a decode step, a small batch) with a weight read once for all
 * of them (csrc/dense.pyx).
 *
 * fnn_dot_rows_f32 (AVX2 and plain C builds): dot products of a few float rows with one
 * weight row (the LM head / Linear-layout weights of a decode step): out[r] = dot(x + r*K,
 * w), r < nr.  Four rows share each loaded weight vector.  Written with AVX2/FMA
 * intrinsics where the variant has them (gcc does not vectorise four interleaved 8-lane
 * accumulations by itself), plain C otherwise; 8 partial sums per row, added in a fixed
 * order.
 *
 * AVX-512 builds (FNN_HAVE_SKINNY_OI): register tiles for 1-23 rows -- dot tiles for an
 * (out, in) weight (fnn_skinny_oi_f32), row-strip tiles for an (in, out) one
 * (fnn_few_rows_io_f32), outer-product tiles for a weight gradient over a few rows
 * (fnn_few_k_outer_f32); each described where it is defined. */
#ifndef FNN_SKINNY_H
#define FNN_SKINNY_H
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include "fnn_math.h"     /* fnn_hsum8 */

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FNN_SK_AVX2 1   /* fnn_dot_rows_f32 in AVX2 intrinsics (dense.pyx routes few rows here) */

static inline void fnn_dot_rows_f32(const float *x, ptrdiff_t K, const float *w, int nr,
                                    float *out) {
    ptrdiff_t k = 0;
    if (nr == 4) {
        const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K, *x3 = x + 3 * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (; k + 8 <= K; k += 8) {
            __m256 wv = _mm256_loadu_ps(w + k);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + k), wv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + k), wv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + k), wv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3 + k), wv, a3);
        }
        float s0 = fnn_hsum8(a0), s1 = fnn_hsum8(a1), s2 = fnn_hsum8(a2), s3 = fnn_hsum8(a3);
        for (; k < K; k++) {        /* explicit FMAs: the same bits as fnn_dot_rows4x3_f32 */
            s0 = fmaf(x0[k], w[k], s0); s1 = fmaf(x1[k], w[k], s1);
            s2 = fmaf(x2[k], w[k], s2); s3 = fmaf(x3[k], w[k], s3);
        }
        out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
        return;
    }
    for (int r = 0; r < nr; r++) {
        const float *xr = x + r * K;
        __m256 a = _mm256_setzero_ps(), b = a;
        k = 0;
        for (; k + 16 <= K; k += 16) {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), _mm256_loadu_ps(w + k), a);
            b = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k + 8), _mm256_loadu_ps(w + k + 8), b);
        }
        for (; k + 8 <= K; k += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), _mm256_loadu_ps(w + k), a);
        float s = fnn_hsum8(_mm256_add_ps(a, b));
        for (; k < K; k++) s += xr[k] * w[k];
        out[r] = s;
    }
}

/* out[0], out[3], out[6], out[9] = the four x rows' (K apart) sums: acc folded by fnn_hsum8,
 * then the tail k0..K of x_r . w in order */
static inline void fnn_dot_rows4_fold(__m256 a0, __m256 a1, __m256 a2, __m256 a3,
                                      const float *x, ptrdiff_t K, const float *w, ptrdiff_t k0,
                                      float *out) {
    float s0 = fnn_hsum8(a0), s1 = fnn_hsum8(a1), s2 = fnn_hsum8(a2), s3 = fnn_hsum8(a3);
    for (ptrdiff_t k = k0; k < K; k++) {
        s0 = fmaf(x[k], w[k], s0); s1 = fmaf(x[K + k], w[k], s1);
        s2 = fmaf(x[2 * K + k], w[k], s2); s3 = fmaf(x[3 * K + k], w[k], s3);
    }
    out[0] = s0; out[3] = s1; out[6] = s2; out[9] = s3;
}

/* Four x rows by three weight rows (w, w + K, w + 2 K): out[3 r + c] = dot(x_r, w_c).
 * Each is the four-row form's sum above (one 8-lane FMA chain over k, fnn_hsum8, then the
 * tail's FMAs in order): the same bits.  12 accumulators, 7 loads per 12 FMAs, where the
 * four-row form's 5 loads per 4 FMAs bound it by the loads (one Zen 3 core, 8 x 768 rows
 * against 768 weight rows: 53 -> 88 GFLOP/s).  A weight past the caches (an LM head) is
 * streamed by software prefetches FNN_DOT_PF_ROWS rows ahead: three rows read side by
 * side defeated the hardware prefetcher (one core, 4 x 768 rows by a 50257-row head,
 * 4 x 1 form 11.1 ms, 4 x 3 14.1, prefetched 10.9).  Prefetches past the weight's end
 * do not fault. */
#define FNN_DOT_PF_ROWS 12  /* weight rows ahead that fnn_dot_rows4x3_f32 prefetches */

static inline void fnn_dot_rows4x3_f32(const float *x, ptrdiff_t K, const float *w,
                                       float *out) {
    const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K, *x3 = x + 3 * K;
    const float *w0 = w, *w1 = w + K, *w2 = w + 2 * K;
    /* named accumulators, not an array: an array indexed in the fold kept them in memory */
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
    __m256 a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
    const float *pf = w + FNN_DOT_PF_ROWS * K;
    ptrdiff_t k = 0;
    for (; k + 8 <= K; k += 8) {
        if ((k & 15) == 0) {    /* a cache line of each of three weight rows further on */
            _mm_prefetch((const char *)(pf + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + K + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 2 * K + k), _MM_HINT_T0);
        }
        const __m256 v0 = _mm256_loadu_ps(w0 + k), v1 = _mm256_loadu_ps(w1 + k);
        const __m256 v2 = _mm256_loadu_ps(w2 + k);
        __m256 xv = _mm256_loadu_ps(x0 + k);
        a00 = _mm256_fmadd_ps(xv, v0, a00);
        a01 = _mm256_fmadd_ps(xv, v1, a01);
        a02 = _mm256_fmadd_ps(xv, v2, a02);
        xv = _mm256_loadu_ps(x1 + k);
        a10 = _mm256_fmadd_ps(xv, v0, a10);
        a11 = _mm256_fmadd_ps(xv, v1, a11);
        a12 = _mm256_fmadd_ps(xv, v2, a12);
        xv = _mm256_loadu_ps(x2 + k);
        a20 = _mm256_fmadd_ps(xv, v0, a20);
        a21 = _mm256_fmadd_ps(xv, v1, a21);
        a22 = _mm256_fmadd_ps(xv, v2, a22);
        xv = _mm256_loadu_ps(x3 + k);
        a30 = _mm256_fmadd_ps(xv, v0, a30);
        a31 = _mm256_fmadd_ps(xv, v1, a31);
        a32 = _mm256_fmadd_ps(xv, v2, a32);
    }
    fnn_dot_rows4_fold(a00, a10, a20, a30, x, K, w0, k, out);
    fnn_dot_rows4_fold(a01, a11, a21, a31, x, K, w1, k, out + 1);
    fnn_dot_rows4_fold(a02, a12, a22, a32, x, K, w2, k, out + 2);
}

#if defined(__AVX512F__)
/* ---- AVX-512: y[:, n0:n1] = x w[n0:n1]^T (+ bias) for a few rows of x (fewer than 24:
 * from 24 rows the GEMM kernel takes over), w (N, K) Linear's layout, read in place.
 *
 * A register tile of R <= 4 x rows by C <= 4 weight rows: 16 accumulators of 16 lanes;
 * a 16-float step of k loads the C weight vectors and the R x vectors into R*C FMAs.  The
 * x rows of a k block are first copied into groups of 4 rows interleaved by 16-float
 * step (zero past K and past M), so one pointer walks a group; a tile's weight rows are
 * the only other streams (few registers: no address spills).  The tile's sums are folded
 * 16 at a time into one vector by a shuffle tree (fnn_sk_fold16: 31 shuffles and 15 adds
 * for 16 dot products, against 4 shuffles each one at a time).  k runs in blocks of
 * FNN_SK_KB (whole weight rows up to that: each a single stream), the block of x in L2,
 * each tile of weight rows serving every row group from L1.  Each output is bias, then the
 * k blocks' tile sums in order: the same bits whatever the thread count or block of
 * columns a thread takes. */
#define FNN_SK_KB 8192

/* v[0..15] -> out[i] = the sum of v[i]'s 16 lanes, in a fixed tree. */
static inline __attribute__((always_inline)) void fnn_sk_fold16(const __m512 v[16], float *out)
{
    __m512 a[8], b[4], c[2], d;
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)   /* 128-bit quarters: (q0 + q2, q1 + q3) of v[2i], v[2i+1] */
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)   /* quarter j: 4 partial sums of v[4i + j] */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)   /* quarter j: 2 partials of v[8i + j], 2 of v[8i + 4 + j] */
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    /* quarter j, element e: the sum of v[4e + j] */
    d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
    d = _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1,
                                               12, 8, 4, 0), d);
    _mm512_storeu_ps(out, d);
}

/* A chunk's loads and stores: plain where all of its lanes are live (full, a constant in
 * each instance), masked otherwise.  A masked load or store costs even with every lane on:
 * one thread on a Zen 5 streaming 16 MiB moved 72 GB/s with plain ones, 50 with masked
 * stores and 40 with masked loads, and the weight streams from L3 or memory here. */
static inline __attribute__((always_inline)) __m512
fnn_sk_load(const int full, __mmask16 m, const float *p)
{
    return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}
static inline __attribute__((always_inline)) void
fnn_sk_store(const int full, float *p, __mmask16 m, __m512 v)
{
    if (full)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, m, v);
}

/* Rows [0, M) of x (ldx apart), k steps [k0, k0 + kn) into xp: group g (rows 4g..4g+3),
 * 16-float step s, row r at xp + ((g * ns + s) * 4 + r) * 16, zeros past kn and past M. */
static inline void fnn_sk_pack_x(const float *x, ptrdiff_t ldx, ptrdiff_t M, ptrdiff_t k0,
                                 ptrdiff_t kn, float *xp)
{
    const ptrdiff_t ns = (kn + 15) / 16, ng = (M + 3) / 4;
    for (ptrdiff_t g = 0; g < ng; g++)
        for (ptrdiff_t s = 0; s < ns; s++) {
            const ptrdiff_t k = s * 16, left = kn - k;
            const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            for (int r = 0; r < 4; r++) {
                const ptrdiff_t row = 4 * g + r;
                const __m512 v = row < M ? _mm512_maskz_loadu_ps(m, x + row * ldx + k0 + k)
                                         : _mm512_setzero_ps();
                _mm512_store_ps(xp + ((g * ns + s) * 4 + r) * 16, v);
            }
        }
}

/* The next tile's weight rows (FNN_SK_PF rows on), a line of each per 16-float step, are
 * prefetched by tiles of two or more x rows: the four rows read side by side out of
 * memory (an LM head) leave the hardware prefetchers behind once the FMAs per line grow.
 * A 50257 x 768 weight, 2 threads, ms (1 thread): 2 rows 4.07 -> 3.34 (5.65 -> 4.55),
 * 4 rows 4.68 -> 3.89 (6.73 -> 5.04), 8 rows 5.82 -> 3.62 (10.19 -> 5.39), 16 rows
 * 7.19 -> 4.10 (12.83 -> 7.26).  One row keeps the hardware's: prefetching there cost
 * 9% (3.17 -> 3.46 ms). */
#define FNN_SK_PF 4

/* One tile: y[r * ldy + c] = (first ? bias[c] : y) + dot(x row r, w row c) over the k
 * block, r < R, c < C; xg: the rows' packed group, ns steps. */
static inline __attribute__((always_inline)) void
fnn_sk_tile(const int R, const int C, const float *xg, ptrdiff_t ns, const float *w,
            ptrdiff_t ldw, ptrdiff_t kn, float *y, ptrdiff_t ldy, const float *bias, int first)
{
    __m512 acc[16];
    float s[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_setzero_ps();
    const float *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    const __mmask16 tail = (__mmask16)((1u << (kn % 16)) - 1);   /* the last, short step */
    /* the weight rows by plain loads (see fnn_sk_load), the short last step under a mask */
    for (ptrdiff_t q = 0; q < ns; q++, xg += 64) {
        const int full = 16 * q + 16 <= kn;
        __m512 wv[4];
        if (full) {
            wv[0] = _mm512_loadu_ps(w + 16 * q);
            if (C > 1) wv[1] = _mm512_loadu_ps(w1 + 16 * q);
            if (C > 2) wv[2] = _mm512_loadu_ps(w2 + 16 * q);
            if (C > 3) wv[3] = _mm512_loadu_ps(w3 + 16 * q);
            if (R > 1)   /* see FNN_SK_PF */
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    __builtin_prefetch(w + (FNN_SK_PF + c) * ldw + 16 * q);
        } else {
            wv[0] = _mm512_maskz_loadu_ps(tail, w + 16 * q);
            if (C > 1) wv[1] = _mm512_maskz_loadu_ps(tail, w1 + 16 * q);
            if (C > 2) wv[2] = _mm512_maskz_loadu_ps(tail, w2 + 16 * q);
            if (C > 3) wv[3] = _mm512_maskz_loadu_ps(tail, w3 + 16 * q);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 xv = _mm512_load_ps(xg + 16 * r);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                acc[r * 4 + c] = _mm512_fmadd_ps(xv, wv[c], acc[r * 4 + c]);
        }
    }
    fnn_sk_fold16(acc, s);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float *o = y + r * ldy + c;
            *o = (first ? (bias ? bias[c] : 0.0f) : *o) + s[r * 4 + c];
        }
}

#define FNN_SK_CASE(r, c) \
    case 4 * (r - 1) + (c - 1): \
        fnn_sk_tile(r, c, xg, ns, w, ldw, kn, y, ldy, bias, first); break;

/* A tile of R <= 4 rows by C <= 4 columns (the switch makes both constants). */
static void fnn_sk_tile_any(int R, int C, const float *xg, ptrdiff_t ns, const float *w,
                            ptrdiff_t ldw, ptrdiff_t kn, float *y, ptrdiff_t ldy,
                            const float *bias, int first)
{
    switch (4 * (R - 1) + (C - 1)) {
    FNN_SK_CASE(1, 1) FNN_SK_CASE(1, 2) FNN_SK_CASE(1, 3) FNN_SK_CASE(1, 4)
    FNN_SK_CASE(2, 1) FNN_SK_CASE(2, 2) FNN_SK_CASE(2, 3) FNN_SK_CASE(2, 4)
    FNN_SK_CASE(3, 1) FNN_SK_CASE(3, 2) FNN_SK_CASE(3, 3) FNN_SK_CASE(3, 4)
    FNN_SK_CASE(4, 1) FNN_SK_CASE(4, 2) FNN_SK_CASE(4, 3) FNN_SK_CASE(4, 4)
    default: break;
    }
}
#undef FNN_SK_CASE

/* x packed for fnn_skinny_oi_f32's single k block (K <= FNN_SK_KB): returns 1, else 0
 * (nothing done: each call packs its own blocks). */
static inline int fnn_skinny_oi_pack(const float *x, ptrdiff_t M, ptrdiff_t K, float *xp)
{
    if (K == 0 || K > FNN_SK_KB)
        return 0;
    fnn_sk_pack_x(x, K, M, 0, K, xp);
    return 1;
}

/* Floats of the packed-x buffer fnn_skinny_oi_f32 takes for M rows and depth K. */
static inline ptrdiff_t fnn_skinny_oi_scratch(ptrdiff_t M, ptrdiff_t K)
{
    const ptrdiff_t kb = K < FNN_SK_KB ? K : FNN_SK_KB;
    return (M + 3) / 4 * 4 * ((kb + 15) / 16 * 16);
}

/* y[m * N + n] = bias[n] + dot(x row m, w row n) for m < M, n0 <= n < n1; x (M, K),
 * w (N, K), y (M, N), bias (N,) or NULL; xp: 64-byte aligned scratch of
 * fnn_skinny_oi_scratch(M, K) floats; xp_ready: when K <= FNN_SK_KB, xp already holds x
 * packed (fnn_skinny_oi_pack: one pack shared by the threads' column blocks). */
static inline void fnn_skinny_oi_f32(const float *x, ptrdiff_t M, ptrdiff_t K, const float *w,
                                     ptrdiff_t N, ptrdiff_t n0, ptrdiff_t n1,
                                     const float *bias, float *y, float *xp, int xp_ready)
{
    if (K == 0) {
        for (ptrdiff_t m = 0; m < M; m++)
            for (ptrdiff_t n = n0; n < n1; n++)
                y[m * N + n] = bias ? bias[n] : 0.0f;
        return;
    }
    for (ptrdiff_t k0 = 0; k0 < K; k0 += FNN_SK_KB) {
        const ptrdiff_t kn = K - k0 < FNN_SK_KB ? K - k0 : FNN_SK_KB, ns = (kn + 15) / 16;
        if (!xp_ready || K > FNN_SK_KB)
            fnn_sk_pack_x(x, K, M, k0, kn, xp);
        for (ptrdiff_t c0 = n0; c0 < n1; c0 += 4) {
            const int C = n1 - c0 < 4 ? (int)(n1 - c0) : 4;
            for (ptrdiff_t m0 = 0; m0 < M; m0 += 4)
                fnn_sk_tile_any(M - m0 < 4 ? (int)(M - m0) : 4, C, xp + m0 * ns * 16, ns,
                                w + c0 * K + k0, K, kn, y + m0 * N + c0, N,
                                bias ? bias + c0 : NULL, k0 == 0);
        }
    }
}

/* ---- C[m, n0:n1] = bias + A[m, :] B for a few rows (m < M, fewer than 24), B (K, N)
 * row-major (ldb): GPT-2's (in, out) weight forward, and d_input = dy W of Linear's
 * (out, in) one.  Register tiles of up to 4 rows by 64 columns (more rows: 8 by 32) run
 * down blocks of 64 k steps, loading a strip row of B per k step, then add into C (an
 * earlier version that added every 4 k steps into C in memory lost up to 2x to stores
 * aliasing the weight's loads).  Rows beyond the first group re-read the strip from
 * cache.  Each output: bias (or 0), then each block's in-order FMA chain: the same bits
 * whatever the column range a thread takes. */
/* C[r, j:j + 16 V] = bias + sum over k of A[r, k] B[k, j:j + 16 V], r < R: R x V <= 32
 * accumulators (4 x 4 or 8 x 2) run down each FNN_IO_KB block of k, then go into C (bias
 * plus the blocks' sums in order): a float32 chain of at most FNN_IO_KB terms per output,
 * not K (C is stored once per block, rarely enough not to collide with B's loads). */
#define FNN_IO_KB 64
/* The masks of a 64-column chunk's four 16-lane vectors when w columns are left (all
 * lanes past w off). */
static inline void fnn_sk_masks64(ptrdiff_t w, __mmask16 mk[4])
{
    for (int v = 0; v < 4; v++) {
        const ptrdiff_t left = w - 16 * v;
        mk[v] = left >= 16 ? (__mmask16)0xFFFF
              : left > 0 ? (__mmask16)((1u << left) - 1) : (__mmask16)0;
    }
}

static inline __attribute__((always_inline)) void
fnn_io_tile(const int R, const int V, const int full, const float *A, ptrdiff_t lda,
            ptrdiff_t K, const float *B, ptrdiff_t ldb, const __mmask16 *mk, const float *bias,
            float *C, ptrdiff_t ldc)
{
    for (ptrdiff_t k0 = 0; k0 < K; k0 += FNN_IO_KB) {
        const ptrdiff_t k1 = K - k0 < FNN_IO_KB ? K : k0 + FNN_IO_KB;
        __m512 acc[8][4];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_setzero_ps();
        for (ptrdiff_t k = k0; k < k1; k++) {
            const float *bk = B + k * ldb;
            if (k + 8 < K)   /* the strip's row 8 ahead: its lines are runs too short to be
                                found by the hardware prefetchers (one per weight row) */
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    _mm_prefetch((const char *)(bk + 8 * ldb + 16 * v), _MM_HINT_T0);
            __m512 b[4];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                b[v] = fnn_sk_load(full, mk[v], bk + 16 * v);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m512 av = _mm512_set1_ps(A[r * lda + k]);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) {
                float *c = C + r * ldc + 16 * v;
                const __m512 base = k0 > 0 ? fnn_sk_load(full, mk[v], c)
                                  : bias ? fnn_sk_load(full, mk[v], bias + 16 * v)
                                         : _mm512_setzero_ps();
                fnn_sk_store(full, c, mk[v], _mm512_add_ps(base, acc[r][v]));
            }
    }
}

static inline void fnn_few_rows_io_f32(const float *A, ptrdiff_t lda, ptrdiff_t M, ptrdiff_t K,
                                       const float *B, ptrdiff_t ldb, ptrdiff_t n0,
                                       ptrdiff_t n1, const float *bias, float *C, ptrdiff_t ldc)
{
    /* up to 4 rows: 4 x 64 tiles; more: 8 x 32 tiles (8-row groups) */
    const int V = M <= 4 ? 4 : 2, RG = M <= 4 ? 4 : 8;
    /* B rows on a 64-byte grid (ldb a multiple of 16) but B not 64-byte aligned (NumPy's
     * arrays are 16-byte aligned): the first few columns go alone in a narrow masked
     * chunk, so every later load is aligned (split loads cost ~1.5x here) */
    ptrdiff_t j = n0;
    const ptrdiff_t mis = (ptrdiff_t)(((uintptr_t)(B + n0) >> 2) & 15);
    if (mis && (ldb & 15) == 0 && ((uintptr_t)B & 3) == 0) {
        const ptrdiff_t head = 16 - mis < n1 - n0 ? 16 - mis : n1 - n0;
        const __mmask16 mh[1] = {(__mmask16)((1u << head) - 1)};
        for (ptrdiff_t m = 0; m < M; m += 8) {
            const int R = M - m < 8 ? (int)(M - m) : 8;
            const float *a = A + m * lda;
            const float *bb = bias ? bias + n0 : NULL;
            float *c = C + m * ldc + n0;
#define FNN_IO_CASE(r) case r: fnn_io_tile(r, 1, 0, a, lda, K, B + n0, ldb, mh, bb, c, ldc); break;
            switch (R) { FNN_IO_CASE(8) FNN_IO_CASE(7) FNN_IO_CASE(6) FNN_IO_CASE(5)
                         FNN_IO_CASE(4) FNN_IO_CASE(3) FNN_IO_CASE(2) default: FNN_IO_CASE(1) }
#undef FNN_IO_CASE
        }
        j = n0 + head;
    }
    for (; j < n1; j += 16 * V) {
        const ptrdiff_t w = n1 - j;
        __mmask16 mk[4];
        fnn_sk_masks64(w, mk);
        for (ptrdiff_t m = 0; m < M; m += RG) {
            const int R = M - m < RG ? (int)(M - m) : RG;
            const float *a = A + m * lda;
            const float *bb = bias ? bias + j : NULL;
            float *c = C + m * ldc + j;
#define FNN_IO_CASE(r, v)                                                             \
    case r:                                                                           \
        if (w >= 16 * v) fnn_io_tile(r, v, 1, a, lda, K, B + j, ldb, mk, bb, c, ldc); \
        else fnn_io_tile(r, v, 0, a, lda, K, B + j, ldb, mk, bb, c, ldc);             \
        break;
            if (V == 4) {
                switch (R) { FNN_IO_CASE(4, 4) FNN_IO_CASE(3, 4) FNN_IO_CASE(2, 4) default: FNN_IO_CASE(1, 4) }
            } else {
                switch (R) { FNN_IO_CASE(8, 2) FNN_IO_CASE(7, 2) FNN_IO_CASE(6, 2) FNN_IO_CASE(5, 2)
                             FNN_IO_CASE(4, 2) FNN_IO_CASE(3, 2) FNN_IO_CASE(2, 2) default: FNN_IO_CASE(1, 2) }
            }
#undef FNN_IO_CASE
        }
    }
}

/* ---- C[p, :Q] = sum over m < K (few) of A[m, p] B[m, :Q], p in [p0, p1): the weight
 * gradient of a few-row linear (dy^T x, or x^T dy for GPT-2's layout), written once.
 * Tiles of 4 rows of C by 64 columns (16 accumulators): per m, 4 vectors of B's row m and
 * 4 broadcasts of A.  Each output sums m in order: the same bits for any row range. */
static inline __attribute__((always_inline)) void
fnn_fr_outer_tile(const int R, const int full, const float *A, ptrdiff_t lda, const float *B,
                  ptrdiff_t ldb, ptrdiff_t K, ptrdiff_t p, const __mmask16 mk[4], float *C,
                  ptrdiff_t ldc)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (ptrdiff_t m = 0; m < K; m++) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            b[v] = fnn_sk_load(full, mk[v], B + m * ldb + 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 av = _mm512_set1_ps(A[m * lda + p + r]);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++)
                acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            fnn_sk_store(full, C + (p + r) * ldc + 16 * v, mk[v], acc[r][v]);
}

static inline void fnn_few_k_outer_f32(const float *A, ptrdiff_t lda, const float *B,
                                       ptrdiff_t ldb, ptrdiff_t K, ptrdiff_t p0, ptrdiff_t p1,
                                       ptrdiff_t Q, float *C, ptrdiff_t ldc)
{
    for (ptrdiff_t j = 0; j < Q; j += 64) {
        const ptrdiff_t w = Q - j;
        __mmask16 mk[4];
        fnn_sk_masks64(w, mk);
        ptrdiff_t p = p0;
        if (w >= 64) {
            for (; p + 4 <= p1; p += 4)
                fnn_fr_outer_tile(4, 1, A, lda, B + j, ldb, K, p, mk, C + j, ldc);
            for (; p < p1; p++)
                fnn_fr_outer_tile(1, 1, A, lda, B + j, ldb, K, p, mk, C + j, ldc);
        } else {
            for (; p + 4 <= p1; p += 4)
                fnn_fr_outer_tile(4, 0, A, lda, B + j, ldb, K, p, mk, C + j, ldc);
            for (; p < p1; p++)
                fnn_fr_outer_tile(1, 0, A, lda, B + j, ldb, K, p, mk, C + j, ldc);
        }
    }
}
#define FNN_HAVE_SKINNY_OI 1
#endif

#else
#define FNN_SK_AVX2 0

static inline void fnn_dot_rows_f32(const float *x, ptrdiff_t K, const float *w, int nr,
                                    float *out) {
    for (int r = 0; r < nr; r++) {
        const float *xr = x + r * K;
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        ptrdiff_t k = 0;
        for (; k + 8 <= K; k += 8)
            for (int l = 0; l < 8; l++) a[l] += xr[k + l] * w[k + l];
        float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
        for (; k < K; k++) s += xr[k] * w[k];
        out[r] = s;
    }
}

/* out[3 r + c] = dot(x_r, w_c) for four x rows and three weight rows (K apart): the
 * four-row form per weight row, the same bits */
static inline void fnn_dot_rows4x3_f32(const float *x, ptrdiff_t K, const float *w,
                                       float *out) {
    float o[4];
    for (int c = 0; c < 3; c++) {
        fnn_dot_rows_f32(x, K, w + c * K, 4, o);
        for (int r = 0; r < 4; r++)
            out[3 * r + c] = o[r];
    }
}

#endif
#ifndef FNN_HAVE_SKINNY_OI
#define FNN_HAVE_SKINNY_OI 0
#define FNN_SK_KB 8192
static inline void fnn_few_rows_io_f32(const float *A, ptrdiff_t lda, ptrdiff_t M, ptrdiff_t K,
                                       const float *B, ptrdiff_t ldb, ptrdiff_t n0,
                                       ptrdiff_t n1, const float *bias, float *C, ptrdiff_t ldc)
{
    (void)A; (void)lda; (void)M; (void)K; (void)B; (void)ldb; (void)n0; (void)n1; (void)bias;
    (void)C; (void)ldc;
}
static inline void fnn_few_k_outer_f32(const float *A, ptrdiff_t lda, const float *B,
                                       ptrdiff_t ldb, ptrdiff_t K, ptrdiff_t p0, ptrdiff_t p1,
                                       ptrdiff_t Q, float *C, ptrdiff_t ldc)
{
    (void)A; (void)lda; (void)B; (void)ldb; (void)K; (void)p0; (void)p1; (void)Q; (void)C;
    (void)ldc;
}
static inline ptrdiff_t fnn_skinny_oi_scratch(ptrdiff_t M, ptrdiff_t K) { (void)M; (void)K; return 0; }
static inline int fnn_skinny_oi_pack(const float *x, ptrdiff_t M, ptrdiff_t K, float *xp)
{
    (void)x; (void)M; (void)K; (void)xp;
    return 0;
}
static inline void fnn_skinny_oi_f32(const float *x, ptrdiff_t M, ptrdiff_t K, const float *w,
                                     ptrdiff_t N, ptrdiff_t n0, ptrdiff_t n1,
                                     const float *bias, float *y, float *xp, int xp_ready)
{
    (void)x; (void)M; (void)K; (void)w; (void)N; (void)n0; (void)n1; (void)bias; (void)y;
    (void)xp; (void)xp_ready;
}
#endif
#endif
