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
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif
#include "fnn_cache.h"
#include "fnn_math.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Outputs at least this large are written with non-temporal stores: 16 MiB, or half the
   last-level cache where that is more.  A streamed output skips the cache, so the next
   kernel reads it from memory; that pays only when input and output together overflow
   the cache anyway.  With a 32 MiB L3 (the Zen 4 machine) half is 16 MiB, and a
   (8192, 768) layer_norm forward (25 MiB in, 25 MiB out) streams; with a 480 MiB L3 (a
   Xeon) the same call keeps its output in cache, and streaming it made the call twice as
   slow as torch's (1.79 vs 0.93 ms, 2 threads; 0.97 ms with plain stores).  The cache
   size comes from fnn_cache.h (cpu0's sysfs entries, else sysconf: on a Zen 3 VM
   glibc's sysconf said 256 MiB for a 32 MiB L3, sysfs 32768K, which kept that
   layer_norm's output in cache at 1.82-1.96 ms instead of 1.66-1.70 streamed, torch
   1.95-2.2).  Read once per module, outside the parallel regions. */
/* the last-level cache in bytes (sysfs, else sysconf), 0 where unknown */
static inline ptrdiff_t fnn_llc_bytes(void) { return fnn_cache_bytes(0); }
static ptrdiff_t fnn_stream_min_cached = 0;   /* one per extension module */
static inline ptrdiff_t fnn_stream_min_bytes(void) {
    if (fnn_stream_min_cached == 0) {
        ptrdiff_t t = (ptrdiff_t)16 << 20, llc = fnn_llc_bytes();
        if (llc / 2 > t) t = llc / 2;
        fnn_stream_min_cached = t;
    }
    return fnn_stream_min_cached;
}
/* set the threshold (tests: both store paths on any machine); n <= 0 restores the
   default; returns the previous threshold */
static inline ptrdiff_t fnn_stream_set_min_bytes(ptrdiff_t n) {
    ptrdiff_t old = fnn_stream_min_bytes();
    fnn_stream_min_cached = n > 0 ? n : 0;
    return old;
}
#define FNN_STREAM_BYTES (fnn_stream_min_bytes())
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
   end, another thread reading the output): once per thread, after its last streamed row.
   A fence drains the write-combining buffers; one after every row (3 KiB) made the
   streamed (65536, 768) layer_norm forward 15.6 ms instead of 7.2 (plain stores 10.6) on a
   2-core Zen 5 VM. */
static inline void fnn_stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

#endif
