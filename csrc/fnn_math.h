/* Vectorisable transcendental functions for the hot loops.
 *
 * glibc's expf/tanhf/erff/log1pf are scalar calls the compiler cannot vectorise
 * (without -ffast-math, which would break NaN/inf semantics); these are branch-free
 * (selects, clamps and bit manipulation only), so loops calling them vectorise at the
 * build's vector width.  Each is within ~2 ulp of the correctly rounded float result
 * over its whole range, with libm's behaviour at +-0, +-inf and NaN (tests/test_math.py
 * checks dense grids and the extremes against float64 through activation._math_hook).
 * Where the avx2 build contracts a*b+c into an FMA the results only get better.
 * Double precision calls libm: float64 is the accuracy path, not the speed path. */
#ifndef FNN_MATH_H
#define FNN_MATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float fnn_pow2i(int32_t k) {   /* 2^k for k in [-126, 127] */
    int32_t bits = (k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* 2^k for k in [-126, 127]; unsigned arithmetic, so an out-of-range k (NaN input
   paths) gives a garbage float instead of undefined behaviour */
static inline float fnn_pow2u(int32_t k) {
    uint32_t bits = ((uint32_t)k + 127u) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline int32_t fnn_f2bits(float f) { int32_t i; memcpy(&i, &f, sizeof i); return i; }
static inline float fnn_bits2f(int32_t i) { float f; memcpy(&f, &i, sizeof f); return f; }

/* |x| and copysign by bit operations (no libm call, vectorises as and/or) */
static inline float fnn_absf(float x) { return fnn_bits2f(fnn_f2bits(x) & 0x7fffffff); }
static inline float fnn_copysignf(float mag, float sgn) {
    return fnn_bits2f((fnn_f2bits(mag) & 0x7fffffff) | (fnn_f2bits(sgn) & (int32_t)0x80000000));
}

static inline float fnn_expf(float x) {
    /* exp(x) = 2^n exp(r), r = x - n ln2 (Cody-Waite), exp(r) by the Cephes polynomial.
       The clamps keep n in [-150, 128]; 2^n is applied in two halves so subnormal
       results and overflow to inf come out of the multiplications, as in libm.
       NaN passes the clamps (comparisons are false) and propagates. */
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t ni = (int32_t)n;
    int32_t n1 = ni / 2;
    int32_t n2 = ni - n1;
    return y * fnn_pow2i(n1) * fnn_pow2i(n2);
}

/* exp(d) for d <= 0 or NaN: the shifted exponentials of softmax, log-softmax, cross-
   entropy and attention (d = x - rowmax).  Cheaper than fnn_expf: no overflow side, a
   degree-6 minimax polynomial for exp(r), r = d - n ln2 in [-ln2/2, ln2/2] (Cody-Waite,
   relative error 1.7e-8 before rounding), and 2^n added straight into the exponent
   bits of the result (exp(r) in [0.7, 1.42], n in [-126, 0]: the field stays normal).
   Below -87.3 (exp < 1.2e-38, the smallest normal float) the result is 0: a subnormal
   exp flushes to zero, invisible next to the row's maximum term exp(0) = 1 that every
   such sum contains.  exp(-inf) = 0, NaN propagates.  A slightly positive d (s - lse
   after rounding) is fine; d > 88 is outside the contract.  The polynomial
   1 + r + C2 r^2 + ... + C6 r^6 (the fit's r coefficient is 1) goes by Estrin's scheme:
   the exp loops are latency-bound, and its chain is 4 operations instead of 6.
   fnn_exp_nonpos_ps is the same computation on 8 lanes (AVX2+FMA), fnn_exp_nonpos_ps16
   on 16 (AVX-512); the scalar form serves the other builds and the loop tails. */
#define FNN_EXPNP_C2 4.999999106e-01f
#define FNN_EXPNP_C3 1.666641980e-01f
#define FNN_EXPNP_C4 4.166822508e-02f
#define FNN_EXPNP_C5 8.374815807e-03f
#define FNN_EXPNP_C6 1.383684576e-03f
#define FNN_EXPNP_LO (-87.3f)
static inline float fnn_expf_nonpos(float d) {
    int under = d < FNN_EXPNP_LO;
    float dc = under ? FNN_EXPNP_LO : d;
    float t = dc * 1.44269504088896341f + 12582912.0f;   /* round(d log2 e) + 1.5 * 2^23 */
    float n = t - 12582912.0f;
    float r = dc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    /* Estrin's scheme: a shorter dependency chain than Horner (the exp loops are
       latency-bound), same accuracy */
    float r2 = r * r;
    float a = FNN_EXPNP_C3 * r + FNN_EXPNP_C2;
    float b = FNN_EXPNP_C5 * r + FNN_EXPNP_C4;
    b = FNN_EXPNP_C6 * r2 + b;
    float p = (b * r2 + a) * r2 + (r + 1.0f);
    /* the low mantissa bits of t hold n (two's complement): t's exponent is fixed */
    float e = fnn_bits2f(fnn_f2bits(p) + (int32_t)((uint32_t)fnn_f2bits(t) << 23));
    return under ? 0.0f : e;
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FNN_HAVE_AVX2 1
static inline __m256 fnn_exp_nonpos_ps(__m256 d) {
    const __m256 lo = _mm256_set1_ps(FNN_EXPNP_LO);
    __m256 under = _mm256_cmp_ps(d, lo, _CMP_LT_OQ);          /* false for NaN */
    __m256 dc = _mm256_max_ps(lo, d);                          /* NaN d -> d */
    __m256 t = _mm256_fmadd_ps(dc, _mm256_set1_ps(1.44269504088896341f),
                               _mm256_set1_ps(12582912.0f));
    __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), dc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 a = _mm256_fmadd_ps(_mm256_set1_ps(FNN_EXPNP_C3), r, _mm256_set1_ps(FNN_EXPNP_C2));
    __m256 b = _mm256_fmadd_ps(_mm256_set1_ps(FNN_EXPNP_C5), r, _mm256_set1_ps(FNN_EXPNP_C4));
    b = _mm256_fmadd_ps(_mm256_set1_ps(FNN_EXPNP_C6), r2, b);
    __m256 p = _mm256_fmadd_ps(_mm256_fmadd_ps(b, r2, a), r2,
                               _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_add_epi32(_mm256_castps_si256(p),
                                 _mm256_slli_epi32(_mm256_castps_si256(t), 23));
    return _mm256_andnot_ps(under, _mm256_castsi256_ps(e));
}

/* the sum of a vector's 8 lanes, in the order (0+4)+(2+6) + (1+5)+(3+7) */
static inline float fnn_hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);                 /* lanes (0+4, 1+5, 2+6, 3+7) */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));        /* (0+4)+(2+6), (1+5)+(3+7) */
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#define FNN_HAVE_AVX512 1
/* fnn_exp_nonpos_ps on 16 lanes (the avx512 build): the same operations lane for lane,
   so the same bits as the 8-lane form and as fnn_expf_nonpos with FMA contraction */
static inline __m512 fnn_exp_nonpos_ps16(__m512 d) {
    const __m512 lo = _mm512_set1_ps(FNN_EXPNP_LO);
    __mmask16 under = _mm512_cmp_ps_mask(d, lo, _CMP_LT_OQ);  /* false for NaN */
    __m512 dc = _mm512_max_ps(lo, d);                          /* NaN d -> d */
    __m512 t = _mm512_fmadd_ps(dc, _mm512_set1_ps(1.44269504088896341f),
                               _mm512_set1_ps(12582912.0f));
    __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), dc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 a = _mm512_fmadd_ps(_mm512_set1_ps(FNN_EXPNP_C3), r, _mm512_set1_ps(FNN_EXPNP_C2));
    __m512 b = _mm512_fmadd_ps(_mm512_set1_ps(FNN_EXPNP_C5), r, _mm512_set1_ps(FNN_EXPNP_C4));
    b = _mm512_fmadd_ps(_mm512_set1_ps(FNN_EXPNP_C6), r2, b);
    __m512 p = _mm512_fmadd_ps(_mm512_fmadd_ps(b, r2, a), r2,
                               _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_add_epi32(_mm512_castps_si512(p),
                                 _mm512_slli_epi32(_mm512_castps_si512(t), 23));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_castsi512_ps(e));
}
#endif

static inline float fnn_expm1f(float x) {
    /* expm1(x) = 2^n (expm1(r) + 1) - 1 = 2 (t expm1(r) + (t - 1/2)),  t = 2^(n-1),
       r = x - n ln2 in [-ln2/2, ln2/2].  t - 1/2 is exact for the n the clamps allow
       (x in [-17.5, 89]: below, the float result is -1; above, +inf), so the only
       roundings are those of expm1(r) (a degree-8 Taylor polynomial, relative error
       < 1e-9 on that interval) and of the final fused step; n = 0 gives expm1(r)
       itself, exact at +-0.  The final doubling overflows to inf exactly when
       exp(x) does. */
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -17.5f ? -17.5f : xc;
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 2.48015873e-5f;            /* 1/8! */
    p = p * r + 1.98412698e-4f;          /* 1/7! */
    p = p * r + 1.38888889e-3f;          /* 1/6! */
    p = p * r + 8.33333333e-3f;          /* 1/5! */
    p = p * r + 4.16666667e-2f;          /* 1/4! */
    p = p * r + 1.66666667e-1f;          /* 1/3! */
    p = p * r + 0.5f;
    float em1 = (p * r) * r + r;         /* expm1(r) */
    /* n - 1 taken in float: NaN converts to INT_MIN (no integer overflow) and the
       garbage scale meets em1 = NaN, so NaN propagates */
    float t = fnn_pow2u((int32_t)(n - 1.0f));
    float y = 2.0f * (t * em1 + (t - 0.5f));
    return x == 0.0f ? x : y;            /* expm1(-0) = -0 */
}

static inline float fnn_tanhf(float x) {
    /* FreeBSD's split, on one expm1 evaluation: with a = |x|,
         a <  0.55:  tanh a = -u / (u + 2),    u = expm1(-2a) in (-0.67, 0]
         a >= 0.55:  tanh a = 1 - 2 / (U + 2), U = expm1(2a)
       Neither side cancels (1 - q is exact for q in [1/2, 1]) and a large U (or inf)
       saturates to 1; the sign comes back by copysign, so tanh(-0) = -0. */
    float a = fnn_absf(x);
    int small = a < 0.55f;
    float u = fnn_expm1f(small ? -2.0f * a : 2.0f * a);
    float q = (small ? -u : 2.0f) / (u + 2.0f);
    return fnn_copysignf(small ? q : 1.0f - q, x);
}

static inline float fnn_erff(float x) {
    /* Two minimax pieces on |x| (N. Juffa's erff, < 1 ulp with FMA): |x| <= 0.9277:
       x + x P(x^2); above: 1 - exp(Q(|x|)), Q ~ -x^2 + ..., saturating to 1.  Both are
       evaluated and one is selected, so the loop has no branch. */
    float t = fnn_absf(x);
    float s = x * x;
    float r = -1.72853470e-5f * t + 3.83197126e-4f;
    float u = -3.88396438e-3f * t + 2.42546219e-2f;
    r = r * s + u;
    r = r * t + -1.06777877e-1f;
    r = r * t + -6.34846687e-1f;
    r = r * t + -1.28717512e-1f;
    r = r * t - t;
    r = r < -104.0f ? -104.0f : r;        /* keeps inf * 0 out: exp saturates to 0 */
    float big = fnn_copysignf(1.0f - fnn_expf(r), x);
    float q = -5.96761703e-4f;
    q = q * s + 4.99119423e-3f;
    q = q * s + -2.67681349e-2f;
    q = q * s + 1.12819925e-1f;
    q = q * s + -3.76125336e-1f;
    q = q * s + 1.28379166e-1f;
    float small = q * x + x;
    return t > 0.927734375f ? big : small;   /* NaN: the comparison is false -> small = NaN */
}

static inline float fnn_log1pf(float x) {
    /* log1p(x) = log(u) + (x - (u - 1)) / u,  u = 1 + x rounded (the correction term
       restores what the rounding of u lost; |x| < 2^-24 gives x exactly).  log(u) by
       FreeBSD's logf reduction: u = 2^k m, m in [sqrt(2)/2, sqrt(2)), f = m - 1,
       s = f / (2 + f), log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)).
       Special values by selects: x = +-0 -> x, x = -1 -> -inf, x < -1 or NaN -> NaN,
       x = +inf -> +inf. */
    float u = 1.0f + x;
    float c = (x - (u - 1.0f)) / u;
    uint32_t iu = (uint32_t)fnn_f2bits(u) + (0x3f800000u - 0x3f3504f3u);
    int32_t k = (int32_t)(iu >> 23) - 0x7f;
    float m = fnn_bits2f((int32_t)((iu & 0x007fffffu) + 0x3f3504f3u));
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float w = z * z;
    float t1 = w * (0.40000972152f + w * 0.24279078841f);
    float t2 = z * (0.66666662693f + w * 0.28498786688f);
    float R = t2 + t1;
    float hfsq = 0.5f * f * f;
    float dk = (float)k;
    float lg = s * (hfsq + R) + (dk * 9.0580006145e-06f + c) - hfsq + f + dk * 6.9313812256e-01f;
    lg = x == 0.0f ? x : lg;
    lg = x == -1.0f ? -INFINITY : lg;
    lg = x < -1.0f ? NAN : lg;
    lg = x == INFINITY ? INFINITY : lg;
    return x != x ? x : lg;
}

static inline float fnn_exp_nonpos_f(float x) {
    /* exp(x) for x <= 0 where results below FLT_MIN may flush to 0 (softplus):
       fnn_expf's polynomial with one 2^n scaling instead of two, and
       no clamp -- below the cut the (garbage) value is replaced by 0, NaN propagates. */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = (p * r * r + r + 1.0f) * fnn_pow2u((int32_t)n);
    return x < -87.33654f ? 0.0f : y;
}

/* sigmoid(x) = 1 / (1 + exp(-x)) from e = exp(-|x|) in (0, 1]: 1 / (1 + e) for x >= 0,
   e / (1 + e) below -- no overflow side, so the exponential is fnn_expf_nonpos (2^n
   added into the exponent bits, a degree-6 polynomial by Estrin's scheme: ~20% fewer
   operations per element than fnn_exp_nonpos_f's Horner polynomial and 2^n multiply)
   and there is one division.  A clamp on the exp's upper side would let the compiler
   split the loop's lanes by range and emit a second, masked division for the saturated
   ones (GCC 12 does, at every vector width): that division was the bottleneck of SiLU
   and sigmoid.  sigmoid(x < -87.3) flushes to 0 (the exact value is below FLT_MIN);
   +-inf give 1 / 0, NaN propagates (x >= 0 is false: e * r = NaN). */
static inline float fnn_sigmoidf(float x) {
    float e = fnn_expf_nonpos(-fnn_absf(x));
    float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

static inline float fnn_gauss_cdf_f(float x, float* gauss) {
    /* Phi(x) = P(N(0,1) <= x), and *gauss = exp(-x^2/2), sharing that exponential:
       with z = |x|/sqrt 2, h = erfc(z)/2 = exp(-x^2/2) erfcx(z)/2 and erfcx(z) = s P(s - 1/2),
       s = 1/(1 + z/2), P a degree-8 weighted least-squares fit (relative error 4e-8 in
       exact arithmetic, ~3e-7 evaluated in float over z in [0, 10]).  Phi = h for x < 0
       (the tail keeps its relative accuracy: no 1 + erf cancellation) and 1 - h
       otherwise.  One exp (fnn_expf_nonpos: exp(-x^2/2) flushes to 0 past |x| = 13.2,
       where Phi is below FLT_MIN) and one division for both GELU's forward and backward. */
    /* s = 1/(1 + z/2), z = |x|/sqrt2; the coefficients carry the factor 1/2 of h */
    float s = 1.0f / (1.0f + fnn_absf(x) * 0.35355339059327376f);
    float u = s - 0.5f;
    float q = -2.953769686e-02f;
    q = q * u + 2.415038811e-02f;
    q = q * u + 4.766606300e-02f;
    q = q * u + -5.149861490e-02f;
    q = q * u + -8.593443540e-02f;
    q = q * u + 7.287039255e-02f;
    q = q * u + 2.794696353e-01f;
    q = q * u + 3.435804863e-01f;
    q = q * u + 2.553956857e-01f;
    float e = fnn_expf_nonpos(-0.5f * x * x);
    float h = e * (s * q);
    *gauss = e;
    return x < 0.0f ? h : 1.0f - h;
}

#if defined(FNN_HAVE_AVX512)
/* GELU forward on 16 lanes (the avx512 build), y = x Phi(x).
 *
 * Table form, for lanes with |x| < 3.9375: with a = |x| and
 * g(a) = a Phi(-a), y = max(x, 0) - g(a) -- for x < 0, x Phi(x) = -g; for x >= 0,
 * x Phi(x) = x (1 - Phi(-x)) = x - g -- so no select, no multiply, and no 1 - Phi
 * cancellation on the negative side.  g on [0, 3.9375) is 32 pieces of width 1/8 centred
 * at k/8, k = round(8a) = 0..31, each a degree-4 polynomial in c = a - k/8 in
 * [-1/16, 1/16] (weighted least squares on the relative error; piece 0 has no constant
 * term, so g(0) = 0 and y(-0) = -0); fnn_gelu16_tab row j holds c^j's coefficients of the
 * 32 pieces, and vpermt2ps picks each lane's from two registers.  k and c come exactly
 * from additions (fnn_gelu16_piece): no rounding of the argument reaches g.  4
 * multiply-adds, 5 permutes and 5 additions, where the erfcx form below takes ~23
 * multiply-adds and a division.  Relative error ~2.3e-7 fitted and ~3.4e-7 evaluated in
 * float (tests/test_math.py: test_gelu_fwd).
 * General form, any x (the lanes at |x| >= 3.9375, inf or NaN: fnn_activation.h's
 * fnn_tab16_split_map packs them and runs it on them alone): x Phi(x) with
 * fnn_gauss_cdf_f's computation on 16 lanes (the same bounds).  Standard-normal inputs
 * reach it in ~0.01% of lanes, 3 x N(0, 1) inputs in ~19%. */
static const float fnn_gelu16_tab[5][32] __attribute__((aligned(64))) = {
  {
    0.000000000e+00f, 5.628272146e-02f, 1.003234163e-01f, 1.326863319e-01f,
    1.542687714e-01f, 1.662409604e-01f, 1.699705124e-01f, 1.669385880e-01f,
    1.586552560e-01f, 1.465813369e-01f, 1.320622116e-01f, 1.162778661e-01f,
    1.002108008e-01f, 8.463207632e-02f, 7.010352612e-02f, 5.699317902e-02f,
    4.550026357e-02f, 3.568577766e-02f, 2.750506438e-02f, 2.083937824e-02f,
    1.552416291e-02f, 1.137267705e-02f, 8.194348775e-03f, 5.807895213e-03f,
    4.049694166e-03f, 2.778204158e-03f, 1.875331393e-03f, 1.245639753e-03f,
    8.142017759e-04f, 5.237426376e-04f, 3.315648064e-04f, 2.065853478e-04f
  },
  {
    5.000000000e-01f, 4.007821083e-01f, 3.046267033e-01f, 2.143846601e-01f,
    1.325049847e-01f, 6.088503823e-02f, 7.743872120e-04f, -4.726107419e-02f,
    -8.331539482e-02f, -1.080666557e-01f, -1.226615533e-01f, -1.285761297e-01f,
    -1.274692118e-01f, -1.210434362e-01f, -1.109261885e-01f, -9.857794642e-02f,
    -8.523184061e-02f, -7.186383009e-02f, -5.918977782e-02f, -4.768381640e-02f,
    -3.761110455e-02f, -2.906854264e-02f, -2.202754095e-02f, -1.637446135e-02f,
    -1.194564719e-02f, -8.555528708e-03f, -6.017377600e-03f, -4.157193936e-03f,
    -2.821756294e-03f, -1.882113633e-03f, -1.233813353e-03f, -7.950451691e-04f
  },
  {
    -3.989423811e-01f, -3.927455246e-01f, -3.745849729e-01f, -3.457092047e-01f,
    -3.080572784e-01f, -2.640670836e-01f, -2.164425552e-01f, -1.679089516e-01f,
    -1.209853739e-01f, -7.779847831e-02f, -3.995452821e-02f, -8.477295749e-03f,
    1.618961245e-02f, 3.412543237e-02f, 4.583470523e-02f, 5.212697387e-02f,
    5.399084464e-02f, 5.247706547e-02f, 4.860124737e-02f, 4.327221215e-02f,
    3.724758327e-02f, 3.111456521e-02f, 2.529145405e-02f, 2.004411072e-02f,
    1.551147643e-02f, 1.173487864e-02f, 8.686883375e-03f, 6.296994630e-03f,
    4.472520668e-03f, 3.114167135e-03f, 2.126609907e-03f, 1.424780232e-03f
  },
  {
    5.990757927e-06f, 3.282192349e-02f, 6.336965412e-02f, 8.960203826e-02f,
    1.099107191e-01f, 1.232651919e-01f, 1.292835176e-01f, 1.282243580e-01f,
    1.209065914e-01f, 1.085730642e-01f, 9.272124618e-02f, 7.492593676e-02f,
    5.667723343e-02f, 3.925219923e-02f, 2.363014407e-02f, 1.045553666e-02f,
    4.386786168e-05f, -7.578338031e-03f, -1.261128299e-02f, -1.540975459e-02f,
    -1.641197316e-02f, -1.607761346e-02f, -1.483995281e-02f, -1.307396125e-02f,
    -1.107961219e-02f, -9.077895433e-03f, -7.216201629e-03f, -5.579448771e-03f,
    -4.203905351e-03f, -3.091180697e-03f, -2.220765455e-03f, -1.560225268e-03f
  },
  {
    6.637785584e-02f, 6.421703845e-02f, 5.748851970e-02f, 4.705202952e-02f,
    3.394009545e-02f, 1.940741763e-02f, 4.771164153e-03f, -8.744440041e-03f,
    -2.013940550e-02f, -2.872853540e-02f, -3.418237343e-02f, -3.651839867e-02f,
    -3.604942188e-02f, -3.330396861e-02f, -2.893144079e-02f, -2.360985987e-02f,
    -1.796716638e-02f, -1.252437290e-02f, -7.663729135e-03f, -3.620690433e-03f,
    -4.952590098e-04f, 1.723481226e-03f, 3.126221010e-03f, 3.851482179e-03f,
    4.057934508e-03f, 3.898668801e-03f, 3.513201606e-03f, 3.012224101e-03f,
    2.478594193e-03f, 1.968204509e-03f, 1.514043426e-03f, 1.131363213e-03f
  }
};
#define FNN_GELU16_CUT 3.9375f

/* a 5 x 32 table in registers: row j's 32 coefficients in lo[j] (pieces 0-15), hi[j] */
typedef struct { __m512 lo[6], hi[6]; } fnn_tab16_t;   /* up to 6 rows (degree 5) */
typedef fnn_tab16_t fnn_gelu16_t;

static inline void fnn_tab16_load(const float (*tab)[32], int rows, fnn_tab16_t* t) {
    for (int j = 0; j < rows; ++j) {
        t->lo[j] = _mm512_load_ps(tab[j]);
        t->hi[j] = _mm512_load_ps(tab[j] + 16);
    }
}

/* The piece of a = ax < FNN_GELU16_CUT, k = round(8a) (the vpermt2ps index: its low 5
   bits), and *c = a - k/8 in [-1/16, 1/16], both exact and all by additions (the add
   pipes, not the FMA ones): a + 1.5 * 2^20 rounds a to a multiple of 1/8 (the float's
   spacing there), so its low mantissa bits are k; a - k/8 is exact by Sterbenz.  The
   tables' row j holds c^j's coefficients, fitted in 8a - k and scaled by 8^j (exact). */
static inline __m512i fnn_gelu16_piece(__m512 ax, __m512* c) {
    __m512 sh = _mm512_add_ps(ax, _mm512_set1_ps(1572864.0f));
    *c = _mm512_sub_ps(ax, _mm512_sub_ps(sh, _mm512_set1_ps(1572864.0f)));
    return _mm512_castps_si512(sh);
}

/* the degree-4 piece of |x| = ax < FNN_GELU16_CUT from the table held in lo / hi */
static inline __m512 fnn_tab16_eval(const __m512* lo, const __m512* hi, __m512 ax) {
    __m512 c;
    __m512i k = fnn_gelu16_piece(ax, &c);
    __m512 g = _mm512_permutex2var_ps(lo[4], k, hi[4]);
    g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(lo[3], k, hi[3]));
    g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(lo[2], k, hi[2]));
    g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(lo[1], k, hi[1]));
    return _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(lo[0], k, hi[0]));
}

/* x Phi(x) for |x| = ax < FNN_GELU16_CUT (other lanes: garbage) */
static inline __m512 fnn_gelu16_fast(const fnn_gelu16_t* t, __m512 x, __m512 ax) {
    __m512 g = fnn_tab16_eval(t->lo, t->hi, ax);
    /* max(0, x): for x = -0 vmaxps returns its second operand, x, so y(-0) = -0 - 0 = -0 */
    return _mm512_sub_ps(_mm512_max_ps(_mm512_setzero_ps(), x), g);
}

/* Phi(x) for any x, and *gauss = exp(-x^2/2): fnn_gauss_cdf_f on 16 lanes (erfcx by
   s = 1/(1 + |x|/(2 sqrt 2)) and a polynomial in s - 1/2, times exp(-x^2/2); h below 0,
   1 - h above, NaN propagates) */
static inline __m512 fnn_phi16_any(__m512 x, __m512 ax, __m512* gauss) {
    /* s = 1 / den, den in [1, inf]: vrcp14ps (relative error < 2^-14) and one Newton step
       (< 2^-27, below float's half ulp) -- the division's one 512-bit divider took ~16
       cycles a vector, the whole cost of GELU's general form on 3 x N(0, 1) inputs.  At
       den = inf, rcp14 gives 0 and the step keeps 0 (0 * (2 - inf * 0) would be NaN, so the
       step is written r + r (1 - den r) and a zero r is kept by the mask). */
    __m512 den = _mm512_fmadd_ps(ax, _mm512_set1_ps(0.35355339059327376f), _mm512_set1_ps(1.0f));
    __m512 r0 = _mm512_rcp14_ps(den);
    __m512 s = _mm512_mask_fmadd_ps(r0, _mm512_cmp_ps_mask(r0, _mm512_setzero_ps(), _CMP_NEQ_OQ),
                                    _mm512_fnmadd_ps(den, r0, _mm512_set1_ps(1.0f)), r0);
    __m512 u = _mm512_sub_ps(s, _mm512_set1_ps(0.5f));
    __m512 q = _mm512_set1_ps(-2.953769686e-02f);
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(2.415038811e-02f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(4.766606300e-02f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(-5.149861490e-02f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(-8.593443540e-02f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(7.287039255e-02f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(2.794696353e-01f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(3.435804863e-01f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(2.553956857e-01f));
    __m512 e = fnn_exp_nonpos_ps16(_mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-0.5f)), x));
    __m512 h = _mm512_mul_ps(e, _mm512_mul_ps(s, q));
    *gauss = e;
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(1.0f), h), h);
}

/* The GELUs' and Tanh's 16-lane forms come in two halves, applied lane by lane by
   fnn_activation.h's fnn_tab16_split_map: the table form (name_tab, right for every lane
   with |x| below the table's cut, garbage elsewhere) and the general form (name_gen, right
   for any x, including inf and NaN). */
static inline __m512 fnn_gelu16_tab16(const fnn_gelu16_t* t, __m512 x) {
    return fnn_gelu16_fast(t, x, _mm512_abs_ps(x));
}
static inline __m512 fnn_gelu16_gen(__m512 x) {
    __m512 e;
    return _mm512_mul_ps(x, fnn_phi16_any(x, _mm512_abs_ps(x), &e));
}

/* GELU's derivative on 16 lanes (the backward), d = Phi(x) + x phi(x).  Table form, the
 * lanes with |x| < 3.9375: d/dx of max(x, 0) - g(|x|) is G(a) for x < 0 and 1 - G(a) for x >= 0, with
 * G(a) = g'(a) = Phi(-a) - a phi(a), by the same 32 pieces (degree 4, fitted on the error
 * relative to max(|G|, 1e-3): G crosses zero at a = 0.7518, GELU's minimum, where only an
 * absolute error means anything -- ~4e-8 there, relative ~2.6e-7 elsewhere).  General form:
 * Phi + x exp(-x^2/2) / sqrt(2 pi) from fnn_phi16_any, as fnn_gauss_cdf_f's users do. */
static const float fnn_gelu16_dtab[5][32] __attribute__((aligned(64))) = {
  {
    5.000000000e-01f, 4.007820785e-01f, 3.046266437e-01f, 2.143845707e-01f,
    1.325048804e-01f, 6.088492274e-02f, 7.742783055e-04f, -4.726117104e-02f,
    -8.331546932e-02f, -1.080667078e-01f, -1.226615831e-01f, -1.285761446e-01f,
    -1.274691969e-01f, -1.210434064e-01f, -1.109261513e-01f, -9.857790172e-02f,
    -8.523180336e-02f, -7.186378539e-02f, -5.918974429e-02f, -4.768379033e-02f,
    -3.761108592e-02f, -2.906852774e-02f, -2.202753350e-02f, -1.637445763e-02f,
    -1.194564719e-02f, -8.555531502e-03f, -6.017381325e-03f, -4.157197662e-03f,
    -2.821760252e-03f, -1.882117242e-03f, -1.233816496e-03f, -7.950477302e-04f
  },
  {
    -7.978842854e-01f, -7.854901552e-01f, -7.491692305e-01f, -6.914178729e-01f,
    -6.161142588e-01f, -5.281340480e-01f, -4.328850806e-01f, -3.358180225e-01f,
    -2.419708967e-01f, -1.555971056e-01f, -7.990916818e-02f, -1.695463993e-02f,
    3.237925842e-02f, 6.825097650e-02f, 9.166959673e-02f, 1.042541787e-01f,
    1.079819426e-01f, 1.049543917e-01f, 9.720273316e-02f, 8.654463291e-02f,
    7.449533045e-02f, 6.222924963e-02f, 5.058298260e-02f, 4.008825496e-02f,
    3.102296032e-02f, 2.346973680e-02f, 1.737373136e-02f, 1.259394642e-02f,
    8.944995701e-03f, 6.228291430e-03f, 4.253181163e-03f, 2.849527635e-03f
  },
  {
    7.288262509e-07f, 9.857361019e-02f, 1.903139204e-01f, 2.690871358e-01f,
    3.300616145e-01f, 3.701423109e-01f, 3.881846368e-01f, 3.849698603e-01f,
    3.629567921e-01f, 3.258849084e-01f, 2.782547176e-01f, 2.247981876e-01f,
    1.699919105e-01f, 1.176707372e-01f, 7.077442855e-02f, 3.123604693e-02f,
    1.222079078e-07f, -2.285675704e-02f, -3.793863580e-02f, -4.631324857e-02f,
    -4.929818213e-02f, -4.827470332e-02f, -4.454412684e-02f, -3.923213482e-02f,
    -3.323880211e-02f, -2.722685225e-02f, -2.163788304e-02f, -1.672600955e-02f,
    -1.259937324e-02f, -9.262209758e-03f, -6.652514916e-03f, -4.672607873e-03f
  },
  {
    2.656696439e-01f, 2.564153373e-01f, 2.296023071e-01f, 1.879533231e-01f,
    1.356028467e-01f, 7.756091654e-02f, 1.907390915e-02f, -3.492539003e-02f,
    -8.047977835e-02f, -1.148359329e-01f, -1.366713643e-01f, -1.460493952e-01f,
    -1.442150921e-01f, -1.332745999e-01f, -1.158197895e-01f, -9.455870837e-02f,
    -7.200103253e-02f, -5.023090914e-02f, -3.077884577e-02f, -1.458932739e-02f,
    -2.065488137e-03f, 6.833279040e-03f, 1.246713847e-02f, 1.538827457e-02f,
    1.622742414e-02f, 1.560499333e-02f, 1.407074742e-02f, 1.207081880e-02f,
    9.937398136e-03f, 7.894886658e-03f, 6.075994112e-03f, 4.542390816e-03f
  },
  {
    -1.865602972e-04f, -3.691783547e-02f, -6.987383217e-02f, -9.579149634e-02f,
    -1.123248488e-01f, -1.182808205e-01f, -1.139738262e-01f, -1.011262089e-01f,
    -8.080714196e-02f, -5.650936067e-02f, -3.102728166e-02f, -6.966917776e-03f,
    1.360299625e-02f, 2.933068946e-02f, 3.962904587e-02f, 4.460944980e-02f,
    4.493259639e-02f, 4.161489755e-02f, 3.582841158e-02f, 2.872429602e-02f,
    2.130142041e-02f, 1.432743855e-02f, 8.310726844e-03f, 3.513649106e-03f,
    -6.172050234e-06f, -2.340480220e-03f, -3.672921332e-03f, -4.228165373e-03f,
    -4.232527688e-03f, -3.887786763e-03f, -3.357222304e-03f, -2.767928177e-03f
  }
};

typedef fnn_tab16_t fnn_gelu16_grad_t;

/* G blended by the sign: G for x < 0, 1 - G otherwise (the table form of the derivative,
   fnn_gelu16_dtab here and fnn_gelut16_dtab below) */
static inline __m512 fnn_gelu16_grad_tab16(const fnn_gelu16_grad_t* t, __m512 x) {
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 G = fnn_tab16_eval(t->lo, t->hi, _mm512_abs_ps(x));
    return _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(1.0f), G), G);
}
static inline __m512 fnn_gelu16_grad_gen(__m512 x) {
    __m512 e;
    __m512 cdf = fnn_phi16_any(x, _mm512_abs_ps(x), &e);
    return _mm512_fmadd_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.39894228040143267794f)), e, cdf);
}

/* The tanh GELU (GPT-2's) on 16 lanes: y = x sigmoid(2u), u = k (x + 0.044715 x^3).  The
 * same scheme as fnn_gelu16: with a = |x| and g(a) = a sigmoid(-2u(a)), y = max(x, 0) -
 * g(a) (u is odd), g on [0, 3.9375) in 32 degree-4 pieces of width 1/8 (weighted least
 * squares on the relative error; piece 0 without a constant term), and the derivative
 * 1 - G(a) (x >= 0) or G(a) (x < 0), G = g', fitted on the error relative to max(|G|,
 * 1e-3).  Evaluated in float over |x| < 3.9375: forward relative error <= 7e-7 (the
 * per-lane exp form it replaces: 1.4e-6), derivative 2.4e-7 (5e-5 there, near GELU's
 * minimum).  A vector with a lane at |x| >= 3.9375, inf or NaN takes the exp form, which
 * is the scalar loop's (fnn_activation_impl.h) on 16 lanes.  The tables come from
 * tools/gelu_tanh_tables.py. */
static const float fnn_gelut16_tab[5][32] __attribute__((aligned(64))) = {
  {
    0.000000000e+00f, 5.628279969e-02f, 1.003246531e-01f, 1.326922327e-01f,
    1.542859972e-01f, 1.662788540e-01f, 1.700394452e-01f, 1.670473218e-01f,
    1.588080078e-01f, 1.467752159e-01f, 1.322858036e-01f, 1.165114492e-01f,
    1.004284248e-01f, 8.480502665e-02f, 7.020461559e-02f, 5.700096488e-02f,
    4.540230706e-02f, 3.548039868e-02f, 2.720133029e-02f, 2.045540698e-02f,
    1.508426573e-02f, 1.090391167e-02f, 7.723144256e-03f, 5.357268266e-03f,
    3.637392074e-03f, 2.415874973e-03f, 1.568627195e-03f, 9.950285312e-04f,
    6.161976489e-04f, 3.722736146e-04f, 2.192520624e-04f, 1.257881813e-04f
  },
  {
    5.000000000e-01f, 4.007846117e-01f, 3.046459556e-01f, 2.144443840e-01f,
    1.326301843e-01f, 6.109204888e-02f, 1.061826944e-03f, -4.691780731e-02f,
    -8.296402544e-02f, -1.077716872e-01f, -1.224926114e-01f, -1.285936534e-01f,
    -1.277108043e-01f, -1.215145215e-01f, -1.115970090e-01f, -9.938778728e-02f,
    -8.609928936e-02f, -7.270050794e-02f, -5.991455913e-02f, -4.823448882e-02f,
    -3.795159236e-02f, -2.919086069e-02f, -2.194892801e-02f, -1.613099873e-02f,
    -1.158416737e-02f, -8.125534281e-03f, -5.564343184e-03f, -3.718031803e-03f,
    -2.422640566e-03f, -1.538378536e-03f, -9.513571276e-04f, -5.725679803e-04f
  },
  {
    -3.989423811e-01f, -3.927154839e-01f, -3.744745553e-01f, -3.454948664e-01f,
    -3.077535629e-01f, -2.637283206e-01f, -2.161537707e-01f, -1.677669734e-01f,
    -1.210740879e-01f, -7.816454023e-02f, -4.059050232e-02f, -9.317461401e-03f,
    1.525904331e-02f, 3.324403986e-02f, 4.513933510e-02f, 5.172426254e-02f,
    5.393743515e-02f, 5.277162045e-02f, 4.918898642e-02f, 4.405959323e-02f,
    3.812263533e-02f, 3.196780384e-02f, 2.603298239e-02f, 2.061420120e-02f,
    1.588383131e-02f, 1.191346813e-02f, 8.698474616e-03f, 6.181719713e-03f,
    4.274752922e-03f, 2.875237959e-03f, 1.880126190e-03f, 1.194573706e-03f
  },
  {
    5.990881164e-06f, 3.298105672e-02f, 6.363682449e-02f, 8.988679200e-02f,
    1.101040170e-01f, 1.232674047e-01f, 1.290334314e-01f, 1.277213544e-01f,
    1.202184707e-01f, 1.078254431e-01f, 9.206966311e-02f, 7.451805472e-02f,
    5.661590025e-02f, 3.956973180e-02f, 2.428128570e-02f, 1.132970583e-02f,
    9.923645994e-04f, -6.708526053e-03f, -1.194615755e-02f, -1.502668392e-02f,
    -1.633141562e-02f, -1.626792736e-02f, -1.523192041e-02f, -1.358001307e-02f,
    -1.161269005e-02f, -9.566091001e-03f, -7.611120585e-03f, -5.858191755e-03f,
    -4.365904257e-03f, -3.151945770e-03f, -2.204654040e-03f, -1.493923482e-03f
  },
  {
    6.670815498e-02f, 6.451044232e-02f, 5.763297901e-02f, 4.698584974e-02f,
    3.365241736e-02f, 1.894708723e-02f, 4.241308197e-03f, -9.208230302e-03f,
    -2.040372230e-02f, -2.870012261e-02f, -3.383708745e-02f, -3.591094166e-02f,
    -3.530063853e-02f, -3.256868571e-02f, -2.835869230e-02f, -2.330675721e-02f,
    -1.797660813e-02f, -1.282122359e-02f, -8.168091998e-03f, -4.222361371e-03f,
    -1.081435010e-03f, 1.244609477e-03f, 2.810847014e-03f, 3.716153326e-03f,
    4.084072541e-03f, 4.046590999e-03f, 3.731151810e-03f, 3.251087153e-03f,
    2.699504374e-03f, 2.146486659e-03f, 1.639226684e-03f, 1.204464352e-03f
  }
};
static const float fnn_gelut16_dtab[5][32] __attribute__((aligned(64))) = {
  {
    5.000000000e-01f, 4.007845819e-01f, 3.046458960e-01f, 2.144443095e-01f,
    1.326300949e-01f, 6.109196320e-02f, 1.061743940e-03f, -4.691788182e-02f,
    -8.296408504e-02f, -1.077717245e-01f, -1.224926338e-01f, -1.285936534e-01f,
    -1.277107894e-01f, -1.215144992e-01f, -1.115969792e-01f, -9.938775748e-02f,
    -8.609925956e-02f, -7.270047814e-02f, -5.991453305e-02f, -4.823446646e-02f,
    -3.795157745e-02f, -2.919084951e-02f, -2.194892243e-02f, -1.613099687e-02f,
    -1.158416644e-02f, -8.125535212e-03f, -5.564345513e-03f, -3.718034830e-03f,
    -2.422643825e-03f, -1.538381679e-03f, -9.513598634e-04f, -5.725701922e-04f
  },
  {
    -7.978844643e-01f, -7.854301333e-01f, -7.489484549e-01f, -6.909892559e-01f,
    -6.155068278e-01f, -5.274565220e-01f, -4.323075116e-01f, -3.355340660e-01f,
    -2.421483397e-01f, -1.563292295e-01f, -8.118112385e-02f, -1.863498427e-02f,
    3.051809780e-02f, 6.648816168e-02f, 9.027881175e-02f, 1.034487113e-01f,
    1.078750864e-01f, 1.055434644e-01f, 9.837818891e-02f, 8.811938018e-02f,
    7.624542713e-02f, 6.393572688e-02f, 5.206605047e-02f, 4.122845083e-02f,
    3.176767752e-02f, 2.382692695e-02f, 1.739691943e-02f, 1.236339845e-02f,
    8.549459279e-03f, 5.750428420e-03f, 3.760207677e-03f, 2.389108064e-03f
  },
  {
    -1.267301377e-05f, 9.904076904e-02f, 1.910965145e-01f, 2.699149549e-01f,
    3.306093216e-01f, 3.701131940e-01f, 3.873974979e-01f, 3.834252357e-01f,
    3.608608842e-01f, 3.236170411e-01f, 2.762835622e-01f, 2.235679328e-01f,
    1.698108763e-01f, 1.186347306e-01f, 7.274537534e-02f, 3.387931362e-02f,
    2.866655122e-03f, -2.022850886e-02f, -3.592839092e-02f, -4.515387863e-02f,
    -4.905094951e-02f, -4.884392023e-02f, -4.572101310e-02f, -4.075279087e-02f,
    -3.484103084e-02f, -2.869418636e-02f, -2.282475494e-02f, -1.756360941e-02f,
    -1.308608335e-02f, -9.444751777e-03f, -6.604157854e-03f, -4.473613109e-03f
  },
  {
    2.678143978e-01f, 2.575471699e-01f, 2.301465571e-01f, 1.876653582e-01f,
    1.344403327e-01f, 7.571839541e-02f, 1.696076989e-02f, -3.676718101e-02f,
    -8.152068406e-02f, -1.147058234e-01f, -1.352753788e-01f, -1.436072886e-01f,
    -1.412094235e-01f, -1.303244978e-01f, -1.135212630e-01f, -9.334045649e-02f,
    -7.203540206e-02f, -5.141811818e-02f, -3.279989958e-02f, -1.700343378e-02f,
    -4.420763813e-03f, 4.905357957e-03f, 1.119299699e-02f, 1.483577304e-02f,
    1.632641815e-02f, 1.619190723e-02f, 1.494154148e-02f, 1.302861888e-02f,
    1.082591899e-02f, 8.614401333e-03f, 6.583596580e-03f, 4.841380753e-03f
  },
  {
    -9.600964375e-03f, -3.775968775e-02f, -7.136871666e-02f, -9.759294242e-02f,
    -1.139713824e-01f, -1.192769557e-01f, -1.139930710e-01f, -1.000706479e-01f,
    -7.877442241e-02f, -5.397133157e-02f, -2.860988490e-02f, -5.281084683e-03f,
    1.413637679e-02f, 2.859427966e-02f, 3.782627732e-02f, 4.218774289e-02f,
    4.244615883e-02f, 3.957503662e-02f, 3.458547965e-02f, 2.840925939e-02f,
    2.183148451e-02f, 1.546247210e-02f, 9.735889733e-03f, 4.922166001e-03f,
    1.149670919e-03f, -1.570377499e-03f, -3.317127237e-03f, -4.232415929e-03f,
    -4.493396729e-03f, -4.287213087e-03f, -3.794462187e-03f, -3.159110434e-03f
  }
};

/* sigmoid(z) on 16 lanes as fnn_sigmoidf: e = exp(-|z|), 1 / (1 + e) or e / (1 + e) */
static inline __m512 fnn_sigmoid16(__m512 z) {
    __m512 e = fnn_exp_nonpos_ps16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(z)));
    __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    __mmask16 pos = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_mask_blend_ps(pos, _mm512_mul_ps(e, r), r);
}

/* tanh on 16 lanes without a division (the avx512 build's Tanh forward): with a = |x|,
   a < 7.875: the piece k = round(4a) of fnn_tanh16_tab (degree 5 in a - k/4), times a
   for pieces 0 and 1 (a < 0.375), which hold tanh(a) / a (no constant term to cancel
   against the slope, and relative accuracy down to subnormal a, by one masked multiply
   instead of a separate odd polynomial below 0.375); past that, inf or NaN:
   1 - 2e(1 - e), e = exp(-2a) < 1.5e-7 (the series of 1 - 2e / (1 + e) to within 2e^3),
   only when a vector has such a lane.  The sign comes back from x, so tanh(-0) = -0.
   Fitted by tools/tanh_tables.py: < 1.6 ulp evaluated in float32 (the generic form: one
   expm1 and one division, < 2.5 ulp).  The division took most of a Xeon's time: 4M
   floats in 1.14 ms on 2 threads, torch 0.60. */
static const float fnn_tanh16_tab[6][32] __attribute__((aligned(64))) = {
  {
    1.000000000e+00f, 9.796746373e-01f, 4.621171653e-01f, 6.351489425e-01f,
    7.615941763e-01f, 8.482836485e-01f, 9.051482677e-01f, 9.413755536e-01f,
    9.640275836e-01f, 9.780260921e-01f, 9.866142869e-01f, 9.918597341e-01f,
    9.950547814e-01f, 9.969976544e-01f, 9.981778860e-01f, 9.988944530e-01f,
    9.993293285e-01f, 9.995931387e-01f, 9.997532368e-01f, 9.998503327e-01f,
    9.999092221e-01f, 9.999449253e-01f, 9.999666214e-01f, 9.999797344e-01f,
    9.999877214e-01f, 9.999925494e-01f, 9.999954700e-01f, 9.999972582e-01f,
    9.999983311e-01f, 9.999989867e-01f, 9.999994040e-01f, 9.999996424e-01f
  },
  {
    -7.199907515e-08f, -1.586391926e-01f, 7.864477634e-01f, 5.965858102e-01f,
    4.199743271e-01f, 2.804148495e-01f, 1.807066351e-01f, 1.138120964e-01f,
    7.065082341e-02f, 4.346491769e-02f, 2.659222670e-02f, 1.621428691e-02f,
    9.866037406e-03f, 5.995715037e-03f, 3.640884766e-03f, 2.209892264e-03f,
    1.340950723e-03f, 8.135423996e-04f, 4.935173783e-04f, 2.993624948e-04f,
    1.815832366e-04f, 1.101397356e-04f, 6.680456863e-05f, 4.051955329e-05f,
    2.457654773e-05f, 1.490650175e-05f, 9.041276826e-06f, 5.483821496e-06f,
    3.326109436e-06f, 2.017388624e-06f, 1.223608592e-06f, 7.421562600e-07f
  },
  {
    -3.333275616e-01f, -2.863494456e-01f, -3.634254336e-01f, -3.789207041e-01f,
    -3.198520839e-01f, -2.378730327e-01f, -1.635670960e-01f, -1.071401462e-01f,
    -6.810932606e-02f, -4.250974581e-02f, -2.623619139e-02f, -1.608223654e-02f,
    -9.817205369e-03f, -5.977686495e-03f, -3.634233726e-03f, -2.207438461e-03f,
    -1.340044779e-03f, -8.132074145e-04f, -4.933931632e-04f, -2.993162198e-04f,
    -1.815658470e-04f, -1.101331218e-04f, -6.680200750e-05f, -4.051853102e-05f,
    -2.457612391e-05f, -1.490631712e-05f, -9.041191333e-06f, -5.483779205e-06f,
    -3.326087381e-06f, -2.017376573e-06f, -1.223601771e-06f, -7.421523378e-07f
  },
  {
    -1.855572191e-04f, 1.175974384e-01f, -9.421861172e-02f, 4.180517793e-02f,
    1.036054194e-01f, 1.083122715e-01f, 8.781711012e-02f, 6.292191893e-02f,
    4.210912809e-02f, 2.708742768e-02f, 1.702098735e-02f, 1.054660138e-02f,
    6.480003241e-03f, 3.961183131e-03f, 2.413993003e-03f, 1.468373230e-03f,
    8.921660483e-04f, 5.416978966e-04f, 3.287669388e-04f, 1.994847116e-04f,
    1.210221017e-04f, 7.341410674e-05f, 4.453176734e-05f, 2.701130143e-05f,
    1.638370486e-05f, 9.937411960e-06f, 6.027415111e-06f, 3.655838327e-06f,
    2.217387419e-06f, 1.344917223e-06f, 8.157346088e-07f, 4.947688126e-07f
  },
  {
    1.361317039e-01f, 8.781662583e-02f, 1.636056751e-01f, 9.972685575e-02f,
    2.811319195e-02f, -1.226414461e-02f, -2.481295541e-02f, -2.347696945e-02f,
    -1.789437048e-02f, -1.233792864e-02f, -8.063067682e-03f, -5.111625884e-03f,
    -3.183508292e-03f, -1.961893635e-03f, -1.201444422e-03f, -7.329626824e-04f,
    -4.461323551e-04f, -2.711708366e-04f, -1.646862511e-04f, -9.996560402e-05f,
    -6.066104106e-05f, -3.680339069e-05f, -2.232628867e-05f, -1.354301548e-05f,
    -8.214781701e-06f, -4.982710379e-06f, -3.022239298e-06f, -1.833106580e-06f,
    -1.111845563e-06f, -6.743709946e-07f, -4.090287575e-07f, -2.480878436e-07f
  },
  {
    -1.987816393e-02f, -6.312026829e-02f, -2.581673302e-02f, -6.347954273e-02f,
    -4.632626846e-02f, -1.935124584e-02f, -2.771080472e-03f, 3.645012854e-03f,
    4.764713347e-03f, 3.985986579e-03f, 2.859432250e-03f, 1.906016725e-03f,
    1.221334795e-03f, 7.652744534e-04f, 4.732838715e-04f, 2.904413850e-04f,
    1.774106204e-04f, 1.080656948e-04f, 6.571493577e-05f, 3.992062193e-05f,
    2.423611659e-05f, 1.470839197e-05f, 8.924217582e-06f, 5.413974122e-06f,
    3.284160584e-06f, 1.992076477e-06f, 1.208333401e-06f, 7.329034588e-07f,
    4.445471973e-07f, 2.696157253e-07f, 1.635483500e-07f, 9.917614818e-08f
  }
};
#define FNN_TANH16_SMALL 0.375f
#define FNN_TANH16_CUT 7.875f
/* the degree-5 piece of 0 <= ax < FNN_TANH16_CUT: k = round(4 ax) (the vpermt2ps index, its
   low 5 bits) and c = ax - k/4 in [-1/8, 1/8], both exact (ax + 1.5 * 2^21 rounds ax to a
   multiple of 1/4, the float's spacing there; the difference is exact by Sterbenz) */
static inline __m512 fnn_tanh16_piece(const fnn_tab16_t* t, __m512 ax) {
    __m512 sh = _mm512_add_ps(ax, _mm512_set1_ps(3145728.0f));
    __m512 c = _mm512_sub_ps(ax, _mm512_sub_ps(sh, _mm512_set1_ps(3145728.0f)));
    __m512i k = _mm512_castps_si512(sh);
    __m512 g = _mm512_permutex2var_ps(t->lo[5], k, t->hi[5]);
    for (int j = 4; j >= 0; --j)
        g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(t->lo[j], k, t->hi[j]));
    return g;
}
static inline __m512 fnn_tanh16_tab16(const fnn_tab16_t* t, __m512 x) {
    __m512 ax = _mm512_abs_ps(x);
    __m512 r = fnn_tanh16_piece(t, ax);
    /* pieces 0 and 1 hold tanh(a) / a */
    r = _mm512_mask_mul_ps(r, _mm512_cmp_ps_mask(ax, _mm512_set1_ps(FNN_TANH16_SMALL),
                                                 _CMP_LT_OQ), r, ax);
    return _mm512_or_ps(r, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));
}
static inline __m512 fnn_tanh16_gen(__m512 x) {   /* |x| >= FNN_TANH16_CUT, inf, NaN */
    __m512 e = fnn_exp_nonpos_ps16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), _mm512_abs_ps(x)));
    __m512 big = _mm512_fnmadd_ps(_mm512_add_ps(e, e), _mm512_sub_ps(_mm512_set1_ps(1.0f), e),
                                  _mm512_set1_ps(1.0f));              /* NaN: NaN */
    return _mm512_or_ps(big, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));
}
typedef fnn_tab16_t fnn_gelut16_t;

static inline __m512 fnn_gelut16_tab16(const fnn_gelut16_t* t, __m512 x) {
    return _mm512_sub_ps(_mm512_max_ps(_mm512_setzero_ps(), x),
                         fnn_tab16_eval(t->lo, t->hi, _mm512_abs_ps(x)));
}
static inline __m512 fnn_gelut16_gen(__m512 x) {
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 z2 = _mm512_mul_ps(_mm512_set1_ps((float)(2 * 0.79788456080286535588)),
                              _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
    return _mm512_mul_ps(x, fnn_sigmoid16(z2));
}

static inline __m512 fnn_gelut16_grad_gen(__m512 x) {
    /* s + 2 x s (1 - s) k (1 + 3c min(x^2, 1e4)), s = sigmoid(2u) */
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 z2 = _mm512_mul_ps(_mm512_set1_ps((float)(2 * 0.79788456080286535588)),
                              _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), _mm512_mul_ps(x2, x), x));
    __m512 s = fnn_sigmoid16(z2);
    __m512 q = _mm512_fmadd_ps(_mm512_set1_ps((float)(3 * 0.044715)),
                               _mm512_min_ps(x2, _mm512_set1_ps(1e4f)), _mm512_set1_ps(1.0f));
    __m512 w = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f), x), s),
                             _mm512_sub_ps(_mm512_set1_ps(1.0f), s));
    return _mm512_fmadd_ps(_mm512_mul_ps(w, _mm512_set1_ps(0.79788456080286535588f)), q, s);
}
#endif

#endif
