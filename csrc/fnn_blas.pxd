# Row-major GEMM on scipy's BLAS (cython_blas: callable without the GIL).
from scipy.linalg.cython_blas cimport sgemm, dgemm

ctypedef fused real:
    float
    double


cdef inline void gemm(bint trans_a, bint trans_b, int M, int N, int K, real alpha,
                      const real* A, int lda, const real* B, int ldb,
                      real beta, real* C, int ldc) noexcept nogil:
    """Row-major ``C[M, N] = alpha * op(A) @ op(B) + beta * C``.

    op(A) is M x K (A stored (M, K), or (K, M) when trans_a); op(B) is K x N.
    A row-major matrix is the column-major transpose, so this calls
    ``gemm(op(B)^T, op(A)^T)`` to get C^T in column-major order."""
    cdef char tb = b'T' if trans_b else b'N'
    cdef char ta = b'T' if trans_a else b'N'
    if M <= 0 or N <= 0:
        return
    if K <= 0:
        # BLAS leaves C alone when K == 0 only if beta == 1; make it C = beta * C.
        _scale(M, N, beta, C, ldc)
        return
    if real is float:
        sgemm(&tb, &ta, &N, &M, &K, &alpha, <float*>B, &ldb, <float*>A, &lda, &beta, C, &ldc)
    else:
        dgemm(&tb, &ta, &N, &M, &K, &alpha, <double*>B, &ldb, <double*>A, &lda, &beta, C, &ldc)


cdef inline void _scale(int M, int N, real beta, real* C, int ldc) noexcept nogil:
    cdef int i, j
    for i in range(M):
        for j in range(N):
            C[i * ldc + j] = 0 if beta == 0 else C[i * ldc + j] * beta
