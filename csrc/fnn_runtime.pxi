# Included once by every compiled family module: the thread count of a call, the rule for
# how many threads a piece of work is worth, and the checked allocation (fnn_alloc.h).
#
# Thread count: one source of truth, OpenMP's own (the nthreads-var ICV that
# omp_get_max_threads reads).  OMP_NUM_THREADS sets its default, threadpoolctl's
# threadpool_limits(user_api="openmp") sets it through omp_set_num_threads, and
# fastnn.set_num_threads sets it too -- read at every call, so each of them governs the
# kernels.  The ICV belongs to the calling thread in OpenMP, while fastnn.set_num_threads is
# process-wide (as torch.set_num_threads): a set bumps a generation, and a thread that calls
# a kernel applies the count once when it sees a new generation (PyTorch applies its count
# per thread lazily the same way).  Cost on a hot call: two pthread_getspecific reads and
# compares.  A thread's first team of a size is checked to fit in the address space
# first (fnn_team.h): libgomp ends the process when it cannot create a worker.

cdef extern from *:
    """
    #include "fnn_alloc.h"
    #ifdef _OPENMP
    #include <omp.h>
    #endif
    #include "fnn_team.h"
    static int fnn_requested_threads = 0;     /* fastnn.set_num_threads, 0 = never set */
    static int fnn_threads_generation = 0;
    static int fnn_fork_serial = 0;           /* a forked child whose OpenMP pool is unsafe */

    /* The calling thread's OpenMP thread count (the nthreads-var ICV), with the latest
     * fastnn.set_num_threads applied to it first; the record of what this thread has
     * applied is fnn_team.h's (a pthread key: no thread-local block to allocate); *rec
     * gets that record as the call leaves it (fnn_max_threads reads it once per call), or
     * ~0 where it is not this call's to read (a serial fork child, a worker inside a
     * region). */
    static inline int fnn_icv_threads_rec(uintptr_t *rec_out)
    {
        *rec_out = ~(uintptr_t)0;
    #ifdef _OPENMP
        uintptr_t rec, gen;
        if (__atomic_load_n(&fnn_fork_serial, __ATOMIC_RELAXED))
            return 1;
        /* inside a region (a nested call on a worker): the team's count stands, and a
         * worker does not touch this module's per-thread state */
        if (omp_in_parallel())
            return omp_get_max_threads();
        rec = fnn_team_record();
        gen = (uintptr_t)(unsigned)__atomic_load_n(&fnn_threads_generation, __ATOMIC_ACQUIRE);
        if ((rec >> FNN_TEAM_BITS) != gen) {
            int n = __atomic_load_n(&fnn_requested_threads, __ATOMIC_RELAXED);
            if (n > 0)
                omp_set_num_threads(n);
            rec = (gen << FNN_TEAM_BITS) | (rec & FNN_TEAM_MASK);
            fnn_team_set_record(rec);
        }
        *rec_out = rec;
        return omp_get_max_threads();
    #else
        return 1;
    #endif
    }

    static inline int fnn_icv_threads(void)
    {
        uintptr_t rec;
        return fnn_icv_threads_rec(&rec);
    }

    /* Threads a kernel called from this thread may use now: the ICV's count, or 1 while a
     * team that large would be this thread's largest yet and its workers' stacks do not
     * fit in the address space (fnn_team.h: libgomp ends the process when it cannot
     * create a worker). */
    static inline int fnn_max_threads(void)
    {
        uintptr_t rec;
        int n = fnn_icv_threads_rec(&rec);
    #ifdef _OPENMP
        if (n > 1 && rec != ~(uintptr_t)0) {     /* this thread's own call, out of a region */
            if ((uintptr_t)n > (rec & FNN_TEAM_MASK)) {
                if (!fnn_team_room(n))
                    return 1;
                fnn_team_set_record((rec & ~FNN_TEAM_MASK)
                                    | ((uintptr_t)n < FNN_TEAM_MASK ? (uintptr_t)n : FNN_TEAM_MASK));
            }
        }
    #endif
        return n;
    }

    /* the calling thread's pool was released (before a fork, fastnn._threads): its next
     * region creates its workers again, so it is checked again */
    static inline void fnn_team_released(void)
    {
        uintptr_t rec = fnn_team_record();
        fnn_team_set_record(rec & ~FNN_TEAM_MASK);
    }

    static inline int fnn_reported_threads(void)
    {
    #ifdef _OPENMP
        return fnn_icv_threads();
    #else
        return __atomic_load_n(&fnn_requested_threads, __ATOMIC_RELAXED);
    #endif
    }

    static inline void fnn_request_threads(int n)
    {
        __atomic_store_n(&fnn_requested_threads, n, __ATOMIC_RELAXED);
        __atomic_add_fetch(&fnn_threads_generation, 1, __ATOMIC_RELEASE);
    }

    /* The team size a parallel region started with num_threads(n) really gets. */
    static inline int fnn_team_size(int n)
    {
        int got = 1;
    #ifdef _OPENMP
        #pragma omp parallel num_threads(n)
        {
            #pragma omp single
            got = omp_get_num_threads();
        }
    #endif
        return got;
    }
    """
    void* fnn_alloc(size_t n, size_t size) nogil
    void* fnn_calloc(size_t n, size_t size) nogil
    void fnn_flag_set(int* flag) nogil
    int fnn_flag_get(const int* flag) nogil
    int fnn_max_threads() nogil
    int fnn_icv_threads() nogil
    void fnn_team_released() nogil
    int fnn_reported_threads() nogil
    void fnn_request_threads(int n) nogil
    int fnn_team_size(int n) nogil
    int fnn_fork_serial
    int fnn_alloc_countdown


def _set_num_threads(int n):
    """This module's part of fastnn.set_num_threads (process-wide, applied at each thread's
    next call; the calling thread at once, so threadpool_info shows it)."""
    fnn_request_threads(n if n > 0 else 1)
    fnn_icv_threads()


def _get_num_threads():
    """Threads a kernel called from this thread may use now.  A build without OpenMP runs
    every kernel on the calling thread and reports the count last requested (0 = none; the
    caller then uses its default), which is what the BLAS pool gets."""
    return fnn_reported_threads()


def _fork_child_serial():
    """In a forked child whose OpenMP runtime could not drop its thread pool before the
    fork (fastnn._threads): run every kernel on the calling thread from now on."""
    global fnn_fork_serial
    fnn_fork_serial = 1


def _team_released():
    """The calling thread's OpenMP pool was released (fastnn._threads, before a fork): its
    next parallel region checks again that its workers fit (fnn_team.h)."""
    fnn_team_released()


def _fail_allocation(int k):
    """Test hook: make this module's k-th next scratch allocation (0-based) fail; -1 turns
    it off.  Returns the countdown left from the previous setting (>= 0: fewer
    allocations than asked for happened)."""
    global fnn_alloc_countdown
    left = fnn_alloc_countdown
    fnn_alloc_countdown = k
    return left


def _threads_used(Py_ssize_t work, Py_ssize_t grain):
    """Test hook: the team size a kernel gets for ``work`` units at ``grain`` units per
    thread -- _threads_for, then a real OpenMP region."""
    return fnn_team_size(_threads_for(work, grain))


cdef inline int _threads_for(Py_ssize_t work, Py_ssize_t grain) noexcept nogil:
    """Threads worth waking for ``work`` units when a thread should get >= ``grain``.

    Small calls stay on the calling thread: waking a team costs microseconds."""
    cdef Py_ssize_t t
    cdef int n
    if work < 2 * grain:
        return 1
    n = fnn_max_threads()
    if n <= 1:
        return 1
    t = work // grain
    return <int>(t if t < n else n)


cdef inline void* _alloc(size_t n, size_t size) except NULL nogil:
    """fnn_alloc for code outside parallel regions: MemoryError instead of NULL."""
    cdef void* p = fnn_alloc(n, size)
    if p == NULL:
        _raise_nomem(n, size)
    return p


cdef inline void* _calloc(size_t n, size_t size) except NULL nogil:
    """fnn_calloc (zeroed) for code outside parallel regions: MemoryError instead of NULL."""
    cdef void* p = fnn_calloc(n, size)
    if p == NULL:
        _raise_nomem(n, size)
    return p


cdef inline int _raise_nomem(size_t n, size_t size) except -1 nogil:
    """Raise MemoryError for a failed request of n items of ``size`` bytes (after a
    parallel region: with the region's largest per-thread request)."""
    with gil:
        raise MemoryError(f"fastnn: out of memory allocating {n} x {size} bytes of scratch")
