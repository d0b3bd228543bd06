# Pool family: max_pool2d and avg_pool2d over NCHW planes, forward and backward.
#
# Every (n, c) plane is independent, so the parallel loop runs over the N*C planes
# (static schedule) and each plane is one pass of direct loops over its output.  The
# taps of a window that fall inside the input are found once per output row / column
# (padding is never read), so the inner loops carry no bounds tests.
#
# max_pool2d reproduces torch's scan: taps in row-major order, a tap wins when it is
# larger or NaN (so ties keep the first, NaN propagates), the first tap inside the
# input always wins.  It saves the argmax as the tap number i*kW + j (int32, -1 for a
# window without input elements); backward adds dy into that tap, plane by plane, so
# overlapping windows need no atomics and the result is deterministic.
# 2x2 stride-2 windows (the common case) have a branch-free kernel, and their backward
# writes every dx element once instead of zeroing and scattering.
#
# avg_pool2d is separable: per output row, one contiguous pass sums the window's input
# rows into a zero-padded row, and the window sums along that row (constant-stride loops
# for the common kernel/stride pairs) are divided by torch's divisor.  Backward runs the
# two passes transposed -- each output row's share spread along its padded row, then
# every dx row written once as the sum of the rows covering it -- so dx is neither
# zeroed first nor read back (3x3/2 on 16x64x112x112, one thread: forward 9.1 -> 4.2 ms,
# backward 19 -> 5.5 ms).
#
# adaptive_avg_pool2d / adaptive_max_pool2d: torch's windows (rows floor(p*H/OH) ..
# ceil((p+1)*H/OH), the same for columns), one plane per loop iteration.  A window of
# whole rows is one contiguous run (the global-average case): one lane sum in double
# (fnn_reduce.h), otherwise one per row.  The max saves torch's int64 flat index
# h*W + w (return_indices); both backwards zero the plane and add each output's share
# in output order (windows may overlap), so results do not depend on the thread count.
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange, parallel
from libc.stdlib cimport free
from libc.math cimport INFINITY
from libc.string cimport memset
from libc.stdint cimport int32_t, int64_t

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

OPS = ("max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
       "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward",
       "adaptive_max_pool2d", "adaptive_max_pool2d_backward")


include "fnn_window.pxi"


cdef extern from "fnn_pool.h" nogil:
    void fnn_max2x2_row_f(const float* r0, const float* r1, float* y, int32_t* t, Py_ssize_t OW)
    void fnn_max2x2_row_d(const double* r0, const double* r1, double* y, int32_t* t, Py_ssize_t OW)
    void fnn_max2x2_bwd_row_f(const float* g, const int32_t* t, float* d0, float* d1, Py_ssize_t OW)
    void fnn_max2x2_bwd_row_d(const double* g, const int32_t* t, double* d0, double* d1,
                              Py_ssize_t OW)
    void fnn_max_tap_f(const float* src, Py_ssize_t s, float* m, int32_t* k, int32_t tap,
                       Py_ssize_t o0, Py_ssize_t o1)
    void fnn_max_tap_d(const double* src, Py_ssize_t s, double* m, int32_t* k, int32_t tap,
                       Py_ssize_t o0, Py_ssize_t o1)
    void fnn_avg_vsum_f(float* v, const float* x, Py_ssize_t W, Py_ssize_t rows, Py_ssize_t rs)
    void fnn_avg_vsum_d(double* v, const double* x, Py_ssize_t W, Py_ssize_t rows, Py_ssize_t rs)
    void fnn_avg_hrow_f(const float* v, float* y, const float* dv, Py_ssize_t OW, Py_ssize_t kw,
                        Py_ssize_t sw)
    void fnn_avg_hrow_d(const double* v, double* y, const double* dv, Py_ssize_t OW,
                        Py_ssize_t kw, Py_ssize_t sw)
    void fnn_avg_hscatter_f(const float* gz, float* hb, Py_ssize_t L, Py_ssize_t OW, Py_ssize_t kw,
                            Py_ssize_t sw)
    void fnn_avg_hscatter_d(const double* gz, double* hb, Py_ssize_t L, Py_ssize_t OW,
                            Py_ssize_t kw, Py_ssize_t sw)


cdef void _max_plane(const real* x, real* y, int32_t* am, Py_ssize_t H, Py_ssize_t W,
                     Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                     Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                     Py_ssize_t dh, Py_ssize_t dw) noexcept nogil:
    """Tap by tap over a whole output row (the row of y / am is the running max / argmax),
    so the inner loop is a branch-free select across the row."""
    cdef Py_ssize_t oh, ow, i, j, ih, off, o0, o1
    cdef real* yr
    cdef int32_t* ar
    for oh in range(OH):
        yr = y + oh * OW
        ar = am + oh * OW
        for ow in range(OW):
            yr[ow] = -INFINITY
            ar[ow] = -1
        for i in range(kh):
            ih = oh * sh - ph + i * dh
            if ih < 0 or ih >= H:
                continue
            for j in range(kw):
                off = j * dw - pw
                _ow_range(off, sw, W, OW, &o0, &o1)
                if real is float:
                    fnn_max_tap_f(x + ih * W + off, sw, yr, ar, <int32_t>(i * kw + j), o0, o1)
                else:
                    fnn_max_tap_d(x + ih * W + off, sw, yr, ar, <int32_t>(i * kw + j), o0, o1)


cdef void _max_plane_2x2(const real* x, real* y, int32_t* am, Py_ssize_t H, Py_ssize_t W,
                         Py_ssize_t OH, Py_ssize_t OW) noexcept nogil:
    """2x2 windows, stride 2, no padding or dilation: every tap is inside the input."""
    cdef Py_ssize_t oh
    for oh in range(OH):
        if real is float:
            fnn_max2x2_row_f(x + 2 * oh * W, x + (2 * oh + 1) * W, y + oh * OW, am + oh * OW, OW)
        else:
            fnn_max2x2_row_d(x + 2 * oh * W, x + (2 * oh + 1) * W, y + oh * OW, am + oh * OW, OW)


cdef void _max_fwd(const real* x, real* y, int32_t* am, Py_ssize_t P, Py_ssize_t H,
                   Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                   Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                   Py_ssize_t dh, Py_ssize_t dw) noexcept nogil:
    cdef Py_ssize_t p
    cdef int nt = _threads_for(P * H * W, 1 << 15)
    cdef bint fast = (kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0
                      and dh == 1 and dw == 1 and 2 * OH <= H and 2 * OW <= W)
    for p in prange(P, nogil=True, schedule="static", num_threads=nt):
        if fast:
            _max_plane_2x2(x + p * H * W, y + p * OH * OW, am + p * OH * OW, H, W, OH, OW)
        else:
            _max_plane(x + p * H * W, y + p * OH * OW, am + p * OH * OW, H, W, OH, OW,
                       kh, kw, sh, sw, ph, pw, dh, dw)


cdef void _max_bwd(const real* g, const int32_t* am, real* dx, Py_ssize_t P, Py_ssize_t H,
                   Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kw,
                   Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                   Py_ssize_t dh, Py_ssize_t dw, bint fast) noexcept nogil:
    cdef Py_ssize_t p, oh, ow, t, o
    cdef real* d
    cdef const real* gp
    cdef const int32_t* ap
    cdef real v
    cdef int nt = _threads_for(P * H * W, 1 << 15)
    for p in prange(P, nogil=True, schedule="static", num_threads=nt):
        d = dx + p * H * W
        gp = g + p * OH * OW
        ap = am + p * OH * OW
        if fast:
            # non-overlapping 2x2 windows: each dx element is written exactly once
            if 2 * OH < H or 2 * OW < W:
                memset(d, 0, H * W * sizeof(real))
            for oh in range(OH):
                if real is float:
                    fnn_max2x2_bwd_row_f(gp + oh * OW, ap + oh * OW, d + 2 * oh * W,
                                         d + (2 * oh + 1) * W, OW)
                else:
                    fnn_max2x2_bwd_row_d(gp + oh * OW, ap + oh * OW, d + 2 * oh * W,
                                         d + (2 * oh + 1) * W, OW)
        else:
            memset(d, 0, H * W * sizeof(real))
            for oh in range(OH):
                for ow in range(OW):
                    o = oh * OW + ow
                    t = ap[o]
                    if t >= 0:
                        d[(oh * sh - ph + (t // kw) * dh) * W + ow * sw - pw + (t % kw) * dw] += gp[o]


def max_pool2d(cnp.ndarray x, tuple kernel, tuple stride, tuple padding, tuple dilation,
               tuple out_hw):
    """max_pool2d(x, (kH, kW), (sH, sW), (pH, pW), (dH, dW), (OH, OW)) -> (y, saved).
    x (N, C, H, W) C-contiguous."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OH = out_hw[0], OW = out_hw[1]
    cdef Py_ssize_t kh = kernel[0], kw = kernel[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = padding[0], pw = padding[1], dh = dilation[0], dw = dilation[1]
    cdef cnp.ndarray y = np.empty((N, C, OH, OW), dtype=x.dtype)
    cdef cnp.ndarray am = np.empty((N, C, OH, OW), dtype=np.int32)
    cdef int T = F32 if x.dtype == np.float32 else F64
    cdef const void* p_x = _data(x, N * C * H * W, T)
    cdef void* p_y = _data(y, N * C * OH * OW, T)
    cdef void* p_am = _data(am, N * C * OH * OW, I32)
    if x.dtype == np.float32:
        with nogil:
            _max_fwd[float](<const float*>p_x, <float*>p_y,
                            <int32_t*>p_am, N * C, H, W, OH, OW, kh, kw,
                            sh, sw, ph, pw, dh, dw)
    else:
        with nogil:
            _max_fwd[double](<const double*>p_x, <double*>p_y,
                             <int32_t*>p_am, N * C, H, W, OH, OW, kh, kw,
                             sh, sw, ph, pw, dh, dw)
    return y, (am, (<object>x).shape, kernel, stride, padding, dilation)


def max_pool2d_backward(cnp.ndarray dy, tuple saved):
    """-> d_input."""
    cdef cnp.ndarray am = saved[0]
    shape, kernel, stride, padding, dilation = saved[1:]
    cdef Py_ssize_t N = shape[0], C = shape[1], H = shape[2], W = shape[3]
    cdef Py_ssize_t OH = dy.shape[2], OW = dy.shape[3]
    cdef Py_ssize_t kh = kernel[0], kw = kernel[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = padding[0], pw = padding[1], dh = dilation[0], dw = dilation[1]
    cdef bint fast = (kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0
                      and dh == 1 and dw == 1 and 2 * OH <= H and 2 * OW <= W)
    cdef cnp.ndarray dx = np.empty(shape, dtype=dy.dtype)
    cdef int T = F32 if dy.dtype == np.float32 else F64
    cdef const void* p_dy = _data(dy, N * C * OH * OW, T)
    cdef const void* p_am = _data(am, N * C * OH * OW, I32)
    cdef void* p_dx = _data(dx, N * C * H * W, T)
    if dy.dtype == np.float32:
        with nogil:
            _max_bwd[float](<const float*>p_dy, <const int32_t*>p_am,
                            <float*>p_dx, N * C, H, W, OH, OW, kw, sh, sw, ph, pw,
                            dh, dw, fast)
    else:
        with nogil:
            _max_bwd[double](<const double*>p_dy, <const int32_t*>p_am,
                             <double*>p_dx, N * C, H, W, OH, OW, kw, sh, sw, ph, pw,
                             dh, dw, fast)
    return dx


# ---------------------------------------------------------------- average pooling
cdef double* _col_factors(Py_ssize_t OW, Py_ssize_t kw, Py_ssize_t sw, Py_ssize_t pw,
                          Py_ssize_t W, bint include_pad) except NULL nogil:
    """Per output column: the window width torch divides by (clipped to the padded input
    with count_include_pad, to the input otherwise); 0 where no input column is covered."""
    cdef double* f = <double*>_alloc(OW + 1, sizeof(double))
    cdef Py_ssize_t ow, c0, c1, v0, v1
    for ow in range(OW):
        c0 = ow * sw - pw
        c1 = c0 + kw
        if c1 > W + pw:
            c1 = W + pw
        v0 = c0 if c0 > 0 else 0
        v1 = c1 if c1 < W else W
        if v1 <= v0:
            f[ow] = 0
        elif include_pad:
            f[ow] = <double>(c1 - c0)
        else:
            f[ow] = <double>(v1 - v0)
    return f


cdef inline double _row_factor(Py_ssize_t oh, Py_ssize_t kh, Py_ssize_t sh, Py_ssize_t ph,
                               Py_ssize_t H, bint include_pad) noexcept nogil:
    cdef Py_ssize_t r0 = oh * sh - ph, r1, v0, v1
    r1 = r0 + kh
    if r1 > H + ph:
        r1 = H + ph
    v0 = r0 if r0 > 0 else 0
    v1 = r1 if r1 < H else H
    if v1 <= v0:
        return 0
    return <double>(r1 - r0) if include_pad else <double>(v1 - v0)


cdef inline Py_ssize_t _padded_width(Py_ssize_t W, Py_ssize_t OW, Py_ssize_t kw, Py_ssize_t sw,
                                     Py_ssize_t pw) noexcept nogil:
    """Columns of a zero-padded row that every window reads (ceil_mode windows may end
    past the right padding)."""
    cdef Py_ssize_t L = (OW - 1) * sw + kw
    return L if L > W + pw else W + pw


cdef inline void _div_row(real* dv, Py_ssize_t oh, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t sh,
                          Py_ssize_t ph, Py_ssize_t H, bint include_pad, Py_ssize_t override,
                          const double* cf) noexcept nogil:
    """dv[ow] = torch's divisor of output (oh, ow); 0 where the window holds no input."""
    cdef Py_ssize_t ow
    cdef double hf = _row_factor(oh, kh, sh, ph, H, include_pad), div
    for ow in range(OW):
        div = hf * cf[ow]
        if override != 0 and div != 0:
            div = <double>override
        dv[ow] = <real>div


cdef void _avg_plane(const real* x, real* y, real* v, real* dv, Py_ssize_t H, Py_ssize_t W,
                     Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh,
                     Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw, bint include_pad,
                     Py_ssize_t override, const double* cf) noexcept nogil:
    """One plane, output row by output row: v[pw:pw+W] = the sum of the window's input
    rows (v is zero outside), then the horizontal window sums over v, divided."""
    cdef Py_ssize_t oh, r0, r1
    for oh in range(OH):
        r0 = oh * sh - ph
        r1 = r0 + kh
        if r0 < 0:
            r0 = 0
        if r1 > H:
            r1 = H
        if r1 < r0:
            r1 = r0
        _div_row(dv, oh, OW, kh, sh, ph, H, include_pad, override, cf)
        if real is float:
            fnn_avg_vsum_f(v + pw, x + r0 * W, W, r1 - r0, W)
            fnn_avg_hrow_f(v, y + oh * OW, dv, OW, kw, sw)
        else:
            fnn_avg_vsum_d(v + pw, x + r0 * W, W, r1 - r0, W)
            fnn_avg_hrow_d(v, y + oh * OW, dv, OW, kw, sw)


cdef int _avg_fwd(const real* x, real* y, Py_ssize_t P, Py_ssize_t H, Py_ssize_t W,
                  Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                  Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                  bint include_pad, Py_ssize_t override) except -1 nogil:
    cdef Py_ssize_t p
    cdef int nt = _threads_for(P * H * W, 1 << 15)
    cdef double* cf = _col_factors(OW, kw, sw, pw, W, include_pad)
    # the zero-padded row sum: [0, pw) and [pw + W, L) stay zero
    cdef Py_ssize_t L = _padded_width(W, OW, kw, sw, pw)
    cdef real* v = NULL
    cdef real* dv = NULL
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        v = <real*>fnn_calloc(L + 8, sizeof(real))
        dv = <real*>fnn_alloc(OW + 8, sizeof(real))
        if v == NULL or dv == NULL:
            fnn_flag_set(&failed)
        for p in prange(P, schedule="static"):
            if v != NULL and dv != NULL:
                _avg_plane(x + p * H * W, y + p * OH * OW, v, dv, H, W, OH, OW, kh, kw, sh, sw,
                           ph, pw, include_pad, override, cf)
        free(v)
        free(dv)
    free(cf)
    if failed:
        _raise_nomem(L + OW + 16, sizeof(real))
    return 0


cdef void _avg_plane_bwd(const real* g, real* d, real* gz, real* hb, real* dv, Py_ssize_t L,
                         Py_ssize_t H, Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW,
                         Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                         Py_ssize_t ph, Py_ssize_t pw, bint include_pad, Py_ssize_t override,
                         const double* cf) noexcept nogil:
    """One plane, the forward's two passes transposed: every output row's g / divisor
    spread over its windows' columns (hb, one padded row per output row), then each
    input row of d written once as the sum of the hb rows whose windows cover it."""
    cdef Py_ssize_t oh, ow, ih, a, b
    cdef const real* gr
    for oh in range(OH):
        _div_row(dv, oh, OW, kh, sh, ph, H, include_pad, override, cf)
        gr = g + oh * OW
        for ow in range(OW):
            gz[kw + ow] = gr[ow] / dv[ow] if dv[ow] != 0 else 0
        if real is float:
            fnn_avg_hscatter_f(gz + kw, hb + oh * L, L, OW, kw, sw)
        else:
            fnn_avg_hscatter_d(gz + kw, hb + oh * L, L, OW, kw, sw)
    for ih in range(H):
        # output rows whose window [oh*sh - ph, oh*sh - ph + kh) holds ih
        a = ih + ph - kh + 1
        a = 0 if a <= 0 else (a + sh - 1) // sh
        b = (ih + ph) // sh + 1
        if b > OH:
            b = OH
        if b < a:
            b = a
        if real is float:
            fnn_avg_vsum_f(d + ih * W, hb + a * L + pw, W, b - a, L)
        else:
            fnn_avg_vsum_d(d + ih * W, hb + a * L + pw, W, b - a, L)


cdef int _avg_bwd(const real* g, real* dx, Py_ssize_t P, Py_ssize_t H, Py_ssize_t W,
                  Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                  Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                  bint include_pad, Py_ssize_t override) except -1 nogil:
    cdef Py_ssize_t p
    cdef real* gz = NULL
    cdef real* hb = NULL
    cdef real* dv = NULL
    cdef int failed = 0
    cdef int nt = _threads_for(P * H * W, 1 << 15)
    cdef double* cf = _col_factors(OW, kw, sw, pw, W, include_pad)
    cdef Py_ssize_t L = _padded_width(W, OW, kw, sw, pw)
    with nogil, parallel(num_threads=nt):
        # gz: the divided output row behind kw zeros, zeros after it
        gz = <real*>fnn_calloc(OW + L + 3 * kw + 8, sizeof(real))
        hb = <real*>fnn_alloc(OH * L + 8, sizeof(real))
        dv = <real*>fnn_alloc(OW + 8, sizeof(real))
        if gz == NULL or hb == NULL or dv == NULL:
            fnn_flag_set(&failed)
        for p in prange(P, schedule="static"):
            if gz != NULL and hb != NULL and dv != NULL:
                _avg_plane_bwd(g + p * OH * OW, dx + p * H * W, gz, hb, dv, L, H, W, OH, OW, kh,
                               kw, sh, sw, ph, pw, include_pad, override, cf)
        free(gz)
        free(hb)
        free(dv)
    free(cf)
    if failed:
        _raise_nomem(OW + L + 3 * kw + OH * L + OW + 24, sizeof(real))
    return 0


def avg_pool2d(cnp.ndarray x, tuple kernel, tuple stride, tuple padding, tuple out_hw,
               bint count_include_pad, object divisor_override):
    """avg_pool2d(x, (kH, kW), (sH, sW), (pH, pW), (OH, OW), count_include_pad,
    divisor_override or None) -> (y, saved)."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OH = out_hw[0], OW = out_hw[1]
    cdef Py_ssize_t kh = kernel[0], kw = kernel[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = padding[0], pw = padding[1]
    cdef Py_ssize_t ov = divisor_override if divisor_override else 0
    cdef cnp.ndarray y = np.empty((N, C, OH, OW), dtype=x.dtype)
    cdef int T = F32 if x.dtype == np.float32 else F64
    cdef const void* p_x = _data(x, N * C * H * W, T)
    cdef void* p_y = _data(y, N * C * OH * OW, T)
    if x.dtype == np.float32:
        with nogil:
            _avg_fwd[float](<const float*>p_x, <float*>p_y,
                            N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, count_include_pad, ov)
    else:
        with nogil:
            _avg_fwd[double](<const double*>p_x, <double*>p_y,
                             N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, count_include_pad, ov)
    return y, ((<object>x).shape, kernel, stride, padding, count_include_pad, divisor_override)


def avg_pool2d_backward(cnp.ndarray dy, tuple saved):
    """-> d_input."""
    shape, kernel, stride, padding, count_include_pad, divisor_override = saved
    cdef Py_ssize_t N = shape[0], C = shape[1], H = shape[2], W = shape[3]
    cdef Py_ssize_t OH = dy.shape[2], OW = dy.shape[3]
    cdef Py_ssize_t kh = kernel[0], kw = kernel[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = padding[0], pw = padding[1]
    cdef Py_ssize_t ov = divisor_override if divisor_override else 0
    cdef bint cip = count_include_pad
    cdef cnp.ndarray dx = np.empty(shape, dtype=dy.dtype)
    cdef int T = F32 if dy.dtype == np.float32 else F64
    cdef const void* p_dy = _data(dy, N * C * OH * OW, T)
    cdef void* p_dx = _data(dx, N * C * H * W, T)
    if dy.dtype == np.float32:
        with nogil:
            _avg_bwd[float](<const float*>p_dy, <float*>p_dx,
                            N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip, ov)
    else:
        with nogil:
            _avg_bwd[double](<const double*>p_dy, <double*>p_dx,
                             N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip, ov)
    return dx


# ---------------------------------------------------------------- adaptive pooling
cdef extern from "fnn_reduce.h" nogil:
    double fnn_sum_f(const float* x, Py_ssize_t n)
    double fnn_sum_d(const double* x, Py_ssize_t n)


cdef inline double _run_sum(const real* x, Py_ssize_t n) noexcept nogil:
    if real is float:
        return fnn_sum_f(x, n)
    else:
        return fnn_sum_d(x, n)


cdef inline Py_ssize_t _astart(Py_ssize_t o, Py_ssize_t n_in, Py_ssize_t n_out) noexcept nogil:
    return (o * n_in) // n_out


cdef inline Py_ssize_t _aend(Py_ssize_t o, Py_ssize_t n_in, Py_ssize_t n_out) noexcept nogil:
    return ((o + 1) * n_in + n_out - 1) // n_out


cdef void _aavg_fwd(const real* x, real* y, Py_ssize_t P, Py_ssize_t H, Py_ssize_t W,
                    Py_ssize_t OH, Py_ssize_t OW, int nt) noexcept nogil:
    cdef Py_ssize_t pl, oh, ow, h, h0, h1, w0, w1
    cdef double acc
    cdef const real* xp
    for pl in prange(P, nogil=True, schedule="static", num_threads=nt):
        xp = x + pl * H * W
        for oh in range(OH):
            h0 = _astart(oh, H, OH)
            h1 = _aend(oh, H, OH)
            for ow in range(OW):
                w0 = _astart(ow, W, OW)
                w1 = _aend(ow, W, OW)
                if w0 == 0 and w1 == W:
                    acc = _run_sum(xp + h0 * W, (h1 - h0) * W)
                else:
                    acc = 0.0
                    for h in range(h0, h1):
                        acc = acc + _run_sum(xp + h * W + w0, w1 - w0)
                y[(pl * OH + oh) * OW + ow] = <real>(acc / ((h1 - h0) * (w1 - w0)))


cdef void _aavg_bwd(const real* g, real* dx, Py_ssize_t P, Py_ssize_t H, Py_ssize_t W,
                    Py_ssize_t OH, Py_ssize_t OW, int nt) noexcept nogil:
    cdef Py_ssize_t pl, oh, ow, h, w, h0, h1, w0, w1
    cdef real share
    cdef real* d
    for pl in prange(P, nogil=True, schedule="static", num_threads=nt):
        d = dx + pl * H * W
        if OH == 1 and OW == 1:
            share = <real>(g[pl] / (<double>H * W))
            for h in range(H * W):
                d[h] = share
            continue
        memset(d, 0, H * W * sizeof(real))
        for oh in range(OH):
            h0 = _astart(oh, H, OH)
            h1 = _aend(oh, H, OH)
            for ow in range(OW):
                w0 = _astart(ow, W, OW)
                w1 = _aend(ow, W, OW)
                share = <real>(g[(pl * OH + oh) * OW + ow] / (<double>(h1 - h0) * (w1 - w0)))
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        d[h * W + w] += share


cdef void _amax_fwd(const real* x, real* y, int64_t* idx, Py_ssize_t P, Py_ssize_t H, Py_ssize_t W,
                    Py_ssize_t OH, Py_ssize_t OW, int nt) noexcept nogil:
    cdef Py_ssize_t pl, oh, ow, h, w, h0, h1, w0, w1, o
    cdef int64_t best_i
    cdef real best, v
    cdef const real* xp
    for pl in prange(P, nogil=True, schedule="static", num_threads=nt):
        xp = x + pl * H * W
        for oh in range(OH):
            h0 = _astart(oh, H, OH)
            h1 = _aend(oh, H, OH)
            for ow in range(OW):
                w0 = _astart(ow, W, OW)
                w1 = _aend(ow, W, OW)
                # torch's scan: starts at -inf with the first element's index; a larger
                # value or a NaN takes over (ties keep the first, the last NaN wins)
                best = -INFINITY
                best_i = h0 * W + w0
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        v = xp[h * W + w]
                        if v > best or v != v:
                            best = v
                            best_i = h * W + w
                o = (pl * OH + oh) * OW + ow
                y[o] = best
                idx[o] = best_i


cdef void _amax_bwd(const real* g, const int64_t* idx, real* dx, Py_ssize_t P, Py_ssize_t HW,
                    Py_ssize_t OHW, int nt) noexcept nogil:
    cdef Py_ssize_t pl, o
    cdef real* d
    for pl in prange(P, nogil=True, schedule="static", num_threads=nt):
        d = dx + pl * HW
        memset(d, 0, HW * sizeof(real))
        for o in range(pl * OHW, (pl + 1) * OHW):
            d[idx[o]] += g[o]


def adaptive_avg_pool2d(cnp.ndarray x, tuple out_hw):
    """adaptive_avg_pool2d(x, (OH, OW)) -> (y, saved).  x (N, C, H, W) C-contiguous, H, W > 0."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OH = out_hw[0], OW = out_hw[1]
    cdef cnp.ndarray y = np.empty((N, C, OH, OW), dtype=x.dtype)
    cdef int nt = _threads_for(N * C * H * W, 1 << 15)
    cdef int T = F32 if x.dtype == np.float32 else F64
    cdef const void* p_x = _data(x, N * C * H * W, T)
    cdef void* p_y = _data(y, N * C * OH * OW, T)
    if x.dtype == np.float32:
        with nogil:
            _aavg_fwd[float](<const float*>p_x, <float*>p_y,
                             N * C, H, W, OH, OW, nt)
    else:
        with nogil:
            _aavg_fwd[double](<const double*>p_x, <double*>p_y,
                              N * C, H, W, OH, OW, nt)
    return y, (<object>x).shape


def adaptive_avg_pool2d_backward(cnp.ndarray dy, tuple saved):
    """-> d_input."""
    cdef Py_ssize_t N = saved[0], C = saved[1], H = saved[2], W = saved[3]
    cdef Py_ssize_t OH = dy.shape[2], OW = dy.shape[3]
    cdef cnp.ndarray dx = np.empty(saved, dtype=dy.dtype)
    cdef int nt = _threads_for(N * C * H * W, 1 << 15)
    cdef int T = F32 if dy.dtype == np.float32 else F64
    cdef const void* p_dy = _data(dy, N * C * OH * OW, T)
    cdef void* p_dx = _data(dx, N * C * H * W, T)
    if dy.dtype == np.float32:
        with nogil:
            _aavg_bwd[float](<const float*>p_dy, <float*>p_dx,
                             N * C, H, W, OH, OW, nt)
    else:
        with nogil:
            _aavg_bwd[double](<const double*>p_dy, <double*>p_dx,
                              N * C, H, W, OH, OW, nt)
    return dx


def adaptive_max_pool2d(cnp.ndarray x, tuple out_hw):
    """adaptive_max_pool2d(x, (OH, OW)) -> (y, saved); saved[0]: int64 argmax h*W + w."""
    cdef Py_ssize_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OH = out_hw[0], OW = out_hw[1]
    cdef cnp.ndarray y = np.empty((N, C, OH, OW), dtype=x.dtype)
    cdef cnp.ndarray idx = np.empty((N, C, OH, OW), dtype=np.int64)
    cdef int nt = _threads_for(N * C * H * W, 1 << 15)
    cdef int T = F32 if x.dtype == np.float32 else F64
    cdef const void* p_x = _data(x, N * C * H * W, T)
    cdef void* p_y = _data(y, N * C * OH * OW, T)
    cdef void* p_idx = _data(idx, N * C * OH * OW, I64)
    if x.dtype == np.float32:
        with nogil:
            _amax_fwd[float](<const float*>p_x, <float*>p_y,
                             <int64_t*>p_idx, N * C, H, W, OH, OW, nt)
    else:
        with nogil:
            _amax_fwd[double](<const double*>p_x, <double*>p_y,
                              <int64_t*>p_idx, N * C, H, W, OH, OW, nt)
    return y, (idx, (<object>x).shape)


def adaptive_max_pool2d_backward(cnp.ndarray dy, tuple saved):
    """-> d_input (each output's gradient added at its argmax)."""
    cdef cnp.ndarray idx = saved[0]
    shape = saved[1]
    cdef Py_ssize_t P = shape[0] * shape[1], HW = shape[2] * shape[3]
    cdef Py_ssize_t OHW = dy.shape[2] * dy.shape[3]
    cdef cnp.ndarray dx = np.empty(shape, dtype=dy.dtype)
    cdef int nt = _threads_for(P * HW, 1 << 15)
    cdef int T = F32 if dy.dtype == np.float32 else F64
    cdef const void* p_dy = _data(dy, P * OHW, T)
    cdef const void* p_idx = _data(idx, P * OHW, I64)
    cdef void* p_dx = _data(dx, P * HW, T)
    if dy.dtype == np.float32:
        with nogil:
            _amax_bwd[float](<const float*>p_dy, <const int64_t*>p_idx,
                             <float*>p_dx, P, HW, OHW, nt)
    else:
        with nogil:
            _amax_bwd[double](<const double*>p_dy, <const int64_t*>p_idx,
                              <double*>p_dx, P, HW, OHW, nt)
    return dx
