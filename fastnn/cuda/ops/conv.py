"""Conv family on the GPU: conv2d as im2col + batched GEMM (cuBLAS through CuPy, or the
tiled numba GEMM).

Layout: the columns are (G, K, N*P) with K = Cg*kh*kw taps and P = OH*OW, so ONE batched
GEMM over the G groups does the whole batch: y^T (G, Og, N*P) = W (G, Og, K) @ cols.
The result is (O, N, P); one kernel swaps it to (N, O, P) and adds the bias.
Backward: dy is swapped to (O, N, P) once; dW = dy^T cols^T and dcols = W^T dy^T are
batched GEMMs; col2im gathers -- one thread per input element sums the taps that read
it, in a fixed order (deterministic, no atomics); dbias is a row sum of dy^T.
The columns are saved for the backward (the usual im2col trade of memory for time).

conv_transpose2d is conv2d's adjoint on the same kernels: its forward is conv2d's d_input
(W^T x by one batched GEMM, then col2im), its backward conv2d's forward of dy (whose
columns then give d_weight = x^T cols by one more batched GEMM) and a row sum for d_bias.
"""
from .. import _kit
from .._gemm import gemm_batched
from .._kit import THREADS, dm, gid, gsz, int32, kernel

OPS = ("conv2d", "conv2d_backward", "conv_transpose2d", "conv_transpose2d_backward")


@_kit.per_dtype
def _kernels(dt):
    zero = dt.type(0)

    @kernel
    def im2col(x, cols, total, N, Cg, H, W, OH, OW, kh, kw, sh, sw, pt, pl, dh, dw, K):
        # cols[g, k, n*P + p]; x (N, C, H, W)
        P = int32(OH * OW)
        NP = int32(N * P)
        for e in range(gid(), total, gsz()):
            gk, col = dm(e, NP)
            g, k = dm(gk, K)
            n, p = dm(col, P)
            oh, ow = dm(p, OW)
            r, j = dm(k, kw)
            c, i = dm(r, kh)
            h = oh * sh - pt + i * dh
            w = ow * sw - pl + j * dw
            if h >= 0 and h < H and w >= 0 and w < W:
                cols[g, k, col] = x[n, g * Cg + c, h, w]
            else:
                cols[g, k, col] = zero

    @kernel
    def col2im(dcols, dx, total, N, C, Cg, H, W, OH, OW, kh, kw, sh, sw, pt, pl, dh, dw):
        P = OH * OW
        for e in range(gid(), total, gsz()):
            r, w = dm(e, W)
            r, h = dm(r, H)
            n, ch = dm(r, C)
            g, c = dm(ch, Cg)
            s = zero
            for i in range(kh):
                th = h + pt - i * dh
                if th < 0:
                    continue
                oh, rem = dm(th, sh)
                if rem != 0 or oh >= OH:
                    continue
                for j in range(kw):
                    tw = w + pl - j * dw
                    if tw < 0:
                        continue
                    ow, rem = dm(tw, sw)
                    if rem != 0 or ow >= OW:
                        continue
                    s += dcols[g, (c * kh + i) * kw + j, n * P + oh * OW + ow]
            dx[n, ch, h, w] = s

    @kernel
    def swap01(src, dst, total, A, B, P, bias, has_bias):
        # dst[b, a, p] = src[a, b, p] (+ bias[a]); src (A, B, P), dst (B, A, P)
        for e in range(gid(), total, gsz()):
            r, p = dm(e, P)
            b, a = dm(r, A)
            v = src[a, b, p]
            if has_bias:
                v += bias[a]
            dst[b, a, p] = v

    @kernel
    def add_bias(y, bias, total, C, P):
        # y (N, C, P) += bias[c]
        for e in range(gid(), total, gsz()):
            r, p = dm(e, P)
            n, c = dm(r, C)
            y[n, c, p] += bias[c]

    return _kit.named(im2col=im2col, col2im=col2im, swap01=swap01, add_bias=add_bias)


def _swap01(src3, bias=None):
    A, B, P = _kit.shape_of(src3)
    dt = _kit.dtype_of(src3)
    out = _kit.empty((B, A, P), dt)
    total = A * B * P
    if total:
        swap01 = _kernels(dt).swap01
        swap01[_kit.blocks_for(total), THREADS](src3, out, total, A, B, P,
                                                _kit.empty((1,), dt) if bias is None else bias,
                                                bias is not None)
    return out


def conv2d(x, weight, bias, stride, padding, dilation, groups):
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    dt = _kit.dtype_of(x)
    N, C, H, W = _kit.shape_of(x)
    O, Cg, kh, kw = _kit.shape_of(weight)
    G = int(groups)
    sh, sw = stride
    pt, pb, pl, pr = padding
    dh, dw = dilation
    OH = (H + pt + pb - dh * (kh - 1) - 1) // sh + 1
    OW = (W + pl + pr - dw * (kw - 1) - 1) // sw + 1
    K = Cg * kh * kw
    P = OH * OW
    cols = _kit.empty((G, K, N * P), dt)
    total = G * K * N * P
    if total:
        im2col = _kernels(dt).im2col
        im2col[_kit.blocks_for(total), THREADS](x, cols, total, N, Cg, H, W, OH, OW, kh, kw,
                                                sh, sw, pt, pl, dh, dw, K)
    yt = gemm_batched(_kit.reshape(weight, (G, O // G, K)), cols)      # (G, Og, N*P)
    y = _swap01(_kit.reshape(yt, (O, N, P)), bias)                      # (N, O, P)
    saved = (x, weight, cols, bias is not None, (sh, sw), (pt, pb, pl, pr), (dh, dw), G)
    return _kit.reshape(y, (N, O, OH, OW)), saved


def _input_grad(dyt3, weight, x_shape, stride, padding, dilation, G):
    """conv2d's d_input (N, C, H, W) from the output gradient as (G, Og, N*P) columns:
    dcols = W^T dy^T (one batched GEMM), then col2im."""
    N, C, H, W = x_shape
    O, Cg, kh, kw = _kit.shape_of(weight)
    OH, OW = _out_hw(x_shape, _kit.shape_of(weight), stride, padding, dilation)
    dt = _kit.dtype_of(weight)
    K = Cg * kh * kw
    dcols = gemm_batched(_kit.reshape(weight, (G, O // G, K)), dyt3, ta=True)   # (G, K, N*P)
    dx = _kit.empty((N, C, H, W), dt)
    total = N * C * H * W
    if total:
        col2im = _kernels(dt).col2im
        col2im[_kit.blocks_for(total), THREADS](dcols, dx, total, N, C, Cg, H, W, OH, OW, kh, kw,
                                                stride[0], stride[1], padding[0], padding[2],
                                                dilation[0], dilation[1])
    return dx


def _out_hw(x_shape, w_shape, stride, padding, dilation):
    H, W = x_shape[2], x_shape[3]
    kh, kw = w_shape[2], w_shape[3]
    pt, pb, pl, pr = padding
    return ((H + pt + pb - dilation[0] * (kh - 1) - 1) // stride[0] + 1,
            (W + pl + pr - dilation[1] * (kw - 1) - 1) // stride[1] + 1)


def conv2d_backward(dy, saved, weight_grad=True, bias_grad=True):
    x, weight, cols, has_bias, stride, padding, dilation, G = saved
    dy = _kit.dev(dy)
    N, C, H, W = _kit.shape_of(x)
    O, Cg, kh, kw = _kit.shape_of(weight)
    OH, OW = _kit.shape_of(dy)[2:]
    P = OH * OW
    K = Cg * kh * kw
    dyt = _swap01(_kit.reshape(dy, (N, O, P)))                          # (O, N, P)
    dyt3 = _kit.reshape(dyt, (G, O // G, N * P))
    dx = _input_grad(dyt3, weight, (N, C, H, W), stride, padding, dilation, G)
    db = _kit.rowsum(_kit.reshape(dyt, (O, N * P))) if has_bias and bias_grad else None
    if not weight_grad:
        return dx, None, db
    dw_ = gemm_batched(dyt3, cols, tb=True)                             # (G, Og, K)
    return dx, _kit.reshape(dw_, (O, Cg, kh, kw)), db


def conv_transpose2d(x, weight, bias, stride, padding, out_hw, dilation, groups):
    """x (N, Cin, H, W), weight (Cin, Cout/groups, kH, kW): y is the d_input of the conv2d
    over an (N, Cout, *out_hw) input whose output is x's shape."""
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    dt = _kit.dtype_of(x)
    N, Ci, H, W = _kit.shape_of(x)
    Ci, Og, kh, kw = _kit.shape_of(weight)
    G = int(groups)
    xt = _swap01(_kit.reshape(x, (N, Ci, H * W)))                       # (Cin, N, P)
    y_shape = (N, Og * G) + tuple(int(v) for v in out_hw)
    y = _input_grad(_kit.reshape(xt, (G, Ci // G, N * H * W)), weight, y_shape, stride, padding,
                    dilation, G)
    total = _kit.numel(y_shape)
    if bias is not None and total:
        P = y_shape[2] * y_shape[3]
        _kernels(dt).add_bias[_kit.blocks_for(total), THREADS](_kit.reshape(y, (N, Og * G, P)), bias,
                                                         total, Og * G, P)
    return y, (x, xt, weight, bias is not None, tuple(stride), tuple(padding), tuple(dilation), G)


def conv_transpose2d_backward(dy, saved, weight_grad=True, bias_grad=True):
    """d_input = conv2d(dy); d_weight = x^T @ im2col(dy) (the columns conv2d just built)."""
    x, xt, weight, has_bias, stride, padding, dilation, G = saved
    dy = _kit.dev(dy)
    N, Ci, H, W = _kit.shape_of(x)
    dx, csaved = conv2d(dy, weight, None, stride, padding, dilation, G)
    cols = csaved[2]                                                    # (G, K, N*P)
    dw_ = (gemm_batched(_kit.reshape(xt, (G, Ci // G, N * H * W)), cols, tb=True)
           if weight_grad else None)
    db = None
    if has_bias and bias_grad:
        Co, OH, OW = _kit.shape_of(dy)[1:]
        dyt = _swap01(_kit.reshape(dy, (N, Co, OH * OW)))               # (Cout, N, P)
        db = _kit.rowsum(_kit.reshape(dyt, (Co, N * OH * OW)))
    return dx, (None if dw_ is None else _kit.reshape(dw_, _kit.shape_of(weight))), db
