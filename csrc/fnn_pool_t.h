/* Pooling rows, written once for FNN_T = float / double (function names
 * FNN_TNAME(name) = name_f / name_d): included by fnn_pool.h once per type, never on its own.
 * No include guard on purpose. */

/* ---- pooling rows.  Branch-free selects (if-converted, vectorised across the output
 * row); the update rule is torch's: a tap wins when it is larger or NaN, and the first
 * tap inside the input always wins (k < 0). */
#include <stdint.h>

/* 2x2 stride-2 windows over input rows r0, r1 */
static inline void FNN_TNAME(fnn_max2x2_row)(const FNN_T* r0, const FNN_T* r1, FNN_T* y, int32_t* t,
                                        ptrdiff_t OW) {
    for (ptrdiff_t o = 0; o < OW; ++o) {
        FNN_T a = r0[2 * o], b = r0[2 * o + 1], c = r1[2 * o], d = r1[2 * o + 1];
        FNN_T m = a; int32_t k = 0; int u;
        u = (b > m) | (b != b); m = u ? b : m; k = u ? 1 : k;
        u = (c > m) | (c != c); m = u ? c : m; k = u ? 2 : k;
        u = (d > m) | (d != d); m = u ? d : m; k = u ? 3 : k;
        y[o] = m; t[o] = k;
    }
}
/* backward of the above: every input element of the two rows is written once */
static inline void FNN_TNAME(fnn_max2x2_bwd_row)(const FNN_T* g, const int32_t* t, FNN_T* d0, FNN_T* d1,
                                            ptrdiff_t OW) {
    for (ptrdiff_t o = 0; o < OW; ++o) {
        FNN_T v = g[o]; int32_t k = t[o];
        d0[2 * o] = k == 0 ? v : (FNN_T)0; d0[2 * o + 1] = k == 1 ? v : (FNN_T)0;
        d1[2 * o] = k == 2 ? v : (FNN_T)0; d1[2 * o + 1] = k == 3 ? v : (FNN_T)0;
    }
}
/* one tap for outputs [o0, o1): v = src[o * s] */
static inline void FNN_TNAME(fnn_max_tap)(const FNN_T* src, ptrdiff_t s, FNN_T* m, int32_t* k,
                                     int32_t tap, ptrdiff_t o0, ptrdiff_t o1) {
    if (s == 1) {
        for (ptrdiff_t o = o0; o < o1; ++o) {
            FNN_T v = src[o]; int u = (v > m[o]) | (v != v) | (k[o] < 0);
            m[o] = u ? v : m[o]; k[o] = u ? tap : k[o];
        }
    } else {
        for (ptrdiff_t o = o0; o < o1; ++o) {
            FNN_T v = src[o * s]; int u = (v > m[o]) | (v != v) | (k[o] < 0);
            m[o] = u ? v : m[o]; k[o] = u ? tap : k[o];
        }
    }
}

/* ---- average pooling as two separable passes (csrc/pool.pyx).  Vertical: v = the sum
 * of the window's input rows (contiguous, one pass).  Horizontal: y[o] = sum_j
 * v[o*s + j] / div[o] over a zero-padded v, so no tap needs a bounds test; the common
 * (kW, sW) get constant-stride loops the compiler vectorises.  The division is done in
 * T: div is a small integer, and a double division rounded to float is the same. */

static inline void FNN_TNAME(fnn_avg_vsum)(FNN_T* v, const FNN_T* x, ptrdiff_t W, ptrdiff_t rows,
                                      ptrdiff_t rs) {
    ptrdiff_t w, r;
    if (rows == 3) {
        const FNN_T* a = x; const FNN_T* b = x + rs; const FNN_T* c = x + 2 * rs;
        for (w = 0; w < W; ++w) v[w] = (a[w] + b[w]) + c[w];
        return;
    }
    if (rows == 2) {
        const FNN_T* a = x; const FNN_T* b = x + rs;
        for (w = 0; w < W; ++w) v[w] = a[w] + b[w];
        return;
    }
    for (w = 0; w < W; ++w) v[w] = rows > 0 ? x[w] : (FNN_T)0;
    for (r = 1; r < rows; ++r) {
        const FNN_T* a = x + r * rs;
        for (w = 0; w < W; ++w) v[w] += a[w];
    }
}
static inline void FNN_TNAME(fnn_avg_hrow)(const FNN_T* v, FNN_T* y, const FNN_T* dv, ptrdiff_t OW,
                                      ptrdiff_t kw, ptrdiff_t sw) {
    ptrdiff_t o, j;
    if (kw == 3 && sw == 2) {
        for (o = 0; o < OW; ++o) {
            FNN_T s = (v[2 * o] + v[2 * o + 1]) + v[2 * o + 2], d = dv[o];
            y[o] = d != 0 ? s / d : (FNN_T)0;
        }
    } else if (kw == 2 && sw == 2) {
        for (o = 0; o < OW; ++o) {
            FNN_T s = v[2 * o] + v[2 * o + 1], d = dv[o];
            y[o] = d != 0 ? s / d : (FNN_T)0;
        }
    } else if (kw == 3 && sw == 1) {
        for (o = 0; o < OW; ++o) {
            FNN_T s = (v[o] + v[o + 1]) + v[o + 2], d = dv[o];
            y[o] = d != 0 ? s / d : (FNN_T)0;
        }
    } else {
        for (o = 0; o < OW; ++o) {
            const FNN_T* p = v + o * sw;
            FNN_T s = p[0], d = dv[o];
            for (j = 1; j < kw; ++j) s += p[j];
            y[o] = d != 0 ? s / d : (FNN_T)0;
        }
    }
}
/* backward, horizontal: hb[u] = sum of g[o] over the windows o covering padded column
 * u, u in [0, L), in increasing o; g has >= kw zeros before it and after g[OW - 1] */
static inline void FNN_TNAME(fnn_avg_hscatter)(const FNN_T* g, FNN_T* hb, ptrdiff_t L, ptrdiff_t OW,
                                          ptrdiff_t kw, ptrdiff_t sw) {
    ptrdiff_t m, o, j;
    if (kw == 3 && sw == 2) {
        for (m = 0; 2 * m < L; ++m) { hb[2 * m] = g[m - 1] + g[m]; hb[2 * m + 1] = g[m]; }
    } else if (kw == 2 && sw == 2) {
        for (m = 0; 2 * m < L; ++m) { hb[2 * m] = g[m]; hb[2 * m + 1] = g[m]; }
    } else if (kw == 3 && sw == 1) {
        for (m = 0; m < L; ++m) hb[m] = (g[m - 2] + g[m - 1]) + g[m];
    } else if (sw == 1) {
        for (m = 0; m < L; ++m) {
            FNN_T acc = g[m - kw + 1];
            for (j = 1; j < kw; ++j) acc += g[m - kw + 1 + j];
            hb[m] = acc;
        }
    } else {
        for (m = 0; m < L; ++m) hb[m] = 0;
        for (o = 0; o < OW; ++o)
            for (j = 0; j < kw; ++j) hb[o * sw + j] += g[o];
    }
}
