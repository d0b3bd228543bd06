/* Column sums for bias gradients (fnn_colsum_t.h), for float (_f) and double (_d). */
#ifndef FNN_COLSUM_H
#define FNN_COLSUM_H
#include <stddef.h>
#define FNN_TEMPLATE "fnn_colsum_t.h"
#include "fnn_instantiate.h"
#endif /* FNN_COLSUM_H */
