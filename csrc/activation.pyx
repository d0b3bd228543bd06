# Activation family: elementwise forward and backward, one pass over memory each.
#
# Work is split into contiguous chunks, one per thread (static schedule), and the
# inner loops are plain elementwise code the compiler vectorises.
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport erf, erff, tanh, tanhf, exp, expf, sqrt

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"

OPS = ("gelu", "gelu_backward")

cdef double SQRT_2_OVER_PI = 0.7978845608028654
cdef double INV_SQRT2 = 0.7071067811865476
cdef double INV_SQRT_2PI = 0.3989422804014327
cdef double GELU_C = 0.044715


cdef inline real _erf(real x) noexcept nogil:
    if real is float:
        return erff(x)
    else:
        return erf(x)


cdef inline real _tanh(real x) noexcept nogil:
    if real is float:
        return tanhf(x)
    else:
        return tanh(x)


cdef inline real _exp(real x) noexcept nogil:
    if real is float:
        return expf(x)
    else:
        return exp(x)


cdef void _gelu_fwd(const real* x, real* y, Py_ssize_t n, bint approx_tanh,
                    Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    cdef Py_ssize_t i
    cdef real v
    cdef real k0 = <real>SQRT_2_OVER_PI, k1 = <real>GELU_C, r2 = <real>INV_SQRT2
    if approx_tanh:
        for i in range(i0, i1):
            v = x[i]
            y[i] = <real>0.5 * v * (1 + _tanh(k0 * (v + k1 * v * v * v)))
    else:
        for i in range(i0, i1):
            v = x[i]
            y[i] = <real>0.5 * v * (1 + _erf(v * r2))


cdef void _gelu_bwd(const real* dy, const real* x, real* dx, bint approx_tanh,
                    Py_ssize_t i0, Py_ssize_t i1) noexcept nogil:
    cdef Py_ssize_t i
    cdef real v, t, u
    cdef real k0 = <real>SQRT_2_OVER_PI, k1 = <real>GELU_C, r2 = <real>INV_SQRT2
    cdef real c = <real>INV_SQRT_2PI
    if approx_tanh:
        for i in range(i0, i1):
            v = x[i]
            t = _tanh(k0 * (v + k1 * v * v * v))
            dx[i] = dy[i] * (<real>0.5 * (1 + t)
                             + <real>0.5 * v * (1 - t * t) * k0 * (1 + 3 * k1 * v * v))
    else:
        for i in range(i0, i1):
            v = x[i]
            dx[i] = dy[i] * (<real>0.5 * (1 + _erf(v * r2)) + v * c * _exp(<real>-0.5 * v * v))


cdef inline Py_ssize_t _chunk(Py_ssize_t n, int nt, int t) noexcept nogil:
    return (n * t) // nt


def gelu(cnp.ndarray x, str approximate):
    """gelu(x, approximate) -> (y, saved).  x C-contiguous; approximate 'none' or 'tanh'."""
    cdef Py_ssize_t n = x.size
    cdef bint ta = approximate == "tanh"
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                           cnp.PyArray_TYPE(x), 0)
    cdef int nt = _threads_for(n, 1 << 14), t
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT:
        with nogil:
            for t in prange(nt, schedule="static", num_threads=nt):
                _gelu_fwd[float](<const float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(y),
                                 n, ta, _chunk(n, nt, t), _chunk(n, nt, t + 1))
    else:
        with nogil:
            for t in prange(nt, schedule="static", num_threads=nt):
                _gelu_fwd[double](<const double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(y),
                                  n, ta, _chunk(n, nt, t), _chunk(n, nt, t + 1))
    return y, (x, ta)


def gelu_backward(cnp.ndarray dy, tuple saved):
    """gelu_backward(dy, saved) -> d_input.  dy C-contiguous."""
    cdef cnp.ndarray x = saved[0]
    cdef bint ta = saved[1]
    cdef Py_ssize_t n = x.size
    cdef cnp.ndarray dx = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                            cnp.PyArray_TYPE(x), 0)
    cdef int nt = _threads_for(n, 1 << 14), t
    if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT:
        with nogil:
            for t in prange(nt, schedule="static", num_threads=nt):
                _gelu_bwd[float](<const float*>cnp.PyArray_DATA(dy), <const float*>cnp.PyArray_DATA(x),
                                 <float*>cnp.PyArray_DATA(dx), ta, _chunk(n, nt, t), _chunk(n, nt, t + 1))
    else:
        with nogil:
            for t in prange(nt, schedule="static", num_threads=nt):
                _gelu_bwd[double](<const double*>cnp.PyArray_DATA(dy), <const double*>cnp.PyArray_DATA(x),
                                  <double*>cnp.PyArray_DATA(dx), ta, _chunk(n, nt, t), _chunk(n, nt, t + 1))
    return dx
