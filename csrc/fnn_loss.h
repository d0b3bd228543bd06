/* Loss kernels for csrc/loss.pyx: cross-entropy rows and the pointwise losses (MSE, L1,
 * smooth L1, Huber, BCE, BCE with logits, KL), written once over the element type in
 * fnn_loss_t.h and instantiated for float and double.  Sums go through fnn_reduce.h's
 * lane structures (float: 32 float lanes per block of 512, folded in double; double:
 * 16 double lanes), so a sum depends only on n, never on the thread count. */
#ifndef FNN_LOSS_H
#define FNN_LOSS_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "fnn_math.h"
#include "fnn_reduce.h"

#define FNN_PWL_CHUNK 32768
enum { FNN_MSE, FNN_L1, FNN_SMOOTH_L1, FNN_HUBER, FNN_BCE, FNN_BCE_LOGITS, FNN_KL, FNN_KL_LOG };

/* per type: exp, |x|, and the sums (fnn_reduce.h) the template calls by FNN_TNAME */
static inline float fnn_l_exp_f(float x) { return fnn_expf(x); }
static inline double fnn_l_exp_d(double x) { return exp(x); }
static inline float fnn_l_abs_f(float x) { return fnn_absf(x); }
static inline double fnn_l_abs_d(double x) { return fabs(x); }
FNN_ALWAYS_INLINE double fnn_l_sum_f(ptrdiff_t n, fnn_term_f t, const fnn_sum_args* s) {
    return fnn_float_sum(n, t, s);
}
FNN_ALWAYS_INLINE double fnn_l_sum_d(ptrdiff_t n, fnn_term_d t, const fnn_sum_args* s) {
    return fnn_double_sum(n, t, s);
}
FNN_ALWAYS_INLINE double fnn_l_wsum_f(ptrdiff_t n, fnn_term_f t, const fnn_sum_args* s) {
    return fnn_float_wsum(n, t, s);
}
FNN_ALWAYS_INLINE double fnn_l_wsum_d(ptrdiff_t n, fnn_term_d t, const fnn_sum_args* s) {
    return fnn_double_wsum(n, t, s);
}

/* log clamped at -100 as torch's binary_cross_entropy (NaN stays NaN) */
static inline double fnn_clog(double v) { return v < -100.0 ? -100.0 : v; }
static inline float fnn_sl1_f(float d, float b) {
    float a = fnn_absf(d); return a < b ? 0.5f * d * d / b : a - 0.5f * b; }
static inline double fnn_sl1_d(double d, double b) {
    double a = fabs(d); return a < b ? 0.5 * d * d / b : a - 0.5 * b; }
static inline float fnn_huber_f(float d, float b) {
    float a = fnn_absf(d); return a < b ? 0.5f * d * d : b * (a - 0.5f * b); }
static inline double fnn_huber_d(double d, double b) {
    double a = fabs(d); return a < b ? 0.5 * d * d : b * (a - 0.5 * b); }
/* -log_sigmoid(x) = max(-x, 0) + log1p(exp(-|x|)): no overflow for any x */
static inline float fnn_nls_f(float x) {
    return (x < 0.0f ? -x : 0.0f) + fnn_log1pf(fnn_expf_nonpos(-fnn_absf(x))); }
static inline double fnn_nls_d(double x) { return (x < 0.0 ? -x : 0.0) + log1p(exp(-fabs(x))); }
static inline float fnn_sig_f(float x) {
    float e = fnn_expf_nonpos(-fnn_absf(x)), r = 1.0f / (1.0f + e); return x >= 0.0f ? r : e * r; }
static inline double fnn_sig_d(double x) {
    double e = exp(-fabs(x)), r = 1.0 / (1.0 + e); return x >= 0.0 ? r : e * r; }
static inline double fnn_xlogx(double y) { return y == 0.0 ? 0.0 : y * log(y); }
static inline float fnn_clamp_f(float d, float b) { return d < -b ? -b : (d > b ? b : d); }
static inline double fnn_clamp_d(double d, double b) { return d < -b ? -b : (d > b ? b : d); }

/* the MSE sum, the hot case (a regression loss over whole activations): on AVX2 the
   32-element steps go through four vector accumulators (fnn_float_sum_v: the same lanes
   and so the same bits as fnn_float_sum, about twice as fast) */
static inline float fnn_term_sqdiff_f(const fnn_sum_args* s, ptrdiff_t i) {
    const float* x = (const float*)s->a;
    const float* y = (const float*)s->b;
    return (x[i] - y[i]) * (x[i] - y[i]);
}
static inline double fnn_term_sqdiff_d(const fnn_sum_args* s, ptrdiff_t i) {
    const double* x = (const double*)s->a;
    const double* y = (const double*)s->b;
    return (x[i] - y[i]) * (x[i] - y[i]);
}
#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 fnn_vstep_sqdiff(__m256 acc, const fnn_sum_args* s, ptrdiff_t j) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps((const float*)s->a + j),
                             _mm256_loadu_ps((const float*)s->b + j));
    return _mm256_fmadd_ps(d, d, acc);
}
#endif
static inline double fnn_mse_sum_f(const float* x, const float* y, ptrdiff_t n) {
    fnn_sum_args s = {x, y, NULL, NULL, 0.0, 0.0};
    return fnn_float_sum_v(n, fnn_term_sqdiff_f, FNN_VSTEP(fnn_vstep_sqdiff), &s);
}
static inline double fnn_mse_sum_d(const double* x, const double* y, ptrdiff_t n) {
    fnn_sum_args s = {x, y, NULL, NULL, 0.0, 0.0};
    return fnn_double_sum(n, fnn_term_sqdiff_d, &s);
}

#define FNN_TEMPLATE "fnn_loss_t.h"
#include "fnn_instantiate.h"
#endif
