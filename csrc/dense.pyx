# Dense family: linear (y = x W^T + b) forward and backward.
#
# GEMM-bound: the work is three GEMMs (forward, d_input, d_weight) made with the GIL
# released, each cut into fixed blocks of C (from the shape alone) that are single-threaded
# BLAS calls on fastnn's OpenMP threads (see "blocked GEMM" below); the backward's two
# GEMMs share one parallel region.  The bias is folded into the forward GEMM (each block
# of C starts as the broadcast bias, beta = 1); d_bias is a column sum over fixed row
# chunks, reduced in chunk order, so it is the same at any thread count.  The weight is
# (out, in) C-contiguous, or the transpose of a C-contiguous (in, out) array (GPT-2's
# Conv1D layout, read as it is; d_weight then comes back in that layout too).
# A transformer MLP's and residual stream's elementwise neighbours run inside the GEMM
# blocks' epilogues (linear_act, linear_backward_act, linear_residual: "block epilogues"
# below).
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdlib cimport free
from cpython.pycapsule cimport PyCapsule_New
from libc.string cimport memcpy, memset

from libc.stdint cimport int64_t, uintptr_t

from fnn_blas cimport gemm as _scipy_gemm, real

import numpy as np

from fastnn._threads import single_threaded_blas

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"
include "fnn_gemm.pxi"
include "fnn_colsum.pxi"

OPS = ("linear", "linear_backward", "linear_act", "linear_act_backward", "linear_backward_act",
       "linear_residual", "linear_act_infer", "skinny_linear", "pack_linear_weight",
       "packed_linear_infer")


cdef inline Py_ssize_t _rows(cnp.ndarray x):
    """Product of the leading dims (not x.size // in_features: in_features may be 0)."""
    cdef Py_ssize_t rows = 1
    cdef int k
    for k in range(x.ndim - 1):
        rows *= x.shape[k]
    return rows


# ---------------------------------------------------------------- blocked GEMM
# BLAS's own threading is not bit-reproducible across thread counts (OpenBLAS splits the
# work differently and the last bits move), and fastnn promises results that never depend
# on the thread count.  So a large GEMM is cut into row blocks of the output whose number
# depends only on the shape; each block is a single-threaded BLAS call, the blocks run on
# fastnn's OpenMP threads, and BLAS is held to one thread meanwhile (no stacked pools).
#
# Block size: every BLAS call packs the operand all blocks share (B for row blocks) again,
# a pass over K x N that is not amortised over fewer rows: measured single-threaded on
# this machine's OpenBLAS (SkylakeX kernels), total time of M = 2048-4096 rows in blocks of
# m rows vs one call: m = 128 +10-29%, 256 +3-13%, 512 +1-7%, 1024 +0-4%, for K x N from
# 128 x 384 to 768 x 3072.  So blocks have >= 512 rows (8 blocks for the 4096-row linear,
# 2 for the GPT demo's 1024 tokens), an even count (balanced on 2 and 4 threads), at most
# 16 (a 16-thread machine still gets every core on a GEMM of >= 8192 rows).  A C of fewer
# rows is halved (>= 128 rows each), not cut into 128-row pieces; a C shorter still (the
# weight gradient of a narrow layer) is cut into column blocks of >= 256 columns (>= 64
# when that is the only way to get two).
cdef enum:
    _MIN_BLOCK_ROWS = 512
    _MIN_SPLIT_ROWS = 128    # rows of each half when a short C is halved
    _MIN_BLOCK_COLS = 256
    _MIN_SPLIT_COLS = 64
    _SKINNY_ROWS = 64        # at most this many rows: column blocks of >= 64 columns
    _MAX_BLOCKS = 16
    _MAX_COL_BLOCKS = 8
    _SERIAL_MACS = 131072    # below this OpenBLAS never threads: call it directly


cdef inline Py_ssize_t _even_blocks(Py_ssize_t n, Py_ssize_t size, Py_ssize_t split,
                                    Py_ssize_t cap) noexcept nogil:
    """Blocks of >= size along an extent n: an even count when more than one, at most cap;
    two halves of >= split when whole blocks give fewer than two; else 1."""
    cdef Py_ssize_t nb = (n // size) & ~1
    if nb >= 2:
        return nb if nb < cap else cap
    return 2 if n >= 2 * split else 1


cdef inline int _nblocks(Py_ssize_t M) noexcept nogil:
    """Row blocks of a tall C (see above)."""
    return <int>_even_blocks(M, _MIN_BLOCK_ROWS, _MIN_SPLIT_ROWS, _MAX_BLOCKS)


cdef inline void _split(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, int* bm, int* bn) noexcept nogil:
    """Fixed blocks of C (M x N) for a big GEMM, from the shape alone (so results do not
    depend on the thread count): row blocks when C has >= 256 rows, else column blocks."""
    bm[0] = 1
    bn[0] = 1
    if M * N * K <= _SERIAL_MACS:
        return
    bm[0] = _nblocks(M)
    if bm[0] >= 2:
        return
    if M <= _SKINNY_ROWS:
        # a skinny C (a few rows: small-batch calls, the (8, 768) latency row): blocks of
        # >= 64 columns.  Packing is no reason for wide blocks here -- A is a few rows and
        # B is packed once in all -- while OpenBLAS's unpacked small-matrix kernel takes
        # blocks this small: 8 x 768 x 768 in 8 blocks 55 us, in 2 blocks 200 us (2 threads)
        bn[0] = <int>_even_blocks(N, _MIN_SPLIT_COLS, _MIN_SPLIT_COLS, _MAX_COL_BLOCKS)
        return
    bn[0] = <int>_even_blocks(N, _MIN_BLOCK_COLS, _MIN_SPLIT_COLS, _MAX_COL_BLOCKS)


# ---------------------------------------------------------------- block epilogues
# An elementwise step run on each finished block of C by the thread that made it, while
# the block is still in its core's cache (a separate pass over the whole output would read
# it back from the other core's cache or L3, and cost a call and a parallel region of its
# own): a linear layer's activation (linear_act: H = act(C), C kept as the activation's
# input), the derivative of the activation that produced this linear layer's input
# (linear_backward_act: C = C * act'(U)), or a residual sum (linear_residual: C += R).
# U, R and H have C's layout.  The activation steps are fnn_activation.h's kernels, so an
# element comes out as activation.pyx's pass computes it -- the same bits whenever the
# 16-element vectors line up (whole rows of a width that is a multiple of 16; else a
# table-form vector may take the general form, or the reverse: same accuracy bounds).
cdef extern from "fnn_activation.h" nogil:
    enum:
        FNN_RELU_FWD
        FNN_GELU_FWD
        FNN_GELU_BWD
        FNN_GELUT_FWD
        FNN_GELUT_BWD
    void fnn_act_f(int op, const float* a, const float* b, float* o, Py_ssize_t n,
                   const double* p)
    void fnn_act_d(int op, const double* a, const double* b, double* o, Py_ssize_t n,
                   const double* p)

cdef enum:
    _POST_ACT = 1     # H = act(C)
    _POST_GRAD = 2    # C = C * act'(U)
    _POST_ADD = 3     # C = C + R

ctypedef struct _Post:
    int kind
    int op            # the fnn_activation.h kernel (a forward op, or its backward op)
    const void* aux   # U or R
    void* out         # H


cdef inline void _post_span(const _Post* p, real* c, Py_ssize_t off, Py_ssize_t n) noexcept nogil:
    cdef double prm[3]
    cdef Py_ssize_t i
    cdef const real* aux = <const real*>p.aux
    prm[0] = prm[1] = prm[2] = 0.0
    if p.kind == _POST_ADD:
        for i in range(n):
            c[off + i] = c[off + i] + aux[off + i]
    elif real is float:
        if p.kind == _POST_ACT:
            fnn_act_f(p.op, c + off, NULL, <float*>p.out + off, n, prm)
        else:
            fnn_act_f(p.op, c + off, aux + off, c + off, n, prm)
    else:
        if p.kind == _POST_ACT:
            fnn_act_d(p.op, c + off, NULL, <double*>p.out + off, n, prm)
        else:
            fnn_act_d(p.op, c + off, aux + off, c + off, n, prm)


cdef inline void _post_run(const _Post* p, real* C, Py_ssize_t ldc, Py_ssize_t m0,
                           Py_ssize_t m1, Py_ssize_t n0, Py_ssize_t n1) noexcept nogil:
    """The post step on rows [m0, m1) x columns [n0, n1) of C (ldc): one span when the
    rows are whole, else row by row."""
    cdef Py_ssize_t r
    if n0 == 0 and n1 == ldc:
        _post_span(p, C, m0 * ldc, (m1 - m0) * ldc)
        return
    for r in range(m0, m1):
        _post_span(p, C, r * ldc + n0, n1 - n0)


cdef inline int _gemm_block(bint ta, bint tb, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K,
                            real beta, const real* A, Py_ssize_t lda, const real* B,
                            Py_ssize_t ldb, real* C, Py_ssize_t ldc, int bm, int bn, int b,
                            const real* bias, const _Post* post=NULL) noexcept nogil:
    """Block b (row-major over bm x bn) of C[M, N] = op(A) op(B) + beta C: one
    single-threaded BLAS call.  With ``bias`` (then beta is ignored): on the own float32
    kernel the bias goes in with its first stores (gemm_bias); else the block of C starts
    as the broadcast bias, filled right before its GEMM (still in cache for it).  With
    ``post``, its elementwise step follows on the finished block (_post_run).  -> 0, or -1
    when the GEMM could not get its work buffer (fnn_gemm.pxi)."""
    cdef Py_ssize_t m0 = (M * (b // bn)) // bm
    cdef Py_ssize_t m1 = (M * (b // bn + 1)) // bm
    cdef Py_ssize_t n0 = (N * (b % bn)) // bn
    cdef Py_ssize_t n1 = (N * (b % bn + 1)) // bn
    cdef Py_ssize_t r
    cdef bint done = False
    if bias != NULL:
        done = gemm_bias(ta, tb, <int>(m1 - m0), <int>(n1 - n0), <int>K,
                         (A + m0) if ta else (A + m0 * lda), <int>lda,
                         (B + n0 * ldb) if tb else (B + n0), <int>ldb, bias + n0,
                         C + m0 * ldc + n0, <int>ldc)
        if not done:
            beta = 1.0
            for r in range(m0, m1):
                memcpy(&C[r * ldc + n0], &bias[n0], (n1 - n0) * sizeof(real))
    if not done:
        if gemm(ta, tb, <int>(m1 - m0), <int>(n1 - n0), <int>K, <real>1.0,
                (A + m0) if ta else (A + m0 * lda), <int>lda,
                (B + n0 * ldb) if tb else (B + n0), <int>ldb, beta,
                C + m0 * ldc + n0, <int>ldc):
            return -1
    if post != NULL:
        _post_run(post, C, ldc, m0, m1, n0, n1)
    return 0


# The blocks are handed out dynamically: which thread runs a block does not change its
# bits, and a thread that the OS holds off (a loaded machine) then delays only the blocks
# it took, instead of a fixed half of them.
cdef int _gemm_blocks(bint ta, bint tb, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, real beta,
                      const real* A, Py_ssize_t lda, const real* B, Py_ssize_t ldb,
                      real* C, Py_ssize_t ldc, int bm, int bn, int nt,
                      const real* bias=NULL, const _Post* post=NULL) noexcept nogil:
    """C[M, N] = op(A) op(B) + beta C in bm x bn fixed blocks of C (_gemm_block), shared
    out over ``nt`` threads; ``post``: each block's epilogue step.  -> 0, or -1 when a
    block's GEMM could not get its work buffer (the caller raises MemoryError)."""
    cdef int b, failed = 0
    if bm * bn <= 1 or nt <= 1:
        for b in range(bm * bn):
            if _gemm_block(ta, tb, M, N, K, beta, A, lda, B, ldb, C, ldc, bm, bn, b, bias,
                           post):
                return -1
        return 0
    for b in prange(bm * bn, schedule="dynamic", num_threads=nt):
        if _gemm_block(ta, tb, M, N, K, beta, A, lda, B, ldb, C, ldc, bm, bn, b, bias, post):
            fnn_flag_set(&failed)
    return -1 if failed else 0


# d_bias (column sums of dy) as work items of the backward's region: one per chunk of
# _BIAS_CHUNK rows, its float64 partial sums read along whole rows (fnn_colsum.pxi), handed
# out after the GEMM blocks to whichever thread is free; the caller adds the partials in
# chunk order -- _col_sum's arithmetic, the same bits.
cdef enum:
    _BIAS_CHUNK = 256     # rows per partial: as _col_sum(.., CH=256) before


cdef int _gemm_blocks2(bint ta, bint tb, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K,
                        const real* A, Py_ssize_t lda, const real* B, Py_ssize_t ldb,
                        real* C, Py_ssize_t ldc, int bm, int bn,
                        bint ta2, bint tb2, Py_ssize_t M2, Py_ssize_t N2, Py_ssize_t K2,
                        const real* A2, Py_ssize_t lda2, const real* B2, Py_ssize_t ldb2,
                        real* C2, Py_ssize_t ldc2, int bm2, int bn2, int nt,
                        const real* S=NULL, Py_ssize_t srows=0, Py_ssize_t sn=0,
                        double* part=NULL, const _Post* post=NULL) noexcept nogil:
    """Two independent blocked GEMMs (beta 0) in one parallel region, the blocks of both
    handed out dynamically (the backward's d_input and d_weight: one fork/join instead of
    two, and the threads balance over both); with ``part``, the float64 partial column
    sums of S (srows x sn, for the bias gradient) too: one item per chunk of _BIAS_CHUNK
    rows after the blocks (_col_sum_chunk; the caller adds the partials up).  ``post``:
    the first GEMM's block epilogue step.  -> 0, or -1 when a GEMM could not get its work
    buffer (the caller raises MemoryError)."""
    cdef int b, failed = 0, nb1 = bm * bn, nb2 = bm * bn + bm2 * bn2
    cdef int nb = nb2 + (<int>((srows + _BIAS_CHUNK - 1) // _BIAS_CHUNK) if part != NULL else 0)
    if nt <= 1:
        for b in range(nb):
            if b < nb1:
                if _gemm_block(ta, tb, M, N, K, 0, A, lda, B, ldb, C, ldc, bm, bn, b, NULL,
                               post):
                    return -1
            elif b < nb2:
                if _gemm_block(ta2, tb2, M2, N2, K2, 0, A2, lda2, B2, ldb2, C2, ldc2, bm2,
                               bn2, b - nb1, NULL):
                    return -1
            else:
                _col_sum_chunk(S, srows, sn, _BIAS_CHUNK, b - nb2, part)
        return 0
    for b in prange(nb, schedule="dynamic", num_threads=nt):
        if b < nb1:
            if _gemm_block(ta, tb, M, N, K, 0, A, lda, B, ldb, C, ldc, bm, bn, b, NULL, post):
                fnn_flag_set(&failed)
        elif b < nb2:
            if _gemm_block(ta2, tb2, M2, N2, K2, 0, A2, lda2, B2, ldb2, C2, ldc2, bm2, bn2,
                           b - nb1, NULL):
                fnn_flag_set(&failed)
        else:
            _col_sum_chunk(S, srows, sn, _BIAS_CHUNK, b - nb2, part)
    return -1 if failed else 0


def _gemm_split(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K):
    """(row blocks, column blocks) of a GEMM producing an (M, N) C over depth K (tests)."""
    cdef int bm, bn
    _split(M, N, K, &bm, &bn)
    return bm, bn


cdef object _blas_guard(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K):
    """A context holding BLAS to one thread when it might otherwise thread this GEMM."""
    if M * N * K <= _SERIAL_MACS:
        return _NULL_CTX
    return single_threaded_blas()


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


_NULL_CTX = _Null()


cdef inline real* _p(cnp.ndarray a, Py_ssize_t n, real tag) except? NULL:
    """a's data as real* for a kernel that uses its first n elements (``tag`` picks the
    specialisation: _p(a, n, <float>0)); checked in the debug build (fnn_span.pxi)."""
    return <real*>_data(a, n, F32 if real is float else F64)


cdef bint _weight_in_out(cnp.ndarray w) except -1:
    """True when the (out, in) weight is the transpose of a C-contiguous (in, out) array
    (GPT-2's Conv1D passes its weight this way, a view: no copy); False when it is
    C-contiguous itself."""
    if cnp.PyArray_IS_C_CONTIGUOUS(w):
        return False
    if cnp.PyArray_IS_F_CONTIGUOUS(w):
        return True
    raise ValueError("linear: the weight must be C-contiguous (out, in) or the transpose "
                     "of a C-contiguous (in, out) array")


cdef inline const real* _pw(cnp.ndarray w, bint w_in_out, real tag) except? NULL:
    """The weight's data (an F-contiguous one is read whole in its own layout)."""
    if w_in_out:
        return <const real*>_data_strided(w, F32 if real is float else F64)
    return _p(w, cnp.PyArray_SIZE(w), tag)


# One body per op for float and double (fused ``real``), specialised at the dispatch:
# ``if dtype == float32: f[float](...) else: f[double](...)``.
cdef void _linear_run(real z, cnp.ndarray x, cnp.ndarray weight, bint w_in_out, object bias,
                      cnp.ndarray y, Py_ssize_t rows, Py_ssize_t n_in, Py_ssize_t n_out,
                      int bm, int bn, int nt_g, const _Post* post) except *:
    cdef real* py = _p(y, rows * n_out, z)
    cdef const real* px = _p(x, rows * n_in, z)
    cdef const real* pw = _pw(weight, w_in_out, z)
    cdef const real* pb = NULL
    cdef int rc
    if bias is not None:
        pb = _p(<cnp.ndarray>bias, n_out, z)
    with _blas_guard(rows, n_out, n_in):
        with nogil:
            if w_in_out:     # y = x Wc, Wc (in, out)
                rc = _gemm_blocks(False, False, rows, n_out, n_in, z, px, n_in, pw, n_out, py,
                                  n_out, bm, bn, nt_g, pb, post)
            else:            # y = x W^T, W (out, in)
                rc = _gemm_blocks(False, True, rows, n_out, n_in, z, px, n_in, pw, n_in, py,
                                  n_out, bm, bn, nt_g, pb, post)
    if rc:
        _raise_gemm_nomem()


cdef inline bint _few_rows(cnp.ndarray x, bint w_in_out, Py_ssize_t rows, Py_ssize_t n_in,
                           Py_ssize_t n_out):
    """A float32 product of a few rows (below the own GEMM's 24) in the avx512 build:
    fnn_skinny.h's kernels read the weight once for all rows, where BLAS's small-M sgemm
    re-reads it ((8, 768) x (3072, 768)^T: 690-720 us on BLAS, 210-220 here; (8, 768) x
    (768, 3072): 560-570, 185 here)."""
    return (FNN_HAVE_SKINNY_OI != 0 and _sgz_on and 0 < rows < 24 and n_in > 0
            and n_out > 0 and x.dtype == np.float32)


# AVX2 builds (no AVX-512 tiles): the forward of up to _SK2_OI rows on an (out, in) weight,
# _SK2_IO on an (in, out) one, runs on skinny_linear's kernels (fnn_skinny.h's AVX2 dot
# rows; the row-axpy pass) -- BLAS's small-M sgemm re-reads the weight: 2 threads, Zen 3,
# (1, 768) x (3072, 768)^T 405 -> 108 us (torch 195); (in, out) at 768 -> 3072: 1 row
# 89 -> 84 us, 4 rows 518 -> 328, 6 rows 880 -> 519 (8 rows: BLAS 437, these 670).
# The (out, in) dot tiles of 4 x rows by 3 weight rows (fnn_dot_rows4x3_f32, a ragged
# last group padded with zero rows) took the (out, in) bound from 8 rows to 23 (the own
# GEMM's 24): (M, 768) x (3072, 768)^T, BLAS (M > 8) or the 4 x 1 dot tiles before ->
# now: 3 rows 236 -> 107 us, 8 rows 406 -> 237, 13 rows 689 -> 483, 16 rows 641 -> 459,
# 23 rows 1087 -> 643 (torch 633, 620, 798, 810, 1196).
# FASTNN_SGEMM=blas (or _use_few_rows_avx2(False)) keeps BLAS.
DEF _SK2_OI = 23
DEF _SK2_IO = 6
cdef bint _sk2_on = False


def _use_few_rows_avx2(on):
    """Route few-row float32 linear forwards to the AVX2 skinny kernels (True, where the
    build has them and not the AVX-512 tiles) or the GEMM; returns whether they are used."""
    global _sk2_on
    _sk2_on = bool(on) and FNN_SK_AVX2 != 0 and FNN_HAVE_SKINNY_OI == 0
    return _sk2_on


_use_few_rows_avx2(_own_sgemm_default())


cdef inline bint _few_rows_fwd(cnp.ndarray x, bint w_in_out, Py_ssize_t rows,
                               Py_ssize_t n_in, Py_ssize_t n_out):
    """_few_rows for the forward, but two rows on an (out, in) weight stay on BLAS: its
    two-row product streams the weight as fast or faster (3072 -> 768: 142 us against
    the dot tiles' 169, 2 threads).  AVX2 builds: the few rows above."""
    if _sk2_on:
        return (0 < rows <= (_SK2_IO if w_in_out else _SK2_OI) and n_in > 0 and n_out > 0
                and x.dtype == np.float32)
    return _few_rows(x, w_in_out, rows, n_in, n_out) and (w_in_out or rows != 2)


def _linear_route(x, weight):
    """Test hook: which kernel linear(x, weight, bias) runs -- "few_rows" (fnn_skinny.h's
    tiles) or "gemm" (the blocked GEMM: own kernel or BLAS)."""
    cdef cnp.ndarray xa = x, wa = weight
    return "few_rows" if _few_rows_fwd(xa, _weight_in_out(wa), _rows(xa), wa.shape[1],
                                       wa.shape[0]) else "gemm"


cdef int _few_rows_run(cnp.ndarray x, cnp.ndarray weight, bint w_in_out, object bias,
                       cnp.ndarray y, Py_ssize_t M, Py_ssize_t K, Py_ssize_t N) except -2:
    """y = x W^T + b for _few_rows: an (out, in) weight on fnn_skinny.h's dot tiles, an
    (in, out) one (GPT-2's Conv1D) on its row-strip tiles.  -> 0, or -1 when out of
    memory."""
    cdef const float* px
    cdef const float* pw
    cdef const float* pb
    cdef float* py
    if not w_in_out:
        return _skinny_run[float](<float>0, False, x, weight, bias, y, M, K, N)
    if _sk2_on:      # the weight's (in, out) memory: its transpose, C-contiguous
        return _skinny_run[float](<float>0, True, x, (<object>weight).T, bias, y, M, K, N)
    pb = <const float*>_ptr_or_null(bias, N, F32)
    px = <const float*>_data(x, M * K, F32)
    pw = <const float*>_data_strided(weight, F32)
    py = <float*>_data(y, M * N, F32)
    with nogil:
        _few_rows_io(px, K, M, K, pw, N, pb, py)
    return 0


cdef cnp.ndarray _linear(cnp.ndarray x, cnp.ndarray weight, object bias, _Post* post,
                         object post_out, object post_aux):
    """y = x W^T + b, then ``post`` on y (its out / aux arrays: post_out, post_aux, y's
    shape, C-contiguous): in each GEMM block's epilogue, or over all of y after the
    few-row kernels."""
    cdef Py_ssize_t n_in = weight.shape[1], n_out = weight.shape[0]
    cdef Py_ssize_t rows = _rows(x)
    cdef bint w_in_out = _weight_in_out(weight)
    shape = (<object>x).shape[:-1] + (n_out,)
    cdef cnp.ndarray y = np.empty(shape, dtype=x.dtype)
    cdef int T = F32 if x.dtype == np.float32 else F64
    if post != NULL:
        post.out = _ptr_or_null(post_out, rows * n_out, T)
        post.aux = _ptr_or_null(post_aux, rows * n_out, T)
    if _few_rows_fwd(x, w_in_out, rows, n_in, n_out):
        if _few_rows_run(x, weight, w_in_out, bias, y, rows, n_in, n_out):
            raise MemoryError("linear: out of memory for the packed input rows")
        if post != NULL:
            _post_all(post, y, rows, n_out)
        return y
    # The bias fill runs inside the GEMM's blocks, each block's on its own thread.
    cdef int bm, bn
    _split(rows, n_out, n_in, &bm, &bn)
    cdef int nmax = fnn_max_threads()
    cdef int nt_g = bm * bn if bm * bn < nmax else nmax
    if T == F32:
        _linear_run(<float>0, x, weight, w_in_out, bias, y, rows, n_in, n_out, bm, bn, nt_g,
                    post)
    else:
        _linear_run(<double>0, x, weight, w_in_out, bias, y, rows, n_in, n_out, bm, bn, nt_g,
                    post)
    return y


cdef void _post_all(const _Post* post, cnp.ndarray c, Py_ssize_t rows, Py_ssize_t n) except *:
    """``post`` over all of c (rows x n, C-contiguous) on this thread (after the few-row
    kernels, whose outputs are small)."""
    cdef int T = F32 if c.dtype == np.float32 else F64
    cdef void* pc = _data(c, rows * n, T)
    if T == F32:
        with nogil:
            _post_run(post, <float*>pc, n, 0, rows, 0, n)
    else:
        with nogil:
            _post_run(post, <double*>pc, n, 0, rows, 0, n)


def linear(cnp.ndarray x, cnp.ndarray weight, object bias):
    """linear(x, weight, bias) -> (y, saved).

    IN  x (..., in) C-contiguous; weight (out, in) C-contiguous, or the transpose of a
        C-contiguous (in, out) array (GPT-2's Conv1D layout, taken without a copy), same
        dtype; bias (out,) or None.   OUT y (..., out)."""
    return _linear(x, weight, bias, NULL, None, None), (x, weight, bias is not None)


cdef int _act_op(str activation, bint backward) except -1:
    """The fnn_activation.h kernel of a fused training activation ("gelu", "gelu_tanh")."""
    if activation == "gelu":
        return FNN_GELU_BWD if backward else FNN_GELU_FWD
    if activation == "gelu_tanh":
        return FNN_GELUT_BWD if backward else FNN_GELUT_FWD
    raise ValueError(f"activation must be 'gelu' or 'gelu_tanh', got {activation!r}")


def linear_act(cnp.ndarray x, cnp.ndarray weight, object bias, str activation):
    """linear_act(x, weight, bias, activation) -> (h, saved): h = act(x W^T + b), training.

    IN  as linear; activation "gelu" (erf) or "gelu_tanh".  OUT h (..., out).  saved: (x,
        weight, has_bias, u, activation), u = x W^T + b the activation's input.  Each
        GEMM block's activation runs in its epilogue (the block still in cache)."""
    cdef _Post post
    post.kind = _POST_ACT
    post.op = _act_op(activation, False)
    cdef cnp.ndarray h = np.empty((<object>x).shape[:-1] + (weight.shape[0],), dtype=x.dtype)
    u = _linear(x, weight, bias, &post, h, None)
    return h, (x, weight, bias is not None, u, activation)


def linear_residual(cnp.ndarray x, cnp.ndarray weight, object bias, cnp.ndarray residual):
    """linear_residual(x, weight, bias, residual) -> (y, saved): y = x W^T + b + residual.

    IN  as linear; residual C-contiguous, y's shape and dtype.  OUT y; saved: linear's (the
        residual's gradient is d_y itself: linear_backward serves).  The sum runs in each
        GEMM block's epilogue: the same bits as linear's y + residual."""
    cdef _Post post
    post.kind = _POST_ADD
    post.op = 0
    return (_linear(x, weight, bias, &post, None, residual),
            (x, weight, bias is not None))


cdef void _linear_bwd_run(real z, cnp.ndarray dy, cnp.ndarray x, cnp.ndarray w, bint w_in_out,
                          cnp.ndarray dx, object dw, object db, Py_ssize_t rows,
                          Py_ssize_t n_in, Py_ssize_t n_out, int bm_x, int bn_x,
                          int bm_w, int bn_w, int nt, const _Post* post) except *:
    cdef const real* pdy = _p(dy, rows * n_out, z)
    cdef const real* pw = _pw(w, w_in_out, z)
    cdef const real* px = _p(x, rows * n_in, z)
    cdef real* pdx = _p(dx, rows * n_in, z)
    cdef real* pdw = NULL if dw is None else _p(<cnp.ndarray>dw, n_out * n_in, z)
    cdef real* pdb = NULL if db is None else _p(<cnp.ndarray>db, n_out, z)
    cdef Py_ssize_t nch = (rows + _BIAS_CHUNK - 1) // _BIAS_CHUNK
    cdef double* part = NULL
    cdef int rc
    if pdb != NULL and nch > 0:
        part = <double*>_alloc(nch * n_out, sizeof(double))
    with _blas_guard(rows, n_out, n_in):
        with nogil:
            # d_bias: float64 partials of dy's row chunks in the same region, after the
            # GEMM blocks, to whichever thread is free (a pass on one thread after the
            # region left the other core idle: ~45 us of each GPT demo layer's ~650 us
            # backward); added up below in chunk order, the same bits as _col_sum
            if w_in_out:
                # dx = dy Wc^T; d_weight in the weight's own layout: dWc (in, out) = x^T dy
                rc = _gemm_blocks2(False, True, rows, n_in, n_out, pdy, n_out, pw, n_out, pdx,
                                   n_in, bm_x, bn_x,
                                   True, False, n_in, n_out, rows, px, n_in, pdy, n_out, pdw,
                                   n_out, bm_w, bn_w, nt, pdy, rows, n_out, part, post)
            else:
                # dx = dy W; dW (out, in) = dy^T x
                rc = _gemm_blocks2(False, False, rows, n_in, n_out, pdy, n_out, pw, n_in, pdx,
                                   n_in, bm_x, bn_x,
                                   True, False, n_out, n_in, rows, pdy, n_out, px, n_in, pdw,
                                   n_in, bm_w, bn_w, nt, pdy, rows, n_out, part, post)
    if rc:
        free(part)
        _raise_gemm_nomem()
    if pdb != NULL:
        with nogil:
            _col_sum_finish(part, nch, n_out, pdb)
        free(part)


cdef int _linear_bwd_few(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray w, bint w_in_out,
                         cnp.ndarray dx, object dw, object db, Py_ssize_t rows,
                         Py_ssize_t n_in, Py_ssize_t n_out, int bm_w, int bn_w) except -2:
    """linear_backward for _few_rows (float32, fewer than 24 rows).  d_input: dy W on the
    few-row row-strip tiles for Linear's (out, in) weight, dy Wc^T on the dot tiles
    (Wc's rows dotted with dy's) for GPT-2's (in, out) one.  d_weight, a product over the
    few rows (dy^T x, or x^T dy in GPT-2's layout), is written once by the outer-product
    tiles below 16 rows (the own GEMM's least depth), else on the GEMM blocks.  -> 0, or
    -1 when out of memory."""
    cdef const float* pdy = <const float*>_data(dy, rows * n_out, F32)
    cdef const float* pw = <const float*>_pw(w, w_in_out, <float>0)
    cdef const float* px = <const float*>_data(x, rows * n_in, F32)
    cdef float* pdx = <float*>_data(dx, rows * n_in, F32)
    cdef float* pdw = NULL if dw is None else <float*>_data(<cnp.ndarray>dw, n_out * n_in, F32)
    cdef float* pdb = NULL if db is None else <float*>_data(<cnp.ndarray>db, n_out, F32)
    cdef int nmax = fnn_max_threads(), rc = 0
    cdef Py_ssize_t nblk = (n_in + _SK_VB - 1) // _SK_VB
    cdef int nt = _threads_for(n_in * n_out, 1 << 16)
    with nogil:
        if w_in_out:
            rc = _skinny_oi_z(pdy, pw, NULL, pdx, rows, n_out, n_in, nblk,
                              nt if nt < nblk else <int>nblk)
        else:
            _few_rows_io(pdy, n_out, rows, n_out, pw, n_in, NULL, pdx)
    if rc:
        return -1
    if pdw == NULL:     # a frozen weight: no d_weight
        pass
    elif rows < 16:
        with nogil:
            if w_in_out:   # dWc (in, out) = x^T dy
                _few_k_outer(px, n_in, pdy, n_out, rows, pdw)
            else:          # dW (out, in) = dy^T x
                _few_k_outer(pdy, n_out, px, n_in, rows, pdw)
    else:
        nt = bm_w * bn_w if bm_w * bn_w < nmax else nmax
        with _blas_guard(n_out, n_in, rows):
            with nogil:
                if w_in_out:
                    rc = _gemm_blocks(True, False, n_in, n_out, rows, <float>0, px, n_in, pdy,
                                      n_out, pdw, n_out, bm_w, bn_w, nt)
                else:
                    rc = _gemm_blocks(True, False, n_out, n_in, rows, <float>0, pdy, n_out, px,
                                      n_in, pdw, n_in, bm_w, bn_w, nt)
        if rc:
            _raise_gemm_nomem()
    if pdb != NULL:
        with nogil:
            _col_sum(pdy, rows, n_out, pdb, 1, 256)
    return 0


def linear_backward(cnp.ndarray dy, tuple saved, bint weight_grad=True, bint bias_grad=True):
    """linear_backward(dy, saved, weight_grad=True, bias_grad=True) -> (d_input, d_weight,
    d_bias or None).  dy C-contiguous.  d_weight has the weight's layout: for a weight given
    as the transpose of an (in, out) array it is the transpose of a fresh C-contiguous (in,
    out) array.  ``weight_grad`` / ``bias_grad`` False: that gradient is not computed (a
    frozen parameter) and comes back None."""
    return _linear_backward(dy, saved, NULL, None, weight_grad, bias_grad)


def linear_backward_act(cnp.ndarray dy, tuple saved, cnp.ndarray u, str activation,
                        bint weight_grad=True, bint bias_grad=True):
    """linear_backward_act(dy, saved, u, activation, weight_grad=True, bias_grad=True) ->
    (d_u, d_weight, d_bias or None).

    linear_backward for a layer whose input was act(u) (linear_act's output; u its saved
    pre-activation, C-contiguous, the input's shape): d_input comes back multiplied by
    act'(u), the gradient of u -- in each d_input GEMM block's epilogue, so the
    activation's backward is no pass of its own."""
    cdef _Post post
    post.kind = _POST_GRAD
    post.op = _act_op(activation, True)
    return _linear_backward(dy, saved, &post, u, weight_grad, bias_grad)


cdef void _act_grad_run(int op, const real* dh, const real* u, real* du, Py_ssize_t n,
                        int nt) noexcept nogil:
    cdef double prm[3]
    cdef Py_ssize_t i0, i1
    cdef int t
    prm[0] = prm[1] = prm[2] = 0.0
    for t in prange(nt, schedule="static", num_threads=nt):
        i0 = ((n * t) // nt) & ~(<Py_ssize_t>15)
        i1 = n if t == nt - 1 else ((n * (t + 1)) // nt) & ~(<Py_ssize_t>15)
        if real is float:
            fnn_act_f(op, dh + i0, u + i0, du + i0, i1 - i0, prm)
        else:
            fnn_act_d(op, dh + i0, u + i0, du + i0, i1 - i0, prm)


cdef cnp.ndarray _act_grad(cnp.ndarray dh, cnp.ndarray u, int op):
    """dh * act'(u) (op: the activation's backward kernel) over fastnn's threads, in
    chunks of whole 16-element vectors (activation.pyx's split: the same bits)."""
    cdef cnp.ndarray du = np.empty_like(u)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(u)
    cdef int nt = _threads_for(n, 1 << 14)
    if n == 0:
        return du
    cdef int T = F32 if u.dtype == np.float32 else F64
    cdef const void* pdh = _data(dh, n, T)
    cdef const void* pu = _data(u, n, T)
    cdef void* pdu = _data(du, n, T)
    if T == F32:
        with nogil:
            _act_grad_run(op, <const float*>pdh, <const float*>pu, <float*>pdu, n, nt)
    else:
        with nogil:
            _act_grad_run(op, <const double*>pdh, <const double*>pu, <double*>pdu, n, nt)
    return du


def linear_act_backward(cnp.ndarray dh, tuple saved, bint weight_grad=True,
                        bint bias_grad=True):
    """linear_act_backward(dh, saved, weight_grad=True, bias_grad=True) -> (d_input,
    d_weight, d_bias or None): d_u = dh * act'(u), then linear_backward.  dh C-contiguous."""
    x, w, has_bias, u, activation = saved
    du = _act_grad(dh, u, _act_op(activation, True))
    return _linear_backward(du, (x, w, has_bias), NULL, None, weight_grad, bias_grad)


cdef inline void _bwd_split(Py_ssize_t rows, Py_ssize_t n_in, Py_ssize_t n_out, bint w_in_out,
                            bint need_w, int* bm_x, int* bn_x, int* bm_w, int* bn_w) noexcept nogil:
    """The backward's blocks: d_input's (rows x n_in over n_out), d_weight's in the weight's
    layout; none for a frozen weight (need_w False)."""
    _split(rows, n_in, n_out, bm_x, bn_x)
    bm_w[0] = 0
    bn_w[0] = 0
    if not need_w:
        return
    if w_in_out:
        _split(n_in, n_out, rows, bm_w, bn_w)
    else:
        _split(n_out, n_in, rows, bm_w, bn_w)


cdef inline int _bwd_team(int nb_x, int nb_w, int nmax) noexcept nogil:
    """Threads of the backward's region: both GEMMs' blocks share it; products that are
    each one block (small) stay on the calling thread.  A frozen weight has no d_weight
    blocks: d_input's own two or more still take a team."""
    cdef int nb = nb_x + nb_w
    if nb_x <= 1 and nb_w <= 1:
        return 1
    return nb if nb < nmax else nmax


def _linear_bwd_team(Py_ssize_t rows, Py_ssize_t n_in, Py_ssize_t n_out, bint w_in_out=False,
                     bint weight_grad=True):
    """Test hook: the threads linear_backward's GEMM region takes for this shape now."""
    cdef int bm_x, bn_x, bm_w, bn_w
    _bwd_split(rows, n_in, n_out, w_in_out, weight_grad, &bm_x, &bn_x, &bm_w, &bn_w)
    return _bwd_team(bm_x * bn_x, bm_w * bn_w, fnn_max_threads())


cdef tuple _linear_backward(cnp.ndarray dy, tuple saved, _Post* post, object post_aux,
                            bint need_w, bint need_b):
    cdef cnp.ndarray x = saved[0], w = saved[1]
    cdef bint has_bias = saved[2] and need_b
    cdef Py_ssize_t n_in = w.shape[1], n_out = w.shape[0]
    cdef Py_ssize_t rows = _rows(x)
    cdef bint w_in_out = _weight_in_out(w)
    if post != NULL:
        post.out = NULL
        post.aux = _ptr_or_null(post_aux, rows * n_in, F32 if x.dtype == np.float32 else F64)
    cdef cnp.ndarray dx = np.empty_like(x)
    cdef object dw = (np.empty((n_in, n_out) if w_in_out else (n_out, n_in), dtype=x.dtype)
                      if need_w else None)
    cdef cnp.ndarray db = np.empty(n_out, dtype=x.dtype) if has_bias else None
    cdef int bm_x, bn_x, bm_w, bn_w
    _bwd_split(rows, n_in, n_out, w_in_out, need_w, &bm_x, &bn_x, &bm_w, &bn_w)
    if _few_rows(x, w_in_out, rows, n_in, n_out):
        if _linear_bwd_few(dy, x, w, w_in_out, dx, dw, db, rows, n_in, n_out, bm_w, bn_w):
            raise MemoryError("linear_backward: out of memory for the packed rows")
        if post != NULL:
            _post_all(post, dx, rows, n_in)
        return dx, (dw.T if w_in_out and dw is not None else dw), db
    cdef int nt = _bwd_team(bm_x * bn_x, bm_w * bn_w, fnn_max_threads())
    if x.dtype == np.float32:
        _linear_bwd_run(<float>0, dy, x, w, w_in_out, dx, dw, db, rows, n_in, n_out,
                        bm_x, bn_x, bm_w, bn_w, nt, post)
    else:
        _linear_bwd_run(<double>0, dy, x, w, w_in_out, dx, dw, db, rows, n_in, n_out,
                        bm_x, bn_x, bm_w, bn_w, nt, post)
    return dx, (dw.T if w_in_out and dw is not None else dw), db


# ---------------------------------------------------------------- inference: x W^T + b, act
# The inference GEMM of the transformer models: the weight comes pre-transposed (in, out)
# C-contiguous, which single-threaded OpenBLAS runs ~1.3-1.7x faster than the (out, in)
# "T" form at the few-row shapes of short sequences (measured: 25 x 1152 x 384).  The
# bias is folded in (C starts as the bias, beta = 1) and the activation runs on each
# block of C right after its GEMM, while the block is still in cache, instead of as a
# separate pass over the whole output.  Blocks of C come from the shape alone (row blocks
# of 256 rows for tall C, else two or four column blocks of >= 128 columns), so the
# result does not depend on the thread count.

cdef inline void* _ptr_or_null(object a, Py_ssize_t n, int typenum) except? NULL:
    return NULL if a is None else _data(<cnp.ndarray>a, n, typenum)


cdef enum:
    _INFER_ROWS = 256
    _INFER_MIN_COLS = 128
    _INFER_MIN_MACS = 8388608


cdef int _linear_act_blocks(const real* x, const real* wt, const real* bias, real* y,
                            Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, int act, int bm,
                            int bn, int nt) noexcept nogil:
    """-> 0, or -1 when a block's GEMM could not get its work buffer."""
    cdef int blk, failed = 0
    cdef Py_ssize_t m0, m1, n0, n1, r
    cdef double p[3]
    p[0] = p[1] = p[2] = 0.0
    for blk in prange(bm * bn, schedule="static", num_threads=nt):
        m0 = (M * (blk // bn)) // bm
        m1 = (M * (blk // bn + 1)) // bm
        n0 = (N * (blk % bn)) // bn
        n1 = (N * (blk % bn + 1)) // bn
        if bias != NULL:
            for r in range(m0, m1):
                memcpy(&y[r * N + n0], &bias[n0], (n1 - n0) * sizeof(real))
        if gemm(False, False, <int>(m1 - m0), <int>(n1 - n0), <int>K, <real>1.0,
                x + m0 * K, <int>K, wt + n0, <int>N, <real>(1.0 if bias != NULL else 0.0),
                y + m0 * N + n0, <int>N):
            fnn_flag_set(&failed)
        if act >= 0:
            for r in range(m0, m1):
                if real is float:
                    fnn_act_f(act, y + r * N + n0, NULL, y + r * N + n0, n1 - n0, p)
                else:
                    fnn_act_d(act, y + r * N + n0, NULL, y + r * N + n0, n1 - n0, p)
    return -1 if failed else 0


cdef extern from "fnn_smallgemm.h" nogil:
    enum:
        FNN_SG_NR
        FNN_SG_POOL
    ctypedef void (*fnn_sg_job_fn)(void* arg, int chunk) noexcept nogil
    void fnn_sg_range_f32(const float* x, const float* xt_full, Py_ssize_t M, Py_ssize_t K,
                          const float* B, int packed, Py_ssize_t N, const float* bias,
                          float* y, Py_ssize_t p0, Py_ssize_t p1)
    void fnn_sg_transpose_f32(const float* x, Py_ssize_t M, Py_ssize_t K, float* xt)
    void fnn_sg_transpose_cols_f32(const float* x, Py_ssize_t M, Py_ssize_t K, Py_ssize_t k0,
                                   Py_ssize_t k1, float* xt)
    void fnn_sg_pool_run(fnn_sg_job_fn fn, void* arg, int nchunks, int nt)
    void fnn_pack_panels_f32(const float* w, Py_ssize_t N, Py_ssize_t K, int w_in_out,
                             float* out, Py_ssize_t p0, Py_ssize_t p1)


# Small-M GEMMs (fnn_smallgemm.h): up to this many rows the register-tile kernel reading
# the weight in place beats OpenBLAS, which packs both operands at every call.
_SG_MAX_ROWS = 64
# a second thread (half of the column panels each) from this many multiply-adds: below it a
# parallel region costs more than it saves once the two cores are shared (measured at load
# 13-20: batch-1 MiniLM 2x slower with 1M).  That is OpenMP's barrier waiting for a worker
# the OS has not scheduled; fnn_smallgemm.h's pool (Linux) never waits for one, so with it
# a product is shared out from _SG_POOL_MACS (~20 us on one core).
_SG_MIN_MACS = 1 << 24
_SG_POOL_MACS = 1 << 20
SMALL_GEMM_POOL = bool(FNN_SG_POOL)     # the pool is built in (Linux with OpenMP)
# The pool's entry point for the other families' short jobs (a sentence's attention heads):
# one pool per process, so that a job of another family never finds the cores taken by
# this pool's spinning worker.  attention.pyx takes it at import (fnn_sg_job_fn jobs).
SG_POOL_RUN = PyCapsule_New(<void*>fnn_sg_pool_run, b"fastnn.sg_pool_run", NULL) \
    if FNN_SG_POOL else None


cdef void _small_part(const float* x, const float* xt, const float* B, bint packed,
                      const float* bias, float* y, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K,
                      int act, Py_ssize_t p0, Py_ssize_t p1) noexcept nogil:
    """Columns of panels p0..p1 of y = act(x B + bias), every row (xt: NULL or x
    transposed by row blocks, fnn_sg_transpose_f32)."""
    cdef Py_ssize_t r, n0 = p0 * FNN_SG_NR, n1 = p1 * FNN_SG_NR
    cdef double p[3]
    p[0] = p[1] = p[2] = 0.0
    fnn_sg_range_f32(x, xt, M, K, B, packed, N, bias, y, p0, p1)
    if n1 > N:
        n1 = N
    if act >= 0 and n1 > n0:
        for r in range(M):
            fnn_act_f(act, y + r * N + n0, NULL, y + r * N + n0, n1 - n0, p)


cdef enum:
    _SG_MC = 96       # rows of x per block of a tall product (its k-chunk stays in L2)
    _SG_TR_POOL = 4096  # elements of x from which its transpose is shared out on the pool


ctypedef struct _SGJob:
    const float* x
    const float* xt
    const float* B
    bint packed
    const float* bias
    float* y
    Py_ssize_t M, N, K, P, bm, bn
    int act
    int ntr           # chunks of the pooled transpose of x (_tr_job_chunk)


cdef inline Py_ssize_t _guided(Py_ssize_t P, Py_ssize_t q, Py_ssize_t n) noexcept nogil:
    """First panel of range q of n when range i holds ~ (n - i) shares of P panels."""
    return P * (q * n - q * (q - 1) // 2) // (n * (n + 1) // 2)


cdef void _sg_job_chunk(void* arg, int c) noexcept nogil:
    """Chunk c of a pooled small GEMM: row block c // bn, panel range c % bn.  A single row
    block's ranges shrink (guided): they are claimed in order, so the last to finish is a
    small one and the other thread waits less at the end of every GEMM."""
    cdef _SGJob* j = <_SGJob*>arg
    cdef Py_ssize_t i = c // j.bn, q = c % j.bn
    cdef Py_ssize_t m0 = j.M * i // j.bm, m1 = j.M * (i + 1) // j.bm
    cdef Py_ssize_t p0, p1
    if j.bm == 1:
        p0 = _guided(j.P, q, j.bn)
        p1 = _guided(j.P, q + 1, j.bn)
    else:
        p0 = j.P * q // j.bn
        p1 = j.P * (q + 1) // j.bn
    _small_part(j.x + m0 * j.K, j.xt, j.B, j.packed, j.bias, j.y + m0 * j.N, m1 - m0, j.N,
                j.K, j.act, p0, p1)


cdef void _tr_job_chunk(void* arg, int c) noexcept nogil:
    """Chunk c of a pooled transpose of x (the job's M x K) into xt: a range of columns,
    whole 16-column blocks."""
    cdef _SGJob* j = <_SGJob*>arg
    cdef Py_ssize_t nb = (j.K + 15) // 16
    cdef Py_ssize_t k0 = 16 * (nb * c // j.ntr), k1 = 16 * (nb * (c + 1) // j.ntr)
    if k1 > j.K:
        k1 = j.K
    if k0 < k1:
        fnn_sg_transpose_cols_f32(j.x, j.M, j.K, k0, k1, <float*>j.xt)


cdef int _small_gemm(const float* x, const float* B, bint packed, const float* bias,
                     float* y, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, int act,
                     int nt) noexcept nogil:
    """y (M, N) = act(x B + bias) -> 0, or -1 when out of memory.  Row blocks of _SG_MC
    rows (from the shape alone); on one thread they run in turn.  With the pool: the row
    blocks, or when there are fewer than 2 nt, each one's panels in 2 nt ranges (4 nt for a
    single row block, which reads x transposed once for all), claimed by whichever thread
    is free; else (no pool) an OpenMP loop over the row
    blocks times 1 or 2 panel ranges -- two when there are fewer than four row blocks, so a
    short product still runs on two threads.  Each output is one tile's sum in k order:
    the same bits at any thread count."""
    cdef Py_ssize_t P = (N + FNN_SG_NR - 1) // FNN_SG_NR
    cdef Py_ssize_t bm = (M + _SG_MC - 1) // _SG_MC
    cdef Py_ssize_t bn = 2 if bm < 4 and P >= 2 else 1
    cdef Py_ssize_t i, m0, m1, q0, q1
    cdef _SGJob job
    cdef float* xt = NULL
    if nt > 1 and FNN_SG_POOL:
        # whole row blocks when there are enough of them (each chunk transposes its x),
        # as many as a multiple of the threads (1024 rows: 12 blocks of 85-86 rows, not 11
        # of 93-94, which left one thread a block behind the other on 2 threads: the
        # rows' tiles and k order do not change, nor do the bits);
        # one row block (x transposed once for all): 4 nt panel ranges, so that a worker
        # that starts late or is preempted holds back at most an eighth of the product
        # (two threads) while the caller runs the rest
        if bm >= 2 * nt:
            bn = 1
            bm = (bm + nt - 1) // nt * nt
        elif bm == 1:
            bn = 4 * nt if 4 * nt < P else P
        else:
            bn = 2 * nt if 2 * nt < P else P
        if bm == 1:
            xt = <float*>fnn_alloc(M * K, sizeof(float))
            if xt == NULL:
                return -1
        job.x = x
        job.xt = xt
        job.B = B
        job.packed = packed
        job.bias = bias
        job.y = y
        job.M = M
        job.N = N
        job.K = K
        job.P = P
        job.bm = bm
        job.bn = bn
        job.act = act
        if bm == 1:
            if M * K >= _SG_TR_POOL:
                # the transpose on the pool too (column ranges): the workers would only
                # wait for it (~4% of a sentence's time at batch 1 when the caller did it)
                job.ntr = 2 * nt
                fnn_sg_pool_run(_tr_job_chunk, &job, job.ntr, nt)
            else:
                fnn_sg_transpose_f32(x, M, K, xt)
        fnn_sg_pool_run(_sg_job_chunk, &job, <int>(bm * bn), nt)
        free(xt)
        return 0
    if nt > bm * bn:
        nt = <int>(bm * bn)
    if nt <= 1 and bm == 1 and packed:
        # one row block on one thread: x transposed once, so that the packed weight is
        # read as one stream (fnn_sg_panels_f32)
        xt = <float*>fnn_alloc(M * K, sizeof(float))
        if xt == NULL:
            return -1
        fnn_sg_transpose_f32(x, M, K, xt)
        _small_part(x, xt, B, packed, bias, y, M, N, K, act, 0, P)
        free(xt)
        return 0
    if nt <= 1:
        for i in range(bm):
            m0 = M * i // bm
            m1 = M * (i + 1) // bm
            _small_part(x + m0 * K, NULL, B, packed, bias, y + m0 * N, m1 - m0, N, K, act,
                        0, P)
        return 0
    for i in prange(bm * bn, schedule="static", num_threads=nt):
        m0 = M * (i // bn) // bm
        m1 = M * (i // bn + 1) // bm
        q0 = P * (i % bn) // bn
        q1 = P * (i % bn + 1) // bn
        _small_part(x + m0 * K, NULL, B, packed, bias, y + m0 * N, m1 - m0, N, K, act, q0,
                    q1)
    return 0


cdef inline int _small_threads(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K):
    cdef int nmax = fnn_max_threads()
    if M * N * K < (_SG_POOL_MACS if FNN_SG_POOL else _SG_MIN_MACS):
        return 1
    return nmax


cdef int _act_code(str activation) except -2:
    if activation == "none":
        return -1
    if activation == "relu":
        return FNN_RELU_FWD
    if activation == "gelu":
        return FNN_GELU_FWD
    if activation == "gelu_tanh":
        return FNN_GELUT_FWD
    raise ValueError(f"unknown activation {activation!r}")


cdef void _linear_act_run(real z, cnp.ndarray x, cnp.ndarray wt, object bias, cnp.ndarray y,
                          Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, int act, int bm, int bn,
                          int nt) except *:
    cdef const real* pb = NULL if bias is None else _p(<cnp.ndarray>bias, N, z)
    cdef const real* px = _p(x, M * K, z)
    cdef const real* pw = _p(wt, K * N, z)
    cdef real* py = _p(y, M * N, z)
    cdef int rc
    with _blas_guard(M, N, K):
        with nogil:
            rc = _linear_act_blocks(px, pw, pb, py, M, N, K, act, bm, bn, nt)
    if rc:
        _raise_gemm_nomem()


def linear_act_infer(cnp.ndarray x, cnp.ndarray weight_t, object bias, str activation):
    """linear_act_infer(x, weight_t, bias, activation) -> act(x weight_t + bias).

    IN  x (..., in) C-contiguous; weight_t (in, out) C-contiguous (the transposed
        Linear weight), same dtype; bias (out,) or None; activation "none", "relu",
        "gelu" (erf) or "gelu_tanh".  OUT y (..., out).  Inference-only."""
    cdef Py_ssize_t K = weight_t.shape[0], N = weight_t.shape[1]
    cdef Py_ssize_t M = _rows(x)
    cdef int act = _act_code(activation)
    cdef cnp.ndarray y = np.empty((<object>x).shape[:-1] + (N,), dtype=x.dtype)
    if M == 0 or N == 0:
        return y
    cdef void* pb
    cdef const float* px
    cdef const float* pw
    cdef float* py
    cdef int nt, rc
    if M <= _SG_MAX_ROWS and x.dtype == np.float32 and K > 0:
        nt = _small_threads(M, N, K)
        pb = _ptr_or_null(bias, N, F32)
        px = <const float*>_data(x, M * K, F32)
        pw = <const float*>_data(weight_t, K * N, F32)
        py = <float*>_data(y, M * N, F32)
        with nogil:
            rc = _small_gemm(px, pw, False, <const float*>pb, py, M, N, K, act, nt)
        if rc:
            raise MemoryError("linear_act_infer: out of memory for the transposed input")
        return y
    cdef int bm = 1, bn = 1
    if M * N * K > _SERIAL_MACS:
        bm = <int>((M + _INFER_ROWS - 1) // _INFER_ROWS)
        if bm < 2:
            # column blocks of >= 128 columns and >= _INFER_MIN_MACS multiply-adds: a
            # short GEMM (one sentence) gains less from a second thread than a parallel
            # region costs when the cores are shared (measured: batch-1 MiniLM 2.7x
            # slower on 2 threads than on 1 on a loaded 2-core machine)
            bn = <int>(N // _INFER_MIN_COLS)
            if bn > M * N * K // _INFER_MIN_MACS:
                bn = <int>(M * N * K // _INFER_MIN_MACS)
            bn = 4 if bn >= 4 else (2 if bn >= 2 else 1)
    cdef int nmax = fnn_max_threads()
    nt = bm * bn if bm * bn < nmax else nmax
    if x.dtype == np.float32:
        _linear_act_run(<float>0, x, weight_t, bias, y, M, N, K, act, bm, bn, nt)
    else:
        _linear_act_run(<double>0, x, weight_t, bias, y, M, N, K, act, bm, bn, nt)
    return y


# ---------------------------------------------------------------- few-row GEMMs (decoding)
# A decode step multiplies a few rows (one token per sequence) by every weight matrix, so
# its cost is streaming each weight from memory once.  OpenBLAS's small-M sgemm packs and
# re-reads the weight (its 8-row product ran at a quarter of its GEMV's bandwidth here), so
# these kernels read every weight element once for all rows.  Output columns are split in
# fixed blocks over the threads, each output is one thread's sum in a fixed order: results
# do not depend on the thread count.
cdef enum:
    _SK_VB = 64       # output columns per block, weight (out, in): the AVX-512 tiles
    _SK_VB3 = 66      # the same for _skinny_oi (a multiple of its 3-row weight tiles)


cdef void _skinny_io_rows(const real* x, const real* w, real* p, Py_ssize_t M, Py_ssize_t K,
                          Py_ssize_t N, Py_ssize_t k0, Py_ssize_t k1) noexcept nogil:
    """p (M, N) = x[:, k0:k1] w[k0:k1], w (K, N): weight rows k0..k1 stream in order (one
    contiguous run of memory), four at a time added to every output row (axpy form)."""
    cdef Py_ssize_t m, j, k = k0
    cdef real* pr
    cdef const real* w0
    cdef const real* w1
    cdef const real* w2
    cdef const real* w3
    cdef real x0, x1, x2, x3
    memset(p, 0, M * N * sizeof(real))
    while k + 4 <= k1:
        w0 = w + k * N
        w1 = w0 + N
        w2 = w1 + N
        w3 = w2 + N
        for m in range(M):
            x0 = x[m * K + k]
            x1 = x[m * K + k + 1]
            x2 = x[m * K + k + 2]
            x3 = x[m * K + k + 3]
            pr = p + m * N
            for j in range(N):
                pr[j] = pr[j] + (x0 * w0[j] + x1 * w1[j] + x2 * w2[j] + x3 * w3[j])
        k += 4
    while k < k1:
        w0 = w + k * N
        for m in range(M):
            x0 = x[m * K + k]
            pr = p + m * N
            for j in range(N):
                pr[j] = pr[j] + x0 * w0[j]
        k += 1


cdef extern from "fnn_skinny.h" nogil:
    void fnn_dot_rows_f32(const float* x, Py_ssize_t K, const float* w, int nr, float* out)
    void fnn_dot_rows4x3_f32(const float* x, Py_ssize_t K, const float* w, float* out)
    int FNN_HAVE_SKINNY_OI
    int FNN_SK_AVX2
    enum:
        FNN_SK_KB
    Py_ssize_t fnn_skinny_oi_scratch(Py_ssize_t M, Py_ssize_t K)
    int fnn_skinny_oi_pack(const float* x, Py_ssize_t M, Py_ssize_t K, float* xp)
    void fnn_skinny_oi_f32(const float* x, Py_ssize_t M, Py_ssize_t K, const float* w,
                           Py_ssize_t N, Py_ssize_t n0, Py_ssize_t n1, const float* bias,
                           float* y, float* xp, int xp_ready)
    void fnn_few_rows_io_f32(const float* A, Py_ssize_t lda, Py_ssize_t M, Py_ssize_t K,
                             const float* B, Py_ssize_t ldb, Py_ssize_t n0, Py_ssize_t n1,
                             const float* bias, float* C, Py_ssize_t ldc)
    void fnn_few_k_outer_f32(const float* A, Py_ssize_t lda, const float* B, Py_ssize_t ldb,
                             Py_ssize_t K, Py_ssize_t p0, Py_ssize_t p1, Py_ssize_t Q,
                             float* C, Py_ssize_t ldc)


cdef void _skinny_oi(const real* x, const real* w, const real* b, real* y, Py_ssize_t M,
                     Py_ssize_t K, Py_ssize_t N, Py_ssize_t n0, Py_ssize_t n1,
                     const float* xt) noexcept nogil:
    """y[:, n0:n1] = x w[n0:n1]^T + b, w (N, K): each weight row is dotted with the x rows
    while it is in L1.  float32 (fnn_skinny.h): three weight rows by four x rows at a time,
    the last weight rows one at a time by four x rows; the M % 4 last rows as a group of
    four from xt (those rows, then zero rows: _skinny_tail); a single row on its own form.
    Every output is the same sum (one 8-lane chain over k; a single row: its own two) whichever
    tile and thread computes it."""
    cdef Py_ssize_t n, m, k, j, nr, c, rem = M % 4, mf = M - M % 4
    cdef const real* wr
    cdef const real* xr
    cdef float out12[12]
    cdef real s, bn
    if real is float:
        if M == 1:      # one row: its own form (padded to four rows it cost more in L3)
            for n in range(n0, n1):
                fnn_dot_rows_f32(x, K, w + n * K, 1, out12)
                y[n] = out12[0] + (b[n] if b != NULL else 0)
            return
        n = n0
        while n + 3 <= n1:
            for m in range(0, mf, 4):
                fnn_dot_rows4x3_f32(x + m * K, K, w + n * K, out12)
                for k in range(4):
                    for c in range(3):
                        y[(m + k) * N + n + c] = out12[3 * k + c] + (b[n + c] if b != NULL else 0)
            if rem:
                fnn_dot_rows4x3_f32(xt, K, w + n * K, out12)
                for k in range(rem):
                    for c in range(3):
                        y[(mf + k) * N + n + c] = out12[3 * k + c] + (b[n + c] if b != NULL else 0)
            n += 3
        for n in range(n, n1):
            wr = w + n * K
            bn = b[n] if b != NULL else 0
            for m in range(0, mf, 4):
                fnn_dot_rows_f32(x + m * K, K, wr, 4, out12)
                for k in range(4):
                    y[(m + k) * N + n] = out12[k] + bn
            if rem:
                fnn_dot_rows_f32(xt, K, wr, 4, out12)
                for k in range(rem):
                    y[(mf + k) * N + n] = out12[k] + bn
        return
    for n in range(n0, n1):
        wr = w + n * K
        bn = b[n] if b != NULL else 0
        for m in range(M):
            xr = x + m * K
            s = 0
            for j in range(K):
                s = s + xr[j] * wr[j]
            y[m * N + n] = s + bn


cdef float* _skinny_tail(const float* x, Py_ssize_t M, Py_ssize_t K) noexcept nogil:
    """The M % 4 last rows of x (K floats each) then zero rows: a group of four for
    _skinny_oi (NULL when M is a multiple of 4 or 1 -- no group needed -- or out of
    memory)."""
    cdef Py_ssize_t rem = M % 4
    cdef float* xt
    if rem == 0 or M == 1:
        return NULL
    xt = <float*>fnn_alloc(4 * K, sizeof(float))
    if xt != NULL:
        memcpy(xt, x + (M - rem) * K, rem * K * sizeof(float))
        memset(xt + rem * K, 0, (4 - rem) * K * sizeof(float))
    return xt


cdef inline Py_ssize_t _bound(Py_ssize_t c, int nt, Py_ssize_t nblk, Py_ssize_t g,
                              Py_ssize_t n) noexcept nogil:
    """Start of range c of nt over n items in nblk whole blocks of g (capped at n)."""
    cdef Py_ssize_t v = g * (nblk * c // nt)
    return v if v < n else n


cdef int _skinny_oi_z(const float* x, const float* w, const float* b, float* y,
                      Py_ssize_t M, Py_ssize_t K, Py_ssize_t N, Py_ssize_t nblk,
                      int nt) noexcept nogil:
    """y = x w^T + b, w (N, K), on fnn_skinny.h's AVX-512 tiles: x packed once (when K fits
    one k block; else per thread), the _SK_VB-column blocks in nt contiguous ranges.
    -> 0, or -1 when out of memory."""
    cdef Py_ssize_t S = fnn_skinny_oi_scratch(M, K), c, n0, n1
    cdef int per = K > FNN_SK_KB          # more than one k block: a pack per thread
    cdef float* raw = <float*>fnn_alloc(S * (nt if per else 1) + 16, sizeof(float))
    cdef float* xs
    cdef int ready
    if raw == NULL:
        return -1
    xs = raw + (16 - (<uintptr_t>raw // sizeof(float)) % 16) % 16
    ready = fnn_skinny_oi_pack(x, M, K, xs)
    if nt <= 1:
        fnn_skinny_oi_f32(x, M, K, w, N, 0, N, b, y, xs, ready)
    else:
        for c in prange(nt, schedule="static", num_threads=nt):
            n0 = _bound(c, nt, nblk, _SK_VB, N)
            n1 = _bound(c + 1, nt, nblk, _SK_VB, N)
            fnn_skinny_oi_f32(x, M, K, w, N, n0, n1, b, y, xs + (0 if ready else c * S), ready)
    free(raw)
    return 0


cdef void _few_rows_io(const float* A, Py_ssize_t lda, Py_ssize_t M, Py_ssize_t K,
                       const float* B, Py_ssize_t N, const float* bias,
                       float* C) noexcept nogil:
    """C (M, N) = bias + A B, B (K, N) row-major, a few rows (fnn_few_rows_io_f32): the
    columns in nt ranges of whole 64-column chunks."""
    cdef Py_ssize_t nblk = (N + 63) // 64, c, n0, n1
    cdef int nt = _threads_for(N * K, 1 << 16)
    if nt > nblk:
        nt = <int>nblk
    if nt <= 1:
        fnn_few_rows_io_f32(A, lda, M, K, B, N, 0, N, bias, C, N)
        return
    for c in prange(nt, schedule="static", num_threads=nt):
        n0 = _bound(c, nt, nblk, 64, N)
        n1 = _bound(c + 1, nt, nblk, 64, N)
        fnn_few_rows_io_f32(A, lda, M, K, B, N, n0, n1, bias, C, N)


cdef void _few_k_outer(const float* A, Py_ssize_t P, const float* B, Py_ssize_t Q,
                       Py_ssize_t K, float* C) noexcept nogil:
    """C (P, Q) = A^T B for A (K, P), B (K, Q), K a few rows (fnn_few_k_outer_f32): C's
    rows in nt ranges of whole 4-row tiles."""
    cdef Py_ssize_t nblk = (P + 3) // 4, c, p0, p1
    cdef int nt = _threads_for(P * Q, 1 << 16)
    if nt > nblk:
        nt = <int>nblk
    if nt <= 1:
        fnn_few_k_outer_f32(A, P, B, Q, K, 0, P, Q, C, Q)
        return
    for c in prange(nt, schedule="static", num_threads=nt):
        p0 = _bound(c, nt, nblk, 4, P)
        p1 = _bound(c + 1, nt, nblk, 4, P)
        fnn_few_k_outer_f32(A, P, B, Q, K, p0, p1, Q, C, Q)


cdef enum:
    _SK_KC = 4        # weight (in, out): rows split in this many chunks, summed in order


cdef int _skinny(bint w_in_out, const real* x, const real* w, const real* b, real* y,
                 Py_ssize_t M, Py_ssize_t K, Py_ssize_t N) noexcept nogil:
    """-> 0, or -1 when out of memory.  weight (out, in): output columns in fixed blocks
    over the threads (float32 in the avx512 build: the dot tiles).  weight (in, out):
    float32 in the avx512 build, the row-strip tiles (column ranges over the threads,
    strips prefetched); else the weight's rows in _SK_KC fixed chunks, one contiguous
    stream each, into per-chunk partial outputs then summed in chunk order -- column
    blocks of a row-major (in, out) weight would read it in short strided pieces."""
    cdef Py_ssize_t nblk, i, j, m, n0, n1, c, MN = M * N
    cdef int nt = _threads_for(N * K, 1 << 16)
    cdef real* part
    cdef real s
    cdef float* xt = NULL
    if not w_in_out:
        nblk = (N + _SK_VB - 1) // _SK_VB
        if nt > nblk:
            nt = <int>nblk
        if real is float:
            if FNN_HAVE_SKINNY_OI:
                return _skinny_oi_z(x, w, b, y, M, K, N, nblk, nt)
        nblk = (N + _SK_VB3 - 1) // _SK_VB3
        if nt > nblk:
            nt = <int>nblk
        if real is float:
            xt = _skinny_tail(x, M, K)
            if xt == NULL and M % 4 and M > 1:
                return -1
        for i in prange(nblk, nogil=True, schedule="static", num_threads=nt):
            n0 = i * _SK_VB3
            n1 = n0 + _SK_VB3
            if n1 > N:
                n1 = N
            _skinny_oi(x, w, b, y, M, K, N, n0, n1, xt)
        free(xt)
        return 0
    if real is float:
        if FNN_HAVE_SKINNY_OI:      # the row-strip tiles (fnn_skinny.h): one pass
            _few_rows_io(x, K, M, K, w, N, b, y)
            return 0
    part = <real*>fnn_alloc(_SK_KC * MN, sizeof(real))
    if part == NULL:
        return -1
    if nt > _SK_KC:
        nt = _SK_KC
    for c in prange(_SK_KC, nogil=True, schedule="static", num_threads=nt):
        _skinny_io_rows(x, w, part + c * MN, M, K, N, c * K // _SK_KC, (c + 1) * K // _SK_KC)
    for i in range(MN):
        s = (part[i] + part[MN + i]) + (part[2 * MN + i] + part[3 * MN + i])
        y[i] = s + b[i % N] if b != NULL else s
    free(part)
    return 0


cdef int _skinny_run(real z, bint w_in_out, cnp.ndarray x, cnp.ndarray w, object bias, cnp.ndarray y,
                     Py_ssize_t M, Py_ssize_t K, Py_ssize_t N):
    cdef const real* pb = NULL if bias is None else _p(<cnp.ndarray>bias, N, z)
    cdef const real* px = _p(x, M * K, z)
    cdef const real* pw = _p(w, K * N, z)
    cdef real* py = _p(y, M * N, z)
    cdef int rc
    with nogil:
        rc = _skinny(w_in_out, px, pw, pb, py, M, K, N)
    return rc


def skinny_linear(cnp.ndarray x, cnp.ndarray weight, object bias, bint weight_in_out):
    """skinny_linear(x, weight, bias, weight_in_out) -> y: the few-row product of decoding.

    IN  x (M, in) C-contiguous; weight C-contiguous, same dtype: (in, out) when
        weight_in_out (GPT-2's Conv1D layout, y = x weight + bias), else (out, in) (Linear's
        and the tied LM head's, y = x weight^T + bias); bias (out,) C-contiguous or None.
    OUT y (M, out).  Inference only (nothing saved)."""
    cdef Py_ssize_t M = x.shape[0], K = x.shape[1]
    cdef Py_ssize_t N = weight.shape[1] if weight_in_out else weight.shape[0]
    cdef cnp.ndarray y = np.empty((M, N), dtype=x.dtype)
    if M == 0 or N == 0:
        return y
    cdef int rc
    if x.dtype == np.float32:
        rc = _skinny_run(<float>0, weight_in_out, x, weight, bias, y, M, K, N)
    else:
        rc = _skinny_run(<double>0, weight_in_out, x, weight, bias, y, M, K, N)
    if rc:
        raise MemoryError("skinny_linear: out of memory for the partial sums")
    return y


# ---------------------------------------------------------------- packed weights (inference)
def pack_linear_weight(cnp.ndarray weight, bint weight_in_out):
    """pack_linear_weight(weight, weight_in_out) -> packed (ceil(out / 16), in, 16).

    The weight's column panels as packed_linear_infer's kernel reads them: packed[p, k, j]
    = W(k, 16 p + j) (zero past out), W = weight when weight_in_out (weight (in, out)),
    else weight.T (weight (out, in), Linear's layout).  C-contiguous, weight's dtype."""
    cdef Py_ssize_t K = weight.shape[0] if weight_in_out else weight.shape[1]
    cdef Py_ssize_t N = weight.shape[1] if weight_in_out else weight.shape[0]
    cdef Py_ssize_t P = (N + FNN_SG_NR - 1) // FNN_SG_NR
    if weight.dtype != np.float32:
        w = weight if weight_in_out else weight.T
        out = np.zeros((P, K, FNN_SG_NR), weight.dtype)
        pad = np.zeros((K, P * FNN_SG_NR), weight.dtype)
        pad[:, :N] = w
        out[...] = pad.reshape(K, P, FNN_SG_NR).transpose(1, 0, 2)
        return out
    cdef cnp.ndarray o = np.empty((P, K, FNN_SG_NR), np.float32)
    cdef const float* pw = <const float*>_data(weight, N * K, F32)
    cdef float* po = <float*>_data(o, P * K * FNN_SG_NR, F32)
    with nogil:
        fnn_pack_panels_f32(pw, N, K, weight_in_out, po, 0, P)
    return o


def packed_linear_infer(cnp.ndarray x, cnp.ndarray packed, Py_ssize_t n_out, object bias,
                        str activation):
    """packed_linear_infer(x, packed, n_out, bias, activation) -> act(x W + bias) (..., n_out).

    IN  x (..., in) C-contiguous; packed (ceil(n_out / 16), in, 16) from pack_linear_weight,
        same dtype; bias (n_out,) or None; activation as linear_act_infer's.  Inference."""
    cdef Py_ssize_t K = packed.shape[1], N = n_out, P = packed.shape[0]
    if packed.ndim != 3 or packed.shape[2] != FNN_SG_NR or x.shape[x.ndim - 1] != K \
            or not (P - 1) * FNN_SG_NR < N <= P * FNN_SG_NR or x.dtype != packed.dtype:
        raise ValueError(f"packed_linear_infer: x {x.dtype} {(<object>x).shape} does not fit "
                         f"packed {packed.dtype} {(<object>packed).shape} with n_out={n_out}")
    if x.dtype != np.float32 or K == 0:     # float64: the BLAS path on the unpacked weight
        w = np.ascontiguousarray(packed.transpose(1, 0, 2).reshape(K, P * FNN_SG_NR)[:, :N])
        return linear_act_infer(x, w, bias, activation)
    cdef Py_ssize_t M = _rows(x)
    cdef int act = _act_code(activation)
    cdef cnp.ndarray y = np.empty((<object>x).shape[:-1] + (N,), dtype=x.dtype)
    if M == 0 or N == 0:
        return y
    cdef void* pb = _ptr_or_null(bias, N, F32)
    cdef const float* px = <const float*>_data(x, M * K, F32)
    cdef const float* pw = <const float*>_data(packed, P * K * FNN_SG_NR, F32)
    cdef float* py = <float*>_data(y, M * N, F32)
    cdef int nt = _small_threads(M, N, K), rc
    with nogil:
        rc = _small_gemm(px, pw, True, <const float*>pb, py, M, N, K, act, nt)
    if rc:
        raise MemoryError("packed_linear_infer: out of memory for the transposed input")
    return y
