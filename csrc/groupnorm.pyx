# GroupNorm family: group_norm over (N, C, S) with the C channels split into G groups.
#
# Each (n, g) block -- C/G channels x S positions -- is contiguous, so it is one "row" of
# M = (C/G) * S elements: the forward takes its mean and the sum of squared deviations
# in double (fnn_reduce.h's lane sums), then each channel is one pass
# y = (x - mean) * scale_c + b[c] with scale_c = rstd * w[c], mean rounded to x's type.
# (torch's x * scale_c + (b[c] - mean * scale_c) cancels where |mean| >> std: a group
# of equal values 1e30 -- variance 0, rstd = eps^-1/2 -- gave 2e25 instead of b[c].)
# Saves mean and rstd per (n, g).
# Backward, per block: one pass takes the per-channel sums A[n, c] = sum dy and
# B[n, c] = sum dy * (x - mean) (double; the deviation formed first), from which
#   dx = rstd * (w_c dy - mean(g) - xhat * mean(g xhat)),  g = dy * w
# is one more pass per channel, dx = a_c dy + b (x - mean) + c.  The parameter gradients
# d_weight[c] = sum_n rstd B, d_bias[c] = sum_n A are added in n order from
# the per-(n, c) sums: deterministic at any thread count, no atomics.
# Rows are spread over OpenMP threads (static schedule); the work per row depends only
# on the shapes, so a thread count never changes a result.
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdlib cimport malloc, free

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

OPS = ("group_norm", "group_norm_backward")


cdef extern from "fnn_reduce.h" nogil:
    double fnn_sum_f(const float* x, Py_ssize_t n)
    double fnn_sum_d(const double* x, Py_ssize_t n)
    double fnn_sumsq_dev_f(const float* x, Py_ssize_t n, double c)
    double fnn_sumsq_dev_d(const double* x, Py_ssize_t n, double c)
    double fnn_dot_dev_f(const float* x, const float* y, Py_ssize_t n, double c)
    double fnn_dot_dev_d(const double* x, const double* y, Py_ssize_t n, double c)


cdef inline double _sum(const real* x, Py_ssize_t n) noexcept nogil:
    if real is float:
        return fnn_sum_f(x, n)
    else:
        return fnn_sum_d(x, n)


cdef inline double _sumsq_dev(const real* x, Py_ssize_t n, double c) noexcept nogil:
    if real is float:
        return fnn_sumsq_dev_f(x, n, c)
    else:
        return fnn_sumsq_dev_d(x, n, c)


cdef inline double _dot_dev(const real* x, const real* y, Py_ssize_t n, double c) noexcept nogil:
    """sum y (x - c)"""
    if real is float:
        return fnn_dot_dev_f(x, y, n, c)
    else:
        return fnn_dot_dev_d(x, y, n, c)


cdef inline void _affine(const real* x, real* y, Py_ssize_t n, real m, real a,
                         real b) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(n):
        y[j] = (x[j] - m) * a + b


cdef void _fwd_block(const real* x, real* y, const real* w, const real* b, Py_ssize_t c0,
                     Py_ssize_t Cg, Py_ssize_t S, double eps, real* mean_out,
                     real* rstd_out) noexcept nogil:
    cdef Py_ssize_t M = Cg * S, c
    cdef double m = _sum(x, M) / M if M > 0 else 0.0
    cdef double var = _sumsq_dev(x, M, m) / M if M > 0 else 0.0
    cdef double rstd = 1.0 / sqrt(var + eps)
    cdef double scale
    for c in range(Cg):
        scale = rstd * (w[c0 + c] if w != NULL else 1.0)
        _affine(x + c * S, y + c * S, S, <real>m, <real>scale,
                <real>(b[c0 + c] if b != NULL else 0.0))
    mean_out[0] = <real>m
    rstd_out[0] = <real>rstd


cdef void _fwd(const real* x, real* y, const real* w, const real* b, Py_ssize_t N, Py_ssize_t C,
               Py_ssize_t S, Py_ssize_t G, double eps, real* mean, real* rstd) noexcept nogil:
    cdef Py_ssize_t Cg = C // G, r
    cdef int nt = _threads_for(N * C * S, 1 << 14)
    for r in prange(N * G, nogil=True, schedule="static", num_threads=nt):
        _fwd_block(x + r * Cg * S, y + r * Cg * S, w, b, (r % G) * Cg, Cg, S, eps,
                   mean + r, rstd + r)


cdef inline void _dx_pass(const real* dy, const real* x, real* dx, Py_ssize_t n, real a, real bx,
                          real m, real c) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(n):
        dx[j] = a * dy[j] + bx * (x[j] - m) + c


cdef void _bwd_block(const real* dy, const real* x, real* dx, const real* w, Py_ssize_t c0,
                     Py_ssize_t Cg, Py_ssize_t S, double mean, double rstd,
                     double* ab) noexcept nogil:
    """One (n, g) block: ab[2c], ab[2c + 1] = sum dy, sum dy * (x - mean) of channel
    c0 + c; dx."""
    cdef Py_ssize_t M = Cg * S, c
    cdef double sum_g = 0.0, sum_gx = 0.0, wc, mg, mgx
    for c in range(Cg):
        ab[2 * c] = _sum(dy + c * S, S)
        ab[2 * c + 1] = _dot_dev(x + c * S, dy + c * S, S, mean)
        wc = w[c0 + c] if w != NULL else 1.0
        sum_g += wc * ab[2 * c]
        sum_gx += wc * ab[2 * c + 1]
    if M == 0:
        return
    mg = sum_g / M
    # mean(g * xhat) = rstd * sum g (x - mean) / M
    mgx = rstd * sum_gx / M
    for c in range(Cg):
        wc = w[c0 + c] if w != NULL else 1.0
        _dx_pass(dy + c * S, x + c * S, dx + c * S, S, <real>(rstd * wc),
                 <real>(-rstd * rstd * mgx), <real>mean, <real>(-rstd * mg))


cdef void _bwd(const real* dy, const real* x, real* dx, const real* w, const real* mean,
               const real* rstd, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S, Py_ssize_t G,
               double* ab) noexcept nogil:
    cdef Py_ssize_t Cg = C // G, r
    cdef int nt = _threads_for(N * C * S, 1 << 14)
    for r in prange(N * G, nogil=True, schedule="static", num_threads=nt):
        _bwd_block(dy + r * Cg * S, x + r * Cg * S, dx + r * Cg * S, w, (r % G) * Cg, Cg, S,
                   mean[r], rstd[r], ab + 2 * r * Cg)


def group_norm(cnp.ndarray x, object weight, object bias, Py_ssize_t G, double eps):
    """group_norm(x, weight, bias, G, eps) -> (y, saved).

    IN  x (N, C, *) C-contiguous, G divides C; weight, bias: (C,) C-contiguous or None."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1]
    cdef Py_ssize_t S = cnp.PyArray_SIZE(x) // (N * C) if N * C else 0
    cdef cnp.ndarray y = np.empty_like(x)
    cdef cnp.ndarray stats = np.empty((2, N * G), dtype=x.dtype)   # mean, rstd
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pw = _data_or_null(weight, C, T)
    cdef void* pb = _data_or_null(bias, C, T)
    cdef void* ps = _data(stats, 2 * N * G, T)
    cdef const void* px = _data(x, N * C * S, T)
    cdef void* py = _data(y, N * C * S, T)
    if T == F32:
        with nogil:
            _fwd[float](<const float*>px, <float*>py, <const float*>pw, <const float*>pb,
                        N, C, S, G, eps, <float*>ps, <float*>ps + N * G)
    else:
        with nogil:
            _fwd[double](<const double*>px, <double*>py, <const double*>pw, <const double*>pb,
                         N, C, S, G, eps, <double*>ps, <double*>ps + N * G)
    return y, (x, weight, bias is not None, stats, G)


def group_norm_backward(cnp.ndarray dy, tuple saved):
    """group_norm_backward(dy, saved) -> (d_input, d_weight or None, d_bias or None)."""
    cdef cnp.ndarray x = saved[0]
    weight = saved[1]
    cdef bint has_bias = saved[2]
    cdef cnp.ndarray stats = saved[3]
    cdef Py_ssize_t G = saved[4]
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1]
    cdef Py_ssize_t S = cnp.PyArray_SIZE(x) // (N * C) if N * C else 0
    cdef cnp.ndarray dx = np.empty_like(x)
    # per-(n, c) sum dy and sum dy * (x - mean), in double
    cdef cnp.ndarray ab = np.empty((N, C, 2), dtype=np.float64)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pw = _data_or_null(weight, C, T)
    cdef const void* ps = _data(stats, 2 * N * G, T)
    cdef const void* pdy = _data(dy, N * C * S, T)
    cdef const void* px = _data(x, N * C * S, T)
    cdef void* pdx = _data(dx, N * C * S, T)
    cdef double* pab = <double*>_data(ab, 2 * N * C, F64)
    if T == F32:
        with nogil:
            _bwd[float](<const float*>pdy, <const float*>px, <float*>pdx, <const float*>pw,
                        <const float*>ps, <const float*>ps + N * G, N, C, S, G, pab)
    else:
        with nogil:
            _bwd[double](<const double*>pdy, <const double*>px, <double*>pdx, <const double*>pw,
                         <const double*>ps, <const double*>ps + N * G, N, C, S, G, pab)
    dw = db = None
    if weight is not None or has_bias:
        dw, db = _param_grads(ab, stats, N, C, G, x.dtype)
    return dx, (dw if weight is not None else None), (db if has_bias else None)


cdef tuple _param_grads(cnp.ndarray ab, cnp.ndarray stats, Py_ssize_t N, Py_ssize_t C,
                        Py_ssize_t G, object dtype):
    """d_weight[c] = sum_n rstd B, d_bias[c] = sum_n A, added in n order."""
    cdef double[:, :, ::1] s = ab
    cdef cnp.ndarray st = np.asarray(stats, dtype=np.float64)
    cdef double[:, ::1] ms = st
    cdef cnp.ndarray dw = np.zeros(C, dtype=np.float64)
    cdef cnp.ndarray db = np.zeros(C, dtype=np.float64)
    cdef double[::1] w_ = dw
    cdef double[::1] b_ = db
    cdef Py_ssize_t n, c, Cg = C // G, r
    for n in range(N):
        for c in range(C):
            r = n * G + c // Cg
            w_[c] += ms[1, r] * s[n, c, 1]
            b_[c] += s[n, c, 0]
    return dw.astype(dtype), db.astype(dtype)
