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
# per element, so each kind's loop vectorises on its own.  The C is in fnn_loss.h
# (fnn_loss_t.h: one body for float and double).
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport int64_t

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

cdef extern from "fnn_loss.h":
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


cdef bint _target_is_prob(cnp.ndarray target) except -1:
    """True for a probability target (floating), False for class indices (any 8-byte integer
    type number: int64 is 'l' or 'q' depending on the platform); anything else is refused."""
    if cnp.PyArray_ISFLOAT(target):
        return True
    if cnp.PyArray_ISINTEGER(target) and cnp.PyArray_ITEMSIZE(target) == 8:
        return False
    raise TypeError(f"cross_entropy: target must be int64 class indices or floating "
                    f"probabilities, got {target.dtype}")


def cross_entropy(cnp.ndarray x, cnp.ndarray target, object weight, int64_t ignore_index,
                  str reduction, double label_smoothing):
    """cross_entropy(x, target, weight, ignore_index, reduction, label_smoothing) -> (loss, saved).

    IN  x (M, C) C-contiguous float; target int64 (M,) class indices (valid or ignore_index)
        or (M, C) probabilities of x's dtype; weight (C,) or None.
    OUT loss: (M,) for reduction "none", else a 0-d array; x's dtype."""
    cdef Py_ssize_t M = x.shape[0], C = x.shape[1], i
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef bint prob = _target_is_prob(target)
    cdef cnp.ndarray loss = np.empty(M, np.float64)
    cdef cnp.ndarray lse = np.empty(M, np.float64)
    cdef cnp.ndarray A = np.empty(M, np.float64)
    cdef int T = F32 if f32 else F64
    cdef const int64_t* tgt = NULL if prob else <const int64_t*>_data(target, M, I64)
    cdef const void* q = _data(target, M * C, T) if prob else NULL
    cdef const void* w = _data_or_null(weight, C, T)
    cdef double* pl = <double*>_data(loss, M, F64)
    cdef double total = 0.0, denom = 0.0, scale = 1.0
    cdef double* pA = <double*>_data(A, M, F64)
    cdef double* plse = <double*>_data(lse, M, F64)
    cdef const void* px = _data(x, M * C, T)
    cdef bint reduce = reduction != "none"
    with nogil:
        _fwd_rows(f32, px, tgt, q, w, M, C, ignore_index, label_smoothing, pl, plse, pA)
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
    cdef bint prob = _target_is_prob(target)
    cdef cnp.ndarray dx = cnp.PyArray_EMPTY(2, cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x), 0)
    cdef int T = F32 if f32 else F64
    cdef const void* dl = NULL
    cdef const void* w = _data_or_null(weight, C, T)
    cdef double s0 = 0.0
    if reduction == "none":
        dl = _data(d_loss, M, T)
    else:
        s0 = float(d_loss) * scale
    cdef const void* px = _data(x, M * C, T)
    cdef void* pdx = _data(dx, M * C, T)
    cdef const int64_t* tgt = NULL if prob else <const int64_t*>_data(target, M, I64)
    cdef const void* q = _data(target, M * C, T) if prob else NULL
    cdef const double* plse = <const double*>_data(lse, M, F64)
    cdef const double* pA = <const double*>_data(A, M, F64)
    with nogil:
        _bwd_rows(f32, px, pdx, tgt, q, w, M, C, ignore_index, eps, plse, pA, dl, s0)
    return dx


# ------------------------------------------------------------------ nll_loss
def nll_loss(cnp.ndarray x, cnp.ndarray target, object weight, int64_t ignore_index,
             str reduction):
    """nll_loss(x, target, weight, ignore_index, reduction) -> (loss, saved).

    IN  x (M, C) C-contiguous float log-probabilities; target int64 (M,) (valid or
        ignore_index); weight (C,) or None.  OUT loss (M,) for "none", else 0-d."""
    cdef Py_ssize_t M = x.shape[0], C = x.shape[1], i
    cdef bint f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    cdef int T = F32 if f32 else F64
    cdef const int64_t* t = <const int64_t*>_data(target, M, I64)
    cdef const void* w = _data_or_null(weight, C, T)
    cdef const void* px = _data(x, M * C, T)
    cdef cnp.ndarray loss = np.empty(M, np.float64)
    cdef double* pl = <double*>_data(loss, M, F64)
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
    cdef int T = F32 if f32 else F64
    cdef const int64_t* t = <const int64_t*>_data(target, M, I64)
    cdef const void* w = _data_or_null(weight, C, T)
    cdef const void* dl = _data(d_loss, M if per_row else 0, T)   # read per row only
    cdef void* pd = _data(dx, M * C, T)
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
    cdef double* pp = <double*>_data(partial, K, F64)
    cdef double total = 0.0
    cdef void* po = NULL
    cdef int T = F32 if f32 else F64
    cdef const void* pw = _data_or_null(weight, n, T)
    cdef const void* ppw = _data_or_null(pos_weight, n, T)
    cdef const void* px = _data(x, n, T)
    cdef const void* py = _data(y, n, T)
    if divisor is None:
        out = cnp.PyArray_EMPTY(x.ndim, cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x), 0)
        po = _data(out, n, T)
    with nogil:
        _pwl_fwd(f32, k, px, py, pw, ppw, param, po, n, pp)
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
    cdef int T = F32 if f32 else F64
    cdef const void* pw = _data_or_null(weight, n, T)
    cdef const void* ppw = _data_or_null(pos_weight, n, T)
    if divisor is None:
        dl = _data(d_loss, n, T)
    elif divisor:
        g = float(d_loss) / float(divisor)
    cdef const void* px = _data(x, n, T)
    cdef const void* py = _data(y, n, T)
    cdef void* pdx = _data(dx, n, T)
    with nogil:
        _pwl_bwd(f32, k, px, py, pw, ppw, param, dl, g, pdx, n)
    return dx
