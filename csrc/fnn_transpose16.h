/* In-register transposes: 16 x 16 for the AVX-512 build (the own GEMM's packing of a
 * transposed B, the short attention's transposed keys and values), 8 x 8 for the AVX2
 * build (the same two, and the small-M GEMM's row blocks of x). */
#ifndef FNN_TRANSPOSE16_H
#define FNN_TRANSPOSE16_H
#if defined(__AVX512F__)
#include <immintrin.h>

/* In-register transpose of 16 rows of 16 floats: r[i][j] -> r[j][i]. */
static inline __attribute__((always_inline)) void fnn_transpose16_ps(__m512 r[16])
{
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4 g + c], lane L: rows 4g..4g+3 of column 4 L + c */
#pragma GCC unroll 4
    for (int g = 0; g < 16; g += 4) {
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512 a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        const __m512 b = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        const __m512 a2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 b2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_f32x4(a, a2, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(a, a2, 0xDD);
        r[4 + c] = _mm512_shuffle_f32x4(b, b2, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(b, b2, 0xDD);
    }
}
#endif

#if defined(__AVX2__)
#include <immintrin.h>

/* In-register transpose of 8 rows of 8 floats: r[i][j] -> r[j][i]. */
static inline __attribute__((always_inline)) void fnn_transpose8_ps(__m256 r[8])
{
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      /* columns 0,1 | 4,5 of rows i, i+1 */
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  /* columns 2,3 | 6,7 */
    }
    /* u[4 h + c]: column c (| c + 4) of rows 4h..4h+3 */
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) {
        u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
        u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}
#endif
#endif
