/* Checked allocation for every compiled kernel (one helper, used at every site).
 *
 * fnn_alloc / fnn_calloc return NULL when the request fails *or* when n * size overflows
 * size_t (a wrapped product would hand back a too-small buffer).  Callers never
 * dereference a NULL:
 *   - Python-facing code (the GIL can be taken) uses fnn_runtime.pxi's _alloc / _calloc,
 *     which raise MemoryError;
 *   - inside an OpenMP region a thread that gets NULL records it with fnn_flag_set,
 *     skips its share of the work (every thread still reaches each worksharing loop, so
 *     the team's barriers match), frees what it holds, and the caller raises MemoryError
 *     after the region (fnn_runtime.pxi's _raise_nomem).
 * Plain C, no Python: the family sources include it unchanged.
 */
#ifndef FNN_ALLOC_H
#define FNN_ALLOC_H

#include <stdint.h>
#include <stdlib.h>

/* Fault injection for the tests (tests/test_process.py): while >= 0, counts allocations
 * down, and the one that takes it to -1 fails -- so a test can fail every allocation site
 * of an op in turn, inside parallel regions too.  -1 (off) costs one load per call. */
static int fnn_alloc_countdown = -1;

static inline int fnn_alloc_injected_failure(void)
{
    if (__atomic_load_n(&fnn_alloc_countdown, __ATOMIC_RELAXED) < 0)
        return 0;
    return __atomic_sub_fetch(&fnn_alloc_countdown, 1, __ATOMIC_RELAXED) == -1;
}

static inline void *fnn_alloc(size_t n, size_t size)
{
    size_t bytes;
    if (fnn_alloc_injected_failure())
        return NULL;
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    bytes = n * size;
    /* malloc(0) may return NULL on success; ask for one byte so NULL always means failure */
    return malloc(bytes != 0 ? bytes : 1);
}

/* fnn_alloc without the fault injection: for a buffer a thread takes once and keeps (the
 * own GEMM's per-thread packing buffer).  Which thread first takes such a buffer depends
 * on scheduling; counted among the injection sites, it made the countdown fire in one run
 * and not in the next.  A real failure is still reported (MemoryError, fnn_gemm.pxi). */
static inline void *fnn_alloc_uncounted(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    return malloc(n * size != 0 ? n * size : 1);
}

static inline void *fnn_calloc(size_t n, size_t size)
{
    if (fnn_alloc_injected_failure())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);   /* calloc checks n * size itself */
}

/* Record a failure seen by one thread of a team (every writer stores 1). */
static inline void fnn_flag_set(int *flag)
{
    __atomic_store_n(flag, 1, __ATOMIC_RELAXED);
}

static inline int fnn_flag_get(const int *flag)
{
    return __atomic_load_n(flag, __ATOMIC_RELAXED);
}

#endif
