# RMSNorm family: rms_norm over the last D elements of each row,
#   y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps)   (torch.nn.functional.rms_norm).
#
# Forward: one row at a time (it stays in cache): the sum of squares in double
# (fnn_reduce.h's lanes; a float square that overflows redoes the row in double), then
# one scale pass.  Saves rstd per row.
# Backward, per row with g = dy * w: sum(g x) in double, then one pass
#   dx = rstd * g - x * rstd^3 * sum(g x) / D
# that also adds dy * x * rstd into the d_weight partial of the row's chunk.  The chunks
# are fixed 64-row blocks (independent of the thread count), summed in double in chunk
# order: deterministic, no atomics.
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport sqrt

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

OPS = ("rms_norm", "rms_norm_backward")

cdef enum:
    CHUNK = 64    # rows per d_weight partial (a function of the shapes only)


cdef extern from "fnn_reduce.h" nogil:
    double fnn_sumsq_dev_f(const float* x, Py_ssize_t n, double c)
    double fnn_sumsq_dev_d(const double* x, Py_ssize_t n, double c)
    double fnn_dot_f(const float* x, const float* y, Py_ssize_t n)
    double fnn_dot_d(const double* x, const double* y, Py_ssize_t n)


cdef inline double _sumsq(const real* x, Py_ssize_t n) noexcept nogil:
    if real is float:
        return fnn_sumsq_dev_f(x, n, 0.0)
    else:
        return fnn_sumsq_dev_d(x, n, 0.0)


cdef inline double _dot(const real* x, const real* y, Py_ssize_t n) noexcept nogil:
    if real is float:
        return fnn_dot_f(x, y, n)
    else:
        return fnn_dot_d(x, y, n)


cdef void _fwd_row(const real* x, real* y, const real* w, Py_ssize_t D, double eps,
                   real* rstd_out) noexcept nogil:
    cdef Py_ssize_t j
    cdef double ms = _sumsq(x, D) / D if D > 0 else 0.0
    cdef real r = <real>(1.0 / sqrt(ms + eps))
    if w != NULL:
        for j in range(D):
            y[j] = x[j] * r * w[j]
    else:
        for j in range(D):
            y[j] = x[j] * r
    rstd_out[0] = r


cdef void _fwd(const real* x, real* y, const real* w, Py_ssize_t rows, Py_ssize_t D, double eps,
               real* rstd) noexcept nogil:
    cdef Py_ssize_t r
    cdef int nt = _threads_for(rows * D, 1 << 14)
    for r in prange(rows, nogil=True, schedule="static", num_threads=nt):
        _fwd_row(x + r * D, y + r * D, w, D, eps, rstd + r)


cdef void _bwd_row(const real* dy, const real* x, const real* w, real rstd, Py_ssize_t D,
                   real* dx, real* pw) noexcept nogil:
    cdef Py_ssize_t j
    cdef double sgx
    cdef real k
    if w != NULL:
        # sum(dy * w * x): w * x first, as one product per element
        sgx = 0.0
        for j in range(D):
            dx[j] = w[j] * x[j]          # dx as scratch: overwritten below
        sgx = _dot(dy, dx, D)
    else:
        sgx = _dot(dy, x, D)
    k = <real>(<double>rstd * rstd * rstd * sgx / D) if D > 0 else <real>0
    if w != NULL:
        for j in range(D):
            dx[j] = rstd * (dy[j] * w[j]) - x[j] * k
            pw[j] += dy[j] * (x[j] * rstd)
    elif pw != NULL:
        for j in range(D):
            dx[j] = rstd * dy[j] - x[j] * k
    else:
        for j in range(D):
            dx[j] = rstd * dy[j] - x[j] * k


cdef void _bwd(const real* dy, const real* x, const real* w, const real* rstd, Py_ssize_t rows,
               Py_ssize_t D, real* dx, real* part) noexcept nogil:
    """part: (chunks, D) zeroed d_weight partials (w != NULL)."""
    cdef Py_ssize_t nch = (rows + CHUNK - 1) // CHUNK
    cdef Py_ssize_t c, r, r0, r1
    cdef int nt = _threads_for(rows * D, 1 << 14)
    cdef real* pw
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        r0 = c * CHUNK
        r1 = r0 + CHUNK
        if r1 > rows:
            r1 = rows
        pw = part + c * D if w != NULL else NULL
        for r in range(r0, r1):
            _bwd_row(dy + r * D, x + r * D, w, rstd[r], D, dx + r * D, pw)


def rms_norm(cnp.ndarray x, object weight, Py_ssize_t D, double eps):
    """rms_norm(x, weight, D, eps) -> (y, saved).

    IN  x C-contiguous, normalised over its last D elements; weight: D elements or None."""
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(x) // D if D else 0
    cdef cnp.ndarray y = np.empty_like(x)
    cdef cnp.ndarray rstd = np.empty(rows, dtype=x.dtype)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pw = _data_or_null(weight, D, T)
    cdef const void* px = _data(x, rows * D, T)
    cdef void* py = _data(y, rows * D, T)
    cdef void* pr = _data(rstd, rows, T)
    if T == F32:
        with nogil:
            _fwd[float](<const float*>px, <float*>py, <const float*>pw, rows, D, eps, <float*>pr)
    else:
        with nogil:
            _fwd[double](<const double*>px, <double*>py, <const double*>pw, rows, D, eps, <double*>pr)
    return y, (x, weight, rstd, D)


def rms_norm_backward(cnp.ndarray dy, tuple saved):
    """rms_norm_backward(dy, saved) -> (d_input, d_weight or None)."""
    cdef cnp.ndarray x = saved[0]
    weight = saved[1]
    cdef cnp.ndarray rstd = saved[2]
    cdef Py_ssize_t D = saved[3]
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(x) // D if D else 0
    cdef cnp.ndarray dx = np.empty_like(x)
    cdef Py_ssize_t nch = (rows + CHUNK - 1) // CHUNK
    cdef cnp.ndarray part = None if weight is None else np.zeros((nch, D), dtype=x.dtype)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pw = _data_or_null(weight, D, T)
    cdef void* pdw = _data_or_null(part, nch * D, T)
    cdef const void* pdy = _data(dy, rows * D, T)
    cdef const void* px = _data(x, rows * D, T)
    cdef const void* pr = _data(rstd, rows, T)
    cdef void* pdx = _data(dx, rows * D, T)
    if T == F32:
        with nogil:
            _bwd[float](<const float*>pdy, <const float*>px, <const float*>pw, <const float*>pr,
                        rows, D, <float*>pdx, <float*>pdw)
    else:
        with nogil:
            _bwd[double](<const double*>pdy, <const double*>px, <const double*>pw,
                         <const double*>pr, rows, D, <double*>pdx, <double*>pdw)
    if weight is None:
        return dx, None
    # the chunk partials added in double, in chunk order (a reduction over axis 0 adds
    # whole rows in index order)
    return dx, part.sum(axis=0, dtype=np.float64).astype(x.dtype).reshape((<object>weight).shape)
