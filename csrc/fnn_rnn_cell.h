/* The fused pointwise cell passes of the recurrent family, written once over a type.
 *
 * Included by fnn_rnn.h only, once per element type, with
 *   FNN_RNN_T          the element type (float, double)
 *   FNN_RNN_FN(name)   the function name with the type's suffix (name_f, name_d)
 *   FNN_RNN_SIG        sigmoid for that type
 *   FNN_RNN_TANH       tanh for that type
 * (no include guard on purpose).
 *
 * Each pass works on one block of n hidden units of one batch row.  Gate k of local unit l
 * is at [k*n + l]; per-unit pointers are offset to the block.  Distinct buffers (restrict)
 * so the loops vectorise. */

/* LSTM forward: gates i, f, g, o from the pre-activations ga + bias, the activated gates
   written back over them in ga (the saved gates for backward: no second T x B x 4H buffer,
   and no second stream through the caches per step); c_t to c_out and h_t to h_out. */
static inline void FNN_RNN_FN(fnn_lstm_fwd)(
        FNN_RNN_T* restrict ga, const FNN_RNN_T* restrict bi, const FNN_RNN_T* restrict cp,
        FNN_RNN_T* restrict c_out, FNN_RNN_T* restrict h_out, Py_ssize_t n) {
    for (Py_ssize_t l = 0; l < n; ++l) {
        FNN_RNN_T i = FNN_RNN_SIG(ga[l] + bi[l]), f = FNN_RNN_SIG(ga[n + l] + bi[n + l]);
        FNN_RNN_T gg = FNN_RNN_TANH(ga[2 * n + l] + bi[2 * n + l]);
        FNN_RNN_T o = FNN_RNN_SIG(ga[3 * n + l] + bi[3 * n + l]);
        FNN_RNN_T c = f * cp[l] + i * gg;
        ga[l] = i; ga[n + l] = f; ga[2 * n + l] = gg; ga[3 * n + l] = o;
        c_out[l] = c;
        h_out[l] = o * FNN_RNN_TANH(c);
    }
}

/* GRU forward: r, z from input + hidden projections, n = tanh(x_n + r * (W_hn h + b_hn)),
   the activated gates written back over the input projections in ga (as the LSTM's).
   gh is this step's hidden projection h_{t-1} W_hh^T (no bias); hn_out keeps W_hn h + b_hn. */
static inline void FNN_RNN_FN(fnn_gru_fwd)(
        FNN_RNN_T* restrict ga, const FNN_RNN_T* restrict bi, const FNN_RNN_T* restrict gh,
        const FNN_RNN_T* restrict b_hn, const FNN_RNN_T* restrict hp,
        FNN_RNN_T* restrict hn_out, FNN_RNN_T* restrict h_out, Py_ssize_t n) {
    for (Py_ssize_t l = 0; l < n; ++l) {
        FNN_RNN_T r = FNN_RNN_SIG(ga[l] + bi[l] + gh[l]);
        FNN_RNN_T z = FNN_RNN_SIG(ga[n + l] + bi[n + l] + gh[n + l]);
        FNN_RNN_T hn = gh[2 * n + l] + b_hn[l];
        FNN_RNN_T nn = FNN_RNN_TANH(ga[2 * n + l] + bi[2 * n + l] + r * hn);
        ga[l] = r; ga[n + l] = z; ga[2 * n + l] = nn;
        hn_out[l] = hn;
        h_out[l] = (1 - z) * nn + z * hp[l];
    }
}

/* Elman RNN forward: h = tanh or relu of the pre-activation plus bias. */
static inline void FNN_RNN_FN(fnn_rnn_fwd)(
        const FNN_RNN_T* restrict g, const FNN_RNN_T* restrict bi, FNN_RNN_T* restrict h_out,
        int relu, Py_ssize_t n) {
    if (relu) {
        for (Py_ssize_t l = 0; l < n; ++l) {
            FNN_RNN_T v = g[l] + bi[l];
            h_out[l] = v < 0 ? (FNN_RNN_T)0 : v;
        }
    } else {
        for (Py_ssize_t l = 0; l < n; ++l) h_out[l] = FNN_RNN_TANH(g[l] + bi[l]);
    }
}

/* LSTM backward: dh = dy + the recurrent gradient, dc in (d c_t) / out (d c_{t-1}); writes
   the pre-activation gradients dg (tanh(c_t) recomputed from c). */
static inline void FNN_RNN_FN(fnn_lstm_bwd)(
        const FNN_RNN_T* restrict a, const FNN_RNN_T* restrict c, const FNN_RNN_T* restrict cp,
        const FNN_RNN_T* restrict dy, const FNN_RNN_T* restrict dh, FNN_RNN_T* restrict dc,
        FNN_RNN_T* restrict dg, Py_ssize_t n) {
    for (Py_ssize_t l = 0; l < n; ++l) {
        FNN_RNN_T i = a[l], f = a[n + l], gg = a[2 * n + l], o = a[3 * n + l];
        FNN_RNN_T tc = FNN_RNN_TANH(c[l]);
        FNN_RNN_T dht = dy[l] + dh[l];
        FNN_RNN_T dct = dc[l] + dht * o * (1 - tc * tc);
        dg[l] = dct * gg * i * (1 - i);
        dg[n + l] = dct * cp[l] * f * (1 - f);
        dg[2 * n + l] = dct * i * (1 - gg * gg);
        dg[3 * n + l] = dht * tc * o * (1 - o);
        dc[l] = dct * f;
    }
}

/* GRU backward: dg the input-side gradients, dgh the hidden-side ones (n part times r);
   dh in: the recurrent gradient, out: the direct part dh_t * z (the GEMM adds the rest). */
static inline void FNN_RNN_FN(fnn_gru_bwd)(
        const FNN_RNN_T* restrict a, const FNN_RNN_T* restrict hn, const FNN_RNN_T* restrict hp,
        const FNN_RNN_T* restrict dy, FNN_RNN_T* restrict dh, FNN_RNN_T* restrict dg,
        FNN_RNN_T* restrict dgh, Py_ssize_t n) {
    for (Py_ssize_t l = 0; l < n; ++l) {
        FNN_RNN_T r = a[l], z = a[n + l], nn = a[2 * n + l];
        FNN_RNN_T dht = dy[l] + dh[l];
        FNN_RNN_T dan = dht * (1 - z) * (1 - nn * nn);
        FNN_RNN_T dar = dan * hn[l] * r * (1 - r);
        FNN_RNN_T daz = dht * (hp[l] - nn) * z * (1 - z);
        dg[l] = dar; dg[n + l] = daz; dg[2 * n + l] = dan;
        dgh[l] = dar; dgh[n + l] = daz; dgh[2 * n + l] = dan * r;
        dh[l] = dht * z;
    }
}

/* Elman RNN backward: dg = (dy + dh) times the nonlinearity's derivative, from h. */
static inline void FNN_RNN_FN(fnn_rnn_bwd)(
        const FNN_RNN_T* restrict h, const FNN_RNN_T* restrict dy, const FNN_RNN_T* restrict dh,
        FNN_RNN_T* restrict dg, int relu, Py_ssize_t n) {
    if (relu) {
        for (Py_ssize_t l = 0; l < n; ++l) dg[l] = h[l] > 0 ? dy[l] + dh[l] : (FNN_RNN_T)0;
    } else {
        for (Py_ssize_t l = 0; l < n; ++l) dg[l] = (dy[l] + dh[l]) * (1 - h[l] * h[l]);
    }
}
