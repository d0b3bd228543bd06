/* Convolution kernels for csrc/conv.pyx.
 *
 *   - fnn_conv_t.h (float and double): depthwise rows over zero-padded planes, im2col /
 *     col2im rows;
 *   - float32, AVX2 + FMA builds: the direct convolutions -- the 3x3 stride-1 kernel and
 *     its d_weight, and the tap-list kernel (conv_transpose2d's output phases) -- with
 *     6 x 16 register tiles (6 output channels x 16 positions, 12 accumulators; 4 x 16
 *     for the last output channels); AVX-512 builds: 6 x 64 zmm tiles, and the direct
 *     d_weight kernel (fnn_cvw_run) of conv1d, conv_transpose2d and stride-1 conv2d,
 *     and Winograd F(2x2, 3x3) (fnn_wg_*) for the 3x3 stride-1 conv2d.
 * The conv family's sums are in fnn_reduce.h (fnn_cv_*), pooling in fnn_pool.h, the window
 * arithmetic the conv and pool families share in fnn_window.pxi. */
#ifndef FNN_CONV_H
#define FNN_CONV_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FNN_WG_TB 64    /* Winograd: tiles a chunk (scratch sizes: fnn_wg_dims) */

/* fnn_conv_t.h names its type FNN_CV_T and its functions FNN_CV_FN(name) */
#define FNN_CV_T FNN_T
#define FNN_CV_FN(name) FNN_TNAME(name)
#define FNN_TEMPLATE "fnn_conv_t.h"
#include "fnn_instantiate.h"
#undef FNN_CV_T
#undef FNN_CV_FN

/* ---- zero-padded planes for the direct convolutions (float32):
 * xp[c, a, b] = x[c, h0 + a, b - pl] for a < PR, b < We, zero outside x */
#if defined(__AVX512F__)
#include <immintrin.h>
/* lanes [b, b + 16) of [lo, hi) as a mask */
static inline __mmask16 fnn_span16(ptrdiff_t b, ptrdiff_t lo, ptrdiff_t hi) {
    ptrdiff_t l = lo - b < 0 ? 0 : lo - b > 16 ? 16 : lo - b;
    ptrdiff_t h = hi - b < 0 ? 0 : hi - b > 16 ? 16 : hi - b;
    return (__mmask16)(((1u << h) - 1) & ~((1u << l) - 1));
}
#endif

static inline void fnn_cv3_pad_tile(const float* restrict x, float* restrict xp, ptrdiff_t C,
                                    ptrdiff_t H, ptrdiff_t W, ptrdiff_t We, ptrdiff_t PR,
                                    ptrdiff_t h0, ptrdiff_t pl) {
    ptrdiff_t c0 = pl > 0 ? pl : 0, c1 = pl + W < We ? pl + W : We;
    if (c1 < c0) c1 = c0;
    for (ptrdiff_t c = 0; c < C; ++c)
        for (ptrdiff_t a = 0; a < PR; ++a) {
            float* d = xp + (c * PR + a) * We;
            ptrdiff_t h = h0 + a, b;
#if defined(__AVX512F__)
            /* each 16-lane block one load (zeros outside [c0, c1)) and store: GCC made the
             * short zero runs below memset calls, two a row.  Masks only on the blocks
             * that need them (masked loads and stores cost out of cache: see fnn_sk_load
             * in fnn_skinny.h). */
            const float* sr = h < 0 || h >= H ? NULL : x + (c * H + h) * W - pl;
            for (b = 0; b < We; b += 16) {
                const __mmask16 ml = fnn_span16(b, c0, c1), ms = fnn_span16(b, 0, We);
                __m512 v = !sr ? _mm512_setzero_ps()
                         : ml == (__mmask16)0xFFFF ? _mm512_loadu_ps(sr + b)
                                                   : _mm512_maskz_loadu_ps(ml, sr + b);
                if (ms == (__mmask16)0xFFFF)
                    _mm512_storeu_ps(d + b, v);
                else
                    _mm512_mask_storeu_ps(d + b, ms, v);
            }
#else
            if (h < 0 || h >= H) { for (b = 0; b < We; ++b) d[b] = 0.f; continue; }
            const float* sr = x + (c * H + h) * W - pl;
            for (b = 0; b < c0; ++b) d[b] = 0.f;
            for (b = c0; b < c1; ++b) d[b] = sr[b];
            for (b = c1; b < We; ++b) d[b] = 0.f;
#endif
        }
}

/* Zero columns [z0, ld) of rows rows of ld floats (AVX-512 builds: masked stores, not a
 * memset call a row). */
static inline void fnn_zero_tails(float* restrict A, ptrdiff_t rows, ptrdiff_t ld, ptrdiff_t z0) {
    for (ptrdiff_t r = 0; r < rows; ++r) {
#if defined(__AVX512F__)
        for (ptrdiff_t b = z0; b < ld; b += 16)
            _mm512_mask_storeu_ps(A + r * ld + b, fnn_span16(b, z0, ld), _mm512_setzero_ps());
#else
        memset(A + r * ld + z0, 0, (size_t)(ld - z0) * sizeof(float));
#endif
    }
}

/* y[2i] = a[i] (i < na), y[2i + 1] = b[i] (i < nb), nb in {na - 1, na}: two column phases
 * of a stride-2 output row merged (vectorised: the loop's stores are contiguous). */
static inline void fnn_cv_interleave2(const float* restrict a, const float* restrict b,
                                      float* restrict y, ptrdiff_t na, ptrdiff_t nb) {
    ptrdiff_t i;
    for (i = 0; i < nb; ++i) { y[2 * i] = a[i]; y[2 * i + 1] = b[i]; }
    for (; i < na; ++i) y[2 * i] = a[i];
}

/* ---- the direct kernels' weight packing (portable C): one block of m output channels
 * (o0 .. o0 + m - 1) of an (O, C, T) weight (T taps), w = its first filter, to
 * dst[(c * T + t) * m + r] = w[(r * C + c) * T + t]: each filter read whole, the block's
 * m * C * T floats written within a few pages. */
static inline void fnn_pack_block_oct(const float* restrict w, ptrdiff_t C, ptrdiff_t T,
                                      ptrdiff_t m, float* restrict dst) {
    for (ptrdiff_t r = 0; r < m; ++r)
        for (ptrdiff_t c = 0; c < C; ++c) {
            const float* f = w + (r * C + c) * T;
            float* d = dst + c * T * m + r;
            for (ptrdiff_t t = 0; t < T; ++t) d[t * m] = f[t];
        }
}

/* the same block layout from a weight read by strides: kernel row r at w + r * rs, its
 * channel c at + c * cs, tap t at + tof[t] -- dst[(c * T + t) * m + r].  conv_transpose2d's
 * phase runs: rows the conv2d's input channels (rs = kh*kw), channels its output channels
 * (cs = C*kh*kw), the phase's taps i*kw + j. */
static inline void fnn_pack_block_taps(const float* restrict w, ptrdiff_t rs, ptrdiff_t cs,
                                       const ptrdiff_t* restrict tof, ptrdiff_t C, ptrdiff_t T,
                                       ptrdiff_t m, float* restrict dst) {
    for (ptrdiff_t c = 0; c < C; ++c)
        for (ptrdiff_t t = 0; t < T; ++t) {
            const float* f = w + c * cs + tof[t];
            float* d = dst + (c * T + t) * m;
            for (ptrdiff_t r = 0; r < m; ++r) d[r] = f[r * rs];
        }
}

/* d_input's weights as a forward's: wt[c, o, t] = w[o, c, T - 1 - t] for an (O, C, T)
 * weight (groups 1; T = kh * kw taps, flipped), over output channels [o0, o1), in tiles
 * of 16 x 16 filters so that reads and writes both stay within a few pages. */
static inline void fnn_flip_transpose_oct(const float* restrict w, ptrdiff_t O, ptrdiff_t C,
                                          ptrdiff_t T, ptrdiff_t o0, ptrdiff_t o1,
                                          float* restrict wt) {
    for (ptrdiff_t ob = o0; ob < o1; ob += 16)
        for (ptrdiff_t cb = 0; cb < C; cb += 16) {
            ptrdiff_t oe = ob + 16 < o1 ? ob + 16 : o1, ce = cb + 16 < C ? cb + 16 : C;
            for (ptrdiff_t c = cb; c < ce; ++c)
                for (ptrdiff_t o = ob; o < oe; ++o) {
                    const float* f = w + (o * C + c) * T;
                    float* d = wt + (c * O + o) * T;
                    for (ptrdiff_t t = 0; t < T; ++t) d[t] = f[T - 1 - t];
                }
        }
}

/* ---- Winograd F(2x2, 3x3) weight transforms (portable C; the compiler vectorises the
 * column loops).  G = [[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]].  In double:
 * every product by 1/2 is exact and each sum runs in the order of G's row (or column),
 * so a result is the double sum rounded once to float.
 *
 * Forward: one block of m output channels (r = 0 .. m - 1) by C input channels, filter
 * (r, c) the 9 floats at w + r * rs + c * cs (taps reversed when flip), into the tap-list
 * kernel's packing -- row k of U (stride OC) holds (G w G^T)[k / 4, k % 4] at j = c * m + r.
 * An (O, C, 3, 3) weight's block from output channel o0: w + o0 * C * 9, rs = C * 9, cs =
 * 9.  d_input's weights (the forward of the flipped, transposed weight) straight from the
 * (O, C, 3, 3) weight: the block from input channel c0 is w + c0 * 9, rs = 9, cs = C * 9,
 * flip.  AVX-512 builds: 16 filters (j .. j + 15) at a time, their 9 taps transposed in
 * registers into 9 vectors of 16 filters, the transform on 8 doubles a vector; the last
 * n % 16 filters one by one (fnn_wg_tf1).  Other builds: S (9 * m * C floats) first takes
 * the block tap-major in j order, so the transform's loop reads and writes whole rows.
 * Every path does the same double arithmetic (products by 1/2 are exact, so contracting
 * one into an FMA changes nothing): the same bits. */
/* The stride between U's 16 matrices (O x C each): padded by 16 floats.  At O * C (a
 * multiple of 4 KiB for most channel counts) the pack's 16 store streams fell in the
 * same L1 sets -- 256 x 256 channels took 0.61 ms one thread, 0.32 ms padded. */
static inline ptrdiff_t fnn_wg_ustride(ptrdiff_t O, ptrdiff_t C) { return O * C + 16; }

static inline void fnn_wg_tf1(const float* restrict f, int flip, float* restrict U,
                              ptrdiff_t OC) {
    double t[4][3];
    for (int q = 0; q < 3; ++q) {
        double a = f[flip ? 8 - q : q], b = f[flip ? 5 - q : 3 + q], c = f[flip ? 2 - q : 6 + q];
        t[0][q] = a;
        t[1][q] = (0.5 * a + 0.5 * b) + 0.5 * c;
        t[2][q] = (0.5 * a - 0.5 * b) + 0.5 * c;
        t[3][q] = c;
    }
    for (int a = 0; a < 4; ++a) {
        U[(4 * a) * OC] = (float)t[a][0];
        U[(4 * a + 1) * OC] = (float)((0.5 * t[a][0] + 0.5 * t[a][1]) + 0.5 * t[a][2]);
        U[(4 * a + 2) * OC] = (float)((0.5 * t[a][0] - 0.5 * t[a][1]) + 0.5 * t[a][2]);
        U[(4 * a + 3) * OC] = (float)t[a][2];
    }
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
/* 8 filters' transform: s[t] their tap t (row-major 3 x 3) as doubles -> U[k * OC + 0..7] */
static inline void fnn_wg_tf8(const __m512d* s, float* restrict U, ptrdiff_t OC) {
    const __m512d h = _mm512_set1_pd(0.5);
    __m512d t[4][3];
    for (int q = 0; q < 3; ++q) {
        __m512d a = s[q], b = s[3 + q], c = s[6 + q];
        __m512d ha = _mm512_mul_pd(h, a), hb = _mm512_mul_pd(h, b), hc = _mm512_mul_pd(h, c);
        t[0][q] = a;
        t[1][q] = _mm512_add_pd(_mm512_add_pd(ha, hb), hc);
        t[2][q] = _mm512_add_pd(_mm512_sub_pd(ha, hb), hc);
        t[3][q] = c;
    }
    for (int a = 0; a < 4; ++a) {
        __m512d h0 = _mm512_mul_pd(h, t[a][0]), h1 = _mm512_mul_pd(h, t[a][1]);
        __m512d h2 = _mm512_mul_pd(h, t[a][2]);
        _mm256_storeu_ps(U + (4 * a) * OC, _mm512_cvtpd_ps(t[a][0]));
        _mm256_storeu_ps(U + (4 * a + 1) * OC,
                         _mm512_cvtpd_ps(_mm512_add_pd(_mm512_add_pd(h0, h1), h2)));
        _mm256_storeu_ps(U + (4 * a + 2) * OC,
                         _mm512_cvtpd_ps(_mm512_add_pd(_mm512_sub_pd(h0, h1), h2)));
        _mm256_storeu_ps(U + (4 * a + 3) * OC, _mm512_cvtpd_ps(t[a][2]));
    }
}

/* 16 filters (f[i]: 9 floats each) -> U[k * OC + 0..15]: the 16 x 9 taps transposed by
 * 32-bit and 64-bit unpacks and two rounds of 128-bit lane shuffles into col[t] (lane i =
 * filter i), then two fnn_wg_tf8. */
static inline void fnn_wg_tf16(const float* const* f, int flip, float* restrict U,
                               ptrdiff_t OC) {
    __m512 r[16], t[16], col[9];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_ps((__mmask16)0x1ff, f[i]);
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4 i + k], 128-bit lane L: rows 4 i .. 4 i + 3 of column 4 L + k */
    for (int i = 0; i < 4; ++i) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int k = 0; k < 4; ++k) {
        __m512 s0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x44);
        __m512 s2 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x44);
        col[k] = _mm512_shuffle_f32x4(s0, s2, 0x88);
        col[4 + k] = _mm512_shuffle_f32x4(s0, s2, 0xdd);
    }
    {
        __m512 s1 = _mm512_shuffle_f32x4(r[0], r[4], 0xee);
        __m512 s3 = _mm512_shuffle_f32x4(r[8], r[12], 0xee);
        col[8] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    }
    for (int half = 0; half < 2; ++half) {
        __m512d s[9];
        for (int q = 0; q < 9; ++q) {
            __m512 v = col[flip ? 8 - q : q];
            s[q] = _mm512_cvtps_pd(half ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v));
        }
        fnn_wg_tf8(s, U + 8 * half, OC);
    }
}
#endif

/* d_input's order (below): the m filters of one c adjacent (rs = 9), the c's rows cs = C * 9
 * floats apart -- a stride the hardware prefetchers do not follow once the weight is out of
 * the L2, so each row's m filters are fetched this many rows ahead.  A one-image 256 ->
 * 256 x 14 x 14 conv2d's fwd+bwd (the same bits): 2.31 -> 2.06 ms on 2 threads, 4.55 ->
 * 3.77 on one (medians of 400 calls interleaved with the build before; 4, 8 and 16 rows
 * ahead alike). */
#define FNN_WG_PF 8

/* Prefetch every cache line of the floats [lo, hi] (prefetches never fault). */
static inline void fnn_prefetch_span(const float* lo, const float* hi) {
    for (uintptr_t p = (uintptr_t)lo & ~(uintptr_t)63; p <= (uintptr_t)hi; p += 64)
        __builtin_prefetch((const void*)p);
}

/* row c's m filters of 9 taps (rs apart), when c < C */
static inline void fnn_wg_fetch_row(const float* w, ptrdiff_t rs, ptrdiff_t cs, ptrdiff_t m,
                                    ptrdiff_t c, ptrdiff_t C) {
    if (c < C)
        fnn_prefetch_span(w + c * cs, w + c * cs + (m - 1) * rs + 8);
}

static inline void fnn_wg_pack_block(const float* restrict w, ptrdiff_t rs, ptrdiff_t cs,
                                     int flip, ptrdiff_t C, ptrdiff_t m, float* restrict S,
                                     float* restrict U, ptrdiff_t OC) {
    const ptrdiff_t n = m * C;
    const int pf = cs > rs * m;   /* d_input's order */
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    const float* f[16];
    ptrdiff_t j = 0, r = 0, c = 0;
    (void)S;
    for (; j + 16 <= n; j += 16) {
        for (int i = 0; i < 16; ++i) {
            f[i] = w + r * rs + c * cs;
            if (++r == m) {
                r = 0;
                ++c;
                if (pf) fnn_wg_fetch_row(w, rs, cs, m, c + FNN_WG_PF, C);
            }
        }
        fnn_wg_tf16(f, flip, U + j, OC);
    }
    for (; j < n; ++j) {
        fnn_wg_tf1(w + r * rs + c * cs, flip, U + j, OC);
        if (++r == m) { r = 0; ++c; }
    }
#else
    for (ptrdiff_t c = 0; c < C; ++c) {
        if (pf) fnn_wg_fetch_row(w, rs, cs, m, c + FNN_WG_PF, C);
        for (ptrdiff_t r = 0; r < m; ++r) {
            const float* f = w + r * rs + c * cs;
            if (flip)
                for (int t = 0; t < 9; ++t) S[t * n + c * m + r] = f[8 - t];
            else
                for (int t = 0; t < 9; ++t) S[t * n + c * m + r] = f[t];
        }
    }
    /* the 16 rows of U never overlap (OC >= n): no dependence between iterations */
    _Pragma("omp simd")
    for (ptrdiff_t j = 0; j < n; ++j) {
        double t[4][3];
        for (int q = 0; q < 3; ++q) {
            double a = S[q * n + j], b = S[(3 + q) * n + j], c = S[(6 + q) * n + j];
            t[0][q] = a;
            t[1][q] = (0.5 * a + 0.5 * b) + 0.5 * c;
            t[2][q] = (0.5 * a - 0.5 * b) + 0.5 * c;
            t[3][q] = c;
        }
        for (int a = 0; a < 4; ++a) {
            U[(4 * a) * OC + j] = (float)t[a][0];
            U[(4 * a + 1) * OC + j] = (float)((0.5 * t[a][0] + 0.5 * t[a][1]) + 0.5 * t[a][2]);
            U[(4 * a + 2) * OC + j] = (float)((0.5 * t[a][0] - 0.5 * t[a][1]) + 0.5 * t[a][2]);
            U[(4 * a + 3) * OC + j] = (float)t[a][2];
        }
    }
#endif
}

/* Backward: dw = G^T dU G for output channels [o0, o1) (at most 64) of every input
 * channel.  dU is the sum of nch float partials (part + ch * ps, chunk order, in double --
 * a NumPy float64 reduce over the chunks gives the same bits), dU[a, b] at [(4 a + b) * C
 * * O + c * O + o]; dw (O, C, 3, 3) float.  Per input channel, L (16 x 64 doubles) first
 * takes the 16 rows' sums: the rows are C * O floats apart, often a multiple of 4 KiB, and
 * read in place their 16 streams fell in the same L1 sets.  D (9 * 64 floats) holds one
 * input channel's results tap-major while the loop over o runs on whole rows. */
static inline void fnn_wg_unpack_rows(const float* restrict part, ptrdiff_t nch, ptrdiff_t ps,
                                      ptrdiff_t C, ptrdiff_t O, ptrdiff_t o0, ptrdiff_t o1,
                                      float* restrict D, double* restrict L,
                                      float* restrict dw) {
    const ptrdiff_t CO = C * O, n = o1 - o0;
    for (ptrdiff_t c = 0; c < C; ++c) {
        for (int k = 0; k < 16; ++k) {
            const float* u = part + k * CO + c * O + o0;
            double* l = L + k * 64;
            for (ptrdiff_t j = 0; j < n; ++j) l[j] = u[j];
            for (ptrdiff_t ch = 1; ch < nch; ++ch)
                for (ptrdiff_t j = 0; j < n; ++j) l[j] += u[ch * ps + j];
        }
        _Pragma("omp simd")
        for (ptrdiff_t j = 0; j < n; ++j) {
            double s[3][4];
            for (int b = 0; b < 4; ++b) {
                double u0 = L[b * 64 + j], u1 = L[(4 + b) * 64 + j];
                double u2 = L[(8 + b) * 64 + j], u3 = L[(12 + b) * 64 + j];
                s[0][b] = (u0 + 0.5 * u1) + 0.5 * u2;
                s[1][b] = 0.5 * u1 - 0.5 * u2;
                s[2][b] = (0.5 * u1 + 0.5 * u2) + u3;
            }
            for (int i = 0; i < 3; ++i) {
                D[(3 * i) * n + j] = (float)((s[i][0] + 0.5 * s[i][1]) + 0.5 * s[i][2]);
                D[(3 * i + 1) * n + j] = (float)(0.5 * s[i][1] - 0.5 * s[i][2]);
                D[(3 * i + 2) * n + j] = (float)((0.5 * s[i][1] + 0.5 * s[i][2]) + s[i][3]);
            }
        }
        for (ptrdiff_t j = 0; j < n; ++j)
            for (int t = 0; t < 9; ++t) dw[((o0 + j) * C + c) * 9 + t] = D[t * n + j];
    }
}

/* ---- direct convolutions, float32, AVX2 + FMA (csrc/conv.pyx).
 * Implicit GEMMs with no packing of the input: the image is copied once (tile by tile of
 * output rows for the 3x3 kernel) into zero-padded planes of width We, and output
 * position p = oh*We + ow then reads input p + toff[t] for tap t -- for a 3x3 stride-1
 * kernel toff = i*We + j, a contiguous vector over p.  6 x 16 register tiles (6 output
 * channels x 16 positions, 12 accumulators; 4 x 16 for the last output channels, whose
 * count is a multiple of 4) run over the taps of up to 16 input channels at a time with
 * the weights pre-packed by output-channel block (see fnn_cvd_run); results land in ct
 * (O x positions, padded width) and are copied out.  Positions past OW in a row are
 * computed and dropped.  Sums: bias, then channel by channel, taps in list order: fixed
 * by the shapes. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FNN_HAVE_CV3 1
#define FNN_CV3_NR 16   /* positions per register tile */
/* Output channels [0, o6) go in blocks of 6, the rest (a multiple of 4) in blocks of 4:
 * o6 = the largest multiple of 12 <= O (6a + 4b = O with a even, O % 4 == 0). */
static inline ptrdiff_t fnn_cv3_o6(ptrdiff_t O) { return O / 12 * 12; }

/* ---- direct convolution over any tap list (float32, AVX2 + FMA): the generalisation of
 * the 3x3 kernel above to taps at arbitrary offsets into the padded planes, used for
 * conv1d (one row, kW taps), the output phases of conv_transpose2d (its stride-s output
 * splits into s*s stride-1 convolutions of the input with the taps of that phase) and
 * its d_input (a strided conv2d of dy: dy split into s*s phase planes, each phase's
 * taps reading its own plane).  Output position p reads xp[c*plane + toff[t] + p] for
 * tap t of channel c; the weights are packed by blocks of 6 (then 4) output channels as
 * Ap[o0*C*nt + (c*nt + t)*m + r] = w[o0 + r, c, t].  The sums run channel by channel,
 * taps in list order, on top of what ct holds: fixed by the shapes. */
/* a tile's accumulator: C's value, or 0 when the tile starts the sums (zero) */
#define FNN_CVD_ACC(p) (zero ? _mm256_setzero_ps() : _mm256_loadu_ps(p))
static inline void fnn_cvd_tile6(const float* restrict A, const float* restrict B,
                                 ptrdiff_t plane, const ptrdiff_t* restrict toff,
                                 ptrdiff_t nt, ptrdiff_t nc, float* restrict C, ptrdiff_t ldc,
                                 const int zero) {
    __m256 c00 = FNN_CVD_ACC(C), c01 = FNN_CVD_ACC(C + 8);
    __m256 c10 = FNN_CVD_ACC(C + ldc), c11 = FNN_CVD_ACC(C + ldc + 8);
    __m256 c20 = FNN_CVD_ACC(C + 2 * ldc), c21 = FNN_CVD_ACC(C + 2 * ldc + 8);
    __m256 c30 = FNN_CVD_ACC(C + 3 * ldc), c31 = FNN_CVD_ACC(C + 3 * ldc + 8);
    __m256 c40 = FNN_CVD_ACC(C + 4 * ldc), c41 = FNN_CVD_ACC(C + 4 * ldc + 8);
    __m256 c50 = FNN_CVD_ACC(C + 5 * ldc), c51 = FNN_CVD_ACC(C + 5 * ldc + 8);
    for (ptrdiff_t c = 0; c < nc; ++c, B += plane)
        for (ptrdiff_t t = 0; t < nt; ++t, A += 6) {
            const float* bp = B + toff[t];
            __m256 v0 = _mm256_loadu_ps(bp), v1 = _mm256_loadu_ps(bp + 8), a;
            a = _mm256_broadcast_ss(A);
            c00 = _mm256_fmadd_ps(a, v0, c00); c01 = _mm256_fmadd_ps(a, v1, c01);
            a = _mm256_broadcast_ss(A + 1);
            c10 = _mm256_fmadd_ps(a, v0, c10); c11 = _mm256_fmadd_ps(a, v1, c11);
            a = _mm256_broadcast_ss(A + 2);
            c20 = _mm256_fmadd_ps(a, v0, c20); c21 = _mm256_fmadd_ps(a, v1, c21);
            a = _mm256_broadcast_ss(A + 3);
            c30 = _mm256_fmadd_ps(a, v0, c30); c31 = _mm256_fmadd_ps(a, v1, c31);
            a = _mm256_broadcast_ss(A + 4);
            c40 = _mm256_fmadd_ps(a, v0, c40); c41 = _mm256_fmadd_ps(a, v1, c41);
            a = _mm256_broadcast_ss(A + 5);
            c50 = _mm256_fmadd_ps(a, v0, c50); c51 = _mm256_fmadd_ps(a, v1, c51);
        }
    _mm256_storeu_ps(C, c00); _mm256_storeu_ps(C + 8, c01);
    _mm256_storeu_ps(C + ldc, c10); _mm256_storeu_ps(C + ldc + 8, c11);
    _mm256_storeu_ps(C + 2 * ldc, c20); _mm256_storeu_ps(C + 2 * ldc + 8, c21);
    _mm256_storeu_ps(C + 3 * ldc, c30); _mm256_storeu_ps(C + 3 * ldc + 8, c31);
    _mm256_storeu_ps(C + 4 * ldc, c40); _mm256_storeu_ps(C + 4 * ldc + 8, c41);
    _mm256_storeu_ps(C + 5 * ldc, c50); _mm256_storeu_ps(C + 5 * ldc + 8, c51);
}

static inline void fnn_cvd_tile4(const float* restrict A, const float* restrict B,
                                 ptrdiff_t plane, const ptrdiff_t* restrict toff,
                                 ptrdiff_t nt, ptrdiff_t nc, float* restrict C, ptrdiff_t ldc,
                                 const int zero) {
    __m256 c00 = FNN_CVD_ACC(C), c01 = FNN_CVD_ACC(C + 8);
    __m256 c10 = FNN_CVD_ACC(C + ldc), c11 = FNN_CVD_ACC(C + ldc + 8);
    __m256 c20 = FNN_CVD_ACC(C + 2 * ldc), c21 = FNN_CVD_ACC(C + 2 * ldc + 8);
    __m256 c30 = FNN_CVD_ACC(C + 3 * ldc), c31 = FNN_CVD_ACC(C + 3 * ldc + 8);
    for (ptrdiff_t c = 0; c < nc; ++c, B += plane)
        for (ptrdiff_t t = 0; t < nt; ++t, A += 4) {
            const float* bp = B + toff[t];
            __m256 v0 = _mm256_loadu_ps(bp), v1 = _mm256_loadu_ps(bp + 8), a;
            a = _mm256_broadcast_ss(A);
            c00 = _mm256_fmadd_ps(a, v0, c00); c01 = _mm256_fmadd_ps(a, v1, c01);
            a = _mm256_broadcast_ss(A + 1);
            c10 = _mm256_fmadd_ps(a, v0, c10); c11 = _mm256_fmadd_ps(a, v1, c11);
            a = _mm256_broadcast_ss(A + 2);
            c20 = _mm256_fmadd_ps(a, v0, c20); c21 = _mm256_fmadd_ps(a, v1, c21);
            a = _mm256_broadcast_ss(A + 3);
            c30 = _mm256_fmadd_ps(a, v0, c30); c31 = _mm256_fmadd_ps(a, v1, c31);
        }
    _mm256_storeu_ps(C, c00); _mm256_storeu_ps(C + 8, c01);
    _mm256_storeu_ps(C + ldc, c10); _mm256_storeu_ps(C + ldc + 8, c11);
    _mm256_storeu_ps(C + 2 * ldc, c20); _mm256_storeu_ps(C + 2 * ldc + 8, c21);
    _mm256_storeu_ps(C + 3 * ldc, c30); _mm256_storeu_ps(C + 3 * ldc + 8, c31);
}

/* ct[o*ldc + p] += sum_{c < C, t < nt} w[o, c, t] * xp[c*plane + toff[(c / cg)*nt + t] + p]
 * for p < np rounded up to 16 (ct and xp hold that slack): channels in groups of cg
 * sharing one tap-offset list, visited 16 at a time within a group.  Positions go in
 * chunks of FNN_CVD_PC, and within a chunk the register tiles sweep the positions for one
 * (channel block, output block) pair at a time: its weights (<= 16*nt*6 floats), input
 * window (16 rows of a chunk) and results stay in L1 (with the 16-position block
 * outermost, a many-channel input sweeps one stream per channel every 16 positions).
 * The sum order per output is the same either way (channel blocks in order). */
/* Winograd F(2x2, 3x3) (below: AVX-512 builds, and after fnn_cvd_run_init: AVX2 builds):
 * chunks of FNN_WG_TB tiles (defined above), their scratch sizes */
static inline void fnn_wg_dims(ptrdiff_t OH, ptrdiff_t OW, ptrdiff_t* th, ptrdiff_t* tw,
                               ptrdiff_t* We, ptrdiff_t* PH, ptrdiff_t* ldv) {
    *th = (OH + 1) / 2; *tw = (OW + 1) / 2;
    *We = 2 * ((*tw + 15) / 16 * 16) + 4;   /* the last 16-tile vector's loads stay in a row */
    *PH = 2 * *th + 2;
    *ldv = FNN_WG_TB + 16;                  /* a 16-lane load from the last tile stays in */
}

#if defined(__AVX512F__)
/* AVX-512 builds: m x (16*nv) register tiles of zmm accumulators (6 x 64: 24 of the 32
 * registers, the weight broadcast folded into the FMA), each summing over up to
 * FNN_CVD_CB channels of its tap-offset group before its results go back to ct (the
 * AVX2 tile stores and reloads them every 16; 32, 64 and 256 measured within 1% of each
 * other on a 256-channel conv1d image; 6 x 64 ran 107-113 GFLOP/s of this core's 116
 * FMA peak, the AVX2 6 x 16 tile ~70).  The same products in the same order
 * per output (ct's value, then channel by channel, taps in list order), so the same bits
 * as the AVX2 kernel.  Always inlined with constant m and nv, so the accumulator arrays
 * live in registers. */
#ifndef FNN_CVD_PC
#define FNN_CVD_PC 256
#endif
#ifndef FNN_CVD_CB
#define FNN_CVD_CB 64
#endif
#define FNN_CVD_AI static inline __attribute__((always_inline))
#define FNN_CVD_PF 4
/* The tile's weights by stride: output row r, input channel c, tap t at A[r * ars + c * cs
 * + t * ts] -- the packing below (ars = 1, ts = m, cs = nt * m) or a weight in place
 * (fnn_cvd_run_raw). */
FNN_CVD_AI void fnn_cvd_rtile(const float* restrict A, ptrdiff_t ars, ptrdiff_t cs,
                              ptrdiff_t ts, const float* restrict B, ptrdiff_t plane,
                              const ptrdiff_t* restrict toff, ptrdiff_t nt, ptrdiff_t nc,
                              float* restrict C, ptrdiff_t ldc, const float* restrict init,
                              const int m, const int nv, const int pf) {
    __m512 acc[6][4];
    /* pf: the channels' weights lie far apart (d_input's flipped transpose read in place,
       rows C * T floats apart): the hardware prefetchers do not follow that stride, so
       channel c + FNN_CVD_PF's lines (its m rows' taps) are fetched while channel c runs.
       512 -> 512 channels at 7 x 7, fwd+bwd on 2 threads (the same bits; medians of 100
       calls interleaved with the build before): 2 images 4.58 -> 4.00 ms, 3 images 7.94
       -> 6.66, one 2.05 -> 1.97; 2, 4 and 8 channels ahead alike. */
    const ptrdiff_t plo = ts < 0 ? (nt - 1) * ts : 0;
    const ptrdiff_t phi = (m - 1) * ars + (ts > 0 ? (nt - 1) * ts : 0);
#pragma GCC unroll 6
    for (int r = 0; r < m; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v)
            acc[r][v] = init ? _mm512_set1_ps(init[r]) : _mm512_loadu_ps(C + r * ldc + 16 * v);
    for (ptrdiff_t c = 0; c < nc; ++c, B += plane) {
        const float* a0 = A + c * cs;
        if (pf && c + FNN_CVD_PF < nc)
            fnn_prefetch_span(a0 + FNN_CVD_PF * cs + plo, a0 + FNN_CVD_PF * cs + phi);
        for (ptrdiff_t t = 0; t < nt; ++t, a0 += ts) {
            const float* bp = B + toff[t];
            __m512 x[4];
#pragma GCC unroll 4
            for (int v = 0; v < nv; ++v) x[v] = _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 6
            for (int r = 0; r < m; ++r) {
                __m512 a = _mm512_set1_ps(a0[r * ars]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; ++v) acc[r][v] = _mm512_fmadd_ps(a, x[v], acc[r][v]);
            }
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < m; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, acc[r][v]);
}
/* packed: block [ob, ob + m) holds w[ob + r, c, t] at (c, t, r) */
FNN_CVD_AI void fnn_cvd_ztile(const float* restrict A, const float* restrict B,
                              ptrdiff_t plane, const ptrdiff_t* restrict toff, ptrdiff_t nt,
                              ptrdiff_t nc, float* restrict C, ptrdiff_t ldc,
                              const float* restrict init, const int m, const int nv) {
    fnn_cvd_rtile(A, 1, nt * m, m, B, plane, toff, nt, nc, C, ldc, init, m, nv, 0);
}
static void fnn_cvd_z64_6(const float* restrict A, const float* restrict B, ptrdiff_t plane,
                          const ptrdiff_t* restrict toff, ptrdiff_t nt, ptrdiff_t nc,
                          float* restrict C, ptrdiff_t ldc, const float* restrict init) {
    fnn_cvd_ztile(A, B, plane, toff, nt, nc, C, ldc, init, 6, 4);
}
static void fnn_cvd_z64_4(const float* restrict A, const float* restrict B, ptrdiff_t plane,
                          const ptrdiff_t* restrict toff, ptrdiff_t nt, ptrdiff_t nc,
                          float* restrict C, ptrdiff_t ldc, const float* restrict init) {
    fnn_cvd_ztile(A, B, plane, toff, nt, nc, C, ldc, init, 4, 4);
}
static void fnn_cvd_z16_6(const float* restrict A, const float* restrict B, ptrdiff_t plane,
                          const ptrdiff_t* restrict toff, ptrdiff_t nt, ptrdiff_t nc,
                          float* restrict C, ptrdiff_t ldc, const float* restrict init) {
    fnn_cvd_ztile(A, B, plane, toff, nt, nc, C, ldc, init, 6, 1);
}
static void fnn_cvd_z16_4(const float* restrict A, const float* restrict B, ptrdiff_t plane,
                          const ptrdiff_t* restrict toff, ptrdiff_t nt, ptrdiff_t nc,
                          float* restrict C, ptrdiff_t ldc, const float* restrict init) {
    fnn_cvd_ztile(A, B, plane, toff, nt, nc, C, ldc, init, 4, 1);
}

/* As the AVX2 fnn_cvd_run below: positions in chunks of FNN_CVD_PC, within a chunk one
 * (channel block, output block) pair at a time sweeping its 64-position tiles, then
 * 16-position tiles for the chunk's rest (np rounded up to 16, as there).
 * fnn_cvd_run_init: the same sums started from bias[o] instead of ct's values (ct is
 * only written: one pass less over it). */
static inline void fnn_cvd_run_(const float* restrict Ap, const float* restrict xp,
                                ptrdiff_t plane, const ptrdiff_t* restrict toff, ptrdiff_t nt,
                                ptrdiff_t cg, ptrdiff_t C, ptrdiff_t O, float* restrict ct,
                                ptrdiff_t ldc, ptrdiff_t np, const float* restrict bias) {
    ptrdiff_t o6 = fnn_cv3_o6(O), npr = (np + 15) / 16 * 16;
    for (ptrdiff_t p0 = 0; p0 < npr; p0 += FNN_CVD_PC) {
        ptrdiff_t p1 = p0 + FNN_CVD_PC < npr ? p0 + FNN_CVD_PC : npr, cb = 0;
        ptrdiff_t p64 = p0 + (p1 - p0) / 64 * 64;
        while (cb < C) {
            ptrdiff_t ge = (cb / cg + 1) * cg, nc, ob = 0, pb;
            if (ge > C) ge = C;
            nc = ge - cb < FNN_CVD_CB ? ge - cb : FNN_CVD_CB;
            const ptrdiff_t* to = toff + (cb / cg) * nt;
            const float* B = xp + cb * plane;
            const float* bi = bias && cb == 0 ? bias : NULL;
            for (; ob < o6; ob += 6) {
                const float* A = Ap + ob * C * nt + cb * nt * 6;
                const float* ib = bi ? bi + ob : NULL;
                for (pb = p0; pb < p64; pb += 64)
                    fnn_cvd_z64_6(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc, ib);
                for (; pb < p1; pb += 16)
                    fnn_cvd_z16_6(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc, ib);
            }
            for (; ob < O; ob += 4) {
                const float* A = Ap + ob * C * nt + cb * nt * 4;
                const float* ib = bi ? bi + ob : NULL;
                for (pb = p0; pb < p64; pb += 64)
                    fnn_cvd_z64_4(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc, ib);
                for (; pb < p1; pb += 16)
                    fnn_cvd_z16_4(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc, ib);
            }
            cb += nc;
        }
    }
}

static inline void fnn_cvd_run(const float* restrict Ap, const float* restrict xp,
                               ptrdiff_t plane, const ptrdiff_t* restrict toff, ptrdiff_t nt,
                               ptrdiff_t cg, ptrdiff_t C, ptrdiff_t O, float* restrict ct,
                               ptrdiff_t ldc, ptrdiff_t np) {
    fnn_cvd_run_(Ap, xp, plane, toff, nt, cg, C, O, ct, ldc, np, NULL);
}
static inline void fnn_cvd_run_init(const float* restrict Ap, const float* restrict xp,
                                    ptrdiff_t plane, const ptrdiff_t* restrict toff,
                                    ptrdiff_t nt, ptrdiff_t cg, ptrdiff_t C, ptrdiff_t O,
                                    float* restrict ct, ptrdiff_t ldc, ptrdiff_t np,
                                    const float* restrict bias) {
    fnn_cvd_run_(Ap, xp, plane, toff, nt, cg, C, O, ct, ldc, np, bias);
}

/* The same sums with the weights read where they lie, no packing (AVX-512 builds): row r
 * of an output block from ob at W + (ob + r) * ars, input channel c's taps at + c * cs,
 * tap t at + t * ts; one tap list for all channels.  An (O, C, T) weight: ars = C * T, cs =
 * T, ts = 1.  Its flipped transpose (d_input as a forward): W at tap T - 1, ars = T (rows:
 * the weight's input channels), cs = C * T (channels: its output channels), ts = -1.
 * Per output: bias (or ct), then channels in order, taps in list order -- the packed
 * kernels' order, the same bits.  At batch 1 the packing was a third of a 512 -> 512
 * channel 7 x 7 forward: it reads and writes the 9.4 MB weight once more than the kernel
 * reads it. */
#define FNN_HAVE_CVD_RAW 1
#define FNN_CVD_RAW_TILE(name, m, nv)                                                        \
    static void name(const float* restrict A, ptrdiff_t ars, ptrdiff_t cs, ptrdiff_t ts,     \
                     const float* restrict B, ptrdiff_t plane, const ptrdiff_t* restrict toff, \
                     ptrdiff_t nt, ptrdiff_t nc, float* restrict C, ptrdiff_t ldc,            \
                     const float* restrict init) {                                           \
        fnn_cvd_rtile(A, ars, cs, ts, B, plane, toff, nt, nc, C, ldc, init, m, nv,           \
                      ars * m < cs);                                                         \
    }
FNN_CVD_RAW_TILE(fnn_cvd_r64_6, 6, 4)
FNN_CVD_RAW_TILE(fnn_cvd_r64_4, 4, 4)
FNN_CVD_RAW_TILE(fnn_cvd_r16_6, 6, 1)
FNN_CVD_RAW_TILE(fnn_cvd_r16_4, 4, 1)
#undef FNN_CVD_RAW_TILE
typedef void (*fnn_cvd_rfn)(const float*, ptrdiff_t, ptrdiff_t, ptrdiff_t, const float*,
                            ptrdiff_t, const ptrdiff_t*, ptrdiff_t, ptrdiff_t, float*,
                            ptrdiff_t, const float*);

/* fnn_cvd_run_ over weights in place (fnn_cvd_rtile; cg = C) */
static inline void fnn_cvd_run_raw(const float* restrict W, ptrdiff_t ars, ptrdiff_t cs,
                                   ptrdiff_t ts, const float* restrict xp, ptrdiff_t plane,
                                   const ptrdiff_t* restrict toff, ptrdiff_t nt, ptrdiff_t C,
                                   ptrdiff_t O, float* restrict ct, ptrdiff_t ldc,
                                   ptrdiff_t np, const float* restrict bias) {
    ptrdiff_t o6 = fnn_cv3_o6(O), npr = (np + 15) / 16 * 16;
    for (ptrdiff_t p0 = 0; p0 < npr; p0 += FNN_CVD_PC) {
        ptrdiff_t p1 = p0 + FNN_CVD_PC < npr ? p0 + FNN_CVD_PC : npr, cb = 0;
        ptrdiff_t p64 = p0 + (p1 - p0) / 64 * 64;
        while (cb < C) {
            ptrdiff_t nc = C - cb < FNN_CVD_CB ? C - cb : FNN_CVD_CB, ob = 0, pb;
            const float* B = xp + cb * plane;
            const float* bi = bias && cb == 0 ? bias : NULL;
            for (; ob < O; ob += ob < o6 ? 6 : 4) {
                const float* A = W + ob * ars + cb * cs;
                const float* ib = bi ? bi + ob : NULL;
                float* cto = ct + ob * ldc;
                fnn_cvd_rfn f64 = ob < o6 ? fnn_cvd_r64_6 : fnn_cvd_r64_4;
                fnn_cvd_rfn f16 = ob < o6 ? fnn_cvd_r16_6 : fnn_cvd_r16_4;
                for (pb = p0; pb < p64; pb += 64)
                    f64(A, ars, cs, ts, B + pb, plane, toff, nt, nc, cto + pb, ldc, ib);
                for (; pb < p1; pb += 16)
                    f16(A, ars, cs, ts, B + pb, plane, toff, nt, nc, cto + pb, ldc, ib);
            }
            cb += nc;
        }
    }
}

/* ---- direct d_weight (float32, AVX-512 builds): for every tap t,
 *   dw[t, m, v] += sum_{q < Q, p < R} a[m*lda + aoff[t] + q*arow + p]
 *                                     * b[boff[t] + q*brow + p*ldb + v]
 * a GEMM over the positions (q, p) whose "B" operand is read along v (contiguous) and
 * whose "A" operand is broadcast.  conv1d: a = dy (m: output channel), b = the zero-padded
 * input row transposed (fnn_cvw_transpose; v: input channel, boff[t] = tap offset * C):
 * every tap reads the same transposed copy shifted by whole rows -- one transpose per
 * image instead of OpenBLAS packing dy and three shifted views of the input.
 * conv_transpose2d: a = dy's phase planes (m: dy's channel; each tap reads its phase's
 * planes at its offset), b = x transposed (v: x's channel).  6 x 64 register tiles (6
 * broadcast rows, 64 vector columns; 4 for the last rows, 16 for the last columns); the
 * sum per weight runs over the positions in order, on top of what dw holds.
 * Nv % 16 == 0, M % 4 == 0 (blocks of 6, then 4, as fnn_cv3_o6). */
#define FNN_HAVE_CVW 1
#define FNN_HAVE_WG 1
FNN_CVD_AI void fnn_cvw_ztile(const float* restrict a, ptrdiff_t lda, ptrdiff_t arow,
                              const float* restrict b, ptrdiff_t ldb, ptrdiff_t brow,
                              ptrdiff_t Q, ptrdiff_t R, float* restrict dw, ptrdiff_t ldw,
                              const int m, const int nv) {
    __m512 acc[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < m; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) acc[r][v] = _mm512_loadu_ps(dw + r * ldw + 16 * v);
    for (ptrdiff_t q = 0; q < Q; ++q, a += arow, b += brow) {
        const float* bp = b;
        for (ptrdiff_t p = 0; p < R; ++p, bp += ldb) {
            __m512 x[4];
#pragma GCC unroll 4
            for (int v = 0; v < nv; ++v) x[v] = _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 6
            for (int r = 0; r < m; ++r) {
                __m512 s = _mm512_set1_ps(a[r * lda + p]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; ++v) acc[r][v] = _mm512_fmadd_ps(s, x[v], acc[r][v]);
            }
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < m; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) _mm512_storeu_ps(dw + r * ldw + 16 * v, acc[r][v]);
}
#define FNN_CVW_ARGS const float* restrict a, ptrdiff_t lda, ptrdiff_t arow, \
    const float* restrict b, ptrdiff_t ldb, ptrdiff_t brow, ptrdiff_t Q, ptrdiff_t R, \
    float* restrict dw, ptrdiff_t ldw
static void fnn_cvw_64_6(FNN_CVW_ARGS) { fnn_cvw_ztile(a, lda, arow, b, ldb, brow, Q, R, dw, ldw, 6, 4); }
static void fnn_cvw_64_4(FNN_CVW_ARGS) { fnn_cvw_ztile(a, lda, arow, b, ldb, brow, Q, R, dw, ldw, 4, 4); }
static void fnn_cvw_16_6(FNN_CVW_ARGS) { fnn_cvw_ztile(a, lda, arow, b, ldb, brow, Q, R, dw, ldw, 6, 1); }
static void fnn_cvw_16_4(FNN_CVW_ARGS) { fnn_cvw_ztile(a, lda, arow, b, ldb, brow, Q, R, dw, ldw, 4, 1); }
#undef FNN_CVW_ARGS

/* xt[u*C + c] = x[c*W + u - pl] for u < We, zero outside x: one image's padded row,
 * transposed in 16 x 16 blocks (C % 16 == 0).  With W == We and pl == 0, any (C, W)
 * matrix's transpose. */
/* 16 x 16 block in registers: d[k*ldd + j] = s[j*lds + k] */
static inline void fnn_cvw_t16(const float* restrict s, ptrdiff_t lds, float* restrict d,
                               ptrdiff_t ldd) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(s + j * lds);
    for (int j = 0; j < 16; j += 2) {     /* pairs of rows: 32-bit interleave */
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) {     /* 64-bit interleave */
        r[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[j]), _mm512_castps_pd(t[j + 2])));
        r[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[j]), _mm512_castps_pd(t[j + 2])));
        r[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[j + 1]), _mm512_castps_pd(t[j + 3])));
        r[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[j + 1]), _mm512_castps_pd(t[j + 3])));
    }
    /* r[4g + q] holds, in each 128-bit lane L, column 4L + q of rows 4g..4g+3 */
    for (int q = 0; q < 4; ++q) {
        __m512 a = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88);       /* lanes 0,2 | 0,2 */
        __m512 b = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xdd);       /* lanes 1,3 | 1,3 */
        __m512 c = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88);
        __m512 e = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xdd);
        /* columns q (lane 0), 8+q (lane 2) -> a, c; 4+q, 12+q -> b, e */
        _mm512_storeu_ps(d + q * ldd, _mm512_shuffle_f32x4(a, c, 0x88));
        _mm512_storeu_ps(d + (8 + q) * ldd, _mm512_shuffle_f32x4(a, c, 0xdd));
        _mm512_storeu_ps(d + (4 + q) * ldd, _mm512_shuffle_f32x4(b, e, 0x88));
        _mm512_storeu_ps(d + (12 + q) * ldd, _mm512_shuffle_f32x4(b, e, 0xdd));
    }
}
static inline void fnn_cvw_transpose(const float* restrict x, float* restrict xt, ptrdiff_t C,
                                     ptrdiff_t W, ptrdiff_t We, ptrdiff_t pl) {
    for (ptrdiff_t u0 = 0; u0 < We; u0 += 16) {
        ptrdiff_t u1 = u0 + 16 < We ? u0 + 16 : We;
        if (u1 - u0 == 16 && u0 - pl >= 0 && u1 - pl <= W) {   /* a whole block inside x */
            for (ptrdiff_t c0 = 0; c0 < C; c0 += 16)
                fnn_cvw_t16(x + c0 * W + u0 - pl, W, xt + u0 * C + c0, C);
            continue;
        }
        for (ptrdiff_t c0 = 0; c0 < C; c0 += 16)
            for (ptrdiff_t u = u0; u < u1; ++u) {
                ptrdiff_t w = u - pl;
                float* d = xt + u * C + c0;
                if (w < 0 || w >= W) {
                    for (int k = 0; k < 16; ++k) d[k] = 0.f;
                } else {
                    const float* sp = x + c0 * W + w;
                    for (int k = 0; k < 16; ++k) d[k] = sp[k * W];
                }
            }
    }
}

/* Positions in chunks of about FNN_CVW_PC (whole rows when Q > 1): the chunk's slice of
 * b stays in L2 for every row block and tap; per chunk, column blocks of 64 (then 16),
 * taps, row blocks.  The sum per weight still runs over the positions in order. */
#define FNN_CVW_PC 256
static inline void fnn_cvw_run(const float* restrict a, ptrdiff_t lda, ptrdiff_t arow,
                               const ptrdiff_t* restrict aoff, const float* restrict b,
                               ptrdiff_t ldb, ptrdiff_t brow, const ptrdiff_t* restrict boff,
                               ptrdiff_t nt, ptrdiff_t Q, ptrdiff_t R, ptrdiff_t M,
                               ptrdiff_t Nv, float* restrict dw) {
    ptrdiff_t m6 = fnn_cv3_o6(M), n64 = Nv / 64 * 64;
    ptrdiff_t qc = Q > 1 ? (FNN_CVW_PC + R - 1) / R : 1, pc = Q > 1 ? R : FNN_CVW_PC;
    for (ptrdiff_t q0 = 0; q0 < Q; q0 += qc)
        for (ptrdiff_t p0 = 0; p0 < R; p0 += pc) {
            ptrdiff_t nq = q0 + qc < Q ? qc : Q - q0, np = p0 + pc < R ? pc : R - p0;
            for (ptrdiff_t vb = 0; vb < Nv; vb += (vb < n64 ? 64 : 16))
                for (ptrdiff_t t = 0; t < nt; ++t) {
                    const float* ab = a + aoff[t] + q0 * arow + p0;
                    const float* bb = b + boff[t] + q0 * brow + p0 * ldb + vb;
                    float* wb = dw + t * M * Nv + vb;
                    ptrdiff_t mb = 0;
                    if (vb < n64) {
                        for (; mb < m6; mb += 6)
                            fnn_cvw_64_6(ab + mb * lda, lda, arow, bb, ldb, brow, nq, np, wb + mb * Nv, Nv);
                        for (; mb < M; mb += 4)
                            fnn_cvw_64_4(ab + mb * lda, lda, arow, bb, ldb, brow, nq, np, wb + mb * Nv, Nv);
                    } else {
                        for (; mb < m6; mb += 6)
                            fnn_cvw_16_6(ab + mb * lda, lda, arow, bb, ldb, brow, nq, np, wb + mb * Nv, Nv);
                        for (; mb < M; mb += 4)
                            fnn_cvw_16_4(ab + mb * lda, lda, arow, bb, ldb, brow, nq, np, wb + mb * Nv, Nv);
                    }
                }
        }
}

/* ---- Winograd F(2x2, 3x3) for the 3x3 stride-1 conv2d (float32, AVX-512 builds).
 * Each 2 x 2 output tile is A^T [(G g G^T) . (B^T d B)] A over its 4 x 4 input patch d:
 * per tile 16 products per (input, output channel) instead of 36.  Per image: the input
 * zero-padded once (fnn_cv3_pad_tile, rows from -pt, columns from -pl), then chunks of
 * FNN_WG_TB tiles (row-major over the th x tw tile grid): the input transform of every
 * channel into V[xi, c, p] (16 planes), 16 GEMMs M[xi] = U[xi] V[xi] on the tap-list
 * kernel (one tap, C channels; U[xi] = (G g G^T)[xi] packed as fnn_cvd_run wants, done by
 * the caller), and the output transform (+ bias) into y.  Transforms run 16 tiles of a
 * tile row per vector (even / odd columns split and merged by permutes).  Every sum's
 * order is fixed by the shapes: the same bits at any thread count.
 * Scratch: xp C*PH*We, V 16*C*ldv, M 16*O*ldv floats (fnn_wg_dims). */
/* input transform of tiles [t0, t1) of one image into V (positions t - t0) */
static inline void fnn_wg_in(const float* restrict xp, ptrdiff_t C, ptrdiff_t PH, ptrdiff_t We,
                             ptrdiff_t tw, ptrdiff_t t0, ptrdiff_t t1, float* restrict V,
                             ptrdiff_t ldv) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (ptrdiff_t ty = t0 / tw; ty * tw < t1; ++ty) {
        ptrdiff_t xa = t0 - ty * tw > 0 ? t0 - ty * tw : 0;
        ptrdiff_t xb = t1 - ty * tw < tw ? t1 - ty * tw : tw;
        for (ptrdiff_t tx = xa; tx < xb; tx += 16) {
            ptrdiff_t nl = xb - tx < 16 ? xb - tx : 16, p = ty * tw + tx - t0;
            __mmask16 mk = (__mmask16)((1u << nl) - 1);
            for (ptrdiff_t c = 0; c < C; ++c) {
                const float* base = xp + (c * PH + 2 * ty) * We + 2 * tx;
                __m512 e[4][4];
                for (int a = 0; a < 4; ++a) {
                    const float* r = base + a * We;
                    __m512 l0 = _mm512_loadu_ps(r), h0 = _mm512_loadu_ps(r + 16);
                    __m512 l2 = _mm512_loadu_ps(r + 2), h2 = _mm512_loadu_ps(r + 18);
                    __m512 d0 = _mm512_permutex2var_ps(l0, ev, h0);
                    __m512 d1 = _mm512_permutex2var_ps(l0, od, h0);
                    __m512 d2 = _mm512_permutex2var_ps(l2, ev, h2);
                    __m512 d3 = _mm512_permutex2var_ps(l2, od, h2);
                    e[a][0] = _mm512_sub_ps(d0, d2);
                    e[a][1] = _mm512_add_ps(d1, d2);
                    e[a][2] = _mm512_sub_ps(d2, d1);
                    e[a][3] = _mm512_sub_ps(d1, d3);
                }
                float* v = V + c * ldv + p;
                const ptrdiff_t xs = C * ldv;   /* one xi plane */
                for (int b = 0; b < 4; ++b) {
                    _mm512_mask_storeu_ps(v + (0 + b) * xs, mk, _mm512_sub_ps(e[0][b], e[2][b]));
                    _mm512_mask_storeu_ps(v + (4 + b) * xs, mk, _mm512_add_ps(e[1][b], e[2][b]));
                    _mm512_mask_storeu_ps(v + (8 + b) * xs, mk, _mm512_sub_ps(e[2][b], e[1][b]));
                    _mm512_mask_storeu_ps(v + (12 + b) * xs, mk, _mm512_sub_ps(e[1][b], e[3][b]));
                }
            }
        }
    }
}

/* output transform of tiles [t0, t1) from M (positions t - t0), bias added, into y */
static inline void fnn_wg_out(const float* restrict M, ptrdiff_t ldv, ptrdiff_t O,
                              const float* restrict bias, ptrdiff_t OH, ptrdiff_t OW,
                              ptrdiff_t tw, ptrdiff_t t0, ptrdiff_t t1, float* restrict y) {
    const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (ptrdiff_t ty = t0 / tw; ty * tw < t1; ++ty) {
        ptrdiff_t xa = t0 - ty * tw > 0 ? t0 - ty * tw : 0;
        ptrdiff_t xb = t1 - ty * tw < tw ? t1 - ty * tw : tw;
        for (ptrdiff_t tx = xa; tx < xb; tx += 16) {
            ptrdiff_t nl = xb - tx < 16 ? xb - tx : 16, p = ty * tw + tx - t0;
            ptrdiff_t nc = OW - 2 * tx < 2 * nl ? OW - 2 * tx : 2 * nl;   /* columns written */
            __mmask16 mlo = (__mmask16)(nc >= 16 ? 0xffffu : (1u << nc) - 1);
            __mmask16 mhi = (__mmask16)(nc <= 16 ? 0u : nc >= 32 ? 0xffffu : (1u << (nc - 16)) - 1);
            int two = 2 * ty + 1 < OH;
            for (ptrdiff_t o = 0; o < O; ++o) {
                const float* m = M + o * ldv + p;
                const ptrdiff_t xs = O * ldv;
                __m512 s0[4], s1[4];
                for (int a = 0; a < 4; ++a) {
                    __m512 m0 = _mm512_loadu_ps(m + (4 * a) * xs);
                    __m512 m1 = _mm512_loadu_ps(m + (4 * a + 1) * xs);
                    __m512 m2 = _mm512_loadu_ps(m + (4 * a + 2) * xs);
                    __m512 m3 = _mm512_loadu_ps(m + (4 * a + 3) * xs);
                    s0[a] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
                    s1[a] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
                }
                __m512 bv = _mm512_set1_ps(bias[o]);
                __m512 y00 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]), bv);
                __m512 y01 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]), bv);
                float* yr = y + (o * OH + 2 * ty) * OW + 2 * tx;
                _mm512_mask_storeu_ps(yr, mlo, _mm512_permutex2var_ps(y00, il, y01));
                _mm512_mask_storeu_ps(yr + 16, mhi, _mm512_permutex2var_ps(y00, ih, y01));
                if (two) {
                    __m512 y10 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3]), bv);
                    __m512 y11 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3]), bv);
                    _mm512_mask_storeu_ps(yr + OW, mlo, _mm512_permutex2var_ps(y10, il, y11));
                    _mm512_mask_storeu_ps(yr + OW + 16, mhi, _mm512_permutex2var_ps(y10, ih, y11));
                }
            }
        }
    }
}

/* One image: x (C, H, W) -> y (O, OH, OW); U: 16 packed (O x C) matrices; bias: O values
 * (zeros when the layer has none); scratch as fnn_wg_dims. */
static inline void fnn_wg_image(const float* restrict x, const float* restrict U,
                                const float* restrict bias, float* restrict y, ptrdiff_t C,
                                ptrdiff_t H, ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH,
                                ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl, float* restrict xp,
                                float* restrict V, float* restrict M, const float* restrict zeros) {
    ptrdiff_t th, tw, We, PH, ldv, T;
    const ptrdiff_t toff[1] = {0};
    fnn_wg_dims(OH, OW, &th, &tw, &We, &PH, &ldv);
    T = th * tw;
    fnn_cv3_pad_tile(x, xp, C, H, W, We, PH, -pt, pl);
    for (ptrdiff_t t0 = 0; t0 < T; t0 += FNN_WG_TB) {
        ptrdiff_t t1 = t0 + FNN_WG_TB < T ? t0 + FNN_WG_TB : T;
        fnn_wg_in(xp, C, PH, We, tw, t0, t1, V, ldv);
        for (int k = 0; k < 16; ++k)
            fnn_cvd_run_(U + k * fnn_wg_ustride(O, C), V + k * C * ldv, ldv, toff, 1, C, C, O,
                         M + k * O * ldv, ldv, t1 - t0, zeros);
        fnn_wg_out(M, ldv, O, bias, OH, OW, tw, t0, t1, y);
    }
}

/* d_weight on the same transforms: with Z = U . V the pre-output of a tile (y = A^T Z A),
 * dU[xi] = sum over tiles of (A dy A^T)[xi] * V[xi] and dw = G^T dU G (the caller does
 * the last step, in double, after summing the partials).  Per chunk of tiles: V as the
 * forward (fnn_wg_in), the output gradient's transform D[xi, o, p] (dy's 2 x 2 tiles, zero
 * past OH / OW), D transposed by 16 x 16 blocks into Dt[xi, p, o], and per xi the GEMM
 * dU[xi, c, o] += sum_p V[xi, c, p] Dt[xi, p, o] on fnn_cvw_run (16 taps; C % 4 == 0,
 * O % 16 == 0).  The sum per weight runs over the chunks' tiles in order. */
static inline void fnn_wg_dy(const float* restrict dy, ptrdiff_t O, ptrdiff_t OH, ptrdiff_t OW,
                             ptrdiff_t tw, ptrdiff_t t0, ptrdiff_t t1, float* restrict D,
                             ptrdiff_t ldv) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (ptrdiff_t ty = t0 / tw; ty * tw < t1; ++ty) {
        ptrdiff_t xa = t0 - ty * tw > 0 ? t0 - ty * tw : 0;
        ptrdiff_t xb = t1 - ty * tw < tw ? t1 - ty * tw : tw;
        for (ptrdiff_t tx = xa; tx < xb; tx += 16) {
            ptrdiff_t nl = xb - tx < 16 ? xb - tx : 16, p = ty * tw + tx - t0;
            ptrdiff_t nc = OW - 2 * tx < 2 * nl ? OW - 2 * tx : 2 * nl;
            __mmask16 mlo = (__mmask16)(nc >= 16 ? 0xffffu : (1u << nc) - 1);
            __mmask16 mhi = (__mmask16)(nc <= 16 ? 0u : nc >= 32 ? 0xffffu : (1u << (nc - 16)) - 1);
            int two = 2 * ty + 1 < OH;
            const ptrdiff_t xs = O * ldv;
            for (ptrdiff_t o = 0; o < O; ++o) {
                const float* g = dy + (o * OH + 2 * ty) * OW + 2 * tx;
                __m512 l = _mm512_maskz_loadu_ps(mlo, g), h = _mm512_maskz_loadu_ps(mhi, g + 16);
                __m512 g00 = _mm512_permutex2var_ps(l, ev, h), g01 = _mm512_permutex2var_ps(l, od, h);
                __m512 g10 = _mm512_setzero_ps(), g11 = _mm512_setzero_ps();
                if (two) {
                    l = _mm512_maskz_loadu_ps(mlo, g + OW); h = _mm512_maskz_loadu_ps(mhi, g + OW + 16);
                    g10 = _mm512_permutex2var_ps(l, ev, h); g11 = _mm512_permutex2var_ps(l, od, h);
                }
                /* rows: A g = [g0; g0 + g1; g0 - g1; -g1] */
                __m512 r[4][2];
                r[0][0] = g00; r[0][1] = g01;
                r[1][0] = _mm512_add_ps(g00, g10); r[1][1] = _mm512_add_ps(g01, g11);
                r[2][0] = _mm512_sub_ps(g00, g10); r[2][1] = _mm512_sub_ps(g01, g11);
                r[3][0] = _mm512_sub_ps(_mm512_setzero_ps(), g10);
                r[3][1] = _mm512_sub_ps(_mm512_setzero_ps(), g11);
                float* d = D + o * ldv + p;
                for (int a = 0; a < 4; ++a) {   /* columns: [r0, r0 + r1, r0 - r1, -r1] */
                    _mm512_storeu_ps(d + (4 * a) * xs, r[a][0]);
                    _mm512_storeu_ps(d + (4 * a + 1) * xs, _mm512_add_ps(r[a][0], r[a][1]));
                    _mm512_storeu_ps(d + (4 * a + 2) * xs, _mm512_sub_ps(r[a][0], r[a][1]));
                    _mm512_storeu_ps(d + (4 * a + 3) * xs, _mm512_sub_ps(_mm512_setzero_ps(), r[a][1]));
                }
            }
        }
    }
}

/* One image's dU added into dU (16 x C x O); scratch as the forward plus D (16*O*ldv, may
 * be the forward's M) and Dt (16*ldv*O).  Lanes of D past a chunk's last tile are garbage
 * (full-vector stores): the GEMM reads positions < n only. */
static inline void fnn_wg_wgrad_image(const float* restrict x, const float* restrict dy,
                                      float* restrict dU, ptrdiff_t C, ptrdiff_t H, ptrdiff_t W,
                                      ptrdiff_t O, ptrdiff_t OH, ptrdiff_t OW, ptrdiff_t pt,
                                      ptrdiff_t pl, float* restrict xp, float* restrict V,
                                      float* restrict D, float* restrict Dt) {
    ptrdiff_t th, tw, We, PH, ldv, T, aoff[16], boff[16];
    fnn_wg_dims(OH, OW, &th, &tw, &We, &PH, &ldv);
    T = th * tw;
    for (int k = 0; k < 16; ++k) { aoff[k] = k * C * ldv; boff[k] = k * ldv * O; }
    fnn_cv3_pad_tile(x, xp, C, H, W, We, PH, -pt, pl);
    for (ptrdiff_t t0 = 0; t0 < T; t0 += FNN_WG_TB) {
        ptrdiff_t t1 = t0 + FNN_WG_TB < T ? t0 + FNN_WG_TB : T, n = t1 - t0;
        fnn_wg_in(xp, C, PH, We, tw, t0, t1, V, ldv);
        fnn_wg_dy(dy, O, OH, OW, tw, t0, t1, D, ldv);
        for (int k = 0; k < 16; ++k)
            for (ptrdiff_t p0 = 0; p0 < n; p0 += 16)
                for (ptrdiff_t o0 = 0; o0 < O; o0 += 16)
                    fnn_cvw_t16(D + (k * O + o0) * ldv + p0, ldv, Dt + (k * ldv + p0) * O + o0, O);
        fnn_cvw_run(V, ldv, 0, aoff, Dt, O, 0, boff, 16, 1, n, C, O, dU);
    }
}
#else
#define FNN_HAVE_CVD_RAW 0     /* AVX2 builds: the packed weights only */
static inline void fnn_cvd_run_raw(const float* W, ptrdiff_t ars, ptrdiff_t cs, ptrdiff_t ts,
                                   const float* xp, ptrdiff_t plane, const ptrdiff_t* toff,
                                   ptrdiff_t nt, ptrdiff_t C, ptrdiff_t O, float* ct,
                                   ptrdiff_t ldc, ptrdiff_t np, const float* bias) {}
#define FNN_CVD_PC 128
/* Kept out of line: inlined into conv.pyx's tap-list drivers (_direct_image), GCC ran
 * short of general registers there and kept the tile's weight pointer and tap counter on
 * the stack -- a load, an add to memory and a store on every k step beside its 8 loads.
 * conv_transpose2d 16x64x28x28 -> 32 k4 s2 p1 forward, 2 threads (Zen 3, avx2): 7.1 ->
 * 5.6 ms; the 3x3 kernel (fnn_cv3_image) is unchanged. */
static __attribute__((noinline)) void fnn_cvd_run(const float* restrict Ap, const float* restrict xp,
                               ptrdiff_t plane, const ptrdiff_t* restrict toff, ptrdiff_t nt,
                               ptrdiff_t cg, ptrdiff_t C, ptrdiff_t O, float* restrict ct,
                               ptrdiff_t ldc, ptrdiff_t np) {
    ptrdiff_t o6 = fnn_cv3_o6(O);
    for (ptrdiff_t p0 = 0; p0 < np; p0 += FNN_CVD_PC) {
        ptrdiff_t p1 = p0 + FNN_CVD_PC < np ? p0 + FNN_CVD_PC : np, cb = 0;
        while (cb < C) {
            ptrdiff_t ge = (cb / cg + 1) * cg, nc, ob = 0, pb;
            if (ge > C) ge = C;
            nc = ge - cb < 16 ? ge - cb : 16;
            const ptrdiff_t* to = toff + (cb / cg) * nt;
            const float* B = xp + cb * plane;
            for (; ob < o6; ob += 6) {
                const float* A = Ap + ob * C * nt + cb * nt * 6;
                for (pb = p0; pb < p1; pb += FNN_CV3_NR)
                    fnn_cvd_tile6(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc, 0);
            }
            for (; ob < O; ob += 4) {
                const float* A = Ap + ob * C * nt + cb * nt * 4;
                for (pb = p0; pb < p1; pb += FNN_CV3_NR)
                    fnn_cvd_tile4(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc, 0);
            }
            cb += nc;
        }
    }
}

#endif

/* Rows per tile and the padded rows a tile plane holds (the last 16-position block of a
 * tile reads up to 16 + 2 positions past its last row; the d_weight pass's last 8-lane
 * block less). */
static inline ptrdiff_t fnn_cv3_rows(ptrdiff_t C, ptrdiff_t OW, ptrdiff_t OH) {
    ptrdiff_t We = OW + 2, r = (1 << 15) / (C * We);
    if (r < 4) r = 4;
    return r < OH ? r : OH;
}
static inline ptrdiff_t fnn_cv3_plane_rows(ptrdiff_t R, ptrdiff_t OW) {
    return R + 2 + (26 + OW + 1) / (OW + 2) + 1;
}

/* d_weight: acc[o/4, c, i] holds 4 x 3 vectors (output channel o%4, tap column j) of
 * 8 lanes; += sum over the tile's positions p of dyp[o, p] * xp[c, p + i*We + j], where
 * dyp is dy on the padded width with zeros past OW (n positions, a multiple of 8). */
static inline void fnn_cv3_wgrad_tile(const float* restrict dyp, ptrdiff_t ldd,
                                      const float* restrict xp, ptrdiff_t plane,
                                      ptrdiff_t We, ptrdiff_t n, ptrdiff_t C, ptrdiff_t O,
                                      float* restrict acc) {
    for (ptrdiff_t ob = 0; ob < O; ob += 4) {
        const float* d0 = dyp + ob * ldd;
        const float* d1 = d0 + ldd;
        const float* d2 = d1 + ldd;
        const float* d3 = d2 + ldd;
        for (ptrdiff_t c = 0; c < C; ++c)
            for (ptrdiff_t i = 0; i < 3; ++i) {
                float* A = acc + (((ob / 4) * C + c) * 3 + i) * 96;
                const float* xr = xp + c * plane + i * We;
                __m256 a00 = _mm256_loadu_ps(A), a01 = _mm256_loadu_ps(A + 8);
                __m256 a02 = _mm256_loadu_ps(A + 16), a10 = _mm256_loadu_ps(A + 24);
                __m256 a11 = _mm256_loadu_ps(A + 32), a12 = _mm256_loadu_ps(A + 40);
                __m256 a20 = _mm256_loadu_ps(A + 48), a21 = _mm256_loadu_ps(A + 56);
                __m256 a22 = _mm256_loadu_ps(A + 64), a30 = _mm256_loadu_ps(A + 72);
                __m256 a31 = _mm256_loadu_ps(A + 80), a32 = _mm256_loadu_ps(A + 88);
                for (ptrdiff_t p = 0; p < n; p += 8) {
                    __m256 x0 = _mm256_loadu_ps(xr + p), x1 = _mm256_loadu_ps(xr + p + 1);
                    __m256 x2 = _mm256_loadu_ps(xr + p + 2), g;
                    g = _mm256_loadu_ps(d0 + p);
                    a00 = _mm256_fmadd_ps(g, x0, a00); a01 = _mm256_fmadd_ps(g, x1, a01);
                    a02 = _mm256_fmadd_ps(g, x2, a02);
                    g = _mm256_loadu_ps(d1 + p);
                    a10 = _mm256_fmadd_ps(g, x0, a10); a11 = _mm256_fmadd_ps(g, x1, a11);
                    a12 = _mm256_fmadd_ps(g, x2, a12);
                    g = _mm256_loadu_ps(d2 + p);
                    a20 = _mm256_fmadd_ps(g, x0, a20); a21 = _mm256_fmadd_ps(g, x1, a21);
                    a22 = _mm256_fmadd_ps(g, x2, a22);
                    g = _mm256_loadu_ps(d3 + p);
                    a30 = _mm256_fmadd_ps(g, x0, a30); a31 = _mm256_fmadd_ps(g, x1, a31);
                    a32 = _mm256_fmadd_ps(g, x2, a32);
                }
                _mm256_storeu_ps(A, a00); _mm256_storeu_ps(A + 8, a01);
                _mm256_storeu_ps(A + 16, a02); _mm256_storeu_ps(A + 24, a10);
                _mm256_storeu_ps(A + 32, a11); _mm256_storeu_ps(A + 40, a12);
                _mm256_storeu_ps(A + 48, a20); _mm256_storeu_ps(A + 56, a21);
                _mm256_storeu_ps(A + 64, a22); _mm256_storeu_ps(A + 72, a30);
                _mm256_storeu_ps(A + 80, a31); _mm256_storeu_ps(A + 88, a32);
            }
    }
}

/* One image's d_weight added into acc (see fnn_cv3_wgrad_tile); xp as fnn_cv3_image,
 * dyp: O * (R * We + 8) floats of scratch. */
static inline void fnn_cv3_wgrad_image(const float* restrict x, const float* restrict dy,
                                       float* restrict acc, ptrdiff_t C, ptrdiff_t H,
                                       ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH, ptrdiff_t OW,
                                       ptrdiff_t pt, ptrdiff_t pl, float* restrict xp,
                                       float* restrict dyp) {
    ptrdiff_t We = OW + 2, R = fnn_cv3_rows(C, OW, OH), PR = fnn_cv3_plane_rows(R, OW);
    ptrdiff_t ldd = R * We + 8;
    for (ptrdiff_t r0 = 0; r0 < OH; r0 += R) {
        ptrdiff_t R1 = r0 + R < OH ? R : OH - r0, n = (R1 * We + 7) / 8 * 8;
        fnn_cv3_pad_tile(x, xp, C, H, W, We, PR, r0 - pt, pl);
        for (ptrdiff_t o = 0; o < O; ++o) {
            float* d = dyp + o * ldd;
            const float* g = dy + (o * OH + r0) * OW;
            ptrdiff_t q;
            for (ptrdiff_t r = 0; r < R1; ++r) {
                for (q = 0; q < OW; ++q) d[r * We + q] = g[r * OW + q];
                d[r * We + OW] = 0.f; d[r * We + OW + 1] = 0.f;
            }
            for (q = R1 * We; q < n; ++q) d[q] = 0.f;
        }
        fnn_cv3_wgrad_tile(dyp, ldd, xp, PR * We, We, n, C, O, acc);
    }
}

/* dw[o, c, i, j] = the 8 lanes of acc for (o, c, i, j) added in a fixed tree */
static inline void fnn_cv3_wgrad_reduce(const float* restrict acc, float* restrict dw,
                                        ptrdiff_t C, ptrdiff_t O) {
    for (ptrdiff_t o = 0; o < O; ++o)
        for (ptrdiff_t c = 0; c < C; ++c)
            for (ptrdiff_t i = 0; i < 3; ++i)
                for (ptrdiff_t j = 0; j < 3; ++j) {
                    const float* a = acc + (((o / 4) * C + c) * 3 + i) * 96 + ((o % 4) * 3 + j) * 8;
                    dw[((o * C + c) * 3 + i) * 3 + j] =
                        ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
                }
}

/* One image: x (C, H, W) -> y (O, OH, OW); xp: C * plane_rows * We floats, ct: O *
 * (R * We + 24) floats of scratch (a whole number of 16-position blocks per row of ct). */
/* Ap: the packed weights (ars == 0), or with ars != 0 the weights in place as
 * fnn_cvd_run_raw reads them (FNN_HAVE_CVD_RAW builds) */
static inline void fnn_cv3_image(const float* restrict x, const float* restrict Ap,
                                 ptrdiff_t ars, ptrdiff_t cs, ptrdiff_t ts,
                                 const float* bias, float* restrict y, ptrdiff_t C,
                                 ptrdiff_t H, ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH,
                                 ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl,
                                 float* restrict xp, float* restrict ct) {
    ptrdiff_t We = OW + 2, R = fnn_cv3_rows(C, OW, OH), PR = fnn_cv3_plane_rows(R, OW);
    ptrdiff_t plane = PR * We, ldc = R * We + 24;
    const ptrdiff_t toff[9] = {0, 1, 2, We, We + 1, We + 2, 2 * We, 2 * We + 1, 2 * We + 2};
    for (ptrdiff_t r0 = 0; r0 < OH; r0 += R) {
        ptrdiff_t R1 = r0 + R < OH ? R : OH - r0, np = R1 * We;
        fnn_cv3_pad_tile(x, xp, C, H, W, We, PR, r0 - pt, pl);
        for (ptrdiff_t o = 0; o < O; ++o) {
            float bo = bias ? bias[o] : 0.f;
            for (ptrdiff_t q = 0; q < ldc; ++q) ct[o * ldc + q] = bo;
        }
        if (ars)
            fnn_cvd_run_raw(Ap, ars, cs, ts, xp, plane, toff, 9, C, O, ct, ldc, np, NULL);
        else
            fnn_cvd_run(Ap, xp, plane, toff, 9, C, C, O, ct, ldc, np);
        for (ptrdiff_t o = 0; o < O; ++o)
            for (ptrdiff_t oh = 0; oh < R1; ++oh) {
                const float* sr = ct + o * ldc + oh * We;
                float* d = y + (o * OH + r0 + oh) * OW;
                for (ptrdiff_t ow = 0; ow < OW; ++ow) d[ow] = sr[ow];
            }
    }
}

#else   /* never called: FNN_HAVE_CV3 == 0 keeps the GEMM paths */
#define FNN_HAVE_CV3 0
static inline ptrdiff_t fnn_cv3_o6(ptrdiff_t O) { return 0; }
static inline ptrdiff_t fnn_cv3_rows(ptrdiff_t C, ptrdiff_t OW, ptrdiff_t OH) { return 1; }
static inline ptrdiff_t fnn_cv3_plane_rows(ptrdiff_t R, ptrdiff_t OW) { return 1; }
#define FNN_HAVE_CVD_RAW 0
static inline void fnn_cvd_run_raw(const float* W, ptrdiff_t ars, ptrdiff_t cs, ptrdiff_t ts,
                                   const float* xp, ptrdiff_t plane, const ptrdiff_t* toff,
                                   ptrdiff_t nt, ptrdiff_t C, ptrdiff_t O, float* ct,
                                   ptrdiff_t ldc, ptrdiff_t np, const float* bias) {}
static inline void fnn_cv3_image(const float* x, const float* Ap, ptrdiff_t ars, ptrdiff_t cs,
                                 ptrdiff_t ts, const float* bias, float* y,
                                 ptrdiff_t C, ptrdiff_t H, ptrdiff_t W, ptrdiff_t O,
                                 ptrdiff_t OH, ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl,
                                 float* xp, float* ct) {}
static inline void fnn_cv3_wgrad_image(const float* x, const float* dy, float* acc, ptrdiff_t C,
                                       ptrdiff_t H, ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH,
                                       ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl, float* xp,
                                       float* dyp) {}
static inline void fnn_cv3_wgrad_reduce(const float* acc, float* dw, ptrdiff_t C, ptrdiff_t O) {}
static inline void fnn_cvd_run(const float* Ap, const float* xp, ptrdiff_t plane,
                               const ptrdiff_t* toff, ptrdiff_t nt, ptrdiff_t cg, ptrdiff_t C,
                               ptrdiff_t O, float* ct, ptrdiff_t ldc, ptrdiff_t np) {}
#endif

/* conv1d's direct d_weight exists in AVX-512 builds only; elsewhere never called */
#ifndef FNN_HAVE_CVW
#define FNN_HAVE_CVW 0
/* ct[o, p] = bias[o] for p < np rounded up to 16, then fnn_cvd_run */
static inline void fnn_cvd_run_init(const float* Ap, const float* xp, ptrdiff_t plane,
                                    const ptrdiff_t* toff, ptrdiff_t nt, ptrdiff_t cg,
                                    ptrdiff_t C, ptrdiff_t O, float* ct, ptrdiff_t ldc,
                                    ptrdiff_t np, const float* bias) {
    ptrdiff_t npr = (np + 15) / 16 * 16;
    for (ptrdiff_t o = 0; o < O; ++o)
        for (ptrdiff_t p = 0; p < npr; ++p) ct[o * ldc + p] = bias[o];
    fnn_cvd_run(Ap, xp, plane, toff, nt, cg, C, O, ct, ldc, np);
}
static inline void fnn_cvw_transpose(const float* x, float* xt, ptrdiff_t C, ptrdiff_t W,
                                     ptrdiff_t We, ptrdiff_t pl) {}
static inline void fnn_cvw_run(const float* a, ptrdiff_t lda, ptrdiff_t arow,
                               const ptrdiff_t* aoff, const float* b, ptrdiff_t ldb,
                               ptrdiff_t brow, const ptrdiff_t* boff, ptrdiff_t nt, ptrdiff_t Q,
                               ptrdiff_t R, ptrdiff_t M, ptrdiff_t Nv, float* dw) {}
#if FNN_HAVE_CV3
/* Winograd F(2x2, 3x3) forward in AVX2 builds: the AVX-512 scheme above (the same
 * transforms, the same sums per lane) on 8-tile vectors, and the GEMMs M[xi] = U[xi] V[xi]
 * on the 6 x 16 / 4 x 16 tiles summing up to FNN_WG_CB channels per tile call.  d_weight
 * stays on the direct 3x3 kernel (fnn_wg_wgrad_image is the AVX-512 builds'). */
#define FNN_HAVE_WG 1
#define FNN_WG_CB 64

/* the even and odd elements of the 16 floats l (0-7), h (8-15) */
static inline void fnn_wg_deint8(__m256 l, __m256 h, __m256* ev, __m256* od) {
    __m256 e = _mm256_shuffle_ps(l, h, _MM_SHUFFLE(2, 0, 2, 0));   /* l0 l2 h0 h2 | l4 l6 h4 h6 */
    __m256 o = _mm256_shuffle_ps(l, h, _MM_SHUFFLE(3, 1, 3, 1));
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* input transform of tiles [t0, t1) into V (positions t - t0), 8 tiles of a tile row a
 * vector.  A group shorter than 8 stores 8 lanes too: the extra lanes land on positions
 * of later groups (written after it) or past the chunk (within ldv), never on earlier
 * ones. */
static inline void fnn_wg_in8(const float* restrict xp, ptrdiff_t C, ptrdiff_t PH, ptrdiff_t We,
                              ptrdiff_t tw, ptrdiff_t t0, ptrdiff_t t1, float* restrict V,
                              ptrdiff_t ldv) {
    const ptrdiff_t xs = C * ldv;   /* one xi plane */
    for (ptrdiff_t ty = t0 / tw; ty * tw < t1; ++ty) {
        ptrdiff_t xa = t0 - ty * tw > 0 ? t0 - ty * tw : 0;
        ptrdiff_t xb = t1 - ty * tw < tw ? t1 - ty * tw : tw;
        for (ptrdiff_t tx = xa; tx < xb; tx += 8) {
            ptrdiff_t p = ty * tw + tx - t0;
            for (ptrdiff_t c = 0; c < C; ++c) {
                const float* base = xp + (c * PH + 2 * ty) * We + 2 * tx;
                __m256 e[4][4];
                for (int a = 0; a < 4; ++a) {
                    const float* r = base + a * We;
                    __m256 d0, d1, d2, d3;
                    fnn_wg_deint8(_mm256_loadu_ps(r), _mm256_loadu_ps(r + 8), &d0, &d1);
                    fnn_wg_deint8(_mm256_loadu_ps(r + 2), _mm256_loadu_ps(r + 10), &d2, &d3);
                    e[a][0] = _mm256_sub_ps(d0, d2);
                    e[a][1] = _mm256_add_ps(d1, d2);
                    e[a][2] = _mm256_sub_ps(d2, d1);
                    e[a][3] = _mm256_sub_ps(d1, d3);
                }
                float* v = V + c * ldv + p;
                for (int b = 0; b < 4; ++b) {
                    _mm256_storeu_ps(v + (0 + b) * xs, _mm256_sub_ps(e[0][b], e[2][b]));
                    _mm256_storeu_ps(v + (4 + b) * xs, _mm256_add_ps(e[1][b], e[2][b]));
                    _mm256_storeu_ps(v + (8 + b) * xs, _mm256_sub_ps(e[2][b], e[1][b]));
                    _mm256_storeu_ps(v + (12 + b) * xs, _mm256_sub_ps(e[1][b], e[3][b]));
                }
            }
        }
    }
}

/* the 16 columns a0 b0 a1 b1 ... a7 b7 (y0 = a, y1 = b) into yr, nc of them */
static inline void fnn_wg_store16(float* restrict yr, __m256 a, __m256 b, ptrdiff_t nc) {
    __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
    __m256 q0 = _mm256_permute2f128_ps(lo, hi, 0x20), q1 = _mm256_permute2f128_ps(lo, hi, 0x31);
    if (nc == 16) {
        _mm256_storeu_ps(yr, q0);
        _mm256_storeu_ps(yr + 8, q1);
    } else {   /* the row's end: never past it (the next row is y's, already written) */
        float t[16];
        _mm256_storeu_ps(t, q0);
        _mm256_storeu_ps(t + 8, q1);
        memcpy(yr, t, (size_t)nc * sizeof(float));
    }
}

/* output transform of tiles [t0, t1) from M (positions t - t0), bias added, into y */
static inline void fnn_wg_out8(const float* restrict M, ptrdiff_t ldv, ptrdiff_t O,
                               const float* restrict bias, ptrdiff_t OH, ptrdiff_t OW,
                               ptrdiff_t tw, ptrdiff_t t0, ptrdiff_t t1, float* restrict y) {
    const ptrdiff_t xs = O * ldv;
    for (ptrdiff_t ty = t0 / tw; ty * tw < t1; ++ty) {
        ptrdiff_t xa = t0 - ty * tw > 0 ? t0 - ty * tw : 0;
        ptrdiff_t xb = t1 - ty * tw < tw ? t1 - ty * tw : tw;
        for (ptrdiff_t tx = xa; tx < xb; tx += 8) {
            ptrdiff_t nl = xb - tx < 8 ? xb - tx : 8, p = ty * tw + tx - t0;
            ptrdiff_t nc = OW - 2 * tx < 2 * nl ? OW - 2 * tx : 2 * nl;   /* columns written */
            int two = 2 * ty + 1 < OH;
            for (ptrdiff_t o = 0; o < O; ++o) {
                const float* m = M + o * ldv + p;
                __m256 s0[4], s1[4];
                for (int a = 0; a < 4; ++a) {
                    __m256 m0 = _mm256_loadu_ps(m + (4 * a) * xs);
                    __m256 m1 = _mm256_loadu_ps(m + (4 * a + 1) * xs);
                    __m256 m2 = _mm256_loadu_ps(m + (4 * a + 2) * xs);
                    __m256 m3 = _mm256_loadu_ps(m + (4 * a + 3) * xs);
                    s0[a] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
                    s1[a] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
                }
                __m256 bv = _mm256_set1_ps(bias[o]);
                float* yr = y + (o * OH + 2 * ty) * OW + 2 * tx;
                fnn_wg_store16(yr, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]), bv),
                               _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]), bv), nc);
                if (two)
                    fnn_wg_store16(yr + OW,
                                   _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]), bv),
                                   _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]), bv), nc);
            }
        }
    }
}

/* M[o*ldv + p] = sum_c U(o, c) V[c*ldv + p] for p < np rounded up to 16 (U packed as
 * fnn_cvd_run's one-tap weights); channels in blocks of FNN_WG_CB, in order */
static __attribute__((noinline)) void fnn_wg_gemm(const float* restrict U, const float* restrict V,
                                                  ptrdiff_t ldv, ptrdiff_t C, ptrdiff_t O,
                                                  float* restrict M, ptrdiff_t np) {
    const ptrdiff_t toff[1] = {0};
    ptrdiff_t o6 = fnn_cv3_o6(O);
    for (ptrdiff_t cb = 0; cb < C; cb += FNN_WG_CB) {
        ptrdiff_t nc = C - cb < FNN_WG_CB ? C - cb : FNN_WG_CB, ob = 0;
        const float* B = V + cb * ldv;
        for (; ob < o6; ob += 6)
            for (ptrdiff_t pb = 0; pb < np; pb += FNN_CV3_NR)
                fnn_cvd_tile6(U + ob * C + cb * 6, B + pb, ldv, toff, 1, nc, M + ob * ldv + pb, ldv, cb == 0);
        for (; ob < O; ob += 4)
            for (ptrdiff_t pb = 0; pb < np; pb += FNN_CV3_NR)
                fnn_cvd_tile4(U + ob * C + cb * 4, B + pb, ldv, toff, 1, nc, M + ob * ldv + pb, ldv, cb == 0);
    }
}

/* One image, as the AVX-512 fnn_wg_image (zeros: unused here) */
static inline void fnn_wg_image(const float* restrict x, const float* restrict U,
                                const float* restrict bias, float* restrict y, ptrdiff_t C,
                                ptrdiff_t H, ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH,
                                ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl, float* restrict xp,
                                float* restrict V, float* restrict M, const float* restrict zeros) {
    ptrdiff_t th, tw, We, PH, ldv, T;
    (void)zeros;
    fnn_wg_dims(OH, OW, &th, &tw, &We, &PH, &ldv);
    T = th * tw;
    fnn_cv3_pad_tile(x, xp, C, H, W, We, PH, -pt, pl);
    for (ptrdiff_t t0 = 0; t0 < T; t0 += FNN_WG_TB) {
        ptrdiff_t t1 = t0 + FNN_WG_TB < T ? t0 + FNN_WG_TB : T;
        fnn_wg_in8(xp, C, PH, We, tw, t0, t1, V, ldv);
        for (int k = 0; k < 16; ++k)
            fnn_wg_gemm(U + k * fnn_wg_ustride(O, C), V + k * C * ldv, ldv, C, O, M + k * O * ldv,
                        t1 - t0);
        fnn_wg_out8(M, ldv, O, bias, OH, OW, tw, t0, t1, y);
    }
}
#else
#define FNN_HAVE_WG 0
static inline void fnn_wg_dims(ptrdiff_t OH, ptrdiff_t OW, ptrdiff_t* th, ptrdiff_t* tw,
                               ptrdiff_t* We, ptrdiff_t* PH, ptrdiff_t* ldv) {
    *th = *tw = *We = *PH = *ldv = 1;
}
static inline void fnn_wg_image(const float* x, const float* U, const float* bias, float* y,
                                ptrdiff_t C, ptrdiff_t H, ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH,
                                ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl, float* xp, float* V,
                                float* M, const float* zeros) {}
#endif
static inline void fnn_wg_wgrad_image(const float* x, const float* dy, float* dU, ptrdiff_t C,
                                      ptrdiff_t H, ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH,
                                      ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl, float* xp,
                                      float* V, float* D, float* Dt) {}
#endif
#endif
