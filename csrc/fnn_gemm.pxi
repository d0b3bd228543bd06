# Included by families whose GEMMs should use the fastest BLAS in the process.
#
# NumPy's bundled OpenBLAS (ILP64, symbols scipy_sgemm_64_ / scipy_dgemm_64_) is a newer
# build than SciPy's and measured ~20% faster on fastnn's GEMM shapes (conv 64 x 576 x
# 3136 single-threaded: 82 vs 65 GFLOP/s), so ``gemm`` here calls it when it is loaded
# and falls back to SciPy's cython_blas (fnn_blas.gemm) otherwise.  Both libraries are
# under fastnn's thread control (fastnn._threads sets every BLAS in the process).
# The including module cimports: int64_t, uintptr_t (libc.stdint), and
# ``gemm as _scipy_gemm, real`` from fnn_blas.

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


cdef inline void gemm(bint trans_a, bint trans_b, int M, int N, int K, real alpha,
                      const real* A, int lda, const real* B, int ldb,
                      real beta, real* C, int ldc) noexcept nogil:
    """Row-major C[M, N] = alpha op(A) op(B) + beta C, as fnn_blas.gemm."""
    cdef char tb = b'T' if trans_b else b'N'
    cdef char ta = b'T' if trans_a else b'N'
    cdef int64_t m = N, n = M, k = K, la = ldb, lb = lda, lc = ldc
    if M <= 0 or N <= 0 or K <= 0:
        _scipy_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
        return
    if real is float:
        if _sgemm64 != NULL:
            _sgemm64(&tb, &ta, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc)
            return
    else:
        if _dgemm64 != NULL:
            _dgemm64(&tb, &ta, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc)
            return
    _scipy_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
