/* The body of fnn_reduce.h's max reduction, once per element type: fnn_reduce.h includes
 * this file with FNN_T and FNN_TNAME(name) defined.  A plain function instead of a
 * backslash-continued macro (issue #20).  No include guard, by design. */
static inline FNN_T FNN_TNAME(fnn_max)(const FNN_T* x, ptrdiff_t n) {
    FNN_T m[32];
    for (int k = 0; k < 32; ++k) m[k] = -(FNN_T)INFINITY;
    ptrdiff_t j = 0;
    for (; j + 32 <= n; j += 32)
        for (int k = 0; k < 32; ++k) {
            FNN_T v = x[j + k];
            m[k] = (v > m[k] || v != v) ? v : m[k];
        }
    for (; j < n; ++j) {
        FNN_T v = x[j];
        m[j & 31] = (v > m[j & 31] || v != v) ? v : m[j & 31];
    }
    FNN_T r = m[0];
    for (int k = 1; k < 32; ++k) r = (m[k] > r || m[k] != m[k]) ? m[k] : r;
    return r;
}
