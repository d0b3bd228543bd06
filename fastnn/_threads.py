"""BLAS thread-pool control, shared by every compiled family.

fastnn calls BLAS (scipy's cython_blas) from two kinds of places: one big GEMM from
the Python shell (BLAS may use all threads), and tile GEMMs inside OpenMP regions
(BLAS must be single-threaded there, or threads stack).  threadpoolctl finds the
BLAS libraries once; limits are then cheap calls into them.
"""
import contextlib
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


@contextlib.contextmanager
def single_threaded_blas():
    """Run the block with BLAS limited to one thread (around OpenMP regions that call BLAS)."""
    libs = _blas()
    with _region_lock:
        if _region_depth[0] == 0:
            _region_saved[0] = [int(getf()) for _, getf in libs]
            for setf, _ in libs:
                setf(1)
        _region_depth[0] += 1
    try:
        yield
    finally:
        with _region_lock:
            _region_depth[0] -= 1
            if _region_depth[0] == 0:
                for (setf, _), n in zip(libs, _region_saved[0]):
                    setf(n)


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
