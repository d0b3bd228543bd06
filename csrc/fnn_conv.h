/* Reductions for the conv / pool / batchnorm families (csrc/{conv,pool,batchnorm}.pyx).
 *
 * Without -ffast-math a single accumulator is a serial chain the compiler may not
 * reorder, so each reduction keeps 8 independent double lanes (the compiler maps them
 * onto vector registers) and adds them in a fixed tree.  The order depends only on n,
 * so results are the same at any thread count. */
#ifndef FNN_CONV_H
#define FNN_CONV_H
#include <stddef.h>

#define FNN_CV_TREE(a) ((((a)[0] + (a)[1]) + ((a)[2] + (a)[3])) + (((a)[4] + (a)[5]) + ((a)[6] + (a)[7])))

#define FNN_CV_DEFINE(T, SFX)                                                            \
/* sum(x), n contiguous */                                                               \
static inline double fnn_cv_sum_##SFX(const T* x, ptrdiff_t n) {                        \
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                              \
    ptrdiff_t j = 0;                                                                     \
    for (; j + 8 <= n; j += 8)                                                           \
        for (int k = 0; k < 8; ++k) a[k] += (double)x[j + k];                            \
    for (; j < n; ++j) a[j & 7] += (double)x[j];                                         \
    return FNN_CV_TREE(a);                                                               \
}                                                                                        \
/* *s = sum(x - c), *q = sum((x - c)^2): one pass, shifted by c for accuracy */         \
static inline void fnn_cv_moments_##SFX(const T* x, ptrdiff_t n, double c,              \
                                        double* s, double* q) {                          \
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};             \
    ptrdiff_t j = 0;                                                                     \
    for (; j + 8 <= n; j += 8)                                                           \
        for (int k = 0; k < 8; ++k) {                                                    \
            double d = (double)x[j + k] - c; a[k] += d; b[k] += d * d;                   \
        }                                                                                \
    for (; j < n; ++j) { double d = (double)x[j] - c; a[j & 7] += d; b[j & 7] += d * d; } \
    *s = FNN_CV_TREE(a); *q = FNN_CV_TREE(b);                                            \
}                                                                                        \
/* *s = sum(g), *p = sum(g * (x - c)) */                                                 \
static inline void fnn_cv_gsums_##SFX(const T* g, const T* x, ptrdiff_t n, double c,    \
                                      double* s, double* p) {                            \
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};             \
    ptrdiff_t j = 0;                                                                     \
    for (; j + 8 <= n; j += 8)                                                           \
        for (int k = 0; k < 8; ++k) {                                                    \
            double gg = (double)g[j + k]; a[k] += gg; b[k] += gg * ((double)x[j + k] - c); \
        }                                                                                \
    for (; j < n; ++j) {                                                                 \
        double gg = (double)g[j]; a[j & 7] += gg; b[j & 7] += gg * ((double)x[j] - c);   \
    }                                                                                    \
    *s = FNN_CV_TREE(a); *p = FNN_CV_TREE(b);                                            \
}                                                                                        \
/* sum(a[j] * b[j * sb]), j < n */                                                       \
static inline double fnn_cv_dot_##SFX(const T* x, const T* y, ptrdiff_t n, ptrdiff_t sy) { \
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                              \
    ptrdiff_t j = 0;                                                                     \
    if (sy == 1) {                                                                       \
        for (; j + 8 <= n; j += 8)                                                       \
            for (int k = 0; k < 8; ++k) a[k] += (double)x[j + k] * (double)y[j + k];     \
    } else {                                                                             \
        for (; j + 8 <= n; j += 8)                                                       \
            for (int k = 0; k < 8; ++k) a[k] += (double)x[j + k] * (double)y[(j + k) * sy]; \
    }                                                                                    \
    for (; j < n; ++j) a[j & 7] += (double)x[j] * (double)y[j * sy];                     \
    return FNN_CV_TREE(a);                                                               \
}

FNN_CV_DEFINE(float, f)
FNN_CV_DEFINE(double, d)

/* ---- pooling rows.  Branch-free selects (if-converted, vectorised across the output
 * row); the update rule is torch's: a tap wins when it is larger or NaN, and the first
 * tap inside the input always wins (k < 0). */
#include <stdint.h>
#define FNN_POOL_DEFINE(T, SFX)                                                          \
/* 2x2 stride-2 windows over input rows r0, r1 */                                        \
static inline void fnn_max2x2_row_##SFX(const T* r0, const T* r1, T* y, int32_t* t,     \
                                        ptrdiff_t OW) {                                  \
    for (ptrdiff_t o = 0; o < OW; ++o) {                                                 \
        T a = r0[2 * o], b = r0[2 * o + 1], c = r1[2 * o], d = r1[2 * o + 1];            \
        T m = a; int32_t k = 0; int u;                                                   \
        u = (b > m) | (b != b); m = u ? b : m; k = u ? 1 : k;                            \
        u = (c > m) | (c != c); m = u ? c : m; k = u ? 2 : k;                            \
        u = (d > m) | (d != d); m = u ? d : m; k = u ? 3 : k;                            \
        y[o] = m; t[o] = k;                                                              \
    }                                                                                    \
}                                                                                        \
/* backward of the above: every input element of the two rows is written once */         \
static inline void fnn_max2x2_bwd_row_##SFX(const T* g, const int32_t* t, T* d0, T* d1,  \
                                            ptrdiff_t OW) {                              \
    for (ptrdiff_t o = 0; o < OW; ++o) {                                                 \
        T v = g[o]; int32_t k = t[o];                                                    \
        d0[2 * o] = k == 0 ? v : (T)0; d0[2 * o + 1] = k == 1 ? v : (T)0;                \
        d1[2 * o] = k == 2 ? v : (T)0; d1[2 * o + 1] = k == 3 ? v : (T)0;                \
    }                                                                                    \
}                                                                                        \
/* one tap for outputs [o0, o1): v = src[o * s] */                                       \
static inline void fnn_max_tap_##SFX(const T* src, ptrdiff_t s, T* m, int32_t* k,       \
                                     int32_t tap, ptrdiff_t o0, ptrdiff_t o1) {          \
    if (s == 1) {                                                                        \
        for (ptrdiff_t o = o0; o < o1; ++o) {                                            \
            T v = src[o]; int u = (v > m[o]) | (v != v) | (k[o] < 0);                    \
            m[o] = u ? v : m[o]; k[o] = u ? tap : k[o];                                  \
        }                                                                                \
    } else {                                                                             \
        for (ptrdiff_t o = o0; o < o1; ++o) {                                            \
            T v = src[o * s]; int u = (v > m[o]) | (v != v) | (k[o] < 0);                \
            m[o] = u ? v : m[o]; k[o] = u ? tap : k[o];                                  \
        }                                                                                \
    }                                                                                    \
}

FNN_POOL_DEFINE(float, f)
FNN_POOL_DEFINE(double, d)

/* ---- average pooling as two separable passes (csrc/pool.pyx).  Vertical: v = the sum
 * of the window's input rows (contiguous, one pass).  Horizontal: y[o] = sum_j
 * v[o*s + j] / div[o] over a zero-padded v, so no tap needs a bounds test; the common
 * (kW, sW) get constant-stride loops the compiler vectorises.  The division is done in
 * T: div is a small integer, and a double division rounded to float is the same. */
#define FNN_AVG_DEFINE(T, SFX)                                                           \
static inline void fnn_avg_vsum_##SFX(T* v, const T* x, ptrdiff_t W, ptrdiff_t rows,    \
                                      ptrdiff_t rs) {                                    \
    ptrdiff_t w, r;                                                                      \
    if (rows == 3) {                                                                     \
        const T* a = x; const T* b = x + rs; const T* c = x + 2 * rs;                    \
        for (w = 0; w < W; ++w) v[w] = (a[w] + b[w]) + c[w];                             \
        return;                                                                          \
    }                                                                                    \
    if (rows == 2) {                                                                     \
        const T* a = x; const T* b = x + rs;                                             \
        for (w = 0; w < W; ++w) v[w] = a[w] + b[w];                                      \
        return;                                                                          \
    }                                                                                    \
    for (w = 0; w < W; ++w) v[w] = rows > 0 ? x[w] : (T)0;                               \
    for (r = 1; r < rows; ++r) {                                                         \
        const T* a = x + r * rs;                                                         \
        for (w = 0; w < W; ++w) v[w] += a[w];                                            \
    }                                                                                    \
}                                                                                        \
static inline void fnn_avg_hrow_##SFX(const T* v, T* y, const T* dv, ptrdiff_t OW,      \
                                      ptrdiff_t kw, ptrdiff_t sw) {                      \
    ptrdiff_t o, j;                                                                      \
    if (kw == 3 && sw == 2) {                                                            \
        for (o = 0; o < OW; ++o) {                                                       \
            T s = (v[2 * o] + v[2 * o + 1]) + v[2 * o + 2], d = dv[o];                   \
            y[o] = d != 0 ? s / d : (T)0;                                                \
        }                                                                                \
    } else if (kw == 2 && sw == 2) {                                                     \
        for (o = 0; o < OW; ++o) {                                                       \
            T s = v[2 * o] + v[2 * o + 1], d = dv[o];                                    \
            y[o] = d != 0 ? s / d : (T)0;                                                \
        }                                                                                \
    } else if (kw == 3 && sw == 1) {                                                     \
        for (o = 0; o < OW; ++o) {                                                       \
            T s = (v[o] + v[o + 1]) + v[o + 2], d = dv[o];                               \
            y[o] = d != 0 ? s / d : (T)0;                                                \
        }                                                                                \
    } else {                                                                             \
        for (o = 0; o < OW; ++o) {                                                       \
            const T* p = v + o * sw;                                                     \
            T s = p[0], d = dv[o];                                                       \
            for (j = 1; j < kw; ++j) s += p[j];                                          \
            y[o] = d != 0 ? s / d : (T)0;                                                \
        }                                                                                \
    }                                                                                    \
}                                                                                        \
/* backward, horizontal: hb[u] = sum of g[o] over the windows o covering padded column  \
 * u, u in [0, L), in increasing o; g has >= kw zeros before it and after g[OW - 1] */  \
static inline void fnn_avg_hscatter_##SFX(const T* g, T* hb, ptrdiff_t L, ptrdiff_t OW,  \
                                          ptrdiff_t kw, ptrdiff_t sw) {                  \
    ptrdiff_t m, o, j;                                                                   \
    if (kw == 3 && sw == 2) {                                                            \
        for (m = 0; 2 * m < L; ++m) { hb[2 * m] = g[m - 1] + g[m]; hb[2 * m + 1] = g[m]; } \
    } else if (kw == 2 && sw == 2) {                                                     \
        for (m = 0; 2 * m < L; ++m) { hb[2 * m] = g[m]; hb[2 * m + 1] = g[m]; }          \
    } else if (kw == 3 && sw == 1) {                                                     \
        for (m = 0; m < L; ++m) hb[m] = (g[m - 2] + g[m - 1]) + g[m];                    \
    } else if (sw == 1) {                                                                \
        for (m = 0; m < L; ++m) {                                                        \
            T acc = g[m - kw + 1];                                                       \
            for (j = 1; j < kw; ++j) acc += g[m - kw + 1 + j];                           \
            hb[m] = acc;                                                                 \
        }                                                                                \
    } else {                                                                             \
        for (m = 0; m < L; ++m) hb[m] = 0;                                               \
        for (o = 0; o < OW; ++o)                                                         \
            for (j = 0; j < kw; ++j) hb[o * sw + j] += g[o];                             \
    }                                                                                    \
}

FNN_AVG_DEFINE(float, f)
FNN_AVG_DEFINE(double, d)
/* ---- depthwise conv rows (csrc/conv.pyx) over zero-padded planes, so no tap needs a
 * bounds test.  The output accumulates in a register across all taps (bias first, taps
 * in row-major order: the order of the tap-by-tap axpy it replaces, so the same bits).
 * xp: padded input, row stride ldx; w: kh*kw taps. */
#define FNN_DW_DEFINE(T, SFX)                                                            \
static inline void fnn_dw_fwd_row_##SFX(const T* restrict xp, ptrdiff_t ldx,            \
                                        const T* restrict w, T bias,                     \
                                        T* restrict y, ptrdiff_t OW, ptrdiff_t kh, ptrdiff_t kw,  \
                                        ptrdiff_t sw, ptrdiff_t dh, ptrdiff_t dw) {      \
    ptrdiff_t o, i, j;                                                                   \
    if (kh == 3 && kw == 3 && dh == 1 && dw == 1 && (sw == 1 || sw == 2)) {              \
        const T* r0 = xp; const T* r1 = xp + ldx; const T* r2 = xp + 2 * ldx;            \
        const T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5];        \
        const T w6 = w[6], w7 = w[7], w8 = w[8];                                         \
        if (sw == 1) {                                                                   \
            for (o = 0; o < OW; ++o) {                                                   \
                T s = bias;                                                              \
                s += w0 * r0[o]; s += w1 * r0[o + 1]; s += w2 * r0[o + 2];               \
                s += w3 * r1[o]; s += w4 * r1[o + 1]; s += w5 * r1[o + 2];               \
                s += w6 * r2[o]; s += w7 * r2[o + 1]; s += w8 * r2[o + 2];               \
                y[o] = s;                                                                \
            }                                                                            \
        } else {                                                                         \
            for (o = 0; o < OW; ++o) {                                                   \
                T s = bias;                                                              \
                s += w0 * r0[2 * o]; s += w1 * r0[2 * o + 1]; s += w2 * r0[2 * o + 2];   \
                s += w3 * r1[2 * o]; s += w4 * r1[2 * o + 1]; s += w5 * r1[2 * o + 2];   \
                s += w6 * r2[2 * o]; s += w7 * r2[2 * o + 1]; s += w8 * r2[2 * o + 2];   \
                y[o] = s;                                                                \
            }                                                                            \
        }                                                                                \
        return;                                                                          \
    }                                                                                    \
    for (o = 0; o < OW; ++o) y[o] = bias;                                                \
    for (i = 0; i < kh; ++i)                                                             \
        for (j = 0; j < kw; ++j) {                                                       \
            const T wv = w[i * kw + j];                                                  \
            const T* src = xp + i * dh * ldx + j * dw;                                   \
            if (sw == 1) { for (o = 0; o < OW; ++o) y[o] += wv * src[o]; }               \
            else { for (o = 0; o < OW; ++o) y[o] += wv * src[o * sw]; }                  \
        }                                                                                \
}                                                                                        \
/* 3x3 stride-1 d_input row: d[w] (+)= sum_ij w[i, j] * gp[2 - i rows, w + 2 - j] over  \
 * the padded gy (row stride ldg), taps in output order (oh, then ow ascending) */       \
static inline void fnn_dw_dx_row_##SFX(const T* restrict gp, ptrdiff_t ldg,             \
                                       const T* restrict w, T* restrict d, ptrdiff_t W,  \
                                       int accumulate) {                                 \
    const T* restrict r0 = gp; const T* restrict r1 = gp + ldg;                          \
    const T* restrict r2 = gp + 2 * ldg;                                                 \
    const T w0 = w[8], w1 = w[7], w2 = w[6], w3 = w[5], w4 = w[4], w5 = w[3];            \
    const T w6 = w[2], w7 = w[1], w8 = w[0];                                             \
    ptrdiff_t o;                                                                         \
    if (!accumulate) for (o = 0; o < W; ++o) {                                           \
        T s = w0 * r0[o]; s += w1 * r0[o + 1]; s += w2 * r0[o + 2];                      \
        s += w3 * r1[o]; s += w4 * r1[o + 1]; s += w5 * r1[o + 2];                       \
        s += w6 * r2[o]; s += w7 * r2[o + 1]; s += w8 * r2[o + 2];                       \
        d[o] = s;                                                                        \
    } else for (o = 0; o < W; ++o) {                                                     \
        T s = d[o];                                                                      \
        s += w0 * r0[o]; s += w1 * r0[o + 1]; s += w2 * r0[o + 2];                       \
        s += w3 * r1[o]; s += w4 * r1[o + 1]; s += w5 * r1[o + 2];                       \
        s += w6 * r2[o]; s += w7 * r2[o + 1]; s += w8 * r2[o + 2];                       \
        d[o] = s;                                                                        \
    }                                                                                    \
}                                                                                        \
/* 3x3 stride-1 d_weight (and d_bias) of one output plane: acc[t*8 + k] += lane k of    \
 * sum g[oh, ow] * xp[oh + tap t row, ow + tap t column] (t < 9; t = 9: sum g).  Lanes   \
 * of T over blocks of whole rows (at most 256 elements, or one row), folded into the \
 * double acc after each block: the order depends on the shapes only. */                \
static inline void fnn_dw_wgrad_##SFX(const T* restrict g, const T* restrict xp,        \
                                      ptrdiff_t ldx, ptrdiff_t OH, ptrdiff_t OW,         \
                                      double* restrict acc) {                            \
    ptrdiff_t h0, h1, h, o, k, t;                                                        \
    ptrdiff_t R = OW > 0 && 256 / OW > 1 ? 256 / OW : 1;                                 \
    for (h0 = 0; h0 < OH; h0 = h1) {                                                     \
        T a[10][8];                                                                      \
        h1 = h0 + R < OH ? h0 + R : OH;                                                  \
        for (t = 0; t < 10; ++t) for (k = 0; k < 8; ++k) a[t][k] = 0;                    \
        for (h = h0; h < h1; ++h) {                                                      \
            const T* restrict gr = g + h * OW;                                           \
            const T* restrict r0 = xp + h * ldx;                                         \
            const T* restrict r1 = r0 + ldx; const T* restrict r2 = r1 + ldx;            \
            for (o = 0; o + 8 <= OW; o += 8)                                             \
                for (k = 0; k < 8; ++k) {                                                \
                    const T v = gr[o + k]; const ptrdiff_t q = o + k;                    \
                    a[0][k] += v * r0[q]; a[1][k] += v * r0[q + 1]; a[2][k] += v * r0[q + 2]; \
                    a[3][k] += v * r1[q]; a[4][k] += v * r1[q + 1]; a[5][k] += v * r1[q + 2]; \
                    a[6][k] += v * r2[q]; a[7][k] += v * r2[q + 1]; a[8][k] += v * r2[q + 2]; \
                    a[9][k] += v;                                                        \
                }                                                                        \
            for (; o < OW; ++o) {                                                        \
                const T v = gr[o]; k = o & 7;                                            \
                a[0][k] += v * r0[o]; a[1][k] += v * r0[o + 1]; a[2][k] += v * r0[o + 2]; \
                a[3][k] += v * r1[o]; a[4][k] += v * r1[o + 1]; a[5][k] += v * r1[o + 2]; \
                a[6][k] += v * r2[o]; a[7][k] += v * r2[o + 1]; a[8][k] += v * r2[o + 2]; \
                a[9][k] += v;                                                            \
            }                                                                            \
        }                                                                                \
        for (t = 0; t < 10; ++t) for (k = 0; k < 8; ++k) acc[t * 8 + k] += (double)a[t][k]; \
    }                                                                                    \
}                                                                                        \
/* dst (rows x cols) = src shifted down by top and right by left, zero outside src    \
 * (H x W, row stride W); top / left may be negative */                                           \
static inline void fnn_pad_plane_##SFX(T* dst, ptrdiff_t rows, ptrdiff_t cols,          \
                                       const T* src, ptrdiff_t H, ptrdiff_t W,           \
                                       ptrdiff_t top, ptrdiff_t left) {                  \
    ptrdiff_t a, b, c0 = left > 0 ? left : 0, c1 = left + W < cols ? left + W : cols;    \
    if (c1 < c0) c1 = c0;                                                                \
    for (a = 0; a < rows; ++a) {                                                         \
        T* d = dst + a * cols; ptrdiff_t h = a - top;                                    \
        if (h < 0 || h >= H) { for (b = 0; b < cols; ++b) d[b] = 0; continue; }          \
        const T* s = src + h * W - left;                                                 \
        for (b = 0; b < c0; ++b) d[b] = 0;                                               \
        for (b = c0; b < c1; ++b) d[b] = s[b];                                           \
        for (b = c1; b < cols; ++b) d[b] = 0;                                            \
    }                                                                                    \
}

FNN_DW_DEFINE(float, f)
FNN_DW_DEFINE(double, d)
/* ---- im2col / col2im rows: dst[o] = src[o * s] for o in [o0, o1), zero elsewhere in
 * [0, n) (inline loops: a memcpy call per 50-element row costs more than the copy). */
#define FNN_COL_DEFINE(T, SFX)                                                           \
static inline void fnn_im2col_row_##SFX(T* d, const T* src, ptrdiff_t n, ptrdiff_t o0,  \
                                        ptrdiff_t o1, ptrdiff_t s) {                     \
    ptrdiff_t o;                                                                         \
    for (o = 0; o < o0; ++o) d[o] = 0;                                                   \
    if (s == 1) { for (o = o0; o < o1; ++o) d[o] = src[o]; }                             \
    else { for (o = o0; o < o1; ++o) d[o] = src[o * s]; }                                \
    for (o = o1; o < n; ++o) d[o] = 0;                                                   \
}                                                                                        \
static inline void fnn_col2im_row_##SFX(T* dst, const T* d, ptrdiff_t o0, ptrdiff_t o1,  \
                                        ptrdiff_t s) {                                   \
    ptrdiff_t o;                                                                         \
    if (s == 1) { for (o = o0; o < o1; ++o) dst[o] += d[o]; }                            \
    else { for (o = o0; o < o1; ++o) dst[o * s] += d[o]; }                               \
}

FNN_COL_DEFINE(float, f)
FNN_COL_DEFINE(double, d)

/* ---- phase planes for the direct convolutions (float32): xp[c, u, v] =
 * x[c, sh*(u - top) + a, sw*(v - left) + b], zero outside x; PR rows of width We per
 * channel.  0 <= a < sh, 0 <= b < sw, top, left >= 0; sh = sw = 1, a = b = 0 is a plain
 * zero-padded copy. */
static inline void fnn_cvd_phase_tile(const float* restrict x, float* restrict xp, ptrdiff_t C,
                                      ptrdiff_t H, ptrdiff_t W, ptrdiff_t PR, ptrdiff_t We,
                                      ptrdiff_t top, ptrdiff_t left, ptrdiff_t sh,
                                      ptrdiff_t sw, ptrdiff_t a, ptrdiff_t b) {
    /* columns v in [v0, v1) land inside x: 0 <= sw*(v - left) + b < W */
    ptrdiff_t v0 = left < We ? left : We, v1, u, v, c;
    v1 = W - 1 - b < 0 ? 0 : (W - 1 - b) / sw + 1 + left;
    if (v1 > We) v1 = We;
    if (v1 < v0) v1 = v0;
    for (c = 0; c < C; ++c)
        for (u = 0; u < PR; ++u) {
            float* d = xp + (c * PR + u) * We;
            ptrdiff_t h = sh * (u - top) + a;
            if (u < top || h >= H) { for (v = 0; v < We; ++v) d[v] = 0.f; continue; }
            const float* sr = x + (c * H + h) * W + b - sw * left;
            for (v = 0; v < v0; ++v) d[v] = 0.f;
            if (sw == 1) { for (v = v0; v < v1; ++v) d[v] = sr[v]; }
            else { for (v = v0; v < v1; ++v) d[v] = sr[sw * v]; }
            for (v = v1; v < We; ++v) d[v] = 0.f;
        }
}

/* ---- direct 3x3 stride-1 convolution, float32, AVX2 + FMA (csrc/conv.pyx).
 * An implicit GEMM with no packing of the input: the image is copied once, tile by tile
 * of output rows, into zero-padded planes of width We = OW + 2, and output position
 * p = oh*We + ow then reads input p + i*We + j for tap (i, j) -- a contiguous vector
 * over p.  A 4 x 24 register tile (4 output channels x 24 positions, 12 accumulators)
 * runs over the taps of 16 input channels at a time (their rows stay in L1) with the
 * weights pre-packed as Ap[o/4][c][tap][4]; results land in ct (O x positions, padded
 * width) and are copied out.  Positions past OW in a row are computed and dropped.
 * Sums: bias, then channel by channel, taps in row-major order: fixed by the shapes. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FNN_HAVE_CV3 1
#define FNN_CV3_NR 16
static inline void fnn_cv3_tile(const float* restrict A, const float* restrict B,
                                ptrdiff_t plane, ptrdiff_t We, ptrdiff_t nc,
                                float* restrict C, ptrdiff_t ldc) {
    __m256 c00 = _mm256_loadu_ps(C), c01 = _mm256_loadu_ps(C + 8);
    __m256 c10 = _mm256_loadu_ps(C + ldc), c11 = _mm256_loadu_ps(C + ldc + 8);
    __m256 c20 = _mm256_loadu_ps(C + 2 * ldc), c21 = _mm256_loadu_ps(C + 2 * ldc + 8);
    __m256 c30 = _mm256_loadu_ps(C + 3 * ldc), c31 = _mm256_loadu_ps(C + 3 * ldc + 8);
#define FNN_CV3_TAP(ptr, t)                                                              \
    do {                                                                                 \
        const float* bp = (ptr);                                                         \
        __m256 v0 = _mm256_loadu_ps(bp), v1 = _mm256_loadu_ps(bp + 8), a;                \
        a = _mm256_broadcast_ss(A + 4 * (t));                                            \
        c00 = _mm256_fmadd_ps(a, v0, c00); c01 = _mm256_fmadd_ps(a, v1, c01);            \
        a = _mm256_broadcast_ss(A + 4 * (t) + 1);                                        \
        c10 = _mm256_fmadd_ps(a, v0, c10); c11 = _mm256_fmadd_ps(a, v1, c11);            \
        a = _mm256_broadcast_ss(A + 4 * (t) + 2);                                        \
        c20 = _mm256_fmadd_ps(a, v0, c20); c21 = _mm256_fmadd_ps(a, v1, c21);            \
        a = _mm256_broadcast_ss(A + 4 * (t) + 3);                                        \
        c30 = _mm256_fmadd_ps(a, v0, c30); c31 = _mm256_fmadd_ps(a, v1, c31);            \
    } while (0)
    for (ptrdiff_t c = 0; c < nc; ++c) {
        const float* r0 = B + c * plane;
        const float* r1 = r0 + We;
        const float* r2 = r1 + We;
        FNN_CV3_TAP(r0, 0); FNN_CV3_TAP(r0 + 1, 1); FNN_CV3_TAP(r0 + 2, 2);
        FNN_CV3_TAP(r1, 3); FNN_CV3_TAP(r1 + 1, 4); FNN_CV3_TAP(r1 + 2, 5);
        FNN_CV3_TAP(r2, 6); FNN_CV3_TAP(r2 + 1, 7); FNN_CV3_TAP(r2 + 2, 8);
        A += 36;
    }
#undef FNN_CV3_TAP
    _mm256_storeu_ps(C, c00); _mm256_storeu_ps(C + 8, c01);
    _mm256_storeu_ps(C + ldc, c10); _mm256_storeu_ps(C + ldc + 8, c11);
    _mm256_storeu_ps(C + 2 * ldc, c20); _mm256_storeu_ps(C + 2 * ldc + 8, c21);
    _mm256_storeu_ps(C + 3 * ldc, c30); _mm256_storeu_ps(C + 3 * ldc + 8, c31);
}

/* the same over 6 output channels: 12 accumulators hide the FMA latency better */
static inline void fnn_cv3_tile6(const float* restrict A, const float* restrict B,
                                 ptrdiff_t plane, ptrdiff_t We, ptrdiff_t nc,
                                 float* restrict C, ptrdiff_t ldc) {
    __m256 c00 = _mm256_loadu_ps(C), c01 = _mm256_loadu_ps(C + 8);
    __m256 c10 = _mm256_loadu_ps(C + ldc), c11 = _mm256_loadu_ps(C + ldc + 8);
    __m256 c20 = _mm256_loadu_ps(C + 2 * ldc), c21 = _mm256_loadu_ps(C + 2 * ldc + 8);
    __m256 c30 = _mm256_loadu_ps(C + 3 * ldc), c31 = _mm256_loadu_ps(C + 3 * ldc + 8);
    __m256 c40 = _mm256_loadu_ps(C + 4 * ldc), c41 = _mm256_loadu_ps(C + 4 * ldc + 8);
    __m256 c50 = _mm256_loadu_ps(C + 5 * ldc), c51 = _mm256_loadu_ps(C + 5 * ldc + 8);
#define FNN_CV3_TAP6(ptr, t)                                                             \
    do {                                                                                 \
        const float* bp = (ptr);                                                         \
        __m256 v0 = _mm256_loadu_ps(bp), v1 = _mm256_loadu_ps(bp + 8), a;                \
        a = _mm256_broadcast_ss(A + 6 * (t));                                            \
        c00 = _mm256_fmadd_ps(a, v0, c00); c01 = _mm256_fmadd_ps(a, v1, c01);            \
        a = _mm256_broadcast_ss(A + 6 * (t) + 1);                                        \
        c10 = _mm256_fmadd_ps(a, v0, c10); c11 = _mm256_fmadd_ps(a, v1, c11);            \
        a = _mm256_broadcast_ss(A + 6 * (t) + 2);                                        \
        c20 = _mm256_fmadd_ps(a, v0, c20); c21 = _mm256_fmadd_ps(a, v1, c21);            \
        a = _mm256_broadcast_ss(A + 6 * (t) + 3);                                        \
        c30 = _mm256_fmadd_ps(a, v0, c30); c31 = _mm256_fmadd_ps(a, v1, c31);            \
        a = _mm256_broadcast_ss(A + 6 * (t) + 4);                                        \
        c40 = _mm256_fmadd_ps(a, v0, c40); c41 = _mm256_fmadd_ps(a, v1, c41);            \
        a = _mm256_broadcast_ss(A + 6 * (t) + 5);                                        \
        c50 = _mm256_fmadd_ps(a, v0, c50); c51 = _mm256_fmadd_ps(a, v1, c51);            \
    } while (0)
    for (ptrdiff_t c = 0; c < nc; ++c) {
        const float* r0 = B + c * plane;
        const float* r1 = r0 + We;
        const float* r2 = r1 + We;
        FNN_CV3_TAP6(r0, 0); FNN_CV3_TAP6(r0 + 1, 1); FNN_CV3_TAP6(r0 + 2, 2);
        FNN_CV3_TAP6(r1, 3); FNN_CV3_TAP6(r1 + 1, 4); FNN_CV3_TAP6(r1 + 2, 5);
        FNN_CV3_TAP6(r2, 6); FNN_CV3_TAP6(r2 + 1, 7); FNN_CV3_TAP6(r2 + 2, 8);
        A += 54;
    }
#undef FNN_CV3_TAP6
    _mm256_storeu_ps(C, c00); _mm256_storeu_ps(C + 8, c01);
    _mm256_storeu_ps(C + ldc, c10); _mm256_storeu_ps(C + ldc + 8, c11);
    _mm256_storeu_ps(C + 2 * ldc, c20); _mm256_storeu_ps(C + 2 * ldc + 8, c21);
    _mm256_storeu_ps(C + 3 * ldc, c30); _mm256_storeu_ps(C + 3 * ldc + 8, c31);
    _mm256_storeu_ps(C + 4 * ldc, c40); _mm256_storeu_ps(C + 4 * ldc + 8, c41);
    _mm256_storeu_ps(C + 5 * ldc, c50); _mm256_storeu_ps(C + 5 * ldc + 8, c51);
}

/* Output channels [0, o6) go in blocks of 6, the rest (a multiple of 4) in blocks of 4:
 * o6 = the largest multiple of 12 <= O (6a + 4b = O with a even, O % 4 == 0). */
static inline ptrdiff_t fnn_cv3_o6(ptrdiff_t O) { return O / 12 * 12; }

/* Rows per tile and the padded rows a tile plane holds (the last 24-position block of a
 * tile reads up to 24 + 2 positions past its last row). */
static inline ptrdiff_t fnn_cv3_rows(ptrdiff_t C, ptrdiff_t OW, ptrdiff_t OH) {
    ptrdiff_t We = OW + 2, r = (1 << 15) / (C * We);
    if (r < 4) r = 4;
    return r < OH ? r : OH;
}
static inline ptrdiff_t fnn_cv3_plane_rows(ptrdiff_t R, ptrdiff_t OW) {
    return R + 2 + (26 + OW + 1) / (OW + 2) + 1;
}

/* xp[c, a, b] = x[c, h0 + a, b - pl] for a < PR, b < We, zero outside x */
static inline void fnn_cv3_pad_tile(const float* restrict x, float* restrict xp, ptrdiff_t C,
                                    ptrdiff_t H, ptrdiff_t W, ptrdiff_t We, ptrdiff_t PR,
                                    ptrdiff_t h0, ptrdiff_t pl) {
    ptrdiff_t c0 = pl > 0 ? pl : 0, c1 = pl + W < We ? pl + W : We;
    if (c1 < c0) c1 = c0;
    for (ptrdiff_t c = 0; c < C; ++c)
        for (ptrdiff_t a = 0; a < PR; ++a) {
            float* d = xp + (c * PR + a) * We;
            ptrdiff_t h = h0 + a, b;
            if (h < 0 || h >= H) { for (b = 0; b < We; ++b) d[b] = 0.f; continue; }
            const float* sr = x + (c * H + h) * W - pl;
            for (b = 0; b < c0; ++b) d[b] = 0.f;
            for (b = c0; b < c1; ++b) d[b] = sr[b];
            for (b = c1; b < We; ++b) d[b] = 0.f;
        }
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
 * (R * We + 24) floats of scratch. */
static inline void fnn_cv3_image(const float* restrict x, const float* restrict Ap,
                                 const float* bias, float* restrict y, ptrdiff_t C,
                                 ptrdiff_t H, ptrdiff_t W, ptrdiff_t O, ptrdiff_t OH,
                                 ptrdiff_t OW, ptrdiff_t pt, ptrdiff_t pl,
                                 float* restrict xp, float* restrict ct) {
    ptrdiff_t We = OW + 2, R = fnn_cv3_rows(C, OW, OH), PR = fnn_cv3_plane_rows(R, OW);
    ptrdiff_t plane = PR * We, ldc = R * We + 24;
    for (ptrdiff_t r0 = 0; r0 < OH; r0 += R) {
        ptrdiff_t R1 = r0 + R < OH ? R : OH - r0, np = R1 * We;
        fnn_cv3_pad_tile(x, xp, C, H, W, We, PR, r0 - pt, pl);
        for (ptrdiff_t o = 0; o < O; ++o) {
            float bo = bias ? bias[o] : 0.f;
            for (ptrdiff_t q = 0; q < ldc; ++q) ct[o * ldc + q] = bo;
        }
        for (ptrdiff_t pb = 0; pb < np; pb += FNN_CV3_NR)
            for (ptrdiff_t cb = 0; cb < C; cb += 16) {
                ptrdiff_t nc = C - cb < 16 ? C - cb : 16;
                ptrdiff_t ob = 0, o6 = fnn_cv3_o6(O);
                for (; ob < o6; ob += 6)
                    fnn_cv3_tile6(Ap + (ob * C + cb * 6) * 9, xp + cb * plane + pb, plane, We,
                                  nc, ct + ob * ldc + pb, ldc);
                for (; ob < O; ob += 4)
                    fnn_cv3_tile(Ap + (ob * C + cb * 4) * 9, xp + cb * plane + pb, plane, We,
                                 nc, ct + ob * ldc + pb, ldc);
            }
        for (ptrdiff_t o = 0; o < O; ++o)
            for (ptrdiff_t oh = 0; oh < R1; ++oh) {
                const float* sr = ct + o * ldc + oh * We;
                float* d = y + (o * OH + r0 + oh) * OW;
                for (ptrdiff_t ow = 0; ow < OW; ++ow) d[ow] = sr[ow];
            }
    }
}

/* ---- direct convolution over any tap list (float32, AVX2 + FMA): the generalisation of
 * the 3x3 kernel above to taps at arbitrary offsets into the padded planes, used for
 * conv1d (one row, kW taps), the output phases of conv_transpose2d (its stride-s output
 * splits into s*s stride-1 convolutions of the input with the taps of that phase) and
 * its d_input (a strided conv2d of dy: dy split into s*s phase planes, each phase's
 * taps reading its own plane).  Output position p reads xp[c*plane + toff[t] + p] for
 * tap t of channel c; the weights are packed by blocks of 6 (then 4) output channels as
 * Ap[o0*C*nt + (c*nt + t)*m + r] = w[o0 + r, c, t].  The sums run channel by channel,
 * taps in list order, on top of what ct holds: fixed by the shapes. */
static inline void fnn_cvd_tile6(const float* restrict A, const float* restrict B,
                                 ptrdiff_t plane, const ptrdiff_t* restrict toff,
                                 ptrdiff_t nt, ptrdiff_t nc, float* restrict C, ptrdiff_t ldc) {
    __m256 c00 = _mm256_loadu_ps(C), c01 = _mm256_loadu_ps(C + 8);
    __m256 c10 = _mm256_loadu_ps(C + ldc), c11 = _mm256_loadu_ps(C + ldc + 8);
    __m256 c20 = _mm256_loadu_ps(C + 2 * ldc), c21 = _mm256_loadu_ps(C + 2 * ldc + 8);
    __m256 c30 = _mm256_loadu_ps(C + 3 * ldc), c31 = _mm256_loadu_ps(C + 3 * ldc + 8);
    __m256 c40 = _mm256_loadu_ps(C + 4 * ldc), c41 = _mm256_loadu_ps(C + 4 * ldc + 8);
    __m256 c50 = _mm256_loadu_ps(C + 5 * ldc), c51 = _mm256_loadu_ps(C + 5 * ldc + 8);
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
                                 ptrdiff_t nt, ptrdiff_t nc, float* restrict C, ptrdiff_t ldc) {
    __m256 c00 = _mm256_loadu_ps(C), c01 = _mm256_loadu_ps(C + 8);
    __m256 c10 = _mm256_loadu_ps(C + ldc), c11 = _mm256_loadu_ps(C + ldc + 8);
    __m256 c20 = _mm256_loadu_ps(C + 2 * ldc), c21 = _mm256_loadu_ps(C + 2 * ldc + 8);
    __m256 c30 = _mm256_loadu_ps(C + 3 * ldc), c31 = _mm256_loadu_ps(C + 3 * ldc + 8);
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
 * window (16 rows of a chunk) and results stay in L1 -- with the position block outermost
 * (the 3x3 kernel's order) a 256-channel row sweeps 256 input streams per 16 positions. */
#define FNN_CVD_PC 128
static inline void fnn_cvd_run(const float* restrict Ap, const float* restrict xp,
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
                    fnn_cvd_tile6(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc);
            }
            for (; ob < O; ob += 4) {
                const float* A = Ap + ob * C * nt + cb * nt * 4;
                for (pb = p0; pb < p1; pb += FNN_CV3_NR)
                    fnn_cvd_tile4(A, B + pb, plane, to, nt, nc, ct + ob * ldc + pb, ldc);
            }
            cb += nc;
        }
    }
}
#else   /* never called: FNN_HAVE_CV3 == 0 keeps the GEMM paths */
#define FNN_HAVE_CV3 0
static inline ptrdiff_t fnn_cv3_o6(ptrdiff_t O) { return 0; }
static inline ptrdiff_t fnn_cv3_rows(ptrdiff_t C, ptrdiff_t OW, ptrdiff_t OH) { return 1; }
static inline ptrdiff_t fnn_cv3_plane_rows(ptrdiff_t R, ptrdiff_t OW) { return 1; }
static inline void fnn_cv3_image(const float* x, const float* Ap, const float* bias, float* y,
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
#endif
