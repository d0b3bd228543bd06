# StdNorm family: the Annotated Transformer's layer norm over the last D elements,
#   y = a * (x - mean) / (std + eps) + b,  std unbiased (D - 1).
#
# Forward: one row at a time (it stays in cache): sum, then sum of squared deviations,
# both in double, then one fused normalise+affine pass.  Saves mean and std per row.
# Backward, per row with d = x - mean, r = 1/(std + eps), g = dy * a:
#   dx = r * (g - mean(g)) - r^2 * sum(g d) / ((D - 1) std) * d   (that term 0 when std == 0)
# d_a / d_b are summed over fixed row chunks (independent of the thread count) in double,
# then the chunk partials are added in chunk order: deterministic, no atomics.
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdlib cimport free
from libc.string cimport memset

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

OPS = ("std_layer_norm", "std_layer_norm_backward")


cdef inline void _row(const real* x, real* y, const real* a, const real* b, Py_ssize_t D,
                      double eps, real* mean_out, real* std_out) noexcept nogil:
    cdef Py_ssize_t j
    cdef double s = 0.0, ss = 0.0, d, m, sd
    cdef real mf, rf
    for j in range(D):
        s += x[j]
    m = s / D
    for j in range(D):
        d = x[j] - m
        ss += d * d
    sd = sqrt(ss / (D - 1))
    mf = <real>m
    rf = <real>(1.0 / (sd + eps))
    if a != NULL and b != NULL:
        for j in range(D):
            y[j] = (x[j] - mf) * rf * a[j] + b[j]
    elif a != NULL:
        for j in range(D):
            y[j] = (x[j] - mf) * rf * a[j]
    elif b != NULL:
        for j in range(D):
            y[j] = (x[j] - mf) * rf + b[j]
    else:
        for j in range(D):
            y[j] = (x[j] - mf) * rf
    mean_out[0] = mf
    std_out[0] = <real>sd


cdef void _fwd(const real* x, real* y, const real* a, const real* b, Py_ssize_t rows,
               Py_ssize_t D, double eps, real* mean, real* std) noexcept nogil:
    cdef Py_ssize_t r
    cdef int nt = _threads_for(rows * D, 1 << 14)
    if nt == 1:
        for r in range(rows):
            _row(x + r * D, y + r * D, a, b, D, eps, mean + r, std + r)
    else:
        for r in prange(rows, nogil=True, schedule="static", num_threads=nt):
            _row(x + r * D, y + r * D, a, b, D, eps, mean + r, std + r)


def std_layer_norm(cnp.ndarray x, object a, object b, Py_ssize_t D, double eps):
    """std_layer_norm(x, a, b, D, eps) -> (y, saved).

    IN  x C-contiguous, normalised over its last D elements; a, b: C-contiguous arrays of
        D elements (x's dtype) or None."""
    cdef Py_ssize_t rows = x.size // D if D else 0
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                           cnp.PyArray_TYPE(x), 0)
    cdef cnp.npy_intp nr = rows
    cdef cnp.ndarray mean = cnp.PyArray_EMPTY(1, &nr, cnp.PyArray_TYPE(x), 0)
    cdef cnp.ndarray std = cnp.PyArray_EMPTY(1, &nr, cnp.PyArray_TYPE(x), 0)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pa = _data_or_null(a, D, T)
    cdef void* pb = _data_or_null(b, D, T)
    cdef const void* px = _data(x, rows * D, T)
    cdef void* py = _data(y, rows * D, T)
    cdef void* pm = _data(mean, rows, T)
    cdef void* ps = _data(std, rows, T)
    if T == F32:
        with nogil:
            _fwd[float](<const float*>px, <float*>py, <const float*>pa, <const float*>pb,
                        rows, D, eps, <float*>pm, <float*>ps)
    else:
        with nogil:
            _fwd[double](<const double*>px, <double*>py, <const double*>pa, <const double*>pb,
                         rows, D, eps, <double*>pm, <double*>ps)
    return y, (x, a, b is not None, mean, std, eps, D)


cdef int _bwd(const real* dy, const real* x, const real* a, const real* mean,
              const real* std, double eps, Py_ssize_t rows, Py_ssize_t D, real* dx,
              real* da, real* db) except -1 nogil:
    cdef Py_ssize_t CH = 64
    cdef Py_ssize_t nch = (rows + CH - 1) // CH
    cdef Py_ssize_t c, r, j, r0, r1
    cdef int nt = _threads_for(rows * D, 1 << 14)
    cdef bint want_params = da != NULL or db != NULL
    cdef double* part = NULL
    cdef double *pa
    cdef double *pb
    cdef double sg, sgd, d, g, rr, m, sd, coef
    if want_params and nch > 0:
        part = <double*>_calloc(2 * nch * D, sizeof(double))
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        r0 = c * CH
        r1 = r0 + CH
        if r1 > rows:
            r1 = rows
        pa = part + 2 * c * D if want_params else NULL
        pb = pa + D if want_params else NULL
        for r in range(r0, r1):
            m = mean[r]
            sd = std[r]
            rr = 1.0 / (sd + eps)
            sg = 0.0
            sgd = 0.0
            for j in range(D):
                d = x[r * D + j] - m
                g = dy[r * D + j] * (a[j] if a != NULL else 1.0)
                sg = sg + g
                sgd = sgd + g * d
                if want_params:
                    pa[j] += dy[r * D + j] * d * rr
                    pb[j] += dy[r * D + j]
            sg = sg / D
            coef = 0.0 if sd == 0 else rr * rr * sgd / ((D - 1) * sd)
            for j in range(D):
                d = x[r * D + j] - m
                g = dy[r * D + j] * (a[j] if a != NULL else 1.0)
                dx[r * D + j] = <real>(rr * (g - sg) - coef * d)
    if want_params:
        for c in range(1, nch):
            for j in range(D):
                part[j] += part[2 * c * D + j]
                part[D + j] += part[2 * c * D + D + j]
        for j in range(D):
            if da != NULL:
                da[j] = <real>part[j] if nch > 0 else 0
            if db != NULL:
                db[j] = <real>part[D + j] if nch > 0 else 0
        free(part)
    return 0


def std_layer_norm_backward(cnp.ndarray dy, tuple saved):
    """std_layer_norm_backward(dy, saved) -> (d_input, d_a or None, d_b or None)."""
    cdef cnp.ndarray x = saved[0]
    a = saved[1]
    cdef bint has_b = saved[2]
    cdef cnp.ndarray mean = saved[3], std = saved[4]
    cdef double eps = saved[5]
    cdef Py_ssize_t D = saved[6]
    cdef Py_ssize_t rows = x.size // D if D else 0
    cdef cnp.ndarray dx = np.empty_like(x)
    cdef cnp.ndarray da = np.empty(D, dtype=x.dtype) if a is not None else None
    cdef cnp.ndarray db = np.empty(D, dtype=x.dtype) if has_b else None
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pa = _data_or_null(a, D, T)
    cdef void* pda = _data_or_null(da, D, T)
    cdef void* pdb = _data_or_null(db, D, T)
    cdef const void* pdy = _data(dy, rows * D, T)
    cdef const void* px = _data(x, rows * D, T)
    cdef const void* pm = _data(mean, rows, T)
    cdef const void* ps = _data(std, rows, T)
    cdef void* pdx = _data(dx, rows * D, T)
    if T == F32:
        with nogil:
            _bwd[float](<const float*>pdy, <const float*>px, <const float*>pa, <const float*>pm,
                        <const float*>ps, eps, rows, D, <float*>pdx, <float*>pda, <float*>pdb)
    else:
        with nogil:
            _bwd[double](<const double*>pdy, <const double*>px, <const double*>pa,
                         <const double*>pm, <const double*>ps, eps, rows, D,
                         <double*>pdx, <double*>pda, <double*>pdb)
    if da is not None:
        da = da.reshape((<object>a).shape)
    return dx, da, db
