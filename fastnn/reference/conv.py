"""Conv family, reference: conv2d (NCHW cross-correlation with stride, asymmetric zero
padding, dilation and groups).

The kernels get the geometry already normalised by the functional shell:
stride (sh, sw), padding (top, bottom, left, right), dilation (dh, dw), groups.
The loop runs over the kh*kw kernel taps; each tap is one einsum over a strided view
of the zero-padded input, so the formula reads like the definition
y[n, o, p, q] = sum_{c, i, j} w[o, c, i, j] * xpad[n, g(o)*Cg + c, p*sh + i*dh, q*sw + j*dw].
"""
import numpy as np

from ._util import cast, f64

OPS = ("conv2d", "conv2d_backward")


def _geometry(x_shape, w_shape, stride, padding, dilation):
    N, C, H, W = x_shape
    O, Cg, kh, kw = w_shape
    sh, sw = stride
    pt, pb, pl, pr = padding
    dh, dw = dilation
    OH = (H + pt + pb - dh * (kh - 1) - 1) // sh + 1
    OW = (W + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return OH, OW


def _tap(i, j, OH, OW, stride, dilation):
    sh, sw = stride
    dh, dw = dilation
    return (slice(i * dh, i * dh + sh * (OH - 1) + 1, sh),
            slice(j * dw, j * dw + sw * (OW - 1) + 1, sw))


def conv2d(x, weight, bias, stride, padding, dilation, groups):
    N, C, H, W = x.shape
    O, Cg, kh, kw = weight.shape
    G = groups
    OH, OW = _geometry(x.shape, weight.shape, stride, padding, dilation)
    pt, pb, pl, pr = padding
    xp = np.pad(f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    xg = xp.reshape(N, G, Cg, xp.shape[2], xp.shape[3])
    wg = f64(weight).reshape(G, O // G, Cg, kh, kw)
    y = np.zeros((N, G, O // G, OH, OW))
    for i in range(kh):
        for j in range(kw):
            si, sj = _tap(i, j, OH, OW, stride, dilation)
            y += np.einsum("ngchw,goc->ngohw", xg[:, :, :, si, sj], wg[:, :, :, i, j])
    y = y.reshape(N, O, OH, OW)
    if bias is not None:
        y += f64(bias)[None, :, None, None]
    return cast(y, x), (x, weight, bias is not None, stride, padding, dilation, groups)


def conv2d_backward(dy, saved):
    """-> (d_input, d_weight, d_bias or None)."""
    x, weight, has_bias, stride, padding, dilation, groups = saved
    N, C, H, W = x.shape
    O, Cg, kh, kw = weight.shape
    G = groups
    OH, OW = dy.shape[2], dy.shape[3]
    pt, pb, pl, pr = padding
    xp = np.pad(f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    Hp, Wp = xp.shape[2], xp.shape[3]
    xg = xp.reshape(N, G, Cg, Hp, Wp)
    wg = f64(weight).reshape(G, O // G, Cg, kh, kw)
    g = f64(dy).reshape(N, G, O // G, OH, OW)
    dxp = np.zeros_like(xg)
    dw = np.zeros_like(wg)
    for i in range(kh):
        for j in range(kw):
            si, sj = _tap(i, j, OH, OW, stride, dilation)
            dxp[:, :, :, si, sj] += np.einsum("ngohw,goc->ngchw", g, wg[:, :, :, i, j])
            dw[:, :, :, i, j] = np.einsum("ngohw,ngchw->goc", g, xg[:, :, :, si, sj])
    dx = dxp.reshape(N, C, Hp, Wp)[:, :, pt:pt + H, pl:pl + W]
    db = f64(dy).sum(axis=(0, 2, 3)) if has_bias else None
    return cast(dx, x), cast(dw.reshape(weight.shape), x), cast(db, x)
