/* The 8-double-lane sums (conv / pool / batchnorm families), written once for FNN_T = float /
 * double (function names FNN_TNAME(name) = name_f / name_d): included by fnn_reduce.h once per
 * type, never on its own.
 * No include guard on purpose. */

/* sum(x), n contiguous */
static inline double FNN_TNAME(fnn_cv_sum)(const FNN_T* x, ptrdiff_t n) {
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ptrdiff_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k) a[k] += (double)x[j + k];
    for (; j < n; ++j) a[j & 7] += (double)x[j];
    return fnn_tree8(a);
}
/* *s = sum(x - c), *q = sum((x - c)^2): one pass, shifted by c for accuracy */
static inline void FNN_TNAME(fnn_cv_moments)(const FNN_T* x, ptrdiff_t n, double c,
                                        double* s, double* q) {
#if defined(FNN_HAVE_CV_Z)
    if (sizeof(FNN_T) == sizeof(float)) {       /* float: the zmm form (fnn_reduce.h) */
        fnn_cv_moments_z((const float*)(const void*)x, n, c, s, q);
        return;
    }
#endif
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ptrdiff_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k) {
            double d = (double)x[j + k] - c; a[k] += d; b[k] += d * d;
        }
    for (; j < n; ++j) { double d = (double)x[j] - c; a[j & 7] += d; b[j & 7] += d * d; }
    *s = fnn_tree8(a); *q = fnn_tree8(b);
}
/* *s = sum(g), *p = sum(g * (x - c)) */
static inline void FNN_TNAME(fnn_cv_gsums)(const FNN_T* g, const FNN_T* x, ptrdiff_t n, double c,
                                      double* s, double* p) {
#if defined(FNN_HAVE_CV_Z)
    if (sizeof(FNN_T) == sizeof(float)) {       /* float: the zmm form (fnn_reduce.h) */
        fnn_cv_gsums_z((const float*)(const void*)g, (const float*)(const void*)x, n, c, s,
                       p);
        return;
    }
#endif
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ptrdiff_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k) {
            double gg = (double)g[j + k]; a[k] += gg; b[k] += gg * ((double)x[j + k] - c);
        }
    for (; j < n; ++j) {
        double gg = (double)g[j]; a[j & 7] += gg; b[j & 7] += gg * ((double)x[j] - c);
    }
    *s = fnn_tree8(a); *p = fnn_tree8(b);
}
/* sum(a[j] * b[j * sb]), j < n */
static inline double FNN_TNAME(fnn_cv_dot)(const FNN_T* x, const FNN_T* y, ptrdiff_t n, ptrdiff_t sy) {
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ptrdiff_t j = 0;
    if (sy == 1) {
        for (; j + 8 <= n; j += 8)
            for (int k = 0; k < 8; ++k) a[k] += (double)x[j + k] * (double)y[j + k];
    } else {
        for (; j + 8 <= n; j += 8)
            for (int k = 0; k < 8; ++k) a[k] += (double)x[j + k] * (double)y[(j + k) * sy];
    }
    for (; j < n; ++j) a[j & 7] += (double)x[j] * (double)y[j * sy];
    return fnn_tree8(a);
}
