/* Row reductions for the hot loops: sums, dot products, maxima over contiguous data.
 *
 * A single accumulator makes a serial chain the compiler may not reorder (no
 * -ffast-math), so each reduction keeps many independent lanes -- the compiler turns
 * them into several vector registers, hiding the add latency -- and folds the lanes in
 * a fixed tree at the end.  The order depends only on n, so results are identical at
 * any thread count.
 *
 * The lane structures are functions over a term: fnn_float_sum(n, term, args) adds
 * term(args, i) for i < n.  They are always inlined, so at each call the term is a known
 * function the compiler inlines in turn: the loops are the ones a macro over the term
 * expression gave (same vectorisation, same bits). */
#ifndef FNN_REDUCE_H
#define FNN_REDUCE_H
#include <stddef.h>
#include <math.h>

#if defined(__GNUC__)
#define FNN_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define FNN_ALWAYS_INLINE static inline
#endif

/* the operands of a term: up to four arrays and two scalars (what each term reads is
   its own business) */
typedef struct fnn_sum_args {
    const void* a;
    const void* b;
    const void* c;
    const void* d;
    double p, q;
} fnn_sum_args;
typedef float (*fnn_term_f)(const fnn_sum_args* s, ptrdiff_t i);
typedef double (*fnn_term_d)(const fnn_sum_args* s, ptrdiff_t i);

#define FNN_LANES 8
/* 8 lanes added in a fixed tree */
static inline double fnn_tree8(const double* a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* float: 32 float lanes (4 vector accumulators hide the add latency) over blocks of
   FNN_BLOCK elements, each block's lanes folded into a double total -- float speed,
   double accuracy (a lane never holds more than FNN_BLOCK/32 terms).
   double: 16 double lanes. */
#define FNN_BLOCK 512
/* the 32 float lanes of a block, widened to double and added in a fixed tree */
static inline double fnn_fold32(const float* a) {
    return (((((double)a[0] + a[1]) + ((double)a[2] + a[3])) + (((double)a[4] + a[5]) + ((double)a[6] + a[7])))
            + ((((double)a[8] + a[9]) + ((double)a[10] + a[11])) + (((double)a[12] + a[13]) + ((double)a[14] + a[15]))))
         + (((((double)a[16] + a[17]) + ((double)a[18] + a[19])) + (((double)a[20] + a[21]) + ((double)a[22] + a[23])))
            + ((((double)a[24] + a[25]) + ((double)a[26] + a[27])) + (((double)a[28] + a[29]) + ((double)a[30] + a[31]))));
}

/* sum of term(s, i) (times w[i] when weighted, w = s->d) over i < n: the block / lane
   structure every float sum shares */
FNN_ALWAYS_INLINE double fnn_float_sum_lanes(ptrdiff_t n, fnn_term_f term, const fnn_sum_args* s,
                                             int weighted) {
    const float* w = (const float*)s->d;
    double total = 0.0;
    for (ptrdiff_t b0 = 0; b0 < n; b0 += FNN_BLOCK) {
        ptrdiff_t b1 = b0 + FNN_BLOCK < n ? b0 + FNN_BLOCK : n;
        float a[32] = {0};
        ptrdiff_t j = b0;
        for (; j + 32 <= b1; j += 32)
            for (int k = 0; k < 32; ++k)
                a[k] += weighted ? term(s, j + k) * w[j + k] : term(s, j + k);
        for (; j < b1; ++j)
            a[j & 31] += weighted ? term(s, j) * w[j] : term(s, j);
        total += fnn_fold32(a);
    }
    return total;
}
FNN_ALWAYS_INLINE double fnn_float_sum(ptrdiff_t n, fnn_term_f term, const fnn_sum_args* s) {
    return fnn_float_sum_lanes(n, term, s, 0);
}
/* the sum of term(s, i) * w[i], w = s->d */
FNN_ALWAYS_INLINE double fnn_float_wsum(ptrdiff_t n, fnn_term_f term, const fnn_sum_args* s) {
    return fnn_float_sum_lanes(n, term, s, 1);
}

/* 16 double lanes, added as two 8-lane trees */
FNN_ALWAYS_INLINE double fnn_double_sum_lanes(ptrdiff_t n, fnn_term_d term, const fnn_sum_args* s,
                                              int weighted) {
    const double* w = (const double*)s->d;
    double a[16] = {0};
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; ++k)
            a[k] += weighted ? term(s, j + k) * w[j + k] : term(s, j + k);
    for (; j < n; ++j)
        a[j & 15] += weighted ? term(s, j) * w[j] : term(s, j);
    return fnn_tree8(a) + fnn_tree8(a + 8);
}
FNN_ALWAYS_INLINE double fnn_double_sum(ptrdiff_t n, fnn_term_d term, const fnn_sum_args* s) {
    return fnn_double_sum_lanes(n, term, s, 0);
}
FNN_ALWAYS_INLINE double fnn_double_wsum(ptrdiff_t n, fnn_term_d term, const fnn_sum_args* s) {
    return fnn_double_sum_lanes(n, term, s, 1);
}

/* fnn_float_sum with the 32-element steps on four AVX2 accumulators: vstep(acc, s, j)
   returns acc plus the vector term of elements j .. j+7.  The same lanes hold the same
   terms as in fnn_float_sum (lane k: the elements = k mod 32 of the block), so the two
   give the same sum; this one keeps the lanes in registers (no zeroed array per block:
   it matters for short rows).  Without AVX2 it is fnn_float_sum. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 (*fnn_vstep_f)(__m256 acc, const fnn_sum_args* s, ptrdiff_t j);
/* fnn_fold32 on vectors: the 32 lanes widened to double and added as a tree of
   4-lane vectors (~20 operations instead of 63 scalar ones -- it matters for short
   rows).  The tree differs from fnn_fold32's, so the last bits of a double total may
   differ between the avx2 and base builds; within one build it is fixed. */
static inline double fnn_fold32_avx(const float* a) {
    __m256 v0 = _mm256_loadu_ps(a), v1 = _mm256_loadu_ps(a + 8);
    __m256 v2 = _mm256_loadu_ps(a + 16), v3 = _mm256_loadu_ps(a + 24);
    __m256d d0 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v0)),
                               _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1)));
    __m256d d1 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v1)),
                               _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1)));
    __m256d d2 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v2)),
                               _mm256_cvtps_pd(_mm256_extractf128_ps(v2, 1)));
    __m256d d3 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v3)),
                               _mm256_cvtps_pd(_mm256_extractf128_ps(v3, 1)));
    __m256d d = _mm256_add_pd(_mm256_add_pd(d0, d1), _mm256_add_pd(d2, d3));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
FNN_ALWAYS_INLINE double fnn_float_sum_v(ptrdiff_t n, fnn_term_f term, fnn_vstep_f vstep,
                                         const fnn_sum_args* s) {
    double total = 0.0;
    for (ptrdiff_t b0 = 0; b0 < n; b0 += FNN_BLOCK) {
        ptrdiff_t b1 = b0 + FNN_BLOCK < n ? b0 + FNN_BLOCK : n;
        float a[32];
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        ptrdiff_t j = b0;
        for (; j + 32 <= b1; j += 32) {
            s0 = vstep(s0, s, j); s1 = vstep(s1, s, j + 8);
            s2 = vstep(s2, s, j + 16); s3 = vstep(s3, s, j + 24);
        }
        _mm256_storeu_ps(a, s0); _mm256_storeu_ps(a + 8, s1);
        _mm256_storeu_ps(a + 16, s2); _mm256_storeu_ps(a + 24, s3);
        for (; j < b1; ++j) a[j & 31] += term(s, j);
        total += fnn_fold32_avx(a);
    }
    return total;
}
#define FNN_VSTEP(f) (f)
#else
typedef void* fnn_vstep_f;
FNN_ALWAYS_INLINE double fnn_float_sum_v(ptrdiff_t n, fnn_term_f term, fnn_vstep_f vstep,
                                         const fnn_sum_args* s) {
    (void)vstep;
    return fnn_float_sum(n, term, s);
}
#define FNN_VSTEP(f) NULL
#endif

/* the terms of the sums below (a = x, b = y, p = c) */
static inline float fnn_term_x_f(const fnn_sum_args* s, ptrdiff_t i) { return ((const float*)s->a)[i]; }
static inline double fnn_term_x_d(const fnn_sum_args* s, ptrdiff_t i) { return ((const double*)s->a)[i]; }
static inline float fnn_term_sqdev_f(const fnn_sum_args* s, ptrdiff_t i) {
    /* the deviations are formed in float: x and c = mean are within the row's range */
    float d = ((const float*)s->a)[i] - (float)s->p;
    return d * d;
}
static inline double fnn_term_sqdev_d(const fnn_sum_args* s, ptrdiff_t i) {
    double d = ((const double*)s->a)[i] - s->p;
    return d * d;
}
static inline double fnn_term_sqdev_fd(const fnn_sum_args* s, ptrdiff_t i) {
    double d = (double)((const float*)s->a)[i] - s->p;
    return d * d;
}
static inline float fnn_term_dot_f(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const float*)s->a)[i] * ((const float*)s->b)[i];
}
static inline double fnn_term_dot_d(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const double*)s->a)[i] * ((const double*)s->b)[i];
}
/* y (x - c): the deviation formed first, as fnn_term_sqdev_f, so a row whose mean
   dwarfs its spread loses nothing to cancellation (sum y x - c sum y would) */
static inline float fnn_term_dotdev_f(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const float*)s->b)[i] * (((const float*)s->a)[i] - (float)s->p);
}
static inline double fnn_term_dotdev_d(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const double*)s->b)[i] * (((const double*)s->a)[i] - s->p);
}
static inline double fnn_term_dotdev_fd(const fnn_sum_args* s, ptrdiff_t i) {
    return (double)((const float*)s->b)[i] * ((double)((const float*)s->a)[i] - s->p);
}
#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 fnn_vstep_sum(__m256 acc, const fnn_sum_args* s, ptrdiff_t j) {
    return _mm256_add_ps(acc, _mm256_loadu_ps((const float*)s->a + j));
}
static inline __m256 fnn_vstep_sqdev(__m256 acc, const fnn_sum_args* s, ptrdiff_t j) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps((const float*)s->a + j), _mm256_set1_ps((float)s->p));
    return _mm256_fmadd_ps(d, d, acc);
}
static inline __m256 fnn_vstep_dot(__m256 acc, const fnn_sum_args* s, ptrdiff_t j) {
    return _mm256_fmadd_ps(_mm256_loadu_ps((const float*)s->a + j),
                           _mm256_loadu_ps((const float*)s->b + j), acc);
}
static inline __m256 fnn_vstep_dotdev(__m256 acc, const fnn_sum_args* s, ptrdiff_t j) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps((const float*)s->a + j), _mm256_set1_ps((float)s->p));
    return _mm256_fmadd_ps(_mm256_loadu_ps((const float*)s->b + j), d, acc);
}
#endif

static inline double fnn_sum_f(const float* x, ptrdiff_t n) {
    fnn_sum_args s = {x, NULL, NULL, NULL, 0.0, 0.0};
    return fnn_float_sum_v(n, fnn_term_x_f, FNN_VSTEP(fnn_vstep_sum), &s);
}
static inline double fnn_sumsq_dev_f(const float* x, ptrdiff_t n, double c) {
    fnn_sum_args s = {x, NULL, NULL, NULL, c, 0.0};
    double t = fnn_float_sum_v(n, fnn_term_sqdev_f, FNN_VSTEP(fnn_vstep_sqdev), &s);
    if (!(t <= 1e300)) {
        /* a float square overflowed (|x - mean| > 1.8e19) or the row holds inf/NaN:
           redo the row in double (rare, so the fast path above stays float) */
        t = fnn_double_sum(n, fnn_term_sqdev_fd, &s);
    }
    return t;
}
static inline double fnn_dot_f(const float* x, const float* y, ptrdiff_t n) {
    fnn_sum_args s = {x, y, NULL, NULL, 0.0, 0.0};
    return fnn_float_sum_v(n, fnn_term_dot_f, FNN_VSTEP(fnn_vstep_dot), &s);
}
/* sum y (x - c) */
static inline double fnn_dot_dev_f(const float* x, const float* y, ptrdiff_t n, double c) {
    fnn_sum_args s = {x, y, NULL, NULL, c, 0.0};
    double t = fnn_float_sum_v(n, fnn_term_dotdev_f, FNN_VSTEP(fnn_vstep_dotdev), &s);
    if (!(fabs(t) <= 1e300))     /* a float product overflowed, or inf/NaN: redo in double */
        t = fnn_double_sum(n, fnn_term_dotdev_fd, &s);
    return t;
}
static inline double fnn_sum_d(const double* x, ptrdiff_t n) {
    fnn_sum_args s = {x, NULL, NULL, NULL, 0.0, 0.0};
    return fnn_double_sum(n, fnn_term_x_d, &s);
}
static inline double fnn_sumsq_dev_d(const double* x, ptrdiff_t n, double c) {
    fnn_sum_args s = {x, NULL, NULL, NULL, c, 0.0};
    return fnn_double_sum(n, fnn_term_sqdev_d, &s);
}
static inline double fnn_dot_d(const double* x, const double* y, ptrdiff_t n) {
    fnn_sum_args s = {x, y, NULL, NULL, 0.0, 0.0};
    return fnn_double_sum(n, fnn_term_dot_d, &s);
}
static inline double fnn_dot_dev_d(const double* x, const double* y, ptrdiff_t n, double c) {
    fnn_sum_args s = {x, y, NULL, NULL, c, 0.0};
    return fnn_double_sum(n, fnn_term_dotdev_d, &s);
}

/* max over 32 lanes; a NaN sticks in its lane (v > m is false for it, v != v true),
   so the result is NaN if any element is NaN; -inf for n == 0 */
#include <math.h>
/* fnn_max_d, and fnn_max_f where no vector form below replaces it (fnn_reduce_impl.h) */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define FNN_INSTANTIATE_ONLY_DOUBLE   /* fnn_max_f: the vector forms below */
#endif
#define FNN_TEMPLATE "fnn_reduce_impl.h"
#include "fnn_instantiate.h"
#if defined(__AVX512F__)
/* the same result on 16-lane max_ps with NaNs tracked in a mask on the side (max_ps(v, m)
   keeps m when v is NaN, so a NaN is remembered in `nan` instead); the maximum is exact,
   so any lane order gives the same value */
static inline float fnn_max_f(const float* x, ptrdiff_t n) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    __mmask16 nan = 0;
    ptrdiff_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512 v0 = _mm512_loadu_ps(x + j), v1 = _mm512_loadu_ps(x + j + 16);
        m0 = _mm512_max_ps(v0, m0); m1 = _mm512_max_ps(v1, m1);
        nan |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q);
    }
    if (nan) return NAN;
    float r = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
    for (; j < n; ++j) {
        float v = x[j];
        if (v != v) return v;
        r = v > r ? v : r;
    }
    return r;
}
#elif defined(__AVX2__) && defined(__FMA__)
/* the same result on max_ps (one operation a vector) with NaNs tracked on the side:
   max_ps(v, m) keeps m when v is NaN, so a NaN is remembered in `nan` instead */
static inline float fnn_max_f(const float* x, ptrdiff_t n) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    __m256 nan = _mm256_setzero_ps();
    ptrdiff_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256 v0 = _mm256_loadu_ps(x + j), v1 = _mm256_loadu_ps(x + j + 8);
        __m256 v2 = _mm256_loadu_ps(x + j + 16), v3 = _mm256_loadu_ps(x + j + 24);
        m0 = _mm256_max_ps(v0, m0); m1 = _mm256_max_ps(v1, m1);
        m2 = _mm256_max_ps(v2, m2); m3 = _mm256_max_ps(v3, m3);
        nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q),
                                             _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));
    }
    float m[8];
    _mm256_storeu_ps(m, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    if (_mm256_movemask_ps(nan)) return NAN;
    float r = -INFINITY;
    for (int k = 0; k < 8; ++k) r = m[k] > r ? m[k] : r;
    for (; j < n; ++j) {
        float v = x[j];
        if (v != v) return v;
        r = v > r ? v : r;
    }
    return r;
}
#endif
/* Sums with 8 double lanes throughout, for the conv / pool / batchnorm families
 * (fnn_cv_sum, fnn_cv_moments, fnn_cv_gsums, fnn_cv_dot, ...; _f / _d per input type):
 * the float sums above fold float lanes blockwise, these keep double lanes and add them
 * with fnn_tree8.  Batchnorm's statistics and the conv bias / depthwise gradients are
 * defined by this order; it depends only on n (same results at any thread count). */
#if defined(__AVX512F__)
/* fnn_cv_moments / fnn_cv_gsums for float input on one zmm of 8 double lanes per sum:
   lane k takes elements k, k + 8, ... in order, as the plain loops of fnn_reduce8_t.h do,
   and the tail goes to lanes 0 .. n % 8 - 1 (masked).  GCC compiled the plain loops
   into element-by-element conversions: batchnorm's statistics passes ran at a fifth of
   its elementwise passes' bytes per second on a Xeon (fwd+bwd 16x64x112x112: 1.46x
   torch's time).  Each lane is one add chain (4 cycles per 8 elements): ~30 GB/s of
   float input per core. */
/* the pair of sums over u = g (grad) or d (not grad), d = x - c: sum(u) and sum(u * d) */
static inline __attribute__((always_inline)) void fnn_cv_pair_z(
        const float* g, const float* x, ptrdiff_t n, double c, double* s, double* p,
        const int grad) {
    __m512d a = _mm512_setzero_pd(), b = a, cv = _mm512_set1_pd(c);
    ptrdiff_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), cv);
        __m512d u = grad ? _mm512_cvtps_pd(_mm256_loadu_ps(g + j)) : d;
        a = _mm512_add_pd(a, u);
        b = _mm512_fmadd_pd(u, d, b);
    }
    if (j < n) {
        __mmask8 m = (__mmask8)((1u << (n - j)) - 1u);
        __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + j)), cv);
        __m512d u = grad ? _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, g + j)) : d;
        a = _mm512_mask_add_pd(a, m, a, u);
        b = _mm512_mask3_fmadd_pd(u, d, b, m);
    }
    double t[8];
    _mm512_storeu_pd(t, a);
    *s = fnn_tree8(t);
    _mm512_storeu_pd(t, b);
    *p = fnn_tree8(t);
}
static inline void fnn_cv_moments_z(const float* x, ptrdiff_t n, double c, double* s,
                                    double* q) {
    fnn_cv_pair_z(NULL, x, n, c, s, q, 0);
}
static inline void fnn_cv_gsums_z(const float* g, const float* x, ptrdiff_t n, double c,
                                  double* s, double* p) {
    fnn_cv_pair_z(g, x, n, c, s, p, 1);
}
#define FNN_HAVE_CV_Z 1
#endif
#define FNN_TEMPLATE "fnn_reduce8_t.h"
#include "fnn_instantiate.h"
#endif
