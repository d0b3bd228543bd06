/* Elementwise activation loops over n contiguous elements (one thread's chunk).
 *
 * Every kernel has one signature, (a, b, out, n, p): forwards read a = x; backwards
 * read a = d_out and b = what the forward saved (x or y); p holds the op's scalar
 * parameters.  Loops are `omp simd`: out may be exactly a (in-place), which is safe
 * for elementwise code and which the pragma lets the compiler assume without a runtime
 * overlap check.  float uses the vectorisable fnn_math.h functions; double uses libm.
 * Formulas (and NaN / inf behaviour) follow fastnn/reference/activation.py. */
#ifndef FNN_ACTIVATION_H
#define FNN_ACTIVATION_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "fnn_math.h"
#include "fnn_philox.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FNN_SIMD _Pragma("omp simd")

/* Keeps v a plain vector load.  GCC folds a load whose lanes are used only under a mask
   into a masked memory operand (vmovups (m), zmm{k}{z}; vmulps (m), zmm, zmm{k}{z}), and
   such a load waits for its mask: where the mask comes from another array's load (or a
   compare of it) the two streams' misses no longer overlap.  On a Zen 5, out of cache
   (16-64 MiB arrays, 2 threads), that made HardSwish's backward 1.3-1.7x the time of
   Sigmoid's (the same traffic) and the bit-mask backward ~15% slower than with a plain
   load.  An empty asm that takes v in a register and hands it back stops the folding and
   emits nothing.
   Masked loads and stores cost even when the mask is all ones: one thread on that Zen 5
   streaming 16-64 MiB through a 16-lane loop moved 72 / 46 GB/s with plain loads and
   stores, 50 / 36 with masked stores, 40 / 30 with masked loads (in-cache sizes: no
   difference).  So the 16-lane loops here take masks only for the last partial vector,
   as the generic loops' vector epilogues do. */
#if defined(__GNUC__)
#define FNN_PLAIN_LOAD(v) __asm__("" : "+v"(v))
#else
#define FNN_PLAIN_LOAD(v) ((void)0)
#endif

enum {
    FNN_RELU_FWD, FNN_RELU_BWD, FNN_LEAKY_FWD, FNN_LEAKY_BWD,
    FNN_ELU_FWD, FNN_ELU_BWD_OUT, FNN_ELU_BWD_IN,
    FNN_GELU_FWD, FNN_GELU_BWD, FNN_GELUT_FWD, FNN_GELUT_BWD,
    FNN_SILU_FWD, FNN_SILU_BWD, FNN_SOFTPLUS_FWD, FNN_SOFTPLUS_BWD,
    FNN_SIGMOID_FWD, FNN_SIGMOID_BWD, FNN_TANH_FWD, FNN_TANH_BWD,
    FNN_NEG, FNN_MUL,
    FNN_HARDSWISH_FWD, FNN_HARDSWISH_BWD, FNN_MISH_FWD, FNN_MISH_BWD,
    FNN_NUM_KERNELS
};

static inline double fnn_absd(double x) { return fabs(x); }
static inline double fnn_tanhd(double x) { return tanh(x); }
/* Phi(x) and exp(-x^2/2) in double (libm) */
static inline double fnn_gauss_cdf_d(double x, double* gauss) {
    *gauss = exp(-0.5 * x * x);
    return 0.5 * erfc(-x * 0.70710678118654752440);
}

/* Elements per thread before the erf GELU wakes another thread (activation.pyx): the
   16-lane table form costs ~0.2 ns an element, so a team's wake-up (~3 us) pays off only
   past ~24k elements (measured: 16k 3.8 us on one thread vs 4.6 on two; 32k 7.3 vs 6.1);
   the other builds' ~0.6 ns an element keep the math ops' 8192. */
#if defined(FNN_HAVE_AVX512)
#define FNN_GELU_GRAIN (1 << 14)
#else
#define FNN_GELU_GRAIN (1 << 13)
#endif

/* The GELUs' and Tanh's explicit 16-lane loops (the avx512 build): y = f(x) (dy NULL) or
   dy f(x), f given by two halves from fnn_math.h -- the table form tabf, a piecewise
   polynomial right for |x| < cut (no exp, no division), and the general form genf, right
   for any x -- chosen lane by lane: each lane with |x| < cut gets tabf's value and every
   other lane (|x| >= cut, inf, NaN) genf's, so an element's result depends on its own
   value alone (not on its neighbours, the chunk boundaries or the thread count).
   The loop runs over blocks of up to FNN_SPLIT16_VECS vectors: the table form on every
   vector, stored at once, while the lanes past the cut (and their dy) are packed into a
   small buffer (vcompressps); then the general form runs over the packed lanes only, 16
   at a time, and its results go back into their lanes (vexpandps, masked stores).  On
   3 x N(0, 1) inputs ~97% of GELU's vectors hold a lane past 3.9375 but only ~19% of the
   lanes are: a vector-wide choice would run the general form (~40 operations on 16
   lanes) on nearly every vector.  The buffer holds copies, so y may be x or dy
   (in place).  The loop's tail by masked loads and stores.  Returns how many elements it
   did: all of them there, none elsewhere (the omp simd loops do the rest). */
#if defined(FNN_HAVE_AVX512)
/* 64 vectors a block: ~12 packed vectors of 3 x N(0, 1) input for the general form, whose
   long dependency chain then overlaps across them (one core, 8192 floats in L1: 5.2 ns a
   vector against 5.6-5.9 with blocks of 16, and 2.5 for the table form alone); the branch
   on an empty pack measured faster than packing unconditionally (5.2 vs 5.8) */
#ifndef FNN_SPLIT16_VECS
#define FNN_SPLIT16_VECS 64
#endif
/* one vector's lanes (those in live) by their own forms: tabf's value where |x| < cut,
   genf's elsewhere (genf runs only when some live lane needs it) */
static inline __attribute__((always_inline)) __m512 fnn_tab16_pick(
        const fnn_tab16_t* t, __m512 (*tabf)(const fnn_tab16_t*, __m512),
        __m512 (*genf)(__m512), __m512 vcut, __m512 xv, __mmask16 live) {
    __mmask16 m = _mm512_mask_cmp_ps_mask(live, _mm512_abs_ps(xv), vcut, _CMP_NLT_UQ);
    __m512 r = tabf(t, xv);
    return m ? _mm512_mask_mov_ps(r, m, genf(xv)) : r;
}
static inline __attribute__((always_inline)) ptrdiff_t fnn_tab16_split_map(
        const float (*tab)[32], int rows, __m512 (*tabf)(const fnn_tab16_t*, __m512),
        __m512 (*genf)(__m512), float cut, const float* dy,
        const float* x, float* y, ptrdiff_t n) {
    fnn_tab16_t t;
    fnn_tab16_load(tab, rows, &t);
    const __m512 vcut = _mm512_set1_ps(cut);
    /* packed lanes: one vector of slack (each pack stores a whole vector) */
    float xs[16 * (FNN_SPLIT16_VECS + 1)] __attribute__((aligned(64)));
    float ds[16 * (FNN_SPLIT16_VECS + 1)] __attribute__((aligned(64)));
    __mmask16 ms[FNN_SPLIT16_VECS];
    ptrdiff_t i = 0;
    while (i + 16 <= n) {
        ptrdiff_t nv = (n - i) >> 4;
        if (nv > FNN_SPLIT16_VECS) nv = FNN_SPLIT16_VECS;
        int cnt = 0;
        for (ptrdiff_t v = 0; v < nv; ++v) {
            const ptrdiff_t o = i + 16 * v;
            __m512 xv = _mm512_loadu_ps(x + o);
            /* not (|x| < cut): true for NaN too */
            __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(xv), vcut, _CMP_NLT_UQ);
            __m512 r = tabf(&t, xv);
            __m512 dv = dy ? _mm512_loadu_ps(dy + o) : r;
            _mm512_storeu_ps(y + o, dy ? _mm512_mul_ps(dv, r) : r);
            ms[v] = m;
            if (m) {        /* well predicted where the inputs' spread is steady */
                if (dy) _mm512_storeu_ps(ds + cnt, _mm512_maskz_compress_ps(m, dv));
                _mm512_storeu_ps(xs + cnt, _mm512_maskz_compress_ps(m, xv));
                cnt += __builtin_popcount((unsigned)m);
            }
        }
        if (cnt) {
            for (int j = 0; j < cnt; j += 16) {
                __m512 r = genf(_mm512_load_ps(xs + j));
                if (dy) r = _mm512_mul_ps(_mm512_load_ps(ds + j), r);
                _mm512_store_ps(xs + j, r);
            }
            int pos = 0;
            for (ptrdiff_t v = 0; v < nv; ++v) {
                const __mmask16 m = ms[v];
                if (!m) continue;
                _mm512_mask_storeu_ps(y + i + 16 * v, m,
                                      _mm512_maskz_expand_ps(m, _mm512_loadu_ps(xs + pos)));
                pos += __builtin_popcount((unsigned)m);
            }
        }
        i += 16 * nv;
    }
    if (i < n) {
        __mmask16 live = (__mmask16)((1u << (n - i)) - 1u);
        __m512 r = fnn_tab16_pick(&t, tabf, genf, vcut, _mm512_maskz_loadu_ps(live, x + i), live);
        if (dy) r = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, dy + i), r);
        _mm512_mask_storeu_ps(y + i, live, r);
    }
    return n;
}
#define FNN_SPLIT16_MAP(tab, tabf, genf, cut, dy, x, y, n) \
    fnn_tab16_split_map(tab, (int)(sizeof(tab) / sizeof((tab)[0])), tabf, genf, cut, dy, x, y, n)
#else
#define FNN_SPLIT16_MAP(tab, tabf, genf, cut, dy, x, y, n) \
    ((void)(dy), (void)(x), (void)(y), (ptrdiff_t)0 * (n))
#endif
static inline ptrdiff_t fnn_gelu_fwd_vec_f(const float* x, float* y, ptrdiff_t n) {
    return FNN_SPLIT16_MAP(fnn_gelu16_tab, fnn_gelu16_tab16, fnn_gelu16_gen, FNN_GELU16_CUT,
                           (const float*)NULL, x, y, n);
}
static inline ptrdiff_t fnn_gelu_bwd_vec_f(const float* dy, const float* x, float* dx, ptrdiff_t n) {
    return FNN_SPLIT16_MAP(fnn_gelu16_dtab, fnn_gelu16_grad_tab16, fnn_gelu16_grad_gen,
                           FNN_GELU16_CUT, dy, x, dx, n);
}
static inline ptrdiff_t fnn_gelut_fwd_vec_f(const float* x, float* y, ptrdiff_t n) {
    return FNN_SPLIT16_MAP(fnn_gelut16_tab, fnn_gelut16_tab16, fnn_gelut16_gen, FNN_GELU16_CUT,
                           (const float*)NULL, x, y, n);
}
static inline ptrdiff_t fnn_gelut_bwd_vec_f(const float* dy, const float* x, float* dx, ptrdiff_t n) {
    return FNN_SPLIT16_MAP(fnn_gelut16_dtab, fnn_gelu16_grad_tab16, fnn_gelut16_grad_gen,
                           FNN_GELU16_CUT, dy, x, dx, n);
}
/* Tanh's lanes past its cut (|x| >= 7.875: ~1% of 3 x N(0, 1) lanes) are rare and its
   general form is short (one exp), so each vector takes it in place, only when it has such
   a lane: the packing above measured slower here (4M floats, 2 threads: 0.73 vs 0.63 ms). */
static inline ptrdiff_t fnn_tanh_fwd_vec_f(const float* x, float* y, ptrdiff_t n) {
#if defined(FNN_HAVE_AVX512)
    fnn_tab16_t t;
    fnn_tab16_load(fnn_tanh16_tab, (int)(sizeof(fnn_tanh16_tab) / sizeof(fnn_tanh16_tab[0])), &t);
    const __m512 vcut = _mm512_set1_ps(FNN_TANH16_CUT);
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, fnn_tab16_pick(&t, fnn_tanh16_tab16, fnn_tanh16_gen, vcut,
                                               _mm512_loadu_ps(x + i), (__mmask16)0xffff));
    if (i < n) {
        __mmask16 live = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, live,
                              fnn_tab16_pick(&t, fnn_tanh16_tab16, fnn_tanh16_gen, vcut,
                                             _mm512_maskz_loadu_ps(live, x + i), live));
    }
    return n;
#else
    (void)x; (void)y;
    return 0 * n;
#endif
}
static inline ptrdiff_t fnn_tanh_fwd_vec_d(const double* x, double* y, ptrdiff_t n) {
    (void)x; (void)y; (void)n;
    return 0;
}
static inline ptrdiff_t fnn_gelut_bwd_vec_d(const double* dy, const double* x, double* dx, ptrdiff_t n) {
    (void)dy; (void)x; (void)dx; (void)n;
    return 0;
}
static inline ptrdiff_t fnn_gelut_fwd_vec_d(const double* x, double* y, ptrdiff_t n) {
    (void)x; (void)y; (void)n;
    return 0;
}
static inline ptrdiff_t fnn_gelu_bwd_vec_d(const double* dy, const double* x, double* dx, ptrdiff_t n) {
    (void)dy; (void)x; (void)dx; (void)n;
    return 0;
}
static inline ptrdiff_t fnn_gelu_fwd_vec_d(const double* x, double* y, ptrdiff_t n) {
    (void)x; (void)y; (void)n;
    return 0;
}

/* The Softplus forward's 16-lane loop (the avx512 build), y = (max(bx, 0) + h) / beta with
   h = log1p(e), e = exp(-|bx|) in (0, 1] (fnn_exp_nonpos_ps16), and x itself where
   bx > threshold.  h = e + e^2 R(e), R a degree-9 weighted fit of (log1p(e) - e) / e^2 on
   [0, 1] (|error| 3.6e-9; h within 1.3 ulp of log1p(e) evaluated in float, the leading e
   exact): 11 multiply-adds and no division, where fnn_log1pf's range reduction takes ~30
   operations and a division.  bx < -87.3 gives 0 (the exact value is below FLT_MIN), as
   fnn_exp_nonpos_f does; NaN propagates.  Returns how many elements it did (all here,
   none in the other builds). */
#if defined(FNN_HAVE_AVX512)
static inline __m512 fnn_softplus16(__m512 v, __m512 beta, __m512 thr, __m512 ib) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 bx = _mm512_mul_ps(v, beta);
    __m512 e = fnn_exp_nonpos_ps16(_mm512_sub_ps(zero, _mm512_abs_ps(bx)));
    __m512 r = _mm512_set1_ps(2.9475806113e-03f);
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(-1.7843487533e-02f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(5.0551438475e-02f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(-9.2655812392e-02f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(1.3108159142e-01f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(-1.6391227424e-01f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(1.9961820905e-01f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(-2.4997262895e-01f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(3.3333256411e-01f));
    r = _mm512_fmadd_ps(r, e, _mm512_set1_ps(-4.9999999640e-01f));
    __m512 h = _mm512_fmadd_ps(_mm512_mul_ps(e, e), r, e);
    /* max(bx, 0): vmaxps returns its second operand for a NaN bx; h is NaN then */
    __m512 sp = _mm512_mul_ps(_mm512_add_ps(_mm512_max_ps(bx, zero), h), ib);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(bx, thr, _CMP_GT_OQ), sp, v);
}
#endif
static inline ptrdiff_t fnn_softplus_fwd_vec_f(const float* x, float* y, ptrdiff_t n,
                                               const double* p) {
#if defined(FNN_HAVE_AVX512)
    const __m512 beta = _mm512_set1_ps((float)p[0]), thr = _mm512_set1_ps((float)p[1]);
    const __m512 ib = _mm512_set1_ps((float)(1.0 / p[0]));
    ptrdiff_t i = 0;
    /* plain loads and stores but for the last partial vector (see FNN_PLAIN_LOAD) */
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, fnn_softplus16(_mm512_loadu_ps(x + i), beta, thr, ib));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m,
                              fnn_softplus16(_mm512_maskz_loadu_ps(m, x + i), beta, thr, ib));
    }
    return n;
#else
    (void)x; (void)y; (void)n; (void)p;
    return 0;
#endif
}
static inline ptrdiff_t fnn_softplus_fwd_vec_d(const double* x, double* y, ptrdiff_t n,
                                               const double* p) {
    (void)x; (void)y; (void)n; (void)p;
    return 0;
}

/* HardSwish's backward in 16 lanes (the avx512 build): the generic loop below compiled to
   two masked loads of d_y per vector (FNN_PLAIN_LOAD).  The same operations as that loop:
   d_y (x (1/3) + 1/2) with one rounding of the multiply-add, d_y where x >= 3, 0 where
   x <= -3 (a NaN x gives NaN).  Plain loads and stores but for the last partial vector.
   Returns how many elements it did (all here, none in the other builds). */
#if defined(FNN_HAVE_AVX512)
static inline __m512 fnn_hardswish_grad16(__m512 g, __m512 v) {
    const __m512 three = _mm512_set1_ps(3.0f), mthree = _mm512_set1_ps(-3.0f);
    const __m512 third = _mm512_set1_ps((float)(1.0 / 3.0)), half = _mm512_set1_ps(0.5f);
    __m512 r = _mm512_mul_ps(g, _mm512_fmadd_ps(v, third, half));
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, three, _CMP_GE_OQ), r, g);
    /* !(x <= -3), true for NaN: the lanes that keep r */
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, mthree, _CMP_NLE_UQ), r);
}
#endif
static inline ptrdiff_t fnn_hardswish_bwd_vec_f(const float* dy, const float* x, float* dx,
                                                ptrdiff_t n) {
#if defined(FNN_HAVE_AVX512)
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(dy + i);
        FNN_PLAIN_LOAD(g);
        _mm512_storeu_ps(dx + i, fnn_hardswish_grad16(g, _mm512_loadu_ps(x + i)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(dx + i, m, fnn_hardswish_grad16(_mm512_maskz_loadu_ps(m, dy + i),
                                                              _mm512_maskz_loadu_ps(m, x + i)));
    }
    return n;
#else
    (void)dy; (void)x; (void)dx; (void)n;
    return 0;
#endif
}
static inline ptrdiff_t fnn_hardswish_bwd_vec_d(const double* dy, const double* x, double* dx,
                                                ptrdiff_t n) {
    (void)dy; (void)x; (void)dx; (void)n;
    return 0;
}

/* float: the vectorisable fnn_math.h functions */
#define FNN_T float
#define FNN_ACT_NAME(name) name##_f
#define FNN_A_EXP fnn_expf
#define FNN_A_EXPNEG fnn_exp_nonpos_f
#define FNN_A_EXPM1 fnn_expm1f
#define FNN_A_TANH fnn_tanhf
#define FNN_A_CDF fnn_gauss_cdf_f
#define FNN_A_LOG1P fnn_log1pf
#define FNN_A_ABS fnn_absf
#define FNN_A_SIGMOID fnn_sigmoidf
#define FNN_A_XSIG(v, z) ((v) * fnn_sigmoidf(z))
#include "fnn_activation_impl.h"

/* double: libm, the accuracy path */
static inline double fnn_sigmoidd(double z) { return 1.0 / (1.0 + exp(-z)); }
#define FNN_T double
#define FNN_ACT_NAME(name) name##_d
#define FNN_A_EXP exp
#define FNN_A_EXPNEG exp
#define FNN_A_EXPM1 expm1
#define FNN_A_TANH fnn_tanhd
#define FNN_A_CDF fnn_gauss_cdf_d
#define FNN_A_LOG1P log1p
#define FNN_A_ABS fnn_absd
#define FNN_A_SIGMOID fnn_sigmoidd
#define FNN_A_XSIG(v, z) ((v) / (1.0 + exp(-(z))))
#include "fnn_activation_impl.h"

/* ReLU / LeakyReLU with a bit mask for backward.  The forward writes y and one bit per
 * element -- bit i % 8 of m[i / 8] is set where the gradient of element i passes unscaled:
 * ReLU !(x <= 0) (a NaN passes, as it did from y), LeakyReLU x > 0 -- so the backward
 * reads d_y and 1/8 byte per element instead of d_y and y (or x): 8.1 bytes moved per
 * element instead of 12, and a negative slope needs no copy of the input.  leaky = 0:
 * ReLU (y = x < 0 ? 0 : x, d_x = 0 off the mask); leaky = 1: y = x > 0 ? x : s x,
 * d_x = s d_y off the mask.  Callers split the array at multiples of 8 elements (m
 * advances by n / 8).  float has vector forms (16 lanes: a compare mask is the bits; 8
 * and 4 lanes: movemask), double the scalar loop. */
static void fnn_relu_mask_fwd_f(int leaky, double slope, const float* x, float* y, uint8_t* m,
                                ptrdiff_t n) {
    ptrdiff_t i = 0;
#if defined(FNN_HAVE_AVX512)
    const __m512 s16 = _mm512_set1_ps((float)slope), z16 = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __mmask16 k;
        if (leaky) {
            k = _mm512_cmp_ps_mask(v, z16, _CMP_GT_OQ);
            v = _mm512_mask_blend_ps(k, _mm512_mul_ps(v, s16), v);
        } else {
            v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, z16, _CMP_LT_OQ), v, z16);
            k = _mm512_cmp_ps_mask(v, z16, _CMP_NLE_UQ);
        }
        _mm512_storeu_ps(y + i, v);
        uint16_t bits = (uint16_t)k;
        memcpy(m + (i >> 3), &bits, 2);
    }
#elif defined(__AVX2__)
    /* 8 lanes a vector, 32 elements (4 mask bytes) a step, then 8 at a time: the same
       compares as the SSE2 loop below, at twice its width (that loop ran at half the
       rate of torch's in-cache relu on a Zen 3) */
    const __m256 s8 = _mm256_set1_ps((float)slope), z8 = _mm256_setzero_ps();
#define FNN_RELU_MASK8(v, pass)                                          \
    if (leaky) {                                                         \
        pass = _mm256_cmp_ps(v, z8, _CMP_GT_OQ);                         \
        v = _mm256_blendv_ps(_mm256_mul_ps(v, s8), v, pass);             \
    } else {                                                             \
        v = _mm256_andnot_ps(_mm256_cmp_ps(v, z8, _CMP_LT_OQ), v);       \
        pass = _mm256_cmp_ps(v, z8, _CMP_NLE_UQ);                        \
    }
    for (; i + 32 <= n; i += 32) {
        uint32_t bits = 0;
        for (int h = 0; h < 32; h += 8) {
            __m256 v = _mm256_loadu_ps(x + i + h), pass;
            FNN_RELU_MASK8(v, pass)
            _mm256_storeu_ps(y + i + h, v);
            bits |= (uint32_t)_mm256_movemask_ps(pass) << h;
        }
        memcpy(m + (i >> 3), &bits, 4);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), pass;
        FNN_RELU_MASK8(v, pass)
        _mm256_storeu_ps(y + i, v);
        m[i >> 3] = (uint8_t)_mm256_movemask_ps(pass);
    }
#undef FNN_RELU_MASK8
#elif defined(__SSE2__)
    const __m128 s4 = _mm_set1_ps((float)slope), z4 = _mm_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        int bits = 0;
        for (int h = 0; h < 8; h += 4) {
            __m128 v = _mm_loadu_ps(x + i + h), pass;
            if (leaky) {
                pass = _mm_cmpgt_ps(v, z4);
                v = _mm_or_ps(_mm_and_ps(pass, v), _mm_andnot_ps(pass, _mm_mul_ps(v, s4)));
            } else {
                v = _mm_andnot_ps(_mm_cmplt_ps(v, z4), v);
                pass = _mm_cmpnle_ps(v, z4);
            }
            _mm_storeu_ps(y + i + h, v);
            bits |= _mm_movemask_ps(pass) << h;
        }
        m[i >> 3] = (uint8_t)bits;
    }
#endif
    fnn_relu_mask_fwd_scalar_f(leaky, slope, x + i, y + i, m + (i >> 3), n - i);
}

static void fnn_relu_mask_bwd_f(int leaky, double slope, const float* dy, const uint8_t* m,
                                float* dx, ptrdiff_t n) {
    ptrdiff_t i = 0;
#if defined(FNN_HAVE_AVX512)
    const __m512 s16 = _mm512_set1_ps((float)slope);
    for (; i + 16 <= n; i += 16) {
        uint16_t bits;
        memcpy(&bits, m + (i >> 3), 2);
        __m512 g = _mm512_loadu_ps(dy + i);
        FNN_PLAIN_LOAD(g);      /* not a masked load that waits for the mask's */
        _mm512_storeu_ps(dx + i, leaky == 1 ? _mm512_mask_blend_ps((__mmask16)bits, _mm512_mul_ps(g, s16), g)
                               : leaky == 2 ? _mm512_maskz_mul_ps((__mmask16)bits, g, s16)
                                            : _mm512_maskz_mov_ps((__mmask16)bits, g));
    }
#elif defined(__AVX2__)
    const __m256 s8 = _mm256_set1_ps((float)slope);
    const __m256i sel8 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (; i + 8 <= n; i += 8) {
        __m256 pass = _mm256_castsi256_ps(_mm256_cmpeq_epi32(
            _mm256_and_si256(_mm256_set1_epi32(m[i >> 3]), sel8), sel8));
        __m256 g = _mm256_loadu_ps(dy + i);
        _mm256_storeu_ps(dx + i, leaky == 1 ? _mm256_blendv_ps(_mm256_mul_ps(g, s8), g, pass)
                               : leaky == 2 ? _mm256_and_ps(pass, _mm256_mul_ps(g, s8))
                                            : _mm256_and_ps(pass, g));
    }
#elif defined(__SSE2__)
    const __m128 s4 = _mm_set1_ps((float)slope);
    const __m128i sel = _mm_setr_epi32(1, 2, 4, 8);
    for (; i + 8 <= n; i += 8) {
        const int bits = m[i >> 3];
        for (int h = 0; h < 8; h += 4) {
            __m128 pass = _mm_castsi128_ps(_mm_cmpeq_epi32(
                _mm_and_si128(_mm_set1_epi32(bits >> h), sel), sel));
            __m128 g = _mm_loadu_ps(dy + i + h);
            __m128 off = leaky == 1 ? _mm_andnot_ps(pass, _mm_mul_ps(g, s4)) : _mm_setzero_ps();
            __m128 on = leaky == 2 ? _mm_mul_ps(g, s4) : g;
            _mm_storeu_ps(dx + i + h, _mm_or_ps(_mm_and_ps(pass, on), off));
        }
    }
#endif
    fnn_relu_mask_bwd_scalar_f(leaky, slope, dy + i, m + (i >> 3), dx + i, n - i);
}

/* Hardtanh / ReLU6 with that bit mask (fnn_clamp_mask_fwd_scalar in fnn_activation_impl.h:
 * the bit is set where lo < x < hi); the backward is fnn_relu_mask_bwd with leaky = 0.
 * Hardsigmoid (shift = 1): y = min(max(x + 3, 0), 6) * (1/6) (a division held the
 * 16-lane loop to 84% of the copy rate), the bit where
 * -3 < x < 3; its backward is fnn_relu_mask_bwd with leaky = 2 (d_y s on the mask, 0
 * off it) and s = 1/6. */
static void fnn_clamp_mask_fwd_f(int shift, double lower, double upper, const float* x,
                                 float* y, uint8_t* m, ptrdiff_t n) {
    ptrdiff_t i = 0;
#if defined(FNN_HAVE_AVX512)
    const __m512 lo16 = _mm512_set1_ps((float)lower), hi16 = _mm512_set1_ps((float)upper);
    const __m512 three16 = _mm512_set1_ps(3.0f), six16 = _mm512_set1_ps(6.0f);
    const __m512 mthree16 = _mm512_set1_ps(-3.0f), sixth16 = _mm512_set1_ps(1.0f / 6.0f);
    const __m512 zero16 = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __mmask16 k;
        __m512 r;
        /* max(c, v) / min(c, v) return v where v is NaN (the second operand): NaN passes */
        if (shift) {
            k = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(v, mthree16, _CMP_GT_OQ), v, three16,
                                        _CMP_LT_OQ);
            r = _mm512_min_ps(six16, _mm512_max_ps(zero16, _mm512_add_ps(v, three16)));
            r = _mm512_mul_ps(r, sixth16);
        } else {
            k = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(v, lo16, _CMP_GT_OQ), v, hi16,
                                        _CMP_LT_OQ);
            r = _mm512_min_ps(hi16, _mm512_max_ps(lo16, v));
        }
        _mm512_storeu_ps(y + i, r);
        uint16_t bits = (uint16_t)k;
        memcpy(m + (i >> 3), &bits, 2);
    }
#elif defined(__AVX2__)
    const __m256 lo8 = _mm256_set1_ps(shift ? -3.0f : (float)lower);
    const __m256 hi8 = _mm256_set1_ps(shift ? 3.0f : (float)upper);
    const __m256 three8 = _mm256_set1_ps(3.0f), six8 = _mm256_set1_ps(6.0f);
    const __m256 zero8 = _mm256_setzero_ps(), sixth8 = _mm256_set1_ps(1.0f / 6.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), r;
        __m256 pass = _mm256_and_ps(_mm256_cmp_ps(v, lo8, _CMP_GT_OQ),
                                    _mm256_cmp_ps(v, hi8, _CMP_LT_OQ));
        if (shift)   /* NaN passes max and min as their second operand */
            r = _mm256_mul_ps(_mm256_min_ps(six8, _mm256_max_ps(zero8, _mm256_add_ps(v, three8))),
                              sixth8);
        else
            r = _mm256_min_ps(hi8, _mm256_max_ps(lo8, v));
        _mm256_storeu_ps(y + i, r);
        m[i >> 3] = (uint8_t)_mm256_movemask_ps(pass);
    }
#endif
    fnn_clamp_mask_fwd_scalar_f(shift, lower, upper, x + i, y + i, m + (i >> 3), n - i);
}

static void fnn_clamp_mask_fwd_d(int shift, double lower, double upper, const double* x,
                                 double* y, uint8_t* m, ptrdiff_t n) {
    fnn_clamp_mask_fwd_scalar_d(shift, lower, upper, x, y, m, n);
}

static void fnn_relu_mask_fwd_d(int leaky, double slope, const double* x, double* y, uint8_t* m,
                                ptrdiff_t n) {
    fnn_relu_mask_fwd_scalar_d(leaky, slope, x, y, m, n);
}

static void fnn_relu_mask_bwd_d(int leaky, double slope, const double* dy, const uint8_t* m,
                                double* dx, ptrdiff_t n) {
    fnn_relu_mask_bwd_scalar_d(leaky, slope, dy, m, dx, n);
}

/* test hook: the float math functions over an array (tests/test_math.py) */
static void fnn_math_apply(int which, const float* x, float* y, ptrdiff_t n) {
    ptrdiff_t i;
    switch (which) {
    case 0: for (i = 0; i < n; ++i) y[i] = fnn_expf(x[i]); break;
    case 1: for (i = 0; i < n; ++i) y[i] = fnn_expm1f(x[i]); break;
    case 2:   /* tanh as the Tanh forward computes it */
        for (i = fnn_tanh_fwd_vec_f(x, y, n); i < n; ++i) y[i] = fnn_tanhf(x[i]);
        break;
    case 3: for (i = 0; i < n; ++i) y[i] = fnn_erff(x[i]); break;
    case 4: for (i = 0; i < n; ++i) y[i] = fnn_log1pf(x[i]); break;
    case 5: for (i = 0; i < n; ++i) { float g; y[i] = fnn_gauss_cdf_f(x[i], &g); } break;
    case 6: for (i = 0; i < n; ++i) { float g; fnn_gauss_cdf_f(x[i], &g); y[i] = g; } break;
    case 8: for (i = 0; i < n; ++i) y[i] = fnn_sigmoidf(x[i]); break;
    case 10: { /* GELU's derivative as the backward computes it (d_y = 1) */
        float* one = y;
        for (i = 0; i < n; ++i) one[i] = 1.0f;
        i = fnn_gelu_bwd_vec_f(one, x, y, n);
        for (; i < n; ++i) {
            float g, c = fnn_gauss_cdf_f(x[i], &g);
            y[i] = c + x[i] * 0.39894228040143267794f * g;
        }
        break; }
    case 9:   /* the GELU forward x Phi(x) as the kernel computes it (the 16-lane forms
                 where the build has them) */
        for (i = fnn_gelu_fwd_vec_f(x, y, n); i < n; ++i) { float g; y[i] = x[i] * fnn_gauss_cdf_f(x[i], &g); }
        break;
    case 11:  /* the tanh GELU forward as the kernel computes it */
        i = fnn_gelut_fwd_vec_f(x, y, n);
        for (; i < n; ++i) {
            float v = x[i];
            y[i] = v * fnn_sigmoidf((float)(2 * 0.79788456080286535588) * (v + 0.044715f * v * v * v));
        }
        break;
    case 12: { /* its derivative as the backward computes it (d_y = 1) */
        float* one = y;
        for (i = 0; i < n; ++i) one[i] = 1.0f;
        i = fnn_gelut_bwd_vec_f(one, x, y, n);
        for (; i < n; ++i) {
            float v = x[i], v2 = v * v;
            float s = fnn_sigmoidf((float)(2 * 0.79788456080286535588) * (v + 0.044715f * v2 * v));
            y[i] = s + 2.0f * v * s * (1.0f - s) * 0.79788456080286535588f
                       * (1.0f + (float)(3 * 0.044715) * (v2 < 1e4f ? v2 : 1e4f));
        }
        break; }
    case 7:   /* the kernels' form: 16 lanes (AVX-512) or 8 (AVX2) where the build has
                 them, scalar tail */
        i = 0;
#if defined(FNN_HAVE_AVX512)
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, fnn_exp_nonpos_ps16(_mm512_loadu_ps(x + i)));
#endif
#if defined(FNN_HAVE_AVX2)
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fnn_exp_nonpos_ps(_mm256_loadu_ps(x + i)));
#endif
        for (; i < n; ++i) y[i] = fnn_expf_nonpos(x[i]);
        break;
    }
}
#endif
