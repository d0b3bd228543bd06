# Dropout family: inverted dropout with a counter-based (Philox4x32-10) mask.
#
# Element i of a call (seed, offset) is kept when its 24-bit uniform k_i = r_i >> 8
# satisfies k_i * 2^-24 >= p, i.e. k_i >= ceil(p * 2^24) -- an exact integer test,
# the same decision as the NumPy reference.  y = x * m, m in {0, 1/(1-p)}.  One Philox
# call gives the uniforms of 4 consecutive elements; work is split over fixed blocks of
# elements, and each element's mask depends only on (seed, offset, i), so the result is
# the same at any thread count.  Backward regenerates the mask: nothing is saved but
# (p, seed, offset), and regenerating (10 integer rounds per 4 elements) is cheaper than
# writing and re-reading a mask array.
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport uint32_t, uint64_t
from libc.math cimport ceil

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

cdef extern from "fnn_philox.h" nogil:
    ctypedef struct fnn_philox_out:
        uint32_t v[4]
    fnn_philox_out fnn_philox4x32(uint64_t block, uint64_t offset, uint64_t seed)

OPS = ("dropout", "dropout_backward")

cdef enum:
    CHUNK = 4096      # elements per parallel task (a multiple of 4)


cdef inline void _mask_mul(const real* x, real* y, Py_ssize_t i0, Py_ssize_t i1, uint32_t thr,
                           real scale, uint64_t seed, uint64_t offset) noexcept nogil:
    # y[i] = x[i] * m_i for i in [i0, i1); i0 is a multiple of 4
    cdef Py_ssize_t i, l, nfull = (i1 - i0) // 4
    cdef fnn_philox_out o
    cdef uint64_t blk
    for i in range(nfull):
        blk = <uint64_t>((i0 >> 2) + i)
        o = fnn_philox4x32(blk, offset, seed)
        for l in range(4):
            y[i0 + 4 * i + l] = x[i0 + 4 * i + l] * (scale if (o.v[l] >> 8) >= thr else <real>0)
    i = i0 + 4 * nfull
    if i < i1:
        o = fnn_philox4x32(<uint64_t>(i >> 2), offset, seed)
        for l in range(i1 - i):
            y[i + l] = x[i + l] * (scale if (o.v[l] >> 8) >= thr else <real>0)


cdef void _dropout(const real* x, real* y, Py_ssize_t n, uint32_t thr, real scale,
                   uint64_t seed, uint64_t offset) noexcept nogil:
    cdef Py_ssize_t nch = (n + CHUNK - 1) // CHUNK
    cdef Py_ssize_t c, i0, i1
    cdef int nt = _threads_for(n, 1 << 15)
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        i0 = c * CHUNK
        i1 = i0 + CHUNK
        if i1 > n:
            i1 = n
        _mask_mul(x, y, i0, i1, thr, scale, seed, offset)


cdef object _run(cnp.ndarray x, double p, uint64_t seed, uint64_t offset):
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                           cnp.PyArray_TYPE(x), 0)
    cdef Py_ssize_t n = x.size
    # keep iff k >= ceil(p * 2^24) (p * 2^24 is exact in double); p = 1 -> thr = 2^24: none
    cdef uint32_t thr = <uint32_t>ceil(p * 16777216.0)
    cdef double scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef const void* px = _data(x, n, T)
    cdef void* py = _data(y, n, T)
    if T == F32:
        with nogil:
            _dropout[float](<const float*>px, <float*>py, n, thr, <float>scale, seed, offset)
    else:
        with nogil:
            _dropout[double](<const double*>px, <double*>py, n, thr, scale, seed, offset)
    return y


def dropout(cnp.ndarray x, double p, uint64_t seed, uint64_t offset):
    """dropout(x, p, seed, offset) -> (y, saved).  x C-contiguous; 0 <= p <= 1."""
    return _run(x, p, seed, offset), (p, seed, offset)


def dropout_backward(cnp.ndarray dy, tuple saved):
    """dropout_backward(dy, saved) -> d_input: dy times the forward's (regenerated) mask."""
    p, seed, offset = saved
    return _run(dy, p, seed, offset)
