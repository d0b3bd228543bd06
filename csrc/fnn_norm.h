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

#define FNN_TEMPLATE "fnn_norm_impl.h"
#include "fnn_instantiate.h"
#endif
