# Column sums shared by the dense and rnn families (bias gradients): included after
# fnn_runtime.pxi by a module that cimports `real`, prange, free and memset.

cdef int _col_sum(const real* a, Py_ssize_t rows, Py_ssize_t n, real* out, int nt,
                  Py_ssize_t CH) except -1 nogil:
    """out[j] = sum_r a[r, j]: fixed chunks of CH rows (independent of nt), chunk partials
    in double, added in chunk order -> deterministic at any thread count."""
    cdef Py_ssize_t nch = (rows + CH - 1) // CH
    cdef Py_ssize_t c, r, j, r0, r1
    cdef double* part
    cdef double* acc
    if nch == 0:
        for j in range(n):
            out[j] = 0
        return 0
    part = <double*>_alloc(nch * n, sizeof(double))
    memset(part, 0, nch * n * sizeof(double))
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        acc = part + c * n
        r0 = c * CH
        r1 = r0 + CH
        if r1 > rows:
            r1 = rows
        for r in range(r0, r1):
            for j in range(n):
                acc[j] += a[r * n + j]
    for c in range(1, nch):
        for j in range(n):
            part[j] += part[c * n + j]
    for j in range(n):
        out[j] = <real>part[j]
    free(part)
    return 0
