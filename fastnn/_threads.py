"""Process hygiene of the compiled kernels: BLAS thread-pool control, the OpenMP pool
across fork(), and the address space loading the kernels needs.

fastnn calls BLAS (scipy's cython_blas) from two kinds of places: one big GEMM from
the Python shell (BLAS may use all threads), and tile GEMMs inside OpenMP regions
(BLAS must be single-threaded there, or threads stack).  threadpoolctl finds the
BLAS libraries once; limits are then cheap calls into them.
"""
import os
import threading

_controller = [None]


def _ctl():
    if _controller[0] is None:
        # load the BLAS the kernels call (scipy's, which may be a different library from
        # NumPy's) first: the controller only sees libraries loaded when it is made
        import scipy.linalg.cython_blas  # noqa: F401
        from threadpoolctl import ThreadpoolController
        _controller[0] = ThreadpoolController()
    return _controller[0]


_handles = [None]


def _blas():
    """[(set(n), get()) for every BLAS library].  A pthreads OpenBLAS has one process-wide
    pool, and threadpoolctl (>= 3.6) lets only the first thread that set a limit change it:
    from any other Python thread its set_num_threads silently does nothing, so a kernel
    called from a worker thread would run its GEMMs multi-threaded inside OpenMP regions.
    Its own C functions are called instead (the region count below keeps them consistent)."""
    if _handles[0] is None:
        out = []
        for lib in _ctl().select(user_api="blas").lib_controllers:
            setf = getf = None
            dl = getattr(lib, "dynlib", None)
            if (lib.internal_api == "openblas" and dl is not None
                    and getattr(lib, "threading_layer", "") != "openmp"):
                for pre in ("", "scipy_"):
                    for suf in ("", "64_", "_64"):
                        name = f"{pre}openblas_set_num_threads{suf}"
                        if setf is None and hasattr(dl, name):
                            setf = getattr(dl, name)
                            getf = getattr(dl, f"{pre}openblas_get_num_threads{suf}")
            if setf is None:
                setf, getf = lib.set_num_threads, (lambda lib=lib: lib.num_threads)
            out.append((setf, getf))
        _handles[0] = out
    return _handles[0]


def set_blas_threads(n):
    """Set the thread count of every BLAS library loaded in the process (inside a
    ``single_threaded_blas`` region the new count takes effect when the region ends)."""
    libs = _blas()
    with _region_lock:
        if _region_depth[0] > 0:
            _region_saved[0] = [n] * len(libs)
            return
        for setf, _ in libs:
            setf(n)


def blas_threads():
    """Current thread count of the first BLAS library (None if none is loaded)."""
    libs = _blas()
    return int(libs[0][1]()) if libs else None


# The BLAS thread count is process-wide, so overlapping regions from several Python
# threads share one count of open regions: the first sets BLAS to 1, the last restores it.
# (Saving and restoring per region let one thread's exit put BLAS back to n while another
# was still inside, and could leave the pool stuck at 1.)
_region_lock = threading.Lock()
_region_depth = [0]
_region_saved = [None]


class _SingleThreadedBlas:
    """The context ``single_threaded_blas()`` returns: one shared object (its state is the
    region count above), a class rather than a generator -- it runs around every large
    GEMM call, so its cost is part of a small Linear's latency.  A library already at one
    thread is neither set nor restored (the usual case when fastnn runs one thread): two
    reads instead of two reads and four writes through ctypes."""

    __slots__ = ()

    def __enter__(self):
        libs = _blas()
        with _region_lock:
            if _region_depth[0] == 0:
                saved = _region_saved[0] = [int(getf()) for _, getf in libs]
                for (setf, _), n in zip(libs, saved):
                    if n != 1:
                        setf(1)
            _region_depth[0] += 1
        return None

    def __exit__(self, *exc):
        libs = _blas()
        with _region_lock:
            _region_depth[0] -= 1
            if _region_depth[0] == 0:
                for (setf, _), n in zip(libs, _region_saved[0]):
                    if n != 1:
                        setf(n)
        return False


_SINGLE_THREADED_BLAS = _SingleThreadedBlas()


def single_threaded_blas():
    """Run the block with BLAS limited to one thread (around OpenMP regions that call BLAS)."""
    return _SINGLE_THREADED_BLAS


_np_gemm = [False]


def numpy_gemm_symbols():
    """(sgemm address, dgemm address, library path) of NumPy's bundled ILP64 OpenBLAS
    (symbols scipy_sgemm_64_ / scipy_dgemm_64_), or None; looked up once per process."""
    if _np_gemm[0] is False:
        import ctypes
        found = None
        try:
            import numpy  # noqa: F401  (its BLAS must be loaded to be found)
            from threadpoolctl import threadpool_info
            paths = [d["filepath"] for d in threadpool_info() if d.get("internal_api") == "openblas"]
        except Exception:  # pragma: no cover - threadpoolctl is a dependency
            paths = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
                sg = ctypes.cast(lib.scipy_sgemm_64_, ctypes.c_void_p).value
                dg = ctypes.cast(lib.scipy_dgemm_64_, ctypes.c_void_p).value
            except (OSError, AttributeError):
                continue
            if sg and dg:
                found = (sg, dg, path)
                break
        _np_gemm[0] = found
    return _np_gemm[0]


# ---------------------------------------------------------------- fork
# GNU OpenMP's thread pool does not survive fork(): the child inherits the bookkeeping of
# the parent's pool but not its threads, and its first parallel region waits for them
# forever.  So before a fork (os.fork, multiprocessing's fork start method) the forking
# thread's pool is released with omp_pause_resource_all (OpenMP 5.0; GCC >= 10): the child
# then starts a fresh pool at its first region -- same thread count, same results -- and
# the parent rebuilds its own the same way (one team start, tens of microseconds).  Where
# the runtime cannot release it (an older libgomp), the child runs every kernel on its
# calling thread instead.  LLVM's and Intel's runtimes handle fork themselves.
_kernels = []
_gomp_pause = [None]      # [(omp_pause_resource_all or None) for every libgomp loaded]
_fork_pool_released = [True]
_OMP_PAUSE_SOFT = 1


def kernels_loaded(mods):
    """fastnn.cpu hands over the compiled family modules once they are loaded."""
    _kernels[:] = mods


def _gomp_pausers():
    if _gomp_pause[0] is None:
        from threadpoolctl import ThreadpoolController
        out = []
        for lib in ThreadpoolController().select(user_api="openmp").lib_controllers:
            if getattr(lib, "prefix", "") != "libgomp":
                continue
            out.append(getattr(getattr(lib, "dynlib", None), "omp_pause_resource_all", None))
        _gomp_pause[0] = out
    return _gomp_pause[0]


def _release_openmp_pool():
    """Release the calling thread's libgomp pool; False where some libgomp cannot."""
    ok = True
    for pause in _gomp_pausers():
        if pause is None or pause(_OMP_PAUSE_SOFT) != 0:
            ok = False
    return ok


def _before_fork():
    _fork_pool_released[0] = True
    if _kernels:               # no kernel loaded: no OpenMP pool exists yet
        try:
            _fork_pool_released[0] = _release_openmp_pool()
        except Exception:      # pragma: no cover - be safe rather than hang the child
            _fork_pool_released[0] = False
        # this thread's next region (parent and child) creates its workers again: each
        # module checks again that their stacks fit (csrc/fnn_team.h)
        for mod in _kernels:
            mod._team_released()


def _after_fork_in_child():
    if not _fork_pool_released[0]:
        for mod in _kernels:
            mod._fork_child_serial()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------- memory
# Loading the kernels loads SciPy's OpenBLAS (the kernels' fallback BLAS), whose start-up
# maps a buffer per BLAS thread and, when that mmap fails, retries forever: under an
# address-space limit (RLIMIT_AS) close to current use the first kernel call hung.  Before
# loading, the address space that start-up takes is reserved once and given back; if it
# is not there, MemoryError (and a later call tries again).
_MiB = 1 << 20


def _kernel_load_bytes():
    """Address space loading the kernels may take: the extension modules and libgomp,
    and SciPy's OpenBLAS start-up (a buffer and a stack per BLAS thread), generously."""
    import sys
    n = os.cpu_count() or 1
    need = 64 * _MiB
    if "scipy.linalg._fblas" not in sys.modules:
        need += (n + 1) * 48 * _MiB
    return need


def check_address_space(what, nbytes):
    """MemoryError unless ``nbytes`` of address space can be mapped now (only checked
    under a finite RLIMIT_AS: that limit, not memory, is what makes mmap fail early)."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, AttributeError, OSError):  # pragma: no cover - not POSIX
        return
    if soft == resource.RLIM_INFINITY:
        return
    import mmap
    try:
        m = mmap.mmap(-1, nbytes)   # untouched anonymous pages: address space only
    except OSError as e:
        raise MemoryError(f"fastnn: {what} needs about {nbytes // _MiB} MiB of address "
                          f"space and the address-space limit (RLIMIT_AS) leaves less") from e
    m.close()
