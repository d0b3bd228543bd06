/* A thread's first BLAS call, made safe under memory pressure (fnn_gemm.pxi).
 *
 * OpenBLAS (NumPy's and SciPy's builds) gives every thread that calls a GEMM past its
 * small-matrix size its own work buffer: a mapping of 32 MiB, and a thread-local table
 * that the C library allocates at the thread's first use (about 140 KiB).  Both are
 * taken at that first call and kept for the thread's life.  When either cannot be had,
 * OpenBLAS retries and then ends the process (exit(1): "Memory allocation still failed
 * after 10 retries"), or the C library aborts ("cannot allocate memory for thread-local
 * data") -- no error a caller could turn into MemoryError.  Under an address-space
 * limit (RLIMIT_AS, RLIMIT_DATA) close to current use that is what an OpenMP worker's
 * first tile GEMM did.
 *
 * So each thread, before its first BLAS call through a module, makes sure there is room:
 * it maps FNN_BLAS_ROOM bytes (untouched: address space only) and unmaps them, then runs
 * one GEMM large enough to take the buffer (FNN_BLAS_WARM^3), and only then counts as
 * ready.  No room, or no scratch for that GEMM: the caller reports MemoryError and BLAS
 * is not called.  The check and the warm-up run under one lock, so two threads' first
 * calls do not both count the same free space.  Each extension module keeps its own
 * flags (static): at most one warm-up per module per thread per library.  Left open: an
 * allocation by another thread between the check and BLAS's own (microseconds).
 * Plain C, no Python. */
#ifndef FNN_BLAS_GUARD_H
#define FNN_BLAS_GUARD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

/* 4x the 32 MiB buffer (plus its table) that the OpenBLAS builds NumPy and SciPy ship
 * map, for builds with a larger buffer and for the scratch of the other threads' work:
 * a MemoryError a little early beats an exit. */
#define FNN_BLAS_ROOM ((size_t)128 << 20)
/* Past OpenBLAS's small-matrix path (which takes no buffer): seen to start between 100^3
 * and 128^3 on its SkylakeX kernels. */
#define FNN_BLAS_WARM 192

enum { FNN_BLAS_NUMPY = 0, FNN_BLAS_SCIPY = 1 };

/* A thread's ready flags (bit lib) live under a pthread key, not in a __thread variable:
 * the C library allocates a loaded module's thread-local block at a thread's first touch
 * and aborts when it cannot; pthread_getspecific allocates nothing, and a failed
 * pthread_setspecific only means the next call checks again. */
static pthread_key_t fnn_blas_key;
static pthread_once_t fnn_blas_once = PTHREAD_ONCE_INIT;
static int fnn_blas_key_ok = 0;
static pthread_mutex_t fnn_blas_lock_ = PTHREAD_MUTEX_INITIALIZER;

static void fnn_blas_make_key(void) { fnn_blas_key_ok = pthread_key_create(&fnn_blas_key, NULL) == 0; }

static inline int fnn_blas_ready(int lib)
{
    pthread_once(&fnn_blas_once, fnn_blas_make_key);
    return fnn_blas_key_ok && (((uintptr_t)pthread_getspecific(fnn_blas_key) >> lib) & 1);
}

static inline void fnn_blas_set_ready(int lib)
{
    if (fnn_blas_key_ok)
        pthread_setspecific(fnn_blas_key, (void *)((uintptr_t)pthread_getspecific(fnn_blas_key)
                                                   | ((uintptr_t)1 << lib)));
}

static inline void fnn_blas_lock(void) { pthread_mutex_lock(&fnn_blas_lock_); }
static inline void fnn_blas_unlock(void) { pthread_mutex_unlock(&fnn_blas_lock_); }

/* 1 when FNN_BLAS_ROOM bytes of address space can be mapped now (writable and private,
 * so a commit limit counts them too; never touched, so no memory is used), else 0. */
static inline int fnn_blas_room(void)
{
    void *p = mmap(NULL, FNN_BLAS_ROOM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, FNN_BLAS_ROOM);
    return 1;
}

#endif
