"""BLAS thread-pool control, shared by every compiled family.

fastnn calls BLAS (scipy's cython_blas) from two kinds of places: one big GEMM from
the Python shell (BLAS may use all threads), and tile GEMMs inside OpenMP regions
(BLAS must be single-threaded there, or threads stack).  threadpoolctl finds the
BLAS libraries once; limits are then cheap calls into them.
"""
import contextlib

_controller = [None]


def _ctl():
    if _controller[0] is None:
        # load the BLAS the kernels call (scipy's, which may be a different library from
        # NumPy's) first: the controller only sees libraries loaded when it is made
        import scipy.linalg.cython_blas  # noqa: F401
        from threadpoolctl import ThreadpoolController
        _controller[0] = ThreadpoolController()
    return _controller[0]


def set_blas_threads(n):
    """Set the thread count of every BLAS library loaded in the process."""
    for lib in _ctl().select(user_api="blas").lib_controllers:
        lib.set_num_threads(n)


def blas_threads():
    """Current thread count of the first BLAS library (None if none is loaded)."""
    libs = _ctl().select(user_api="blas").lib_controllers
    return libs[0].num_threads if libs else None


@contextlib.contextmanager
def single_threaded_blas():
    """Run the block with BLAS limited to one thread (around OpenMP regions that call BLAS)."""
    libs = _ctl().select(user_api="blas").lib_controllers
    old = [lib.num_threads for lib in libs]
    for lib in libs:
        lib.set_num_threads(1)
    try:
        yield
    finally:
        for lib, n in zip(libs, old):
            lib.set_num_threads(n)
