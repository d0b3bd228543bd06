# Included by families whose GEMMs should use the fastest BLAS in the process.
#
# NumPy's bundled OpenBLAS (ILP64, symbols scipy_sgemm_64_ / scipy_dgemm_64_) is a newer
# build than SciPy's and measured ~20% faster on fastnn's GEMM shapes (conv 64 x 576 x
# 3136 single-threaded: 82 vs 65 GFLOP/s), so ``gemm`` here calls it when it is loaded
# and falls back to SciPy's cython_blas (fnn_blas.gemm) otherwise.  Both libraries are
# under fastnn's thread control (fastnn._threads sets every BLAS in the process).
# The including module cimports: int64_t, uintptr_t (libc.stdint), and
# ``gemm as _scipy_gemm, real`` from fnn_blas.
#
# ``gemm`` returns 0, or -1 when a work buffer cannot be had (the own kernel's packing
# buffer, or room for BLAS's at a thread's first BLAS call: fnn_blas_guard.h): C is then
# untouched and the caller raises MemoryError (_raise_gemm_nomem; inside a parallel region
# after it, through its failure flag).  BLAS itself would end the process there.

ctypedef void (*sgemm64_t)(const char*, const char*, const int64_t*, const int64_t*,
                           const int64_t*, const float*, const float*, const int64_t*,
                           const float*, const int64_t*, const float*, float*,
                           const int64_t*) noexcept nogil
ctypedef void (*dgemm64_t)(const char*, const char*, const int64_t*, const int64_t*,
                           const int64_t*, const double*, const double*, const int64_t*,
                           const double*, const int64_t*, const double*, double*,
                           const int64_t*) noexcept nogil
cdef sgemm64_t _sgemm64 = NULL
cdef dgemm64_t _dgemm64 = NULL

cdef extern from "fnn_sgemm.h" nogil:
    int FNN_HAVE_SGZ
    int FNN_SGZ_NOMEM
    int FNN_SGZ_TRANS_A
    int fnn_sgemm_z_takes(int trans_a, Py_ssize_t K, Py_ssize_t lda)
    Py_ssize_t fnn_sgz_set_nc_max(Py_ssize_t n)
    Py_ssize_t fnn_sgz_nc_max()
    int fnn_sgemm_z(int trans_a, int trans_b, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K,
                    float alpha, const float* A, Py_ssize_t lda, const float* B, Py_ssize_t ldb,
                    float beta, float* C, Py_ssize_t ldc, const float* bias)

# float32 GEMMs of at least this size run fastnn's own kernel (fnn_sgemm.h): in the avx512
# build 5-20% faster than OpenBLAS's on one core of the machines measured; in the avx2 build
# (6 x 16 tiles) 0-7% faster on a Zen 3 core, a transposed A and deep products read from
# rows a multiple of 4 KiB apart left to BLAS (fnn_sgemm.h: fnn_sgemm_z_takes).
# FASTNN_SGEMM=blas (read at import) or _use_own_sgemm(False) keeps every GEMM on BLAS.
cdef bint _sgz_on = False


def _use_own_sgemm(on):
    """Route float32 GEMMs through fnn_sgemm.h (True, where the build has it) or BLAS;
    returns whether the own kernel is now in use."""
    global _sgz_on
    _sgz_on = bool(on) and FNN_HAVE_SGZ != 0
    return _sgz_on


def _own_sgemm_on():
    """Whether this module's float32 GEMMs run on fnn_sgemm.h now."""
    return bool(_sgz_on)


def _own_sgemm_takes_transposed_a():
    """Whether op(A) = A^T runs on the own kernel too (the avx512 build) rather than BLAS."""
    return bool(_sgz_on and FNN_SGZ_TRANS_A)


def _own_sgemm_takes(bint trans_a, Py_ssize_t K, Py_ssize_t lda):
    """Whether a float32 product of depth K with A's rows lda floats apart (A stored
    (K, M) when trans_a) runs on the own kernel now (else BLAS); tests."""
    return bool(_sgz_on and fnn_sgemm_z_takes(trans_a, K, lda))


def _own_sgemm_block_cols(Py_ssize_t n=-1):
    """_own_sgemm_block_cols(n=-1) -> columns.  The own kernel's widest column block in
    this module (512, or 768 where the L2 holds its packed block; fnn_sgemm.h).  n > 0 sets
    it (whole 32-column panels) and n == 0 restores the machine's default, returning the
    previous width (tests: both widths on any machine; the bits do not change).  Without
    the own kernel: 0."""
    if not FNN_HAVE_SGZ:
        return 0
    if n < 0:
        return fnn_sgz_nc_max()
    return fnn_sgz_set_nc_max(n)


def _own_sgemm_default():
    import os
    return os.environ.get("FASTNN_SGEMM", "").strip().lower() != "blas"


_use_own_sgemm(_own_sgemm_default())


def _load_numpy_blas():
    """Point this module's GEMMs at NumPy's ILP64 OpenBLAS if it is loaded; returns its path."""
    global _sgemm64, _dgemm64
    from fastnn._threads import numpy_gemm_symbols
    found = numpy_gemm_symbols()
    if found is None:
        return None
    _sgemm64 = <sgemm64_t><uintptr_t>found[0]
    _dgemm64 = <dgemm64_t><uintptr_t>found[1]
    return found[2]


def _use_scipy_blas():
    """Route this module's GEMMs through SciPy's cython_blas (tests compare the two)."""
    global _sgemm64, _dgemm64
    _sgemm64 = NULL
    _dgemm64 = NULL


BLAS_PATH = _load_numpy_blas()


from libc.stdlib cimport calloc as _blas_calloc, free as _blas_free

cdef extern from "fnn_blas_guard.h" nogil:
    int FNN_BLAS_NUMPY
    int FNN_BLAS_SCIPY
    int FNN_BLAS_WARM
    int fnn_blas_ready(int lib)
    void fnn_blas_set_ready(int lib)
    void fnn_blas_lock()
    void fnn_blas_unlock()
    int fnn_blas_room()


cdef int _blas_warm(int lib) noexcept nogil:
    """This thread's first BLAS call through library ``lib`` (fnn_blas_guard.h): check
    for room, then one GEMM that takes BLAS's work buffer; 0 when the thread is ready,
    -1 (BLAS not called) when there is no room."""
    cdef int64_t n = FNN_BLAS_WARM
    cdef float one = 1, zero = 0
    cdef char t = b'N'
    cdef float* s
    cdef int ok
    fnn_blas_lock()
    if not fnn_blas_ready(lib) and fnn_blas_room():
        s = <float*>_blas_calloc(3 * n * n, sizeof(float))
        if s != NULL:
            if lib == FNN_BLAS_NUMPY:
                _sgemm64(&t, &t, &n, &n, &n, &one, s, &n, s + n * n, &n, &zero,
                         s + 2 * n * n, &n)
            else:
                _scipy_gemm(False, False, <int>n, <int>n, <int>n, one, s, <int>n, s + n * n,
                            <int>n, zero, s + 2 * n * n, <int>n)
            _blas_free(s)
            fnn_blas_set_ready(lib)
    ok = fnn_blas_ready(lib)
    fnn_blas_unlock()
    return 0 if ok else -1


cdef inline int _raise_gemm_nomem() except -1 nogil:
    """MemoryError for a GEMM that could not get its work buffer (gemm returned -1)."""
    with gil:
        raise MemoryError("fastnn: out of memory for a GEMM's work buffer (fastnn's packing "
                          "buffer, or the BLAS library's per-thread buffer at a thread's "
                          "first BLAS call)")


cdef inline int gemm(bint trans_a, bint trans_b, int M, int N, int K, real alpha,
                     const real* A, int lda, const real* B, int ldb,
                     real beta, real* C, int ldc) noexcept nogil:
    """Row-major C[M, N] = alpha op(A) op(B) + beta C, as fnn_blas.gemm.  Returns 0, or
    -1 (C untouched) when a work buffer cannot be had: the caller raises MemoryError."""
    cdef char tb = b'T' if trans_b else b'N'
    cdef char ta = b'T' if trans_a else b'N'
    cdef int64_t m = N, n = M, k = K, la = ldb, lb = lda, lc = ldc
    cdef int lib, r
    if M <= 0 or N <= 0 or K <= 0:
        _scipy_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
        return 0
    if real is float:
        if _sgz_on and M >= 24 and N >= 32 and K >= 16:
            r = fnn_sgemm_z(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                            NULL)
            if r == 0:
                return 0
            if r == FNN_SGZ_NOMEM:
                return -1
        lib = FNN_BLAS_NUMPY if _sgemm64 != NULL else FNN_BLAS_SCIPY
    else:
        lib = FNN_BLAS_NUMPY if _dgemm64 != NULL else FNN_BLAS_SCIPY
    if not fnn_blas_ready(lib) and _blas_warm(lib) != 0:
        return -1
    if real is float:
        if _sgemm64 != NULL:
            _sgemm64(&tb, &ta, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc)
            return 0
    else:
        if _dgemm64 != NULL:
            _dgemm64(&tb, &ta, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc)
            return 0
    _scipy_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
    return 0


cdef inline bint gemm_bias(bint trans_a, bint trans_b, int M, int N, int K, const real* A,
                           int lda, const real* B, int ldb, const real* bias, real* C,
                           int ldc) noexcept nogil:
    """C = op(A) op(B) + bias (one value per column) on the own float32 kernel, the bias
    added in its first stores (no fill of C and no read of it) -> True; False (nothing
    done) where ``gemm`` would not run the own kernel: the caller fills C and runs gemm."""
    if real is float:
        if _sgz_on and M >= 24 and N >= 32 and K >= 16:
            return fnn_sgemm_z(trans_a, trans_b, M, N, K, 1, A, lda, B, ldb, 0, C, ldc,
                               bias) == 0
    return False


def _gemm_hook(bint trans_a, bint trans_b, alpha, a, b, beta, c):
    """Test hook: c = alpha op(a) op(b) + beta c in place through this module's ``gemm``
    (the own float32 kernel or BLAS, as routed now).  a, b, c: 2-D arrays of one float
    dtype whose rows are contiguous (row strides may exceed the row length)."""
    import numpy as _np
    cdef Py_ssize_t M = c.shape[0], N = c.shape[1]
    cdef Py_ssize_t K = a.shape[0] if trans_a else a.shape[1]
    for name, arr in (("a", a), ("b", b), ("c", c)):
        if arr.ndim != 2 or arr.dtype != c.dtype or arr.strides[1] != arr.itemsize:
            raise ValueError(f"{name}: a 2-D array of c's dtype with contiguous rows")
    if (a.shape[1] if trans_a else a.shape[0]) != M or (b.shape[1] if trans_b else b.shape[0]) != K \
            or (b.shape[0] if trans_b else b.shape[1]) != N:
        raise ValueError("shapes do not chain")
    cdef uintptr_t pa = a.ctypes.data, pb = b.ctypes.data, pc = c.ctypes.data
    cdef int lda = a.strides[0] // a.itemsize, ldb = b.strides[0] // b.itemsize
    cdef int ldc = c.strides[0] // c.itemsize
    if c.dtype == _np.float32:
        gemm(trans_a, trans_b, <int>M, <int>N, <int>K, <float>alpha, <const float*>pa, lda,
             <const float*>pb, ldb, <float>beta, <float*>pc, ldc)
    elif c.dtype == _np.float64:
        gemm(trans_a, trans_b, <int>M, <int>N, <int>K, <double>alpha, <const double*>pa, lda,
             <const double*>pb, ldb, <double>beta, <double*>pc, ldc)
    else:
        raise TypeError("float32 or float64")
