# BatchNorm family: batch_norm over channel axis 1 of x seen as (N, C, S).
#
# Statistics (training): one pass over x.  The work is cut into fixed units that do not
# depend on the thread count -- one (n, c) plane of S elements when S is large, a
# chunk of rows of the (N, C*S) matrix when S is small -- each unit leaves its sum and
# sum of squares (double, 8 lanes, shifted by the channel's first value so the
# variance does not cancel) in its own slot, and the slots are added in unit order:
# bit-identical results at any thread count.  Then one fused pass y = x*scale + shift
# with scale = w*rstd, shift = b - mean*scale per channel.
# Backward: one pass for sum(dy) and sum(dy*(x-mean)) per channel (same units), then
# one fused pass dx = a*dy + k*(x - mean) + c0.  Running statistics are updated in place.
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdlib cimport malloc, free
from libc.string cimport memset

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"

cdef extern from "fnn_conv.h" nogil:
    void fnn_cv_moments_f(const float* x, Py_ssize_t n, double c, double* s, double* q)
    void fnn_cv_moments_d(const double* x, Py_ssize_t n, double c, double* s, double* q)
    void fnn_cv_gsums_f(const float* g, const float* x, Py_ssize_t n, double c, double* s, double* p)
    void fnn_cv_gsums_d(const double* g, const double* x, Py_ssize_t n, double c, double* s,
                        double* p)

OPS = ("batch_norm", "batch_norm_backward")

cdef enum:
    PLANE_MIN = 64      # planes at least this long are units of their own
    ROW_CHUNK = 4096    # elements per row chunk otherwise


cdef inline Py_ssize_t _rows_per_chunk(Py_ssize_t row) noexcept nogil:
    cdef Py_ssize_t r = ROW_CHUNK // row if row > 0 else 1
    return r if r > 0 else 1


cdef void _moments(const real* x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S,
                   const double* shift, double* s_out, double* q_out) noexcept nogil:
    """s_out[c] = sum(x - shift[c]), q_out[c] = sum((x - shift[c])^2) over n and s."""
    cdef Py_ssize_t u, n, c, k, r0, r1, R, nch
    cdef double s, q, d
    cdef double* part
    cdef int nt = _threads_for(N * C * S, 1 << 15)
    if S >= PLANE_MIN:
        part = <double*>malloc(2 * N * C * sizeof(double))
        for u in prange(N * C, nogil=True, schedule="static", num_threads=nt):
            c = u % C
            if real is float:
                fnn_cv_moments_f(<const float*>x + u * S, S, shift[c], &part[2 * u], &part[2 * u + 1])
            else:
                fnn_cv_moments_d(<const double*>x + u * S, S, shift[c], &part[2 * u], &part[2 * u + 1])
        for c in range(C):
            s = 0.0
            q = 0.0
            for n in range(N):
                s = s + part[2 * (n * C + c)]
                q = q + part[2 * (n * C + c) + 1]
            s_out[c] = s
            q_out[c] = q
        free(part)
    else:
        R = _rows_per_chunk(C * S)
        nch = (N + R - 1) // R
        part = <double*>malloc(2 * nch * C * sizeof(double) + 1)
        memset(part, 0, 2 * nch * C * sizeof(double))
        for u in prange(nch, nogil=True, schedule="static", num_threads=nt):
            r0 = u * R
            r1 = r0 + R
            if r1 > N:
                r1 = N
            for n in range(r0, r1):
                for c in range(C):
                    for k in range(S):
                        d = x[(n * C + c) * S + k] - shift[c]
                        part[2 * (u * C + c)] += d
                        part[2 * (u * C + c) + 1] += d * d
        for c in range(C):
            s = 0.0
            q = 0.0
            for u in range(nch):
                s = s + part[2 * (u * C + c)]
                q = q + part[2 * (u * C + c) + 1]
            s_out[c] = s
            q_out[c] = q
        free(part)


cdef void _gsums(const real* g, const real* x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S,
                 const double* mean, double* s_out, double* p_out) noexcept nogil:
    """s_out[c] = sum(g), p_out[c] = sum(g * (x - mean[c])) over n and s."""
    cdef Py_ssize_t u, n, c, k, r0, r1, R, nch, i
    cdef double s, p, gg
    cdef double* part
    cdef int nt = _threads_for(N * C * S, 1 << 15)
    if S >= PLANE_MIN:
        part = <double*>malloc(2 * N * C * sizeof(double))
        for u in prange(N * C, nogil=True, schedule="static", num_threads=nt):
            c = u % C
            if real is float:
                fnn_cv_gsums_f(<const float*>g + u * S, <const float*>x + u * S, S, mean[c],
                               &part[2 * u], &part[2 * u + 1])
            else:
                fnn_cv_gsums_d(<const double*>g + u * S, <const double*>x + u * S, S, mean[c],
                               &part[2 * u], &part[2 * u + 1])
        for c in range(C):
            s = 0.0
            p = 0.0
            for n in range(N):
                s = s + part[2 * (n * C + c)]
                p = p + part[2 * (n * C + c) + 1]
            s_out[c] = s
            p_out[c] = p
        free(part)
    else:
        R = _rows_per_chunk(C * S)
        nch = (N + R - 1) // R
        part = <double*>malloc(2 * nch * C * sizeof(double) + 1)
        memset(part, 0, 2 * nch * C * sizeof(double))
        for u in prange(nch, nogil=True, schedule="static", num_threads=nt):
            r0 = u * R
            r1 = r0 + R
            if r1 > N:
                r1 = N
            for n in range(r0, r1):
                for c in range(C):
                    for k in range(S):
                        i = (n * C + c) * S + k
                        gg = g[i]
                        part[2 * (u * C + c)] += gg
                        part[2 * (u * C + c) + 1] += gg * (x[i] - mean[c])
        for c in range(C):
            s = 0.0
            p = 0.0
            for u in range(nch):
                s = s + part[2 * (u * C + c)]
                p = p + part[2 * (u * C + c) + 1]
            s_out[c] = s
            p_out[c] = p
        free(part)


cdef void _affine(const real* x, real* y, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S,
                  const real* a, const real* b) noexcept nogil:
    """y = x * a[c] + b[c]."""
    cdef Py_ssize_t u, c, k, n
    cdef real aa, bb
    cdef const real* xp
    cdef real* yp
    cdef int nt = _threads_for(N * C * S, 1 << 15)
    if S >= PLANE_MIN:
        for u in prange(N * C, nogil=True, schedule="static", num_threads=nt):
            c = u % C
            aa = a[c]
            bb = b[c]
            xp = x + u * S
            yp = y + u * S
            for k in range(S):
                yp[k] = xp[k] * aa + bb
    else:
        for n in prange(N, nogil=True, schedule="static", num_threads=nt):
            for c in range(C):
                aa = a[c]
                bb = b[c]
                xp = x + (n * C + c) * S
                yp = y + (n * C + c) * S
                for k in range(S):
                    yp[k] = xp[k] * aa + bb


cdef void _bwd_apply(const real* g, const real* x, real* dx, Py_ssize_t N, Py_ssize_t C,
                     Py_ssize_t S, const real* a, const real* kk, const real* m,
                     const real* c0, bint training) noexcept nogil:
    """dx = a[c] * g + kk[c] * (x - m[c]) + c0[c] in training; dx = a[c] * g in eval (x
    does not enter, so a NaN in x does not reach dx -- as in the reference and torch)."""
    cdef Py_ssize_t u, c, k, n, o
    cdef real aa, k2, mm, cc
    cdef int nt = _threads_for(N * C * S, 1 << 15)
    if S >= PLANE_MIN:
        for u in prange(N * C, nogil=True, schedule="static", num_threads=nt):
            c = u % C
            aa = a[c]
            k2 = kk[c]
            mm = m[c]
            cc = c0[c]
            o = u * S
            if training:
                for k in range(S):
                    dx[o + k] = aa * g[o + k] + k2 * (x[o + k] - mm) + cc
            else:
                for k in range(S):
                    dx[o + k] = aa * g[o + k]
    else:
        for n in prange(N, nogil=True, schedule="static", num_threads=nt):
            for c in range(C):
                aa = a[c]
                k2 = kk[c]
                mm = m[c]
                cc = c0[c]
                o = (n * C + c) * S
                if training:
                    for k in range(S):
                        dx[o + k] = aa * g[o + k] + k2 * (x[o + k] - mm) + cc
                else:
                    for k in range(S):
                        dx[o + k] = aa * g[o + k]


def batch_norm(cnp.ndarray x, object running_mean, object running_var, object weight,
               object bias, bint training, double momentum, double eps):
    """batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
    -> (y, saved).  x (N, C, *) C-contiguous; the per-channel vectors are C-contiguous
    (C,) arrays of x's dtype or None.  Training updates running_mean / running_var in place."""
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
        if x.dtype == np.float32:
            with nogil:
                _moments[float](<const float*>cnp.PyArray_DATA(x), N, C, S, &shift[0], &s[0], &q[0])
        else:
            with nogil:
                _moments[double](<const double*>cnp.PyArray_DATA(x), N, C, S, &shift[0], &s[0], &q[0])
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
    sh = -mean * scale if bd is None else bd - mean * scale
    a = scale.astype(x.dtype)
    b = sh.astype(x.dtype)
    if x.dtype == np.float32:
        _affine_call_f(x, y, N, C, S, a, b)
    else:
        _affine_call_d(x, y, N, C, S, a, b)
    return y, (x, weight, bias is not None, mean, rstd, training)


cdef _affine_call_f(cnp.ndarray x, cnp.ndarray y, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S,
                    cnp.ndarray a, cnp.ndarray b):
    with nogil:
        _affine[float](<const float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(y), N, C, S,
                       <const float*>cnp.PyArray_DATA(a), <const float*>cnp.PyArray_DATA(b))


cdef _affine_call_d(cnp.ndarray x, cnp.ndarray y, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S,
                    cnp.ndarray a, cnp.ndarray b):
    with nogil:
        _affine[double](<const double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(y), N, C, S,
                        <const double*>cnp.PyArray_DATA(a), <const double*>cnp.PyArray_DATA(b))


def batch_norm_backward(cnp.ndarray dy, tuple saved):
    """-> (d_input, d_weight or None, d_bias or None)."""
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
    if x.dtype == np.float32:
        with nogil:
            _gsums[float](<const float*>cnp.PyArray_DATA(dy), <const float*>cnp.PyArray_DATA(x),
                          N, C, S, &mv[0] if C > 0 else NULL, &s[0] if C > 0 else NULL,
                          &p[0] if C > 0 else NULL)
    else:
        with nogil:
            _gsums[double](<const double*>cnp.PyArray_DATA(dy), <const double*>cnp.PyArray_DATA(x),
                           N, C, S, &mv[0] if C > 0 else NULL, &s[0] if C > 0 else NULL,
                           &p[0] if C > 0 else NULL)
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
    if x.dtype == np.float32:
        with nogil:
            _bwd_apply[float](<const float*>cnp.PyArray_DATA(dy), <const float*>cnp.PyArray_DATA(x),
                              <float*>cnp.PyArray_DATA(dx), N, C, S,
                              <const float*>cnp.PyArray_DATA(a_r), <const float*>cnp.PyArray_DATA(k_r),
                              <const float*>cnp.PyArray_DATA(m_r), <const float*>cnp.PyArray_DATA(c_r),
                              training)
    else:
        with nogil:
            _bwd_apply[double](<const double*>cnp.PyArray_DATA(dy), <const double*>cnp.PyArray_DATA(x),
                               <double*>cnp.PyArray_DATA(dx), N, C, S,
                               <const double*>cnp.PyArray_DATA(a_r),
                               <const double*>cnp.PyArray_DATA(k_r),
                               <const double*>cnp.PyArray_DATA(m_r),
                               <const double*>cnp.PyArray_DATA(c_r), training)
    dw = (pa * rstd).astype(x.dtype) if weight is not None else None
    db = sa.astype(x.dtype) if has_bias else None
    return dx, dw, db
