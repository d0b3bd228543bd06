# Column sums shared by the dense and rnn families (bias gradients): included after
# fnn_runtime.pxi by a module that cimports `real`, prange, free and memset.

cdef extern from "fnn_colsum.h" nogil:
    void fnn_colsum_chunk_f(const float* a, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t chunk,
                            Py_ssize_t c, double* part)
    void fnn_colsum_chunk_d(const double* a, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t chunk,
                            Py_ssize_t c, double* part)
    void fnn_colsum_finish_f(const double* part, Py_ssize_t nch, Py_ssize_t n, float* out)
    void fnn_colsum_finish_d(const double* part, Py_ssize_t nch, Py_ssize_t n, double* out)


cdef inline void _col_sum_chunk(const real* a, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t CH,
                                Py_ssize_t c, double* part) noexcept nogil:
    """Chunk c (rows [c CH, (c + 1) CH)) of a's column sums: float64 partials in part[c]."""
    if real is float:
        fnn_colsum_chunk_f(a, rows, n, CH, c, part)
    else:
        fnn_colsum_chunk_d(a, rows, n, CH, c, part)


cdef inline void _col_sum_finish(const double* part, Py_ssize_t nch, Py_ssize_t n,
                                 real* out) noexcept nogil:
    """out = the nch chunks' partials added in chunk order."""
    if real is float:
        fnn_colsum_finish_f(part, nch, n, out)
    else:
        fnn_colsum_finish_d(part, nch, n, out)


cdef int _col_sum(const real* a, Py_ssize_t rows, Py_ssize_t n, real* out, int nt,
                  Py_ssize_t CH) except -1 nogil:
    """out[j] = sum_r a[r, j]: fixed chunks of CH rows (independent of nt), chunk partials
    in double, added in chunk order -> deterministic at any thread count."""
    cdef Py_ssize_t nch = (rows + CH - 1) // CH
    cdef Py_ssize_t c
    cdef double* part = NULL
    if nch > 0:
        part = <double*>_alloc(nch * n, sizeof(double))
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        _col_sum_chunk(a, rows, n, CH, c, part)
    _col_sum_finish(part, nch, n, out)
    free(part)
    return 0
