# Included by the families whose short jobs run on the dense family's thread pool
# (fnn_smallgemm.h: the caller and spinning workers claim chunks; no barrier waits for a
# sleeping thread).  One such pool per process: a sentence's attention and its add + layer
# norms run between its GEMMs, while the GEMM pool's worker still spins on the other core
# -- an OpenMP team would have to take that core from it.  ``_sg_pool`` is NULL where the
# pool is not built (the including family then uses OpenMP).  The including module
# cimports PyCapsule_GetPointer (cpython.pycapsule).

ctypedef void (*_job_fn)(void* arg, int chunk) noexcept nogil
ctypedef void (*_pool_fn)(_job_fn fn, void* arg, int nchunks, int nt) noexcept nogil
cdef _pool_fn _sg_pool = NULL
try:
    from .dense import SG_POOL_RUN as _cap
except ImportError:
    _cap = None
if _cap is not None:
    _sg_pool = <_pool_fn>PyCapsule_GetPointer(_cap, b"fastnn.sg_pool_run")
