/* Convolution rows (depthwise, im2col / col2im), written once for FNN_CV_T = float / double (function names
 * FNN_CV_FN(name) = name_f / name_d): included by fnn_conv.h once per type, never on its own.
 * No include guard on purpose. */

/* ---- depthwise conv rows (csrc/conv.pyx) over zero-padded planes, so no tap needs a
 * bounds test.  The output accumulates in a register across all taps (bias first, taps
 * in row-major order: the order of the tap-by-tap axpy it replaces, so the same bits).
 * xp: padded input, row stride ldx; w: kh*kw taps. */

static inline void FNN_CV_FN(fnn_dw_fwd_row)(const FNN_CV_T* restrict xp, ptrdiff_t ldx,
                                        const FNN_CV_T* restrict w, FNN_CV_T bias,
                                        FNN_CV_T* restrict y, ptrdiff_t OW, ptrdiff_t kh, ptrdiff_t kw,
                                        ptrdiff_t sw, ptrdiff_t dh, ptrdiff_t dw) {
    ptrdiff_t o, i, j;
    if (kh == 3 && kw == 3 && dh == 1 && dw == 1 && (sw == 1 || sw == 2)) {
        const FNN_CV_T* r0 = xp; const FNN_CV_T* r1 = xp + ldx; const FNN_CV_T* r2 = xp + 2 * ldx;
        const FNN_CV_T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5];
        const FNN_CV_T w6 = w[6], w7 = w[7], w8 = w[8];
        if (sw == 1) {
            for (o = 0; o < OW; ++o) {
                FNN_CV_T s = bias;
                s += w0 * r0[o]; s += w1 * r0[o + 1]; s += w2 * r0[o + 2];
                s += w3 * r1[o]; s += w4 * r1[o + 1]; s += w5 * r1[o + 2];
                s += w6 * r2[o]; s += w7 * r2[o + 1]; s += w8 * r2[o + 2];
                y[o] = s;
            }
        } else {
            for (o = 0; o < OW; ++o) {
                FNN_CV_T s = bias;
                s += w0 * r0[2 * o]; s += w1 * r0[2 * o + 1]; s += w2 * r0[2 * o + 2];
                s += w3 * r1[2 * o]; s += w4 * r1[2 * o + 1]; s += w5 * r1[2 * o + 2];
                s += w6 * r2[2 * o]; s += w7 * r2[2 * o + 1]; s += w8 * r2[2 * o + 2];
                y[o] = s;
            }
        }
        return;
    }
    for (o = 0; o < OW; ++o) y[o] = bias;
    for (i = 0; i < kh; ++i)
        for (j = 0; j < kw; ++j) {
            const FNN_CV_T wv = w[i * kw + j];
            const FNN_CV_T* src = xp + i * dh * ldx + j * dw;
            if (sw == 1) { for (o = 0; o < OW; ++o) y[o] += wv * src[o]; }
            else { for (o = 0; o < OW; ++o) y[o] += wv * src[o * sw]; }
        }
}
/* 3x3 stride-1 d_input row: d[w] (+)= sum_ij w[i, j] * gp[2 - i rows, w + 2 - j] over
 * the padded gy (row stride ldg), taps in output order (oh, then ow ascending) */
static inline void FNN_CV_FN(fnn_dw_dx_row)(const FNN_CV_T* restrict gp, ptrdiff_t ldg,
                                       const FNN_CV_T* restrict w, FNN_CV_T* restrict d, ptrdiff_t W,
                                       int accumulate) {
    const FNN_CV_T* restrict r0 = gp; const FNN_CV_T* restrict r1 = gp + ldg;
    const FNN_CV_T* restrict r2 = gp + 2 * ldg;
    const FNN_CV_T w0 = w[8], w1 = w[7], w2 = w[6], w3 = w[5], w4 = w[4], w5 = w[3];
    const FNN_CV_T w6 = w[2], w7 = w[1], w8 = w[0];
    ptrdiff_t o;
    if (!accumulate) for (o = 0; o < W; ++o) {
        FNN_CV_T s = w0 * r0[o]; s += w1 * r0[o + 1]; s += w2 * r0[o + 2];
        s += w3 * r1[o]; s += w4 * r1[o + 1]; s += w5 * r1[o + 2];
        s += w6 * r2[o]; s += w7 * r2[o + 1]; s += w8 * r2[o + 2];
        d[o] = s;
    } else for (o = 0; o < W; ++o) {
        FNN_CV_T s = d[o];
        s += w0 * r0[o]; s += w1 * r0[o + 1]; s += w2 * r0[o + 2];
        s += w3 * r1[o]; s += w4 * r1[o + 1]; s += w5 * r1[o + 2];
        s += w6 * r2[o]; s += w7 * r2[o + 1]; s += w8 * r2[o + 2];
        d[o] = s;
    }
}
/* 3x3 stride-1 d_weight (and d_bias) of one output plane: acc[t*8 + k] += lane k of
 * sum g[oh, ow] * xp[oh + tap t row, ow + tap t column] (t < 9; t = 9: sum g).  Lanes
 * of FNN_CV_T over blocks of whole rows (at most 256 elements, or one row), folded into the
 * double acc after each block: the order depends on the shapes only. */
static inline void FNN_CV_FN(fnn_dw_wgrad)(const FNN_CV_T* restrict g, const FNN_CV_T* restrict xp,
                                      ptrdiff_t ldx, ptrdiff_t OH, ptrdiff_t OW,
                                      double* restrict acc) {
    ptrdiff_t h0, h1, h, o, k, t;
    ptrdiff_t R = OW > 0 && 256 / OW > 1 ? 256 / OW : 1;
    for (h0 = 0; h0 < OH; h0 = h1) {
        FNN_CV_T a[10][8];
        h1 = h0 + R < OH ? h0 + R : OH;
        for (t = 0; t < 10; ++t) for (k = 0; k < 8; ++k) a[t][k] = 0;
        for (h = h0; h < h1; ++h) {
            const FNN_CV_T* restrict gr = g + h * OW;
            const FNN_CV_T* restrict r0 = xp + h * ldx;
            const FNN_CV_T* restrict r1 = r0 + ldx; const FNN_CV_T* restrict r2 = r1 + ldx;
            for (o = 0; o + 8 <= OW; o += 8)
                for (k = 0; k < 8; ++k) {
                    const FNN_CV_T v = gr[o + k]; const ptrdiff_t q = o + k;
                    a[0][k] += v * r0[q]; a[1][k] += v * r0[q + 1]; a[2][k] += v * r0[q + 2];
                    a[3][k] += v * r1[q]; a[4][k] += v * r1[q + 1]; a[5][k] += v * r1[q + 2];
                    a[6][k] += v * r2[q]; a[7][k] += v * r2[q + 1]; a[8][k] += v * r2[q + 2];
                    a[9][k] += v;
                }
            for (; o < OW; ++o) {
                const FNN_CV_T v = gr[o]; k = o & 7;
                a[0][k] += v * r0[o]; a[1][k] += v * r0[o + 1]; a[2][k] += v * r0[o + 2];
                a[3][k] += v * r1[o]; a[4][k] += v * r1[o + 1]; a[5][k] += v * r1[o + 2];
                a[6][k] += v * r2[o]; a[7][k] += v * r2[o + 1]; a[8][k] += v * r2[o + 2];
                a[9][k] += v;
            }
        }
        for (t = 0; t < 10; ++t) for (k = 0; k < 8; ++k) acc[t * 8 + k] += (double)a[t][k];
    }
}
/* dst (rows x cols) = src shifted down by top and right by left, zero outside src
 * (H x W, row stride W); top / left may be negative */
static inline void FNN_CV_FN(fnn_pad_plane)(FNN_CV_T* dst, ptrdiff_t rows, ptrdiff_t cols,
                                       const FNN_CV_T* src, ptrdiff_t H, ptrdiff_t W,
                                       ptrdiff_t top, ptrdiff_t left) {
    ptrdiff_t a, b, c0 = left > 0 ? left : 0, c1 = left + W < cols ? left + W : cols;
    if (c1 < c0) c1 = c0;
    for (a = 0; a < rows; ++a) {
        FNN_CV_T* d = dst + a * cols; ptrdiff_t h = a - top;
        if (h < 0 || h >= H) { for (b = 0; b < cols; ++b) d[b] = 0; continue; }
        const FNN_CV_T* s = src + h * W - left;
        for (b = 0; b < c0; ++b) d[b] = 0;
        for (b = c0; b < c1; ++b) d[b] = s[b];
        for (b = c1; b < cols; ++b) d[b] = 0;
    }
}

/* ---- im2col / col2im rows: dst[o] = src[o * s] for o in [o0, o1), zero elsewhere in
 * [0, n) (inline loops: a memcpy call per 50-element row costs more than the copy). */

static inline void FNN_CV_FN(fnn_im2col_row)(FNN_CV_T* d, const FNN_CV_T* src, ptrdiff_t n, ptrdiff_t o0,
                                        ptrdiff_t o1, ptrdiff_t s) {
    ptrdiff_t o;
    for (o = 0; o < o0; ++o) d[o] = 0;
    if (s == 1) { for (o = o0; o < o1; ++o) d[o] = src[o]; }
    else if (s == 2) { for (o = o0; o < o1; ++o) d[o] = src[o * 2]; }  /* vectorised */
    else { for (o = o0; o < o1; ++o) d[o] = src[o * s]; }
    for (o = o1; o < n; ++o) d[o] = 0;
}
static inline void FNN_CV_FN(fnn_col2im_row)(FNN_CV_T* dst, const FNN_CV_T* d, ptrdiff_t o0, ptrdiff_t o1,
                                        ptrdiff_t s) {
    ptrdiff_t o;
    if (s == 1) { for (o = o0; o < o1; ++o) dst[o] += d[o]; }
    else { for (o = o0; o < o1; ++o) dst[o * s] += d[o]; }
}
