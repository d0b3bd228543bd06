/* Small-M GEMM for inference: y[M, n0:n1] = act(x[M, K] B[K, n0:n1] + bias), M a few dozen
 * rows at most (one short sentence, a decode step of a batch of prompts).
 *
 * B is read in place, never repacked per call: column panels of 16 columns, element
 * (k, j) of panel p at  B + p * ps + k * ks + j.  A row-major (K, N) weight is ks = N,
 * ps = 16; a weight packed once into contiguous panels (fnn_pack_panels_f32) is ks = 16,
 * ps = 16 K, so each panel is one contiguous stream.  A panel is read from memory once and
 * kept in L1 while every row block of x runs over it (register tiles of up to 28 rows by
 * 16 columns with AVX-512, 6 by 16 with AVX2, plain C otherwise).  Each output is one sum
 * over k in order (one fused multiply-add per k where the variant has FMA), then + bias:
 * the result does not depend on how the panels are shared out over threads, nor on the
 * tile heights.  Columns past the last whole panel (N % 16) run in
 * plain C over the row-major layout (only the ks = N form has them: packed panels are
 * zero-padded to whole panels).  float32 only; float64 keeps the BLAS path. */
#ifndef FNN_SMALLGEMM_H
#define FNN_SMALLGEMM_H
#include <stddef.h>
#include <string.h>
#include "fnn_transpose16.h"

#define FNN_SG_NR 16      /* columns per panel */
#define FNN_SG_XT 8192    /* floats of the transposed x chunk on the stack (32 KiB) */
#define FNN_SG_PFD 4096   /* prefetch distance in a packed weight's stream: 16 KiB */
#define FNN_SG_XM 64      /* rows of x per chunk, at most: k per chunk 256 up to 32 rows,
                             else 128 (a panel's run of a chunk: 16 or 8 KiB, kept in L1) */

#if defined(__AVX512F__)
/* AVX-512 (32 zmm registers): a tile is up to 28 rows by one 16-column zmm, one accumulator
 * per row, so a sentence of up to 28 tokens is a single row block: each weight cache line
 * is loaded once and feeds 28 FMAs whose x operand is an embedded broadcast from the
 * transposed chunk (the 28 values of one k are adjacent).  The weight is then streamed at
 * one line per ~28 FMAs, which a prefetch one panel ahead keeps up with from DRAM. */
#include <immintrin.h>
#define FNN_SG_MR 28

static inline __attribute__((always_inline)) void
fnn_sg_tile(const int mr, const float *xt, ptrdiff_t ldx, const float *b, ptrdiff_t ks,
            ptrdiff_t pfd, ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{
    __m512 c[FNN_SG_MR];
#pragma GCC unroll 28
    for (int r = 0; r < mr; r++)
        c[r] = acc ? _mm512_loadu_ps(y + r * ldc) : _mm512_setzero_ps();
    for (ptrdiff_t k = 0; k < K; k++) {
        const float *bk = b + k * ks;
        const float *xk = xt + k * ldx;
        _mm_prefetch((const char *)(bk + pfd), _MM_HINT_T0);
        __m512 b0 = _mm512_loadu_ps(bk);
#pragma GCC unroll 28
        for (int r = 0; r < mr; r++)
            c[r] = _mm512_fmadd_ps(_mm512_set1_ps(xk[r]), b0, c[r]);
    }
    __m512 z = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
#pragma GCC unroll 28
    for (int r = 0; r < mr; r++)
        _mm512_storeu_ps(y + r * ldc, _mm512_add_ps(c[r], z));
}

#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2 (16 ymm registers): tiles of up to 6 rows by 16 columns, 12 accumulators. */
#include <immintrin.h>
#define FNN_SG_MR 6

static inline __attribute__((always_inline)) void
fnn_sg_tile(const int mr, const float *xt, ptrdiff_t ldx, const float *b, ptrdiff_t ks,
            ptrdiff_t pfd, ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{
    __m256 c0[FNN_SG_MR], c1[FNN_SG_MR];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        c0[r] = acc ? _mm256_loadu_ps(y + r * ldc) : _mm256_setzero_ps();
        c1[r] = acc ? _mm256_loadu_ps(y + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (ptrdiff_t k = 0; k < K; k++) {
        const float *bk = b + k * ks;
        const float *xk = xt + k * ldx;
        _mm_prefetch((const char *)(bk + pfd), _MM_HINT_T0);
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            __m256 a = _mm256_broadcast_ss(xk + r);
            c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
        }
    }
    __m256 z0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    __m256 z1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        _mm256_storeu_ps(y + r * ldc, _mm256_add_ps(c0[r], z0));
        _mm256_storeu_ps(y + r * ldc + 8, _mm256_add_ps(c1[r], z1));
    }
}

#else
#define FNN_SG_MR 6

static inline __attribute__((always_inline)) void
fnn_sg_tile(const int mr, const float *xt, ptrdiff_t ldx, const float *b, ptrdiff_t ks,
            ptrdiff_t pfd, ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{
    float c[FNN_SG_MR][FNN_SG_NR];
    (void)pfd;
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < FNN_SG_NR; j++)
            c[r][j] = acc ? y[r * ldc + j] : 0.0f;
    for (ptrdiff_t k = 0; k < K; k++) {
        const float *bk = b + k * ks;
        for (int r = 0; r < mr; r++) {
            float a = xt[k * ldx + r];
            for (int j = 0; j < FNN_SG_NR; j++)
                c[r][j] += a * bk[j];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < FNN_SG_NR; j++)
            y[r * ldc + j] = c[r][j] + (bias ? bias[j] : 0.0f);
}

#endif

/* A tile of mr rows: one case per height, so that mr is a compile-time constant in each
 * inlined copy of fnn_sg_tile (its accumulators stay in registers). */
static void fnn_sg_tile_rows(int mr, const float *xt, ptrdiff_t ldx, const float *b,
                             ptrdiff_t ks, ptrdiff_t pfd, ptrdiff_t K, const float *bias,
                             float *y, ptrdiff_t ldc, int acc)
{
    switch (mr) {
    case 1: fnn_sg_tile(1, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 2: fnn_sg_tile(2, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 3: fnn_sg_tile(3, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 4: fnn_sg_tile(4, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 5: fnn_sg_tile(5, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 6: fnn_sg_tile(6, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
#if FNN_SG_MR > 6
    case 7: fnn_sg_tile(7, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 8: fnn_sg_tile(8, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 9: fnn_sg_tile(9, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 10: fnn_sg_tile(10, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 11: fnn_sg_tile(11, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 12: fnn_sg_tile(12, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 13: fnn_sg_tile(13, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 14: fnn_sg_tile(14, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 15: fnn_sg_tile(15, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 16: fnn_sg_tile(16, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 17: fnn_sg_tile(17, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 18: fnn_sg_tile(18, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 19: fnn_sg_tile(19, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 20: fnn_sg_tile(20, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 21: fnn_sg_tile(21, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 22: fnn_sg_tile(22, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 23: fnn_sg_tile(23, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 24: fnn_sg_tile(24, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 25: fnn_sg_tile(25, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 26: fnn_sg_tile(26, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 27: fnn_sg_tile(27, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
    case 28: fnn_sg_tile(28, xt, ldx, b, ks, pfd, K, bias, y, ldc, acc); return;
#endif
    default: return;
    }
}

/* Row blocks of M: as even as possible, at most FNN_SG_MR rows each (25 rows on AVX2:
 * 5 x 5, not 4 x 6 + 1). */
static inline int fnn_sg_row_blocks(ptrdiff_t M)
{
    return (int)((M + FNN_SG_MR - 1) / FNN_SG_MR);
}

/* x (M, K) transposed by row blocks (the tiles' layout) into a buffer of depth D (D = K
 * for all of x, or a chunk of k, k counted from the chunk's first column): row block i
 * (rows m0 .. m1 of fnn_sg_row_blocks(M)) at xt + m0 D, its element (k, r) at
 * xt[m0 D + k (m1 - m0) + r].  A tile's x values for one k are adjacent and a
 * block's run is one dense stream: with one (K, M) transpose, M rows apart, every k step
 * of every block read a cache line of which the block used 20-24 bytes, and the blocks
 * of a 25-row sentence pulled 5 such lines per k through L1 for each panel (one core,
 * Zen 3: 25 x 384 x 1536 ran at 72 GFLOP/s, 12 rows at 96). */
static inline const float *fnn_sg_block_x(const float *xt, ptrdiff_t D, ptrdiff_t m0,
                                          ptrdiff_t m1, ptrdiff_t k)
{
    return xt + m0 * D + k * (m1 - m0);
}

/* One chunk of k (kc deep, starting at k0) for panels p0..p1 and every row: xt holds x
 * transposed by row blocks (fnn_sg_block_x) in a buffer of depth D, the chunk at its
 * k = koff.  Each panel's run of the chunk is read once from memory (prefetching the
 * next panel's run) and kept in L1 while every row block runs over it; the bias is added
 * with the chunk that ends at K. */
static void fnn_sg_chunk_f32(const float *xt, ptrdiff_t D, ptrdiff_t koff, ptrdiff_t M,
                             ptrdiff_t k0, ptrdiff_t kc, int last, const float *B,
                             ptrdiff_t ks, ptrdiff_t ps, const float *bias, float *y,
                             ptrdiff_t ldc, ptrdiff_t p0, ptrdiff_t p1)
{
    int nb = fnn_sg_row_blocks(M);
    for (ptrdiff_t p = p0; p < p1; p++) {
        const float *bp = B + p * ps + k0 * ks;
        const float *bb = bias && last ? bias + p * FNN_SG_NR : NULL;
        ptrdiff_t pfd = p + 1 < p1 ? ps : 0;    /* the next panel's run of the chunk */
        for (int i = 0; i < nb; i++) {
            ptrdiff_t m0 = M * i / nb, m1 = M * (i + 1) / nb;
            fnn_sg_tile_rows((int)(m1 - m0), fnn_sg_block_x(xt, D, m0, m1, koff), m1 - m0,
                             bp, ks, pfd, kc, bb, y + m0 * ldc + p * FNN_SG_NR, ldc, k0 > 0);
        }
    }
}

/* Columns [k0, k1) of x (M, K) row-major into xt, transposed by row blocks in a buffer of
 * depth D (fnn_sg_block_x; k counted from kb, the buffer's first column): each block's
 * values in order, read from its (at most FNN_SG_MR) rows.  AVX2: 8 columns at a time by
 * an 8 x 8 register transpose (rows past the block's zeros), each column's mr values
 * stored as a whole vector whose extra lanes the next column's store overwrites -- a
 * masked store where no later full group follows in this range, so nothing outside it
 * is written (ranges of columns go to different threads).  A 25 x 1536 activation
 * element by element was ~5% of MiniLM's time at batch 1 on two threads. */
static void fnn_sg_block_transpose_c(const float *x, ptrdiff_t M, ptrdiff_t K, ptrdiff_t kb,
                                     ptrdiff_t D, ptrdiff_t k0, ptrdiff_t k1, float *xt)
{
    int nb = fnn_sg_row_blocks(M);
    for (int i = 0; i < nb; i++) {
        ptrdiff_t m0 = M * i / nb, m1 = M * (i + 1) / nb, mr = m1 - m0;
        float *o = xt + m0 * D + (k0 - kb) * mr;
        const float *xb = x + m0 * K;
        ptrdiff_t k = k0;
#if defined(__AVX2__) && !defined(__AVX512F__)
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)mr),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (; k + 8 <= k1; k += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                r[j] = j < mr ? _mm256_loadu_ps(xb + j * K + k) : _mm256_setzero_ps();
            fnn_transpose8_ps(r);
            if (k + 16 <= k1) {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    _mm256_storeu_ps(o + j * mr, r[j]);
            } else {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    _mm256_maskstore_ps(o + j * mr, live, r[j]);
            }
            o += 8 * mr;
        }
#endif
        for (; k < k1; k++)
            for (ptrdiff_t r = 0; r < mr; r++)
                *o++ = xb[r * K + k];
    }
}

/* The depth of a chunk of k for a group of mg rows (its transposed x fits FNN_SG_XT). */
static inline ptrdiff_t fnn_sg_kcap(ptrdiff_t mg)
{
    return mg <= FNN_SG_XT / 256 ? 256 : FNN_SG_XT / FNN_SG_XM;
}

/* y[:, panels p0..p1) for every row (see the header comment); ldc = the row stride of y.
 * Per group of up to FNN_SG_XM rows and per chunk of k, the chunk of x is transposed onto
 * the stack by row blocks (fnn_sg_block_x: a tile's x values for one k are adjacent, so
 * its broadcasts touch one cache line instead of one line per row -- rows of x at a
 * stride of K floats alias in L1 when K is a multiple of 1024).  xt_full, when not NULL,
 * is all of x already transposed that way (depth K, made once for every thread of a
 * call: fnn_sg_transpose_f32) and is read instead. */
static void fnn_sg_panels_f32(const float *x, const float *xt_full, ptrdiff_t M, ptrdiff_t K,
                              const float *B, ptrdiff_t ks, ptrdiff_t ps, const float *bias,
                              float *y, ptrdiff_t ldc, ptrdiff_t p0, ptrdiff_t p1)
{
    float xt[FNN_SG_XT] __attribute__((aligned(64)));
    if (xt_full != NULL && ks == FNN_SG_NR) {
        /* packed panels: panel after panel, so that a range of panels is one contiguous
         * stream (chunk after chunk, panel after panel it was runs of 16 KiB spaced a panel
         * apart, which the hardware prefetchers follow badly), the next lines prefetched
         * FNN_SG_PFD floats ahead in that stream.  Each row block's tile runs over all of
         * k in one go (no k chunks: the accumulators never go through memory, and a
         * second row block reads the panel again from L2, not from a chunk that x's rows
         * crowd out of L1: MiniLM's 24 GEMMs at 46 rows 6% faster than with 128-deep
         * chunks, 2-3% at 12-32 rows).  Each output is the same sum in the same order. */
        int nb = fnn_sg_row_blocks(M);
        for (ptrdiff_t p = p0; p < p1; p++) {
            const float *bb = bias ? bias + p * FNN_SG_NR : NULL;
            for (int i = 0; i < nb; i++) {
                ptrdiff_t m0 = M * i / nb, m1 = M * (i + 1) / nb;
                fnn_sg_tile_rows((int)(m1 - m0), fnn_sg_block_x(xt_full, K, m0, m1, 0),
                                 m1 - m0, B + p * ps, ks, FNN_SG_PFD, K, bb,
                                 y + m0 * ldc + p * FNN_SG_NR, ldc, 0);
            }
        }
        return;
    }
    if (xt_full != NULL) {
        ptrdiff_t kcap = fnn_sg_kcap(M < FNN_SG_XM ? M : FNN_SG_XM);
        for (ptrdiff_t k0 = 0; k0 < K; k0 += kcap) {
            ptrdiff_t kc = K - k0 < kcap ? K - k0 : kcap;
            fnn_sg_chunk_f32(xt_full, K, k0, M, k0, kc, k0 + kc == K, B, ks, ps, bias, y,
                             ldc, p0, p1);
        }
        return;
    }
    for (ptrdiff_t g0 = 0; g0 < M; g0 += FNN_SG_XM) {
        ptrdiff_t mg = M - g0 < FNN_SG_XM ? M - g0 : FNN_SG_XM;
        ptrdiff_t kcap = fnn_sg_kcap(mg);
        const float *xg = x + g0 * K;
        for (ptrdiff_t k0 = 0; k0 < K; k0 += kcap) {
            ptrdiff_t kc = K - k0 < kcap ? K - k0 : kcap;
            fnn_sg_block_transpose_c(xg, mg, K, k0, kc, k0, k0 + kc, xt);
            fnn_sg_chunk_f32(xt, kc, 0, mg, k0, kc, k0 + kc == K, B, ks, ps, bias,
                             y + g0 * ldc, ldc, p0, p1);
        }
    }
}

#if defined(__AVX512F__)
/* 16 x 16 block of x (rows m0.., columns k0..; nr <= 16 rows, the rest read as 0) ->
 * xt[k0 + j][m0 .. m0 + nr) for j < nk (nk <= 16 columns): in registers, two rounds of
 * in-lane shuffles and two of 128-bit lane shuffles (a scalar transpose of a 25 x 1536
 * activation, one element per cycle, was ~10% of the GEMM after it on two threads). */
static inline void fnn_sg_tr16(const float *x, ptrdiff_t K, int nr, int nk, float *xt,
                               ptrdiff_t M)
{
    __m512 r[16], t[16];
    const __mmask16 km = nk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nk) - 1u);
    const __mmask16 mm = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
    for (int i = 0; i < 16; i++)
        r[i] = i < nr ? _mm512_maskz_loadu_ps(km, x + i * K) : _mm512_setzero_ps();
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    /* r[4 g + c] now holds, in 128-bit lane l, x[4 g + 0..3][4 l + c]; gather lane l of
     * the four groups into output row 4 l + c */
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);        /* g0 l0, g0 l2, g1 l0, g1 l2 */
        t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);    /* g0 l1, g0 l3, g1 l1, g1 l3 */
        t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);          /* lane 0: column c */
        r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);      /* lane 2: column 8 + c */
        r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);  /* lane 1: column 4 + c */
        r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd); /* lane 3: column 12 + c */
    }
    for (int j = 0; j < nk; j++)
        _mm512_mask_storeu_ps(xt + j * M, mm, r[j]);
}
#endif

/* Columns [k0, k1) of x (M, K) row-major into xt, x transposed by row blocks at depth K
 * (fnn_sg_block_x; k0 a multiple of 16, so that a transpose can be shared out by column
 * ranges). */
static void fnn_sg_transpose_cols_f32(const float *x, ptrdiff_t M, ptrdiff_t K, ptrdiff_t k0,
                                      ptrdiff_t k1, float *xt)
{
#if defined(__AVX512F__)
    int nb = fnn_sg_row_blocks(M);
    for (int i = 0; i < nb; i++) {
        ptrdiff_t m0 = M * i / nb, m1 = M * (i + 1) / nb, mr = m1 - m0;
        for (ptrdiff_t g = 0; g < mr; g += 16) {
            int nr = mr - g < 16 ? (int)(mr - g) : 16;
            for (ptrdiff_t k = k0; k < k1; k += 16)
                fnn_sg_tr16(x + (m0 + g) * K + k, K, nr, k1 - k < 16 ? (int)(k1 - k) : 16,
                            (float *)fnn_sg_block_x(xt, K, m0, m1, k) + g, mr);
        }
    }
#else
    fnn_sg_block_transpose_c(x, M, K, 0, K, k0, k1, xt);
#endif
}

/* x (M, K) row-major -> xt, transposed by row blocks (fnn_sg_block_x, depth K). */
static inline void fnn_sg_transpose_f32(const float *x, ptrdiff_t M, ptrdiff_t K, float *xt)
{
    fnn_sg_transpose_cols_f32(x, M, K, 0, K, xt);
}

/* y[:, n0:n1] for the columns past the whole panels of a row-major (K, N) B: plain sums. */
static void fnn_sg_tail_f32(const float *x, ptrdiff_t M, ptrdiff_t K, const float *B,
                            ptrdiff_t N, const float *bias, float *y, ptrdiff_t n0, ptrdiff_t n1)
{
    for (ptrdiff_t m = 0; m < M; m++)
        for (ptrdiff_t n = n0; n < n1; n++) {
            float s = 0.0f;
            for (ptrdiff_t k = 0; k < K; k++)
                s += x[m * K + k] * B[k * N + n];
            y[m * N + n] = s + (bias ? bias[n] : 0.0f);
        }
}

/* y[:, columns of panels p0..p1) = x B + bias (xt_full: NULL or x transposed), every case: a row-major (K, N) B (ks = N,
 * ps = 16; the columns past the whole panels, when p1 reaches them, in plain C) or packed
 * panels (ks = 16, ps = 16 K, packed = 1; the last, zero-padded panel through a scratch
 * tile so nothing is written past column N).  p0, p1 count ceil(N / 16) panels. */
static void fnn_sg_range_f32(const float *x, const float *xt_full, ptrdiff_t M, ptrdiff_t K,
                             const float *B, int packed, ptrdiff_t N, const float *bias,
                             float *y, ptrdiff_t p0, ptrdiff_t p1)
{
    ptrdiff_t full = N / FNN_SG_NR;
    ptrdiff_t ks = packed ? FNN_SG_NR : N, ps = packed ? FNN_SG_NR * K : FNN_SG_NR;
    ptrdiff_t q1 = p1 < full ? p1 : full;
    if (p0 < q1)
        fnn_sg_panels_f32(x, xt_full, M, K, B, ks, ps, bias, y, N, p0, q1);
    if (p1 <= full || full * FNN_SG_NR == N)
        return;
    if (!packed) {
        fnn_sg_tail_f32(x, M, K, B, N, bias, y, full * FNN_SG_NR, N);
        return;
    }
    {
        float tmp[FNN_SG_MR * FNN_SG_NR];
        ptrdiff_t w = N - full * FNN_SG_NR;
        for (ptrdiff_t m0 = 0; m0 < M; m0 += FNN_SG_MR) {
            ptrdiff_t mr = M - m0 < FNN_SG_MR ? M - m0 : FNN_SG_MR;
            fnn_sg_panels_f32(x + m0 * K, NULL, mr, K, B + full * ps, ks, ps, NULL, tmp,
                              FNN_SG_NR, 0, 1);
            for (ptrdiff_t r = 0; r < mr; r++)
                for (ptrdiff_t j = 0; j < w; j++)
                    y[(m0 + r) * N + full * FNN_SG_NR + j] =
                        tmp[r * FNN_SG_NR + j] + (bias ? bias[full * FNN_SG_NR + j] : 0.0f);
        }
    }
}

/* Pack a weight into contiguous zero-padded panels: out[p][k][j] = W(k, p*16 + j).
 * w_in_out: W is (K, N) row-major (W(k, n) = w[k N + n]), else (N, K) (Linear's layout,
 * W(k, n) = w[n K + k]).  out holds ceil(N / 16) * K * 16 floats. */
static void fnn_pack_panels_f32(const float *w, ptrdiff_t N, ptrdiff_t K, int w_in_out,
                                float *out, ptrdiff_t p0, ptrdiff_t p1)
{
    for (ptrdiff_t p = p0; p < p1; p++) {
        float *o = out + p * K * FNN_SG_NR;
        for (ptrdiff_t k = 0; k < K; k++)
            for (ptrdiff_t j = 0; j < FNN_SG_NR; j++) {
                ptrdiff_t n = p * FNN_SG_NR + j;
                o[k * FNN_SG_NR + j] = n >= N ? 0.0f : (w_in_out ? w[k * N + n] : w[n * K + k]);
            }
    }
}


/* ---------------------------------------------------------------- a pool that never waits
 * for a sleeping worker.  A one-sentence GEMM is a few hundred microseconds: an OpenMP
 * region ends at a barrier that waits for every team thread to arrive, so a worker that
 * the OS has not scheduled yet (a loaded machine) stalls the caller for a time slice, and
 * small GEMMs were kept on one thread.  Here the caller claims chunks from a shared ticket
 * like any worker and waits only for chunks a worker has actually claimed: a worker that
 * wakes late finds the job gone and does nothing (ONNX Runtime's thread pool revokes
 * unstarted work items for the same reason).  Workers spin briefly after a job (the next
 * GEMM of a layer follows within microseconds), then sleep on a condition variable.
 * Which thread runs a chunk never changes its result.  One pool per family module,
 * workers started on first use, up to the thread count of the call; a forked child never
 * uses it (fnn_max_threads() is 1 there), a busy pool (another Python thread's call) runs
 * the job on the caller alone. */
typedef void (*fnn_sg_job_fn)(void *arg, int chunk);

#if defined(__linux__) && defined(FASTNN_HAVE_OPENMP) && FASTNN_HAVE_OPENMP
#include <pthread.h>
#include <sched.h>
#include <time.h>
#define FNN_SG_POOL 1
#define FNN_SG_POOL_MAX 64
#define FNN_SG_SPIN 20000        /* pause loops a worker spins before sleeping: ~0.1 ms */
#define FNN_SG_STALL_NS 300000   /* a wait this long for a claimed chunk: a preempted worker */
#define FNN_SG_BACKOFF 16        /* jobs then run on the caller alone (a spurious stall costs little) */
#define FNN_SG_BACKOFF_MAX 1024  /* ... doubled after each stall up to this, halved after each
                                    job shared without one: a stall costs the caller up to a
                                    time slice of the OS, and under sustained oversubscription
                                    (other processes on both cores) a fixed 16 let one in every
                                    ~17 GEMMs wait one out (2 threads measured 1.7-2.3x slower
                                    than 1 on MiniLM's GEMMs at load 4-5 on 2 cores) */
#if defined(__x86_64__) || defined(__i386__)
#define fnn_sg_relax() __builtin_ia32_pause()
#else
#define fnn_sg_relax() ((void)0)
#endif

static struct {
    pthread_mutex_t submit;      /* one job at a time */
    pthread_mutex_t mu;          /* sleeping workers */
    pthread_cond_t cv;
    int started;                 /* workers running */
    int sleepers;
    int maxw;                    /* workers that may join the current job */
    fnn_sg_job_fn fn;
    void *arg;
    int nchunks;
    unsigned long long ticket;   /* job generation << 32 | next chunk */
    int done;                    /* chunks finished in the current job */
    int backoff;                 /* jobs left to run serially after a stall */
    int next_backoff;            /* the backoff the next stall sets */
} fnn_sg_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                 PTHREAD_COND_INITIALIZER, 0, 0, 0, NULL, NULL, 0, 0, 0, 0, FNN_SG_BACKOFF};

static inline long long fnn_sg_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Claim and run chunks of generation gen until none is left; -> how many were run. */
static int fnn_sg_pool_drain(unsigned gen)
{
    int ran = 0;
    for (;;) {
        unsigned long long t = __atomic_load_n(&fnn_sg_pool.ticket, __ATOMIC_ACQUIRE);
        int c = (int)(t & 0xffffffffu);
        if ((unsigned)(t >> 32) != gen || c >= fnn_sg_pool.nchunks)
            return ran;
        if (!__atomic_compare_exchange_n(&fnn_sg_pool.ticket, &t, t + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        fnn_sg_pool.fn(fnn_sg_pool.arg, c);
        __atomic_add_fetch(&fnn_sg_pool.done, 1, __ATOMIC_RELEASE);
        ran++;
    }
}

/* A forked child has none of the parent's workers (and maybe a lock held at the fork). */
static void fnn_sg_pool_atfork_child(void)
{
    pthread_mutex_init(&fnn_sg_pool.submit, NULL);
    pthread_mutex_init(&fnn_sg_pool.mu, NULL);
    pthread_cond_init(&fnn_sg_pool.cv, NULL);
    fnn_sg_pool.started = 0;
    fnn_sg_pool.sleepers = 0;
    fnn_sg_pool.backoff = 0;
    fnn_sg_pool.next_backoff = FNN_SG_BACKOFF;
}

static void *fnn_sg_worker(void *idp)
{
    int id = (int)(ptrdiff_t)idp;
    unsigned seen = 0;
    for (;;) {
        unsigned gen = (unsigned)(__atomic_load_n(&fnn_sg_pool.ticket, __ATOMIC_ACQUIRE) >> 32);
        for (int i = 0; gen == seen && i < FNN_SG_SPIN; i++) {
            fnn_sg_relax();
            gen = (unsigned)(__atomic_load_n(&fnn_sg_pool.ticket, __ATOMIC_ACQUIRE) >> 32);
        }
        if (gen == seen) {
            pthread_mutex_lock(&fnn_sg_pool.mu);
            fnn_sg_pool.sleepers++;
            while ((gen = (unsigned)(__atomic_load_n(&fnn_sg_pool.ticket, __ATOMIC_ACQUIRE)
                                     >> 32)) == seen)
                pthread_cond_wait(&fnn_sg_pool.cv, &fnn_sg_pool.mu);
            fnn_sg_pool.sleepers--;
            pthread_mutex_unlock(&fnn_sg_pool.mu);
        }
        seen = gen;
        if (id < __atomic_load_n(&fnn_sg_pool.maxw, __ATOMIC_ACQUIRE))
            fnn_sg_pool_drain(gen);
    }
    return NULL;
}

/* Run fn(arg, c) for c in 0..nchunks-1 on the caller and up to nt - 1 workers. */
static void fnn_sg_pool_run(fnn_sg_job_fn fn, void *arg, int nchunks, int nt)
{
    int c;
    if (nt > FNN_SG_POOL_MAX)
        nt = FNN_SG_POOL_MAX;
    if (nt <= 1 || nchunks <= 1 || pthread_mutex_trylock(&fnn_sg_pool.submit) != 0) {
        for (c = 0; c < nchunks; c++)
            fn(arg, c);
        return;
    }
    if (fnn_sg_pool.backoff > 0) {
        /* the last stall says the cores are oversubscribed: a worker would more likely be
         * preempted holding a chunk than help (measured at load 12 on 2 cores) */
        fnn_sg_pool.backoff--;
        pthread_mutex_unlock(&fnn_sg_pool.submit);
        for (c = 0; c < nchunks; c++)
            fn(arg, c);
        return;
    }
    if (fnn_sg_pool.started == 0 && nt > 1) {
        static int registered = 0;
        if (!registered)
            registered = pthread_atfork(NULL, NULL, fnn_sg_pool_atfork_child) == 0;
    }
    while (fnn_sg_pool.started < nt - 1) {
        pthread_t th;
        pthread_attr_t at;
        int ok = pthread_attr_init(&at) == 0;
        if (ok) {
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            ok = pthread_create(&th, &at, fnn_sg_worker,
                                (void *)(ptrdiff_t)fnn_sg_pool.started) == 0;
            pthread_attr_destroy(&at);
        }
        if (!ok)
            break;                /* fewer workers: the caller does the rest */
        fnn_sg_pool.started++;
    }
    {
        unsigned gen = (unsigned)(fnn_sg_pool.ticket >> 32) + 1;
        fnn_sg_pool.fn = fn;
        fnn_sg_pool.arg = arg;
        fnn_sg_pool.nchunks = nchunks;
        __atomic_store_n(&fnn_sg_pool.done, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&fnn_sg_pool.maxw, nt - 1, __ATOMIC_RELEASE);
        __atomic_store_n(&fnn_sg_pool.ticket, (unsigned long long)gen << 32, __ATOMIC_RELEASE);
        if (__atomic_load_n(&fnn_sg_pool.sleepers, __ATOMIC_ACQUIRE) > 0) {
            pthread_mutex_lock(&fnn_sg_pool.mu);
            pthread_cond_broadcast(&fnn_sg_pool.cv);
            pthread_mutex_unlock(&fnn_sg_pool.mu);
        }
        long long ts = fnn_sg_now_ns();
        int ran = fnn_sg_pool_drain(gen);
        /* every chunk is claimed: wait for those a running worker holds.  A worker may have
         * claimed its last chunk just before the caller ran out, so a wait of up to a chunk's
         * time is normal (0.4 ms for a 28-row block of a 1200-token batch): a stall is a wait
         * past twice the caller's own time per chunk on top of FNN_SG_STALL_NS. */
        long long stall = FNN_SG_STALL_NS + (ran > 0 ? 2 * (fnn_sg_now_ns() - ts) / ran : 0);
        long long t0 = 0;
        int stalled = 0;
        for (int i = 0; __atomic_load_n(&fnn_sg_pool.done, __ATOMIC_ACQUIRE) < nchunks; i++) {
            if (i < 4096) {
                fnn_sg_relax();
                continue;
            }
            if (i == 4096)
                t0 = fnn_sg_now_ns();
            sched_yield();
            if (!stalled && fnn_sg_now_ns() - t0 > stall) {
                stalled = 1;
                fnn_sg_pool.backoff = fnn_sg_pool.next_backoff;
                if (fnn_sg_pool.next_backoff < FNN_SG_BACKOFF_MAX)
                    fnn_sg_pool.next_backoff *= 2;
            }
        }
        if (!stalled && fnn_sg_pool.next_backoff > FNN_SG_BACKOFF)
            fnn_sg_pool.next_backoff /= 2;
    }
    pthread_mutex_unlock(&fnn_sg_pool.submit);
}
#else
#define FNN_SG_POOL 0
static void fnn_sg_pool_run(fnn_sg_job_fn fn, void *arg, int nchunks, int nt)
{
    (void)nt;
    for (int c = 0; c < nchunks; c++)
        fn(arg, c);
}
#endif

#endif
