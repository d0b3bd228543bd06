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
   panels of 16 columns (panel p: K rows of 16 floats, zero-padded), and a register tile
   runs over it: 6 x 16 (12 FMA accumulators of 8 lanes) in AVX2 builds, 8 x 32 (16 of 16
   lanes, two panels at once) in AVX-512 builds.  Every output element is the same k-ordered
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

#if defined(__AVX512F__)
/* AVX-512 builds: a tile of mr <= 8 rows by two panels (32 columns, nc <= 32 of them
   kept), 16 zmm accumulators; per k two panel loads and mr broadcasts.  A core with two
   512-bit FMA units (Intel Xeon) runs it at about twice the AVX2 tile's rate (LSTM T64 B32
   256 fwd+bwd, 1 thread: 47 -> 39-40 ms); on one that splits 512-bit FMAs in two (Zen 4)
   the two tie (an 8 x 32 tile measured there in session 5).  Each output is the same
   k-ordered FMA chain as in the AVX2 tile: the same bits.  P2 is the second panel (unused
   when nc <= 16). */
static inline __attribute__((always_inline)) void fnn_rnn_ztile(
        int mr, Py_ssize_t K, const float* restrict A, Py_ssize_t lda,
        const float* restrict P, const float* restrict P2, float* restrict C, Py_ssize_t ldc,
        int nc, int acc) {
    __m512 c0[8], c1[8];
    #pragma GCC unroll 8
    for (int r = 0; r < mr; ++r) { c0[r] = _mm512_setzero_ps(); c1[r] = c0[r]; }
    if (nc > 16) {
        for (Py_ssize_t k = 0; k < K; ++k) {
            __m512 b0 = _mm512_loadu_ps(P + 16 * k), b1 = _mm512_loadu_ps(P2 + 16 * k);
            #pragma GCC unroll 8
            for (int r = 0; r < mr; ++r) {
                __m512 a = _mm512_set1_ps(A[r * lda + k]);
                c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
                c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
            }
        }
    } else {
        for (Py_ssize_t k = 0; k < K; ++k) {
            __m512 b0 = _mm512_loadu_ps(P + 16 * k);
            #pragma GCC unroll 8
            for (int r = 0; r < mr; ++r)
                c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[r * lda + k]), b0, c0[r]);
        }
    }
    __mmask16 m0 = nc >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nc) - 1u);
    __mmask16 m1 = nc >= 32 ? (__mmask16)0xFFFF
                 : nc > 16 ? (__mmask16)((1u << (nc - 16)) - 1u) : (__mmask16)0;
    if (nc >= 32) {     /* plain loads and stores (see fnn_sk_load in fnn_skinny.h) */
        #pragma GCC unroll 8
        for (int r = 0; r < mr; ++r) {
            float* cr = C + r * ldc;
            if (acc) {
                c0[r] = _mm512_add_ps(_mm512_loadu_ps(cr), c0[r]);
                c1[r] = _mm512_add_ps(_mm512_loadu_ps(cr + 16), c1[r]);
            }
            _mm512_storeu_ps(cr, c0[r]);
            _mm512_storeu_ps(cr + 16, c1[r]);
        }
        return;
    }
    #pragma GCC unroll 8
    for (int r = 0; r < mr; ++r) {
        float* cr = C + r * ldc;
        if (acc) {
            c0[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), c0[r]);
            c1[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), c1[r]);
        }
        _mm512_mask_storeu_ps(cr, m0, c0[r]);
        _mm512_mask_storeu_ps(cr + 16, m1, c1[r]);
    }
}

/* One tile of m <= 8 rows by nc <= 32 columns (panels P, P2): the switch makes mr a
   constant in each inlined copy. */
static void fnn_rnn_rows(Py_ssize_t m, Py_ssize_t K, const float* A, Py_ssize_t lda,
                         const float* P, const float* P2, float* C, Py_ssize_t ldc, int nc,
                         int acc) {
    switch (m) {
        case 8: fnn_rnn_ztile(8, K, A, lda, P, P2, C, ldc, nc, acc); break;
        case 7: fnn_rnn_ztile(7, K, A, lda, P, P2, C, ldc, nc, acc); break;
        case 6: fnn_rnn_ztile(6, K, A, lda, P, P2, C, ldc, nc, acc); break;
        case 5: fnn_rnn_ztile(5, K, A, lda, P, P2, C, ldc, nc, acc); break;
        case 4: fnn_rnn_ztile(4, K, A, lda, P, P2, C, ldc, nc, acc); break;
        case 3: fnn_rnn_ztile(3, K, A, lda, P, P2, C, ldc, nc, acc); break;
        case 2: fnn_rnn_ztile(2, K, A, lda, P, P2, C, ldc, nc, acc); break;
        case 1: fnn_rnn_ztile(1, K, A, lda, P, P2, C, ldc, nc, acc); break;
        default: break;
    }
}
#define FNN_RNN_TILE_COLS 32
#define FNN_RNN_TILE_ROWS 8
#else
/* One tile of m <= 6 rows by nc <= 16 columns (panel P; P2 unused): the switch makes mr a
   constant in each inlined copy. */
static void fnn_rnn_rows(Py_ssize_t m, Py_ssize_t K, const float* A, Py_ssize_t lda,
                         const float* P, const float* P2, float* C, Py_ssize_t ldc, int nc,
                         int acc) {
    (void)P2;
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
#define FNN_RNN_TILE_COLS 16
#define FNN_RNN_TILE_ROWS 6
#endif

/* C[M, N] (ldc) (+)= A[M, K] (lda) times the packed (K, N) operand P */
static void fnn_rnn_pgemm(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, const float* A,
                          Py_ssize_t lda, const float* P, float* C, Py_ssize_t ldc, int acc) {
    for (Py_ssize_t j = 0; j < N; j += FNN_RNN_TILE_COLS) {
        int nc = N - j < FNN_RNN_TILE_COLS ? (int)(N - j) : FNN_RNN_TILE_COLS;
        const float* pj = P + j * K;
        const float* pj2 = pj + 16 * K;   /* the next panel (read only when nc > 16) */
        /* row tiles of MR (8 with AVX-512, else 6); a remainder below MR / 2 is merged
           with the last full tile into two near-halves (MR 6: 4 + 3 or 4 + 4; MR 8: 5 + 4
           ... 6 + 5): a 1- or 2-row tile has too few accumulators to hide the FMA
           latency */
        const Py_ssize_t MR = FNN_RNN_TILE_ROWS;
        Py_ssize_t r = 0, full = M / MR, rem = M % MR;
        if (full > 0 && rem > 0 && 2 * rem < MR) full -= 1;
        for (Py_ssize_t q = 0; q < full; ++q, r += MR)
            fnn_rnn_rows(MR, K, A + r * lda, lda, pj, pj2, C + r * ldc + j, ldc, nc, acc);
        if (M - r > MR) {
            Py_ssize_t h = (M - r + 1) / 2;
            fnn_rnn_rows(h, K, A + r * lda, lda, pj, pj2, C + r * ldc + j, ldc, nc, acc);
            r += h;
        }
        fnn_rnn_rows(M - r, K, A + r * lda, lda, pj, pj2, C + r * ldc + j, ldc, nc, acc);
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
