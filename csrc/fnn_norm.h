/* Layer-norm row kernels (one row of D contiguous elements), written in C so the
 * reductions keep 8 independent lanes and vectorise (see fnn_reduce.h).
 * Statistics in double; the elementwise passes in the input precision. */
#ifndef FNN_NORM_H
#define FNN_NORM_H
#include <math.h>
#include <stddef.h>
#include "fnn_reduce.h"
#include "fnn_stream.h"

/* rows of up to this many elements are normalised into a stack buffer and streamed
   out when the caller asks for non-temporal stores (a large output, fnn_stream.h) */
#define FNN_LN_ROWBUF 4096

/* A block's 32 lanes (fnn_ln_bwd_sums) in double, in a fixed tree: fnn_reduce.h's folds
   (fnn_fold32_avx, vector adds, in the AVX2 builds, as the softmax's sums).  Adding them
   one by one was a chain of 32 scalar conversions and adds per sum, ~60% of the row's
   time at D = 128 (perf). */
static inline double fnn_ln_fold32_f(const float* a) {
#if defined(__AVX2__) && defined(__FMA__)
    return fnn_fold32_avx(a);
#else
    return fnn_fold32(a);
#endif
}
static inline double fnn_ln_fold32_d(const double* a) {
    return (fnn_tree8(a) + fnn_tree8(a + 8)) + (fnn_tree8(a + 16) + fnn_tree8(a + 24));
}

#define FNN_TEMPLATE "fnn_norm_impl.h"
#include "fnn_instantiate.h"
#endif
