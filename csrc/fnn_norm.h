/* Layer-norm row kernels (one row of D contiguous elements), written in C so the
 * reductions keep 8 independent lanes and vectorise (see fnn_reduce.h).
 * Statistics in double; the elementwise passes in the input precision. */
#ifndef FNN_NORM_H
#define FNN_NORM_H
#include <math.h>
#include <stddef.h>
#include "fnn_reduce.h"
#include "fnn_stream.h"

/* rows of up to this many elements are normalised into a stack buffer and streamed
   out when the caller asks for non-temporal stores (a large output, fnn_stream.h) */
#define FNN_LN_ROWBUF 4096

#define FNN_DEFINE_LN(T, SFX)                                                            \
static inline void fnn_ln_normalise_##SFX(const T* restrict x, T* restrict y,            \
                                          const T* restrict w, const T* restrict b,      \
                                          ptrdiff_t D, T mf, T rf) {                     \
    ptrdiff_t j;                                                                         \
    if (w && b) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf * w[j] + b[j]; }       \
    else if (w) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf * w[j]; }              \
    else if (b) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf + b[j]; }              \
    else        { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf; }                     \
}                                                                                        \
static inline void fnn_ln_fwd_row_##SFX(const T* x, T* y, const T* w, const T* b,        \
                                        ptrdiff_t D, double eps, T* mean_out, T* rstd_out, \
                                        int stream, const T* next) {                     \
    /* the next row is requested now and arrives while this one is computed */           \
    if (next)                                                                            \
        for (ptrdiff_t k = 0; k < D; k += 64 / (ptrdiff_t)sizeof(T)) __builtin_prefetch(next + k); \
    double m = D > 0 ? fnn_sum_##SFX(x, D) / (double)D : 0.0;                            \
    double var = D > 0 ? fnn_sumsq_dev_##SFX(x, D, m) / (double)D : 0.0;                 \
    T mf = (T)m, rf = (T)(1.0 / sqrt(var + eps));                                        \
    if (stream && D <= FNN_LN_ROWBUF) {                                                  \
        T buf[FNN_LN_ROWBUF];                                                            \
        fnn_ln_normalise_##SFX(x, buf, w, b, D, mf, rf);                                 \
        fnn_stream_copy_##SFX(y, buf, D);                                                \
        fnn_stream_fence();                                                              \
    } else {                                                                             \
        fnn_ln_normalise_##SFX(x, y, w, b, D, mf, rf);                                   \
    }                                                                                    \
    *mean_out = mf; *rstd_out = rf;                                                      \
}                                                                                        \
/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.                       \
   sum(g * xhat) = rstd * (sum(g * x) - mean * sum(g)); both sums in one pass (lanes in  \
   T, blocks folded in double), then one pass writes dx and adds this row's terms to the \
   chunk partials pw (dy * xhat) and pb (dy) when they are given (both or neither).      \
   All pointers are restrict (dx and the partials never alias the inputs) and the weight \
   test is outside the loops, so every loop vectorises. */                               \
static inline void fnn_ln_bwd_sums_##SFX(const T* restrict dy, const T* restrict x,      \
                                         const T* restrict w, ptrdiff_t D,               \
                                         double* sum_g_out, double* sum_gx_out) {        \
    double sum_g = 0.0, sum_gx = 0.0;                                                    \
    ptrdiff_t b0, j;                                                                     \
    for (b0 = 0; b0 < D; b0 += FNN_BLOCK) {                                              \
        ptrdiff_t b1 = b0 + FNN_BLOCK < D ? b0 + FNN_BLOCK : D;                           \
        T a[32] = {0}, c[32] = {0};                                                      \
        j = b0;                                                                          \
        if (w) {                                                                         \
            for (; j + 32 <= b1; j += 32)                                                \
                for (int k = 0; k < 32; ++k) {                                           \
                    T g = dy[j + k] * w[j + k];                                          \
                    a[k] += g; c[k] += g * x[j + k];                                     \
                }                                                                        \
            for (; j < b1; ++j) { T g = dy[j] * w[j]; a[j & 31] += g; c[j & 31] += g * x[j]; } \
        } else {                                                                         \
            for (; j + 32 <= b1; j += 32)                                                \
                for (int k = 0; k < 32; ++k) {                                           \
                    T g = dy[j + k];                                                     \
                    a[k] += g; c[k] += g * x[j + k];                                     \
                }                                                                        \
            for (; j < b1; ++j) { T g = dy[j]; a[j & 31] += g; c[j & 31] += g * x[j]; }   \
        }                                                                                \
        for (int k = 0; k < 32; ++k) { sum_g += (double)a[k]; sum_gx += (double)c[k]; }  \
    }                                                                                    \
    *sum_g_out = sum_g; *sum_gx_out = sum_gx;                                            \
}                                                                                        \
static inline void fnn_ln_bwd_row_##SFX(const T* restrict dy, const T* restrict x,      \
                                        const T* restrict w, T mean, T rstd, ptrdiff_t D, \
                                        T* restrict dx_out, T* restrict pw, T* restrict pb, \
                                        int stream) {                                    \
    /* a streamed dx is written into a stack row first, then out with NT stores */       \
    T buf[FNN_LN_ROWBUF];                                                                \
    int via_buf = stream && D <= FNN_LN_ROWBUF;                                          \
    T* restrict dx = via_buf ? buf : dx_out;                                             \
    double sum_g, sum_gx;                                                                \
    ptrdiff_t j;                                                                         \
    fnn_ln_bwd_sums_##SFX(dy, x, w, D, &sum_g, &sum_gx);                                 \
    T sg = (T)(sum_g / (double)D);                                                       \
    T sgx = (T)((double)rstd * (sum_gx - (double)mean * sum_g) / (double)D);             \
    if (pw && w) {                                                                       \
        for (j = 0; j < D; ++j) {                                                        \
            T xh = (x[j] - mean) * rstd;                                                 \
            dx[j] = rstd * (dy[j] * w[j] - sg - xh * sgx);                               \
            pw[j] += dy[j] * xh;                                                         \
            pb[j] += dy[j];                                                              \
        }                                                                                \
    } else if (pw) {                                                                     \
        for (j = 0; j < D; ++j) {                                                        \
            T xh = (x[j] - mean) * rstd;                                                 \
            dx[j] = rstd * (dy[j] - sg - xh * sgx);                                      \
            pw[j] += dy[j] * xh;                                                         \
            pb[j] += dy[j];                                                              \
        }                                                                                \
    } else if (w) {                                                                      \
        for (j = 0; j < D; ++j) {                                                        \
            T xh = (x[j] - mean) * rstd;                                                 \
            dx[j] = rstd * (dy[j] * w[j] - sg - xh * sgx);                               \
        }                                                                                \
    } else {                                                                             \
        for (j = 0; j < D; ++j) {                                                        \
            T xh = (x[j] - mean) * rstd;                                                 \
            dx[j] = rstd * (dy[j] - sg - xh * sgx);                                      \
        }                                                                                \
    }                                                                                    \
    if (via_buf) { fnn_stream_copy_##SFX(dx_out, buf, D); fnn_stream_fence(); }          \
}

FNN_DEFINE_LN(float, f)
FNN_DEFINE_LN(double, d)
#endif
