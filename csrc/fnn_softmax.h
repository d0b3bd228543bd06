/* Softmax row kernels over n contiguous elements (the inner == 1 case).  Sums keep
 * 8 lanes (fnn_reduce.h) so the exp loop vectorises; float uses fnn_expf. */
#ifndef FNN_SOFTMAX_H
#define FNN_SOFTMAX_H
#include <math.h>
#include <stddef.h>
#include "fnn_math.h"
#include "fnn_reduce.h"

#define FNN_DEFINE_SOFTMAX(T, SFX, EXP)                                                  \
static inline void fnn_softmax_row_##SFX(const T* x, T* y, ptrdiff_t n, int logsm) {    \
    /* max; y = exp(x - max); sum; scale (or y = x - lse).  Separate simple loops     \
       vectorise where one fused loop with a reduction does not; the row is in L1. */  \
    T m = fnn_max_##SFX(x, n);                                                           \
    ptrdiff_t j;                                                                         \
    for (j = 0; j < n; ++j) y[j] = EXP(x[j] - m);                                        \
    double s = fnn_sum_##SFX(y, n);                                                      \
    if (logsm) {                                                                         \
        T lse = (T)((double)m + log(s));                                                 \
        for (j = 0; j < n; ++j) y[j] = x[j] - lse;                                       \
    } else {                                                                             \
        T inv = (T)(1.0 / s);                                                            \
        for (j = 0; j < n; ++j) y[j] *= inv;                                             \
    }                                                                                    \
}                                                                                        \
static inline void fnn_softmax_bwd_row_##SFX(const T* dy, const T* y, T* dx, ptrdiff_t n, \
                                             int logsm) {                                \
    ptrdiff_t j;                                                                         \
    if (logsm) {                                                                         \
        T s = (T)fnn_sum_##SFX(dy, n);                                                   \
        for (j = 0; j < n; ++j) dx[j] = dy[j] - EXP(y[j]) * s;                           \
    } else {                                                                             \
        T s = (T)fnn_dot_##SFX(dy, y, n);                                                \
        for (j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - s);                              \
    }                                                                                    \
}

FNN_DEFINE_SOFTMAX(float, f, fnn_expf)
FNN_DEFINE_SOFTMAX(double, d, exp)
#endif
