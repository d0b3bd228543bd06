/* Recurrent family (rnn.pyx): the team helpers, the fused pointwise cell passes and the
 * per-step GEMM on a pre-packed W_hh.  Plain C, static inline functions only.
 *
 * The cell passes are written once over a type in fnn_rnn_cell.h and instantiated here for
 * float (suffix _f: the branch-free sigmoid / tanh below) and double (suffix _d: libm). */
#ifndef FNN_RNN_H
#define FNN_RNN_H

#include <math.h>
#include "fnn_math.h"
#include "fnn_philox.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---------------------------------------------------------------- the team */
/* An orphaned barrier: binds to the team of the enclosing parallel region. */
static inline void fnn_rnn_barrier(void) {
#ifdef _OPENMP
    #pragma omp barrier
#endif
}

static inline int fnn_rnn_team(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

static inline int fnn_rnn_tid(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* ---------------------------------------------------------------- gate nonlinearities */
/* sigmoid from e = exp(-|x|) in (0, 1]: 1 / (1 + e) for x >= 0, e / (1 + e) below; the
   exponential never overflows, so the cheaper exp of a non-positive argument serves
   (fnn_math.h; below -87.3 it gives 0, so sigmoid(x < -87.3) = 0 instead of a
   subnormal).  NaN propagates. */
static inline float fnn_rnn_sigmoidf(float x) {
    float e = fnn_expf_nonpos(-fabsf(x));
    float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
}

/* tanh: Cephes' odd polynomial below 0.625 (no cancellation near 0), else
   (1 - e) / (1 + e), e = exp(-2|x|); selects only, so loops calling it vectorise. */
static inline float fnn_rnn_tanhf(float x) {
    float ax = fabsf(x);
    float e = fnn_expf_nonpos(-2.0f * ax);
    float big = (1.0f - e) / (1.0f + e);
    float z = x * x;
    float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * ax + ax;
    float r = ax < 0.625f ? p : big;
    return copysignf(r, x);
}

static inline double fnn_rnn_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ---------------------------------------------------------------- the cell passes */
#define FNN_RNN_T float
#define FNN_RNN_FN(name) name##_f
#define FNN_RNN_SIG fnn_rnn_sigmoidf
#define FNN_RNN_TANH fnn_rnn_tanhf
#include "fnn_rnn_cell.h"
#undef FNN_RNN_T
#undef FNN_RNN_FN
#undef FNN_RNN_SIG
#undef FNN_RNN_TANH

#define FNN_RNN_T double
#define FNN_RNN_FN(name) name##_d
#define FNN_RNN_SIG fnn_rnn_sigmoid
#define FNN_RNN_TANH tanh
#include "fnn_rnn_cell.h"
#undef FNN_RNN_T
#undef FNN_RNN_FN
#undef FNN_RNN_SIG
#undef FNN_RNN_TANH

/* ---------------------------------------------------------------- packed per-step GEMM */
/* The per-step recurrent GEMMs on a pre-packed W_hh (float32, AVX2+FMA builds).
   A BLAS call re-packs its operands on every call: for the per-step GEMMs (B x G*UB x H
   forward, B x UB x G*H backward) that is a full transposing copy of the thread's slice
   of W_hh per step, ~20% of the GEMM's time.  Here W_hh is packed ONCE per call into
   panels of 16 columns (panel p: K rows of 16 floats, zero-padded), and a 6 x 16 register
   tile (12 FMA accumulators) runs over it.  Every output element is the same k-ordered
   FMA chain whatever tile or thread computes it, so results do not depend on the thread
   count; C = acc ? C + A P : A P (the product first, as BLAS). */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FNN_RNN_PACKED 1

/* One tile of mr <= 6 rows by nc <= 16 columns over all K.  Always inlined with a
   constant mr (fnn_rnn_rows), so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void fnn_rnn_tile(
        int mr, Py_ssize_t K, const float* restrict A, Py_ssize_t lda,
        const float* restrict P, float* restrict C, Py_ssize_t ldc, int nc, int acc) {
    __m256 c0[6], c1[6];
    #pragma GCC unroll 6
    for (int r = 0; r < mr; ++r) { c0[r] = _mm256_setzero_ps(); c1[r] = c0[r]; }
    for (Py_ssize_t k = 0; k < K; ++k) {
        __m256 b0 = _mm256_loadu_ps(P + 16 * k), b1 = _mm256_loadu_ps(P + 16 * k + 8);
        #pragma GCC unroll 6
        for (int r = 0; r < mr; ++r) {
            __m256 a = _mm256_broadcast_ss(A + r * lda + k);
            c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
        }
    }
    #pragma GCC unroll 6
    for (int r = 0; r < mr; ++r) {
        float* cr = C + r * ldc;
        if (nc == 16) {
            if (acc) {
                c0[r] = _mm256_add_ps(_mm256_loadu_ps(cr), c0[r]);
                c1[r] = _mm256_add_ps(_mm256_loadu_ps(cr + 8), c1[r]);
            }
            _mm256_storeu_ps(cr, c0[r]);
            _mm256_storeu_ps(cr + 8, c1[r]);
        } else {
            float t[16];
            _mm256_storeu_ps(t, c0[r]);
            _mm256_storeu_ps(t + 8, c1[r]);
            for (int j = 0; j < nc; ++j) cr[j] = acc ? cr[j] + t[j] : t[j];
        }
    }
}

/* One tile of m <= 6 rows: the switch makes mr a constant in each inlined copy. */
static void fnn_rnn_rows(Py_ssize_t m, Py_ssize_t K, const float* A, Py_ssize_t lda,
                         const float* P, float* C, Py_ssize_t ldc, int nc, int acc) {
    switch (m) {
        case 6: fnn_rnn_tile(6, K, A, lda, P, C, ldc, nc, acc); break;
        case 5: fnn_rnn_tile(5, K, A, lda, P, C, ldc, nc, acc); break;
        case 4: fnn_rnn_tile(4, K, A, lda, P, C, ldc, nc, acc); break;
        case 3: fnn_rnn_tile(3, K, A, lda, P, C, ldc, nc, acc); break;
        case 2: fnn_rnn_tile(2, K, A, lda, P, C, ldc, nc, acc); break;
        case 1: fnn_rnn_tile(1, K, A, lda, P, C, ldc, nc, acc); break;
        default: break;
    }
}

/* C[M, N] (ldc) (+)= A[M, K] (lda) times the packed (K, N) operand P */
static void fnn_rnn_pgemm(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, const float* A,
                          Py_ssize_t lda, const float* P, float* C, Py_ssize_t ldc, int acc) {
    for (Py_ssize_t j = 0; j < N; j += 16) {
        int nc = N - j < 16 ? (int)(N - j) : 16;
        const float* pj = P + j * K;
        /* row tiles of 6; a remainder of 1 or 2 rows is merged with the last 6 into tiles
           of 4 and 4 / 4 and 3 (a 1- or 2-row tile has too few accumulators to hide the
           FMA latency) */
        Py_ssize_t r = 0, full = M / 6, rem = M % 6;
        if (full > 0 && (rem == 1 || rem == 2)) full -= 1;
        for (Py_ssize_t q = 0; q < full; ++q, r += 6)
            fnn_rnn_rows(6, K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc);
        if (M - r >= 7) {
            fnn_rnn_rows(4, K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc);
            r += 4;
        }
        fnn_rnn_rows(M - r, K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc);
    }
}
#else
#define FNN_RNN_PACKED 0
static void fnn_rnn_pgemm(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, const float* A,
                          Py_ssize_t lda, const float* P, float* C, Py_ssize_t ldc, int acc) {
    (void)M; (void)N; (void)K; (void)A; (void)lda; (void)P; (void)C; (void)ldc; (void)acc;
}
#endif

/* Pack the (N, K) operand whose element (j, k) is src[j * sj + k * sk] into panels of 16
   columns: P[(j / 16) * 16 * K + k * 16 + j % 16], zero beyond N. */
static inline void fnn_rnn_pack(const float* src, Py_ssize_t sj, Py_ssize_t sk, Py_ssize_t N,
                                Py_ssize_t K, float* P) {
    for (Py_ssize_t j0 = 0; j0 < N; j0 += 16) {
        float* pp = P + j0 * K;
        for (Py_ssize_t k = 0; k < K; ++k)
            for (Py_ssize_t jj = 0; jj < 16; ++jj)
                pp[k * 16 + jj] = j0 + jj < N ? src[(j0 + jj) * sj + k * sk] : 0.0f;
    }
}

#endif /* FNN_RNN_H */
