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
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport INFINITY
from libc.string cimport memset
from libc.stdint cimport int32_t

from fnn_blas cimport real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"

OPS = ("max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward")


cdef inline Py_ssize_t _first_tap(Py_ssize_t start, Py_ssize_t d, Py_ssize_t k) noexcept nogil:
    """Smallest tap t in [0, k) with start + t*d >= 0 (k if none)."""
    cdef Py_ssize_t t
    if start >= 0:
        return 0
    t = (-start + d - 1) // d
    return t if t < k else k


cdef inline Py_ssize_t _end_tap(Py_ssize_t start, Py_ssize_t d, Py_ssize_t k, Py_ssize_t n) noexcept nogil:
    """One past the largest tap t in [0, k) with start + t*d < n."""
    cdef Py_ssize_t t
    if start >= n:
        return 0
    t = (n - 1 - start) // d + 1
    return t if t < k else k


cdef void _max_plane(const real* x, real* y, int32_t* am, Py_ssize_t H, Py_ssize_t W,
                     Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                     Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                     Py_ssize_t dh, Py_ssize_t dw) noexcept nogil:
    cdef Py_ssize_t oh, ow, i, j, i0, i1, j0, j1, r0, c0
    cdef real best, v
    cdef int32_t bi
    cdef const real* row
    for oh in range(OH):
        r0 = oh * sh - ph
        i0 = _first_tap(r0, dh, kh)
        i1 = _end_tap(r0, dh, kh, H)
        for ow in range(OW):
            c0 = ow * sw - pw
            j0 = _first_tap(c0, dw, kw)
            j1 = _end_tap(c0, dw, kw, W)
            best = -INFINITY
            bi = -1
            for i in range(i0, i1):
                row = x + (r0 + i * dh) * W + c0
                for j in range(j0, j1):
                    v = row[j * dw]
                    if v > best or v != v or bi < 0:
                        best = v
                        bi = <int32_t>(i * kw + j)
            y[oh * OW + ow] = best
            am[oh * OW + ow] = bi


cdef inline real _max_sel(real v, real best, int32_t t, int32_t* bi) noexcept nogil:
    if v > best or v != v:
        bi[0] = t
        return v
    return best


cdef void _max_plane_2x2(const real* x, real* y, int32_t* am, Py_ssize_t H, Py_ssize_t W,
                         Py_ssize_t OH, Py_ssize_t OW) noexcept nogil:
    """2x2 windows, stride 2, no padding or dilation: every tap is inside the input."""
    cdef Py_ssize_t oh, ow
    cdef const real* r0
    cdef const real* r1
    cdef real a, b, c, d, m
    cdef int32_t t
    for oh in range(OH):
        r0 = x + 2 * oh * W
        r1 = r0 + W
        for ow in range(OW):
            a = r0[2 * ow]
            b = r0[2 * ow + 1]
            c = r1[2 * ow]
            d = r1[2 * ow + 1]
            m = a
            t = 0
            if b > m or b != b:
                m = b
                t = 1
            if c > m or c != c:
                m = c
                t = 2
            if d > m or d != d:
                m = d
                t = 3
            y[oh * OW + ow] = m
            am[oh * OW + ow] = t


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
                for ow in range(OW):
                    o = oh * OW + ow
                    v = gp[o]
                    t = ap[o]
                    d[2 * oh * W + 2 * ow] = v if t == 0 else 0
                    d[2 * oh * W + 2 * ow + 1] = v if t == 1 else 0
                    d[(2 * oh + 1) * W + 2 * ow] = v if t == 2 else 0
                    d[(2 * oh + 1) * W + 2 * ow + 1] = v if t == 3 else 0
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
    if x.dtype == np.float32:
        with nogil:
            _max_fwd[float](<const float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(y),
                            <int32_t*>cnp.PyArray_DATA(am), N * C, H, W, OH, OW, kh, kw,
                            sh, sw, ph, pw, dh, dw)
    else:
        with nogil:
            _max_fwd[double](<const double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(y),
                             <int32_t*>cnp.PyArray_DATA(am), N * C, H, W, OH, OW, kh, kw,
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
    if dy.dtype == np.float32:
        with nogil:
            _max_bwd[float](<const float*>cnp.PyArray_DATA(dy), <const int32_t*>cnp.PyArray_DATA(am),
                            <float*>cnp.PyArray_DATA(dx), N * C, H, W, OH, OW, kw, sh, sw, ph, pw,
                            dh, dw, fast)
    else:
        with nogil:
            _max_bwd[double](<const double*>cnp.PyArray_DATA(dy), <const int32_t*>cnp.PyArray_DATA(am),
                             <double*>cnp.PyArray_DATA(dx), N * C, H, W, OH, OW, kw, sh, sw, ph, pw,
                             dh, dw, fast)
    return dx


# ---------------------------------------------------------------- average pooling
cdef inline double _divisor(Py_ssize_t r0, Py_ssize_t c0, Py_ssize_t kh, Py_ssize_t kw,
                            Py_ssize_t H, Py_ssize_t W, Py_ssize_t ph, Py_ssize_t pw,
                            bint include_pad, Py_ssize_t override, Py_ssize_t* a0,
                            Py_ssize_t* a1, Py_ssize_t* b0, Py_ssize_t* b1) noexcept nogil:
    """torch's divisor for the window at (r0, c0); the window clipped to the input in
    [a0, a1) x [b0, b1).  0 for a window without input elements."""
    cdef Py_ssize_t r1 = r0 + kh, c1 = c0 + kw
    if r1 > H + ph:
        r1 = H + ph
    if c1 > W + pw:
        c1 = W + pw
    cdef Py_ssize_t pool = (r1 - r0) * (c1 - c0)
    a0[0] = r0 if r0 > 0 else 0
    b0[0] = c0 if c0 > 0 else 0
    a1[0] = r1 if r1 < H else H
    b1[0] = c1 if c1 < W else W
    if a0[0] >= a1[0] or b0[0] >= b1[0]:
        return 0.0
    if override != 0:
        return <double>override
    if include_pad:
        return <double>pool
    return <double>((a1[0] - a0[0]) * (b1[0] - b0[0]))


cdef void _avg_fwd(const real* x, real* y, Py_ssize_t P, Py_ssize_t H, Py_ssize_t W,
                   Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                   Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                   bint include_pad, Py_ssize_t override) noexcept nogil:
    cdef Py_ssize_t p, oh, ow, i, j, a0, a1, b0, b1
    cdef const real* xp
    cdef const real* row
    cdef real* yp
    cdef real s
    cdef double div
    cdef int nt = _threads_for(P * H * W, 1 << 15)
    for p in prange(P, nogil=True, schedule="static", num_threads=nt):
        xp = x + p * H * W
        yp = y + p * OH * OW
        for oh in range(OH):
            for ow in range(OW):
                div = _divisor(oh * sh - ph, ow * sw - pw, kh, kw, H, W, ph, pw, include_pad,
                               override, &a0, &a1, &b0, &b1)
                s = 0
                for i in range(a0, a1):
                    row = xp + i * W
                    for j in range(b0, b1):
                        s = s + row[j]
                yp[oh * OW + ow] = <real>(s / div) if div != 0 else 0


cdef void _avg_bwd(const real* g, real* dx, Py_ssize_t P, Py_ssize_t H, Py_ssize_t W,
                   Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw,
                   Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                   bint include_pad, Py_ssize_t override) noexcept nogil:
    cdef Py_ssize_t p, oh, ow, i, j, a0, a1, b0, b1
    cdef real* d
    cdef real* row
    cdef const real* gp
    cdef real v
    cdef double div
    cdef int nt = _threads_for(P * H * W, 1 << 15)
    for p in prange(P, nogil=True, schedule="static", num_threads=nt):
        d = dx + p * H * W
        gp = g + p * OH * OW
        memset(d, 0, H * W * sizeof(real))
        for oh in range(OH):
            for ow in range(OW):
                div = _divisor(oh * sh - ph, ow * sw - pw, kh, kw, H, W, ph, pw, include_pad,
                               override, &a0, &a1, &b0, &b1)
                if div == 0:
                    continue
                v = <real>(gp[oh * OW + ow] / div)
                for i in range(a0, a1):
                    row = d + i * W
                    for j in range(b0, b1):
                        row[j] += v


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
    if x.dtype == np.float32:
        with nogil:
            _avg_fwd[float](<const float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(y),
                            N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, count_include_pad, ov)
    else:
        with nogil:
            _avg_fwd[double](<const double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(y),
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
    if dy.dtype == np.float32:
        with nogil:
            _avg_bwd[float](<const float*>cnp.PyArray_DATA(dy), <float*>cnp.PyArray_DATA(dx),
                            N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip, ov)
    else:
        with nogil:
            _avg_bwd[double](<const double*>cnp.PyArray_DATA(dy), <double*>cnp.PyArray_DATA(dx),
                             N * C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cip, ov)
    return dx
