# Recurrent family: stacked, (bi)directional RNN (tanh / relu), GRU and LSTM with BPTT.
#
# One op runs a whole stack (see fastnn/reference/rnn.py for the interface).  Per layer:
#   forward   one GEMM per direction projects the WHOLE sequence (X W_ih^T) into the gate
#             buffer; then per time step one GEMM adds h_{t-1} W_hh^T and ONE fused
#             pointwise pass adds the biases, applies the gates, the cell update and the nonlinearity,
#             overwriting the pre-activations with the activations backward needs.
#   backward  per time step (reversed) ONE fused pointwise pass turns dh (and dc) into the
#             pre-activation gradients dG_t, then one GEMM gives dh_{t-1} = dG_t W_hh; the
#             weight gradients are whole-sequence GEMMs at the end (dW_ih = dG^T X,
#             dW_hh = dG^T H_prev, dX = dG W_ih), never per step.
# Saved per layer: the activated gates (T, B, D*G*H), the outputs, and for LSTM the cell
# states (GRU: W_hn h + b_hn); tanh(c_t) and the RNN derivative are recomputed.
#
# Threads: the time loop of a layer runs in ONE OpenMP team for the whole sequence.  The
# team is split between the directions (a bidirectional layer runs both at once); inside a
# direction each thread owns a fixed slice of hidden units: it computes the GEMM columns of
# its units' gates (BLAS single-threaded), then their pointwise update, then waits at one
# barrier per step.  Every output element is computed the same way whatever the split, so
# results do not depend on the thread count.  Bias gradients are column sums over fixed
# row chunks in double, added in order.
cimport cython
cimport numpy as cnp
from cython.parallel cimport parallel, prange
from libc.math cimport exp, tanh
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free
from libc.string cimport memset

from fnn_blas cimport gemm as _scipy_gemm, real

import numpy as np

from fastnn._threads import single_threaded_blas

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_gemm.pxi"
include "fnn_colsum.pxi"

OPS = ("rnn", "rnn_backward", "gru", "gru_backward", "lstm", "lstm_backward")

cdef extern from *:
    """
    #include "fnn_math.h"
    #include "fnn_philox.h"
    #ifdef _OPENMP
    #include <omp.h>
    #endif
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

    /* The fused pointwise passes, on one block of n hidden units of one batch row.
       Gate k of local unit l is at [k*n + l]; per-unit pointers are offset to the block.
       Distinct buffers (restrict) so the loops vectorise. */
    #define FNN_RNN_ROWS(T, S, SIG, TANH)                                                   \
    static inline void fnn_lstm_fwd_##S(const T* restrict g, const T* restrict bi,          \
            T* restrict a, const T* restrict cp, T* restrict c_out, T* restrict h_out,      \
            Py_ssize_t n) {                                                                 \
        for (Py_ssize_t l = 0; l < n; ++l) {                                                \
            T i = SIG(g[l] + bi[l]), f = SIG(g[n + l] + bi[n + l]);                         \
            T gg = TANH(g[2 * n + l] + bi[2 * n + l]), o = SIG(g[3 * n + l] + bi[3 * n + l]); \
            T c = f * cp[l] + i * gg;                                                       \
            a[l] = i; a[n + l] = f; a[2 * n + l] = gg; a[3 * n + l] = o;                    \
            c_out[l] = c;                                                                   \
            h_out[l] = o * TANH(c);                                                         \
        }                                                                                   \
    }                                                                                       \
    static inline void fnn_gru_fwd_##S(const T* restrict g, const T* restrict bi,            \
            const T* restrict gh, const T* restrict b_hn, const T* restrict hp, T* restrict a, \
            T* restrict hn_out, T* restrict h_out, Py_ssize_t n) {                          \
        for (Py_ssize_t l = 0; l < n; ++l) {                                                \
            T r = SIG(g[l] + bi[l] + gh[l]), z = SIG(g[n + l] + bi[n + l] + gh[n + l]);      \
            T hn = gh[2 * n + l] + b_hn[l];                                                 \
            T nn = TANH(g[2 * n + l] + bi[2 * n + l] + r * hn);                             \
            a[l] = r; a[n + l] = z; a[2 * n + l] = nn;                                      \
            hn_out[l] = hn;                                                                 \
            h_out[l] = (1 - z) * nn + z * hp[l];                                            \
        }                                                                                   \
    }                                                                                       \
    static inline void fnn_rnn_fwd_##S(const T* restrict g, const T* restrict bi,           \
            T* restrict h_out, int relu, Py_ssize_t n) {                                    \
        if (relu) {                                                                         \
            for (Py_ssize_t l = 0; l < n; ++l) {                                            \
                T v = g[l] + bi[l];                                                         \
                h_out[l] = v < 0 ? (T)0 : v;                                                \
            }                                                                               \
        } else {                                                                            \
            for (Py_ssize_t l = 0; l < n; ++l) h_out[l] = TANH(g[l] + bi[l]);               \
        }                                                                                   \
    }                                                                                       \
    static inline void fnn_lstm_bwd_##S(const T* restrict a, const T* restrict c,           \
            const T* restrict cp, const T* restrict dy, const T* restrict dh,               \
            T* restrict dc, T* restrict dg, Py_ssize_t n) {                                 \
        for (Py_ssize_t l = 0; l < n; ++l) {                                                \
            T i = a[l], f = a[n + l], gg = a[2 * n + l], o = a[3 * n + l];                  \
            T tc = TANH(c[l]);                                                              \
            T dht = dy[l] + dh[l];                                                          \
            T dct = dc[l] + dht * o * (1 - tc * tc);                                        \
            dg[l] = dct * gg * i * (1 - i);                                                 \
            dg[n + l] = dct * cp[l] * f * (1 - f);                                          \
            dg[2 * n + l] = dct * i * (1 - gg * gg);                                        \
            dg[3 * n + l] = dht * tc * o * (1 - o);                                         \
            dc[l] = dct * f;                                                                \
        }                                                                                   \
    }                                                                                       \
    /* dh: in the recurrent gradient, out the direct part dh_t * z (the GEMM adds the rest) */ \
    static inline void fnn_gru_bwd_##S(const T* restrict a, const T* restrict hn,           \
            const T* restrict hp, const T* restrict dy, T* restrict dh, T* restrict dg,     \
            T* restrict dgh, Py_ssize_t n) {                                                \
        for (Py_ssize_t l = 0; l < n; ++l) {                                                \
            T r = a[l], z = a[n + l], nn = a[2 * n + l];                                    \
            T dht = dy[l] + dh[l];                                                          \
            T dan = dht * (1 - z) * (1 - nn * nn);                                          \
            T dar = dan * hn[l] * r * (1 - r);                                              \
            T daz = dht * (hp[l] - nn) * z * (1 - z);                                       \
            dg[l] = dar; dg[n + l] = daz; dg[2 * n + l] = dan;                              \
            dgh[l] = dar; dgh[n + l] = daz; dgh[2 * n + l] = dan * r;                       \
            dh[l] = dht * z;                                                                \
        }                                                                                   \
    }                                                                                       \
    static inline void fnn_rnn_bwd_##S(const T* restrict h, const T* restrict dy,           \
            const T* restrict dh, T* restrict dg, int relu, Py_ssize_t n) {                 \
        if (relu) {                                                                         \
            for (Py_ssize_t l = 0; l < n; ++l) dg[l] = h[l] > 0 ? dy[l] + dh[l] : (T)0;      \
        } else {                                                                            \
            for (Py_ssize_t l = 0; l < n; ++l) dg[l] = (dy[l] + dh[l]) * (1 - h[l] * h[l]);  \
        }                                                                                   \
    }
    FNN_RNN_ROWS(float, f, fnn_rnn_sigmoidf, fnn_rnn_tanhf)
    FNN_RNN_ROWS(double, d, fnn_rnn_sigmoid, tanh)

    /* The per-step recurrent GEMMs on a pre-packed W_hh (float32, AVX2+FMA builds).
       A BLAS call re-packs its operands on every call: for the per-step GEMMs (B x G*UB x H
       forward, B x UB x G*H backward) that is a full transposing copy of the thread's
       slice of W_hh per step, ~20% of the GEMM's time.  Here W_hh is packed ONCE per call
       into panels of 16 columns (panel p: K rows of 16 floats, zero-padded), and a 6 x 16
       register tile (12 FMA accumulators) runs over it.  Every output element is the same
       k-ordered FMA chain whatever tile or thread computes it, so results do not depend on
       the thread count; C = acc ? C + A P : A P (the product first, as BLAS). */
    #if defined(__AVX2__) && defined(__FMA__)
    #include <immintrin.h>
    #define FNN_RNN_PACKED 1
    #define FNN_RNN_MK(MR)                                                                   \
    static inline void fnn_rnn_mk##MR(Py_ssize_t K, const float* restrict A, Py_ssize_t lda,  \
            const float* restrict P, float* restrict C, Py_ssize_t ldc, int nc, int acc) {    \
        __m256 c0[MR], c1[MR];                                                              \
        _Pragma("GCC unroll 8")                                                             \
        for (int r = 0; r < MR; ++r) { c0[r] = _mm256_setzero_ps(); c1[r] = c0[r]; }        \
        for (Py_ssize_t k = 0; k < K; ++k) {                                                \
            __m256 b0 = _mm256_loadu_ps(P + 16 * k), b1 = _mm256_loadu_ps(P + 16 * k + 8);  \
            _Pragma("GCC unroll 8")                                                         \
            for (int r = 0; r < MR; ++r) {                                                  \
                __m256 a = _mm256_broadcast_ss(A + r * lda + k);                            \
                c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);                                      \
                c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);                                      \
            }                                                                               \
        }                                                                                   \
        _Pragma("GCC unroll 8")                                                             \
        for (int r = 0; r < MR; ++r) {                                                      \
            float* cr = C + r * ldc;                                                        \
            if (nc == 16) {                                                                 \
                if (acc) {                                                                  \
                    c0[r] = _mm256_add_ps(_mm256_loadu_ps(cr), c0[r]);                      \
                    c1[r] = _mm256_add_ps(_mm256_loadu_ps(cr + 8), c1[r]);                  \
                }                                                                           \
                _mm256_storeu_ps(cr, c0[r]);                                                \
                _mm256_storeu_ps(cr + 8, c1[r]);                                            \
            } else {                                                                        \
                float t[16];                                                                \
                _mm256_storeu_ps(t, c0[r]);                                                 \
                _mm256_storeu_ps(t + 8, c1[r]);                                             \
                for (int j = 0; j < nc; ++j) cr[j] = acc ? cr[j] + t[j] : t[j];             \
            }                                                                               \
        }                                                                                   \
    }
    FNN_RNN_MK(1) FNN_RNN_MK(2) FNN_RNN_MK(3) FNN_RNN_MK(4) FNN_RNN_MK(5) FNN_RNN_MK(6)
    /* C[M, N] (ldc) (+)= A[M, K] (lda) times the packed (K, N) operand P */
    static void fnn_rnn_pgemm(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, const float* A,
            Py_ssize_t lda, const float* P, float* C, Py_ssize_t ldc, int acc) {
        for (Py_ssize_t j = 0; j < N; j += 16) {
            int nc = N - j < 16 ? (int)(N - j) : 16;
            const float* pj = P + j * K;
            /* row tiles of 6; a remainder of 1 or 2 rows is merged with the last 6 into
               tiles of 4 and 4 / 4 and 3 (a 1- or 2-row tile has too few accumulators to
               hide the FMA latency) */
            Py_ssize_t r = 0, full = M / 6, rem = M % 6;
            if (full > 0 && (rem == 1 || rem == 2)) full -= 1;
            for (Py_ssize_t q = 0; q < full; ++q, r += 6)
                fnn_rnn_mk6(K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc);
            if (M - r >= 7) {
                fnn_rnn_mk4(K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc);
                r += 4;
            }
            switch (M - r) {
                case 5: fnn_rnn_mk5(K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc); break;
                case 4: fnn_rnn_mk4(K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc); break;
                case 3: fnn_rnn_mk3(K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc); break;
                case 2: fnn_rnn_mk2(K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc); break;
                case 1: fnn_rnn_mk1(K, A + r * lda, lda, pj, C + r * ldc + j, ldc, nc, acc); break;
                default: break;
            }
        }
    }
    #else
    #define FNN_RNN_PACKED 0
    static void fnn_rnn_pgemm(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, const float* A,
            Py_ssize_t lda, const float* P, float* C, Py_ssize_t ldc, int acc) { }
    #endif
    /* Pack the (N, K) operand whose element (j, k) is src[j * sj + k * sk] into panels of
       16 columns: P[(j / 16) * 16 * K + k * 16 + j % 16], zero beyond N. */
    static void fnn_rnn_pack(const float* src, Py_ssize_t sj, Py_ssize_t sk, Py_ssize_t N,
            Py_ssize_t K, float* P) {
        for (Py_ssize_t j0 = 0; j0 < N; j0 += 16) {
            float* pp = P + j0 * K;
            for (Py_ssize_t k = 0; k < K; ++k)
                for (Py_ssize_t jj = 0; jj < 16; ++jj)
                    pp[k * 16 + jj] = j0 + jj < N ? src[(j0 + jj) * sj + k * sk] : 0.0f;
        }
    }
    """
    void fnn_rnn_barrier() noexcept nogil
    int fnn_rnn_team() noexcept nogil
    int fnn_rnn_tid() noexcept nogil
    float fnn_rnn_sigmoidf(float) noexcept nogil
    float fnn_rnn_tanhf(float) noexcept nogil
    void fnn_lstm_fwd_f(const float*, const float*, float*, const float*, float*, float*,
                        Py_ssize_t) noexcept nogil
    void fnn_lstm_fwd_d(const double*, const double*, double*, const double*, double*, double*,
                        Py_ssize_t) noexcept nogil
    void fnn_gru_fwd_f(const float*, const float*, const float*, const float*, const float*,
                       float*, float*, float*, Py_ssize_t) noexcept nogil
    void fnn_gru_fwd_d(const double*, const double*, const double*, const double*, const double*,
                       double*, double*, double*, Py_ssize_t) noexcept nogil
    void fnn_rnn_fwd_f(const float*, const float*, float*, int, Py_ssize_t) noexcept nogil
    void fnn_rnn_fwd_d(const double*, const double*, double*, int, Py_ssize_t) noexcept nogil
    void fnn_lstm_bwd_f(const float*, const float*, const float*, const float*, const float*,
                        float*, float*, Py_ssize_t) noexcept nogil
    void fnn_lstm_bwd_d(const double*, const double*, const double*, const double*,
                        const double*, double*, double*, Py_ssize_t) noexcept nogil
    void fnn_gru_bwd_f(const float*, const float*, const float*, const float*, float*, float*,
                       float*, Py_ssize_t) noexcept nogil
    void fnn_gru_bwd_d(const double*, const double*, const double*, const double*, double*,
                       double*, double*, Py_ssize_t) noexcept nogil
    void fnn_rnn_bwd_f(const float*, const float*, const float*, float*, int, Py_ssize_t) noexcept nogil
    void fnn_rnn_bwd_d(const double*, const double*, const double*, double*, int, Py_ssize_t) noexcept nogil
    ctypedef struct fnn_philox_out:
        uint32_t v[4]
    fnn_philox_out fnn_philox4x32(uint64_t block, uint64_t offset, uint64_t seed) noexcept nogil
    int FNN_RNN_PACKED
    void fnn_rnn_pgemm(Py_ssize_t, Py_ssize_t, Py_ssize_t, const float*, Py_ssize_t, const float*,
                       float*, Py_ssize_t, int) noexcept nogil
    void fnn_rnn_pack(const float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, float*) noexcept nogil

cdef enum:
    RNN_TANH = 0
    RNN_RELU = 1
    GRU = 2
    LSTM = 3


# ------------------------------------------------------------------ pointwise rows
# (the C kernels above; these pick the float or double one)
cdef inline void _lstm_fwd_row(const real* g, const real* bi, real* a, const real* cp,
                               real* c_out, real* h_out, Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_lstm_fwd_f(g, bi, a, cp, c_out, h_out, n)
    else:
        fnn_lstm_fwd_d(g, bi, a, cp, c_out, h_out, n)


cdef inline void _gru_fwd_row(const real* g, const real* bi, const real* gh, const real* b_hn,
                              const real* hp, real* a, real* hn_out, real* h_out,
                              Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_gru_fwd_f(g, bi, gh, b_hn, hp, a, hn_out, h_out, n)
    else:
        fnn_gru_fwd_d(g, bi, gh, b_hn, hp, a, hn_out, h_out, n)


cdef inline void _rnn_fwd_row(const real* g, const real* bi, real* h_out, bint relu,
                              Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_rnn_fwd_f(g, bi, h_out, relu, n)
    else:
        fnn_rnn_fwd_d(g, bi, h_out, relu, n)


cdef inline void _lstm_bwd_row(const real* a, const real* c, const real* cp, const real* dy,
                               const real* dh, real* dc, real* dg, Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_lstm_bwd_f(a, c, cp, dy, dh, dc, dg, n)
    else:
        fnn_lstm_bwd_d(a, c, cp, dy, dh, dc, dg, n)


cdef inline void _gru_bwd_row(const real* a, const real* hn, const real* hp, const real* dy,
                              real* dh, real* dg, real* dgh, Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_gru_bwd_f(a, hn, hp, dy, dh, dg, dgh, n)
    else:
        fnn_gru_bwd_d(a, hn, hp, dy, dh, dg, dgh, n)


cdef inline void _rnn_bwd_row(const real* h, const real* dy, const real* dh, real* dg, bint relu,
                              Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_rnn_bwd_f(h, dy, dh, dg, relu, n)
    else:
        fnn_rnn_bwd_d(h, dy, dh, dg, relu, n)


# ------------------------------------------------------------------ one layer's time loop
cdef struct Layer:
    int mode
    Py_ssize_t T, B, H, D, G
    Py_ssize_t UB, NBLK  # unit blocks: fixed by (G, H) only, never by the thread count
    bint hzero          # no initial state given: h0/c0 are zeros (skip the first GEMM)
    bint need_dh0       # backward: compute dh0 (the last GEMM)
    void* xp            # (T, B, D*G*H) forward: gate pre-activations (input side)
    void* act           # (T, B, D*G*H) the activated gates (LSTM, GRU)
    void* out           # (T, B, D*H)
    void* aux           # (T, B, D*H) LSTM c_t, GRU W_hn h_{t-1} + b_hn; else NULL
    void* h0            # (D, B, H)
    void* c0            # (D, B, H) LSTM
    void* whh[2]        # per direction (G*H, H), rows in the kernel's gate order
    void* whp[2]        # float32: W_hh packed for fnn_rnn_pgemm per unit block, or NULL (BLAS)
    void* bhn[2]        # GRU per direction b_hn (H,)
    void* bias[2]       # per direction (G*H,) kernel order: b_ih + b_hh (GRU n gate: b_ih only),
                        # added by the forward pointwise pass (zeros without bias)
    void* gh            # GRU forward scratch (D, B, G*H): h_{t-1} W_hh^T
    void* dout          # (T, B, D*H) gradient of out, or a zero row (H,) with lddy = 0
    Py_ssize_t lddy
    void* dg            # (T, B, D*G*H) gate gradients, input side
    void* dgh           # GRU: hidden side (n part times r); else == dg
    void* dh            # (D, B, H) in: d_h_n, out: d_h0
    void* dc            # (D, B, H) LSTM: in d_c_n, out d_c0


cdef void _fwd_dir(Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, real* tag) noexcept nogil:
    cdef int mode = L.mode
    cdef Py_ssize_t T = L.T, B = L.B, H = L.H, G = L.G, D = L.D, UB = L.UB
    cdef Py_ssize_t GH = G * H, DGH = D * G * H, DH = D * H
    cdef real* xp = <real*>L.xp
    cdef real* act = <real*>L.act
    cdef real* at = NULL
    cdef real* out = <real*>L.out
    cdef real* aux = <real*>L.aux
    cdef const real* whh = <const real*>L.whh[d]
    cdef const real* bhn = <const real*>L.bhn[d]
    cdef const real* bias = <const real*>L.bias[d]
    cdef real* gh = NULL
    cdef const real* hp
    cdef const real* cp = NULL
    cdef real* gt
    cdef real* C
    cdef real* orow
    cdef real* arow
    cdef real beta
    cdef Py_ssize_t s, t, tp, b, u, c0, j0, nu, ldp, ldc
    cdef bint relu = mode == RNN_RELU
    if mode == GRU:
        gh = <real*>L.gh + d * B * GH
    for s in range(T):
        t = s if d == 0 else T - 1 - s
        if s == 0:
            hp = <const real*>L.h0 + d * B * H
            if mode == LSTM:
                cp = <const real*>L.c0 + d * B * H
            ldp = H
        else:
            tp = t - 1 if d == 0 else t + 1
            hp = out + tp * B * DH + d * H
            if mode == LSTM:
                cp = aux + tp * B * DH + d * H
            ldp = DH
        gt = xp + t * B * DGH + d * GH
        at = act + t * B * DGH + d * GH
        # hidden projection of this thread's unit blocks: one GEMM per block
        if not (s == 0 and L.hzero and mode != GRU):
            if mode == GRU:
                C = gh
                ldc = GH
                beta = 0
            else:
                C = gt
                ldc = DGH
                beta = 1
            for u in range(u0, u1):
                c0 = u * G * UB
                nu = H - u * UB if H - u * UB < UB else UB
                if real is float:
                    if L.whp[d] != NULL:
                        fnn_rnn_pgemm(B, G * nu, H, hp, ldp,
                                      <const float*>L.whp[d] + u * _panels(G * UB) * H,
                                      C + c0, ldc, beta != 0)
                        continue
                gemm(False, True, <int>B, <int>(G * nu), <int>H, <real>1, hp, <int>ldp,
                     whh + c0 * H, <int>H, beta, C + c0, <int>ldc)
        for b in range(B):
            orow = out + t * B * DH + b * DH + d * H
            arow = aux + t * B * DH + b * DH + d * H if aux != NULL else NULL
            for u in range(u0, u1):
                c0 = u * G * UB
                j0 = u * UB
                nu = H - j0 if H - j0 < UB else UB
                if mode == LSTM:
                    _lstm_fwd_row(gt + b * DGH + c0, bias + c0, at + b * DGH + c0,
                                  cp + b * ldp + j0, arow + j0, orow + j0, nu)
                elif mode == GRU:
                    _gru_fwd_row(gt + b * DGH + c0, bias + c0, gh + b * GH + c0, bhn + j0,
                                 hp + b * ldp + j0, at + b * DGH + c0, arow + j0, orow + j0, nu)
                else:
                    _rnn_fwd_row(gt + b * DGH + c0, bias + c0, orow + j0, relu, nu)
        fnn_rnn_barrier()


cdef void _bwd_dir(Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, real* tag) noexcept nogil:
    cdef int mode = L.mode
    cdef Py_ssize_t T = L.T, B = L.B, H = L.H, G = L.G, D = L.D, UB = L.UB
    cdef Py_ssize_t GH = G * H, DGH = D * G * H, DH = D * H
    cdef const real* xp = <const real*>L.act
    cdef const real* out = <const real*>L.out
    cdef const real* aux = <const real*>L.aux
    cdef const real* whh = <const real*>L.whh[d]
    cdef const real* dout = <const real*>L.dout
    cdef Py_ssize_t lddy = L.lddy
    cdef real* dg = <real*>L.dg
    cdef real* dgh = <real*>L.dgh
    cdef real* dh = <real*>L.dh + d * B * H
    cdef real* dc = NULL
    cdef const real* hp
    cdef const real* cp = NULL
    cdef const real* gt
    cdef const real* dyt
    cdef const real* orow
    cdef const real* arow
    cdef real* dgt
    cdef real* dght
    cdef Py_ssize_t s, t, tp, b, u, c0, j0, nu, ldp
    cdef bint first
    cdef bint relu = mode == RNN_RELU
    if mode == LSTM:
        dc = <real*>L.dc + d * B * H
    for s in range(T):
        t = T - 1 - s if d == 0 else s
        first = s == T - 1          # the step whose predecessor is h0
        if first:
            hp = <const real*>L.h0 + d * B * H
            if mode == LSTM:
                cp = <const real*>L.c0 + d * B * H
            ldp = H
        else:
            tp = t - 1 if d == 0 else t + 1
            hp = out + tp * B * DH + d * H
            if mode == LSTM:
                cp = aux + tp * B * DH + d * H
            ldp = DH
        gt = xp + t * B * DGH + d * GH
        dgt = dg + t * B * DGH + d * GH
        dght = dgh + t * B * DGH + d * GH
        dyt = dout + (t * B * DH + d * H if lddy else 0)
        for b in range(B):
            orow = out + t * B * DH + b * DH + d * H
            arow = aux + t * B * DH + b * DH + d * H if aux != NULL else NULL
            for u in range(u0, u1):
                c0 = u * G * UB
                j0 = u * UB
                nu = H - j0 if H - j0 < UB else UB
                if mode == LSTM:
                    _lstm_bwd_row(gt + b * DGH + c0, arow + j0, cp + b * ldp + j0,
                                  dyt + b * lddy + j0, dh + b * H + j0, dc + b * H + j0,
                                  dgt + b * DGH + c0, nu)
                elif mode == GRU:
                    _gru_bwd_row(gt + b * DGH + c0, arow + j0, hp + b * ldp + j0,
                                 dyt + b * lddy + j0, dh + b * H + j0, dgt + b * DGH + c0,
                                 dght + b * DGH + c0, nu)
                else:
                    _rnn_bwd_row(orow + j0, dyt + b * lddy + j0, dh + b * H + j0,
                                 dgt + b * DGH + c0, relu, nu)
        fnn_rnn_barrier()
        # dh_{t-1}[:, block] = dG_t W_hh[:, block] (+ the GRU direct part), block by block
        if not first or L.need_dh0:
            for u in range(u0, u1):
                j0 = u * UB
                nu = H - j0 if H - j0 < UB else UB
                if real is float:
                    if L.whp[d] != NULL:
                        fnn_rnn_pgemm(B, nu, GH, dght, DGH,
                                      <const float*>L.whp[d] + u * _panels(UB) * GH,
                                      dh + j0, H, mode == GRU)
                        continue
                gemm(False, False, <int>B, <int>nu, <int>GH, <real>1, dght, <int>DGH, whh + j0,
                     <int>H, <real>(1 if mode == GRU else 0), dh + j0, <int>H)


cdef inline Py_ssize_t _panels(Py_ssize_t n) noexcept nogil:
    """Columns of n rounded up to whole 16-wide panels."""
    return (n + 15) // 16 * 16


cdef bint _packed_on = FNN_RNN_PACKED


def _use_packed(bint on):
    """Route the float32 per-step GEMMs through the pre-packed kernel (default where the
    build has AVX2+FMA) or through BLAS (tests compare the two).  Returns the old setting."""
    global _packed_on
    old = _packed_on
    _packed_on = on and FNN_RNN_PACKED
    return old


cdef object _pack_whh(cnp.ndarray whh, Py_ssize_t G, Py_ssize_t H, Py_ssize_t UB, bint backward):
    """W_hh (G*H, H) in kernel row order packed per unit block for fnn_rnn_pgemm:
    forward block u: columns = its G*nu gate rows, K = H; backward block u: columns = its
    nu units, K = G*H (the rows).  Block u starts at u * _panels(cols of a full block) * K."""
    cdef Py_ssize_t NB = (H + UB - 1) // UB, u, j0, nu, GH = G * H
    cdef Py_ssize_t per = _panels(UB) * GH if backward else _panels(G * UB) * H
    cdef cnp.ndarray P = np.empty(NB * per, np.float32)
    cdef const float* w = <const float*>cnp.PyArray_DATA(whh)
    cdef float* pp = <float*>cnp.PyArray_DATA(P)
    with nogil:
        for u in range(NB):
            j0 = u * UB
            nu = H - j0 if H - j0 < UB else UB
            if backward:
                fnn_rnn_pack(w + j0, 1, H, nu, GH, pp + u * per)
            else:
                fnn_rnn_pack(w + G * j0 * H, H, 1, G * nu, H, pp + u * per)
    return P


cdef void _run_team(Layer* L, bint backward, real* tag) noexcept nogil:
    """Called by every thread of the team: pick a direction and a range of unit blocks."""
    cdef int n = fnn_rnn_team(), tid = fnn_rnn_tid()
    cdef int D = <int>L.D, ntd, d, r
    cdef Py_ssize_t NB = L.NBLK, u0, u1
    if n < D:  # one thread: the directions one after the other
        for d in range(D):
            if backward:
                _bwd_dir(L, d, 0, NB, tag)
            else:
                _fwd_dir(L, d, 0, NB, tag)
        return
    ntd = n // D
    if tid >= D * ntd:  # a spare thread: no blocks, but it keeps the barrier count
        d = 0
        u0 = 0
        u1 = 0
    else:
        d = tid // ntd
        r = tid % ntd
        u0 = r * NB // ntd
        u1 = (r + 1) * NB // ntd
    if backward:
        _bwd_dir(L, d, u0, u1, tag)
    else:
        _fwd_dir(L, d, u0, u1, tag)


cdef void _run_layer(Layer* L, bint backward, int team, real* tag) noexcept nogil:
    if team <= 1:
        _run_team(L, backward, tag)
    else:
        with parallel(num_threads=team):
            _run_team(L, backward, tag)


# ------------------------------------------------------------------ helpers
cdef void _dropout(const real* x, real* y, Py_ssize_t n, uint64_t base, uint64_t seed,
                   uint64_t offset, double p, int nt) noexcept nogil:
    """y = x * m, m = 1/(1-p) where the Philox uniform of element base + i is >= p, else 0.
    ``base`` is a multiple of 4, so one Philox block gives four consecutive elements."""
    cdef Py_ssize_t nblk = (n + 3) // 4, k, i, lane
    cdef real scale = <real>(1.0 / (1.0 - p))
    cdef fnn_philox_out o
    cdef double u
    for k in prange(nblk, nogil=True, schedule="static", num_threads=nt):
        o = fnn_philox4x32(base // 4 + k, offset, seed)
        for lane in range(4):
            i = 4 * k + lane
            if i < n:
                u = (o.v[lane] >> 8) * (1.0 / 16777216.0)
                y[i] = x[i] * (scale if u >= p else <real>0)


cdef inline void* _p(object a):
    return NULL if a is None else cnp.PyArray_DATA(<cnp.ndarray>a)


cdef enum:
    GEMM_ROWS = 512   # row chunk of the whole-sequence GEMMs (fixed: results never
                      # depend on the thread count, as each chunk is one BLAS call)


cdef void _gemm_rows(bint ta, bint tb, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, const real* A,
                     Py_ssize_t lda, const real* Bm, Py_ssize_t ldb, real beta, real* C,
                     Py_ssize_t ldc, int nt) noexcept nogil:
    """Row-major C = op(A) op(B) + beta C as fixed chunks of GEMM_ROWS rows of C, one
    single-threaded BLAS call per chunk, chunks spread over nt OpenMP threads."""
    cdef Py_ssize_t nch = (M + GEMM_ROWS - 1) // GEMM_ROWS, c, r0, m
    if nch <= 1 or nt <= 1:
        for c in range(nch):
            r0 = c * GEMM_ROWS
            m = M - r0 if M - r0 < GEMM_ROWS else GEMM_ROWS
            gemm(ta, tb, <int>m, <int>N, <int>K, <real>1, A + (r0 if ta else r0 * lda), <int>lda,
                 Bm, <int>ldb, beta, C + r0 * ldc, <int>ldc)
        return
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        r0 = c * GEMM_ROWS
        m = M - r0 if M - r0 < GEMM_ROWS else GEMM_ROWS
        gemm(ta, tb, <int>m, <int>N, <int>K, <real>1, A + (r0 if ta else r0 * lda), <int>lda,
             Bm, <int>ldb, beta, C + r0 * ldc, <int>ldc)


cdef void _gemm_any(bint f32, bint ta, bint tb, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K,
                    void* A, Py_ssize_t lda, void* Bm, Py_ssize_t ldb, double beta, void* C,
                    Py_ssize_t ldc) noexcept nogil:
    cdef int nt = _threads_for(M * N * K // 64, 1 << 14)
    if f32:
        _gemm_rows[float](ta, tb, M, N, K, <const float*>A, lda, <const float*>Bm, ldb,
                          <float>beta, <float*>C, ldc, nt)
    else:
        _gemm_rows[double](ta, tb, M, N, K, <const double*>A, lda, <const double*>Bm, ldb,
                           beta, <double*>C, ldc, nt)


def _block_size(Py_ssize_t G, Py_ssize_t H):
    """Hidden units per block of the time loop: about H/2 (two threads share a direction;
    each block is one BLAS call per step, and every call re-packs its small operand, so
    fewer, wider blocks are faster) but at least 64 gate columns per GEMM; a multiple of 8."""
    cdef Py_ssize_t ub = ((H + 1) // 2 + 7) // 8 * 8
    cdef Py_ssize_t lo = ((64 + G - 1) // G + 7) // 8 * 8
    ub = ub if ub > lo else lo
    return ub if ub < H else H


def _perm(Py_ssize_t G, Py_ssize_t H, Py_ssize_t UB):
    """perm[p] = torch's gate row of kernel row p.  The kernel keeps a block's G gates
    together: block u (units u*UB ...) occupies rows u*G*UB ..., gate k of its unit l at
    u*G*UB + k*n_u + l.  Then each block's hidden projection is one GEMM and its
    pointwise update reads one contiguous run."""
    perm = np.empty(G * H, np.intp)
    cdef Py_ssize_t u, k, l, nu, j0
    for u in range((H + UB - 1) // UB):
        j0 = u * UB
        nu = H - j0 if H - j0 < UB else UB
        for k in range(G):
            perm[u * G * UB + k * nu: u * G * UB + (k + 1) * nu] = np.arange(k * H + j0, k * H + j0 + nu)
    return perm


cdef int _team_size(Py_ssize_t D, Py_ssize_t B, Py_ssize_t G, Py_ssize_t H, Py_ssize_t NB):
    """Threads for a layer's time loop: only when a step has enough GEMM work to share."""
    cdef int nt = _threads_for(D * B * G * H * H, 1 << 16)
    cdef int per = <int>(nt // D)
    if per > NB:
        per = <int>NB
    if per < 1:
        return 1
    return <int>(D * per)


cdef _layer_loop(Layer* L, bint f32, bint backward, int team):
    with nogil:
        if f32:
            _run_layer[float](L, backward, team, NULL)
        else:
            _run_layer[double](L, backward, team, NULL)


_MODES = {"rnn_tanh": RNN_TANH, "rnn_relu": RNN_RELU, "gru": GRU, "lstm": LSTM}
_NGATES = {RNN_TANH: 1, RNN_RELU: 1, GRU: 3, LSTM: 4}


cdef _dropout_any(bint f32, cnp.ndarray x, cnp.ndarray y, Py_ssize_t n, uint64_t base,
                  uint64_t seed, uint64_t offset, double p):
    cdef int nt = _threads_for(n, 1 << 14)
    cdef void* px = _p(x)
    cdef void* py = _p(y)
    with nogil:
        if f32:
            _dropout[float](<const float*>px, <float*>py, n, base, seed, offset, p, nt)
        else:
            _dropout[double](<const double*>px, <double*>py, n, base, seed, offset, p, nt)


cdef _colsum_any(bint f32, cnp.ndarray a, Py_ssize_t rows, Py_ssize_t n, cnp.ndarray out):
    cdef int nt = _threads_for(rows * n, 1 << 15)
    cdef void* pa = _p(a)
    cdef void* po = _p(out)
    with nogil:
        if f32:
            _col_sum[float](<const float*>pa, rows, n, <float*>po, nt, 128)
        else:
            _col_sum[double](<const double*>pa, rows, n, <double*>po, nt, 128)


# ------------------------------------------------------------------ the stack
def _forward(int mode, x, h0, c0, tuple weights, int L, bint bidirectional, bint batch_first,
             double p, bint train, uint64_t seed, uint64_t offset):
    with single_threaded_blas():   # every GEMM is one single-threaded call on fixed work
        return _forward_impl(mode, x, h0, c0, weights, L, bidirectional, batch_first, p, train,
                             seed, offset)


def _backward(d_out, d_h_n, d_c_n, tuple saved):
    with single_threaded_blas():
        return _backward_impl(d_out, d_h_n, d_c_n, saved)


cdef _forward_impl(int mode, x, h0, c0, tuple weights, int L, bint bidirectional,
                   bint batch_first, double p, bint train, uint64_t seed, uint64_t offset):
    cdef Py_ssize_t D = 2 if bidirectional else 1
    cdef Py_ssize_t G = _NGATES[mode]
    cdef Py_ssize_t nw = len(weights) // (L * D)
    cdef Py_ssize_t H = weights[1].shape[1]
    cdef Py_ssize_t GH = G * H, T, B, I, k, d, N
    cdef Py_ssize_t UB = _block_size(G, H)
    cdef Py_ssize_t NB = (H + UB - 1) // UB
    cdef bint f32 = x.dtype == np.float32
    cdef bint use_drop = train and p > 0 and L > 1
    cdef Layer lay
    cdef cnp.ndarray inp, xp, act, out, aux, gh, h0a, c0a, wp_ih, wp_hh, bias
    cdef void* pa
    cdef void* pb
    cdef void* pc
    dt = x.dtype
    perm = _perm(G, H, UB)
    inp = np.ascontiguousarray(x.transpose(1, 0, 2)) if batch_first else x
    T = inp.shape[0]
    B = inp.shape[1]
    N = T * B * D * H
    h0a = np.zeros((L * D, B, H), dt) if h0 is None else h0
    c0a = (np.zeros((L * D, B, H), dt) if c0 is None else c0) if mode == LSTM else None
    h_n = np.empty((L * D, B, H), dt)
    c_n = np.empty((L * D, B, H), dt) if mode == LSTM else None
    zeros_h = np.zeros(H, dt)
    layers = []
    cdef int team = _team_size(D, B, G, H, NB)
    for k in range(L):
        I = inp.shape[2]
        xp = np.empty((T, B, D * GH), dt)
        lay.bhn[0] = lay.bhn[1] = NULL
        lay.whp[0] = lay.whp[1] = NULL
        keep = []
        for d in range(D):
            base = (k * D + d) * nw
            wp_ih = weights[base][perm]
            wp_hh = weights[base + 1][perm]
            if nw == 4:
                if mode == GRU:
                    bias = weights[base + 2].copy()
                    bias[:2 * H] += weights[base + 3][:2 * H]
                    bhn = weights[base + 3][2 * H:]
                else:
                    bias = weights[base + 2] + weights[base + 3]
                    bhn = zeros_h
            else:
                bias = np.zeros(GH, dt)
                bhn = zeros_h
            whp = _pack_whh(wp_hh, G, H, UB, False) if f32 and _packed_on else None
            bias = np.ascontiguousarray(bias[perm])
            keep.append((wp_ih, wp_hh, bhn, whp, bias))
            pa = _p(inp)
            pb = _p(wp_ih)
            pc = <char*>_p(xp) + d * GH * (4 if f32 else 8)
            with nogil:
                _gemm_any(f32, False, True, T * B, GH, I, pa, I, pb, I, 0.0, pc, D * GH)
            lay.whh[d] = _p(wp_hh)
            lay.bias[d] = _p(bias)
            lay.whp[d] = _p(whp)
            lay.bhn[d] = _p(bhn)
        out = np.empty((T, B, D * H), dt)
        aux = np.empty((T, B, D * H), dt) if mode in (GRU, LSTM) else None
        gh = np.empty((D, B, GH), dt) if mode == GRU else None
        act = np.empty((T, B, D * GH), dt) if mode in (GRU, LSTM) else None
        lay.act = _p(act)
        lay.mode = mode
        lay.T = T
        lay.B = B
        lay.H = H
        lay.D = D
        lay.G = G
        lay.UB = UB
        lay.NBLK = NB
        lay.hzero = h0 is None
        lay.need_dh0 = False
        lay.xp = _p(xp)
        lay.out = _p(out)
        lay.aux = _p(aux)
        lay.h0 = _p(h0a[k * D:(k + 1) * D])
        lay.c0 = _p(c0a[k * D:(k + 1) * D]) if mode == LSTM else NULL
        lay.gh = _p(gh)
        _layer_loop(&lay, f32, False, team)
        h_n[k * D] = out[T - 1, :, :H]
        if D == 2:
            h_n[k * D + 1] = out[0, :, H:]
        if mode == LSTM:
            c_n[k * D] = aux[T - 1, :, :H]
            if D == 2:
                c_n[k * D + 1] = aux[0, :, H:]
        layers.append((inp, act, out, aux,
                       tuple(kp[:2] for kp in keep)))
        if k < L - 1:
            if use_drop:
                nxt = np.empty_like(out)
                _dropout_any(f32, out, nxt, N, k * ((N + 3) // 4 * 4), seed, offset, p)
                inp = nxt
            else:
                inp = out
    y = np.ascontiguousarray(out.transpose(1, 0, 2)) if batch_first else out
    saved = (mode, h0 is not None, h0a, c0a, nw, L, D, H, batch_first, use_drop, p, seed, offset,
             layers, dt)
    return y, h_n, c_n, saved


cdef _backward_impl(d_out, d_h_n, d_c_n, tuple saved):
    (mode, has_hx, h0a, c0a, nw_, L, D, H_, batch_first, use_drop, p, seed, offset,
     layers, dt) = saved
    cdef int imode = mode
    cdef Py_ssize_t G = _NGATES[imode]
    cdef Py_ssize_t nL = L, nD = D, nw = nw_, H = H_
    cdef Py_ssize_t GH = G * H, T, B, I, k, d, N
    cdef Py_ssize_t UB = _block_size(G, H)
    cdef Py_ssize_t NB = (H + UB - 1) // UB
    cdef bint f32 = dt == np.float32
    cdef Layer lay
    cdef cnp.ndarray inp, xp, out, aux, dy, dg, dgh, dh, dc, dx, dbi, dbh, wp_ih
    cdef Py_ssize_t isz = 4 if f32 else 8
    cdef void *pdg
    cdef void *pdgh
    cdef void *pin
    cdef void *phv
    cdef void *pwi
    cdef void *pdwi
    cdef void *pdwh
    cdef void *pdx
    cdef void *pdgh0
    cdef void *pdgh1
    cdef void *ph0
    cdef bint has_h0 = has_hx
    perm = _perm(G, H, UB)
    T = layers[0][0].shape[0]
    B = layers[0][0].shape[1]
    N = T * B * nD * H
    if d_out is None:
        dy = np.zeros(H, dt)
        lay.lddy = 0
    else:
        dy = np.ascontiguousarray(d_out.transpose(1, 0, 2)) if batch_first else d_out
        lay.lddy = nD * H
    dweights = [None] * (nL * nD * nw)
    dh0 = np.empty((nL * nD, B, H), dt)
    dc0 = np.empty((nL * nD, B, H), dt) if imode == LSTM else None
    cdef int team = _team_size(nD, B, G, H, NB)
    for k in range(nL - 1, -1, -1):
        inp, xp, out, aux, wps = layers[k]
        I = inp.shape[2]
        dg = np.empty((T, B, nD * GH), dt)
        dgh = np.empty((T, B, nD * GH), dt) if imode == GRU else dg
        dh = np.zeros((nD, B, H), dt) if d_h_n is None else d_h_n[k * nD:(k + 1) * nD].copy()
        if imode == LSTM:
            dc = np.zeros((nD, B, H), dt) if d_c_n is None else d_c_n[k * nD:(k + 1) * nD].copy()
        else:
            dc = None
        lay.mode = imode
        lay.T = T
        lay.B = B
        lay.H = H
        lay.D = nD
        lay.G = G
        lay.UB = UB
        lay.NBLK = NB
        lay.hzero = not has_hx
        lay.need_dh0 = has_hx
        lay.act = _p(xp) if xp is not None else _p(dg)   # RNN: unused
        lay.out = _p(out)
        lay.aux = _p(aux)
        lay.h0 = _p(h0a[k * nD:(k + 1) * nD])
        lay.c0 = _p(c0a[k * nD:(k + 1) * nD]) if imode == LSTM else NULL
        lay.whp[0] = lay.whp[1] = NULL
        whps = []
        for d in range(nD):
            lay.whh[d] = _p(wps[d][1])
            whps.append(_pack_whh(wps[d][1], G, H, UB, True) if f32 and _packed_on else None)
            lay.whp[d] = _p(whps[d])
        lay.dout = _p(dy)
        lay.dg = _p(dg)
        lay.dgh = _p(dgh)
        lay.dh = _p(dh)
        lay.dc = _p(dc)
        _layer_loop(&lay, f32, True, team)
        dh0[k * nD:(k + 1) * nD] = dh
        if imode == LSTM:
            dc0[k * nD:(k + 1) * nD] = dc
        # whole-sequence weight gradients and d_input (rows in the kernel's gate order)
        dx = np.empty((T, B, I), dt)
        dbi = np.empty(nD * GH, dt)
        _colsum_any(f32, dg, T * B, nD * GH, dbi)
        if imode == GRU:
            dbh = np.empty(nD * GH, dt)
            _colsum_any(f32, dgh, T * B, nD * GH, dbh)
        else:
            dbh = dbi
        for d in range(nD):
            base = (k * nD + d) * nw
            wp_ih = wps[d][0]
            dwi = np.empty((GH, I), dt)
            dwh = np.empty((GH, H), dt)
            # dW_hh = sum_t dG_t^T h_{t-1}: the steps whose h_{t-1} is an output row, read
            # in place (no shifted copy), then the h0 step when h0 was given (else zeros)
            pdg = <char*>_p(dg) + d * GH * isz
            pdgh = <char*>_p(dgh) + d * GH * isz
            pin = _p(inp)
            if d == 0:
                pdgh1 = <char*>pdgh + B * nD * GH * isz
                phv = _p(out)
                pdgh0 = pdgh
            else:
                pdgh1 = pdgh
                phv = <char*>_p(out) + (B * nD * H + H) * isz
                pdgh0 = <char*>pdgh + (T - 1) * B * nD * GH * isz
            ph0 = _p(h0a[k * nD + d])
            pwi = _p(wp_ih)
            pdwi = _p(dwi)
            pdwh = _p(dwh)
            pdx = _p(dx)
            with nogil:
                _gemm_any(f32, True, False, GH, I, T * B, pdg, nD * GH, pin, I, 0.0, pdwi, I)
                _gemm_any(f32, True, False, GH, H, (T - 1) * B, pdgh1, nD * GH, phv, nD * H,
                          0.0, pdwh, H)
                if has_h0:
                    _gemm_any(f32, True, False, GH, H, B, pdgh0, nD * GH, ph0, H, 1.0, pdwh, H)
                _gemm_any(f32, False, False, T * B, I, GH, pdg, nD * GH, pwi, I,
                          1.0 if d else 0.0, pdx, I)
            gw = np.empty_like(dwi)
            gw[perm] = dwi
            dweights[base] = gw
            gw = np.empty_like(dwh)
            gw[perm] = dwh
            dweights[base + 1] = gw
            if nw == 4:
                gw = np.empty(GH, dt)
                gw[perm] = dbi[d * GH:(d + 1) * GH]
                dweights[base + 2] = gw
                gw = np.empty(GH, dt)
                gw[perm] = dbh[d * GH:(d + 1) * GH]
                dweights[base + 3] = gw
        if k > 0:
            if use_drop:
                nxt = np.empty_like(dx)
                _dropout_any(f32, dx, nxt, N, (k - 1) * ((N + 3) // 4 * 4), seed, offset, p)
                dy = nxt
            else:
                dy = dx
            lay.lddy = nD * H
    if batch_first:
        dx = np.ascontiguousarray(dx.transpose(1, 0, 2))
    return dx, (dh0 if has_hx else None), (dc0 if has_hx and imode == LSTM else None), tuple(dweights)


def rnn(x, h0, weights, nonlinearity, num_layers, bidirectional, batch_first, dropout, train,
        seed, offset):
    """rnn(...) -> ((out, h_n), saved); see fastnn/reference/rnn.py for the interface."""
    y, h_n, _, saved = _forward(_MODES["rnn_" + nonlinearity], x, h0, None, tuple(weights),
                                num_layers, bidirectional, batch_first, dropout, train, seed, offset)
    return (y, h_n), saved


def rnn_backward(d_out, d_h_n, saved):
    """-> (dx, dh0 or None, d_weights)."""
    dx, dh0, _, dw = _backward(d_out, d_h_n, None, saved)
    return dx, dh0, dw


def gru(x, h0, weights, num_layers, bidirectional, batch_first, dropout, train, seed, offset):
    y, h_n, _, saved = _forward(GRU, x, h0, None, tuple(weights), num_layers, bidirectional,
                                batch_first, dropout, train, seed, offset)
    return (y, h_n), saved


def gru_backward(d_out, d_h_n, saved):
    dx, dh0, _, dw = _backward(d_out, d_h_n, None, saved)
    return dx, dh0, dw


def lstm(x, h0, c0, weights, num_layers, bidirectional, batch_first, dropout, train, seed, offset):
    y, h_n, c_n, saved = _forward(LSTM, x, h0, c0, tuple(weights), num_layers, bidirectional,
                                  batch_first, dropout, train, seed, offset)
    return (y, h_n, c_n), saved


def lstm_backward(d_out, d_h_n, d_c_n, saved):
    return _backward(d_out, d_h_n, d_c_n, saved)
