/* The body of fnn_softmax.h's backward row kernel, once per element type: fnn_softmax.h
 * includes this file twice with FNN_T (float, double), FNN_TNAME(name) (name_f, name_d)
 * defined (through fnn_instantiate.h; its exp is fnn_s_exp_f / _d).  A plain function instead of a
 * backslash-continued macro (issue #20).  No include guard, by design. */
static inline void FNN_TNAME(fnn_softmax_bwd_row)(const FNN_T* restrict dy, const FNN_T* restrict y,
                                             FNN_T* restrict dx_out, ptrdiff_t n, int logsm,
                                             int stream) {
    /* a streamed dx is written into a stack row first, then out with NT stores */
    FNN_T buf[FNN_SM_ROWBUF];
    int via_buf = stream && n <= FNN_SM_ROWBUF;
    FNN_T* restrict dx = via_buf ? buf : dx_out;
    ptrdiff_t j;
    if (logsm) {
        FNN_T s = (FNN_T)FNN_TNAME(fnn_sum)(dy, n);
        for (j = 0; j < n; ++j) dx[j] = dy[j] - FNN_TNAME(fnn_s_exp)(y[j]) * s;
    } else {
        FNN_T s = (FNN_T)FNN_TNAME(fnn_dot)(dy, y, n);
        for (j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - s);
    }
    if (via_buf) FNN_TNAME(fnn_stream_copy)(dx_out, buf, n);   /* fenced by the caller */
}
