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
#endif
