# Norm family: layer_norm over the last D elements of each row.
#
# Forward: one row at a time (it stays in L1/L2), mean and variance accumulated in
# double over the row, then one fused normalise+affine pass.  Saves mean and rstd.
# Backward: per row dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w;
# d_weight / d_bias are summed over fixed row chunks (independent of the thread count)
# in double, then the chunk partials are added in order: deterministic, no atomics.
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange, parallel
from libc.stdlib cimport free
from libc.string cimport memset
from cpython.pycapsule cimport PyCapsule_GetPointer

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

OPS = ("layer_norm", "layer_norm_backward", "layer_norm_backward_plus", "layer_norm_infer",
       "add_layer_norm_infer")


cdef extern from "fnn_norm.h" nogil:
    void fnn_ln_fwd_row_f(const float* x, float* y, const float* w, const float* b, Py_ssize_t D,
                          double eps, float* mean_out, float* rstd_out, int stream,
                          const float* next)
    void fnn_ln_fwd_row_d(const double* x, double* y, const double* w, const double* b,
                          Py_ssize_t D, double eps, double* mean_out, double* rstd_out,
                          int stream, const double* next)
    Py_ssize_t FNN_STREAM_BYTES
    void fnn_stream_fence()
    void fnn_ln_bwd_row_f(const float* dy, const float* x, const float* w, float mean, float rstd,
                          Py_ssize_t D, float* dx, float* pw, float* pb, int stream)
    void fnn_ln_bwd_row_d(const double* dy, const double* x, const double* w, double mean,
                          double rstd, Py_ssize_t D, double* dx, double* pw, double* pb,
                          int stream)


cdef inline void _ln_row(const real* x, real* y, const real* w, const real* b, Py_ssize_t D,
                         double eps, real* mean_out, real* rstd_out, bint stream,
                         const real* nxt) noexcept nogil:
    if real is float:
        fnn_ln_fwd_row_f(x, y, w, b, D, eps, mean_out, rstd_out, stream, nxt)
    else:
        fnn_ln_fwd_row_d(x, y, w, b, D, eps, mean_out, rstd_out, stream, nxt)


cdef inline void _ln_bwd_row(const real* dy, const real* x, const real* w, real mean, real rstd,
                             Py_ssize_t D, real* dx, real* pw, real* pb,
                             bint stream) noexcept nogil:
    if real is float:
        fnn_ln_bwd_row_f(dy, x, w, mean, rstd, D, dx, pw, pb, stream)
    else:
        fnn_ln_bwd_row_d(dy, x, w, mean, rstd, D, dx, pw, pb, stream)


cdef void _ln_fwd(const real* x, real* y, const real* w, const real* b, Py_ssize_t rows,
                  Py_ssize_t D, double eps, real* mean, real* rstd) noexcept nogil:
    cdef Py_ssize_t r
    cdef int nt = _threads_for(rows * D, 1 << 14)
    # a large output goes out with non-temporal stores (fnn_stream.h), fenced once per
    # thread after its rows, and the next row is prefetched (a large input is memory-bound)
    cdef bint stream = rows * D * <Py_ssize_t>sizeof(real) >= FNN_STREAM_BYTES
    if nt == 1:
        for r in range(rows):
            _ln_row(x + r * D, y + r * D, w, b, D, eps, mean + r, rstd + r, stream,
                    x + (r + 1) * D if stream and r + 1 < rows else NULL)
        if stream:
            fnn_stream_fence()
    else:
        with parallel(num_threads=nt):
            for r in prange(rows, schedule="static"):
                _ln_row(x + r * D, y + r * D, w, b, D, eps, mean + r, rstd + r, stream,
                        x + (r + 1) * D if stream and r + 1 < rows else NULL)
            if stream:
                fnn_stream_fence()


def layer_norm(cnp.ndarray x, object weight, object bias, Py_ssize_t D, double eps):
    """layer_norm(x, weight, bias, D, eps) -> (y, saved).

    IN  x C-contiguous, normalised over its last D elements (x.size % D == 0);
        weight, bias: C-contiguous arrays of D elements (same dtype) or None."""
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(x) // D if D else 0
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                           cnp.PyArray_TYPE(x), 0)
    # mean and rstd share one allocation: stats[0] = mean, stats[1] = rstd
    cdef cnp.npy_intp sdims[2]
    sdims[0] = 2
    sdims[1] = rows
    cdef cnp.ndarray stats = cnp.PyArray_EMPTY(2, sdims, cnp.PyArray_TYPE(x), 0)
    _ln_fwd_arrays(x, y, weight, bias, rows, D, eps, _data(stats, 2 * rows, cnp.PyArray_TYPE(x)))
    return y, (x, weight, bias is not None, stats, D)


cdef void _ln_fwd_arrays(cnp.ndarray x, cnp.ndarray y, object weight, object bias,
                         Py_ssize_t rows, Py_ssize_t D, double eps, void* stats):
    """_ln_fwd on x's dtype; stats: 2 * rows values of that dtype (mean, then rstd)."""
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pw = _data_or_null(weight, D, T)
    cdef void* pb = _data_or_null(bias, D, T)
    cdef const void* px = _data(x, rows * D, T)
    cdef void* py = _data(y, rows * D, T)
    if T == F32:
        with nogil:
            _ln_fwd[float](<const float*>px, <float*>py, <const float*>pw, <const float*>pb,
                           rows, D, eps, <float*>stats, <float*>stats + rows)
    else:
        with nogil:
            _ln_fwd[double](<const double*>px, <double*>py, <const double*>pw, <const double*>pb,
                            rows, D, eps, <double*>stats, <double*>stats + rows)


cdef enum:
    _STACK_ROWS = 64    # layer_norm_infer keeps the statistics of this many rows on the stack


def layer_norm_infer(cnp.ndarray x, object weight, object bias, Py_ssize_t D, double eps):
    """layer_norm_infer(x, weight, bias, D, eps) -> y: layer_norm's output alone
    (inference-only).  Same arguments and kernel as layer_norm; the per-row statistics
    go to scratch memory instead of a saved array -- the small-call latency path."""
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(x) // D if D else 0
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                           cnp.PyArray_TYPE(x), 0)
    cdef double stack[2 * _STACK_ROWS]
    cdef void* scratch = <void*>stack
    if rows > _STACK_ROWS:
        scratch = _alloc(2 * rows, sizeof(double))
    _ln_fwd_arrays(x, y, weight, bias, rows, D, eps, scratch)
    if scratch != <void*>stack:
        free(scratch)
    return y


cdef inline void _add_row(real* a, const real* b, Py_ssize_t n) noexcept nogil:
    """a += b over one row (still in L1: just made)."""
    cdef Py_ssize_t j
    for j in range(n):
        a[j] = a[j] + b[j]


cdef int _ln_bwd(const real* dy, const real* x, const real* w, const real* mean,
                 const real* rstd, Py_ssize_t rows, Py_ssize_t D, real* dx,
                 real* dw, real* db, const real* plus=NULL) except -1 nogil:
    cdef Py_ssize_t CH = 64
    cdef Py_ssize_t nch = (rows + CH - 1) // CH
    cdef Py_ssize_t c, r, j, r0, r1
    cdef int nt = _threads_for(rows * D, 1 << 14)
    cdef bint want_params = dw != NULL
    # (with ``plus`` each d_input row is read back right after it is made: no NT stores)
    cdef bint stream = plus == NULL and rows * D * <Py_ssize_t>sizeof(real) >= FNN_STREAM_BYTES
    # per-chunk partials of d_weight / d_bias in the input precision (<= CH terms each),
    # summed over chunks in double, in chunk order
    cdef real* part = NULL
    cdef real *pw
    cdef real *pb
    cdef double* acc = NULL
    if want_params and nch > 0:
        part = <real*>_calloc(2 * nch * D, sizeof(real))
    with parallel(num_threads=nt):
        for c in prange(nch, schedule="static"):
            r0 = c * CH
            r1 = r0 + CH
            if r1 > rows:
                r1 = rows
            pw = part + 2 * c * D if want_params else NULL
            pb = pw + D if want_params else NULL
            for r in range(r0, r1):
                _ln_bwd_row(dy + r * D, x + r * D, w, mean[r], rstd[r], D, dx + r * D, pw, pb,
                            stream)
                if plus != NULL:
                    _add_row(dx + r * D, plus + r * D, D)
        if stream:              # this thread's streamed rows, once (fnn_stream.h)
            fnn_stream_fence()
    if want_params:
        acc = <double*>fnn_calloc(2 * D + 1, sizeof(double))
        if acc == NULL:
            free(part)
            _raise_nomem(2 * D + 1, sizeof(double))
        for c in range(nch):
            for j in range(2 * D):
                acc[j] += part[2 * c * D + j]
        for j in range(D):
            dw[j] = <real>acc[j]
            if db != NULL:
                db[j] = <real>acc[D + j]
        free(acc)
        free(part)
    return 0


def layer_norm_backward(cnp.ndarray dy, tuple saved):
    """layer_norm_backward(dy, saved) -> (d_input, d_weight or None, d_bias or None)."""
    return _layer_norm_backward(dy, saved, None)


def layer_norm_backward_plus(cnp.ndarray dy, tuple saved, cnp.ndarray plus):
    """layer_norm_backward_plus(dy, saved, plus) -> (d_input + plus, d_weight, d_bias):
    layer_norm_backward with another gradient of the input added into d_input as each
    row is made (a pre-LN residual block: the residual branch's gradient).  plus
    C-contiguous, the input's shape and dtype."""
    return _layer_norm_backward(dy, saved, plus)


cdef tuple _layer_norm_backward(cnp.ndarray dy, tuple saved, object plus):
    cdef cnp.ndarray x = saved[0]
    weight = saved[1]
    cdef bint has_bias = saved[2]
    cdef cnp.ndarray stats = saved[3]
    cdef Py_ssize_t D = saved[4]
    cdef Py_ssize_t rows = x.size // D if D else 0
    cdef cnp.ndarray dx = np.empty_like(x)
    cdef cnp.ndarray dw = None, db = None
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pw = _data_or_null(weight, D, T)
    if weight is not None:
        dw = np.empty_like(weight)
        if has_bias:
            db = np.empty_like(weight)
    elif has_bias:
        # bias without weight: d_bias still needs the column sums; use the dw path
        dw = np.empty(D, dtype=x.dtype)
        db = np.empty(D, dtype=x.dtype)
    cdef void* pdw = _data_or_null(dw, D, T)
    cdef void* pdb = _data_or_null(db, D, T)
    cdef const void* pdy = _data(dy, rows * D, T)
    cdef const void* px = _data(x, rows * D, T)
    cdef const void* ps = _data(stats, 2 * rows, T)     # mean, then rstd
    cdef void* pdx = _data(dx, rows * D, T)
    cdef const void* pplus = _data_or_null(plus, rows * D, T)
    if T == F32:
        with nogil:
            _ln_bwd[float](<const float*>pdy, <const float*>px, <const float*>pw,
                           <const float*>ps, <const float*>ps + rows, rows, D,
                           <float*>pdx, <float*>pdw, <float*>pdb, <const float*>pplus)
    else:
        with nogil:
            _ln_bwd[double](<const double*>pdy, <const double*>px, <const double*>pw,
                            <const double*>ps, <const double*>ps + rows, rows, D,
                            <double*>pdx, <double*>pdw, <double*>pdb, <const double*>pplus)
    if weight is None:
        dw = None
    return dx, dw, db


# ---------------------------------------------------------------- add + layer_norm
# The post-LN transformer's residual step y = layer_norm(x + residual) in one pass per
# row: the sum is formed in a per-thread row buffer (in L1) and normalised from there,
# so x + residual never goes to memory (inference-only: nothing is saved).

# The float add + layer norm of inference on the dense family's pool: it runs between two
# GEMMs, and a sentence's rows (split by columns over both cores by the GEMM before) come
# back faster to two cores than to one (25 x 384 after a GEMM: 5 us, 7.5 on one core).
include "fnn_sgpool.pxi"
include "fnn_streamcfg.pxi"
ADD_LN_POOL = _sg_pool != NULL

cdef enum:
    _ADD_LN_POOL_MIN = 4096     # elements from which the pool shares the rows out
    _ADD_LN_STACK = 4096        # the largest D whose row sum a pooled chunk keeps on its stack


ctypedef struct _AddLnJob:
    const float* x
    const float* res
    float* y
    const float* w
    const float* b
    Py_ssize_t rows, D
    double eps
    int nch


cdef inline void _add_ln_row(const real* x, const real* res, real* buf, real* y,
                             const real* w, const real* b, Py_ssize_t D,
                             double eps) noexcept nogil:
    """One row: the sum x + res into buf (D + 2: the row, then its unused mean and rstd),
    normalised from there into y."""
    cdef Py_ssize_t k
    for k in range(D):
        buf[k] = x[k] + res[k]
    _ln_row(buf, y, w, b, D, eps, buf + D, buf + D + 1, False, NULL)


cdef void _add_ln_chunk(void* arg, int c) noexcept nogil:
    """Rows of chunk c of a pooled add + layer norm (float), the row sum on the stack."""
    cdef _AddLnJob* j = <_AddLnJob*>arg
    cdef float buf[_ADD_LN_STACK + 2]
    cdef Py_ssize_t r, D = j.D
    for r in range(j.rows * c // j.nch, j.rows * (c + 1) // j.nch):
        _add_ln_row[float](j.x + r * D, j.res + r * D, buf, j.y + r * D, j.w, j.b, D, j.eps)


cdef int _add_ln_fwd(const real* x, const real* res, real* y, const real* w, const real* b,
                     Py_ssize_t rows, Py_ssize_t D, double eps) except -1 nogil:
    cdef Py_ssize_t r
    cdef int nt = _threads_for(rows * D, 1 << 14)
    cdef real* buf
    cdef int failed = 0
    cdef _AddLnJob job
    cdef int nmax = fnn_max_threads()
    if real is float:
        if (_sg_pool != NULL and nmax > 1 and rows > 1 and rows * D >= _ADD_LN_POOL_MIN
                and D <= _ADD_LN_STACK):
            job.x = x
            job.res = res
            job.y = y
            job.w = w
            job.b = b
            job.rows = rows
            job.D = D
            job.eps = eps
            job.nch = <int>(rows if rows < 8 * nmax else 8 * nmax)
            _sg_pool(_add_ln_chunk, &job, job.nch, nmax)
            return 0
    with parallel(num_threads=nt):
        buf = <real*>fnn_alloc(D + 2, sizeof(real))
        if buf == NULL:
            fnn_flag_set(&failed)
        for r in prange(rows, schedule="static"):
            if buf != NULL:
                _add_ln_row(x + r * D, res + r * D, buf, y + r * D, w, b, D, eps)
        free(buf)
    if failed:
        _raise_nomem(D + 2, sizeof(real))
    return 0


def add_layer_norm_infer(cnp.ndarray x, cnp.ndarray residual, object weight, object bias,
                         Py_ssize_t D, double eps):
    """add_layer_norm_infer(x, residual, weight, bias, D, eps) -> layer_norm(x + residual).

    IN  x, residual: C-contiguous, same shape and dtype, normalised over the last D
        elements; weight, bias as layer_norm.  OUT y (x's shape).  Inference-only."""
    cdef Py_ssize_t rows = cnp.PyArray_SIZE(x) // D if D else 0
    cdef cnp.ndarray y = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                           cnp.PyArray_TYPE(x), 0)
    cdef int T = F32 if cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT else F64
    cdef void* pw = _data_or_null(weight, D, T)
    cdef void* pb = _data_or_null(bias, D, T)
    cdef const void* px = _data(x, rows * D, T)
    cdef const void* pr = _data(residual, rows * D, T)
    cdef void* py = _data(y, rows * D, T)
    if T == F32:
        _add_ln_fwd[float](<const float*>px, <const float*>pr, <float*>py,
                           <const float*>pw, <const float*>pb, rows, D, eps)
    else:
        _add_ln_fwd[double](<const double*>px, <const double*>pr, <double*>py,
                            <const double*>pw, <const double*>pb, rows, D, eps)
    return y
