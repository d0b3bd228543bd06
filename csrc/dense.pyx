# Dense family: linear (y = x W^T + b) forward and backward.
#
# GEMM-bound: the work is three BLAS calls (forward, d_input, d_weight) made with
# the GIL released, BLAS using fastnn's thread count.  The bias is folded into the
# forward GEMM (C starts as the broadcast bias, beta = 1); d_bias is a column sum
# over fixed row chunks, reduced in chunk order, so it is the same at any thread count.
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset

from libc.stdint cimport int64_t, uintptr_t

from fnn_blas cimport gemm as _scipy_gemm, real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_gemm.pxi"

OPS = ("linear", "linear_backward")


cdef void _fill_bias(real* y, const real* b, Py_ssize_t rows, Py_ssize_t n, int nt) noexcept nogil:
    cdef Py_ssize_t r
    if nt == 1:
        for r in range(rows):
            memcpy(&y[r * n], b, n * sizeof(real))
    else:
        for r in prange(rows, nogil=True, schedule="static", num_threads=nt):
            memcpy(&y[r * n], b, n * sizeof(real))


cdef inline Py_ssize_t _rows(cnp.ndarray x):
    """Product of the leading dims (not x.size // in_features: in_features may be 0)."""
    cdef Py_ssize_t rows = 1
    cdef int k
    for k in range(x.ndim - 1):
        rows *= x.shape[k]
    return rows


def linear(cnp.ndarray x, cnp.ndarray weight, object bias):
    """linear(x, weight, bias) -> (y, saved).

    IN  x (..., in) C-contiguous; weight (out, in) C-contiguous, same dtype;
        bias (out,) or None.   OUT y (..., out)."""
    cdef Py_ssize_t n_in = weight.shape[1], n_out = weight.shape[0]
    cdef Py_ssize_t rows = _rows(x)
    shape = (<object>x).shape[:-1] + (n_out,)
    cdef cnp.ndarray y = np.empty(shape, dtype=x.dtype)
    cdef cnp.ndarray b
    # The bias fill / column sum run on one thread: waking the OpenMP team right next to
    # BLAS's own thread pool makes the two pools fight for the cores (spin-waiting
    # workers); measured 2-4x slower GEMMs on a 2-core machine.  They are memory-bound
    # and small next to the GEMM, and their chunking does not depend on nt.
    cdef int nt = 1
    if x.dtype == np.float32:
        if bias is not None:
            b = bias
            _fill_bias(<float*>cnp.PyArray_DATA(y), <const float*>cnp.PyArray_DATA(b), rows, n_out, nt)
        with nogil:
            gemm[float](False, True, <int>rows, <int>n_out, <int>n_in, 1.0,
                        <const float*>cnp.PyArray_DATA(x), <int>n_in,
                        <const float*>cnp.PyArray_DATA(weight), <int>n_in,
                        1.0 if bias is not None else 0.0, <float*>cnp.PyArray_DATA(y), <int>n_out)
    else:
        if bias is not None:
            b = bias
            _fill_bias(<double*>cnp.PyArray_DATA(y), <const double*>cnp.PyArray_DATA(b), rows, n_out, nt)
        with nogil:
            gemm[double](False, True, <int>rows, <int>n_out, <int>n_in, 1.0,
                         <const double*>cnp.PyArray_DATA(x), <int>n_in,
                         <const double*>cnp.PyArray_DATA(weight), <int>n_in,
                         1.0 if bias is not None else 0.0, <double*>cnp.PyArray_DATA(y), <int>n_out)
    return y, (x, weight, bias is not None)


cdef void _col_sum(const real* dy, Py_ssize_t rows, Py_ssize_t n, real* out, int nt) noexcept nogil:
    """out[j] = sum_r dy[r, j]: fixed chunks of rows (independent of nt), chunk partials
    in double, summed in chunk order -> deterministic at any thread count."""
    cdef Py_ssize_t CH = 256
    cdef Py_ssize_t nch = (rows + CH - 1) // CH
    cdef Py_ssize_t c, r, j, r0, r1
    cdef double* part = <double*>malloc(nch * n * sizeof(double)) if nch > 0 else NULL
    cdef double* acc
    if nch > 0 and part == NULL:
        return
    memset(part, 0, nch * n * sizeof(double))
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        acc = part + c * n
        r0 = c * CH
        r1 = r0 + CH
        if r1 > rows:
            r1 = rows
        for r in range(r0, r1):
            for j in range(n):
                acc[j] += dy[r * n + j]
    for c in range(1, nch):
        for j in range(n):
            part[j] += part[c * n + j]
    for j in range(n):
        out[j] = <real>part[j] if nch > 0 else 0
    free(part)


def linear_backward(cnp.ndarray dy, tuple saved):
    """linear_backward(dy, saved) -> (d_input, d_weight, d_bias or None).  dy C-contiguous."""
    cdef cnp.ndarray x = saved[0], w = saved[1]
    cdef bint has_bias = saved[2]
    cdef Py_ssize_t n_in = w.shape[1], n_out = w.shape[0]
    cdef Py_ssize_t rows = _rows(x)
    cdef cnp.ndarray dx = np.empty_like(x)
    cdef cnp.ndarray dw = np.empty_like(w)
    cdef cnp.ndarray db = np.empty(n_out, dtype=x.dtype) if has_bias else None
    # The bias fill / column sum run on one thread: waking the OpenMP team right next to
    # BLAS's own thread pool makes the two pools fight for the cores (spin-waiting
    # workers); measured 2-4x slower GEMMs on a 2-core machine.  They are memory-bound
    # and small next to the GEMM, and their chunking does not depend on nt.
    cdef int nt = 1
    if x.dtype == np.float32:
        with nogil:
            gemm[float](False, False, <int>rows, <int>n_in, <int>n_out, 1.0,
                        <const float*>cnp.PyArray_DATA(dy), <int>n_out,
                        <const float*>cnp.PyArray_DATA(w), <int>n_in,
                        0.0, <float*>cnp.PyArray_DATA(dx), <int>n_in)
            gemm[float](True, False, <int>n_out, <int>n_in, <int>rows, 1.0,
                        <const float*>cnp.PyArray_DATA(dy), <int>n_out,
                        <const float*>cnp.PyArray_DATA(x), <int>n_in,
                        0.0, <float*>cnp.PyArray_DATA(dw), <int>n_in)
            if has_bias:
                _col_sum[float](<const float*>cnp.PyArray_DATA(dy), rows, n_out,
                                <float*>cnp.PyArray_DATA(db), nt)
    else:
        with nogil:
            gemm[double](False, False, <int>rows, <int>n_in, <int>n_out, 1.0,
                         <const double*>cnp.PyArray_DATA(dy), <int>n_out,
                         <const double*>cnp.PyArray_DATA(w), <int>n_in,
                         0.0, <double*>cnp.PyArray_DATA(dx), <int>n_in)
            gemm[double](True, False, <int>n_out, <int>n_in, <int>rows, 1.0,
                         <const double*>cnp.PyArray_DATA(dy), <int>n_out,
                         <const double*>cnp.PyArray_DATA(x), <int>n_in,
                         0.0, <double*>cnp.PyArray_DATA(dw), <int>n_in)
            if has_bias:
                _col_sum[double](<const double*>cnp.PyArray_DATA(dy), rows, n_out,
                                 <double*>cnp.PyArray_DATA(db), nt)
    return dx, dw, db
