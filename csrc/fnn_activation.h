/* Elementwise activation loops over n contiguous elements (one thread's chunk).
 *
 * Every kernel has one signature, (a, b, out, n, p): forwards read a = x; backwards
 * read a = d_out and b = what the forward saved (x or y); p holds the op's scalar
 * parameters.  Loops are `omp simd`: out may be exactly a (in-place), which is safe
 * for elementwise code and which the pragma lets the compiler assume without a runtime
 * overlap check.  float uses the vectorisable fnn_math.h functions; double uses libm.
 * Formulas (and NaN / inf behaviour) follow fastnn/reference/activation.py. */
#ifndef FNN_ACTIVATION_H
#define FNN_ACTIVATION_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "fnn_math.h"
#include "fnn_philox.h"

#define FNN_SIMD _Pragma("omp simd")

enum {
    FNN_RELU_FWD, FNN_RELU_BWD, FNN_LEAKY_FWD, FNN_LEAKY_BWD,
    FNN_ELU_FWD, FNN_ELU_BWD_OUT, FNN_ELU_BWD_IN,
    FNN_GELU_FWD, FNN_GELU_BWD, FNN_GELUT_FWD, FNN_GELUT_BWD,
    FNN_SILU_FWD, FNN_SILU_BWD, FNN_SOFTPLUS_FWD, FNN_SOFTPLUS_BWD,
    FNN_SIGMOID_FWD, FNN_SIGMOID_BWD, FNN_TANH_FWD, FNN_TANH_BWD,
    FNN_NEG, FNN_MUL, FNN_NUM_KERNELS
};

static inline double fnn_absd(double x) { return fabs(x); }
static inline double fnn_tanhd(double x) { return tanh(x); }
/* Phi(x) and exp(-x^2/2) in double (libm) */
static inline double fnn_gauss_cdf_d(double x, double* gauss) {
    *gauss = exp(-0.5 * x * x);
    return 0.5 * erfc(-x * 0.70710678118654752440);
}

/* float: the vectorisable fnn_math.h functions */
#define FNN_T float
#define FNN_ACT_NAME(name) name##_f
#define FNN_A_EXP fnn_expf
#define FNN_A_EXPNEG fnn_exp_nonpos_f
#define FNN_A_EXPM1 fnn_expm1f
#define FNN_A_TANH fnn_tanhf
#define FNN_A_CDF fnn_gauss_cdf_f
#define FNN_A_LOG1P fnn_log1pf
#define FNN_A_ABS fnn_absf
#define FNN_A_SIGMOID fnn_sigmoidf
#define FNN_A_XSIG(v, z) ((v) * fnn_sigmoidf(z))
#include "fnn_activation_impl.h"
#undef FNN_T
#undef FNN_ACT_NAME
#undef FNN_A_EXP
#undef FNN_A_EXPNEG
#undef FNN_A_EXPM1
#undef FNN_A_TANH
#undef FNN_A_CDF
#undef FNN_A_LOG1P
#undef FNN_A_ABS
#undef FNN_A_SIGMOID
#undef FNN_A_XSIG

/* double: libm, the accuracy path */
static inline double fnn_sigmoidd(double z) { return 1.0 / (1.0 + exp(-z)); }
#define FNN_T double
#define FNN_ACT_NAME(name) name##_d
#define FNN_A_EXP exp
#define FNN_A_EXPNEG exp
#define FNN_A_EXPM1 expm1
#define FNN_A_TANH fnn_tanhd
#define FNN_A_CDF fnn_gauss_cdf_d
#define FNN_A_LOG1P log1p
#define FNN_A_ABS fnn_absd
#define FNN_A_SIGMOID fnn_sigmoidd
#define FNN_A_XSIG(v, z) ((v) / (1.0 + exp(-(z))))
#include "fnn_activation_impl.h"
#undef FNN_T
#undef FNN_ACT_NAME
#undef FNN_A_EXP
#undef FNN_A_EXPNEG
#undef FNN_A_EXPM1
#undef FNN_A_TANH
#undef FNN_A_CDF
#undef FNN_A_LOG1P
#undef FNN_A_ABS
#undef FNN_A_SIGMOID
#undef FNN_A_XSIG

/* test hook: the float math functions over an array (tests/test_math.py) */
static void fnn_math_apply(int which, const float* x, float* y, ptrdiff_t n) {
    ptrdiff_t i;
    switch (which) {
    case 0: for (i = 0; i < n; ++i) y[i] = fnn_expf(x[i]); break;
    case 1: for (i = 0; i < n; ++i) y[i] = fnn_expm1f(x[i]); break;
    case 2: for (i = 0; i < n; ++i) y[i] = fnn_tanhf(x[i]); break;
    case 3: for (i = 0; i < n; ++i) y[i] = fnn_erff(x[i]); break;
    case 4: for (i = 0; i < n; ++i) y[i] = fnn_log1pf(x[i]); break;
    case 5: for (i = 0; i < n; ++i) { float g; y[i] = fnn_gauss_cdf_f(x[i], &g); } break;
    case 6: for (i = 0; i < n; ++i) { float g; fnn_gauss_cdf_f(x[i], &g); y[i] = g; } break;
    case 8: for (i = 0; i < n; ++i) y[i] = fnn_sigmoidf(x[i]); break;
    case 7:   /* the kernels' form: 16 lanes (AVX-512) or 8 (AVX2) where the build has
                 them, scalar tail */
        i = 0;
#if defined(FNN_HAVE_AVX512)
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, fnn_exp_nonpos_ps16(_mm512_loadu_ps(x + i)));
#endif
#if defined(FNN_HAVE_AVX2)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fnn_exp_nonpos_ps(_mm256_loadu_ps(x + i)));
#endif
        for (; i < n; ++i) y[i] = fnn_expf_nonpos(x[i]);
        break;
    }
}
#endif
