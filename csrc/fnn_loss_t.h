/* The loss kernels, written once for FNN_T = float / double (function names
 * FNN_TNAME(name) = name_f / name_d): included by fnn_loss.h through fnn_instantiate.h,
 * never on its own.  No include guard on purpose.
 *
 * Each sum is fnn_reduce.h's lane structure over a term function (the term's operands in
 * an fnn_sum_args: cross-entropy a = x, b = q, d = w, p = the row max; pointwise losses
 * a = x, b = y, c = pos_weight, d = weight, p = the loss parameter). */

#define FNN_LX(s, i) (((const FNN_T*)(s)->a)[i])

/* ---- cross-entropy rows: x (C,) logits, target t (or probabilities q), weight w */
static inline FNN_T FNN_TNAME(fnn_ce_t_exp)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_l_exp)(FNN_LX(s, i) - (FNN_T)s->p);
}
static inline FNN_T FNN_TNAME(fnn_ce_t_x)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_LX(s, i);
}
static inline FNN_T FNN_TNAME(fnn_ce_t_q)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const FNN_T*)s->b)[i];
}
static inline FNN_T FNN_TNAME(fnn_ce_t_qx)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const FNN_T*)s->b)[i] * FNN_LX(s, i);
}
static inline FNN_T FNN_TNAME(fnn_ce_t_w)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const FNN_T*)s->d)[i];
}
static inline FNN_T FNN_TNAME(fnn_ce_t_wx)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const FNN_T*)s->d)[i] * FNN_LX(s, i);
}
static inline FNN_T FNN_TNAME(fnn_ce_t_wq)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const FNN_T*)s->d)[i] * ((const FNN_T*)s->b)[i];
}
static inline FNN_T FNN_TNAME(fnn_ce_t_wqx)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((const FNN_T*)s->d)[i] * ((const FNN_T*)s->b)[i] * FNN_LX(s, i);
}

/* the row's loss; *lse_out = logsumexp(x), *A_out = the row's total target weight */
static inline double FNN_TNAME(fnn_ce_fwd_row)(const FNN_T* x, ptrdiff_t C, int64_t t,
                                               const FNN_T* q, const FNN_T* w, double eps,
                                               double* lse_out, double* A_out) {
    FNN_T m = FNN_TNAME(fnn_max)(x, C);
    fnn_sum_args s = {x, q, NULL, w, (double)m, 0.0};
    double Sq, Sqx, Sw = 0.0, Swx = 0.0;
    double lse = (double)m + log(FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_exp), &s));
    *lse_out = lse;
    if (q) {
        if (w) {
            Sq = FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_wq), &s);
            Sqx = FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_wqx), &s);
        } else {
            Sq = FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_q), &s);
            Sqx = FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_qx), &s);
        }
    } else if (t < 0) {
        *A_out = 0.0;
        return 0.0;
    } else {
        double wt = w ? (double)w[t] : 1.0;
        Sq = wt;
        Sqx = wt * (double)x[t];
    }
    if (eps > 0) {
        if (w) {
            Sw = FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_w), &s);
            Swx = FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_wx), &s);
        } else {
            Sw = (double)C;
            Swx = FNN_TNAME(fnn_l_sum)(C, FNN_TNAME(fnn_ce_t_x), &s);
        }
    }
    double A = (1.0 - eps) * Sq + eps / C * Sw;
    *A_out = A;
    if (!q && eps == 0)
        return Sq * (lse - (double)x[t]);
    return lse * A - ((1.0 - eps) * Sqx + eps / C * Swx);
}

/* dx of one row for d_loss factor s (the forward's lse and A) */
static inline void FNN_TNAME(fnn_ce_bwd_row)(const FNN_T* x, FNN_T* dx, ptrdiff_t C, int64_t t,
                                             const FNN_T* q, const FNN_T* w, double eps,
                                             double lse, double A, double s) {
    ptrdiff_t j;
    if (!q && t < 0) {  /* ignored: 0 * softmax, so a row holding inf/NaN stays NaN */
        if (isfinite(lse)) memset(dx, 0, C * sizeof(FNN_T));
        else for (j = 0; j < C; ++j) dx[j] = (FNN_T)NAN;
        return;
    }
    FNN_T sA = (FNN_T)(s * A), l = (FNN_T)lse;
    if (q) {
        FNN_T c1 = (FNN_T)(s * (1.0 - eps)), c0 = (FNN_T)(s * eps / C);
        if (w) for (j = 0; j < C; ++j) dx[j] = sA * FNN_TNAME(fnn_l_exp)(x[j] - l) - w[j] * (c1 * q[j] + c0);
        else for (j = 0; j < C; ++j) dx[j] = sA * FNN_TNAME(fnn_l_exp)(x[j] - l) - (c1 * q[j] + c0);
        return;
    }
    if (eps > 0) {
        FNN_T c0 = (FNN_T)(s * eps / C);
        if (w) for (j = 0; j < C; ++j) dx[j] = sA * FNN_TNAME(fnn_l_exp)(x[j] - l) - c0 * w[j];
        else for (j = 0; j < C; ++j) dx[j] = sA * FNN_TNAME(fnn_l_exp)(x[j] - l) - c0;
    } else {
        for (j = 0; j < C; ++j) dx[j] = sA * FNN_TNAME(fnn_l_exp)(x[j] - l);
    }
    double wt = w ? (double)w[t] : 1.0;
    double at = (1.0 - eps) * wt + eps / C * wt;
    dx[t] = (FNN_T)(s * (A * exp((double)x[t] - lse) - at));
}

/* ---- pointwise losses: the term of element i (forward) and its derivative (backward) */
#define FNN_LY(s, i) (((const FNN_T*)(s)->b)[i])
#define FNN_LPW(s, i) (((const FNN_T*)(s)->c)[i])
#define FNN_LP(s) ((FNN_T)(s)->p)

static inline FNN_T FNN_TNAME(fnn_pwl_mse)(const fnn_sum_args* s, ptrdiff_t i) {
    return (FNN_LX(s, i) - FNN_LY(s, i)) * (FNN_LX(s, i) - FNN_LY(s, i));
}
static inline FNN_T FNN_TNAME(fnn_pwl_l1)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_l_abs)(FNN_LX(s, i) - FNN_LY(s, i));
}
static inline FNN_T FNN_TNAME(fnn_pwl_sl1)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_sl1)(FNN_LX(s, i) - FNN_LY(s, i), FNN_LP(s));
}
static inline FNN_T FNN_TNAME(fnn_pwl_huber)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_huber)(FNN_LX(s, i) - FNN_LY(s, i), FNN_LP(s));
}
static inline FNN_T FNN_TNAME(fnn_pwl_bce)(const fnn_sum_args* s, ptrdiff_t i) {
    double x = (double)FNN_LX(s, i), y = (double)FNN_LY(s, i);
    return (FNN_T)(-(y * fnn_clog(log(x)) + (1.0 - y) * fnn_clog(log1p(-x))));
}
static inline FNN_T FNN_TNAME(fnn_pwl_bcel)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((FNN_T)1 - FNN_LY(s, i)) * FNN_LX(s, i) + FNN_TNAME(fnn_nls)(FNN_LX(s, i));
}
static inline FNN_T FNN_TNAME(fnn_pwl_bcel_pw)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((FNN_T)1 - FNN_LY(s, i)) * FNN_LX(s, i)
           + ((FNN_T)1 + (FNN_LPW(s, i) - (FNN_T)1) * FNN_LY(s, i)) * FNN_TNAME(fnn_nls)(FNN_LX(s, i));
}
static inline FNN_T FNN_TNAME(fnn_pwl_kl)(const fnn_sum_args* s, ptrdiff_t i) {
    double y = (double)FNN_LY(s, i);
    return (FNN_T)(fnn_xlogx(y) - y * (double)FNN_LX(s, i));
}
static inline FNN_T FNN_TNAME(fnn_pwl_kl_log)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_l_exp)(FNN_LY(s, i)) * (FNN_LY(s, i) - FNN_LX(s, i));
}

static inline FNN_T FNN_TNAME(fnn_pwl_d_mse)(const fnn_sum_args* s, ptrdiff_t i) {
    return (FNN_T)2 * (FNN_LX(s, i) - FNN_LY(s, i));
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_sign)(const fnn_sum_args* s, ptrdiff_t i) {
    return (FNN_T)((FNN_LX(s, i) > FNN_LY(s, i)) - (FNN_LX(s, i) < FNN_LY(s, i)));
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_sl1)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_clamp)(FNN_LX(s, i) - FNN_LY(s, i), FNN_LP(s)) / FNN_LP(s);
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_huber)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_clamp)(FNN_LX(s, i) - FNN_LY(s, i), FNN_LP(s));
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_bce)(const fnn_sum_args* s, ptrdiff_t i) {
    double x = (double)FNN_LX(s, i), y = (double)FNN_LY(s, i);
    return (FNN_T)((x - y) / fmax((1.0 - x) * x, 1e-12));
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_bcel)(const fnn_sum_args* s, ptrdiff_t i) {
    return FNN_TNAME(fnn_sig)(FNN_LX(s, i)) - FNN_LY(s, i);
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_bcel_pw)(const fnn_sum_args* s, ptrdiff_t i) {
    return ((FNN_T)1 + (FNN_LPW(s, i) - (FNN_T)1) * FNN_LY(s, i)) * FNN_TNAME(fnn_sig)(FNN_LX(s, i))
           - FNN_LPW(s, i) * FNN_LY(s, i);
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_kl)(const fnn_sum_args* s, ptrdiff_t i) {
    return -FNN_LY(s, i);
}
static inline FNN_T FNN_TNAME(fnn_pwl_d_kl_log)(const fnn_sum_args* s, ptrdiff_t i) {
    return -FNN_TNAME(fnn_l_exp)(FNN_LY(s, i));
}
#undef FNN_LY
#undef FNN_LPW
#undef FNN_LP
#undef FNN_LX

/* one kind's forward over a chunk: store the terms (out, times w) or return their sum */
FNN_ALWAYS_INLINE double FNN_TNAME(fnn_pwl_chunk)(FNN_T (*term)(const fnn_sum_args*, ptrdiff_t),
                                                  const fnn_sum_args* s, FNN_T* out, ptrdiff_t n) {
    const FNN_T* w = (const FNN_T*)s->d;
    ptrdiff_t i;
    if (out) {
        if (w) for (i = 0; i < n; ++i) out[i] = term(s, i) * w[i];
        else for (i = 0; i < n; ++i) out[i] = term(s, i);
        return 0.0;
    }
    return w ? FNN_TNAME(fnn_l_wsum)(n, term, s) : FNN_TNAME(fnn_l_sum)(n, term, s);
}

static double FNN_TNAME(fnn_pwl_fwd)(int kind, const FNN_T* x, const FNN_T* y, const FNN_T* w,
                                     const FNN_T* pw, FNN_T p, FNN_T* out, ptrdiff_t n) {
    fnn_sum_args s = {x, y, pw, w, (double)p, 0.0};
    switch (kind) {
    case FNN_MSE:
        if (!out && !w) return FNN_TNAME(fnn_mse_sum)(x, y, n);
        return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_mse), &s, out, n);
    case FNN_L1: return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_l1), &s, out, n);
    case FNN_SMOOTH_L1: return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_sl1), &s, out, n);
    case FNN_HUBER: return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_huber), &s, out, n);
    case FNN_BCE: return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_bce), &s, out, n);
    case FNN_BCE_LOGITS:
        if (pw) return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_bcel_pw), &s, out, n);
        return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_bcel), &s, out, n);
    case FNN_KL: return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_kl), &s, out, n);
    case FNN_KL_LOG: return FNN_TNAME(fnn_pwl_chunk)(FNN_TNAME(fnn_pwl_kl_log), &s, out, n);
    }
    return 0.0;
}

/* one kind's backward over a chunk: dx = d_loss * w * dterm, d_loss per element (dl) or
   the scalar g */
FNN_ALWAYS_INLINE void FNN_TNAME(fnn_pwl_grad)(FNN_T (*grad)(const fnn_sum_args*, ptrdiff_t),
                                               const fnn_sum_args* s, const FNN_T* dl, FNN_T g,
                                               FNN_T* dx, ptrdiff_t n) {
    const FNN_T* w = (const FNN_T*)s->d;
    ptrdiff_t i;
    if (dl) {
        if (w) for (i = 0; i < n; ++i) dx[i] = dl[i] * w[i] * grad(s, i);
        else for (i = 0; i < n; ++i) dx[i] = dl[i] * grad(s, i);
    } else {
        if (w) for (i = 0; i < n; ++i) dx[i] = g * w[i] * grad(s, i);
        else for (i = 0; i < n; ++i) dx[i] = g * grad(s, i);
    }
}

static void FNN_TNAME(fnn_pwl_bwd)(int kind, const FNN_T* x, const FNN_T* y, const FNN_T* w,
                                   const FNN_T* pw, FNN_T p, const FNN_T* dl, FNN_T g, FNN_T* dx,
                                   ptrdiff_t n) {
    fnn_sum_args s = {x, y, pw, w, (double)p, 0.0};
    switch (kind) {
    case FNN_MSE: FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_mse), &s, dl, g, dx, n); break;
    case FNN_L1: FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_sign), &s, dl, g, dx, n); break;
    case FNN_SMOOTH_L1:
        if (p == (FNN_T)0) FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_sign), &s, dl, g, dx, n);
        else FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_sl1), &s, dl, g, dx, n);
        break;
    case FNN_HUBER: FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_huber), &s, dl, g, dx, n); break;
    case FNN_BCE: FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_bce), &s, dl, g, dx, n); break;
    case FNN_BCE_LOGITS:
        if (pw) FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_bcel_pw), &s, dl, g, dx, n);
        else FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_bcel), &s, dl, g, dx, n);
        break;
    case FNN_KL: FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_kl), &s, dl, g, dx, n); break;
    case FNN_KL_LOG: FNN_TNAME(fnn_pwl_grad)(FNN_TNAME(fnn_pwl_d_kl_log), &s, dl, g, dx, n); break;
    }
}
