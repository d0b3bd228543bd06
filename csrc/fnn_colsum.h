/* Column sums of a row-major float (rows, n) matrix for a bias gradient, as work items of
 * the backward's parallel region (dense.pyx): item c sums rows [c chunk, (c + 1) chunk)
 * into float64 partials part[c, 0:n] (rows in order; the rows are read whole, one
 * contiguous stream -- strips of columns read down the rows were latency-bound), and
 * fnn_colsum_finish adds the partials in chunk order and rounds to float: each column's
 * sum is fnn_colsum.pxi's _col_sum's, the same bits at any thread count. */
#ifndef FNN_COLSUM_H
#define FNN_COLSUM_H
#include <stddef.h>

static void fnn_colsum_chunk_f(const float* a, ptrdiff_t rows, ptrdiff_t n, ptrdiff_t chunk,
                               ptrdiff_t c, double* part) {
    double* acc = part + c * n;
    ptrdiff_t r1 = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
    for (ptrdiff_t j = 0; j < n; ++j) acc[j] = 0.0;
    for (ptrdiff_t r = c * chunk; r < r1; ++r) {
        const float* row = a + r * n;
        for (ptrdiff_t j = 0; j < n; ++j) acc[j] += (double)row[j];
    }
}

static void fnn_colsum_chunk_d(const double* a, ptrdiff_t rows, ptrdiff_t n, ptrdiff_t chunk,
                               ptrdiff_t c, double* part) {
    double* acc = part + c * n;
    ptrdiff_t r1 = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
    for (ptrdiff_t j = 0; j < n; ++j) acc[j] = 0.0;
    for (ptrdiff_t r = c * chunk; r < r1; ++r) {
        const double* row = a + r * n;
        for (ptrdiff_t j = 0; j < n; ++j) acc[j] += row[j];
    }
}

/* out[j] = the partials of nch chunks added in chunk order (none: 0) */
static void fnn_colsum_finish_f(const double* part, ptrdiff_t nch, ptrdiff_t n, float* out) {
    for (ptrdiff_t j = 0; j < n; ++j) {
        double t = nch > 0 ? part[j] : 0.0;
        for (ptrdiff_t c = 1; c < nch; ++c) t += part[c * n + j];
        out[j] = (float)t;
    }
}

static void fnn_colsum_finish_d(const double* part, ptrdiff_t nch, ptrdiff_t n, double* out) {
    for (ptrdiff_t j = 0; j < n; ++j) {
        double t = nch > 0 ? part[j] : 0.0;
        for (ptrdiff_t c = 1; c < nch; ++c) t += part[c * n + j];
        out[j] = t;
    }
}
#endif /* FNN_COLSUM_H */
