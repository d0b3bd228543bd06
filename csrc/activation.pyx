# Activation family: elementwise forward and backward, one pass over memory each.
#
# The loops live in fnn_activation.h (one `omp simd` loop per op, float through the
# vectorisable fnn_math.h functions, double through libm).  Here each call splits the
# array into one contiguous chunk per thread (static schedule, chunk starts on 64-byte
# boundaries) and hands each chunk to the loop.  relu and leaky_relu keep a bit mask for
# the backward (a third of its memory traffic); the others start from the output where
# that is cheaper (elu/selu/celu, sigmoid, tanh: no transcendental in the backward), from
# the input otherwise.  Every forward takes
# ``out`` (None, or a C-contiguous array to write to, possibly the input itself: ops
# whose backward needs the input then save a copy of it first).  PReLU's weight
# gradient is reduced over fixed blocks (partial sums in double, summed in block order),
# so it does not depend on the thread count.
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport uint8_t, uint64_t

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

cdef extern from "fnn_activation.h" nogil:
    enum:
        FNN_RELU_FWD
        FNN_RELU_BWD
        FNN_LEAKY_FWD
        FNN_LEAKY_BWD
        FNN_ELU_FWD
        FNN_ELU_BWD_OUT
        FNN_ELU_BWD_IN
        FNN_GELU_FWD
        FNN_GELU_BWD
        FNN_GELUT_FWD
        FNN_GELUT_BWD
        FNN_SILU_FWD
        FNN_SILU_BWD
        FNN_SOFTPLUS_FWD
        FNN_SOFTPLUS_BWD
        FNN_SIGMOID_FWD
        FNN_SIGMOID_BWD
        FNN_TANH_FWD
        FNN_TANH_BWD
        FNN_NEG
        FNN_MUL
        FNN_HARDSWISH_FWD
        FNN_HARDSWISH_BWD
        FNN_MISH_FWD
        FNN_MISH_BWD
    void fnn_act_f(int op, const float* a, const float* b, float* o, Py_ssize_t n,
                   const double* p)
    void fnn_act_d(int op, const double* a, const double* b, double* o, Py_ssize_t n,
                   const double* p)
    void fnn_rrelu_f(const float* x, float* y, float* noise, Py_ssize_t i0, Py_ssize_t i1,
                     double lower, double upper, uint64_t seed, uint64_t offset)
    void fnn_rrelu_d(const double* x, double* y, double* noise, Py_ssize_t i0, Py_ssize_t i1,
                     double lower, double upper, uint64_t seed, uint64_t offset)
    void fnn_prelu_fwd_f(const float* x, const float* w, float* y, Py_ssize_t e0, Py_ssize_t e1,
                         Py_ssize_t C, Py_ssize_t inner)
    void fnn_prelu_fwd_d(const double* x, const double* w, double* y, Py_ssize_t e0,
                         Py_ssize_t e1, Py_ssize_t C, Py_ssize_t inner)
    void fnn_prelu_bwd_f(const float* dy, const float* x, const float* w, float* dx,
                         double* part, Py_ssize_t e0, Py_ssize_t e1, Py_ssize_t C,
                         Py_ssize_t inner)
    void fnn_prelu_bwd_d(const double* dy, const double* x, const double* w, double* dx,
                         double* part, Py_ssize_t e0, Py_ssize_t e1, Py_ssize_t C,
                         Py_ssize_t inner)
    void fnn_relu_mask_fwd_f(int leaky, double slope, const float* x, float* y, uint8_t* m,
                             Py_ssize_t n)
    void fnn_relu_mask_fwd_d(int leaky, double slope, const double* x, double* y, uint8_t* m,
                             Py_ssize_t n)
    void fnn_relu_mask_bwd_f(int leaky, double slope, const float* dy, const uint8_t* m,
                             float* dx, Py_ssize_t n)
    void fnn_clamp_mask_fwd_f(int shift, double lower, double upper, const float* x, float* y,
                              uint8_t* m, Py_ssize_t n)
    void fnn_clamp_mask_fwd_d(int shift, double lower, double upper, const double* x,
                              double* y, uint8_t* m, Py_ssize_t n)
    void fnn_relu_mask_bwd_d(int leaky, double slope, const double* dy, const uint8_t* m,
                             double* dx, Py_ssize_t n)
    void fnn_math_apply(int which, const float* x, float* y, Py_ssize_t n)
    const int FNN_GELU_GRAIN

OPS = ("relu", "relu_backward",
       "leaky_relu", "leaky_relu_backward",
       "prelu", "prelu_backward",
       "rrelu", "rrelu_backward",
       "elu", "elu_backward",
       "gelu", "gelu_backward",
       "silu", "silu_backward",
       "softplus", "softplus_backward",
       "sigmoid", "sigmoid_backward",
       "tanh", "tanh_backward",
       "hardtanh", "hardtanh_backward",
       "hardsigmoid", "hardsigmoid_backward",
       "hardswish", "hardswish_backward",
       "mish", "mish_backward",
       "neg")

# elements per thread before another thread is worth waking: memory-bound ops need
# more work per thread than ones with a transcendental per element
cdef enum:
    GRAIN_MEM = 1 << 15
    GRAIN_MATH = 1 << 13
    PRELU_BLOCK = 1 << 14


cdef inline Py_ssize_t _chunk(Py_ssize_t n, int nt, int t) noexcept nogil:
    """Start of thread t's chunk: multiples of 16 elements (64-byte boundaries)."""
    if t >= nt:
        return n
    return ((n * t) // nt) & ~(<Py_ssize_t>15)


cdef inline cnp.ndarray _empty_like(cnp.ndarray x):
    return cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x), 0)


cdef inline void _act(int op, const real* a, const real* b, real* o, Py_ssize_t n,
                      const double* p) noexcept nogil:
    if real is float:
        fnn_act_f(op, a, b, o, n, p)
    else:
        fnn_act_d(op, a, b, o, n, p)


cdef void _ew_run(int op, const real* a, const real* b, real* o, Py_ssize_t n, int nt,
                  const double* p) noexcept nogil:
    """o = kernel op over a (and b, or NULL), one chunk per thread."""
    cdef Py_ssize_t i0, i1
    cdef int t
    if nt == 1:
        _act(op, a, b, o, n, p)
    else:
        for t in prange(nt, schedule="static", num_threads=nt):
            i0 = _chunk(n, nt, t)
            i1 = _chunk(n, nt, t + 1)
            _act(op, a + i0, (b + i0) if b != NULL else NULL, o + i0, i1 - i0, p)


cdef cnp.ndarray _ew(int op, cnp.ndarray a, cnp.ndarray b, cnp.ndarray out, Py_ssize_t grain,
                     double p0=0.0, double p1=0.0, double p2=0.0):
    """out = kernel op over a (and b); a fresh array when out is None."""
    cdef double p[3]
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    cdef int nt
    cdef const void* pa
    cdef const void* pb = NULL
    cdef void* po
    p[0] = p0
    p[1] = p1
    p[2] = p2
    if out is None:
        out = _empty_like(a)
    if n == 0:
        return out
    nt = _threads_for(n, grain)
    cdef int T = F32 if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT else F64
    pa = _data(a, n, T)
    po = _data(out, n, T)
    if b is not None:
        pb = _data(b, n, T)
    if T == F32:
        with nogil:
            _ew_run(op, <const float*>pa, <const float*>pb, <float*>po, n, nt, p)
    else:
        with nogil:
            _ew_run(op, <const double*>pa, <const double*>pb, <double*>po, n, nt, p)
    return out


cdef inline object _keep_input(cnp.ndarray x, object out):
    """The input as backward needs it: a copy when ``out`` is about to overwrite it."""
    return x.copy() if out is x else x


# ---------------------------------------------------------------- relu / leaky_relu
# The forward leaves a bit mask for the backward (fnn_activation.h): d_x comes from d_y and
# 1/8 byte per element, not from d_y and y (or x).  Hardtanh / ReLU6 (forward leaky =
# _CLAMP, the bounds slope and hi) and Hardsigmoid (forward _HARDSIG; backward leaky =
# _SCALED, slope 1/6: d_y / 6 on the mask) keep the same mask: the bit where the gradient
# passes.
cdef enum:
    _SCALED = 2
    _CLAMP = 2
    _HARDSIG = 3


cdef inline void _mask_act(bint bwd, int leaky, double slope, const real* a, real* o,
                           uint8_t* m, Py_ssize_t n, double hi) noexcept nogil:
    if real is float:
        if bwd:
            fnn_relu_mask_bwd_f(leaky, slope, a, m, o, n)
        elif leaky >= _CLAMP:
            fnn_clamp_mask_fwd_f(leaky == _HARDSIG, slope, hi, a, o, m, n)
        else:
            fnn_relu_mask_fwd_f(leaky, slope, a, o, m, n)
    else:
        if bwd:
            fnn_relu_mask_bwd_d(leaky, slope, a, m, o, n)
        elif leaky >= _CLAMP:
            fnn_clamp_mask_fwd_d(leaky == _HARDSIG, slope, hi, a, o, m, n)
        else:
            fnn_relu_mask_fwd_d(leaky, slope, a, o, m, n)


cdef void _mask_run(bint bwd, int leaky, double slope, const real* a, real* o, uint8_t* m,
                    Py_ssize_t n, int nt, double hi) noexcept nogil:
    """The masked ReLU kernels, one chunk per thread (chunks start at multiples of 16
    elements, so each owns whole bytes of m)."""
    cdef Py_ssize_t i0, i1
    cdef int t
    if nt == 1:
        _mask_act(bwd, leaky, slope, a, o, m, n, hi)
    else:
        for t in prange(nt, schedule="static", num_threads=nt):
            i0 = _chunk(n, nt, t)
            i1 = _chunk(n, nt, t + 1)
            _mask_act(bwd, leaky, slope, a + i0, o + i0, m + i0 // 8, i1 - i0, hi)


cdef cnp.ndarray _masked(bint bwd, int leaky, double slope, cnp.ndarray a, cnp.ndarray out,
                         cnp.ndarray mask, double hi=0.0):
    """Forward: out = act(a), mask filled; backward: out = d_x from d_y = a and mask."""
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    cdef int nt = _threads_for(n, GRAIN_MEM)
    cdef int T = F32 if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT else F64
    cdef void* pa
    cdef void* po
    cdef uint8_t* pm
    if out is None:
        out = _empty_like(a)
    if n == 0:
        return out
    pa = _data(a, n, T)
    po = _data(out, n, T)
    pm = <uint8_t*>_data(mask, (n + 7) // 8, U8)
    if T == F32:
        with nogil:
            _mask_run(bwd, leaky, slope, <const float*>pa, <float*>po, pm, n, nt, hi)
    else:
        with nogil:
            _mask_run(bwd, leaky, slope, <const double*>pa, <double*>po, pm, n, nt, hi)
    return out


def relu(cnp.ndarray x, out):
    """relu(x, out) -> (y, saved): max(x, 0); saved: the bit mask of x > 0 (or NaN)."""
    cdef cnp.ndarray mask = np.empty((cnp.PyArray_SIZE(x) + 7) // 8, dtype=np.uint8)
    return _masked(False, 0, 0.0, x, out, mask), mask


def relu_backward(cnp.ndarray dy, saved):
    return _masked(True, 0, 0.0, dy, None, saved)


def leaky_relu(cnp.ndarray x, double negative_slope, out):
    """leaky_relu(x, negative_slope, out) -> (y, saved); saved: (bit mask of x > 0, slope)."""
    cdef cnp.ndarray mask = np.empty((cnp.PyArray_SIZE(x) + 7) // 8, dtype=np.uint8)
    return _masked(False, 1, negative_slope, x, out, mask), (mask, negative_slope)


def leaky_relu_backward(cnp.ndarray dy, tuple saved):
    return _masked(True, 1, saved[1], dy, None, saved[0])


# ---------------------------------------------------------------- prelu
cdef tuple _prelu_view(cnp.ndarray x, cnp.ndarray weight):
    """(C, inner) of x seen as (outer, C, inner) for weight broadcast on dim 1."""
    cdef Py_ssize_t c = cnp.PyArray_SIZE(weight), inner = 1, k
    if c == 1:
        return 1, max(cnp.PyArray_SIZE(x), 1)
    for k in range(2, cnp.PyArray_NDIM(x)):
        inner *= cnp.PyArray_DIMS(x)[k]
    return c, max(inner, 1)


cdef void _prelu_fwd(const real* x, const real* w, real* y, Py_ssize_t n, Py_ssize_t C,
                     Py_ssize_t inner, int nt) noexcept nogil:
    cdef int t
    for t in prange(nt, schedule="static", num_threads=nt):
        if real is float:
            fnn_prelu_fwd_f(x, w, y, _chunk(n, nt, t), _chunk(n, nt, t + 1), C, inner)
        else:
            fnn_prelu_fwd_d(x, w, y, _chunk(n, nt, t), _chunk(n, nt, t + 1), C, inner)


def prelu(cnp.ndarray x, cnp.ndarray weight):
    """prelu(x, weight) -> (y, saved); weight (1 or C,) broadcast on dim 1."""
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x), C, inner
    cdef int nt = _threads_for(n, GRAIN_MEM)
    C, inner = _prelu_view(x, weight)
    cdef cnp.ndarray y = _empty_like(x)
    if n == 0:
        return y, (x, weight)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef const void* px = _data(x, n, T)
    cdef const void* pw = _data(weight, C, T)
    cdef void* py = _data(y, n, T)
    with nogil:
        if T == F32:
            _prelu_fwd(<const float*>px, <const float*>pw, <float*>py, n, C, inner, nt)
        else:
            _prelu_fwd(<const double*>px, <const double*>pw, <double*>py, n, C, inner, nt)
    return y, (x, weight)


cdef void _prelu_bwd(const real* dy, const real* x, const real* w, real* dx, double* part,
                     Py_ssize_t n, Py_ssize_t C, Py_ssize_t inner, Py_ssize_t blk,
                     Py_ssize_t nb, int nt) noexcept nogil:
    """Block b (elements [b blk, (b + 1) blk)) leaves its d_weight partials in part[b C:]."""
    cdef Py_ssize_t b, e0, e1
    for b in prange(nb, schedule="static", num_threads=nt):
        e0 = b * blk
        e1 = min(n, e0 + blk)
        if real is float:
            fnn_prelu_bwd_f(dy, x, w, dx, part + b * C, e0, e1, C, inner)
        else:
            fnn_prelu_bwd_d(dy, x, w, dx, part + b * C, e0, e1, C, inner)


def prelu_backward(cnp.ndarray dy, tuple saved):
    """-> (d_input, d_weight).  d_weight: per-block partial sums in double (blocks of a
    size fixed by the shape), summed in block order: the same bits for any thread count."""
    cdef cnp.ndarray x = saved[0], weight = saved[1]
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x), C, inner, blk, nb
    C, inner = _prelu_view(x, weight)
    blk = max(<Py_ssize_t>PRELU_BLOCK, C)
    nb = (n + blk - 1) // blk
    cdef cnp.ndarray dx = _empty_like(x)
    cdef cnp.ndarray part = np.empty(nb * C, dtype=np.float64)
    cdef double* pp = <double*>_data(part, nb * C, F64)
    cdef int nt = _threads_for(nb, 1)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef const void* pdy = _data(dy, n, T)
    cdef const void* px = _data(x, n, T)
    cdef const void* pw = _data(weight, C, T)
    cdef void* pdx = _data(dx, n, T)
    with nogil:
        if T == F32:
            _prelu_bwd(<const float*>pdy, <const float*>px, <const float*>pw, <float*>pdx, pp,
                       n, C, inner, blk, nb, nt)
        else:
            _prelu_bwd(<const double*>pdy, <const double*>px, <const double*>pw, <double*>pdx, pp,
                       n, C, inner, blk, nb, nt)
    dw = part.reshape(nb, C).sum(axis=0).astype(weight.dtype).reshape(np.shape(weight))
    return dx, dw


# ---------------------------------------------------------------- rrelu
cdef void _rrelu(const real* x, real* y, real* noise, Py_ssize_t n, double lower,
                 double upper, uint64_t seed, uint64_t offset, int nt) noexcept nogil:
    cdef Py_ssize_t i0, i1
    cdef int t
    for t in prange(nt, schedule="static", num_threads=nt):
        i0 = _chunk(n, nt, t)
        i1 = _chunk(n, nt, t + 1)
        if real is float:
            fnn_rrelu_f(x, y, noise, i0, i1, lower, upper, seed, offset)
        else:
            fnn_rrelu_d(x, y, noise, i0, i1, lower, upper, seed, offset)


def rrelu(cnp.ndarray x, double lower, double upper, bint training, seed, offset, out):
    """rrelu(x, lower, upper, training, seed, offset, out) -> (y, saved).  Training: the
    slope of element i is lower + (upper - lower) u_i (Philox, (seed, offset, i)) where
    x <= 0, and the per-element factors are saved; eval: leaky_relu((lower + upper) / 2)."""
    if not training:
        return leaky_relu(x, (lower + upper) / 2.0, out)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x)
    cdef uint64_t s = <uint64_t>seed, off = <uint64_t>offset
    cdef int nt = _threads_for(n, GRAIN_MATH)
    cdef cnp.ndarray noise = _empty_like(x)
    cdef cnp.ndarray y = _empty_like(x) if out is None else out
    if n == 0:
        return y, noise
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef const void* px = _data(x, n, T)
    cdef void* py = _data(y, n, T)
    cdef void* pn = _data(noise, n, T)
    with nogil:
        if T == F32:
            _rrelu(<const float*>px, <float*>py, <float*>pn, n, lower, upper, s, off, nt)
        else:
            _rrelu(<const double*>px, <double*>py, <double*>pn, n, lower, upper, s, off, nt)
    return y, noise


def rrelu_backward(cnp.ndarray dy, saved):
    if isinstance(saved, tuple):          # eval mode: leaky_relu's saved state
        return leaky_relu_backward(dy, saved)
    return _ew(FNN_MUL, dy, saved, None, GRAIN_MEM)


# ---------------------------------------------------------------- elu / selu / celu
def elu(cnp.ndarray x, double alpha, double scale, double input_scale, out):
    """x > 0 ? scale x : scale alpha expm1(input_scale x) -> (y, saved).  Backward from x
    (accurate in the far negative tail, where y + alpha cancels), from y in place (when
    y <= 0 exactly where x <= 0: alpha scale input_scale >= 0, scale > 0), as torch."""
    cdef bint from_out = out is x and alpha * scale * input_scale >= 0 and scale > 0
    src = None if from_out else _keep_input(x, out)
    y = _ew(FNN_ELU_FWD, x, None, out, GRAIN_MATH, alpha, scale, input_scale)
    return y, (y if from_out else src, from_out, alpha, scale, input_scale)


def elu_backward(cnp.ndarray dy, tuple saved):
    src, from_out, alpha, scale, input_scale = saved
    return _ew(FNN_ELU_BWD_OUT if from_out else FNN_ELU_BWD_IN, dy, src, None,
               GRAIN_MEM if from_out else GRAIN_MATH, alpha, scale, input_scale)


# ---------------------------------------------------------------- gelu
def gelu(cnp.ndarray x, str approximate, out):
    """gelu(x, approximate, out) -> (y, saved); approximate 'none' (erf) or 'tanh'."""
    cdef bint ta = approximate == "tanh"
    src = _keep_input(x, out)
    y = _ew(FNN_GELUT_FWD if ta else FNN_GELU_FWD, x, None, out,
            GRAIN_MATH if ta else FNN_GELU_GRAIN)
    return y, (src, ta)


def gelu_backward(cnp.ndarray dy, tuple saved):
    if saved[1]:
        return _ew(FNN_GELUT_BWD, dy, saved[0], None, GRAIN_MATH)
    return _ew(FNN_GELU_BWD, dy, saved[0], None, FNN_GELU_GRAIN)


def _gelu_grain():
    """Elements per thread before the erf GELU splits (this build's FNN_GELU_GRAIN)."""
    return FNN_GELU_GRAIN


# ---------------------------------------------------------------- silu
def silu(cnp.ndarray x, out):
    src = _keep_input(x, out)
    return _ew(FNN_SILU_FWD, x, None, out, GRAIN_MATH), src


def silu_backward(cnp.ndarray dy, saved):
    return _ew(FNN_SILU_BWD, dy, saved, None, GRAIN_MATH)


# ---------------------------------------------------------------- softplus
def softplus(cnp.ndarray x, double beta, double threshold, out):
    src = _keep_input(x, out)
    return _ew(FNN_SOFTPLUS_FWD, x, None, out, GRAIN_MATH, beta, threshold), (src, beta, threshold)


def softplus_backward(cnp.ndarray dy, tuple saved):
    return _ew(FNN_SOFTPLUS_BWD, dy, saved[0], None, GRAIN_MATH, saved[1], saved[2])


# ---------------------------------------------------------------- sigmoid / tanh
def sigmoid(cnp.ndarray x, out):
    y = _ew(FNN_SIGMOID_FWD, x, None, out, GRAIN_MATH)
    return y, y


def sigmoid_backward(cnp.ndarray dy, saved):
    return _ew(FNN_SIGMOID_BWD, dy, saved, None, GRAIN_MEM)


def tanh(cnp.ndarray x, out):
    y = _ew(FNN_TANH_FWD, x, None, out, GRAIN_MATH)
    return y, y


def tanh_backward(cnp.ndarray dy, saved):
    return _ew(FNN_TANH_BWD, dy, saved, None, GRAIN_MEM)


# ---------------------------------------------------------------- hard* / mish
def hardtanh(cnp.ndarray x, double min_val, double max_val, out):
    """clamp(x, min_val, max_val) -> (y, saved); saved: the bit mask of min_val < x <
    max_val (the ReLU's: in place needs no copy, and the backward reads 1/8 byte an element
    instead of y)."""
    cdef cnp.ndarray mask = np.empty((cnp.PyArray_SIZE(x) + 7) // 8, dtype=np.uint8)
    return _masked(False, _CLAMP, min_val, x, out, mask, max_val), mask


def hardtanh_backward(cnp.ndarray dy, saved):
    return _masked(True, 0, 0.0, dy, None, saved)


def hardsigmoid(cnp.ndarray x, out):
    """min(max(x + 3, 0), 6) / 6 -> (y, saved); saved: the bit mask of -3 < x < 3."""
    cdef cnp.ndarray mask = np.empty((cnp.PyArray_SIZE(x) + 7) // 8, dtype=np.uint8)
    return _masked(False, _HARDSIG, 0.0, x, out, mask), mask


def hardsigmoid_backward(cnp.ndarray dy, saved):
    return _masked(True, _SCALED, 1.0 / 6.0, dy, None, saved)


def hardswish(cnp.ndarray x, out):
    src = _keep_input(x, out)
    return _ew(FNN_HARDSWISH_FWD, x, None, out, GRAIN_MEM), src


def hardswish_backward(cnp.ndarray dy, saved):
    return _ew(FNN_HARDSWISH_BWD, dy, saved, None, GRAIN_MEM)


def mish(cnp.ndarray x, out):
    src = _keep_input(x, out)
    return _ew(FNN_MISH_FWD, x, None, out, GRAIN_MATH), src


def mish_backward(cnp.ndarray dy, saved):
    return _ew(FNN_MISH_BWD, dy, saved, None, GRAIN_MATH)


# ---------------------------------------------------------------- neg
def neg(cnp.ndarray x, out):
    """-x (inference-only; softmin's helper)."""
    return _ew(FNN_NEG, x, None, out, GRAIN_MEM)


# ---------------------------------------------------------------- test hook
_MATH = {"exp": 0, "expm1": 1, "tanh": 2, "erf": 3, "log1p": 4, "gauss_cdf": 5, "gauss": 6,
         "exp_nonpos": 7, "sigmoid": 8, "gelu": 9,
         "gelu_grad": 10, "gelu_tanh": 11, "gelu_tanh_grad": 12}


def _math_hook(str name, cnp.ndarray x):
    """fnn_math.h's float function ``name`` over a float32 array (tests/test_math.py)."""
    if name not in _MATH:
        raise ValueError(f"unknown function {name!r}; expected one of {sorted(_MATH)}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    cdef cnp.ndarray y = _empty_like(x)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(x)
    fnn_math_apply(_MATH[name], <const float*>_data(x, n, F32), <float*>_data(y, n, F32), n)
    return y


# ------------------------------------------------------------------ bench ceiling
cdef extern from "fnn_stream.h" nogil:
    void fnn_stream_copy_f(float* y, const float* src, Py_ssize_t n)
    void fnn_stream_fence()


def _stream_copy(cnp.ndarray src, cnp.ndarray out):
    """out[:] = src with non-temporal stores, one chunk per thread (float32, C-contiguous,
    same size): the copy `fastnn bench` measures as the ceiling of kernels that stream
    their outputs (no read-for-ownership of the destination).  Not an op."""
    cdef Py_ssize_t n = cnp.PyArray_SIZE(src), i0, i1
    if cnp.PyArray_SIZE(out) != n:
        raise ValueError("_stream_copy: src and out differ in size")
    cdef const float* ps = <const float*>_data(src, n, F32)
    cdef float* po = <float*>_data(out, n, F32)
    cdef int nt = _threads_for(n, GRAIN_MEM), t
    with nogil:
        for t in prange(nt, schedule="static", num_threads=nt):
            i0 = _chunk(n, nt, t)
            i1 = _chunk(n, nt, t + 1)
            fnn_stream_copy_f(po + i0, ps + i0, i1 - i0)
            fnn_stream_fence()
    return out


cdef void _update3(float* a, float* b, float* c, const float* g,
                   Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        a[i] += g[i]
        b[i] += g[i]
        c[i] += g[i]


def _update_in_place(cnp.ndarray a, cnp.ndarray b, cnp.ndarray c, cnp.ndarray g):
    """a += g, b += g, c += g, one chunk of each array per thread, all four streams at
    once (float32, C-contiguous, same size): an optimizer step's mix of streams (AdamW
    updates a parameter and its two moments in place and reads the gradient), the
    ceiling `fastnn bench` gives such a row.  Not an op."""
    cdef Py_ssize_t n = cnp.PyArray_SIZE(g), i0, i1
    for x in (a, b, c):
        if cnp.PyArray_SIZE(x) != n:
            raise ValueError("_update_in_place: the arrays differ in size")
    cdef float* pa = <float*>_data(a, n, F32)
    cdef float* pb = <float*>_data(b, n, F32)
    cdef float* pc = <float*>_data(c, n, F32)
    cdef const float* pg = <const float*>_data(g, n, F32)
    cdef int nt = _threads_for(n, GRAIN_MEM), t
    with nogil:
        for t in prange(nt, schedule="static", num_threads=nt):
            i0 = _chunk(n, nt, t)
            i1 = _chunk(n, nt, t + 1)
            _update3(pa + i0, pb + i0, pc + i0, pg + i0, i1 - i0)
    return a, b, c
