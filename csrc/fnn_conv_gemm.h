/* A convolution as an implicit GEMM on the own float32 kernel (fnn_sgemm.h, AVX-512
 * builds): y[o, j] = sum_k W[o, k] B[k, j] over one image, W the weight read in place
 * (O x K, K = C * taps, row-major: an (O, C, kh, kw) weight as it lies), B the im2col
 * matrix never formed: each k block of it is packed straight from the image's planes
 * into the kernel's 32-column panels (fnn_cig_pack), where a GEMM would first copy an
 * im2col tile and then pack that.  Step k = c * taps + t reads the planes at koff[k]
 * (channel c's plane plus tap t's offset, for a strided conv the phase plane's too);
 * position j = q * OW + r at q * Wp + r from there.
 *
 * The k blocks, their order and the sums within them are fnn_sgemm_z's (near-equal
 * blocks of at most FNN_SGZ_KC, each output's sum over k in order); the bias is y's value
 * before the first block.  No output depends on the column range a call covers: the
 * same bits for any split of the positions over threads. */
#ifndef FNN_CONV_GEMM_H
#define FNN_CONV_GEMM_H
#include "fnn_sgemm.h"

#if FNN_HAVE_SGZ && defined(__AVX512F__)
#define FNN_HAVE_CIG 1

/* The source offsets of 16 consecutive positions pos .. pos + w - 1 (w <= 16 valid
 * lanes): as two runs (lanes [0, n1) from s0 + lane, [n1, w) from s1 + lane) when they
 * span at most two rows, else (rows shorter than 16) per lane in idx. */
typedef struct {
    __mmask16 m0, m1;
    ptrdiff_t s0, s1;
    int gather;
    __m512i idx;
} fnn_cig_src;

static inline fnn_cig_src fnn_cig_half(ptrdiff_t pos, ptrdiff_t w, ptrdiff_t Wp, ptrdiff_t OW)
{
    fnn_cig_src h;
    const ptrdiff_t q = pos / OW, r = pos - q * OW;
    const ptrdiff_t n1 = w < OW - r ? w : OW - r;
    h.gather = 0;
    h.idx = _mm512_setzero_si512();
    h.m0 = h.m1 = 0;
    h.s0 = h.s1 = 0;
    if (w <= 0)
        return h;
    h.s0 = q * Wp + r;
    h.m0 = (__mmask16)((1u << n1) - 1);
    h.s1 = (q + 1) * Wp - n1;
    if (n1 < w) {
        if (w - n1 <= OW) {
            h.m1 = (__mmask16)(((1u << w) - 1) & ~((1u << n1) - 1));
        } else {
            int32_t ix[16] __attribute__((aligned(64)));
            for (int l = 0; l < 16; ++l) {
                const ptrdiff_t p = pos + (l < w ? l : 0), ql = p / OW;
                ix[l] = (int32_t)(ql * Wp + (p - ql * OW));
            }
            h.gather = 1;
            h.idx = _mm512_load_si512((const void*)ix);
            h.m0 = (__mmask16)((1u << w) - 1);
        }
    }
    return h;
}

static inline __m512 fnn_cig_load(const fnn_cig_src* h, const float* base)
{
    if (h->gather)
        return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), h->m0, h->idx, base, 4);
    __m512 v = _mm512_maskz_loadu_ps(h->m0, base + h->s0);
    return h->m1 ? _mm512_mask_loadu_ps(v, h->m1, base + h->s1) : v;
}

/* k steps [0, kc) (their plane offsets koff) of positions [j0, j0 + nc) into 32-column
 * panels, fnn_sgz_pack_b's layout (panel p, step k at pb + p * kc * 32 + k * 32; columns
 * past nc zero). */
static inline void fnn_cig_pack(const float* restrict pl, const ptrdiff_t* restrict koff,
                                ptrdiff_t kc, ptrdiff_t Wp, ptrdiff_t OW, ptrdiff_t j0,
                                ptrdiff_t nc, float* restrict pb)
{
    for (ptrdiff_t j = 0; j < nc; j += FNN_SGZ_NR) {
        const fnn_cig_src h0 = fnn_cig_half(j0 + j, nc - j < 16 ? nc - j : 16, Wp, OW);
        const fnn_cig_src h1 = fnn_cig_half(j0 + j + 16, nc - j - 16 < 16 ? nc - j - 16 : 16,
                                            Wp, OW);
        float* dst = pb + j * kc;
        for (ptrdiff_t k = 0; k < kc; ++k) {
            const float* base = pl + koff[k];
            _mm512_store_ps(dst + k * 32, fnn_cig_load(&h0, base));
            _mm512_store_ps(dst + k * 32 + 16, fnn_cig_load(&h1, base));
        }
    }
}

/* All O rows of one packed k block [p0, p0 + kc) (panels in pb, columns [jc, jc + nc)):
 * C (rows ldc apart) = beta C + W[:, p0:p0 + kc] B_block, W (O x K) read in place. */
static inline void fnn_cig_rows(const float* restrict W, ptrdiff_t O, ptrdiff_t K, ptrdiff_t p0,
                                ptrdiff_t kc, const float* restrict pb, ptrdiff_t jc,
                                ptrdiff_t nc, float* restrict C, ptrdiff_t ldc, float beta,
                                int first)
{
    for (ptrdiff_t i0 = 0; i0 < O; i0 += FNN_SGZ_MC) {
        const ptrdiff_t mc = O - i0 < FNN_SGZ_MC ? O - i0 : FNN_SGZ_MC;
        fnn_sgz_block(0, W, K, NULL, i0, mc, p0, kc, pb, jc, nc, C, ldc, 1.0f, beta, NULL,
                      first);
    }
}

/* Positions [j0, j1) of one image: y (O rows, P apart) = W (O x K) B (+ bias[o]).
 * Returns 0, or -1 (y untouched) without a packing buffer. */
static inline int fnn_cig_image(const float* restrict W, ptrdiff_t O, ptrdiff_t K,
                                const float* restrict pl, const ptrdiff_t* restrict koff,
                                ptrdiff_t Wp, ptrdiff_t OW, ptrdiff_t j0, ptrdiff_t j1,
                                float* restrict y, ptrdiff_t P, const float* restrict bias)
{
    float* pb = fnn_sgz_buffer();
    if (pb == NULL)
        return -1;
    const ptrdiff_t N = j1 - j0, nkb = (K + FNN_SGZ_KC - 1) / FNN_SGZ_KC;
    const ptrdiff_t ncm = fnn_sgz_nc_max(), njb = (N + ncm - 1) / ncm;
    for (ptrdiff_t jb = 0; jb < njb; ++jb) {
        const ptrdiff_t jc = j0 + fnn_sgz_col_edge(N, jb, njb);
        const ptrdiff_t nc = j0 + fnn_sgz_col_edge(N, jb + 1, njb) - jc;
        if (nc <= 0)
            continue;
        if (bias)
            for (ptrdiff_t o = 0; o < O; ++o) {
                const __m512 b = _mm512_set1_ps(bias[o]);
                float* yr = y + o * P + jc;
                for (ptrdiff_t c = 0; c < nc; c += 16)
                    _mm512_mask_storeu_ps(yr + c, (__mmask16)(nc - c >= 16 ? 0xFFFF
                                                              : (1u << (nc - c)) - 1), b);
            }
        for (ptrdiff_t kb = 0; kb < nkb; ++kb) {
            const ptrdiff_t p0 = K * kb / nkb, kc = K * (kb + 1) / nkb - p0;
            fnn_cig_pack(pl, koff + p0, kc, Wp, OW, jc, nc, pb);
            fnn_cig_rows(W, O, K, p0, kc, pb, jc, nc, y, P, bias ? 1.0f : 0.0f, kb == 0);
        }
    }
    return 0;
}
/* Several images side by side (small planes, fewer positions than a few panels): column
 * j = n * P + q * OW + r reads image n's planes (PS floats after image n - 1's) at
 * koff[k] + q * RS + r * CS (a plane's rows RS apart; CS = 1, or a strided 1x1's
 * stride read from the image itself).  Lanes [0, w) of the 16 from column pos: their
 * offsets in *idx, the mask of live lanes returned (the others read nothing and pack as
 * 0). */
static inline __mmask16 fnn_cig_multi_idx(ptrdiff_t pos, ptrdiff_t w, ptrdiff_t P, ptrdiff_t PS,
                                          ptrdiff_t RS, ptrdiff_t CS, ptrdiff_t OW,
                                          __m512i* idx)
{
    int32_t ix[16] __attribute__((aligned(64)));
    for (int l = 0; l < 16; ++l) {
        const ptrdiff_t p = pos + (l < w ? l : 0), n = p / P, e = p - n * P, q = e / OW;
        ix[l] = (int32_t)(n * PS + q * RS + (e - q * OW) * CS);
    }
    *idx = _mm512_load_si512((const void*)ix);
    return w <= 0 ? (__mmask16)0 : w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1);
}

/* k steps [0, kc) (their plane offsets koff) of columns [j0, j0 + nc) (as
 * fnn_cig_multi_idx says) into fnn_cig_pack's panels, by gathers. */
static inline void fnn_cig_pack_multi(const float* restrict pl, const ptrdiff_t* restrict koff,
                                      ptrdiff_t kc, ptrdiff_t P, ptrdiff_t PS, ptrdiff_t RS,
                                      ptrdiff_t CS, ptrdiff_t OW, ptrdiff_t j0, ptrdiff_t nc,
                                      float* restrict pb)
{
    for (ptrdiff_t j = 0; j < nc; j += FNN_SGZ_NR) {
        __m512i i0, i1;
        const __mmask16 m0 = fnn_cig_multi_idx(j0 + j, nc - j, P, PS, RS, CS, OW, &i0);
        const __mmask16 m1 = fnn_cig_multi_idx(j0 + j + 16, nc - j - 16, P, PS, RS, CS, OW,
                                               &i1);
        float* dst = pb + j * kc;
        for (ptrdiff_t k = 0; k < kc; ++k) {
            const float* base = pl + koff[k];
            _mm512_store_ps(dst + k * 32,
                            _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, i0, base, 4));
            _mm512_store_ps(dst + k * 32 + 16,
                            _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, i1, base, 4));
        }
    }
}

/* tmp (O rows, ldt apart; columns [0, J)) = W (O x K, read in place) B, B's columns as
 * fnn_cig_multi_idx says, packed by gathers (2 a k step and panel: a few percent of the
 * panel's 12 x 32 products over O rows).  The k blocks and the sums within them are
 * fnn_sgemm_z's.  Returns 0, or -1 (tmp untouched) without a packing buffer. */
static inline int fnn_cig_multi(const float* restrict W, ptrdiff_t O, ptrdiff_t K,
                                const float* restrict pl, const ptrdiff_t* restrict koff,
                                ptrdiff_t P, ptrdiff_t PS, ptrdiff_t RS, ptrdiff_t CS,
                                ptrdiff_t OW, ptrdiff_t J, float* restrict tmp, ptrdiff_t ldt)
{
    float* pb = fnn_sgz_buffer();
    if (pb == NULL)
        return -1;
    const ptrdiff_t nkb = (K + FNN_SGZ_KC - 1) / FNN_SGZ_KC;
    const ptrdiff_t ncm = fnn_sgz_nc_max(), njb = (J + ncm - 1) / ncm;
    for (ptrdiff_t jb = 0; jb < njb; ++jb) {
        const ptrdiff_t jc = fnn_sgz_col_edge(J, jb, njb);
        const ptrdiff_t nc = fnn_sgz_col_edge(J, jb + 1, njb) - jc;
        if (nc <= 0)
            continue;
        for (ptrdiff_t kb = 0; kb < nkb; ++kb) {
            const ptrdiff_t p0 = K * kb / nkb, kc = K * (kb + 1) / nkb - p0;
            fnn_cig_pack_multi(pl, koff + p0, kc, P, PS, RS, CS, OW, jc, nc, pb);
            fnn_cig_rows(W, O, K, p0, kc, pb, jc, nc, tmp, ldt, 0.0f, kb == 0);
        }
    }
    return 0;
}
#else
#define FNN_HAVE_CIG 0
static inline int fnn_cig_image(const float* W, ptrdiff_t O, ptrdiff_t K, const float* pl,
                                const ptrdiff_t* koff, ptrdiff_t Wp, ptrdiff_t OW, ptrdiff_t j0,
                                ptrdiff_t j1, float* y, ptrdiff_t P, const float* bias)
{
    (void)W; (void)O; (void)K; (void)pl; (void)koff; (void)Wp; (void)OW; (void)j0; (void)j1;
    (void)y; (void)P; (void)bias;
    return -1;
}
static inline int fnn_cig_multi(const float* W, ptrdiff_t O, ptrdiff_t K, const float* pl,
                                const ptrdiff_t* koff, ptrdiff_t P, ptrdiff_t PS, ptrdiff_t RS,
                                ptrdiff_t CS, ptrdiff_t OW, ptrdiff_t J, float* tmp,
                                ptrdiff_t ldt)
{
    (void)W; (void)O; (void)K; (void)pl; (void)koff; (void)P; (void)PS; (void)RS; (void)CS;
    (void)OW; (void)J; (void)tmp; (void)ldt;
    return -1;
}
#endif
#endif
