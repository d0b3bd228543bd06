/* Column sums of a row-major (rows, n) matrix for a bias gradient, written once over
 * FNN_T (fnn_colsum.h instantiates it for float and double).  Chunk c sums rows
 * [c chunk, (c + 1) chunk) into float64 partials part[c, 0:n] (rows in order, read whole:
 * one contiguous stream); fnn_colsum_finish adds the partials in chunk order and rounds
 * to FNN_T.  The chunks are independent work items (fnn_colsum.pxi's _col_sum shares them
 * out, linear_backward runs them inside its GEMMs' region), so the sums do not depend on
 * the thread count.  No include guard, by design. */

static void FNN_TNAME(fnn_colsum_chunk)(const FNN_T* a, ptrdiff_t rows, ptrdiff_t n,
                                        ptrdiff_t chunk, ptrdiff_t c, double* part) {
    double* acc = part + c * n;
    ptrdiff_t r1 = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
    for (ptrdiff_t j = 0; j < n; ++j) acc[j] = 0.0;
    for (ptrdiff_t r = c * chunk; r < r1; ++r) {
        const FNN_T* row = a + r * n;
        for (ptrdiff_t j = 0; j < n; ++j) acc[j] += (double)row[j];
    }
}

/* out[j] = the partials of nch chunks added in chunk order (none: 0) */
static void FNN_TNAME(fnn_colsum_finish)(const double* part, ptrdiff_t nch, ptrdiff_t n,
                                         FNN_T* out) {
    for (ptrdiff_t j = 0; j < n; ++j) {
        double t = nch > 0 ? part[j] : 0.0;
        for (ptrdiff_t c = 1; c < nch; ++c) t += part[c * n + j];
        out[j] = (FNN_T)t;
    }
}
