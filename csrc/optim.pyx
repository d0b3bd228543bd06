# Optim family: one fused, in-place pass per parameter update (SGD, Adam, AdamW, RMSprop,
# Adagrad, NAdam, RAdam, Adamax).
#
# torch's single-tensor optimizers run 5-7 elementwise passes over memory per step
# (lerp, mul, addcmul, sqrt, div, add, addcdiv); an optimizer step is memory bound, so
# this does the whole update in ONE pass: each element of param, grad and the state is
# read once and written once.  The arithmetic follows torch's formulas in torch's order
# and in the parameter's precision (float32 math for float32, as torch does), so results
# match torch.optim to rounding.  Elementwise, so the result never depends on the thread
# count or the schedule; threads take fixed chunks dynamically, so on a shared machine a
# thread whose core is busy does not hold the step back (a static split waits for it).
#
# Kernels update param and the state arrays IN PLACE and return None (see
# fastnn/reference/optim.py for the contract; the Python optimizers validate).
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport sqrt, sqrtf
from libc.stdint cimport int64_t

from fnn_blas cimport real

import numpy as np

from fastnn.reference.optim import nadam_scalars, radam_scalars

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

OPS = ("sgd_step", "adam_step", "adamw_step", "adam_step_foreach", "adamw_step_foreach",
       "rmsprop_step", "adagrad_step", "nadam_step", "radam_step", "adamax_step")

# elements per chunk: a thread gets >= 32k elements (~1 MB of traffic) before waking more
cdef enum:
    GRAIN = 32768


cdef inline real _sqrt(real x) noexcept nogil:
    if real is float:
        return sqrtf(x)
    else:
        return sqrt(x)


# ---------------------------------------------------------------------------- SGD
cdef void _sgd_chunk(real* p, const real* g, real* buf, Py_ssize_t n, real lr, real momentum,
                     real one_minus_damp, real wd, bint nesterov, real sign,
                     bint first) noexcept nogil:
    cdef Py_ssize_t i
    cdef real d, b
    if buf == NULL:
        if wd != 0:
            for i in range(n):
                d = sign * g[i] + wd * p[i]
                p[i] = p[i] - lr * d
        else:
            for i in range(n):
                p[i] = p[i] - lr * (sign * g[i])
        return
    for i in range(n):
        d = sign * g[i]
        if wd != 0:
            d = d + wd * p[i]
        if first:
            b = d
        else:
            b = buf[i] * momentum + one_minus_damp * d
        buf[i] = b
        if nesterov:
            d = d + momentum * b
        else:
            d = b
        p[i] = p[i] - lr * d


cdef void _sgd(real* p, const real* g, real* buf, Py_ssize_t n, real lr, real momentum,
               real one_minus_damp, real wd, bint nesterov, real sign, bint first) noexcept nogil:
    cdef int nt = _threads_for(n, GRAIN)
    cdef Py_ssize_t nch, c, s, e
    if nt == 1:
        _sgd_chunk(p, g, buf, n, lr, momentum, one_minus_damp, wd, nesterov, sign, first)
        return
    nch = (n + GRAIN - 1) // GRAIN
    for c in prange(nch, nogil=True, schedule="dynamic", num_threads=nt):
        s = c * GRAIN
        e = s + GRAIN
        if e > n:
            e = n
        _sgd_chunk(p + s, g + s, buf + s if buf != NULL else NULL, e - s, lr, momentum,
                   one_minus_damp, wd, nesterov, sign, first)


def sgd_step(cnp.ndarray param, cnp.ndarray grad, object momentum_buffer, double lr,
             double momentum, double dampening, double weight_decay, bint nesterov,
             bint maximize, bint first):
    """sgd_step(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
    nesterov, maximize, first) -> None.  Updates param (and momentum_buffer) in place.

    IN grad; IN/OUT param, momentum_buffer (None when momentum == 0): C-contiguous, one dtype."""
    cdef Py_ssize_t n = param.size
    cdef int T = F32 if param.dtype == np.float32 else F64
    cdef void* pb = _data_or_null(momentum_buffer, n, T) if momentum != 0 else NULL
    cdef double sign = -1.0 if maximize else 1.0
    cdef void* p_param = _data(param, n, T)
    cdef const void* p_grad = _data(grad, n, T)
    if param.dtype == np.float32:
        with nogil:
            _sgd[float](<float*>p_param, <const float*>p_grad,
                        <float*>pb, n, <float>lr, <float>momentum, <float>(1 - dampening),
                        <float>weight_decay, nesterov, <float>sign, first)
    else:
        with nogil:
            _sgd[double](<double*>p_param, <const double*>p_grad,
                         <double*>pb, n, lr, momentum, 1 - dampening, weight_decay, nesterov,
                         sign, first)


# ---------------------------------------------------------------------------- Adam(W)
cdef void _adam_chunk(real* p, const real* g, real* m, real* v, real* vmax, Py_ssize_t n,
                      real decay, real l2, real w1, bint lerp_low, real beta2, real omb2,
                      real neg_step_size, real bc2_sqrt, real eps, real sign) noexcept nogil:
    """One pass: decay, moments, (amsgrad max), update.  torch's formulas, torch's order:
    lerp(m, g, w1) is m + w1 (g - m) for w1 < 0.5 else g - (g - m)(1 - w1)."""
    cdef Py_ssize_t i
    cdef real gi, pi, mi, vi, denom
    cdef real omw1 = 1 - w1
    for i in range(n):
        gi = sign * g[i]
        pi = p[i]
        if l2 != 0:
            gi = gi + l2 * pi
        if decay != 1:
            pi = pi * decay
        if lerp_low:
            mi = m[i] + w1 * (gi - m[i])
        else:
            mi = gi - (gi - m[i]) * omw1
        vi = v[i] * beta2
        vi = vi + omb2 * gi * gi
        m[i] = mi
        v[i] = vi
        if vmax != NULL:
            if vmax[i] > vi:
                vi = vmax[i]
            vmax[i] = vi
        denom = _sqrt(vi) / bc2_sqrt + eps
        p[i] = pi + neg_step_size * mi / denom


cdef void _adam(real* p, const real* g, real* m, real* v, real* vmax, Py_ssize_t n,
                real decay, real l2, real w1, bint lerp_low, real beta2, real omb2,
                real neg_step_size, real bc2_sqrt, real eps, real sign) noexcept nogil:
    cdef int nt = _threads_for(n, GRAIN)
    cdef Py_ssize_t nch, c, s, e
    if nt == 1:
        _adam_chunk(p, g, m, v, vmax, n, decay, l2, w1, lerp_low, beta2, omb2, neg_step_size,
                    bc2_sqrt, eps, sign)
        return
    nch = (n + GRAIN - 1) // GRAIN
    for c in prange(nch, nogil=True, schedule="dynamic", num_threads=nt):
        s = c * GRAIN
        e = s + GRAIN
        if e > n:
            e = n
        _adam_chunk(p + s, g + s, m + s, v + s, vmax + s if vmax != NULL else NULL, e - s,
                    decay, l2, w1, lerp_low, beta2, omb2, neg_step_size, bc2_sqrt, eps, sign)


cdef inline void _adam_scalars(double lr, double beta1, double weight_decay, bint decoupled,
                               double* decay, double* l2, double* w1,
                               bint* lerp_low) noexcept:
    """The step-independent scalars, exactly as torch forms them (Python floats, double)."""
    decay[0] = 1.0
    l2[0] = 0.0
    if weight_decay != 0:
        if decoupled:
            decay[0] = 1 - lr * weight_decay
        else:
            l2[0] = weight_decay
    w1[0] = 1 - beta1
    lerp_low[0] = abs(w1[0]) < 0.5


cdef _adam_any(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray exp_avg, cnp.ndarray exp_avg_sq,
               object max_exp_avg_sq, double lr, double beta1, double beta2, double eps,
               double weight_decay, double step, bint maximize, bint decoupled):
    cdef Py_ssize_t n = param.size
    cdef int T = F32 if param.dtype == np.float32 else F64
    cdef void* pvmax = _data_or_null(max_exp_avg_sq, n, T)
    cdef double decay, l2, w1
    cdef bint lerp_low
    _adam_scalars(lr, beta1, weight_decay, decoupled, &decay, &l2, &w1, &lerp_low)
    cdef double bias_correction1 = 1 - beta1 ** step
    cdef double bc2_sqrt = (1 - beta2 ** step) ** 0.5
    cdef double step_size = lr / bias_correction1
    cdef double sign = -1.0 if maximize else 1.0
    cdef void* p_param = _data(param, n, T)
    cdef const void* p_grad = _data(grad, n, T)
    cdef void* p_exp_avg = _data(exp_avg, n, T)
    cdef void* p_exp_avg_sq = _data(exp_avg_sq, n, T)
    if param.dtype == np.float32:
        with nogil:
            _adam[float](<float*>p_param, <const float*>p_grad,
                         <float*>p_exp_avg, <float*>p_exp_avg_sq,
                         <float*>pvmax, n, <float>decay, <float>l2, <float>w1, lerp_low,
                         <float>beta2, <float>(1 - beta2), <float>(-step_size), <float>bc2_sqrt,
                         <float>eps, <float>sign)
    else:
        with nogil:
            _adam[double](<double*>p_param, <const double*>p_grad,
                          <double*>p_exp_avg, <double*>p_exp_avg_sq,
                          <double*>pvmax, n, decay, l2, w1, lerp_low, beta2, 1 - beta2,
                          -step_size, bc2_sqrt, eps, sign)


def adam_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray exp_avg, cnp.ndarray exp_avg_sq,
              object max_exp_avg_sq, double lr, double beta1, double beta2, double eps,
              double weight_decay, double step, bint maximize):
    """adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
    weight_decay, step, maximize) -> None.  torch.optim.Adam (L2 penalty in the gradient);
    ``step`` counts this update (1 first).  IN/OUT param, exp_avg, exp_avg_sq,
    max_exp_avg_sq (None unless amsgrad); IN grad.  C-contiguous, one dtype."""
    _adam_any(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
              weight_decay, step, maximize, False)


def adamw_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray exp_avg, cnp.ndarray exp_avg_sq,
               object max_exp_avg_sq, double lr, double beta1, double beta2, double eps,
               double weight_decay, double step, bint maximize):
    """adamw_step(...same as adam_step...) -> None.  torch.optim.AdamW: decoupled decay,
    param *= 1 - lr * weight_decay before the Adam update."""
    _adam_any(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
              weight_decay, step, maximize, True)



# ------------------------------------------------------------- Adam(W), many tensors
# One call for a whole parameter group (torch's foreach): every tensor's update is the
# single-tensor kernel's (_adam_chunk, the same scalars, the same bits), and the chunks of
# all the tensors share ONE parallel region -- a model's many small tensors (biases, norm
# weights) cost a loop iteration each instead of a Python call and a team wake-up each.

cdef struct _AdamT:
    char* p
    const char* g
    char* m
    char* v
    char* vmax
    Py_ssize_t n
    double neg_step_size
    double bc2_sqrt


cdef inline void _adam_many_chunk(const _AdamT* t, Py_ssize_t s, real decay, real l2,
                                  real w1, bint lerp_low, real beta2, real omb2, real eps,
                                  real sign) noexcept nogil:
    """Elements s .. s + GRAIN of tensor t (the single-tensor kernel's chunk)."""
    cdef size_t z = sizeof(real)
    cdef Py_ssize_t e = s + GRAIN
    if e > t.n:
        e = t.n
    _adam_chunk(<real*>(t.p + s * z), <const real*>(t.g + s * z), <real*>(t.m + s * z),
                <real*>(t.v + s * z), <real*>(t.vmax + s * z) if t.vmax != NULL else NULL,
                e - s, decay, l2, w1, lerp_low, beta2, omb2, <real>t.neg_step_size,
                <real>t.bc2_sqrt, eps, sign)


cdef void _adam_many(const _AdamT* ts, const int64_t* ct, const int64_t* c0,
                     Py_ssize_t nch, int nt, real decay, real l2, real w1, bint lerp_low,
                     real beta2, real omb2, real eps, real sign) noexcept nogil:
    """Chunk c: elements c0[c] .. + GRAIN of tensor ct[c]; one region for all of them."""
    cdef Py_ssize_t c
    if nt <= 1:
        for c in range(nch):
            _adam_many_chunk(&ts[ct[c]], c0[c], decay, l2, w1, lerp_low, beta2, omb2, eps,
                             sign)
        return
    for c in prange(nch, nogil=True, schedule="dynamic", num_threads=nt):
        _adam_many_chunk(&ts[ct[c]], c0[c], decay, l2, w1, lerp_low, beta2, omb2, eps, sign)


cdef char* _foreach_data(object a, Py_ssize_t n, int T, str what, Py_ssize_t i) except NULL:
    """The data of list entry i: a C-contiguous, aligned array of n elements of type T."""
    if type(a) is not np.ndarray:
        raise TypeError(f"{what}[{i}] must be a NumPy array, got {type(a).__name__}")
    cdef cnp.ndarray x = <cnp.ndarray>a
    if cnp.PyArray_TYPE(x) != T:
        raise TypeError(f"{what}[{i}] has dtype {x.dtype}; every array of the call must "
                        f"have the first parameter's dtype")
    if cnp.PyArray_SIZE(x) != n:
        raise ValueError(f"{what}[{i}] has {cnp.PyArray_SIZE(x)} elements, its parameter {n}")
    if not (cnp.PyArray_IS_C_CONTIGUOUS(x) and cnp.PyArray_ISALIGNED(x)):
        raise ValueError(f"{what}[{i}] must be C-contiguous and aligned")
    if what != "grads" and not cnp.PyArray_ISWRITEABLE(x):
        raise ValueError(f"{what}[{i}] must be writeable (updated in place)")
    return <char*>_data(x, n, T)


cdef _adam_foreach(list params, list grads, list exp_avgs, list exp_avg_sqs,
                   object max_exp_avg_sqs, double lr, double beta1, double beta2, double eps,
                   double weight_decay, object steps, bint maximize, bint decoupled):
    cdef Py_ssize_t k = len(params), i, n, c, nch = 0, total = 0
    if not (len(grads) == len(exp_avgs) == len(exp_avg_sqs) == len(steps) == k) or (
            max_exp_avg_sqs is not None and len(max_exp_avg_sqs) != k):
        raise ValueError("params, grads, exp_avgs, exp_avg_sqs, steps (and max_exp_avg_sqs) "
                         "must have one entry per parameter")
    if k == 0:
        return None
    if type(params[0]) is not np.ndarray or params[0].dtype not in (np.float32, np.float64):
        raise TypeError("params must be float32 or float64 NumPy arrays")
    cdef int T = F32 if params[0].dtype == np.float32 else F64
    cdef double decay, l2, w1
    cdef bint lerp_low
    _adam_scalars(lr, beta1, weight_decay, decoupled, &decay, &l2, &w1, &lerp_low)
    cdef double sign = -1.0 if maximize else 1.0, step
    cdef cnp.ndarray tbuf = np.empty(k * sizeof(_AdamT), dtype=np.uint8)
    cdef _AdamT* ts = <_AdamT*>_data(tbuf, k * sizeof(_AdamT), U8)
    for i in range(k):
        p = params[i]
        if type(p) is not np.ndarray:
            raise TypeError(f"params[{i}] must be a NumPy array, got {type(p).__name__}")
        n = cnp.PyArray_SIZE(<cnp.ndarray>p)
        ts[i].n = n
        ts[i].p = _foreach_data(p, n, T, "params", i)
        ts[i].g = _foreach_data(grads[i], n, T, "grads", i)
        ts[i].m = _foreach_data(exp_avgs[i], n, T, "exp_avgs", i)
        ts[i].v = _foreach_data(exp_avg_sqs[i], n, T, "exp_avg_sqs", i)
        ts[i].vmax = NULL if max_exp_avg_sqs is None else \
            _foreach_data(max_exp_avg_sqs[i], n, T, "max_exp_avg_sqs", i)
        # scalars exactly as the single-tensor kernel forms them
        step = steps[i]
        ts[i].neg_step_size = -(lr / (1 - beta1 ** step))
        ts[i].bc2_sqrt = (1 - beta2 ** step) ** 0.5
        nch += (n + GRAIN - 1) // GRAIN
        total += n
    cdef cnp.ndarray cbuf = np.empty(2 * nch, dtype=np.int64)
    cdef int64_t* ct = <int64_t*>_data(cbuf, 2 * nch, I64)
    cdef int64_t* c0 = ct + nch
    c = 0
    for i in range(k):
        n = 0
        while n < ts[i].n:
            ct[c] = i
            c0[c] = n
            c += 1
            n += GRAIN
    cdef int nt = _threads_for(total, GRAIN)
    if nt > nch:
        nt = <int>nch
    if T == F32:
        with nogil:
            _adam_many[float](ts, ct, c0, nch, nt, <float>decay, <float>l2, <float>w1,
                              lerp_low, <float>beta2, <float>(1 - beta2), <float>eps,
                              <float>sign)
    else:
        with nogil:
            _adam_many[double](ts, ct, c0, nch, nt, decay, l2, w1, lerp_low, beta2, 1 - beta2,
                               eps, sign)
    return None


def adam_step_foreach(list params, list grads, list exp_avgs, list exp_avg_sqs,
                      object max_exp_avg_sqs, double lr, double beta1, double beta2, double eps,
                      double weight_decay, object steps, bint maximize):
    """adam_step_foreach(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, beta1,
    beta2, eps, weight_decay, steps, maximize) -> None.  adam_step for every parameter of
    a list (steps[i] is parameter i's step count), in one call: the same bits.  Lists of
    C-contiguous arrays of one dtype; max_exp_avg_sqs None unless amsgrad."""
    return _adam_foreach(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, beta1,
                         beta2, eps, weight_decay, steps, maximize, False)


def adamw_step_foreach(list params, list grads, list exp_avgs, list exp_avg_sqs,
                       object max_exp_avg_sqs, double lr, double beta1, double beta2,
                       double eps, double weight_decay, object steps, bint maximize):
    """adamw_step_foreach(...same as adam_step_foreach...) -> None: adamw_step for every
    parameter of a list, in one call."""
    return _adam_foreach(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, beta1,
                         beta2, eps, weight_decay, steps, maximize, True)


# ---------------------------------------------------------------------------- RMSprop
cdef void _rmsprop_chunk(real* p, const real* g, real* sq, real* ga, real* buf, Py_ssize_t n,
                         real lr, real alpha, real oma, bint lerp_low, real eps, real wd,
                         real momentum, real sign) noexcept nogil:
    """torch's order: sq = sq*alpha + (1-alpha) g^2; centered: ga = lerp(ga, g, 1-alpha),
    avg = sqrt(sq - ga^2); avg += eps; buf = buf*momentum + g/avg, p -= lr buf
    (or p += -lr g/avg without momentum)."""
    cdef Py_ssize_t i
    cdef real gi, si, ai, gai, b
    for i in range(n):
        gi = sign * g[i]
        if wd != 0:
            gi = gi + wd * p[i]
        si = sq[i] * alpha + oma * gi * gi
        sq[i] = si
        if ga != NULL:
            if lerp_low:
                gai = ga[i] + oma * (gi - ga[i])
            else:
                gai = gi - (gi - ga[i]) * alpha
            ga[i] = gai
            ai = _sqrt(si - gai * gai)
        else:
            ai = _sqrt(si)
        ai = ai + eps
        if buf != NULL:
            b = buf[i] * momentum + gi / ai
            buf[i] = b
            p[i] = p[i] - lr * b
        else:
            p[i] = p[i] + (-lr) * (gi / ai)


cdef void _rmsprop(real* p, const real* g, real* sq, real* ga, real* buf, Py_ssize_t n,
                   real lr, real alpha, real oma, bint lerp_low, real eps, real wd,
                   real momentum, real sign) noexcept nogil:
    cdef int nt = _threads_for(n, GRAIN)
    cdef Py_ssize_t nch, c, s, e
    if nt == 1:
        _rmsprop_chunk(p, g, sq, ga, buf, n, lr, alpha, oma, lerp_low, eps, wd, momentum, sign)
        return
    nch = (n + GRAIN - 1) // GRAIN
    for c in prange(nch, nogil=True, schedule="dynamic", num_threads=nt):
        s = c * GRAIN
        e = s + GRAIN
        if e > n:
            e = n
        _rmsprop_chunk(p + s, g + s, sq + s, ga + s if ga != NULL else NULL,
                       buf + s if buf != NULL else NULL, e - s, lr, alpha, oma, lerp_low, eps,
                       wd, momentum, sign)


def rmsprop_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray square_avg, object grad_avg,
                 object momentum_buffer, double lr, double alpha, double eps,
                 double weight_decay, double momentum, bint maximize):
    """rmsprop_step(param, grad, square_avg, grad_avg, momentum_buffer, lr, alpha, eps,
    weight_decay, momentum, maximize) -> None.  torch.optim.RMSprop.  IN/OUT param,
    square_avg, grad_avg (None unless centered), momentum_buffer (None unless momentum > 0);
    IN grad.  C-contiguous, one dtype."""
    cdef Py_ssize_t n = param.size
    cdef int T = F32 if param.dtype == np.float32 else F64
    cdef void* pga = _data_or_null(grad_avg, n, T)
    cdef void* pbuf = _data_or_null(momentum_buffer, n, T)
    cdef double sign = -1.0 if maximize else 1.0
    cdef bint lerp_low = abs(1 - alpha) < 0.5
    cdef void* p_param = _data(param, n, T)
    cdef const void* p_grad = _data(grad, n, T)
    cdef void* p_square_avg = _data(square_avg, n, T)
    if param.dtype == np.float32:
        with nogil:
            _rmsprop[float](<float*>p_param, <const float*>p_grad,
                            <float*>p_square_avg, <float*>pga, <float*>pbuf, n,
                            <float>lr, <float>alpha, <float>(1 - alpha), lerp_low, <float>eps,
                            <float>weight_decay, <float>momentum, <float>sign)
    else:
        with nogil:
            _rmsprop[double](<double*>p_param, <const double*>p_grad,
                             <double*>p_square_avg, <double*>pga, <double*>pbuf, n,
                             lr, alpha, 1 - alpha, lerp_low, eps, weight_decay, momentum, sign)


# ---------------------------------------------------------------------------- Adagrad
cdef void _adagrad_chunk(real* p, const real* g, real* ssum, Py_ssize_t n, real clr, real eps,
                         real wd, real sign) noexcept nogil:
    """sum += g^2; p += -clr g / (sqrt(sum) + eps) (torch's addcmul / addcdiv)."""
    cdef Py_ssize_t i
    cdef real gi, si
    for i in range(n):
        gi = sign * g[i]
        if wd != 0:
            gi = gi + wd * p[i]
        si = ssum[i] + gi * gi
        ssum[i] = si
        p[i] = p[i] + (-clr) * (gi / (_sqrt(si) + eps))


cdef void _adagrad(real* p, const real* g, real* ssum, Py_ssize_t n, real clr, real eps,
                   real wd, real sign) noexcept nogil:
    cdef int nt = _threads_for(n, GRAIN)
    cdef Py_ssize_t nch, c, s, e
    if nt == 1:
        _adagrad_chunk(p, g, ssum, n, clr, eps, wd, sign)
        return
    nch = (n + GRAIN - 1) // GRAIN
    for c in prange(nch, nogil=True, schedule="dynamic", num_threads=nt):
        s = c * GRAIN
        e = s + GRAIN
        if e > n:
            e = n
        _adagrad_chunk(p + s, g + s, ssum + s, e - s, clr, eps, wd, sign)


def adagrad_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray state_sum, double clr,
                 double eps, double weight_decay, bint maximize):
    """adagrad_step(param, grad, state_sum, clr, eps, weight_decay, maximize) -> None.
    torch.optim.Adagrad with clr = lr / (1 + (step - 1) lr_decay).  IN/OUT param, state_sum;
    IN grad.  C-contiguous, one dtype."""
    cdef Py_ssize_t n = param.size
    cdef int T = F32 if param.dtype == np.float32 else F64
    cdef double sign = -1.0 if maximize else 1.0
    cdef void* p_param = _data(param, n, T)
    cdef const void* p_grad = _data(grad, n, T)
    cdef void* p_state_sum = _data(state_sum, n, T)
    if param.dtype == np.float32:
        with nogil:
            _adagrad[float](<float*>p_param, <const float*>p_grad,
                            <float*>p_state_sum, n, <float>clr, <float>eps,
                            <float>weight_decay, <float>sign)
    else:
        with nogil:
            _adagrad[double](<double*>p_param, <const double*>p_grad,
                             <double*>p_state_sum, n, clr, eps, weight_decay, sign)


# ---------------------------------------------------------------------------- NAdam, RAdam, Adamax
# One chunk loop for the three Adam variants (``kind``): the shared start (maximize, weight
# decay, the lerp of exp_avg) and each one's update in torch's order.  The per-step scalars
# come from fastnn.reference.optim (nadam_scalars, radam_scalars), as on every backend.
cdef enum:
    _NADAM = 0
    _RADAM = 1
    _ADAMAX = 2


cdef struct _Var:
    int kind
    bint lerp_low, decoupled, rect_on
    double oma, beta2, omb2, eps, wd, decay, sign, lr, c1, c2, c3


cdef void _variant_chunk(real* p, const real* g, real* m, real* s, Py_ssize_t n,
                         const _Var* v) noexcept nogil:
    """NAdam: s = beta2 s + (1-beta2) g^2, den = sqrt(s / c1) + eps, p += c2 g / den,
    p += c3 m / den.  RAdam: s likewise, b = m / c1; rectified (c3 = rect): p -= b lr
    (c2 / (sqrt(s) + eps)) rect, else p -= b lr.  Adamax: s = max(beta2 s, |g| + eps) (NaN
    propagates), p += c1 m / s (c1 = -lr / bias_correction1)."""
    cdef Py_ssize_t i
    cdef real gi, pi, mi, si, den, b
    cdef real oma = <real>v.oma, beta2 = <real>v.beta2, omb2 = <real>v.omb2
    cdef real eps = <real>v.eps, wd = <real>v.wd, decay = <real>v.decay, sign = <real>v.sign
    cdef real lr = <real>v.lr, c1 = <real>v.c1, c2 = <real>v.c2, c3 = <real>v.c3
    cdef int kind = v.kind
    for i in range(n):
        gi = sign * g[i]
        pi = p[i]
        if wd != 0:
            if v.decoupled:
                pi = pi * decay
            else:
                gi = gi + wd * pi
        if v.lerp_low:
            mi = m[i] + oma * (gi - m[i])
        else:
            mi = gi - (gi - m[i]) * (1 - oma)
        m[i] = mi
        if kind == _ADAMAX:
            si = s[i] * beta2
            b = (gi if gi >= 0 else -gi) + eps
            if not (si != si) and (b != b or b > si):
                si = b
            s[i] = si
            p[i] = pi + c1 * mi / si
            continue
        si = s[i] * beta2 + omb2 * gi * gi
        s[i] = si
        if kind == _NADAM:
            den = _sqrt(si / c1) + eps
            pi = pi + c2 * gi / den
            p[i] = pi + c3 * mi / den
        elif v.rect_on:
            b = mi / c1
            p[i] = pi - b * lr * (c2 / (_sqrt(si) + eps)) * c3
        else:
            b = mi / c1
            p[i] = pi - b * lr


cdef void _variant(real* p, const real* g, real* m, real* s, Py_ssize_t n,
                   const _Var* v) noexcept nogil:
    cdef int nt = _threads_for(n, GRAIN)
    cdef Py_ssize_t nch, c, a, e
    if nt == 1:
        _variant_chunk(p, g, m, s, n, v)
        return
    nch = (n + GRAIN - 1) // GRAIN
    for c in prange(nch, nogil=True, schedule="dynamic", num_threads=nt):
        a = c * GRAIN
        e = a + GRAIN
        if e > n:
            e = n
        _variant_chunk(p + a, g + a, m + a, s + a, e - a, v)


cdef _variant_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray exp_avg,
                   cnp.ndarray second, _Var* v, double beta1, double weight_decay,
                   bint maximize):
    cdef Py_ssize_t n = param.size
    cdef int T = F32 if param.dtype == np.float32 else F64
    v.oma = 1 - beta1
    v.lerp_low = abs(1 - beta1) < 0.5
    v.sign = -1.0 if maximize else 1.0
    v.wd = weight_decay
    cdef void* pp = _data(param, n, T)
    cdef const void* pg = _data(grad, n, T)
    cdef void* pm = _data(exp_avg, n, T)
    cdef void* ps = _data(second, n, T)
    if T == F32:
        with nogil:
            _variant[float](<float*>pp, <const float*>pg, <float*>pm, <float*>ps, n, v)
    else:
        with nogil:
            _variant[double](<double*>pp, <const double*>pg, <double*>pm, <double*>ps, n, v)


def nadam_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray exp_avg, cnp.ndarray exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bint decoupled, double mu, double mu_next, double mu_product, double step,
               bint maximize):
    """nadam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
    decoupled, mu, mu_next, mu_product, step, maximize) -> None.  torch.optim.NAdam.  IN/OUT
    param, exp_avg, exp_avg_sq; IN grad.  C-contiguous, one dtype."""
    cdef _Var v
    v.kind = _NADAM
    v.beta2, v.omb2, v.eps, v.lr = beta2, 1 - beta2, eps, lr
    v.decoupled, v.decay, v.rect_on = decoupled, 1 - lr * weight_decay, False
    v.c1, v.c2, v.c3 = nadam_scalars(lr, beta2, mu, mu_next, mu_product, step)
    _variant_step(param, grad, exp_avg, exp_avg_sq, &v, beta1, weight_decay, maximize)


def radam_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray exp_avg, cnp.ndarray exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bint decoupled, double step, bint maximize):
    """radam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
    decoupled, step, maximize) -> None.  torch.optim.RAdam.  IN/OUT param, exp_avg,
    exp_avg_sq; IN grad.  C-contiguous, one dtype."""
    cdef _Var v
    v.kind = _RADAM
    v.beta2, v.omb2, v.eps, v.lr = beta2, 1 - beta2, eps, lr
    v.decoupled, v.decay = decoupled, 1 - lr * weight_decay
    bc1, bc2_sqrt, rect = radam_scalars(beta1, beta2, step)
    v.c1, v.c2 = bc1, bc2_sqrt
    v.rect_on = rect is not None
    v.c3 = rect if rect is not None else 0.0
    _variant_step(param, grad, exp_avg, exp_avg_sq, &v, beta1, weight_decay, maximize)


def adamax_step(cnp.ndarray param, cnp.ndarray grad, cnp.ndarray exp_avg, cnp.ndarray exp_inf,
                double lr, double beta1, double beta2, double eps, double weight_decay,
                double step, bint maximize):
    """adamax_step(param, grad, exp_avg, exp_inf, lr, beta1, beta2, eps, weight_decay, step,
    maximize) -> None.  torch.optim.Adamax.  IN/OUT param, exp_avg, exp_inf; IN grad.
    C-contiguous, one dtype."""
    cdef _Var v
    v.kind = _ADAMAX
    v.beta2, v.omb2, v.eps, v.lr = beta2, 1 - beta2, eps, lr
    v.decoupled, v.decay, v.rect_on = False, 1.0, False
    v.c1, v.c2, v.c3 = -(lr / (1 - beta1 ** step)), 0.0, 0.0
    _variant_step(param, grad, exp_avg, exp_inf, &v, beta1, weight_decay, maximize)
