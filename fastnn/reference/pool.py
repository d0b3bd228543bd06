"""Pool family, reference: max_pool2d and avg_pool2d over NCHW planes.

The functional shell fixes the geometry: kernel (kh, kw), stride (sh, sw), symmetric
padding (ph, pw), dilation (dh, dw) and the output size (OH, OW) (ceil_mode is
resolved there with torch's rule).  Window (p, q) covers rows p*sh - ph + i*dh,
columns q*sw - pw + j*dw.

max_pool2d follows torch's scan exactly: taps in row-major order, a tap replaces the
running max when it is larger or NaN, so ties keep the first and NaN wins (the last
NaN); padding never wins (it is -inf and never selected).  The saved argmax is the
flat index h*W + w inside the input plane (-1 for a window with no input element).

adaptive_avg_pool2d / adaptive_max_pool2d: output (p, q) pools rows
[floor(p*H/OH), ceil((p+1)*H/OH)) and the same for columns (torch's start/end index
formula; windows are never empty and may overlap).  The max scan and the saved argmax
follow max_pool2d's rules.

avg_pool2d: torch's divisor -- the window clipped to the padded input when
count_include_pad, to the input otherwise, or divisor_override.
"""
import numpy as np

from ._util import cast, f64

OPS = ("max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
       "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward",
       "adaptive_max_pool2d", "adaptive_max_pool2d_backward")


def _taps(n_out, s, p, d, k, n_in):
    """For each tap i: (positions of that tap for every output, validity mask)."""
    base = np.arange(n_out) * s - p
    out = []
    for i in range(k):
        pos = base + i * d
        out.append((pos, (pos >= 0) & (pos < n_in)))
    return out


def max_pool2d(x, kernel, stride, padding, dilation, out_hw):
    N, C, H, W = x.shape
    kh, kw = kernel
    OH, OW = out_hw
    x64 = f64(x)
    y = np.full((N, C, OH, OW), -np.inf)
    idx = np.full((N, C, OH, OW), -1, dtype=np.int64)
    rows = _taps(OH, stride[0], padding[0], dilation[0], kh, H)
    cols = _taps(OW, stride[1], padding[1], dilation[1], kw, W)
    for r, vr in rows:
        rc = np.clip(r, 0, max(H - 1, 0))
        for c, vc in cols:
            cc = np.clip(c, 0, max(W - 1, 0))
            valid = vr[:, None] & vc[None, :]
            if H == 0 or W == 0 or not valid.any():
                continue
            v = x64[:, :, rc[:, None], cc[None, :]]
            upd = valid & ((v > y) | np.isnan(v) | (idx < 0))
            y = np.where(upd, v, y)
            idx = np.where(upd, (rc[:, None] * W + cc[None, :]), idx)
    return cast(y, x), (idx, x.shape)


def max_pool2d_backward(dy, saved):
    """-> d_input: each output's gradient goes to its argmax (summed where windows overlap)."""
    idx, shape = saved
    N, C, H, W = shape
    planes = np.arange(N * C).reshape(N, C, 1, 1) * (H * W)
    ok = idx >= 0
    flat = (planes + idx)[ok]
    dx = np.bincount(flat, weights=f64(dy)[ok], minlength=N * C * H * W)
    return cast(dx.reshape(shape), dy)


def _avg_divisor(n_out, s, p, k, n_in):
    """Per output position along one axis: (window size counting padding, valid size)."""
    start = np.arange(n_out) * s - p
    end = np.minimum(start + k, n_in + p)
    full = end - start
    valid = np.minimum(end, n_in) - np.maximum(start, 0)
    return full, valid


def _avg_div(shape, kernel, stride, padding, out_hw, count_include_pad, divisor_override):
    N, C, H, W = shape
    fh, vh = _avg_divisor(out_hw[0], stride[0], padding[0], kernel[0], H)
    fw, vw = _avg_divisor(out_hw[1], stride[1], padding[1], kernel[1], W)
    empty = (vh[:, None] <= 0) | (vw[None, :] <= 0)
    if divisor_override:
        div = np.full((out_hw[0], out_hw[1]), float(divisor_override))
    elif count_include_pad:
        div = (fh[:, None] * fw[None, :]).astype(np.float64)
    else:
        div = (vh[:, None] * vw[None, :]).astype(np.float64)
    # torch writes 0 for a window that holds no input element
    return np.where(empty, np.inf, div)


def avg_pool2d(x, kernel, stride, padding, out_hw, count_include_pad, divisor_override):
    N, C, H, W = x.shape
    kh, kw = kernel
    OH, OW = out_hw
    x64 = f64(x)
    s = np.zeros((N, C, OH, OW))
    rows = _taps(OH, stride[0], padding[0], 1, kh, H)
    cols = _taps(OW, stride[1], padding[1], 1, kw, W)
    for r, vr in rows:
        rc = np.clip(r, 0, max(H - 1, 0))
        for c, vc in cols:
            cc = np.clip(c, 0, max(W - 1, 0))
            valid = vr[:, None] & vc[None, :]
            if valid.any():
                s += np.where(valid, x64[:, :, rc[:, None], cc[None, :]], 0.0)
    div = _avg_div(x.shape, kernel, stride, padding, out_hw, count_include_pad, divisor_override)
    saved = (x.shape, kernel, stride, padding, count_include_pad, divisor_override)
    return cast(s / div, x), saved


def avg_pool2d_backward(dy, saved):
    shape, kernel, stride, padding, count_include_pad, divisor_override = saved
    N, C, H, W = shape
    OH, OW = dy.shape[2], dy.shape[3]
    div = _avg_div(shape, kernel, stride, padding, (OH, OW), count_include_pad, divisor_override)
    g = f64(dy) / div
    dx = np.zeros((N, C, H, W))
    rows = _taps(OH, stride[0], padding[0], 1, kernel[0], H)
    cols = _taps(OW, stride[1], padding[1], 1, kernel[1], W)
    for r, vr in rows:
        for c, vc in cols:
            for p in np.nonzero(vr)[0]:
                q = np.nonzero(vc)[0]
                # columns of one tap are distinct, so a fancy-index += is exact here
                dx[:, :, r[p], c[q]] += g[:, :, p, q]
    return cast(dx, dy)


def adaptive_bounds(n_out, n_in):
    """torch's adaptive window along one axis: (starts, ends) of the n_out windows."""
    o = np.arange(n_out)
    return (o * n_in) // n_out, -((-(o + 1) * n_in) // n_out)


def adaptive_avg_pool2d(x, out_hw):
    N, C, H, W = x.shape
    OH, OW = out_hw
    x64 = f64(x)
    hs, he = adaptive_bounds(OH, H)
    ws, we = adaptive_bounds(OW, W)
    y = np.zeros((N, C, OH, OW))
    for p in range(OH):
        for q in range(OW):
            y[:, :, p, q] = x64[:, :, hs[p]:he[p], ws[q]:we[q]].mean(axis=(2, 3))
    return cast(y, x), x.shape


def adaptive_avg_pool2d_backward(dy, saved):
    N, C, H, W = saved
    OH, OW = dy.shape[2], dy.shape[3]
    hs, he = adaptive_bounds(OH, H)
    ws, we = adaptive_bounds(OW, W)
    g = f64(dy)
    dx = np.zeros((N, C, H, W))
    for p in range(OH):
        for q in range(OW):
            area = (he[p] - hs[p]) * (we[q] - ws[q])
            dx[:, :, hs[p]:he[p], ws[q]:we[q]] += (g[:, :, p, q] / area)[:, :, None, None]
    return cast(dx, dy)


def adaptive_max_pool2d(x, out_hw):
    """-> (y, saved); saved[0] is the argmax as the flat index h*W + w in the plane
    (torch's ``return_indices``)."""
    N, C, H, W = x.shape
    OH, OW = out_hw
    x64 = f64(x)
    hs, he = adaptive_bounds(OH, H)
    ws, we = adaptive_bounds(OW, W)
    y = np.empty((N, C, OH, OW))
    idx = np.empty((N, C, OH, OW), dtype=np.int64)
    for p in range(OH):
        for q in range(OW):
            best = np.full((N, C), -np.inf)
            arg = np.full((N, C), hs[p] * W + ws[q], dtype=np.int64)
            for h in range(hs[p], he[p]):
                for w in range(ws[q], we[q]):
                    v = x64[:, :, h, w]
                    upd = (v > best) | np.isnan(v)
                    best = np.where(upd, v, best)
                    arg = np.where(upd, h * W + w, arg)
            y[:, :, p, q] = best
            idx[:, :, p, q] = arg
    return cast(y, x), (idx, x.shape)


def adaptive_max_pool2d_backward(dy, saved):
    """-> d_input (each output's gradient to its argmax, summed where windows overlap)."""
    return max_pool2d_backward(dy, saved)
