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
#
# nll_loss: loss_i = -w_t x_it, a gather; backward writes the zero rows and one value each.
#
# Elementwise losses (MSE, L1, smooth L1, Huber, BCE, BCE with logits, KL divergence): one
# pass computes each term and either stores it ("none") or sums it (float lanes folded into
# double per 512 elements, fnn_reduce.h); backward is one pass that recomputes what it
# needs from x and y (nothing of x's size is saved).  The work is cut into fixed chunks of
# FNN_PWL_CHUNK elements whose partial sums are added in chunk order afterwards, so the
# loss is the same bits at any thread count.  The kind is switched once per chunk, never
# per element, so each kind's loop vectorises on its own.
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

    #define FNN_PWL_CHUNK 32768
    enum { FNN_MSE, FNN_L1, FNN_SMOOTH_L1, FNN_HUBER, FNN_BCE, FNN_BCE_LOGITS, FNN_KL, FNN_KL_LOG };

    /* log clamped at -100 as torch's binary_cross_entropy (NaN stays NaN) */
    static inline double fnn_clog(double v) { return v < -100.0 ? -100.0 : v; }
    static inline float fnn_sl1_f(float d, float b) {
        float a = fnn_absf(d); return a < b ? 0.5f * d * d / b : a - 0.5f * b; }
    static inline double fnn_sl1_d(double d, double b) {
        double a = fabs(d); return a < b ? 0.5 * d * d / b : a - 0.5 * b; }
    static inline float fnn_huber_f(float d, float b) {
        float a = fnn_absf(d); return a < b ? 0.5f * d * d : b * (a - 0.5f * b); }
    static inline double fnn_huber_d(double d, double b) {
        double a = fabs(d); return a < b ? 0.5 * d * d : b * (a - 0.5 * b); }
    /* -log_sigmoid(x) = max(-x, 0) + log1p(exp(-|x|)): no overflow for any x */
    static inline float fnn_nls_f(float x) {
        return (x < 0.0f ? -x : 0.0f) + fnn_log1pf(fnn_expf_nonpos(-fnn_absf(x))); }
    static inline double fnn_nls_d(double x) { return (x < 0.0 ? -x : 0.0) + log1p(exp(-fabs(x))); }
    static inline float fnn_sig_f(float x) {
        float e = fnn_expf_nonpos(-fnn_absf(x)), r = 1.0f / (1.0f + e); return x >= 0.0f ? r : e * r; }
    static inline double fnn_sig_d(double x) {
        double e = exp(-fabs(x)), r = 1.0 / (1.0 + e); return x >= 0.0 ? r : e * r; }
    static inline double fnn_xlogx(double y) { return y == 0.0 ? 0.0 : y * log(y); }
    static inline float fnn_clampf(float d, float b) { return d < -b ? -b : (d > b ? b : d); }
    static inline double fnn_clampd(double d, double b) { return d < -b ? -b : (d > b ? b : d); }

    /* the MSE sum, the hot case (a regression loss over whole activations): on AVX2 the
       32-element steps go through four vector accumulators (fnn_reduce.h's FNN_SUM_F, the
       same lanes and so the same bits as FNN_FLOAT_SUM, about twice as fast) */
    #if defined(__AVX2__) && defined(__FMA__)
    #define FNN_VSTEP_MSE(acc, j) do { __m256 _d = _mm256_sub_ps(_mm256_loadu_ps(x + (j)),       \
                                         _mm256_loadu_ps(y + (j)));                          \
                                     acc = _mm256_fmadd_ps(_d, _d, acc); } while (0)
    #else
    #define FNN_VSTEP_MSE(acc, j)
    #endif
    static inline double fnn_mse_sum_f(const float* x, const float* y, ptrdiff_t n) {
        double t; FNN_SUM_F(n, (x[i] - y[i]) * (x[i] - y[i]), FNN_VSTEP_MSE, t); return t; }
    static inline double fnn_mse_sum_d(const double* x, const double* y, ptrdiff_t n) {
        double t; FNN_DOUBLE_SUM(n, (x[i] - y[i]) * (x[i] - y[i]), t); return t; }

    /* one kind's forward over a chunk: store the terms (out) or sum them */
    #define FNN_PWL_FWD_CASE(T, SUM, TERM)                                                   \
        if (out) { if (w) for (i = 0; i < n; ++i) out[i] = (TERM) * w[i];                    \
                   else for (i = 0; i < n; ++i) out[i] = (TERM); }                          \
        else if (w) SUM(n, (TERM) * w[i], total);                                            \
        else SUM(n, (TERM), total);
    /* one kind's backward over a chunk: dx = g * dterm (* w), g scalar or per element */
    #define FNN_PWL_BWD_CASE(T, GRAD)                                                        \
        if (dl) { if (w) for (i = 0; i < n; ++i) dx[i] = dl[i] * w[i] * (GRAD);              \
                  else for (i = 0; i < n; ++i) dx[i] = dl[i] * (GRAD); }                     \
        else { if (w) for (i = 0; i < n; ++i) dx[i] = g * w[i] * (GRAD);                     \
               else for (i = 0; i < n; ++i) dx[i] = g * (GRAD); }

    #define FNN_PWL_DEFINE(T, SFX, SUM, ABS, LOGT, EXPT, LOG1PT)                              \
    static double fnn_pwl_fwd_##SFX(int kind, const T* x, const T* y, const T* w,             \
            const T* pw, T p, T* out, ptrdiff_t n) {                                          \
        double total = 0.0;                                                                  \
        ptrdiff_t i;                                                                         \
        switch (kind) {                                                                      \
        case FNN_MSE:                                                                        \
            if (!out && !w) total = fnn_mse_sum_##SFX(x, y, n);                              \
            else { FNN_PWL_FWD_CASE(T, SUM, (x[i] - y[i]) * (x[i] - y[i])) }                  \
            break;                                                                           \
        case FNN_L1: FNN_PWL_FWD_CASE(T, SUM, ABS(x[i] - y[i])) break;                        \
        case FNN_SMOOTH_L1: FNN_PWL_FWD_CASE(T, SUM, fnn_sl1_##SFX(x[i] - y[i], p)) break;    \
        case FNN_HUBER: FNN_PWL_FWD_CASE(T, SUM, fnn_huber_##SFX(x[i] - y[i], p)) break;      \
        case FNN_BCE: FNN_PWL_FWD_CASE(T, SUM, (T)(-((double)y[i] * fnn_clog(log((double)x[i])) \
                + (1.0 - (double)y[i]) * fnn_clog(log1p(-(double)x[i]))))) break;             \
        case FNN_BCE_LOGITS:                                                                 \
            if (pw) { FNN_PWL_FWD_CASE(T, SUM, ((T)1 - y[i]) * x[i]                           \
                        + ((T)1 + (pw[i] - (T)1) * y[i]) * fnn_nls_##SFX(x[i])) }             \
            else { FNN_PWL_FWD_CASE(T, SUM, ((T)1 - y[i]) * x[i] + fnn_nls_##SFX(x[i])) }     \
            break;                                                                           \
        case FNN_KL: FNN_PWL_FWD_CASE(T, SUM, (T)(fnn_xlogx((double)y[i]) - (double)y[i] * (double)x[i])) break; \
        case FNN_KL_LOG: FNN_PWL_FWD_CASE(T, SUM, EXPT(y[i]) * (y[i] - x[i])) break;          \
        }                                                                                    \
        return total;                                                                        \
    }                                                                                        \
    static void fnn_pwl_bwd_##SFX(int kind, const T* x, const T* y, const T* w, const T* pw,  \
            T p, const T* dl, T g, T* dx, ptrdiff_t n) {                                      \
        ptrdiff_t i;                                                                         \
        switch (kind) {                                                                      \
        case FNN_MSE: FNN_PWL_BWD_CASE(T, (T)2 * (x[i] - y[i])) break;                        \
        case FNN_L1: FNN_PWL_BWD_CASE(T, (T)((x[i] > y[i]) - (x[i] < y[i]))) break;           \
        case FNN_SMOOTH_L1:                                                                  \
            if (p == (T)0) { FNN_PWL_BWD_CASE(T, (T)((x[i] > y[i]) - (x[i] < y[i]))) }        \
            else { FNN_PWL_BWD_CASE(T, fnn_clamp##SFX(x[i] - y[i], p) / p) }                   \
            break;                                                                           \
        case FNN_HUBER: FNN_PWL_BWD_CASE(T, fnn_clamp##SFX(x[i] - y[i], p)) break;            \
        case FNN_BCE: FNN_PWL_BWD_CASE(T, (T)(((double)x[i] - (double)y[i])                  \
                / fmax((1.0 - (double)x[i]) * (double)x[i], 1e-12))) break;                   \
        case FNN_BCE_LOGITS:                                                                 \
            if (pw) { FNN_PWL_BWD_CASE(T, ((T)1 + (pw[i] - (T)1) * y[i]) * fnn_sig_##SFX(x[i]) \
                                           - pw[i] * y[i]) }                                  \
            else { FNN_PWL_BWD_CASE(T, fnn_sig_##SFX(x[i]) - y[i]) }                          \
            break;                                                                           \
        case FNN_KL: FNN_PWL_BWD_CASE(T, -y[i]) break;                                        \
        case FNN_KL_LOG: FNN_PWL_BWD_CASE(T, -EXPT(y[i])) break;                              \
        }                                                                                    \
    }

    FNN_PWL_DEFINE(float, f, FNN_FLOAT_SUM, fnn_absf, logf, fnn_expf, fnn_log1pf)
    FNN_PWL_DEFINE(double, d, FNN_DOUBLE_SUM, fabs, log, exp, log1p)
    """
    double fnn_ce_fwd_row_f(const float* x, Py_ssize_t C, int64_t t, const float* q,
                            const float* w, double eps, double* lse, double* A) noexcept nogil
    double fnn_ce_fwd_row_d(const double* x, Py_ssize_t C, int64_t t, const double* q,
                            const double* w, double eps, double* lse, double* A) noexcept nogil
    void fnn_ce_bwd_row_f(const float* x, float* dx, Py_ssize_t C, int64_t t, const float* q,
                          const float* w, double eps, double lse, double A, double s) noexcept nogil
    void fnn_ce_bwd_row_d(const double* x, double* dx, Py_ssize_t C, int64_t t, const double* q,
                          const double* w, double eps, double lse, double A, double s) noexcept nogil

    double fnn_pwl_fwd_f(int kind, const float* x, const float* y, const float* w,
                         const float* pw, float p, float* out, Py_ssize_t n) noexcept nogil
    double fnn_pwl_fwd_d(int kind, const double* x, const double* y, const double* w,
                         const double* pw, double p, double* out, Py_ssize_t n) noexcept nogil
    void fnn_pwl_bwd_f(int kind, const float* x, const float* y, const float* w, const float* pw,
                       float p, const float* dl, float g, float* dx, Py_ssize_t n) noexcept nogil
    void fnn_pwl_bwd_d(int kind, const double* x, const double* y, const double* w,
                       const double* pw, double p, const double* dl, double g, double* dx,
                       Py_ssize_t n) noexcept nogil
    const int FNN_PWL_CHUNK

OPS = ("cross_entropy", "cross_entropy_backward", "nll_loss", "nll_loss_backward",
       "elementwise_loss", "elementwise_loss_backward")

_KINDS = {"mse": 0, "l1": 1, "smooth_l1": 2, "huber": 3, "bce": 4, "bce_logits": 5, "kl_div": 6,
          "kl_div_log": 7}


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


# ------------------------------------------------------------------ nll_loss
def nll_loss(cnp.ndarray x, cnp.ndarray target, object weight, int64_t ignore_index,
             str reduction):
    """nll_loss(x, target, weight, ignore_index, reduction) -> (loss, saved).

    IN  x (M, C) C-contiguous float log-probabilities; target int64 (M,) (valid or
        ignore_index); weight (C,) or None.  OUT loss (M,) for "none", else 0-d."""
    cdef Py_ssize_t M = x.shape[0], C = x.shape[1], i
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef const int64_t* t = <const int64_t*>cnp.PyArray_DATA(target)
    cdef const void* w = _ptr(weight)
    cdef const void* px = cnp.PyArray_DATA(x)
    cdef cnp.ndarray loss = np.empty(M, np.float64)
    cdef double* pl = <double*>cnp.PyArray_DATA(loss)
    cdef double total = 0.0, denom = 0.0, wt, scale = 1.0
    with nogil:
        for i in range(M):   # a gather: one value per row, not worth a thread team
            if t[i] == ignore_index:
                pl[i] = 0.0
                continue
            wt = 1.0 if w == NULL else ((<const float*>w)[t[i]] if f32 else (<const double*>w)[t[i]])
            pl[i] = -wt * ((<const float*>px)[i * C + t[i]] if f32 else (<const double*>px)[i * C + t[i]])
            total += pl[i]
            denom += wt
    if reduction == "none":
        out = loss.astype(x.dtype)
    elif reduction == "sum":
        out = np.asarray(total, dtype=x.dtype)
    else:
        out = np.asarray(total / denom if denom != 0 else np.nan, dtype=x.dtype)
        scale = 1.0 / denom if denom != 0 else 0.0
    return out, (x, target, weight, ignore_index, reduction, scale)


def nll_loss_backward(cnp.ndarray d_loss, tuple saved):
    """nll_loss_backward(d_loss, saved) -> d_x (M, C), zero except the target columns."""
    cdef cnp.ndarray x = saved[0], target = saved[1]
    weight = saved[2]
    cdef int64_t ignore_index = saved[3]
    cdef bint per_row = saved[4] == "none"
    cdef double scale = saved[5]
    cdef Py_ssize_t M = x.shape[0], C = x.shape[1], i
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef cnp.ndarray dx = np.zeros((M, C), x.dtype)
    cdef const int64_t* t = <const int64_t*>cnp.PyArray_DATA(target)
    cdef const void* w = _ptr(weight)
    cdef const void* dl = cnp.PyArray_DATA(d_loss)
    cdef void* pd = cnp.PyArray_DATA(dx)
    cdef double g = 0.0, wt
    if not per_row:
        g = float(d_loss) * scale
    with nogil:
        for i in range(M):
            if t[i] == ignore_index:
                continue
            wt = 1.0 if w == NULL else ((<const float*>w)[t[i]] if f32 else (<const double*>w)[t[i]])
            if per_row:
                g = (<const float*>dl)[i] if f32 else (<const double*>dl)[i]
            if f32:
                (<float*>pd)[i * C + t[i]] = <float>(-wt * g)
            else:
                (<double*>pd)[i * C + t[i]] = -wt * g
    return dx


# ------------------------------------------------------------------ elementwise losses
cdef void _pwl_fwd(bint f32, int kind, const void* x, const void* y, const void* w,
                   const void* pw, double p, void* out, Py_ssize_t n,
                   double* partial) noexcept nogil:
    cdef Py_ssize_t K = (n + FNN_PWL_CHUNK - 1) // FNN_PWL_CHUNK, c, o, m
    cdef int nt = _threads_for(n, FNN_PWL_CHUNK)
    for c in prange(K, nogil=True, schedule="static", num_threads=nt):
        o = c * FNN_PWL_CHUNK
        m = n - o if n - o < FNN_PWL_CHUNK else FNN_PWL_CHUNK
        if f32:
            partial[c] = fnn_pwl_fwd_f(kind, <const float*>x + o, <const float*>y + o,
                                       <const float*>w + o if w != NULL else NULL,
                                       <const float*>pw + o if pw != NULL else NULL, <float>p,
                                       <float*>out + o if out != NULL else NULL, m)
        else:
            partial[c] = fnn_pwl_fwd_d(kind, <const double*>x + o, <const double*>y + o,
                                       <const double*>w + o if w != NULL else NULL,
                                       <const double*>pw + o if pw != NULL else NULL, p,
                                       <double*>out + o if out != NULL else NULL, m)


cdef void _pwl_bwd(bint f32, int kind, const void* x, const void* y, const void* w,
                   const void* pw, double p, const void* dl, double g, void* dx,
                   Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t K = (n + FNN_PWL_CHUNK - 1) // FNN_PWL_CHUNK, c, o, m
    cdef int nt = _threads_for(n, FNN_PWL_CHUNK)
    for c in prange(K, nogil=True, schedule="static", num_threads=nt):
        o = c * FNN_PWL_CHUNK
        m = n - o if n - o < FNN_PWL_CHUNK else FNN_PWL_CHUNK
        if f32:
            fnn_pwl_bwd_f(kind, <const float*>x + o, <const float*>y + o,
                          <const float*>w + o if w != NULL else NULL,
                          <const float*>pw + o if pw != NULL else NULL, <float>p,
                          <const float*>dl + o if dl != NULL else NULL, <float>g,
                          <float*>dx + o, m)
        else:
            fnn_pwl_bwd_d(kind, <const double*>x + o, <const double*>y + o,
                          <const double*>w + o if w != NULL else NULL,
                          <const double*>pw + o if pw != NULL else NULL, p,
                          <const double*>dl + o if dl != NULL else NULL, g,
                          <double*>dx + o, m)


def elementwise_loss(str kind, cnp.ndarray x, cnp.ndarray y, object weight, object pos_weight,
                     double param, object divisor):
    """elementwise_loss(kind, x, y, weight, pos_weight, param, divisor) -> (loss, saved).

    IN  x, y C-contiguous, one float dtype and shape; weight, pos_weight None or the same;
        divisor None ("none": loss has x's shape) or the number the sum is divided by."""
    cdef int k = _KINDS[kind]
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x), K = (n + FNN_PWL_CHUNK - 1) // FNN_PWL_CHUNK, c
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef cnp.ndarray out = None
    cdef cnp.ndarray partial = np.empty(max(K, 1), np.float64)
    cdef double* pp = <double*>cnp.PyArray_DATA(partial)
    cdef double total = 0.0
    cdef void* po = NULL
    cdef const void* pw = _ptr(weight)
    cdef const void* ppw = _ptr(pos_weight)
    if divisor is None:
        out = cnp.PyArray_EMPTY(x.ndim, cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x), 0)
        po = cnp.PyArray_DATA(out)
    with nogil:
        _pwl_fwd(f32, k, cnp.PyArray_DATA(x), cnp.PyArray_DATA(y), pw, ppw, param, po, n, pp)
        for c in range(K):   # chunk order: the same sum at any thread count
            total += pp[c]
    if divisor is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.asarray(np.float64(total) / np.float64(divisor), dtype=x.dtype)
    return out, (k, x, y, weight, pos_weight, param, divisor)


def elementwise_loss_backward(cnp.ndarray d_loss, tuple saved):
    """elementwise_loss_backward(d_loss, saved) -> d_x (x's shape)."""
    cdef int k = saved[0]
    cdef cnp.ndarray x = saved[1], y = saved[2]
    weight, pos_weight, divisor = saved[3], saved[4], saved[6]
    cdef double param = saved[5], g = 0.0
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x)
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef cnp.ndarray dx = cnp.PyArray_EMPTY(x.ndim, cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x), 0)
    cdef const void* dl = NULL
    cdef const void* pw = _ptr(weight)
    cdef const void* ppw = _ptr(pos_weight)
    if divisor is None:
        dl = cnp.PyArray_DATA(d_loss)
    elif divisor:
        g = float(d_loss) / float(divisor)
    with nogil:
        _pwl_bwd(f32, k, cnp.PyArray_DATA(x), cnp.PyArray_DATA(y), pw, ppw, param, dl, g,
                 cnp.PyArray_DATA(dx), n)
    return dx
