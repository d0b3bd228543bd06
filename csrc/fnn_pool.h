/* Pooling rows for csrc/pool.pyx: max pooling (2x2 stride-2 fast path, one tap at a
 * time otherwise, torch's NaN rule) and average pooling as two separable passes.  The
 * per-type code is in fnn_pool_t.h. */
#ifndef FNN_POOL_H
#define FNN_POOL_H
#include <stddef.h>
#include <stdint.h>

#define FNN_TEMPLATE "fnn_pool_t.h"
#include "fnn_instantiate.h"
#endif
