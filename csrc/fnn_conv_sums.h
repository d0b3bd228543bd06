/* Sums for the conv / pool / batchnorm families (csrc/{conv,pool,batchnorm}.pyx).
 *
 * Without -ffast-math a single accumulator is a serial chain the compiler may not
 * reorder, so each reduction keeps 8 independent double lanes (the compiler maps them
 * onto vector registers) and adds them in a fixed tree.  The order depends only on n,
 * so results are the same at any thread count.  (fnn_reduce.h's float sums fold float
 * lanes blockwise; these keep double lanes throughout, and batchnorm's statistics and
 * the conv bias / depthwise gradients are defined by this order.) */
#ifndef FNN_CONV_SUMS_H
#define FNN_CONV_SUMS_H
#include <stddef.h>

/* the 8 lanes added in a fixed tree */
static inline double fnn_cv_tree(const double* a) {
    return (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
}

#define FNN_TEMPLATE "fnn_conv_sums_t.h"
#include "fnn_instantiate.h"
#endif
