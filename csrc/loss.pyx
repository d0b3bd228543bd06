# Loss family: cross_entropy = fused log-softmax + NLL over (M, C) rows.
#
# Every form of the loss is loss_i = sum_c a_ic (lse_i - x_ic) with coefficients a_ic
# (class index t: (1-eps) w_t [c == t] + (eps/C) w_c; probabilities q: w_c (q_c (1-eps)
# + eps/C)), so d loss_i / d x_ic = p_ic A_i - a_ic with A_i = sum_c a_ic.
#
# Forward: one visit per row (kept in L1): max, sum of exp (fnn_expf, 32 float lanes
# folded into double, fnn_reduce.h), and the coefficient sums; it writes nothing of size
# M x C -- only lse_i and A_i (doubles) are saved.  Backward: one pass per row writes
# d_x = s_i (A_i exp(x - lse_i) - a_i), recomputing exp instead of reading a stored
# softmax; the target column is then redone in double (p_t - 1 cancels in float).
# Memory traffic for forward + backward: read x twice, write d_x once (torch: log_softmax
# output, NLL gradient and softmax backward -- about twice that).  Rows are independent
# and the per-row losses are summed in row order: the same at any thread count.
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport int64_t

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"

cdef extern from *:
    """
    #include <string.h>
    #include "fnn_math.h"
    #include "fnn_reduce.h"

    #define FNN_CE_DEFINE(T, SFX, EXP, SUM)                                                   \
    static inline double fnn_ce_fwd_row_##SFX(const T* x, ptrdiff_t C, int64_t t, const T* q, \
            const T* w, double eps, double* lse_out, double* A_out) {                        \
        T m = fnn_max_##SFX(x, C);                                                           \
        double s, Sq, Sqx, Sw = 0.0, Swx = 0.0;                                              \
        SUM(C, EXP(x[i] - m), s);                                                            \
        double lse = (double)m + log(s);                                                     \
        *lse_out = lse;                                                                      \
        if (q) {                                                                             \
            if (w) { SUM(C, w[i] * q[i], Sq); SUM(C, w[i] * q[i] * x[i], Sqx); }             \
            else { SUM(C, q[i], Sq); SUM(C, q[i] * x[i], Sqx); }                             \
        } else if (t < 0) {                                                                  \
            *A_out = 0.0;                                                                    \
            return 0.0;                                                                      \
        } else {                                                                             \
            double wt = w ? (double)w[t] : 1.0;                                              \
            Sq = wt;                                                                         \
            Sqx = wt * (double)x[t];                                                         \
        }                                                                                    \
        if (eps > 0) {                                                                       \
            if (w) { SUM(C, w[i], Sw); SUM(C, w[i] * x[i], Swx); }                           \
            else { Sw = (double)C; SUM(C, x[i], Swx); }                                      \
        }                                                                                    \
        double A = (1.0 - eps) * Sq + eps / C * Sw;                                          \
        *A_out = A;                                                                          \
        if (!q && eps == 0)                                                                  \
            return Sq * (lse - (double)x[t]);                                                \
        return lse * A - ((1.0 - eps) * Sqx + eps / C * Swx);                                \
    }                                                                                        \
    static inline void fnn_ce_bwd_row_##SFX(const T* x, T* dx, ptrdiff_t C, int64_t t,       \
            const T* q, const T* w, double eps, double lse, double A, double s) {             \
        ptrdiff_t j;                                                                         \
        if (!q && t < 0) {  /* ignored: 0 * softmax, so a row holding inf/NaN stays NaN */   \
            if (isfinite(lse)) memset(dx, 0, C * sizeof(T));                                 \
            else for (j = 0; j < C; ++j) dx[j] = (T)NAN;                                     \
            return;                                                                          \
        }                                                                                    \
        T sA = (T)(s * A), l = (T)lse;                                                       \
        if (q) {                                                                             \
            T c1 = (T)(s * (1.0 - eps)), c0 = (T)(s * eps / C);                              \
            if (w) for (j = 0; j < C; ++j) dx[j] = sA * EXP(x[j] - l) - w[j] * (c1 * q[j] + c0); \
            else for (j = 0; j < C; ++j) dx[j] = sA * EXP(x[j] - l) - (c1 * q[j] + c0);      \
            return;                                                                          \
        }                                                                                    \
        if (eps > 0) {                                                                       \
            T c0 = (T)(s * eps / C);                                                         \
            if (w) for (j = 0; j < C; ++j) dx[j] = sA * EXP(x[j] - l) - c0 * w[j];          \
            else for (j = 0; j < C; ++j) dx[j] = sA * EXP(x[j] - l) - c0;                   \
        } else {                                                                             \
            for (j = 0; j < C; ++j) dx[j] = sA * EXP(x[j] - l);                             \
        }                                                                                    \
        double wt = w ? (double)w[t] : 1.0;                                                  \
        double at = (1.0 - eps) * wt + eps / C * wt;                                         \
        dx[t] = (T)(s * (A * exp((double)x[t] - lse) - at));                                 \
    }

    FNN_CE_DEFINE(float, f, fnn_expf, FNN_FLOAT_SUM)
    FNN_CE_DEFINE(double, d, exp, FNN_DOUBLE_SUM)
    """
    double fnn_ce_fwd_row_f(const float* x, Py_ssize_t C, int64_t t, const float* q,
                            const float* w, double eps, double* lse, double* A) noexcept nogil
    double fnn_ce_fwd_row_d(const double* x, Py_ssize_t C, int64_t t, const double* q,
                            const double* w, double eps, double* lse, double* A) noexcept nogil
    void fnn_ce_bwd_row_f(const float* x, float* dx, Py_ssize_t C, int64_t t, const float* q,
                          const float* w, double eps, double lse, double A, double s) noexcept nogil
    void fnn_ce_bwd_row_d(const double* x, double* dx, Py_ssize_t C, int64_t t, const double* q,
                          const double* w, double eps, double lse, double A, double s) noexcept nogil

OPS = ("cross_entropy", "cross_entropy_backward")


cdef void _fwd_rows(bint f32, const void* x, const int64_t* tgt, const void* q, const void* w,
                    Py_ssize_t M, Py_ssize_t C, int64_t ignore_index, double eps,
                    double* loss, double* lse, double* A) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t t
    cdef int nt = _threads_for(M * C, 1 << 14)
    for i in prange(M, nogil=True, schedule="static", num_threads=nt):
        t = -1
        if tgt != NULL:
            t = tgt[i]
            if t == ignore_index:
                t = -1
        if f32:
            loss[i] = fnn_ce_fwd_row_f(<const float*>x + i * C, C, t,
                                       <const float*>q + i * C if q != NULL else NULL,
                                       <const float*>w, eps, lse + i, A + i)
        else:
            loss[i] = fnn_ce_fwd_row_d(<const double*>x + i * C, C, t,
                                       <const double*>q + i * C if q != NULL else NULL,
                                       <const double*>w, eps, lse + i, A + i)


cdef void _bwd_rows(bint f32, const void* x, void* dx, const int64_t* tgt, const void* q,
                    const void* w, Py_ssize_t M, Py_ssize_t C, int64_t ignore_index, double eps,
                    const double* lse, const double* A, const void* dloss, double s0) noexcept nogil:
    # dloss: per-row upstream gradients (x's dtype) for reduction "none", else NULL and s0
    cdef Py_ssize_t i
    cdef int64_t t
    cdef double s
    cdef int nt = _threads_for(M * C, 1 << 14)
    for i in prange(M, nogil=True, schedule="static", num_threads=nt):
        t = -1
        if tgt != NULL:
            t = tgt[i]
            if t == ignore_index:
                t = -1
        s = s0
        if dloss != NULL:
            s = (<const float*>dloss)[i] if f32 else (<const double*>dloss)[i]
        if f32:
            fnn_ce_bwd_row_f(<const float*>x + i * C, <float*>dx + i * C, C, t,
                             <const float*>q + i * C if q != NULL else NULL,
                             <const float*>w, eps, lse[i], A[i], s)
        else:
            fnn_ce_bwd_row_d(<const double*>x + i * C, <double*>dx + i * C, C, t,
                             <const double*>q + i * C if q != NULL else NULL,
                             <const double*>w, eps, lse[i], A[i], s)


cdef inline const void* _ptr(object a):
    return NULL if a is None else cnp.PyArray_DATA(<cnp.ndarray>a)


def cross_entropy(cnp.ndarray x, cnp.ndarray target, object weight, int64_t ignore_index,
                  str reduction, double label_smoothing):
    """cross_entropy(x, target, weight, ignore_index, reduction, label_smoothing) -> (loss, saved).

    IN  x (M, C) C-contiguous float; target int64 (M,) class indices (valid or ignore_index)
        or (M, C) probabilities of x's dtype; weight (C,) or None.
    OUT loss: (M,) for reduction "none", else a 0-d array; x's dtype."""
    cdef Py_ssize_t M = x.shape[0], C = x.shape[1], i
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef bint prob = cnp.PyArray_TYPE(target) != cnp.NPY_INT64
    cdef cnp.ndarray loss = np.empty(M, np.float64)
    cdef cnp.ndarray lse = np.empty(M, np.float64)
    cdef cnp.ndarray A = np.empty(M, np.float64)
    cdef const int64_t* tgt = NULL if prob else <const int64_t*>cnp.PyArray_DATA(target)
    cdef const void* q = cnp.PyArray_DATA(target) if prob else NULL
    cdef const void* w = _ptr(weight)
    cdef double* pl = <double*>cnp.PyArray_DATA(loss)
    cdef double total = 0.0, denom = 0.0, scale = 1.0
    cdef const double* pA = <const double*>cnp.PyArray_DATA(A)
    cdef bint reduce = reduction != "none"
    with nogil:
        _fwd_rows(f32, cnp.PyArray_DATA(x), tgt, q, w, M, C, ignore_index, label_smoothing,
                  pl, <double*>cnp.PyArray_DATA(lse), <double*>cnp.PyArray_DATA(A))
        if reduce:
            for i in range(M):
                total += pl[i]
    if reduction == "none":
        out = loss.astype(x.dtype)
        scale = 1.0
    elif reduction == "sum":
        out = np.asarray(total, dtype=x.dtype)
    else:
        if prob:
            denom = <double>M
        else:
            with nogil:
                for i in range(M):
                    if tgt[i] == ignore_index:
                        continue
                    if w == NULL:
                        denom += 1.0
                    elif f32:
                        denom += (<const float*>w)[tgt[i]]
                    else:
                        denom += (<const double*>w)[tgt[i]]
        out = np.asarray(total / denom if denom != 0 else np.nan, dtype=x.dtype)
        # every target ignored: NaN loss (0/0) and a zero gradient, as torch
        scale = 1.0 / denom if denom != 0 else 0.0
    return out, (x, target, weight, ignore_index, reduction, label_smoothing, lse, A, scale)


def cross_entropy_backward(cnp.ndarray d_loss, tuple saved):
    """cross_entropy_backward(d_loss, saved) -> d_x (M, C).  d_loss (M,) for "none", else 0-d."""
    cdef cnp.ndarray x = saved[0], target = saved[1]
    weight = saved[2]
    cdef int64_t ignore_index = saved[3]
    cdef str reduction = saved[4]
    cdef double eps = saved[5]
    cdef cnp.ndarray lse = saved[6], A = saved[7]
    cdef double scale = saved[8]
    cdef Py_ssize_t M = x.shape[0], C = x.shape[1]
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef bint prob = cnp.PyArray_TYPE(target) != cnp.NPY_INT64
    cdef cnp.ndarray dx = cnp.PyArray_EMPTY(2, cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x), 0)
    cdef const void* dl = NULL
    cdef const void* w = _ptr(weight)
    cdef double s0 = 0.0
    if reduction == "none":
        dl = cnp.PyArray_DATA(d_loss)
    else:
        s0 = float(d_loss) * scale
    with nogil:
        _bwd_rows(f32, cnp.PyArray_DATA(x), cnp.PyArray_DATA(dx),
                  NULL if prob else <const int64_t*>cnp.PyArray_DATA(target),
                  cnp.PyArray_DATA(target) if prob else NULL, w, M, C, ignore_index,
                  eps, <const double*>cnp.PyArray_DATA(lse), <const double*>cnp.PyArray_DATA(A),
                  dl, s0)
    return dx
