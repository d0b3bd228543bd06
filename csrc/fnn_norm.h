/* Layer-norm row kernels (one row of D contiguous elements), written in C so the
 * reductions keep 8 independent lanes and vectorise (see fnn_reduce.h).
 * Statistics in double; the elementwise passes in the input precision. */
#ifndef FNN_NORM_H
#define FNN_NORM_H
#include <math.h>
#include <stddef.h>
#include "fnn_reduce.h"

#define FNN_DEFINE_LN(T, SFX)                                                            \
static inline void fnn_ln_fwd_row_##SFX(const T* x, T* y, const T* w, const T* b,        \
                                        ptrdiff_t D, double eps, T* mean_out, T* rstd_out) { \
    double m = D > 0 ? fnn_sum_##SFX(x, D) / (double)D : 0.0;                            \
    double var = D > 0 ? fnn_sumsq_dev_##SFX(x, D, m) / (double)D : 0.0;                 \
    T mf = (T)m, rf = (T)(1.0 / sqrt(var + eps));                                        \
    ptrdiff_t j;                                                                         \
    if (w && b) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf * w[j] + b[j]; }       \
    else if (w) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf * w[j]; }              \
    else if (b) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf + b[j]; }              \
    else        { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf; }                     \
    *mean_out = mf; *rstd_out = rf;                                                      \
}                                                                                        \
/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.                       \
   pw/pb (may be NULL): double partial sums of dy * xhat and dy, added to.               \
   sum(g * xhat) = rstd * (sum(g * x) - mean * sum(g)), both sums in double. */          \
static inline void fnn_ln_bwd_row_##SFX(const T* dy, const T* x, const T* w, T mean,    \
                                        T rstd, ptrdiff_t D, T* dx, double* pw,          \
                                        double* pb) {                                    \
    ptrdiff_t j;                                                                         \
    const T* g = dy;                                                                     \
    if (w) { for (j = 0; j < D; ++j) dx[j] = dy[j] * w[j]; g = dx; }                     \
    double sum_g = fnn_sum_##SFX(g, D);                                                  \
    double sum_gx = fnn_dot_##SFX(g, x, D);                                              \
    T sg = (T)(sum_g / (double)D);                                                       \
    T sgx = (T)((double)rstd * (sum_gx - (double)mean * sum_g) / (double)D);             \
    for (j = 0; j < D; ++j) dx[j] = rstd * (g[j] - sg - (x[j] - mean) * rstd * sgx);     \
    if (pw) for (j = 0; j < D; ++j) pw[j] += (double)(dy[j] * ((x[j] - mean) * rstd));  \
    if (pb) for (j = 0; j < D; ++j) pb[j] += (double)dy[j];                              \
}

FNN_DEFINE_LN(float, f)
FNN_DEFINE_LN(double, d)
#endif
