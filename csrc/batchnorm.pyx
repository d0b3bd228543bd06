# BatchNorm family: batch_norm over channel axis 1 of x seen as (N, C, S).
#
# Statistics (training): one pass over x.  The work is cut into fixed units that do not
# depend on the thread count -- one (n, c) plane of S elements when S is large, a
# chunk of rows of the (N, C*S) matrix when S is small -- each unit leaves its sum and
# sum of squares (double, 8 lanes, shifted by the channel's first value so the
# variance does not cancel) in its own slot, and the slots are added in unit order:
# bit-identical results at any thread count.  Then one fused pass
# y = (x - mean) * scale + b with scale = w*rstd per channel, mean rounded to x's type
# (torch's x * scale + (b - mean * scale) cancels where |mean| >> std: a channel of
# equal values 1e30 gave 2e25 instead of b).
# Backward: one pass for sum(dy) and sum(dy*(x-mean)) per channel (same units), then
# one fused pass dx = a*dy + k*(x - mean) + c0.  Running statistics are updated in place.
# Both reductions share one driver (_channel_sums) and both elementwise passes another
# (_per_channel); the shells are written once over the fused type `real`.
cimport cython
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

cdef extern from "fnn_reduce.h" nogil:
    void fnn_cv_moments_f(const float* x, Py_ssize_t n, double c, double* s, double* q)
    void fnn_cv_moments_d(const double* x, Py_ssize_t n, double c, double* s, double* q)
    void fnn_cv_gsums_f(const float* g, const float* x, Py_ssize_t n, double c, double* s, double* p)
    void fnn_cv_gsums_d(const double* g, const double* x, Py_ssize_t n, double c, double* s,
                        double* p)

OPS = ("batch_norm", "batch_norm_backward")

cdef enum:
    PLANE_MIN = 64      # planes at least this long are units of their own
    ROW_CHUNK = 4096    # elements per row chunk otherwise

cdef enum:              # what _per_channel writes
    AFFINE = 0          # out = (x - m[c]) * a[c] + c0[c]
    BWD_TRAIN = 1       # out = a[c] * g + kk[c] * (x - m[c]) + c0[c]
    BWD_EVAL = 2        # out = a[c] * g


cdef inline Py_ssize_t _rows_per_chunk(Py_ssize_t row) noexcept nogil:
    cdef Py_ssize_t r = ROW_CHUNK // row if row > 0 else 1
    return r if r > 0 else 1


cdef inline void _plane_sums(const real* g, const real* x, Py_ssize_t S, double center,
                             double* a, double* b, bint grad) noexcept nogil:
    """One (n, c) plane's pair of sums into a[0], b[0] (see _channel_sums)."""
    if grad:
        if real is float:
            fnn_cv_gsums_f(<const float*>g, <const float*>x, S, center, a, b)
        else:
            fnn_cv_gsums_d(<const double*>g, <const double*>x, S, center, a, b)
    elif real is float:
        fnn_cv_moments_f(<const float*>x, S, center, a, b)
    else:
        fnn_cv_moments_d(<const double*>x, S, center, a, b)


cdef inline void _row_sums(const real* g, const real* x, Py_ssize_t C, Py_ssize_t S,
                           const double* center, double* part, bint grad) noexcept nogil:
    """One row of (N, C*S): channel c's pair of sums added to part[2c], part[2c + 1]."""
    cdef Py_ssize_t c, k
    cdef double d, gg
    if grad:
        for c in range(C):
            for k in range(S):
                gg = g[c * S + k]
                part[2 * c] += gg
                part[2 * c + 1] += gg * (x[c * S + k] - center[c])
    else:
        for c in range(C):
            for k in range(S):
                d = x[c * S + k] - center[c]
                part[2 * c] += d
                part[2 * c + 1] += d * d


cdef int _channel_sums(const real* g, const real* x, Py_ssize_t N, Py_ssize_t C,
                       Py_ssize_t S, const double* center, double* a_out, double* b_out,
                       bint grad) except -1 nogil:
    """Per channel c, over n and s, with d = x - center[c]:
    grad:     a_out[c] = sum(g), b_out[c] = sum(g * d);
    not grad: a_out[c] = sum(d), b_out[c] = sum(d * d)   (g unused, may be NULL).
    Each unit sums into its own slot; the slots are added in unit order."""
    cdef Py_ssize_t u, n, c, units, R = _rows_per_chunk(C * S)
    cdef double a, b
    cdef double* part
    cdef int nt = _threads_for(N * C * S, 1 << 15)
    if S >= PLANE_MIN:
        units = N
        part = <double*>_alloc(2 * N * C, sizeof(double))
        for u in prange(N * C, nogil=True, schedule="static", num_threads=nt):
            _plane_sums(g + u * S if grad else NULL, x + u * S, S, center[u % C],
                        &part[2 * u], &part[2 * u + 1], grad)
    else:
        units = (N + R - 1) // R
        part = <double*>_alloc(2 * units * C, sizeof(double))
        memset(part, 0, 2 * units * C * sizeof(double))
        for u in prange(units, nogil=True, schedule="static", num_threads=nt):
            for n in range(u * R, min(u * R + R, N)):
                _row_sums(g + n * C * S if grad else NULL, x + n * C * S, C, S, center,
                          part + 2 * u * C, grad)
    for c in range(C):
        a = 0.0
        b = 0.0
        for u in range(units):
            a = a + part[2 * (u * C + c)]
            b = b + part[2 * (u * C + c) + 1]
        a_out[c] = a
        b_out[c] = b
    free(part)
    return 0


cdef inline void _channels(const real* g, const real* x, real* out, Py_ssize_t C,
                           Py_ssize_t S, const real* a, const real* kk, const real* m,
                           const real* c0, int mode) noexcept nogil:
    """C consecutive segments of S elements, segment c with channel values a[c] .. c0[c]."""
    cdef Py_ssize_t c, k
    cdef real aa, k2, mm, cc
    if mode == AFFINE:
        for c in range(C):
            aa = a[c]
            mm = m[c]
            cc = c0[c]
            for k in range(S):
                out[c * S + k] = (x[c * S + k] - mm) * aa + cc
    elif mode == BWD_TRAIN:
        for c in range(C):
            aa = a[c]
            k2 = kk[c]
            mm = m[c]
            cc = c0[c]
            for k in range(S):
                out[c * S + k] = aa * g[c * S + k] + k2 * (x[c * S + k] - mm) + cc
    else:
        for c in range(C):
            aa = a[c]
            for k in range(S):
                out[c * S + k] = aa * g[c * S + k]


cdef void _per_channel(const real* g, const real* x, real* out, Py_ssize_t N, Py_ssize_t C,
                       Py_ssize_t S, const real* a, const real* kk, const real* m,
                       const real* c0, int mode) noexcept nogil:
    """out over every (n, c) segment of S elements as `mode` says (the enum above): one
    plane a unit when planes are long, one row of C planes otherwise.  In BWD_EVAL x does
    not enter, so a NaN in x does not reach dx -- as in the reference and torch; kk is
    read in BWD_TRAIN only, m in BWD_TRAIN and AFFINE (NULL otherwise), g not in AFFINE."""
    cdef Py_ssize_t u, n, c, o
    cdef bint train = mode == BWD_TRAIN, has_m = mode != BWD_EVAL
    cdef int nt = _threads_for(N * C * S, 1 << 15)
    if S >= PLANE_MIN:
        for u in prange(N * C, nogil=True, schedule="static", num_threads=nt):
            c = u % C
            o = u * S
            _channels(g + o if mode != AFFINE else NULL, x + o, out + o, 1, S, a + c,
                      kk + c if train else NULL, m + c if has_m else NULL, c0 + c, mode)
    else:
        for n in prange(N, nogil=True, schedule="static", num_threads=nt):
            o = n * C * S
            _channels(g + o if mode != AFFINE else NULL, x + o, out + o, C, S, a, kk, m, c0,
                      mode)


def batch_norm(cnp.ndarray x, object running_mean, object running_var, object weight,
               object bias, bint training, double momentum, double eps):
    """batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
    -> (y, saved).  x (N, C, *) C-contiguous; the per-channel vectors are C-contiguous
    (C,) arrays of x's dtype or None.  Training updates running_mean / running_var in place."""
    if x.dtype == np.float32:
        return _batch_norm(<const float*>_data(x, cnp.PyArray_SIZE(x), F32), x, running_mean,
                           running_var, weight, bias, training, momentum, eps)
    return _batch_norm(<const double*>_data(x, cnp.PyArray_SIZE(x), F64), x, running_mean,
                       running_var, weight, bias, training, momentum, eps)


cdef tuple _batch_norm(const real* xd, cnp.ndarray x, object running_mean,
                       object running_var, object weight, object bias, bint training,
                       double momentum, double eps):
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1]
    cdef Py_ssize_t S = x.size // (N * C) if N * C > 0 else 0
    cdef Py_ssize_t M = N * S, c
    cdef cnp.ndarray y = np.empty_like(x)
    cdef cnp.ndarray mean = np.empty(C, dtype=np.float64)
    cdef cnp.ndarray rstd = np.empty(C, dtype=np.float64)
    cdef double[::1] mv = mean, rv = rstd
    cdef double[::1] shift = np.zeros(C, dtype=np.float64)
    cdef double[::1] s = np.empty(C, dtype=np.float64), q = np.empty(C, dtype=np.float64)
    cdef double var, mu
    cdef double[::1] rmean, rvar
    xf = x.reshape(N, C, S) if N * C > 0 else x
    wd = None if weight is None else np.asarray(weight, dtype=np.float64)
    bd = None if bias is None else np.asarray(bias, dtype=np.float64)
    if training:
        if M > 0:
            shift = np.array(xf[0, :, 0], dtype=np.float64)   # a copy: x may be read-only
        with nogil:
            _channel_sums(<const real*>NULL, xd, N, C, S, &shift[0], &s[0], &q[0], False)
        for c in range(C):
            mu = s[c] / M
            var = q[c] / M - mu * mu
            if var < 0:
                var = 0.0
            mv[c] = shift[c] + mu
            rv[c] = 1.0 / sqrt(var + eps)
            s[c] = var    # keep the biased variance for the running update
        if running_mean is not None:
            rmean = np.asarray(running_mean, dtype=np.float64)
            np.copyto(running_mean, (1.0 - momentum) * np.asarray(rmean) + momentum * mean,
                      casting="unsafe")
        if running_var is not None:
            rvar = np.asarray(running_var, dtype=np.float64)
            np.copyto(running_var, (1.0 - momentum) * np.asarray(rvar)
                      + momentum * np.asarray(s) * (M / (M - 1.0)), casting="unsafe")
    else:
        mean[:] = running_mean
        rstd[:] = 1.0 / np.sqrt(np.asarray(running_var, dtype=np.float64) + eps)
    scale = rstd if wd is None else wd * rstd
    cdef cnp.ndarray a = scale.astype(x.dtype)
    cdef cnp.ndarray b = (np.zeros(C) if bd is None else bd).astype(x.dtype)
    cdef cnp.ndarray mx = mean.astype(x.dtype)
    cdef real* py = _typed(y, N * C * S, <real>0)
    cdef const real* pa = _typed(a, C, <real>0)
    cdef const real* pb = _typed(b, C, <real>0)
    cdef const real* pm = _typed(mx, C, <real>0)
    with nogil:
        _per_channel(<const real*>NULL, xd, py, N, C, S, pa, <const real*>NULL, pm, pb,
                     AFFINE)
    return y, (x, weight, bias is not None, mean, rstd, training)


def batch_norm_backward(cnp.ndarray dy, tuple saved):
    """-> (d_input, d_weight or None, d_bias or None)."""
    cdef cnp.ndarray x = saved[0]
    if x.dtype == np.float32:
        return _batch_norm_backward(<const float*>_data(x, cnp.PyArray_SIZE(x), F32), dy, saved)
    return _batch_norm_backward(<const double*>_data(x, cnp.PyArray_SIZE(x), F64), dy, saved)


cdef tuple _batch_norm_backward(const real* xd, cnp.ndarray dy, tuple saved):
    cdef cnp.ndarray x = saved[0]
    weight = saved[1]
    cdef bint has_bias = saved[2]
    cdef cnp.ndarray mean = saved[3], rstd = saved[4]
    cdef bint training = saved[5]
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1]
    cdef Py_ssize_t S = x.size // (N * C) if N * C > 0 else 0
    cdef Py_ssize_t M = N * S
    cdef cnp.ndarray dx = np.empty_like(x)
    cdef double[::1] s = np.zeros(C, dtype=np.float64), p = np.zeros(C, dtype=np.float64)
    cdef double[::1] mv = mean
    cdef const real* dyd = _typed(dy, N * C * S, <real>0)
    with nogil:
        _channel_sums(dyd, xd, N, C, S, &mv[0] if C > 0 else NULL, &s[0] if C > 0 else NULL,
                      &p[0] if C > 0 else NULL, True)
    sa = np.asarray(s)
    pa = np.asarray(p)
    w = np.ones(C) if weight is None else np.asarray(weight, dtype=np.float64)
    a = w * rstd
    if training and M > 0:
        # dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)); xhat = (x - mean) rstd
        kk = -a * rstd * rstd * pa / M
        c0 = -a * sa / M
    else:
        kk = np.zeros(C)
        c0 = np.zeros(C)
    cdef cnp.ndarray a_r = a.astype(x.dtype)
    cdef cnp.ndarray k_r = kk.astype(x.dtype)
    cdef cnp.ndarray m_r = mean.astype(x.dtype)
    cdef cnp.ndarray c_r = c0.astype(x.dtype)
    cdef real* pdx = _typed(dx, N * C * S, <real>0)
    cdef const real* p_a = _typed(a_r, C, <real>0)
    cdef const real* p_k = _typed(k_r, C, <real>0)
    cdef const real* p_m = _typed(m_r, C, <real>0)
    cdef const real* p_c = _typed(c_r, C, <real>0)
    with nogil:
        _per_channel(dyd, xd, pdx, N, C, S, p_a, p_k, p_m, p_c,
                     BWD_TRAIN if training else BWD_EVAL)
    dw = (pa * rstd).astype(x.dtype) if weight is not None else None
    db = sa.astype(x.dtype) if has_bias else None
    return dx, dw, db
