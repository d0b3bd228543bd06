/* Layer-norm row kernels (one row of D contiguous elements), written in C so the
 * reductions keep 8 independent lanes and vectorise (see fnn_reduce.h).
 * Statistics in double; the elementwise passes in the input precision. */
#ifndef FNN_NORM_H
#define FNN_NORM_H
#include <math.h>
#include <stddef.h>
#include "fnn_reduce.h"
#include "fnn_stream.h"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* rows of up to this many elements are normalised into a stack buffer and streamed
   out when the caller asks for non-temporal stores (a large output, fnn_stream.h) */
#define FNN_LN_ROWBUF 4096

/* A block's 32 lanes (fnn_ln_bwd_sums) in double, in a fixed tree: lanes k, k + 8,
   k + 16, k + 24 first, then fnn_tree8 -- the same bits in every build.  Adding them one
   by one was a chain of 32 scalar conversions and adds per sum, ~60% of the row's time
   at D = 128 (perf); GCC leaves the tree scalar too, so the float form is written in
   AVX-512 where the build has it. */
static inline double fnn_ln_fold32_d(const double* a) {
    double s[8];
    for (int k = 0; k < 8; ++k)
        s[k] = (a[k] + a[k + 8]) + (a[k + 16] + a[k + 24]);
    return fnn_tree8(s);
}
static inline double fnn_ln_fold32_f(const float* a) {
    double s[8];
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    const __m512 lo = _mm512_loadu_ps(a), hi = _mm512_loadu_ps(a + 16);
    const __m512d s0 = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(lo)),
                                     _mm512_cvtps_pd(_mm512_extractf32x8_ps(lo, 1)));
    const __m512d s1 = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(hi)),
                                     _mm512_cvtps_pd(_mm512_extractf32x8_ps(hi, 1)));
    _mm512_storeu_pd(s, _mm512_add_pd(s0, s1));
#else
    for (int k = 0; k < 8; ++k)
        s[k] = ((double)a[k] + (double)a[k + 8]) + ((double)a[k + 16] + (double)a[k + 24]);
#endif
    return fnn_tree8(s);
}

#define FNN_TEMPLATE "fnn_norm_impl.h"
#include "fnn_instantiate.h"
#endif
