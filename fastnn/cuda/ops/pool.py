"""Pool family on the GPU: max_pool2d, avg_pool2d and the adaptive pools over NCHW planes.

Forward: one thread per output element scans its window (torch's rules: taps in
row-major order, a tap replaces the running max when larger or NaN, padding never wins;
the argmax is saved as the flat index h*W + w in the plane, -1 for an empty window).
Backward gathers instead of scattering: one thread per INPUT element visits the outputs
whose windows can contain it (at most kh*kw of them, found by division) and sums their
gradients in a fixed order -- deterministic, no atomics.
The adaptive pools use torch's windows (rows floor(p*H/OH) .. ceil((p+1)*H/OH)); input row
h lies in the windows of outputs floor(h*OH/H) .. ceil((h+1)*OH/H) - 1, which is what
their gathering backward visits.
"""
from .. import _kit
from .._kit import THREADS, cuda, dm, gid, gsz, kernel

import numpy as np

OPS = ("max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
       "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward",
       "adaptive_max_pool2d", "adaptive_max_pool2d_backward")


@_kit.per_dtype
def _kernels(dt):
    T = dt.type
    zero = T(0)

    @cuda.jit(device=True)
    def at(e, rows, cols):
        """(plane, row, col) of flat index e over planes of rows x cols."""
        r, c = dm(e, cols)
        plane, row = dm(r, rows)
        return plane, row, c

    @cuda.jit(device=True)
    def _divisor(p, s, pad, k, n_in):
        start = p * s - pad
        end = min(start + k, n_in + pad)
        full = end - start
        valid = min(end, n_in) - max(start, 0)
        return full, valid

    @cuda.jit(device=True)
    def avg_div(p, q, H, W, kh, kw, sh, sw, ph, pw, include_pad, override):
        """(divisor of output (p, q), whether its window holds any input element)."""
        fh, vh = _divisor(p, sh, ph, kh, H)
        fw, vw = _divisor(q, sw, pw, kw, W)
        if override > 0:
            div = T(override)
        elif include_pad:
            div = T(fh * fw)
        else:
            div = T(vh * vw)
        return div, vh > 0 and vw > 0

    @kernel
    def max_fwd(x, y, idx, total, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw):
        for e in range(gid(), total, gsz()):
            nc, p, q = at(e, OH, OW)
            best = zero
            arg = -1
            for i in range(kh):
                h = p * sh - ph + i * dh
                if h < 0 or h >= H:
                    continue
                for j in range(kw):
                    w = q * sw - pw + j * dw
                    if w < 0 or w >= W:
                        continue
                    v = x[nc, h, w]
                    if arg < 0 or v > best or v != v:
                        best = v
                        arg = h * W + w
            if arg < 0:
                best = T(-np.inf)
            y[nc, p, q] = best
            idx[nc, p, q] = arg

    @kernel
    def avg_fwd(x, y, total, H, W, OH, OW, kh, kw, sh, sw, ph, pw, include_pad, override):
        for e in range(gid(), total, gsz()):
            nc, p, q = at(e, OH, OW)
            s = zero
            for i in range(kh):
                h = p * sh - ph + i
                if h < 0 or h >= H:
                    continue
                for j in range(kw):
                    w = q * sw - pw + j
                    if w >= 0 and w < W:
                        s += x[nc, h, w]
            div, nonempty = avg_div(p, q, H, W, kh, kw, sh, sw, ph, pw, include_pad, override)
            y[nc, p, q] = s / div if nonempty else zero

    @kernel
    def bwd(dy, idx, dx, total, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, is_max,
            include_pad, override):
        # both pools: the outputs whose windows hold input (h, w), in a fixed order; max
        # takes those whose argmax it is, avg each one's share (avg: dilation 1, idx unused)
        for e in range(gid(), total, gsz()):
            nc, h, w = at(e, H, W)
            me = h * W + w
            s = zero
            for i in range(kh):
                tp = h + ph - i * dh
                if tp < 0:
                    continue
                p, rem = dm(tp, sh)
                if rem != 0 or p >= OH:
                    continue
                for j in range(kw):
                    tq = w + pw - j * dw
                    if tq < 0:
                        continue
                    q, rem = dm(tq, sw)
                    if rem != 0 or q >= OW:
                        continue
                    if is_max:
                        if idx[nc, p, q] == me:
                            s += dy[nc, p, q]
                    else:
                        div, _ = avg_div(p, q, H, W, kh, kw, sh, sw, ph, pw, include_pad,
                                         override)
                        s += dy[nc, p, q] / div
            dx[nc, h, w] = s

    @cuda.jit(device=True)
    def astart(o, n_in, n_out):
        # o * n_in < 2**31: checked at launch (_adaptive_sizes)
        return dm(o * n_in, n_out)[0]

    @cuda.jit(device=True)
    def aend(o, n_in, n_out):
        return dm((o + 1) * n_in + n_out - 1, n_out)[0]

    @kernel
    def adaptive_fwd(x, y, idx, total, H, W, OH, OW, is_max):
        for e in range(gid(), total, gsz()):
            nc, p, q = at(e, OH, OW)
            h0 = astart(p, H, OH)
            h1 = aend(p, H, OH)
            w0 = astart(q, W, OW)
            w1 = aend(q, W, OW)
            if is_max:
                # torch's scan: -inf with the first index, larger or NaN takes over
                best = T(-np.inf)
                arg = h0 * W + w0
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        v = x[nc, h, w]
                        if v > best or v != v:
                            best = v
                            arg = h * W + w
                y[nc, p, q] = best
                idx[nc, p, q] = arg
            else:
                s = zero
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        s += x[nc, h, w]
                y[nc, p, q] = s / T((h1 - h0) * (w1 - w0))

    @kernel
    def adaptive_bwd(dy, idx, dx, total, H, W, OH, OW, is_max):
        for e in range(gid(), total, gsz()):
            nc, h, w = at(e, H, W)
            me = h * W + w
            s = zero
            for p in range(astart(h, OH, H), aend(h, OH, H)):
                for q in range(astart(w, OW, W), aend(w, OW, W)):
                    if is_max:
                        if idx[nc, p, q] == me:
                            s += dy[nc, p, q]
                    else:
                        area = (aend(p, H, OH) - astart(p, H, OH)) * (aend(q, W, OW) - astart(q, W, OW))
                        s += dy[nc, p, q] / T(area)
            dx[nc, h, w] = s

    return _kit.named(max_fwd=max_fwd, avg_fwd=avg_fwd, bwd=bwd, adaptive_fwd=adaptive_fwd, adaptive_bwd=adaptive_bwd)


def _planes(a, shape):
    N, C, H, W = shape
    return _kit.reshape(a, (N * C, H, W))


def max_pool2d(x, kernel, stride, padding, dilation, out_hw):
    x = _kit.dev(x)
    dt = _kit.dtype_of(x)
    N, C, H, W = _kit.shape_of(x)
    OH, OW = (int(v) for v in out_hw)
    _adaptive_sizes(H, W, OH, OW)
    y = _kit.empty((N, C, OH, OW), dt)
    idx = _kit.empty((N, C, OH, OW), np.int64)
    total = N * C * OH * OW
    if total:
        max_fwd = _kernels(dt).max_fwd
        max_fwd[_kit.blocks_for(total), THREADS](
            _planes(x, (N, C, H, W)), _planes(y, (N, C, OH, OW)), _planes(idx, (N, C, OH, OW)),
            total, H, W, OH, OW, *kernel, *stride, *padding, *dilation)
    return y, (idx, (N, C, H, W), tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))


def _backward(dy, idx, shape, kernel, stride, padding, dilation, is_max, include_pad,
              override):
    """dx (N, C, H, W) of either pool: one thread per input element (the bwd kernel)."""
    dy = _kit.dev(dy)
    dt = _kit.dtype_of(dy)
    N, C, H, W = shape
    OH, OW = _kit.shape_of(dy)[2:]
    _adaptive_sizes(H, W, OH, OW)
    dx = _kit.empty(shape, dt)
    total = N * C * H * W
    if total:
        idx = _kit.empty((1, 1, 1), np.int64) if idx is None else _planes(idx, (N, C, OH, OW))
        _kernels(dt).bwd[_kit.blocks_for(total), THREADS](
            _planes(dy, (N, C, OH, OW)), idx, _planes(dx, shape), total, H, W, OH, OW, *kernel,
            *stride, *padding, *dilation, is_max, include_pad, override)
    return dx


def max_pool2d_backward(dy, saved):
    idx, shape, kernel, stride, padding, dilation = saved
    return _backward(dy, idx, shape, kernel, stride, padding, dilation, True, False, 0)


def avg_pool2d(x, kernel, stride, padding, out_hw, count_include_pad, divisor_override):
    x = _kit.dev(x)
    dt = _kit.dtype_of(x)
    N, C, H, W = _kit.shape_of(x)
    OH, OW = (int(v) for v in out_hw)
    _adaptive_sizes(H, W, OH, OW)
    y = _kit.empty((N, C, OH, OW), dt)
    total = N * C * OH * OW
    override = int(divisor_override) if divisor_override else 0
    if total:
        avg_fwd = _kernels(dt).avg_fwd
        avg_fwd[_kit.blocks_for(total), THREADS](
            _planes(x, (N, C, H, W)), _planes(y, (N, C, OH, OW)), total, H, W, OH, OW, *kernel,
            *stride, *padding, bool(count_include_pad), override)
    return y, ((N, C, H, W), tuple(kernel), tuple(stride), tuple(padding),
               bool(count_include_pad), override)


def avg_pool2d_backward(dy, saved):
    shape, kernel, stride, padding, include_pad, override = saved
    return _backward(dy, None, shape, kernel, stride, padding, (1, 1), False, include_pad,
                     override)


def _adaptive_sizes(H, W, OH, OW):
    """The adaptive windows' bounds divide (o + 1) * n_in in 32 bits: refuse sizes whose
    products leave that range."""
    for a, b in ((H, OH), (W, OW)):
        if (a + 1) * (b + 1) >= _kit.INDEX_LIMIT:
            raise ValueError(f"adaptive pooling from {H}x{W} to {OH}x{OW}: the products of "
                             f"input and output sizes must stay below 2**31 on the cuda "
                             f"backend (32-bit indices)")


def _adaptive(x, out_hw, is_max):
    x = _kit.dev(x)
    dt = _kit.dtype_of(x)
    N, C, H, W = _kit.shape_of(x)
    OH, OW = (int(v) for v in out_hw)
    _adaptive_sizes(H, W, OH, OW)
    y = _kit.empty((N, C, OH, OW), dt)
    idx = _kit.empty((N, C, OH, OW), np.int64) if is_max else _kit.empty((1, 1, 1), np.int64)
    total = N * C * OH * OW
    if total:
        _kernels(dt).adaptive_fwd[_kit.blocks_for(total), THREADS](
            _planes(x, (N, C, H, W)), _planes(y, (N, C, OH, OW)),
            _planes(idx, (N, C, OH, OW)) if is_max else idx, total, H, W, OH, OW, is_max)
    return y, idx, (N, C, H, W)


def _adaptive_backward(dy, idx, shape, is_max):
    dy = _kit.dev(dy)
    dt = _kit.dtype_of(dy)
    N, C, H, W = shape
    OH, OW = _kit.shape_of(dy)[2:]
    _adaptive_sizes(H, W, OH, OW)
    dx = _kit.empty(shape, dt)
    total = N * C * H * W
    if total:
        _kernels(dt).adaptive_bwd[_kit.blocks_for(total), THREADS](
            _planes(dy, (N, C, OH, OW)), _planes(idx, (N, C, OH, OW)) if is_max else idx,
            _planes(dx, shape), total, H, W, OH, OW, is_max)
    return dx


def adaptive_avg_pool2d(x, out_hw):
    y, idx, shape = _adaptive(x, out_hw, False)
    return y, (idx, shape)


def adaptive_avg_pool2d_backward(dy, saved):
    idx, shape = saved
    return _adaptive_backward(dy, idx, shape, False)


def adaptive_max_pool2d(x, out_hw):
    """saved[0]: the int64 argmax h*W + w (torch's return_indices)."""
    y, idx, shape = _adaptive(x, out_hw, True)
    return y, (idx, shape)


def adaptive_max_pool2d_backward(dy, saved):
    idx, shape = saved
    return _adaptive_backward(dy, idx, shape, True)
