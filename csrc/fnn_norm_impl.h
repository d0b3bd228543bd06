/* The body of fnn_norm.h's layer-norm row kernels, once per element type: fnn_norm.h
 * includes this file twice with FNN_T (float, double) and FNN_TNAME(name) (name_f,
 * name_d) defined.  Plain functions instead of a backslash-continued macro (issue #20).
 * No include guard, by design. */
static inline void FNN_TNAME(fnn_ln_normalise)(const FNN_T* restrict x, FNN_T* restrict y,
                                          const FNN_T* restrict w, const FNN_T* restrict b,
                                          ptrdiff_t D, FNN_T mf, FNN_T rf) {
    ptrdiff_t j;
    if (w && b) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf * w[j] + b[j]; }
    else if (w) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf * w[j]; }
    else if (b) { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf + b[j]; }
    else        { for (j = 0; j < D; ++j) y[j] = (x[j] - mf) * rf; }
}
static inline void FNN_TNAME(fnn_ln_fwd_row)(const FNN_T* x, FNN_T* y, const FNN_T* w, const FNN_T* b,
                                        ptrdiff_t D, double eps, FNN_T* mean_out, FNN_T* rstd_out,
                                        int stream, const FNN_T* next) {
    /* the next row is requested now and arrives while this one is computed */
    if (next)
        for (ptrdiff_t k = 0; k < D; k += 64 / (ptrdiff_t)sizeof(FNN_T)) __builtin_prefetch(next + k);
    double m = D > 0 ? FNN_TNAME(fnn_sum)(x, D) / (double)D : 0.0;
    double var = D > 0 ? FNN_TNAME(fnn_sumsq_dev)(x, D, m) / (double)D : 0.0;
    FNN_T mf = (FNN_T)m, rf = (FNN_T)(1.0 / sqrt(var + eps));
    if (stream && D <= FNN_LN_ROWBUF) {
        FNN_T buf[FNN_LN_ROWBUF];
        FNN_TNAME(fnn_ln_normalise)(x, buf, w, b, D, mf, rf);
        FNN_TNAME(fnn_stream_copy)(y, buf, D);   /* the caller fences once per thread */
    } else {
        FNN_TNAME(fnn_ln_normalise)(x, y, w, b, D, mf, rf);
    }
    *mean_out = mf; *rstd_out = rf;
}
/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
   sum(g * xhat) = rstd * (sum(g * x) - mean * sum(g)); both sums in one pass (lanes in
   FNN_T, blocks folded in double), then one pass writes dx and adds this row's terms to the
   chunk partials pw (dy * xhat) and pb (dy) when they are given (both or neither).
   All pointers are restrict (dx and the partials never alias the inputs) and the weight
   test is outside the loops, so every loop vectorises. */
static inline void FNN_TNAME(fnn_ln_bwd_sums)(const FNN_T* restrict dy, const FNN_T* restrict x,
                                         const FNN_T* restrict w, ptrdiff_t D,
                                         double* sum_g_out, double* sum_gx_out) {
    double sum_g = 0.0, sum_gx = 0.0;
    ptrdiff_t b0, j;
    for (b0 = 0; b0 < D; b0 += FNN_BLOCK) {
        ptrdiff_t b1 = b0 + FNN_BLOCK < D ? b0 + FNN_BLOCK : D;
        FNN_T a[32] = {0}, c[32] = {0};
        j = b0;
        if (w) {
            for (; j + 32 <= b1; j += 32)
                for (int k = 0; k < 32; ++k) {
                    FNN_T g = dy[j + k] * w[j + k];
                    a[k] += g; c[k] += g * x[j + k];
                }
            for (; j < b1; ++j) { FNN_T g = dy[j] * w[j]; a[j & 31] += g; c[j & 31] += g * x[j]; }
        } else {
            for (; j + 32 <= b1; j += 32)
                for (int k = 0; k < 32; ++k) {
                    FNN_T g = dy[j + k];
                    a[k] += g; c[k] += g * x[j + k];
                }
            for (; j < b1; ++j) { FNN_T g = dy[j]; a[j & 31] += g; c[j & 31] += g * x[j]; }
        }
        sum_g += FNN_TNAME(fnn_ln_fold32)(a);
        sum_gx += FNN_TNAME(fnn_ln_fold32)(c);
    }
    *sum_g_out = sum_g; *sum_gx_out = sum_gx;
}
static inline void FNN_TNAME(fnn_ln_bwd_row)(const FNN_T* restrict dy, const FNN_T* restrict x,
                                        const FNN_T* restrict w, FNN_T mean, FNN_T rstd, ptrdiff_t D,
                                        FNN_T* restrict dx_out, FNN_T* restrict pw, FNN_T* restrict pb,
                                        int stream) {
    /* a streamed dx is written into a stack row first, then out with NT stores */
    FNN_T buf[FNN_LN_ROWBUF];
    int via_buf = stream && D <= FNN_LN_ROWBUF;
    FNN_T* restrict dx = via_buf ? buf : dx_out;
    double sum_g, sum_gx;
    ptrdiff_t j;
    FNN_TNAME(fnn_ln_bwd_sums)(dy, x, w, D, &sum_g, &sum_gx);
    FNN_T sg = (FNN_T)(sum_g / (double)D);
    FNN_T sgx = (FNN_T)((double)rstd * (sum_gx - (double)mean * sum_g) / (double)D);
    if (pw && w) {
        for (j = 0; j < D; ++j) {
            FNN_T xh = (x[j] - mean) * rstd;
            dx[j] = rstd * (dy[j] * w[j] - sg - xh * sgx);
            pw[j] += dy[j] * xh;
            pb[j] += dy[j];
        }
    } else if (pw) {
        for (j = 0; j < D; ++j) {
            FNN_T xh = (x[j] - mean) * rstd;
            dx[j] = rstd * (dy[j] - sg - xh * sgx);
            pw[j] += dy[j] * xh;
            pb[j] += dy[j];
        }
    } else if (w) {
        for (j = 0; j < D; ++j) {
            FNN_T xh = (x[j] - mean) * rstd;
            dx[j] = rstd * (dy[j] * w[j] - sg - xh * sgx);
        }
    } else {
        for (j = 0; j < D; ++j) {
            FNN_T xh = (x[j] - mean) * rstd;
            dx[j] = rstd * (dy[j] - sg - xh * sgx);
        }
    }
    if (via_buf) FNN_TNAME(fnn_stream_copy)(dx_out, buf, D);   /* fenced by the caller */
}
