/* Small-M GEMM for inference: y[M, n0:n1] = act(x[M, K] B[K, n0:n1] + bias), M a few dozen
 * rows at most (one short sentence, a decode step of a batch of prompts).
 *
 * B is read in place, never repacked per call: column panels of 16 columns, element
 * (k, j) of panel p at  B + p * ps + k * ks + j.  A row-major (K, N) weight is ks = N,
 * ps = 16; a weight packed once into contiguous panels (fnn_pack_panels_f32) is ks = 16,
 * ps = 16 K, so each panel is one contiguous stream.  A panel is read from memory once and
 * kept in L1/L2 while every row block of x runs over it (register tiles of up to 6 rows by
 * 16 columns: 12 accumulators, AVX2/FMA where the variant has it, plain C otherwise).  Each
 * output is one sum over k in order, then + bias: the result does not depend on how the
 * panels are shared out over threads.  Columns past the last whole panel (N % 16) run in
 * plain C over the row-major layout (only the ks = N form has them: packed panels are
 * zero-padded to whole panels).  float32 only; float64 keeps the BLAS path. */
#ifndef FNN_SMALLGEMM_H
#define FNN_SMALLGEMM_H
#include <stddef.h>
#include <string.h>

#define FNN_SG_NR 16      /* columns per panel */
#define FNN_SG_MR 6       /* rows per register tile, at most */
#define FNN_SG_KC 256     /* k per pass over a panel: 16 KiB of panel, 6 KiB of x rows */

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* One tile: rows r < mr (mr a compile-time constant after inlining) by 16 columns. */
static inline __attribute__((always_inline)) void
fnn_sg_tile(const int mr, const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
            ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{
    __m256 c0[FNN_SG_MR], c1[FNN_SG_MR];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        c0[r] = acc ? _mm256_loadu_ps(y + r * ldc) : _mm256_setzero_ps();
        c1[r] = acc ? _mm256_loadu_ps(y + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (ptrdiff_t k = 0; k < K; k++) {
        const float *bk = b + k * ks;
#ifdef FNN_SG_PREFETCH
        _mm_prefetch((const char *)(bk + FNN_SG_PREFETCH * ks), _MM_HINT_T0);
#endif
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            __m256 a = _mm256_broadcast_ss(x + r * lda + k);
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

static inline __attribute__((always_inline)) void
fnn_sg_tile(const int mr, const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
            ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{
    float c[FNN_SG_MR][FNN_SG_NR];
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < FNN_SG_NR; j++)
            c[r][j] = acc ? y[r * ldc + j] : 0.0f;
    for (ptrdiff_t k = 0; k < K; k++) {
        const float *bk = b + k * ks;
        for (int r = 0; r < mr; r++) {
            float a = x[r * lda + k];
            for (int j = 0; j < FNN_SG_NR; j++)
                c[r][j] += a * bk[j];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < FNN_SG_NR; j++)
            y[r * ldc + j] = c[r][j] + (bias ? bias[j] : 0.0f);
}

#endif

static void fnn_sg_tile1(const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
                         ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{ fnn_sg_tile(1, x, lda, b, ks, K, bias, y, ldc, acc); }
static void fnn_sg_tile2(const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
                         ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{ fnn_sg_tile(2, x, lda, b, ks, K, bias, y, ldc, acc); }
static void fnn_sg_tile3(const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
                         ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{ fnn_sg_tile(3, x, lda, b, ks, K, bias, y, ldc, acc); }
static void fnn_sg_tile4(const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
                         ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{ fnn_sg_tile(4, x, lda, b, ks, K, bias, y, ldc, acc); }
static void fnn_sg_tile5(const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
                         ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{ fnn_sg_tile(5, x, lda, b, ks, K, bias, y, ldc, acc); }
static void fnn_sg_tile6(const float *x, ptrdiff_t lda, const float *b, ptrdiff_t ks,
                         ptrdiff_t K, const float *bias, float *y, ptrdiff_t ldc, int acc)
{ fnn_sg_tile(6, x, lda, b, ks, K, bias, y, ldc, acc); }

typedef void (*fnn_sg_tile_fn)(const float *, ptrdiff_t, const float *, ptrdiff_t, ptrdiff_t,
                               const float *, float *, ptrdiff_t, int);

/* Row blocks of M: as even as possible, at most 6 rows each (25 rows: 5 x 5, not 4 x 6 + 1). */
static inline int fnn_sg_row_blocks(ptrdiff_t M)
{
    return (int)((M + FNN_SG_MR - 1) / FNN_SG_MR);
}

/* y[:, panels p0..p1) for every row (see the header comment); ldc = the row stride of y. */
static void fnn_sg_panels_f32(const float *x, ptrdiff_t M, ptrdiff_t K, const float *B,
                              ptrdiff_t ks, ptrdiff_t ps, const float *bias, float *y,
                              ptrdiff_t ldc, ptrdiff_t p0, ptrdiff_t p1)
{
    static const fnn_sg_tile_fn tiles[FNN_SG_MR + 1] = {
        NULL, fnn_sg_tile1, fnn_sg_tile2, fnn_sg_tile3, fnn_sg_tile4, fnn_sg_tile5,
        fnn_sg_tile6};
    int nb = fnn_sg_row_blocks(M);
    for (ptrdiff_t p = p0; p < p1; p++) {
        const float *bp = B + p * ps;
        const float *bb = bias ? bias + p * FNN_SG_NR : NULL;
        for (ptrdiff_t k0 = 0; k0 < K; k0 += FNN_SG_KC) {
            ptrdiff_t kc = K - k0 < FNN_SG_KC ? K - k0 : FNN_SG_KC;
            const float *bl = k0 + kc == K ? bb : NULL;
            for (int i = 0; i < nb; i++) {
                ptrdiff_t m0 = M * i / nb, m1 = M * (i + 1) / nb;
                tiles[m1 - m0](x + m0 * K + k0, K, bp + k0 * ks, ks, kc, bl,
                               y + m0 * ldc + p * FNN_SG_NR, ldc, k0 > 0);
            }
        }
    }
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

/* y[:, columns of panels p0..p1) = x B + bias, every case: a row-major (K, N) B (ks = N,
 * ps = 16; the columns past the whole panels, when p1 reaches them, in plain C) or packed
 * panels (ks = 16, ps = 16 K, packed = 1; the last, zero-padded panel through a scratch
 * tile so nothing is written past column N).  p0, p1 count ceil(N / 16) panels. */
static void fnn_sg_range_f32(const float *x, ptrdiff_t M, ptrdiff_t K, const float *B,
                             int packed, ptrdiff_t N, const float *bias, float *y,
                             ptrdiff_t p0, ptrdiff_t p1)
{
    ptrdiff_t full = N / FNN_SG_NR;
    ptrdiff_t ks = packed ? FNN_SG_NR : N, ps = packed ? FNN_SG_NR * K : FNN_SG_NR;
    ptrdiff_t q1 = p1 < full ? p1 : full;
    if (p0 < q1)
        fnn_sg_panels_f32(x, M, K, B, ks, ps, bias, y, N, p0, q1);
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
            fnn_sg_panels_f32(x + m0 * K, mr, K, B + full * ps, ks, ps, NULL, tmp, FNN_SG_NR,
                              0, 1);
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

#endif
