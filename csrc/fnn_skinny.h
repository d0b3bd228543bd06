/* Dot products of a few float rows with one weight row (the LM head / Linear-layout
 * weights of a decode step): out[r] = dot(x + r*K, w), r < nr.  Four rows share each
 * loaded weight vector.  Written with AVX2/FMA intrinsics where the variant has them
 * (gcc does not vectorise four interleaved 8-lane accumulations by itself), plain C
 * otherwise; 8 partial sums per row, added in a fixed order. */
#ifndef FNN_SKINNY_H
#define FNN_SKINNY_H
#include <stddef.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline float fnn_hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);                 /* lanes (0+4, 1+5, 2+6, 3+7) */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));        /* (0+4)+(2+6), (1+5)+(3+7) */
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static inline void fnn_dot_rows_f32(const float *x, ptrdiff_t K, const float *w, int nr,
                                    float *out) {
    ptrdiff_t k = 0;
    if (nr == 4) {
        const float *x0 = x, *x1 = x + K, *x2 = x + 2 * K, *x3 = x + 3 * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (; k + 8 <= K; k += 8) {
            __m256 wv = _mm256_loadu_ps(w + k);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + k), wv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + k), wv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + k), wv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3 + k), wv, a3);
        }
        float s0 = fnn_hsum8(a0), s1 = fnn_hsum8(a1), s2 = fnn_hsum8(a2), s3 = fnn_hsum8(a3);
        for (; k < K; k++) {
            s0 += x0[k] * w[k]; s1 += x1[k] * w[k]; s2 += x2[k] * w[k]; s3 += x3[k] * w[k];
        }
        out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
        return;
    }
    for (int r = 0; r < nr; r++) {
        const float *xr = x + r * K;
        __m256 a = _mm256_setzero_ps(), b = a;
        k = 0;
        for (; k + 16 <= K; k += 16) {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), _mm256_loadu_ps(w + k), a);
            b = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k + 8), _mm256_loadu_ps(w + k + 8), b);
        }
        for (; k + 8 <= K; k += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), _mm256_loadu_ps(w + k), a);
        float s = fnn_hsum8(_mm256_add_ps(a, b));
        for (; k < K; k++) s += xr[k] * w[k];
        out[r] = s;
    }
}

#else

static inline void fnn_dot_rows_f32(const float *x, ptrdiff_t K, const float *w, int nr,
                                    float *out) {
    for (int r = 0; r < nr; r++) {
        const float *xr = x + r * K;
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        ptrdiff_t k = 0;
        for (; k + 8 <= K; k += 8)
            for (int l = 0; l < 8; l++) a[l] += xr[k + l] * w[k + l];
        float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
        for (; k < K; k++) s += xr[k] * w[k];
        out[r] = s;
    }
}

#endif
#endif
