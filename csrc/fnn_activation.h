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

#define FNN_DEFINE_ACTIVATION(T, SFX, EXP, EXPM1, TANH, CDF, LOG1P, ABS)                  \
static void fnn_act_##SFX(int op, const T* a, const T* b, T* o, ptrdiff_t n,             \
                          const double* p) {                                             \
    ptrdiff_t i;                                                                         \
    const T zero = 0, one = 1;                                                           \
    switch (op) {                                                                        \
    case FNN_RELU_FWD:                                                                   \
        FNN_SIMD for (i = 0; i < n; ++i) { T v = a[i]; o[i] = v < zero ? zero : v; }     \
        break;                                                                           \
    case FNN_RELU_BWD:      /* b = y; ReLU'(0) = 0; a NaN output passes the gradient */  \
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = b[i] <= zero ? zero : a[i];              \
        break;                                                                           \
    case FNN_LEAKY_FWD: {                                                                \
        const T s = (T)p[0];                                                             \
        FNN_SIMD for (i = 0; i < n; ++i) { T v = a[i]; o[i] = v > zero ? v : v * s; }    \
        break; }                                                                         \
    case FNN_LEAKY_BWD: {   /* b = y (slope >= 0) or x */                                \
        const T s = (T)p[0];                                                             \
        FNN_SIMD for (i = 0; i < n; ++i) { T g = a[i]; o[i] = b[i] > zero ? g : g * s; } \
        break; }                                                                         \
    case FNN_ELU_FWD: {     /* p = alpha, scale, input_scale */                          \
        const T sa = (T)(p[0] * p[1]), sc = (T)p[1], is = (T)p[2];                       \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T v = a[i];                                                                  \
            T neg = sa * EXPM1(v * is);                                                  \
            o[i] = v > zero ? sc * v : neg;                                              \
        }                                                                                \
        break; }                                                                         \
    case FNN_ELU_BWD_OUT: { /* b = y: dy/dx = is (y + alpha scale) on the negative side */ \
        const T sa = (T)(p[0] * p[1]), sc = (T)p[1], is = (T)p[2];                       \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T g = a[i], y = b[i];                                                        \
            o[i] = y > zero ? g * sc : g * is * (y + sa);   /* NaN -> NaN, as torch */   \
        }                                                                                \
        break; }                                                                         \
    case FNN_ELU_BWD_IN: {  /* b = x */                                                  \
        const T sai = (T)(p[0] * p[1] * p[2]), sc = (T)p[1], is = (T)p[2];               \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T g = a[i], v = b[i];                                                        \
            T neg = g * sai * EXP(v * is);                                               \
            o[i] = v > zero ? g * sc : neg;                                              \
        }                                                                                \
        break; }                                                                         \
    case FNN_GELU_FWD:      /* x Phi(x) */                                               \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T v = a[i], g;                                                               \
            o[i] = v * CDF(v, &g);                                                       \
        }                                                                                \
        break;                                                                           \
    case FNN_GELU_BWD: {    /* Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi) */   \
        const T c = (T)0.39894228040143267794;                                           \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T v = b[i], g;                                                               \
            T cdf = CDF(v, &g);                                                          \
            o[i] = a[i] * (cdf + v * c * g);                                             \
        }                                                                                \
        break; }                                                                         \
    case FNN_GELUT_FWD: {   /* x/2 (1 + tanh z) = x sigmoid(2z): one exp, no cancellation */ \
        const T k2 = (T)(2 * 0.79788456080286535588), c = (T)0.044715;                   \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T v = a[i];                                                                  \
            T z2 = k2 * (v + c * v * v * v);                                             \
            o[i] = v / (one + EXP(-z2));                                                 \
        }                                                                                \
        break; }                                                                         \
    case FNN_GELUT_BWD: {   /* s + 2 x s (1 - s) k (1 + 3c x^2), s = sigmoid(2z) */      \
        const T k = (T)0.79788456080286535588, k2 = (T)(2 * 0.79788456080286535588);     \
        const T c = (T)0.044715, c3 = (T)(3 * 0.044715), two = 2, cap = (T)1e4;         \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T v = b[i];                                                                  \
            T v2 = v * v;                                                                \
            T s = one / (one + EXP(-(k2 * (v + c * v2 * v))));                           \
            /* v2 capped: past |x| = 100 s(1 - s) is exactly 0, and 0 * inf is not */    \
            T d = s + two * v * s * (one - s) * k * (one + c3 * (v2 < cap ? v2 : cap));   \
            o[i] = a[i] * d;                                                             \
        }                                                                                \
        break; }                                                                         \
    case FNN_SILU_FWD:                                                                   \
        FNN_SIMD for (i = 0; i < n; ++i) { T v = a[i]; o[i] = v / (one + EXP(-v)); }     \
        break;                                                                           \
    case FNN_SILU_BWD:      /* b = x: s (1 + x (1 - s)) */                               \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T v = b[i];                                                                  \
            T s = one / (one + EXP(-v));                                                 \
            o[i] = a[i] * s * (one + v * (one - s));                                     \
        }                                                                                \
        break;                                                                           \
    case FNN_SOFTPLUS_FWD: { /* p = beta, threshold; max(bx,0) + log1p(exp(-|bx|)) */    \
        const T beta = (T)p[0], thr = (T)p[1], ib = (T)(1.0 / p[0]);                     \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T v = a[i];                                                                  \
            T bx = v * beta;                                                             \
            T sp = ((bx > zero ? bx : zero) + LOG1P(EXP(-ABS(bx)))) * ib;                \
            o[i] = bx > thr ? v : sp;                                                    \
        }                                                                                \
        break; }                                                                         \
    case FNN_SOFTPLUS_BWD: { /* b = x: sigmoid(beta x) below the threshold */            \
        const T beta = (T)p[0], thr = (T)p[1];                                           \
        FNN_SIMD for (i = 0; i < n; ++i) {                                               \
            T g = a[i], bx = b[i] * beta;                                                \
            T d = g / (one + EXP(-bx));                                                  \
            o[i] = bx > thr ? g : d;                                                     \
        }                                                                                \
        break; }                                                                         \
    case FNN_SIGMOID_FWD:                                                                \
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = one / (one + EXP(-a[i]));                \
        break;                                                                           \
    case FNN_SIGMOID_BWD:   /* b = y */                                                  \
        FNN_SIMD for (i = 0; i < n; ++i) { T y = b[i]; o[i] = a[i] * y * (one - y); }    \
        break;                                                                           \
    case FNN_TANH_FWD:                                                                   \
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = TANH(a[i]);                              \
        break;                                                                           \
    case FNN_TANH_BWD:      /* b = y */                                                  \
        FNN_SIMD for (i = 0; i < n; ++i) { T y = b[i]; o[i] = a[i] * (one - y * y); }    \
        break;                                                                           \
    case FNN_NEG:                                                                        \
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = -a[i];                                   \
        break;                                                                           \
    case FNN_MUL:                                                                        \
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = a[i] * b[i];                             \
        break;                                                                           \
    }                                                                                    \
}                                                                                        \
                                                                                         \
/* RReLU training forward on elements [i0, i1) of the whole array: x <= 0 draws the     \
   slope lower + (upper - lower) u_i (u_i: Philox uniform of element i), else 1;       \
   noise keeps it for backward. */                                                       \
static void fnn_rrelu_##SFX(const T* x, T* y, T* noise, ptrdiff_t i0, ptrdiff_t i1,     \
                            double lower, double upper, uint64_t seed, uint64_t offset) { \
    const T lo = (T)lower, w = (T)(upper - lower), zero = 0, one = 1;                    \
    ptrdiff_t g = i0;                                                                    \
    while (g < i1) {                                                                     \
        fnn_philox_out r = fnn_philox4x32((uint64_t)g >> 2, offset, seed);               \
        int lane;                                                                        \
        for (lane = (int)(g & 3); lane < 4 && g < i1; ++lane, ++g) {                     \
            T s = lo + w * (T)fnn_u24_to_float(r.v[lane]);                               \
            T v = x[g];                                                                  \
            T nz = v <= zero ? s : one;                                                  \
            noise[g] = nz;                                                               \
            y[g] = v * nz;                                                               \
        }                                                                                \
    }                                                                                    \
}                                                                                        \
                                                                                         \
/* PReLU on elements [e0, e1) of x viewed as (outer, C, inner): the weight of element  \
   e is w[(e / inner) % C]; the range is walked in segments of one channel each. */     \
static void fnn_prelu_fwd_##SFX(const T* x, const T* w, T* y, ptrdiff_t e0, ptrdiff_t e1, \
                                ptrdiff_t C, ptrdiff_t inner) {                          \
    const T zero = 0;                                                                    \
    ptrdiff_t e = e0;                                                                    \
    while (e < e1) {                                                                     \
        ptrdiff_t r = e / inner, end = (r + 1) * inner;                                  \
        const T s = w[r % C];                                                            \
        if (end > e1) end = e1;                                                          \
        FNN_SIMD for (ptrdiff_t i = e; i < end; ++i) {                                   \
            T v = x[i]; y[i] = v > zero ? v : s * v;                                     \
        }                                                                                \
        e = end;                                                                         \
    }                                                                                    \
}                                                                                        \
/* backward on elements [e0, e1): dx, and this block's partial weight-gradient sums    \
   (double, a fixed order for a fixed block) into part[0..C). */                         \
static void fnn_prelu_bwd_##SFX(const T* dy, const T* x, const T* w, T* dx, double* part, \
                                ptrdiff_t e0, ptrdiff_t e1, ptrdiff_t C, ptrdiff_t inner) { \
    const T zero = 0;                                                                    \
    ptrdiff_t e = e0;                                                                    \
    for (ptrdiff_t c = 0; c < C; ++c) part[c] = 0.0;                                     \
    while (e < e1) {                                                                     \
        ptrdiff_t r = e / inner, end = (r + 1) * inner;                                  \
        const ptrdiff_t c = r % C;                                                       \
        const T s = w[c];                                                                \
        double acc = 0.0;                                                                \
        if (end > e1) end = e1;                                                          \
        _Pragma("omp simd reduction(+:acc)")                                             \
        for (ptrdiff_t i = e; i < end; ++i) {                                            \
            T v = x[i], g = dy[i];                                                       \
            dx[i] = v > zero ? g : s * g;                                                \
            acc += v > zero ? 0.0 : (double)v * (double)g;                               \
        }                                                                                \
        part[c] += acc;                                                                  \
        e = end;                                                                         \
    }                                                                                    \
}

FNN_DEFINE_ACTIVATION(float, f, fnn_expf, fnn_expm1f, fnn_tanhf, fnn_gauss_cdf_f, fnn_log1pf, fnn_absf)
FNN_DEFINE_ACTIVATION(double, d, exp, expm1, fnn_tanhd, fnn_gauss_cdf_d, log1p, fnn_absd)

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
    case 7:   /* the kernels' form: 8 lanes where the build has AVX2, scalar tail */
        i = 0;
#if defined(FNN_HAVE_AVX2)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fnn_exp_nonpos_ps(_mm256_loadu_ps(x + i)));
#endif
        for (; i < n; ++i) y[i] = fnn_expf_nonpos(x[i]);
        break;
    }
}
#endif
