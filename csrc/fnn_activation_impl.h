/* The body of fnn_activation.h's kernels, once per element type: fnn_activation.h
 * includes this file twice, with FNN_T (float, double), FNN_ACT_NAME(name) (name_f,
 * name_d) and the math it uses defined:
 *   FNN_A_EXP(x), FNN_A_EXPM1(x), FNN_A_TANH(x), FNN_A_LOG1P(x), FNN_A_ABS(x)
 *   FNN_A_EXPNEG(x)   exp(x) for x <= 0 (or NaN)
 *   FNN_A_CDF(x, &g)  Phi(x), and g = exp(-x^2/2)
 *   FNN_A_SIGMOID(z)  1 / (1 + exp(-z));  FNN_A_XSIG(v, z) = v sigmoid(z)
 * Plain functions instead of one backslash-continued macro (issue #20): the same code,
 * readable, debuggable, and compiler errors point at a line.  No include guard, by
 * design: the end of this file undefines the parameters, ready for the next type. */
static void FNN_ACT_NAME(fnn_act)(int op, const FNN_T* a, const FNN_T* b, FNN_T* o, ptrdiff_t n,
                          const double* p) {
    ptrdiff_t i;
    const FNN_T zero = 0, one = 1;
    switch (op) {
    case FNN_RELU_FWD:
        FNN_SIMD for (i = 0; i < n; ++i) { FNN_T v = a[i]; o[i] = v < zero ? zero : v; }
        break;
    case FNN_RELU_BWD:      /* b = y; ReLU'(0) = 0; a NaN output passes the gradient */
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = b[i] <= zero ? zero : a[i];
        break;
    case FNN_LEAKY_FWD: {
        const FNN_T s = (FNN_T)p[0];
        FNN_SIMD for (i = 0; i < n; ++i) { FNN_T v = a[i]; o[i] = v > zero ? v : v * s; }
        break; }
    case FNN_LEAKY_BWD: {   /* b = y (slope >= 0) or x */
        const FNN_T s = (FNN_T)p[0];
        FNN_SIMD for (i = 0; i < n; ++i) { FNN_T g = a[i]; o[i] = b[i] > zero ? g : g * s; }
        break; }
    case FNN_ELU_FWD: {     /* p = alpha, scale, input_scale */
        const FNN_T sa = (FNN_T)(p[0] * p[1]), sc = (FNN_T)p[1], is = (FNN_T)p[2];
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T v = a[i];
            FNN_T neg = sa * FNN_A_EXPM1(v * is);
            o[i] = v > zero ? sc * v : neg;
        }
        break; }
    case FNN_ELU_BWD_OUT: { /* b = y: dy/dx = is (y + alpha scale) on the negative side */
        const FNN_T sa = (FNN_T)(p[0] * p[1]), sc = (FNN_T)p[1], is = (FNN_T)p[2];
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T g = a[i], y = b[i];
            o[i] = y > zero ? g * sc : g * is * (y + sa);   /* NaN -> NaN, as torch */
        }
        break; }
    case FNN_ELU_BWD_IN: {  /* b = x */
        const FNN_T sai = (FNN_T)(p[0] * p[1] * p[2]), sc = (FNN_T)p[1], is = (FNN_T)p[2];
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T g = a[i], v = b[i];
            FNN_T neg = g * sai * FNN_A_EXP(v * is);
            o[i] = v > zero ? g * sc : neg;
        }
        break; }
    case FNN_GELU_FWD:      /* x Phi(x) */
        FNN_SIMD for (i = FNN_ACT_NAME(fnn_gelu_fwd_vec)(a, o, n); i < n; ++i) {
            FNN_T v = a[i], g;
            o[i] = v * FNN_A_CDF(v, &g);
        }
        break;
    case FNN_GELU_BWD: {    /* Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi) */
        const FNN_T c = (FNN_T)0.39894228040143267794;
        FNN_SIMD for (i = FNN_ACT_NAME(fnn_gelu_bwd_vec)(a, b, o, n); i < n; ++i) {
            FNN_T v = b[i], g;
            FNN_T cdf = FNN_A_CDF(v, &g);
            o[i] = a[i] * (cdf + v * c * g);
        }
        break; }
    case FNN_GELUT_FWD: {   /* x/2 (1 + tanh z) = x sigmoid(2z): one exp, no cancellation */
        const FNN_T k2 = (FNN_T)(2 * 0.79788456080286535588), c = (FNN_T)0.044715;
        FNN_SIMD for (i = FNN_ACT_NAME(fnn_gelut_fwd_vec)(a, o, n); i < n; ++i) {
            FNN_T v = a[i];
            FNN_T z2 = k2 * (v + c * v * v * v);
            o[i] = FNN_A_XSIG(v, z2);
        }
        break; }
    case FNN_GELUT_BWD: {   /* s + 2 x s (1 - s) k (1 + 3c x^2), s = sigmoid(2z) */
        const FNN_T k = (FNN_T)0.79788456080286535588, k2 = (FNN_T)(2 * 0.79788456080286535588);
        const FNN_T c = (FNN_T)0.044715, c3 = (FNN_T)(3 * 0.044715), two = 2, cap = (FNN_T)1e4;
        FNN_SIMD for (i = FNN_ACT_NAME(fnn_gelut_bwd_vec)(a, b, o, n); i < n; ++i) {
            FNN_T v = b[i];
            FNN_T v2 = v * v;
            FNN_T s = FNN_A_SIGMOID(k2 * (v + c * v2 * v));
            /* v2 capped: past |x| = 100 s(1 - s) is exactly 0, and 0 * inf is not */
            FNN_T d = s + two * v * s * (one - s) * k * (one + c3 * (v2 < cap ? v2 : cap));
            o[i] = a[i] * d;
        }
        break; }
    case FNN_SILU_FWD:
        FNN_SIMD for (i = 0; i < n; ++i) { FNN_T v = a[i]; o[i] = FNN_A_XSIG(v, v); }
        break;
    case FNN_SILU_BWD:      /* b = x: s (1 + x (1 - s)) */
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T v = b[i];
            FNN_T s = FNN_A_SIGMOID(v);
            o[i] = a[i] * s * (one + v * (one - s));
        }
        break;
    case FNN_SOFTPLUS_FWD: { /* p = beta, threshold; max(bx,0) + log1p(exp(-|bx|)) */
        const FNN_T beta = (FNN_T)p[0], thr = (FNN_T)p[1], ib = (FNN_T)(1.0 / p[0]);
        FNN_SIMD for (i = FNN_ACT_NAME(fnn_softplus_fwd_vec)(a, o, n, p); i < n; ++i) {
            FNN_T v = a[i];
            FNN_T bx = v * beta;
            FNN_T sp = ((bx > zero ? bx : zero) + FNN_A_LOG1P(FNN_A_EXPNEG(-FNN_A_ABS(bx)))) * ib;
            o[i] = bx > thr ? v : sp;
        }
        break; }
    case FNN_SOFTPLUS_BWD: { /* b = x: sigmoid(beta x) below the threshold */
        const FNN_T beta = (FNN_T)p[0], thr = (FNN_T)p[1];
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T g = a[i], bx = b[i] * beta;
            FNN_T d = FNN_A_XSIG(g, bx);
            o[i] = bx > thr ? g : d;
        }
        break; }
    case FNN_SIGMOID_FWD:
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = FNN_A_SIGMOID(a[i]);
        break;
    case FNN_SIGMOID_BWD:   /* b = y */
        FNN_SIMD for (i = 0; i < n; ++i) { FNN_T y = b[i]; o[i] = a[i] * y * (one - y); }
        break;
    case FNN_TANH_FWD:
        FNN_SIMD for (i = FNN_ACT_NAME(fnn_tanh_fwd_vec)(a, o, n); i < n; ++i)
            o[i] = FNN_A_TANH(a[i]);
        break;
    case FNN_TANH_BWD:      /* b = y */
        FNN_SIMD for (i = 0; i < n; ++i) { FNN_T y = b[i]; o[i] = a[i] * (one - y * y); }
        break;
    case FNN_NEG:
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = -a[i];
        break;
    case FNN_MUL:
        FNN_SIMD for (i = 0; i < n; ++i) o[i] = a[i] * b[i];
        break;
    case FNN_HARDSWISH_FWD: { /* x min(max(x + 3, 0), 6) / 6 */
        const FNN_T three = 3, six = 6, sixth = (FNN_T)(1.0 / 6.0);
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T x = a[i], v = x + three;
            v = v < zero ? zero : v;
            v = v > six ? six : v;
            o[i] = x * v * sixth;
        }
        break; }
    case FNN_HARDSWISH_BWD: { /* b = x: 0 at and below -3, x / 3 + 1/2 inside, 1 at and
                                 above 3 (torch's vector kernel's tests: NaN gives NaN) */
        const FNN_T three = 3, third = (FNN_T)(1.0 / 3.0), half = (FNN_T)0.5;
        FNN_SIMD for (i = FNN_ACT_NAME(fnn_hardswish_bwd_vec)(a, b, o, n); i < n; ++i) {
            FNN_T v = b[i], g = a[i];
            FNN_T mid = g * (v * third + half);
            o[i] = v <= -three ? zero : (v >= three ? g : mid);
        }
        break; }
    case FNN_MISH_FWD: {    /* x tanh(softplus(x)) = x n / (n + 2), n = e (e + 2), e = exp(x):
                               no cancellation for x < 0; e capped at exp(20), where the
                               ratio is 1 in either type */
        const FNN_T cap = 20, two = 2;
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T x = a[i];
            FNN_T e = FNN_A_EXP(x < cap ? x : cap);
            FNN_T m = e * (e + two);
            o[i] = x * (m / (m + two));
        }
        break; }
    case FNN_MISH_BWD: {    /* b = x: t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)) as
                               above -- torch's form, so +inf gives NaN as torch's does */
        const FNN_T cap = 20, two = 2;
        FNN_SIMD for (i = 0; i < n; ++i) {
            FNN_T x = b[i];
            FNN_T e = FNN_A_EXP(x < cap ? x : cap);
            FNN_T m = e * (e + two);
            FNN_T t = m / (m + two);
            FNN_T s = FNN_A_SIGMOID(x);
            o[i] = a[i] * (t + x * s * (one - t * t));
        }
        break; }
    }
}

/* ReLU (leaky = 0) / LeakyReLU (leaky = 1, slope s) forward on n elements that also
   writes the backward's mask (see fnn_activation.h): one scalar pass, 8 elements a byte
   (the last byte partial).  The element type's own path for double and the loop tails
   of the vector forms for float. */
static void FNN_ACT_NAME(fnn_relu_mask_fwd_scalar)(int leaky, double slope, const FNN_T* x,
                                                   FNN_T* y, uint8_t* m, ptrdiff_t n) {
    const FNN_T s = (FNN_T)slope, zero = 0;
    for (ptrdiff_t j = 0; j < n; j += 8) {
        const int e = n - j < 8 ? (int)(n - j) : 8;
        unsigned bits = 0;
        for (int k = 0; k < e; ++k) {
            FNN_T v = x[j + k];
            FNN_T r = leaky ? (v > zero ? v : v * s) : (v < zero ? zero : v);
            bits |= (unsigned)(leaky ? v > zero : !(v <= zero)) << k;
            y[j + k] = r;
        }
        m[j >> 3] = (uint8_t)bits;
    }
}
/* ... and its backward: d_x = d_y where the bit is set, else 0 (ReLU) or s d_y (leaky
   1); leaky 2: s d_y where the bit is set, else 0 (Hardsigmoid) */
static void FNN_ACT_NAME(fnn_relu_mask_bwd_scalar)(int leaky, double slope, const FNN_T* dy,
                                                   const uint8_t* m, FNN_T* dx, ptrdiff_t n) {
    const FNN_T s = (FNN_T)slope, zero = 0;
    for (ptrdiff_t j = 0; j < n; j += 8) {
        const int e = n - j < 8 ? (int)(n - j) : 8;
        const unsigned bits = m[j >> 3];
        for (int k = 0; k < e; ++k) {
            FNN_T g = dy[j + k];
            dx[j + k] = (bits >> k) & 1u ? (leaky == 2 ? g * s : g) : (leaky == 1 ? g * s : zero);
        }
    }
}

/* Hardtanh / ReLU6 forward with the ReLU's bit mask: y = min(max(x, lo), hi) (NaN
   passes), the bit set where lo < x < hi (where the gradient passes; NaN: not, as
   torch's); the backward is the ReLU's (fnn_relu_mask_bwd, leaky 0).  shift = 1:
   Hardsigmoid, y = min(max(x + 3, 0), 6) * (1/6) and the bit where -3 < x < 3 (lower and
   upper unused; its backward fnn_relu_mask_bwd with leaky 2, s = 1/6) */
static void FNN_ACT_NAME(fnn_clamp_mask_fwd_scalar)(int shift, double lower, double upper,
                                                    const FNN_T* x, FNN_T* y, uint8_t* m,
                                                    ptrdiff_t n) {
    const FNN_T lo = (FNN_T)(shift ? -3.0 : lower), hi = (FNN_T)(shift ? 3.0 : upper);
    const FNN_T three = 3, six = 6, zero = 0, sixth = (FNN_T)(1.0 / 6.0);
    for (ptrdiff_t j = 0; j < n; j += 8) {
        const int e = n - j < 8 ? (int)(n - j) : 8;
        unsigned bits = 0;
        for (int k = 0; k < e; ++k) {
            FNN_T v = x[j + k];
            bits |= (unsigned)(v > lo && v < hi) << k;
            if (shift) {
                FNN_T r = v + three;
                r = r < zero ? zero : r;
                y[j + k] = (r > six ? six : r) * sixth;
            } else {
                FNN_T r = v < lo ? lo : v;
                y[j + k] = r > hi ? hi : r;
            }
        }
        m[j >> 3] = (uint8_t)bits;
    }
}

/* RReLU training forward on elements [i0, i1) of the whole array: x <= 0 draws the
   slope lower + (upper - lower) u_i (u_i: Philox uniform of element i), else 1;
   noise keeps it for backward. */
static void FNN_ACT_NAME(fnn_rrelu)(const FNN_T* x, FNN_T* y, FNN_T* noise, ptrdiff_t i0, ptrdiff_t i1,
                            double lower, double upper, uint64_t seed, uint64_t offset) {
    const FNN_T lo = (FNN_T)lower, w = (FNN_T)(upper - lower), zero = 0, one = 1;
    ptrdiff_t g = i0;
    while (g < i1) {
        fnn_philox_out r = fnn_philox4x32((uint64_t)g >> 2, offset, seed);
        int lane;
        for (lane = (int)(g & 3); lane < 4 && g < i1; ++lane, ++g) {
            FNN_T s = lo + w * (FNN_T)fnn_u24_to_float(r.v[lane]);
            FNN_T v = x[g];
            FNN_T nz = v <= zero ? s : one;
            noise[g] = nz;
            y[g] = v * nz;
        }
    }
}

/* PReLU on elements [e0, e1) of x viewed as (outer, C, inner): the weight of element
   e is w[(e / inner) % C]; the range is walked in segments of one channel each. */
static void FNN_ACT_NAME(fnn_prelu_fwd)(const FNN_T* x, const FNN_T* w, FNN_T* y, ptrdiff_t e0, ptrdiff_t e1,
                                ptrdiff_t C, ptrdiff_t inner) {
    const FNN_T zero = 0;
    ptrdiff_t e = e0;
    while (e < e1) {
        ptrdiff_t r = e / inner, end = (r + 1) * inner;
        const FNN_T s = w[r % C];
        if (end > e1) end = e1;
        FNN_SIMD for (ptrdiff_t i = e; i < end; ++i) {
            FNN_T v = x[i]; y[i] = v > zero ? v : s * v;
        }
        e = end;
    }
}
/* backward on elements [e0, e1): dx, and this block's partial weight-gradient sums
   (double, a fixed order for a fixed block) into part[0..C). */
static void FNN_ACT_NAME(fnn_prelu_bwd)(const FNN_T* dy, const FNN_T* x, const FNN_T* w, FNN_T* dx, double* part,
                                ptrdiff_t e0, ptrdiff_t e1, ptrdiff_t C, ptrdiff_t inner) {
    const FNN_T zero = 0;
    ptrdiff_t e = e0;
    for (ptrdiff_t c = 0; c < C; ++c) part[c] = 0.0;
    while (e < e1) {
        ptrdiff_t r = e / inner, end = (r + 1) * inner;
        const ptrdiff_t c = r % C;
        const FNN_T s = w[c];
        double acc = 0.0;
        if (end > e1) end = e1;
        _Pragma("omp simd reduction(+:acc)")
        for (ptrdiff_t i = e; i < end; ++i) {
            FNN_T v = x[i], g = dy[i];
            dx[i] = v > zero ? g : s * g;
            acc += v > zero ? 0.0 : (double)v * (double)g;
        }
        part[c] += acc;
        e = end;
    }
}

#undef FNN_T
#undef FNN_ACT_NAME
#undef FNN_A_EXP
#undef FNN_A_EXPNEG
#undef FNN_A_EXPM1
#undef FNN_A_TANH
#undef FNN_A_CDF
#undef FNN_A_LOG1P
#undef FNN_A_ABS
#undef FNN_A_SIGMOID
#undef FNN_A_XSIG
