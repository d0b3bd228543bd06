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
#include <string.h>
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
/* ---------------------------------------------------------------- Winograd, small planes
 * A 3x3 stride-1 conv2d over several images of small planes (under 64 output positions:
 * ResNet's 7 x 7, where one image's 16 tiles leave a per-image Winograd's products half a
 * panel wide) on Winograd F(2x2, 3x3) as 16 GEMMs on the own kernel: M[k] (R x T) = U[k]
 * (R x Cn) V[k] (Cn x T), k = 4 i + j a position in the 4 x 4 transformed tile, T the
 * images' 2 x 2 output tiles side by side (fnn_wgs_*).  U = G g G^T, V = B^T d B, y = A^T m A
 * with the usual F(2x2, 3x3) matrices. */

/* The first n lanes of 16 (n <= 0: none, n >= 16: all). */
static inline __mmask16 fnn_wgs_lanes(ptrdiff_t n)
{
    return (__mmask16)(n >= 16 ? 0xFFFF : n > 0 ? (1u << n) - 1 : 0);
}

/* U[k] of the filters of rows [r0, r1) (element (r, c) of the k-th matrix at U + k S + r
 * ld + c): (G g G^T) at k, g the 3x3 filter of (row r, column c < Cn), tap (a, b) at w[r rs
 * + c cs + t], t = 3 a + b (8 - t: flip).  16 columns at a time: whole filters (cs 9)
 * loaded and transposed in registers, else gathered. */
static inline void fnn_wgs_weight(const float* restrict w, ptrdiff_t rs, ptrdiff_t cs, int flip,
                                  ptrdiff_t S, ptrdiff_t ld, ptrdiff_t Cn, ptrdiff_t r0,
                                  ptrdiff_t r1, float* restrict U)
{
    const __m512 h = _mm512_set1_ps(0.5f);
    const __m512i vi = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7,
                                                           6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32((int)cs));
    for (ptrdiff_t r = r0; r < r1; ++r)
        for (ptrdiff_t c = 0; c < Cn; c += 16) {
            const __mmask16 m = fnn_wgs_lanes(Cn - c);
            const float* f = w + r * rs + c * cs;
            __m512 g[16], t[4][3];
            if (cs == 9) {      /* 16 whole filters: 9-float loads, transposed in registers */
                const ptrdiff_t n = Cn - c < 16 ? Cn - c : 16;
                for (ptrdiff_t l = 0; l < 16; ++l)
                    g[l] = l < n ? _mm512_maskz_loadu_ps((__mmask16)0x1FF, f + 9 * l)
                                 : _mm512_setzero_ps();
                fnn_transpose16_ps(g);
                if (flip)
                    for (int q = 0; q < 4; ++q) {
                        const __m512 u = g[q];
                        g[q] = g[8 - q];
                        g[8 - q] = u;
                    }
            } else {
                for (int q = 0; q < 9; ++q)
                    g[q] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, vi,
                                                    f + (flip ? 8 - q : q), 4);
            }
            for (int b = 0; b < 3; ++b) {
                const __m512 s = _mm512_add_ps(g[b], g[6 + b]);
                t[0][b] = g[b];
                t[1][b] = _mm512_mul_ps(h, _mm512_add_ps(s, g[3 + b]));
                t[2][b] = _mm512_mul_ps(h, _mm512_sub_ps(s, g[3 + b]));
                t[3][b] = g[6 + b];
            }
            float* u = U + r * ld + c;
            for (int a = 0; a < 4; ++a) {
                const __m512 s = _mm512_add_ps(t[a][0], t[a][2]);
                _mm512_mask_storeu_ps(u + (4 * a) * S, m, t[a][0]);
                _mm512_mask_storeu_ps(u + (4 * a + 1) * S, m,
                                      _mm512_mul_ps(h, _mm512_add_ps(s, t[a][1])));
                _mm512_mask_storeu_ps(u + (4 * a + 2) * S, m,
                                      _mm512_mul_ps(h, _mm512_sub_ps(s, t[a][1])));
                _mm512_mask_storeu_ps(u + (4 * a + 3) * S, m, t[a][2]);
            }
        }
}

/* A d_input's U (fnn_wgs_weight of the flipped filters, each of the 16 matrices
 * transposed: U[k] is C x O): its rows [c0, c1) (c0 a multiple of 16), from the (O, C, 3,
 * 3) weight w in blocks of 16 x 16 filters -- each output channel's 16 transformed as
 * fnn_wgs_weight, the block transposed in registers -- along the rows (the stores run
 * along them). */
static inline void fnn_wgs_weight_t(const float* restrict w, ptrdiff_t O, ptrdiff_t C,
                                    ptrdiff_t c0, ptrdiff_t c1, float* restrict U)
{
    const ptrdiff_t S = O * C;
    float blk[16][16][16] __attribute__((aligned(64)));   /* [k][o][c] */
    for (ptrdiff_t cb = c0; cb < c1; cb += 16) {
        const ptrdiff_t nc = c1 - cb < 16 ? c1 - cb : 16;
        for (ptrdiff_t ob = 0; ob < O; ob += 16) {
            const ptrdiff_t no = O - ob < 16 ? O - ob : 16;
            const __mmask16 mo = fnn_wgs_lanes(no);
            fnn_wgs_weight(w + ob * C * 9 + cb * 9, C * 9, 9, 1, 256, 16, nc, 0, no,
                           &blk[0][0][0]);
            for (int k = 0; k < 16; ++k) {
                __m512 r[16];
                for (int o = 0; o < 16; ++o)
                    r[o] = _mm512_load_ps(&blk[k][o][0]);
                fnn_transpose16_ps(r);
                for (ptrdiff_t c = 0; c < nc; ++c)
                    _mm512_mask_storeu_ps(U + k * S + (cb + c) * O + ob, mo, r[c]);
            }
        }
    }
}

/* The floats of the own GEMM's per-thread packing buffer (fnn_sgz_buffer), for the
 * message when it cannot be had. */
static inline ptrdiff_t fnn_sgz_buffer_floats(void)
{
    return (ptrdiff_t)FNN_SGZ_KC * (FNN_SGZ_NC_BIG + (FNN_SGZ_TRANS_A ? FNN_SGZ_MC : 0)) + 16;
}

/* The tiles' offset tables of an H x W input (padding pt above, pl left) and its OH x OW
 * output, th x tw tiles of 2 x 2 outputs in row-major order, rows of np >= th tw (lanes
 * past the tiles -1): ix[q np + t] the input offset of tile t's patch element q = 4 a + b
 * (-1 in the padding), iy[i np + t] the output offset of its output i = 2 r + c (-1 past
 * the edge); io[p] (64 of them) for an output plane of <= 64 positions and <= 16
 * tiles: 16 i + t of the tile output at position p (-1 past the plane). */
static inline void fnn_wgs_tables(ptrdiff_t H, ptrdiff_t W, ptrdiff_t OH, ptrdiff_t OW,
                                  ptrdiff_t pt, ptrdiff_t pl, ptrdiff_t np, int32_t* restrict ix,
                                  int32_t* restrict iy, int32_t* restrict io)
{
    const ptrdiff_t th = (OH + 1) / 2, tw = (OW + 1) / 2;
    for (ptrdiff_t p = 0; p < 64; ++p) {    /* position p: output i of tile t, as 16 i + t */
        const ptrdiff_t r = p / (OW > 0 ? OW : 1), c = p - r * OW;
        io[p] = p < OH * OW && th * tw <= 16
                    ? (int32_t)(16 * (2 * (r % 2) + c % 2) + (r / 2) * tw + c / 2) : -1;
    }
    for (ptrdiff_t t = 0; t < np; ++t) {
        const ptrdiff_t ty = t / tw, tx = t - ty * tw, live = t < th * tw;
        for (int q = 0; q < 16; ++q) {
            const ptrdiff_t r = 2 * ty + q / 4 - pt, c = 2 * tx + q % 4 - pl;
            ix[q * np + t] = live && r >= 0 && r < H && c >= 0 && c < W ? (int32_t)(r * W + c)
                                                                         : -1;
        }
        for (int i = 0; i < 4; ++i) {
            const ptrdiff_t r = 2 * ty + i / 2, c = 2 * tx + i % 2;
            iy[i * np + t] = live && r < OH && c < OW ? (int32_t)(r * OW + c) : -1;
        }
    }
}

/* A plane of n <= 64 floats in 4 registers (zeros past n). */
static inline void fnn_wgs_hold(const float* restrict x, ptrdiff_t n, __m512 r[4])
{
    for (int j = 0; j < 4; ++j) {
        r[j] = _mm512_maskz_loadu_ps(fnn_wgs_lanes(n - 16 * j), x + 16 * j);
    }
}

/* Lanes m of the held plane r at offsets vi (< 64; -1: a zero), the others zero: two
 * permutes of two registers each in place of a gather. */
static inline __m512 fnn_wgs_pick(const __m512 r[4], __m512i vi, __mmask16 m)
{
    const __mmask16 live = m & _mm512_cmpge_epi32_mask(vi, _mm512_setzero_si512());
    const __mmask16 hi = _mm512_cmpge_epi32_mask(vi, _mm512_set1_epi32(32));
    const __m512 lo = _mm512_permutex2var_ps(r[0], vi, r[1]);
    const __m512 up = _mm512_permutex2var_ps(r[2], vi, r[3]);
    return _mm512_maskz_mov_ps(live, _mm512_mask_blend_ps(hi, lo, up));
}

/* Lanes m of a plane x at offsets vi (-1: a zero): from its registers r when held (a plane
 * of <= 64 floats, fnn_wgs_hold), else gathered. */
static inline __m512 fnn_wgs_read(const __m512 r[4], int held, const float* x, __m512i vi,
                                  __mmask16 m)
{
    if (held)
        return fnn_wgs_pick(r, vi, m);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(),
                                    m & _mm512_cmpge_epi32_mask(vi, _mm512_setzero_si512()), vi,
                                    x, 4);
}

/* The tiles of one plane x (hw floats; nt tiles, row-major): tile t's input patch element
 * q = 4 a + b at x[ix[q np + t]] (np: the tables' row length, a multiple of 16; -1:
 * outside the plane, a zero of the padding), its B^T d B into V[k vs + t].  A plane of <=
 * 64 floats is held in registers (fnn_wgs_pick), a larger one gathered from. */
static inline void fnn_wgs_input(const float* restrict x, ptrdiff_t hw,
                                 const int32_t* restrict ix, ptrdiff_t nt, ptrdiff_t np,
                                 float* restrict V, ptrdiff_t vs)
{
    __m512 r[4];
    fnn_wgs_hold(x, hw <= 64 ? hw : 0, r);      /* (zeros when not held: unread) */
    for (ptrdiff_t t0 = 0; t0 < nt; t0 += 16) {
        const __mmask16 m = fnn_wgs_lanes(nt - t0);
        __m512 d[4][4], e[4][4];
        for (int q = 0; q < 16; ++q) {
            d[q >> 2][q & 3] = fnn_wgs_read(
                r, hw <= 64, x, _mm512_loadu_si512((const void*)(ix + q * np + t0)), m);
        }
        for (int b = 0; b < 4; ++b) {     /* B^T d: the rows */
            e[0][b] = _mm512_sub_ps(d[0][b], d[2][b]);
            e[1][b] = _mm512_add_ps(d[1][b], d[2][b]);
            e[2][b] = _mm512_sub_ps(d[2][b], d[1][b]);
            e[3][b] = _mm512_sub_ps(d[1][b], d[3][b]);
        }
        float* v = V + t0;
        for (int a = 0; a < 4; ++a) {     /* (B^T d) B: the columns */
            _mm512_mask_storeu_ps(v + (4 * a) * vs, m, _mm512_sub_ps(e[a][0], e[a][2]));
            _mm512_mask_storeu_ps(v + (4 * a + 1) * vs, m, _mm512_add_ps(e[a][1], e[a][2]));
            _mm512_mask_storeu_ps(v + (4 * a + 2) * vs, m, _mm512_sub_ps(e[a][2], e[a][1]));
            _mm512_mask_storeu_ps(v + (4 * a + 3) * vs, m, _mm512_sub_ps(e[a][1], e[a][3]));
        }
    }
}

/* One output plane y (ps positions) from its nt tiles' products M[k ms + t]: A^T m A (+
 * bias), output i = 2 r + c of tile t at y[iy[i np + t]] (-1: past the plane's edge,
 * dropped).  A plane of <= 64 positions and <= 16 tiles is put together in registers
 * (position p from 16 i + t = io[p]) and stored whole; else scattered. */
static inline void fnn_wgs_output(const float* restrict M, ptrdiff_t ms,
                                  const int32_t* restrict iy, const int32_t* restrict io,
                                  ptrdiff_t nt, ptrdiff_t np, ptrdiff_t ps, float bias,
                                  float* restrict y)
{
    const __m512 vb = _mm512_set1_ps(bias);
    for (ptrdiff_t t0 = 0; t0 < nt; t0 += 16) {
        const __mmask16 m = fnn_wgs_lanes(nt - t0);
        __m512 v[16], s[2][4], o[4];
        for (int k = 0; k < 16; ++k)
            v[k] = _mm512_maskz_loadu_ps(m, M + k * ms + t0);
        for (int b = 0; b < 4; ++b) {     /* A^T m */
            s[0][b] = _mm512_add_ps(_mm512_add_ps(v[b], v[4 + b]), v[8 + b]);
            s[1][b] = _mm512_sub_ps(_mm512_sub_ps(v[4 + b], v[8 + b]), v[12 + b]);
        }
        for (int i = 0; i < 2; ++i) {     /* (A^T m) A */
            o[2 * i] = _mm512_add_ps(_mm512_add_ps(s[i][0], s[i][1]), s[i][2]);
            o[2 * i + 1] = _mm512_sub_ps(_mm512_sub_ps(s[i][1], s[i][2]), s[i][3]);
        }
        if (nt <= 16 && ps <= 64) {
            for (int j = 0; j < 4 && 16 * j < ps; ++j) {
                const ptrdiff_t w = ps - 16 * j;
                const __mmask16 mj = fnn_wgs_lanes(w);
                const __m512i vi = _mm512_loadu_si512((const void*)(io + 16 * j));
                _mm512_mask_storeu_ps(y + 16 * j, mj,
                                      _mm512_add_ps(fnn_wgs_pick(o, vi, 0xFFFF), vb));
            }
            continue;
        }
        for (int i = 0; i < 4; ++i) {
            const __m512i vi = _mm512_loadu_si512((const void*)(iy + i * np + t0));
            const __mmask16 mi = m & _mm512_cmpge_epi32_mask(vi, _mm512_setzero_si512());
            _mm512_mask_i32scatter_ps(y, mi, vi, _mm512_add_ps(o[i], vb), 4);
        }
    }
}
/* d_weight on the same transforms: the tiles of one output-gradient plane dy (its outputs'
 * offsets iy as fnn_wgs_output's: -1 past the edge, a zero; ps of them, held in registers
 * when <= 64) as A dY A^T into D[k ds + t]. */
static inline void fnn_wgs_dout(const float* restrict dy, ptrdiff_t ps,
                                const int32_t* restrict iy, ptrdiff_t nt, ptrdiff_t np,
                                float* restrict D, ptrdiff_t ds)
{
    __m512 h[4];
    fnn_wgs_hold(dy, ps <= 64 ? ps : 0, h);     /* (zeros when not held: unread) */
    for (ptrdiff_t t0 = 0; t0 < nt; t0 += 16) {
        const __mmask16 m = fnn_wgs_lanes(nt - t0);
        __m512 d[4], r[4][2];
        for (int i = 0; i < 4; ++i) {
            d[i] = fnn_wgs_read(h, ps <= 64, dy,
                                _mm512_loadu_si512((const void*)(iy + i * np + t0)), m);
        }
        for (int b = 0; b < 2; ++b) {     /* A dY: the rows (d[2 a + b] is dY[a][b]) */
            r[0][b] = d[b];
            r[1][b] = _mm512_add_ps(d[b], d[2 + b]);
            r[2][b] = _mm512_sub_ps(d[b], d[2 + b]);
            r[3][b] = _mm512_sub_ps(_mm512_setzero_ps(), d[2 + b]);
        }
        float* o = D + t0;
        for (int i = 0; i < 4; ++i) {     /* (A dY) A^T: the columns */
            _mm512_mask_storeu_ps(o + (4 * i) * ds, m, r[i][0]);
            _mm512_mask_storeu_ps(o + (4 * i + 1) * ds, m, _mm512_add_ps(r[i][0], r[i][1]));
            _mm512_mask_storeu_ps(o + (4 * i + 2) * ds, m, _mm512_sub_ps(r[i][0], r[i][1]));
            _mm512_mask_storeu_ps(o + (4 * i + 3) * ds, m,
                                  _mm512_sub_ps(_mm512_setzero_ps(), r[i][1]));
        }
    }
}

/* d_weight rows [r0, r1) of an (O, C, 3, 3) weight from dU (element (r, c) of the k-th
 * matrix at dU + k S + r C): G^T dU G, 16 filters at a time (their 9 taps transposed in
 * registers into 16 runs of 9). */
static inline void fnn_wgs_wgrad_out(const float* restrict dU, ptrdiff_t S, ptrdiff_t C,
                                     ptrdiff_t r0, ptrdiff_t r1, float* restrict dw)
{
    const __m512 h = _mm512_set1_ps(0.5f);
    for (ptrdiff_t r = r0; r < r1; ++r)
        for (ptrdiff_t c = 0; c < C; c += 16) {
            const __mmask16 m = fnn_wgs_lanes(C - c);
            __m512 u[16], s[3][4];
            for (int k = 0; k < 16; ++k)
                u[k] = _mm512_maskz_loadu_ps(m, dU + k * S + r * C + c);
            for (int j = 0; j < 4; ++j) {     /* G^T dU: the rows */
                const __m512 p = _mm512_mul_ps(h, _mm512_add_ps(u[4 + j], u[8 + j]));
                s[0][j] = _mm512_add_ps(u[j], p);
                s[1][j] = _mm512_mul_ps(h, _mm512_sub_ps(u[4 + j], u[8 + j]));
                s[2][j] = _mm512_add_ps(p, u[12 + j]);
            }
            __m512 t[16];
            for (int a = 0; a < 3; ++a) {     /* (G^T dU) G: the columns */
                const __m512 p = _mm512_mul_ps(h, _mm512_add_ps(s[a][1], s[a][2]));
                t[3 * a] = _mm512_add_ps(s[a][0], p);
                t[3 * a + 1] = _mm512_mul_ps(h, _mm512_sub_ps(s[a][1], s[a][2]));
                t[3 * a + 2] = _mm512_add_ps(p, s[a][3]);
            }
            for (int q = 9; q < 16; ++q)
                t[q] = _mm512_setzero_ps();
            fnn_transpose16_ps(t);            /* t[l]: filter c + l's 9 taps */
            float* f = dw + (r * C + c) * 9;
            const ptrdiff_t n = C - c < 16 ? C - c : 16;
            for (ptrdiff_t l = 0; l < n; ++l)
                _mm512_mask_storeu_ps(f + 9 * l, (__mmask16)0x1FF, t[l]);
        }
}
#else
#define FNN_HAVE_CIG 0
static inline void fnn_wgs_weight(const float* w, ptrdiff_t rs, ptrdiff_t cs, int flip,
                                  ptrdiff_t S, ptrdiff_t ld, ptrdiff_t Cn, ptrdiff_t r0,
                                  ptrdiff_t r1, float* U)
{
    (void)w; (void)rs; (void)cs; (void)flip; (void)S; (void)ld; (void)Cn; (void)r0; (void)r1;
    (void)U;
}
static inline void fnn_wgs_weight_t(const float* w, ptrdiff_t O, ptrdiff_t C, ptrdiff_t c0,
                                    ptrdiff_t c1, float* U)
{
    (void)w; (void)O; (void)C; (void)c0; (void)c1; (void)U;
}
static inline void fnn_wgs_input(const float* x, ptrdiff_t hw, const int32_t* ix, ptrdiff_t nt,
                                 ptrdiff_t np, float* V, ptrdiff_t vs)
{
    (void)x; (void)hw; (void)ix; (void)nt; (void)np; (void)V; (void)vs;
}
static inline void fnn_wgs_output(const float* M, ptrdiff_t ms, const int32_t* iy,
                                  const int32_t* io, ptrdiff_t nt, ptrdiff_t np, ptrdiff_t ps,
                                  float bias, float* y)
{
    (void)M; (void)ms; (void)iy; (void)io; (void)nt; (void)np; (void)ps; (void)bias; (void)y;
}
static inline ptrdiff_t fnn_sgz_buffer_floats(void) { return 0; }
static inline void fnn_wgs_tables(ptrdiff_t H, ptrdiff_t W, ptrdiff_t OH, ptrdiff_t OW,
                                  ptrdiff_t pt, ptrdiff_t pl, ptrdiff_t np, int32_t* ix,
                                  int32_t* iy, int32_t* io)
{
    (void)H; (void)W; (void)OH; (void)OW; (void)pt; (void)pl; (void)np; (void)ix; (void)iy;
    (void)io;
}
static inline void fnn_wgs_dout(const float* dy, ptrdiff_t ps, const int32_t* iy, ptrdiff_t nt,
                                ptrdiff_t np, float* D, ptrdiff_t ds)
{
    (void)dy; (void)ps; (void)iy; (void)nt; (void)np; (void)D; (void)ds;
}
static inline void fnn_wgs_wgrad_out(const float* dU, ptrdiff_t S, ptrdiff_t C, ptrdiff_t r0,
                                     ptrdiff_t r1, float* dw)
{
    (void)dU; (void)S; (void)C; (void)r0; (void)r1; (void)dw;
}
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
