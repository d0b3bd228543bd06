/* Row reductions for the hot loops: sums, dot products, maxima over contiguous data.
 *
 * A single accumulator makes a serial chain the compiler may not reorder (no
 * -ffast-math), so each reduction keeps 8 independent lanes -- the compiler turns
 * them into vector registers -- and adds the lanes in a fixed tree at the end.  The
 * order depends only on n, so results are identical at any thread count.  float
 * input accumulates in double lanes. */
#ifndef FNN_REDUCE_H
#define FNN_REDUCE_H
#include <stddef.h>

#define FNN_LANES 8
#define FNN_TREE(a) ((((a)[0] + (a)[1]) + ((a)[2] + (a)[3])) + (((a)[4] + (a)[5]) + ((a)[6] + (a)[7])))

#define FNN_DEFINE_REDUCE(T, SFX)                                                        \
static inline double fnn_sum_##SFX(const T* x, ptrdiff_t n) {                           \
    double a[FNN_LANES] = {0, 0, 0, 0, 0, 0, 0, 0};                                      \
    ptrdiff_t j = 0;                                                                     \
    for (; j + FNN_LANES <= n; j += FNN_LANES)                                           \
        for (int k = 0; k < FNN_LANES; ++k) a[k] += (double)x[j + k];                    \
    for (; j < n; ++j) a[j & 7] += (double)x[j];                               \
    return FNN_TREE(a);                                                                  \
}                                                                                        \
/* sum of (x - c)^2 */                                                                   \
static inline double fnn_sumsq_dev_##SFX(const T* x, ptrdiff_t n, double c) {           \
    double a[FNN_LANES] = {0, 0, 0, 0, 0, 0, 0, 0};                                      \
    ptrdiff_t j = 0;                                                                     \
    for (; j + FNN_LANES <= n; j += FNN_LANES)                                           \
        for (int k = 0; k < FNN_LANES; ++k) { double d = (double)x[j + k] - c; a[k] += d * d; } \
    for (; j < n; ++j) { double d = (double)x[j] - c; a[j & 7] += d * d; }   \
    return FNN_TREE(a);                                                                  \
}                                                                                        \
static inline double fnn_dot_##SFX(const T* x, const T* y, ptrdiff_t n) {               \
    double a[FNN_LANES] = {0, 0, 0, 0, 0, 0, 0, 0};                                      \
    ptrdiff_t j = 0;                                                                     \
    for (; j + FNN_LANES <= n; j += FNN_LANES)                                           \
        for (int k = 0; k < FNN_LANES; ++k) a[k] += (double)x[j + k] * (double)y[j + k]; \
    for (; j < n; ++j) a[j & 7] += (double)x[j] * (double)y[j];               \
    return FNN_TREE(a);                                                                  \
}                                                                                        \
/* max, NaN if any element is NaN; -inf for n == 0 */                                    \
static inline T fnn_max_##SFX(const T* x, ptrdiff_t n) {                                \
    T m[FNN_LANES];                                                                      \
    int nan[FNN_LANES] = {0, 0, 0, 0, 0, 0, 0, 0};                                       \
    for (int k = 0; k < FNN_LANES; ++k) m[k] = -(T)INFINITY;                            \
    ptrdiff_t j = 0;                                                                     \
    for (; j + FNN_LANES <= n; j += FNN_LANES)                                           \
        for (int k = 0; k < FNN_LANES; ++k) {                                            \
            T v = x[j + k];                                                              \
            m[k] = v > m[k] ? v : m[k];                                                  \
            nan[k] |= (v != v);                                                          \
        }                                                                                \
    for (; j < n; ++j) {                                                                 \
        T v = x[j];                                                                      \
        m[j & 7] = v > m[j & 7] ? v : m[j & 7];                                          \
        nan[j & 7] |= (v != v);                                                          \
    }                                                                                    \
    T r = m[0];                                                                          \
    int any = nan[0];                                                                    \
    for (int k = 1; k < FNN_LANES; ++k) { r = m[k] > r ? m[k] : r; any |= nan[k]; }      \
    return any ? (T)NAN : r;                                                             \
}

#include <math.h>
FNN_DEFINE_REDUCE(float, f)
FNN_DEFINE_REDUCE(double, d)
#endif
