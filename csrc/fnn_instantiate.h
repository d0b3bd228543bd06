/* One template, instantiated for float and double: the include boilerplate of the
 * per-type headers (fnn_conv_t.h, fnn_pool_t.h, fnn_reduce8_t.h, fnn_norm_impl.h,
 * fnn_reduce_impl.h, fnn_softmax_impl.h, fnn_loss_t.h) written once.  Usage:
 *
 *     #define FNN_TEMPLATE "fnn_pool_t.h"
 *     #include "fnn_instantiate.h"
 *
 * The template is included twice, with FNN_T float / FNN_TNAME(name) name##_f and then
 * FNN_T double / FNN_TNAME(name) name##_d; FNN_TEMPLATE is undefined afterwards.
 * FNN_INSTANTIATE_ONLY_DOUBLE (defined by the includer) skips the float copy, for a
 * header that has its own float form.  No include guard, by design. */
#ifndef FNN_TEMPLATE
#error "fnn_instantiate.h: define FNN_TEMPLATE (the per-type header) first"
#endif
#ifndef FNN_INSTANTIATE_ONLY_DOUBLE
#define FNN_T float
#define FNN_TNAME(name) name##_f
#include FNN_TEMPLATE
#undef FNN_T
#undef FNN_TNAME
#endif
#define FNN_T double
#define FNN_TNAME(name) name##_d
#include FNN_TEMPLATE
#undef FNN_T
#undef FNN_TNAME
#undef FNN_TEMPLATE
#undef FNN_INSTANTIATE_ONLY_DOUBLE
