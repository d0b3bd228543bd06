/* Non-temporal (streaming) stores for large outputs.
 *
 * An output much larger than the caches is written to memory anyway; ordinary stores
 * first read every output line in (read-for-ownership), streaming stores do not: a
 * kernel that reads one array and writes another moves a third fewer bytes.  Kernels
 * stream only outputs of at least FNN_STREAM_BYTES (a small output is better left in
 * cache for the next layer) and end each thread's streamed writes with
 * fnn_stream_fence().  Alignment is handled here (a scalar head up to the vector
 * boundary), so any pointer works. */
#ifndef FNN_STREAM_H
#define FNN_STREAM_H
#include <stddef.h>
#include <stdint.h>
#include "fnn_math.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* outputs at least this large are written with non-temporal stores */
#define FNN_STREAM_BYTES ((ptrdiff_t)16 << 20)
/* y[0:n] = src[0:n], the aligned body with non-temporal stores */
static inline void fnn_stream_copy_f(float* restrict y, const float* restrict src, ptrdiff_t n) {
    ptrdiff_t j = 0;
#if defined(FNN_HAVE_AVX512)
    for (; j < n && ((uintptr_t)(y + j) & 63); ++j) y[j] = src[j];
    for (; j + 16 <= n; j += 16) _mm512_stream_ps(y + j, _mm512_loadu_ps(src + j));
#elif defined(FNN_HAVE_AVX2)
    for (; j < n && ((uintptr_t)(y + j) & 31); ++j) y[j] = src[j];
    for (; j + 8 <= n; j += 8) _mm256_stream_ps(y + j, _mm256_loadu_ps(src + j));
#elif defined(__SSE2__)
    for (; j < n && ((uintptr_t)(y + j) & 15); ++j) y[j] = src[j];
    for (; j + 4 <= n; j += 4) _mm_stream_ps(y + j, _mm_loadu_ps(src + j));
#endif
    for (; j < n; ++j) y[j] = src[j];
}

static inline void fnn_stream_copy_d(double* restrict y, const double* restrict src, ptrdiff_t n) {
    ptrdiff_t j = 0;
#if defined(FNN_HAVE_AVX512)
    for (; j < n && ((uintptr_t)(y + j) & 63); ++j) y[j] = src[j];
    for (; j + 8 <= n; j += 8) _mm512_stream_pd(y + j, _mm512_loadu_pd(src + j));
#elif defined(FNN_HAVE_AVX2)
    for (; j < n && ((uintptr_t)(y + j) & 31); ++j) y[j] = src[j];
    for (; j + 4 <= n; j += 4) _mm256_stream_pd(y + j, _mm256_loadu_pd(src + j));
#elif defined(__SSE2__)
    for (; j < n && ((uintptr_t)(y + j) & 15); ++j) y[j] = src[j];
    for (; j + 2 <= n; j += 2) _mm_stream_pd(y + j, _mm_loadu_pd(src + j));
#endif
    for (; j < n; ++j) y[j] = src[j];
}

/* order this thread's non-temporal stores before whatever follows (a parallel region's
   end, another thread reading the output) */
static inline void fnn_stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

#endif
