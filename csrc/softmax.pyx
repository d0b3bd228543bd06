# Softmax family: softmax and log_softmax along one axis, forward and backward.
#
# The input is seen as (outer, n, inner) with the reduction over n.  inner == 1 (the
# last axis) is a row kernel: max, exp+sum, scale -- three sweeps over a row that stays
# in cache, so memory sees one read and one write.  inner > 1 runs the same sweeps
# over blocks of up to IB columns of the inner axis, vectorised along it, so no
# transposed copy is made.  exp is fnn_expf_nonpos (every argument is x - max <= 0); sums are in double.
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange, parallel
from libc.math cimport log, exp, INFINITY

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"
include "fnn_streamcfg.pxi"

cdef extern from "fnn_math.h" nogil:
    float fnn_expf_nonpos(float x)

OPS = ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward")

cdef enum:
    IB = 64


cdef inline real _exp(real x) noexcept nogil:
    if real is float:
        return fnn_expf_nonpos(x)
    else:
        return exp(x)


cdef extern from "fnn_softmax.h" nogil:
    void fnn_softmax_row_f(const float* x, float* y, Py_ssize_t n, int logsm, const float* next)
    Py_ssize_t FNN_STREAM_BYTES
    void fnn_stream_fence()
    void fnn_softmax_row_d(const double* x, double* y, Py_ssize_t n, int logsm)
    void fnn_softmax_bwd_row_f(const float* dy, const float* y, float* dx, Py_ssize_t n, int logsm,
                               int stream)
    void fnn_softmax_bwd_row_d(const double* dy, const double* y, double* dx, Py_ssize_t n,
                               int logsm, int stream)


cdef inline void _row_fwd(const real* x, real* y, Py_ssize_t n, bint logsm,
                          const real* nxt) noexcept nogil:
    # nxt: the next row of this thread, prefetched during this row's exp pass
    if real is float:
        fnn_softmax_row_f(x, y, n, logsm, nxt)
    else:
        fnn_softmax_row_d(x, y, n, logsm)


cdef inline void _block_fwd(const real* x, real* y, Py_ssize_t n, Py_ssize_t inner,
                            Py_ssize_t nb, bint logsm) noexcept nogil:
    # x, y point at column 0 of this block of nb (<= IB) columns; row stride `inner`
    cdef real m[IB]
    cdef double s[IB]
    cdef Py_ssize_t k, i
    cdef real v
    for i in range(nb):
        m[i] = -INFINITY
        s[i] = 0.0
    for k in range(n):
        for i in range(nb):
            v = x[k * inner + i]
            if v > m[i] or v != v:
                m[i] = v
    if logsm:
        for k in range(n):
            for i in range(nb):
                s[i] += _exp(x[k * inner + i] - m[i])
        for i in range(nb):
            m[i] = <real>(m[i] + log(s[i]))
        for k in range(n):
            for i in range(nb):
                y[k * inner + i] = x[k * inner + i] - m[i]
    else:
        for k in range(n):
            for i in range(nb):
                v = _exp(x[k * inner + i] - m[i])
                y[k * inner + i] = v
                s[i] += v
        for i in range(nb):
            m[i] = <real>(1.0 / s[i])
        for k in range(n):
            for i in range(nb):
                y[k * inner + i] = y[k * inner + i] * m[i]


cdef void _fwd(const real* x, real* y, Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner,
               bint logsm) noexcept nogil:
    cdef Py_ssize_t t, o, b, nblk, ntask, nb
    cdef int nt
    # The forward is bound by the exponentials, not by memory: plain stores (streaming
    # measured slower here), and the next row is prefetched while this one computes.
    if inner == 1:
        nt = _threads_for(outer * n, 1 << 14)
        if nt == 1:
            for o in range(outer):
                _row_fwd(x + o * n, y + o * n, n, logsm, x + (o + 1) * n if o + 1 < outer else NULL)
        else:
            for o in prange(outer, nogil=True, schedule="static", num_threads=nt):
                _row_fwd(x + o * n, y + o * n, n, logsm, x + (o + 1) * n if o + 1 < outer else NULL)
    else:
        nblk = (inner + IB - 1) // IB
        ntask = outer * nblk
        nt = _threads_for(outer * n * inner, 1 << 14)
        for t in prange(ntask, nogil=True, schedule="static", num_threads=nt):
            o = t // nblk
            b = (t % nblk) * IB
            nb = inner - b
            if nb > IB:
                nb = IB
            _block_fwd(x + o * n * inner + b, y + o * n * inner + b, n, inner, nb, logsm)


cdef inline void _row_bwd(const real* dy, const real* y, real* dx, Py_ssize_t n,
                          bint logsm, bint stream) noexcept nogil:
    if real is float:
        fnn_softmax_bwd_row_f(dy, y, dx, n, logsm, stream)
    else:
        fnn_softmax_bwd_row_d(dy, y, dx, n, logsm, stream)


cdef inline void _block_bwd(const real* dy, const real* y, real* dx, Py_ssize_t n,
                            Py_ssize_t inner, Py_ssize_t nb, bint logsm) noexcept nogil:
    cdef double s[IB]
    cdef real sf[IB]
    cdef Py_ssize_t k, i, p
    for i in range(nb):
        s[i] = 0.0
    for k in range(n):
        for i in range(nb):
            p = k * inner + i
            s[i] += dy[p] if logsm else dy[p] * y[p]
    for i in range(nb):
        sf[i] = <real>s[i]
    for k in range(n):
        for i in range(nb):
            p = k * inner + i
            if logsm:
                dx[p] = dy[p] - _exp(y[p]) * sf[i]
            else:
                dx[p] = y[p] * (dy[p] - sf[i])


cdef void _bwd(const real* dy, const real* y, real* dx, Py_ssize_t outer, Py_ssize_t n,
               Py_ssize_t inner, bint logsm) noexcept nogil:
    cdef Py_ssize_t t, o, b, nblk, ntask, nb
    cdef int nt
    cdef bint stream = outer * n * <Py_ssize_t>sizeof(real) >= FNN_STREAM_BYTES
    if inner == 1:
        nt = _threads_for(outer * n, 1 << 14)
        if nt == 1:
            for o in range(outer):
                _row_bwd(dy + o * n, y + o * n, dx + o * n, n, logsm, stream)
            if stream:
                fnn_stream_fence()
        else:
            with parallel(num_threads=nt):
                for o in prange(outer, schedule="static"):
                    _row_bwd(dy + o * n, y + o * n, dx + o * n, n, logsm, stream)
                if stream:      # this thread's streamed rows, once (fnn_stream.h)
                    fnn_stream_fence()
    else:
        nblk = (inner + IB - 1) // IB
        ntask = outer * nblk
        nt = _threads_for(outer * n * inner, 1 << 14)
        for t in prange(ntask, nogil=True, schedule="static", num_threads=nt):
            o = t // nblk
            b = (t % nblk) * IB
            nb = inner - b
            if nb > IB:
                nb = IB
            _block_bwd(dy + o * n * inner + b, y + o * n * inner + b, dx + o * n * inner + b,
                       n, inner, nb, logsm)


cdef tuple _geometry(cnp.ndarray x, int dim):
    cdef Py_ssize_t outer = 1, inner = 1, k
    cdef cnp.npy_intp* shp = cnp.PyArray_DIMS(x)
    for k in range(dim):
        outer *= shp[k]
    for k in range(dim + 1, cnp.PyArray_NDIM(x)):
        inner *= shp[k]
    return outer, shp[dim], inner


cdef object _forward(cnp.ndarray x, int dim, bint logsm):
    cdef Py_ssize_t outer, n, inner
    outer, n, inner = _geometry(x, dim)
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                           cnp.PyArray_TYPE(x), 0)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef const void* px = _data(x, outer * n * inner, T)
    cdef void* py = _data(y, outer * n * inner, T)
    if T == F32:
        with nogil:
            _fwd[float](<const float*>px, <float*>py, outer, n, inner, logsm)
    else:
        with nogil:
            _fwd[double](<const double*>px, <double*>py, outer, n, inner, logsm)
    return y, (y, dim)


cdef object _backward(cnp.ndarray dy, tuple saved, bint logsm):
    cdef cnp.ndarray y = saved[0]
    cdef int dim = saved[1]
    cdef Py_ssize_t outer, n, inner
    outer, n, inner = _geometry(y, dim)
    cdef cnp.ndarray dx = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(y), cnp.PyArray_DIMS(y),
                                            cnp.PyArray_TYPE(y), 0)
    cdef int T = F32 if cnp.PyArray_TYPE(y) == cnp.NPY_FLOAT else F64
    cdef Py_ssize_t size = outer * n * inner
    cdef const void* pdy = _data(dy, size, T)
    cdef const void* py = _data(y, size, T)
    cdef void* pdx = _data(dx, size, T)
    if T == F32:
        with nogil:
            _bwd[float](<const float*>pdy, <const float*>py, <float*>pdx, outer, n, inner, logsm)
    else:
        with nogil:
            _bwd[double](<const double*>pdy, <const double*>py, <double*>pdx, outer, n, inner, logsm)
    return dx


def softmax(cnp.ndarray x, int dim):
    """softmax(x, dim) -> (y, saved).  x C-contiguous; 0 <= dim < x.ndim."""
    return _forward(x, dim, False)


def softmax_backward(cnp.ndarray dy, tuple saved):
    """softmax_backward(dy, saved) -> d_input.  dy C-contiguous."""
    return _backward(dy, saved, False)


def log_softmax(cnp.ndarray x, int dim):
    """log_softmax(x, dim) -> (y, saved).  x C-contiguous; 0 <= dim < x.ndim."""
    return _forward(x, dim, True)


def log_softmax_backward(cnp.ndarray dy, tuple saved):
    """log_softmax_backward(dy, saved) -> d_input.  dy C-contiguous."""
    return _backward(dy, saved, True)
