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
 * Fast form, for vectors whose 16 lanes all have |x| < 3.9375: with a = |x| and
 * g(a) = a Phi(-a), y = max(x, 0) - g(a) -- for x < 0, x Phi(x) = -g; for x >= 0,
 * x Phi(x) = x (1 - Phi(-x)) = x - g -- so no select, no multiply, and no 1 - Phi
 * cancellation on the negative side.  g on [0, 3.9375) is 32 pieces of width 1/8 centred
 * at k/8, k = round(8a) = 0..31, each a degree-4 polynomial in c = 8a - k in [-1/2, 1/2]
 * (weighted least squares on the relative error; piece 0 has no constant term, so
 * g(0) = 0 and y(-0) = -0); fnn_gelu16_tab row j holds c^j's coefficients of the 32
 * pieces, and vpermt2ps picks each lane's from two registers.  8a is exact and k comes
 * from the 2^23 shifter (the low 5 bits of its float are k: all vpermt2ps reads), so c
 * is exact too: no rounding of the argument reaches g.  5 multiply-adds and 5 permutes,
 * where the erfcx form below takes ~23 multiply-adds and a division.  Relative error
 * ~2.3e-7 fitted and evaluated in float (tests/test_math.py: test_gelu_fwd).
 * General form, any x (a vector with a lane at |x| >= 3.9375, inf or NaN): x Phi(x) with
 * fnn_gauss_cdf_f's computation on 16 lanes (the same bounds).  Standard-normal-like
 * inputs take the fast form for all but ~0.1% of vectors. */
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
    6.250000000e-02f, 5.009776354e-02f, 3.807833791e-02f, 2.679808252e-02f,
    1.656312309e-02f, 7.610629778e-03f, 9.679840150e-05f, -5.907634273e-03f,
    -1.041442435e-02f, -1.350833196e-02f, -1.533269417e-02f, -1.607201621e-02f,
    -1.593365148e-02f, -1.513042953e-02f, -1.386577357e-02f, -1.232224330e-02f,
    -1.065398008e-02f, -8.982978761e-03f, -7.398722228e-03f, -5.960477050e-03f,
    -4.701388068e-03f, -3.633567831e-03f, -2.753442619e-03f, -2.046807669e-03f,
    -1.493205898e-03f, -1.069441088e-03f, -7.521722000e-04f, -5.196492421e-04f,
    -3.527195367e-04f, -2.352642041e-04f, -1.542266691e-04f, -9.938064613e-05f
  },
  {
    -6.233474705e-03f, -6.136648823e-03f, -5.852890201e-03f, -5.401706323e-03f,
    -4.813394975e-03f, -4.126048181e-03f, -3.381914925e-03f, -2.623577369e-03f,
    -1.890396466e-03f, -1.215601224e-03f, -6.242895033e-04f, -1.324577461e-04f,
    2.529626945e-04f, 5.332098808e-04f, 7.161672693e-04f, 8.144839667e-04f,
    8.436069475e-04f, 8.199541480e-04f, 7.593944902e-04f, 6.761283148e-04f,
    5.819934886e-04f, 4.861650814e-04f, 3.951789695e-04f, 3.131892299e-04f,
    2.423668193e-04f, 1.833574788e-04f, 1.357325527e-04f, 9.839054110e-05f,
    6.988313544e-05f, 4.865886149e-05f, 3.322827979e-05f, 2.226219112e-05f
  },
  {
    1.170069908e-08f, 6.410531932e-05f, 1.237688557e-04f, 1.750039810e-04f,
    2.146693732e-04f, 2.407523280e-04f, 2.525068703e-04f, 2.504381991e-04f,
    2.361456864e-04f, 2.120567660e-04f, 1.810961840e-04f, 1.463397202e-04f,
    1.106977215e-04f, 7.666445163e-05f, 4.615262515e-05f, 2.042097003e-05f,
    8.567941734e-08f, -1.480144147e-05f, -2.463141209e-05f, -3.009717693e-05f,
    -3.205463508e-05f, -3.140158879e-05f, -2.898428284e-05f, -2.553508057e-05f,
    -2.163986755e-05f, -1.773026452e-05f, -1.409414381e-05f, -1.089736088e-05f,
    -8.210752640e-06f, -6.037462299e-06f, -4.337432529e-06f, -3.047314976e-06f
  },
  {
    1.620553121e-05f, 1.567798790e-05f, 1.403528313e-05f, 1.148731189e-05f,
    8.286156117e-06f, 4.738139069e-06f, 1.164834998e-06f, -2.134873057e-06f,
    -4.916847047e-06f, -7.013802588e-06f, -8.345306014e-06f, -8.915624676e-06f,
    -8.801128388e-06f, -8.130851711e-06f, -7.063340036e-06f, -5.764125945e-06f,
    -4.386515229e-06f, -3.057708227e-06f, -1.871027621e-06f, -8.839576253e-07f,
    -1.209128442e-07f, 4.207717836e-07f, 7.632375514e-07f, 9.403032664e-07f,
    9.907066669e-07f, 9.518234378e-07f, 8.577152357e-07f, 7.354062745e-07f,
    6.051255355e-07f, 4.805186791e-07f, 3.696395083e-07f, 2.762117219e-07f
  }
};
#define FNN_GELU16_CUT 3.9375f

typedef struct { __m512 lo[5], hi[5]; } fnn_gelu16_t;

static inline void fnn_gelu16_load(fnn_gelu16_t* t) {
    for (int j = 0; j < 5; ++j) {
        t->lo[j] = _mm512_load_ps(fnn_gelu16_tab[j]);
        t->hi[j] = _mm512_load_ps(fnn_gelu16_tab[j] + 16);
    }
}

/* x Phi(x) for |x| = ax < FNN_GELU16_CUT (other lanes: garbage) */
static inline __m512 fnn_gelu16_fast(const fnn_gelu16_t* t, __m512 x, __m512 ax) {
    __m512 sh = _mm512_fmadd_ps(ax, _mm512_set1_ps(8.0f), _mm512_set1_ps(12582912.0f));
    __m512 k8 = _mm512_sub_ps(sh, _mm512_set1_ps(12582912.0f));        /* k = round(8a) */
    __m512 c = _mm512_fmsub_ps(ax, _mm512_set1_ps(8.0f), k8);          /* exact */
    __m512i k = _mm512_castps_si512(sh);
    __m512 g = _mm512_permutex2var_ps(t->lo[4], k, t->hi[4]);
    g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(t->lo[3], k, t->hi[3]));
    g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(t->lo[2], k, t->hi[2]));
    g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(t->lo[1], k, t->hi[1]));
    g = _mm512_fmadd_ps(g, c, _mm512_permutex2var_ps(t->lo[0], k, t->hi[0]));
    /* max(0, x): for x = -0 vmaxps returns its second operand, x, so y(-0) = -0 - 0 = -0 */
    return _mm512_sub_ps(_mm512_max_ps(_mm512_setzero_ps(), x), g);
}

/* Phi(x) for any x, and *gauss = exp(-x^2/2): fnn_gauss_cdf_f on 16 lanes (erfcx by
   s = 1/(1 + |x|/(2 sqrt 2)) and a polynomial in s - 1/2, times exp(-x^2/2); h below 0,
   1 - h above, NaN propagates) */
static inline __m512 fnn_phi16_any(__m512 x, __m512 ax, __m512* gauss) {
    __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f),
                             _mm512_fmadd_ps(ax, _mm512_set1_ps(0.35355339059327376f),
                                             _mm512_set1_ps(1.0f)));
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

static inline __m512 fnn_gelu16(const fnn_gelu16_t* t, __m512 x) {
    __m512 ax = _mm512_abs_ps(x);
    __mmask16 fast = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(FNN_GELU16_CUT), _CMP_LT_OQ);
    __m512 e;
    return fast == 0xffff ? fnn_gelu16_fast(t, x, ax) : _mm512_mul_ps(x, fnn_phi16_any(x, ax, &e));
}

/* GELU's derivative on 16 lanes (the backward), d = Phi(x) + x phi(x).  Fast form, every
 * |x| < 3.9375: d/dx of max(x, 0) - g(|x|) is G(a) for x < 0 and 1 - G(a) for x >= 0, with
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
    -9.973553568e-02f, -9.818626940e-02f, -9.364615381e-02f, -8.642723411e-02f,
    -7.701428235e-02f, -6.601675600e-02f, -5.411063507e-02f, -4.197725281e-02f,
    -3.024636209e-02f, -1.944963820e-02f, -9.988646023e-03f, -2.119329991e-03f,
    4.047407303e-03f, 8.531372063e-03f, 1.145869959e-02f, 1.303177234e-02f,
    1.349774282e-02f, 1.311929896e-02f, 1.215034164e-02f, 1.081807911e-02f,
    9.311916307e-03f, 7.778656203e-03f, 6.322872825e-03f, 5.011031870e-03f,
    3.877870040e-03f, 2.933717100e-03f, 2.171716420e-03f, 1.574243302e-03f,
    1.118124463e-03f, 7.785364287e-04f, 5.316476454e-04f, 3.561909543e-04f
  },
  {
    1.138791017e-08f, 1.540212659e-03f, 2.973655006e-03f, 4.204486497e-03f,
    5.157212727e-03f, 5.783473607e-03f, 6.065384950e-03f, 6.015154067e-03f,
    5.671199877e-03f, 5.091951694e-03f, 4.347729962e-03f, 3.512471681e-03f,
    2.656123601e-03f, 1.838605269e-03f, 1.105850446e-03f, 4.880632332e-04f,
    1.909498559e-09f, -3.571368288e-04f, -5.927911843e-04f, -7.236445090e-04f,
    -7.702840958e-04f, -7.542922394e-04f, -6.960019819e-04f, -6.130021065e-04f,
    -5.193562829e-04f, -4.254195665e-04f, -3.380919225e-04f, -2.613438992e-04f,
    -1.968652068e-04f, -1.447220275e-04f, -1.039455456e-04f, -7.300949801e-05f
  },
  {
    5.188860232e-04f, 5.008112057e-04f, 4.484420060e-04f, 3.670963342e-04f,
    2.648493100e-04f, 1.514861651e-04f, 3.725372881e-05f, -6.821365241e-05f,
    -1.571870671e-04f, -2.242889313e-04f, -2.669362584e-04f, -2.852527250e-04f,
    -2.816701017e-04f, -2.603019529e-04f, -2.262105263e-04f, -1.846849773e-04f,
    -1.406270167e-04f, -9.810724441e-05f, -6.011493315e-05f, -2.849478005e-05f,
    -4.034156518e-06f, 1.334624812e-05f, 2.434987982e-05f, 3.005522376e-05f,
    3.169418778e-05f, 3.047850259e-05f, 2.748192856e-05f, 2.357581798e-05f,
    1.940898073e-05f, 1.541970050e-05f, 1.186717600e-05f, 8.871857062e-06f
  },
  {
    -4.554694755e-08f, -9.013143426e-06f, -1.705904106e-05f, -2.338659579e-05f,
    -2.742305878e-05f, -2.887715345e-05f, -2.782564115e-05f, -2.468901585e-05f,
    -1.972830614e-05f, -1.379623063e-05f, -7.575019936e-06f, -1.700907660e-06f,
    3.321044005e-06f, 7.160812856e-06f, 9.675060028e-06f, 1.089097896e-05f,
    1.096987216e-05f, 1.015988710e-05f, 8.747170796e-06f, 7.012767583e-06f,
    5.200542091e-06f, 3.497909802e-06f, 2.028986046e-06f, 8.578244888e-07f,
    -1.506848202e-09f, -5.714063036e-07f, -8.967093095e-07f, -1.032266937e-06f,
    -1.033331955e-06f, -9.491666901e-07f, -8.196343515e-07f, -6.757637152e-07f
  }
};

typedef struct { __m512 lo[5], hi[5]; } fnn_gelu16_grad_t;

static inline void fnn_gelu16_grad_load(fnn_gelu16_grad_t* t) {
    for (int j = 0; j < 5; ++j) {
        t->lo[j] = _mm512_load_ps(fnn_gelu16_dtab[j]);
        t->hi[j] = _mm512_load_ps(fnn_gelu16_dtab[j] + 16);
    }
}

static inline __m512 fnn_gelu16_grad(const fnn_gelu16_grad_t* t, __m512 x) {
    __m512 ax = _mm512_abs_ps(x);
    __mmask16 fast = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(FNN_GELU16_CUT), _CMP_LT_OQ);
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    if (fast == 0xffff) {
        __m512 sh = _mm512_fmadd_ps(ax, _mm512_set1_ps(8.0f), _mm512_set1_ps(12582912.0f));
        __m512 k8 = _mm512_sub_ps(sh, _mm512_set1_ps(12582912.0f));
        __m512 c = _mm512_fmsub_ps(ax, _mm512_set1_ps(8.0f), k8);
        __m512i k = _mm512_castps_si512(sh);
        __m512 G = _mm512_permutex2var_ps(t->lo[4], k, t->hi[4]);
        G = _mm512_fmadd_ps(G, c, _mm512_permutex2var_ps(t->lo[3], k, t->hi[3]));
        G = _mm512_fmadd_ps(G, c, _mm512_permutex2var_ps(t->lo[2], k, t->hi[2]));
        G = _mm512_fmadd_ps(G, c, _mm512_permutex2var_ps(t->lo[1], k, t->hi[1]));
        G = _mm512_fmadd_ps(G, c, _mm512_permutex2var_ps(t->lo[0], k, t->hi[0]));
        return _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(1.0f), G), G);
    }
    __m512 e;
    __m512 cdf = fnn_phi16_any(x, ax, &e);
    return _mm512_fmadd_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.39894228040143267794f)), e, cdf);
}
#endif

#endif
