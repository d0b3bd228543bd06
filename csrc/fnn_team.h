/* A thread's first parallel region, made safe under memory pressure (fnn_runtime.pxi).
 *
 * GNU OpenMP gives every thread that starts a parallel region its own pool of workers,
 * created at that thread's first region of a given size and kept for its life; each
 * worker is a pthread with its own stack (OMP_STACKSIZE / GOMP_STACKSIZE, else the C
 * library's default: RLIMIT_STACK at start-up, 8 MiB on most Linux systems).  When a
 * worker cannot be created, libgomp ends the process ("libgomp: Thread creation failed:
 * Resource temporarily unavailable", exit 1) -- no error a caller could catch.  Under an
 * address-space limit (RLIMIT_AS) close to current use that is what a Python thread's
 * first kernel call did (a request handler in a thread pool, a dask worker thread).
 *
 * So before a calling thread starts a region of n threads larger than any it has started
 * before, fnn_max_threads makes sure the workers' stacks fit: it maps (n - 1) stacks plus
 * a margin (untouched: address space only) and unmaps them.  No room: the call runs on
 * the calling thread alone (every kernel is correct on one thread), and the next call
 * checks again.  The check runs under a lock, so two threads' first regions do not both
 * count the same free space.  Left open, as for BLAS (fnn_blas_guard.h): an allocation
 * by another thread between the check and libgomp's own (microseconds).
 *
 * The per-thread record -- the largest team checked, and the generation of
 * fastnn.set_num_threads this thread has applied -- lives under a pthread key, not in a
 * __thread variable: the C library allocates a loaded module's thread-local block at a
 * thread's first touch and aborts when it cannot; pthread_getspecific allocates nothing,
 * and a failed pthread_setspecific only means the next call checks again.
 * Plain C, no Python. */
#ifndef FNN_TEAM_H
#define FNN_TEAM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* per worker beyond its stack (guard page, thread control block, static TLS), and once
 * per team (libgomp's team structures, a new malloc arena's first heap) -- generous */
#define FNN_TEAM_PER_THREAD ((size_t)1 << 20)
#define FNN_TEAM_MARGIN ((size_t)4 << 20)
#define FNN_TEAM_DEFAULT_STACK ((size_t)8 << 20)
/* bits of the record that hold the team size checked; the rest: the generation */
#define FNN_TEAM_BITS 16
#define FNN_TEAM_MASK (((uintptr_t)1 << FNN_TEAM_BITS) - 1)

static pthread_key_t fnn_team_key;
static pthread_once_t fnn_team_once = PTHREAD_ONCE_INIT;
static int fnn_team_key_ok = 0;
static pthread_mutex_t fnn_team_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t fnn_team_stack_cached = 0;

static void fnn_team_make_key(void) { fnn_team_key_ok = pthread_key_create(&fnn_team_key, NULL) == 0; }

/* the calling thread's record: (generation << FNN_TEAM_BITS) | team size checked */
static inline uintptr_t fnn_team_record(void)
{
    pthread_once(&fnn_team_once, fnn_team_make_key);
    return fnn_team_key_ok ? (uintptr_t)pthread_getspecific(fnn_team_key) : 0;
}

static inline void fnn_team_set_record(uintptr_t r)
{
    if (fnn_team_key_ok)
        pthread_setspecific(fnn_team_key, (void *)r);
}

/* an OMP_STACKSIZE-style value: a size with an optional B, K, M or G suffix (K when
   none, as libgomp reads it); 0 when unset or unreadable */
static inline size_t fnn_team_parse_stack(const char *s)
{
    char *end;
    unsigned long long v;
    if (s == NULL)
        return 0;
    while (*s == ' ' || *s == '\t')
        ++s;
    v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    while (*end == ' ' || *end == '\t')
        ++end;
    switch (*end) {
    case 'b': case 'B': return (size_t)v;
    case 'm': case 'M': return (size_t)v << 20;
    case 'g': case 'G': return (size_t)v << 30;
    default: return (size_t)v << 10;
    }
}

/* the stack a libgomp worker gets: the largest of OMP_STACKSIZE, GOMP_STACKSIZE and the
   C library's default thread stack (read once) */
static inline size_t fnn_team_stack_bytes(void)
{
    if (fnn_team_stack_cached == 0) {
        size_t s = 0, e;
#if defined(__GLIBC__)
        pthread_attr_t a;
        if (pthread_getattr_default_np(&a) == 0) {
            pthread_attr_getstacksize(&a, &s);
            pthread_attr_destroy(&a);
        }
#endif
        if (s == 0)
            s = FNN_TEAM_DEFAULT_STACK;
        e = fnn_team_parse_stack(getenv("OMP_STACKSIZE"));
        if (e > s)
            s = e;
        e = fnn_team_parse_stack(getenv("GOMP_STACKSIZE"));
        if (e > s)
            s = e;
        fnn_team_stack_cached = s;
    }
    return fnn_team_stack_cached;
}

/* 1 when the workers of an n-thread team fit in the address space now, else 0 */
static inline int fnn_team_room(int n)
{
    size_t need = (size_t)(n - 1) * (fnn_team_stack_bytes() + FNN_TEAM_PER_THREAD)
                  + FNN_TEAM_MARGIN;
    void *p;
    pthread_mutex_lock(&fnn_team_lock);
    p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED)
        munmap(p, need);
    pthread_mutex_unlock(&fnn_team_lock);
    return p != MAP_FAILED;
}

#endif
