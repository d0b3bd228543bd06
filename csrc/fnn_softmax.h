/* Softmax row kernels over n contiguous elements (the inner == 1 case).
 *
 * Forward: max; e = exp(x - max) into y with the sum in 32 float lanes (fnn_reduce.h's
 * lane structure, blocks folded in double), the next row prefetched meanwhile; then
 * y *= 1 / sum (or y = x - lse for log-softmax).  The exponentials are fnn_expf_nonpos
 * (x - max <= 0), 16 lanes at a time with AVX-512, 8 with AVX2+FMA.  Backward: memory-bound, so a large
 * d_input (`stream`, chosen by the caller) goes out with non-temporal stores
 * (fnn_stream.h): no read-for-ownership of every output line. */
#ifndef FNN_SOFTMAX_H
#define FNN_SOFTMAX_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "fnn_math.h"
#include "fnn_reduce.h"
#include "fnn_stream.h"

/* rows up to this many elements use a stack buffer for the streamed backward */
#define FNN_SM_ROWBUF 4096

/* e[j] = exp(x[j] - m) (stored when e != NULL; e == x is allowed: in place); returns
   sum_j e[j], 32 float lanes per block of FNN_BLOCK folded in double -- the same sum
   fnn_sum_f(e, n) would give.  pf: a row to prefetch meanwhile (NULL: none). */
static inline double fnn_exp_shift_sum_f(const float* x, float m, float* e, ptrdiff_t n,
                                         const float* pf) {
    double total = 0.0;
    for (ptrdiff_t b0 = 0; b0 < n; b0 += FNN_BLOCK) {
        ptrdiff_t b1 = b0 + FNN_BLOCK < n ? b0 + FNN_BLOCK : n;
        float a[32] = {0};
        ptrdiff_t j = b0;
#if defined(FNN_HAVE_AVX512)
        /* two 16-lane accumulators hold the same 32 lanes as the AVX2 path's four:
           the same sums, bit for bit */
        __m512 vm = _mm512_set1_ps(m);
        __m512 s0 = _mm512_setzero_ps(), s1 = s0;
        for (; j + 32 <= b1; j += 32) {
            if (pf) { __builtin_prefetch(pf + j); __builtin_prefetch(pf + j + 16); }
            __m512 e0 = fnn_exp_nonpos_ps16(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm));
            __m512 e1 = fnn_exp_nonpos_ps16(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vm));
            s0 = _mm512_add_ps(s0, e0); s1 = _mm512_add_ps(s1, e1);
            if (e) { _mm512_storeu_ps(e + j, e0); _mm512_storeu_ps(e + j + 16, e1); }
        }
        _mm512_storeu_ps(a, s0); _mm512_storeu_ps(a + 16, s1);
#elif defined(FNN_HAVE_AVX2)
        __m256 vm = _mm256_set1_ps(m);
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (; j + 32 <= b1; j += 32) {
            if (pf) { __builtin_prefetch(pf + j); __builtin_prefetch(pf + j + 16); }
            __m256 e0 = fnn_exp_nonpos_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
            __m256 e1 = fnn_exp_nonpos_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vm));
            __m256 e2 = fnn_exp_nonpos_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j + 16), vm));
            __m256 e3 = fnn_exp_nonpos_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j + 24), vm));
            s0 = _mm256_add_ps(s0, e0); s1 = _mm256_add_ps(s1, e1);
            s2 = _mm256_add_ps(s2, e2); s3 = _mm256_add_ps(s3, e3);
            if (e) {
                _mm256_storeu_ps(e + j, e0); _mm256_storeu_ps(e + j + 8, e1);
                _mm256_storeu_ps(e + j + 16, e2); _mm256_storeu_ps(e + j + 24, e3);
            }
        }
        _mm256_storeu_ps(a, s0); _mm256_storeu_ps(a + 8, s1);
        _mm256_storeu_ps(a + 16, s2); _mm256_storeu_ps(a + 24, s3);
#else
        if (e) {
            for (; j + 32 <= b1; j += 32)
                for (int k = 0; k < 32; ++k) { float v = fnn_expf_nonpos(x[j + k] - m); e[j + k] = v; a[k] += v; }
        } else {
            for (; j + 32 <= b1; j += 32)
                for (int k = 0; k < 32; ++k) a[k] += fnn_expf_nonpos(x[j + k] - m);
        }
#endif
        for (; j < b1; ++j) {
            float v = fnn_expf_nonpos(x[j] - m);
            if (e) e[j] = v;
            a[j & 31] += v;
        }
#if defined(FNN_HAVE_AVX2)
        total += fnn_fold32_avx(a);
#else
        total += fnn_fold32(a);
#endif
    }
    return total;
}

/* one float row; next: a row to prefetch meanwhile (NULL: none).  The row is bound by
   the exponentials, not by memory, so y gets plain stores and stays in cache. */
static inline void fnn_softmax_row_f(const float* restrict x, float* restrict y, ptrdiff_t n,
                                     int logsm, const float* next) {
    float m = fnn_max_f(x, n);
    ptrdiff_t j;
    if (logsm) {
        double s = fnn_exp_shift_sum_f(x, m, NULL, n, next);
        float lse = (float)((double)m + log(s));
        for (j = 0; j < n; ++j) y[j] = x[j] - lse;
    } else {
        double s = fnn_exp_shift_sum_f(x, m, y, n, next);
        float inv = (float)(1.0 / s);
        for (j = 0; j < n; ++j) y[j] *= inv;
    }
}

/* double rows: libm exp, the accuracy path */
static inline void fnn_softmax_row_d(const double* x, double* y, ptrdiff_t n, int logsm) {
    double m = fnn_max_d(x, n);
    ptrdiff_t j;
    for (j = 0; j < n; ++j) y[j] = exp(x[j] - m);
    double s = fnn_sum_d(y, n);
    if (logsm) {
        double lse = m + log(s);
        for (j = 0; j < n; ++j) y[j] = x[j] - lse;
    } else {
        double inv = 1.0 / s;
        for (j = 0; j < n; ++j) y[j] *= inv;
    }
}

/* the exp of the log-softmax backward, per type: fnn_expf_nonpos (y <= 0), libm exp */
static inline float fnn_s_exp_f(float v) { return fnn_expf_nonpos(v); }
static inline double fnn_s_exp_d(double v) { return exp(v); }

#define FNN_TEMPLATE "fnn_softmax_impl.h"
#include "fnn_instantiate.h"
#endif
