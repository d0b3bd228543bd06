/* Vectorisable transcendental functions for the hot loops.
 *
 * glibc's expf is a scalar call the compiler cannot vectorise (without -ffast-math,
 * which would break NaN/inf semantics); these are branch-free (selects only), so
 * loops calling them vectorise at the build's vector width.  Accuracy: fnn_expf is
 * within 2 ulp of expf over its whole range, with the same inf/0/NaN behaviour
 * (tests/test_math.py checks a dense grid against float64).
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

static inline double fnn_exp(double x) { return exp(x); }

#endif
