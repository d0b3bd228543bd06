# Embedding family: row gather forward; deterministic sort-by-index backward.
#
# Forward copies weight[idx[i]] into row i of the output (memcpy per row, rows split
# over threads).
#
# Backward sorts the n indices (stable, so equal indices keep their position order),
# cuts the sorted list into segments of equal index, and gives each segment -- one
# distinct row of d_weight -- to one thread, which sums that segment's dy rows in
# position order (double accumulators, in column blocks on the stack) and writes the
# row once.  No two threads touch one row, no atomics, and the summation order depends
# only on the indices: bit-identical at any thread count.  d_weight comes from
# np.zeros (calloc: the OS hands out zero pages lazily), and only the rows that occur
# are written, so a 50257 x 768 table is not swept by the backward itself.
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

OPS = ("embedding", "embedding_backward")

cdef enum:
    CB = 128          # columns per accumulator block (a 1 KiB double array on the stack)


cdef void _gather(const int64_t* idx, const real* w, real* out, Py_ssize_t n,
                  Py_ssize_t dim) noexcept nogil:
    cdef Py_ssize_t i
    cdef int nt = _threads_for(n * dim, 1 << 15)
    if nt == 1:
        for i in range(n):
            memcpy(out + i * dim, w + idx[i] * dim, dim * sizeof(real))
    else:
        for i in prange(n, nogil=True, schedule="static", num_threads=nt):
            memcpy(out + i * dim, w + idx[i] * dim, dim * sizeof(real))


def embedding(cnp.ndarray idx, cnp.ndarray weight, object padding_idx):
    """embedding(idx, weight, padding_idx) -> (out, saved).

    IN  idx: C-contiguous int64, every value in [0, num); weight (num, dim) C-contiguous.
    OUT out: idx.shape + (dim,), weight's dtype."""
    cdef Py_ssize_t n = idx.size, dim = weight.shape[1]
    cdef cnp.ndarray out = np.empty((<object>idx).shape + (dim,), dtype=weight.dtype)
    cdef int T = F32 if cnp.PyArray_TYPE(weight) == cnp.NPY_FLOAT else F64
    cdef const int64_t* pi = <const int64_t*>_data(idx, n, I64)
    cdef const void* pw = _data(weight, cnp.PyArray_SIZE(weight), T)   # rows idx[i]
    cdef void* po = _data(out, n * dim, T)
    if T == F32:
        with nogil:
            _gather[float](pi, <const float*>pw, <float*>po, n, dim)
    else:
        with nogil:
            _gather[double](pi, <const double*>pw, <double*>po, n, dim)
    return out, (idx, weight.shape[0], padding_idx)


cdef inline void _segment(const real* dy, const int64_t* order, Py_ssize_t s0, Py_ssize_t s1,
                          Py_ssize_t dim, real* row) noexcept nogil:
    # row = sum over k in [s0, s1) of dy[order[k]], in k order, double accumulation
    cdef double acc[CB]
    cdef Py_ssize_t c0, c, nb, k
    cdef const real* src
    if s1 - s0 == 1:
        memcpy(row, dy + order[s0] * dim, dim * sizeof(real))
        return
    c0 = 0
    while c0 < dim:
        nb = dim - c0
        if nb > CB:
            nb = CB
        src = dy + order[s0] * dim + c0
        for c in range(nb):
            acc[c] = src[c]
        for k in range(s0 + 1, s1):
            src = dy + order[k] * dim + c0
            for c in range(nb):
                acc[c] += src[c]
        for c in range(nb):
            row[c0 + c] = <real>acc[c]
        c0 += nb


cdef void _scatter(const real* dy, const int64_t* order, const int64_t* sorted_idx,
                   const Py_ssize_t* seg, Py_ssize_t nseg, Py_ssize_t dim, int64_t pad,
                   real* dw, int nt) noexcept nogil:
    cdef Py_ssize_t s
    cdef int64_t r
    for s in prange(nseg, nogil=True, schedule="static", num_threads=nt):
        r = sorted_idx[seg[s]]
        if r != pad:
            _segment(dy, order, seg[s], seg[s + 1], dim, dw + r * dim)


def embedding_backward(cnp.ndarray dy, tuple saved):
    """embedding_backward(dy, saved) -> d_weight (num, dim), zero where no index points."""
    cdef cnp.ndarray idx = saved[0]
    cdef Py_ssize_t num = saved[1]
    cdef int64_t pad = -1 if saved[2] is None else <int64_t>saved[2]
    cdef Py_ssize_t n = idx.size
    cdef Py_ssize_t dim = dy.shape[dy.ndim - 1]
    cdef cnp.ndarray dw = np.zeros((num, dim), dtype=dy.dtype)
    if n == 0 or dim == 0:
        return dw
    flat = idx.reshape(-1)
    cdef cnp.ndarray order = np.argsort(flat, kind="stable").astype(np.int64, copy=False)
    cdef cnp.ndarray sorted_idx = flat[order]
    cdef int64_t[::1] sv = sorted_idx
    cdef cnp.ndarray seg_arr = np.empty(n + 1, dtype=np.intp)
    cdef Py_ssize_t[::1] seg = seg_arr
    cdef Py_ssize_t k, nseg = 0
    with nogil:
        for k in range(n):
            if k == 0 or sv[k] != sv[k - 1]:
                seg[nseg] = k
                nseg = nseg + 1
        seg[nseg] = n
    cdef int nt = _threads_for(n * dim, 1 << 14)
    cdef int T = F32 if cnp.PyArray_TYPE(dy) == cnp.NPY_FLOAT else F64
    cdef const void* pdy = _data(dy, n * dim, T)
    cdef const int64_t* po = <const int64_t*>_data(order, n, I64)
    cdef void* pdw = _data(dw, num * dim, T)
    if T == F32:
        with nogil:
            _scatter[float](<const float*>pdy, po, &sv[0], &seg[0], nseg, dim, pad, <float*>pdw, nt)
    else:
        with nogil:
            _scatter[double](<const double*>pdy, po, &sv[0], &seg[0], nseg, dim, pad, <double*>pdw, nt)
    return dw
