"""Conv family, reference: conv2d (NCHW cross-correlation with stride, asymmetric zero
padding, dilation and groups) and conv_transpose2d, its adjoint: the transposed
convolution's output is conv2d's input gradient, its input gradient is conv2d's forward
and its weight gradient conv2d's weight gradient with the two activations swapped.

The kernels get the geometry already normalised by the functional shell:
stride (sh, sw), padding (top, bottom, left, right), dilation (dh, dw), groups.
The loop runs over the kh*kw kernel taps; each tap is one einsum over a strided view
of the zero-padded input, so the formula reads like the definition
y[n, o, p, q] = sum_{c, i, j} w[o, c, i, j] * xpad[n, g(o)*Cg + c, p*sh + i*dh, q*sw + j*dw].
"""
import numpy as np

from ._util import cast, f64

OPS = ("conv2d", "conv2d_backward", "conv_transpose2d", "conv_transpose2d_backward")


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


def _valid_range(n_out, s, off, n_in):
    """Outputs o in [a, b) whose position o*s + off lies inside [0, n_in)."""
    a = min(n_out, -(-(-off) // s) if off < 0 else 0)
    b = min(n_out, max(a, (n_in - 1 - off) // s + 1)) if n_in - 1 - off >= 0 else a
    return a, b


def _grads(x_shape, x, weight, dy, stride, padding, dilation, groups, want_dx, want_dw):
    """conv2d's input gradient (of an input shaped ``x_shape``) and weight gradient (needs
    ``x``), each only when asked for."""
    N, C, H, W = x_shape
    O, Cg, kh, kw = weight.shape
    G = groups
    OH, OW = dy.shape[2], dy.shape[3]
    pt, pb, pl, pr = padding
    Hp, Wp = H + pt + pb, W + pl + pr
    wg = f64(weight).reshape(G, O // G, Cg, kh, kw)
    g = f64(dy).reshape(N, G, O // G, OH, OW)
    dxp = np.zeros((N, G, Cg, Hp, Wp)) if want_dx else None
    dw = np.zeros_like(wg) if want_dw else None
    xg = np.pad(f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr))).reshape(N, G, Cg, Hp, Wp) \
        if want_dw else None
    for i in range(kh):
        for j in range(kw):
            si, sj = _tap(i, j, OH, OW, stride, dilation)
            if want_dx:
                dxp[:, :, :, si, sj] += np.einsum("ngohw,goc->ngchw", g, wg[:, :, :, i, j])
            if want_dw:
                # only the outputs whose tap reads a real input element: a padding zero is
                # no term (0 * inf would be NaN where the output gradient is infinite --
                # conv_transpose2d's gradient there; the compiled kernels never read padding)
                r0, r1 = _valid_range(OH, stride[0], i * dilation[0] - pt, H)
                c0, c1 = _valid_range(OW, stride[1], j * dilation[1] - pl, W)
                xs = xg[:, :, :, si, sj][:, :, :, r0:r1, c0:c1]
                dw[:, :, :, i, j] = np.einsum("ngohw,ngchw->goc", g[:, :, :, r0:r1, c0:c1], xs)
    dx = dxp.reshape(N, C, Hp, Wp)[:, :, pt:pt + H, pl:pl + W] if want_dx else None
    return dx, (dw.reshape(weight.shape) if want_dw else None)


def conv2d_backward(dy, saved, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None); ``weight_grad`` / ``bias_grad`` False: that
    gradient is not computed (a frozen parameter) and comes back None."""
    x, weight, has_bias, stride, padding, dilation, groups = saved
    dx, dw = _grads(x.shape, x, weight, dy, stride, padding, dilation, groups, True,
                    weight_grad)
    db = f64(dy).sum(axis=(0, 2, 3)) if has_bias and bias_grad else None
    return cast(dx, x), cast(dw, x), cast(db, x)


def conv_transpose2d(x, weight, bias, stride, padding, out_hw, dilation, groups):
    """x (N, Cin, H, W), weight (Cin, Cout/groups, kH, kW) -> y (N, Cout, *out_hw).

    The geometry is conv2d's for an input of ``out_hw`` with ``padding`` (top, bottom,
    left, right): that conv2d maps y's shape onto x's, and y is its input gradient."""
    N = x.shape[0]
    Cout = weight.shape[1] * groups
    y_shape = (N, Cout) + tuple(out_hw)
    y, _ = _grads(y_shape, None, weight, x, stride, padding, dilation, groups, True, False)
    if bias is not None:
        y = y + f64(bias)[None, :, None, None]
    return cast(y, x), (x, weight, bias is not None, stride, padding, dilation, groups)


def conv_transpose2d_backward(dy, saved, weight_grad=True, bias_grad=True):
    """-> (d_input, d_weight, d_bias or None): conv2d(dy) and conv2d's weight gradient of
    (input dy, output gradient x); the flags as conv2d_backward's."""
    x, weight, has_bias, stride, padding, dilation, groups = saved
    dx, _ = conv2d(dy, weight, None, stride, padding, dilation, groups)
    dw = (_grads(dy.shape, dy, weight, x, stride, padding, dilation, groups, False, True)[1]
          if weight_grad else None)
    db = f64(dy).sum(axis=(0, 2, 3)) if has_bias and bias_grad else None
    return cast(dx, x), cast(dw, x), cast(db, x)
