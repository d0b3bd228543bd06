/* Row reductions for the hot loops: sums, dot products, maxima over contiguous data.
 *
 * A single accumulator makes a serial chain the compiler may not reorder (no
 * -ffast-math), so each reduction keeps many independent lanes -- the compiler turns
 * them into several vector registers, hiding the add latency -- and folds the lanes in
 * a fixed tree at the end.  The order depends only on n, so results are identical at
 * any thread count. */
#ifndef FNN_REDUCE_H
#define FNN_REDUCE_H
#include <stddef.h>

#define FNN_LANES 8
#define FNN_TREE(a) ((((a)[0] + (a)[1]) + ((a)[2] + (a)[3])) + (((a)[4] + (a)[5]) + ((a)[6] + (a)[7])))

/* float: 32 float lanes (4 vector accumulators hide the add latency) over blocks of
   FNN_BLOCK elements, each block's lanes folded into a double total -- float speed,
   double accuracy (a lane never holds more than FNN_BLOCK/32 terms).
   double: 16 double lanes. */
#define FNN_BLOCK 512
#define FNN_FOLD32(a) (((((double)(a)[0] + (a)[1]) + ((double)(a)[2] + (a)[3])) + (((double)(a)[4] + (a)[5]) + ((double)(a)[6] + (a)[7]))) \
    + ((((double)(a)[8] + (a)[9]) + ((double)(a)[10] + (a)[11])) + (((double)(a)[12] + (a)[13]) + ((double)(a)[14] + (a)[15])))) \
    + (((((double)(a)[16] + (a)[17]) + ((double)(a)[18] + (a)[19])) + (((double)(a)[20] + (a)[21]) + ((double)(a)[22] + (a)[23]))) \
    + ((((double)(a)[24] + (a)[25]) + ((double)(a)[26] + (a)[27])) + (((double)(a)[28] + (a)[29]) + ((double)(a)[30] + (a)[31]))))

/* EXPR(i) is the term for element i; the block/lane structure is shared by all float sums */
#define FNN_FLOAT_SUM(n, EXPR, total)                                                     \
    do {                                                                                 \
        ptrdiff_t _b0;                                                                   \
        total = 0.0;                                                                     \
        for (_b0 = 0; _b0 < (n); _b0 += FNN_BLOCK) {                                     \
            ptrdiff_t _b1 = _b0 + FNN_BLOCK < (n) ? _b0 + FNN_BLOCK : (n);                \
            float _a[32] = {0};                                                          \
            ptrdiff_t _j = _b0;                                                          \
            for (; _j + 32 <= _b1; _j += 32)                                             \
                for (int _k = 0; _k < 32; ++_k) { ptrdiff_t i = _j + _k; _a[_k] += (EXPR); } \
            for (; _j < _b1; ++_j) { ptrdiff_t i = _j; _a[_j & 31] += (EXPR); }           \
            total += FNN_FOLD32(_a);                                                     \
        }                                                                                \
    } while (0)

/* FNN_FLOAT_SUM with the 32-element steps on four AVX2 accumulators: VSTEP(acc, j)
   adds the vector term of elements j .. j+7 into the __m256 acc.  The same lanes hold
   the same terms as in FNN_FLOAT_SUM (lane k: the elements = k mod 32 of the block),
   so the two give the same sum; this one keeps the lanes in registers (no zeroed
   array per block: it matters for short rows). */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* FNN_FOLD32 on vectors: the 32 lanes widened to double and added as a tree of
   4-lane vectors (~20 operations instead of 63 scalar ones -- it matters for short
   rows).  The tree differs from FNN_FOLD32's, so the last bits of a double total may
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
#define FNN_FLOAT_SUM_V(n, EXPR, VSTEP, total)                                            \
    do {                                                                                 \
        ptrdiff_t _b0;                                                                   \
        total = 0.0;                                                                     \
        for (_b0 = 0; _b0 < (n); _b0 += FNN_BLOCK) {                                     \
            ptrdiff_t _b1 = _b0 + FNN_BLOCK < (n) ? _b0 + FNN_BLOCK : (n);                \
            float _a[32];                                                                \
            __m256 _s0 = _mm256_setzero_ps(), _s1 = _s0, _s2 = _s0, _s3 = _s0;           \
            ptrdiff_t _j = _b0;                                                          \
            for (; _j + 32 <= _b1; _j += 32) {                                           \
                VSTEP(_s0, _j); VSTEP(_s1, _j + 8); VSTEP(_s2, _j + 16); VSTEP(_s3, _j + 24); \
            }                                                                            \
            _mm256_storeu_ps(_a, _s0); _mm256_storeu_ps(_a + 8, _s1);                    \
            _mm256_storeu_ps(_a + 16, _s2); _mm256_storeu_ps(_a + 24, _s3);              \
            for (; _j < _b1; ++_j) { ptrdiff_t i = _j; _a[_j & 31] += (EXPR); }           \
            total += fnn_fold32_avx(_a);                                                        \
        }                                                                                \
    } while (0)
#define FNN_VSTEP_SUM(acc, j) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + (j)))
#define FNN_VSTEP_SQDEV(acc, j) do { __m256 _d = _mm256_sub_ps(_mm256_loadu_ps(x + (j)), _vc); \
                                     acc = _mm256_fmadd_ps(_d, _d, acc); } while (0)
#define FNN_VSTEP_DOT(acc, j) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + (j)), _mm256_loadu_ps(y + (j)), acc)
#define FNN_SUM_F(n, EXPR, VSTEP, total) FNN_FLOAT_SUM_V(n, EXPR, VSTEP, total)
#else
#define FNN_SUM_F(n, EXPR, VSTEP, total) FNN_FLOAT_SUM(n, EXPR, total)
#endif

#define FNN_DOUBLE_SUM(n, EXPR, total)                                                    \
    do {                                                                                 \
        double _a[16] = {0};                                                             \
        ptrdiff_t _j = 0;                                                                \
        for (; _j + 16 <= (n); _j += 16)                                                 \
            for (int _k = 0; _k < 16; ++_k) { ptrdiff_t i = _j + _k; _a[_k] += (EXPR); } \
        for (; _j < (n); ++_j) { ptrdiff_t i = _j; _a[_j & 15] += (EXPR); }               \
        total = FNN_TREE(_a) + FNN_TREE(_a + 8);                                         \
    } while (0)

static inline double fnn_sum_f(const float* x, ptrdiff_t n) {
    double t; FNN_SUM_F(n, x[i], FNN_VSTEP_SUM, t); return t;
}
static inline double fnn_sumsq_dev_f(const float* x, ptrdiff_t n, double c) {
    /* the deviations are formed in float: x and c = mean are within the row's range */
    float cf = (float)c; double t;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 _vc = _mm256_set1_ps(cf);
#endif
    FNN_SUM_F(n, (x[i] - cf) * (x[i] - cf), FNN_VSTEP_SQDEV, t);
    if (!(t <= 1e300)) {
        /* a float square overflowed (|x - mean| > 1.8e19) or the row holds inf/NaN:
           redo the row in double (rare, so the fast path above stays float) */
        FNN_DOUBLE_SUM(n, ((double)x[i] - c) * ((double)x[i] - c), t);
    }
    return t;
}
static inline double fnn_dot_f(const float* x, const float* y, ptrdiff_t n) {
    double t; FNN_SUM_F(n, x[i] * y[i], FNN_VSTEP_DOT, t); return t;
}
static inline double fnn_sum_d(const double* x, ptrdiff_t n) {
    double t; FNN_DOUBLE_SUM(n, x[i], t); return t;
}
static inline double fnn_sumsq_dev_d(const double* x, ptrdiff_t n, double c) {
    double t; FNN_DOUBLE_SUM(n, (x[i] - c) * (x[i] - c), t); return t;
}
static inline double fnn_dot_d(const double* x, const double* y, ptrdiff_t n) {
    double t; FNN_DOUBLE_SUM(n, x[i] * y[i], t); return t;
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
#endif
