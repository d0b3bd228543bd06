"""Dense family on the GPU: y = x W^T + b.

Forward is one GEMM with the bias added in its epilogue (tiled kernel) or right after
(cuBLAS).  Backward: dx = dy W and dW = dy^T x are GEMMs on the same buffers; db is a
deterministic column sum of dy (fixed row chunks, partials reduced in order).

Training, fused with what surrounds the layer (the cpu backend runs these steps in its GEMM
blocks' epilogues; here they are the same device kernels as the unfused ops, in one call):
  linear_act        h = act(x W^T + b) (gelu / gelu_tanh), u = x W^T + b kept for backward.
  linear_act_backward / linear_backward_act
                    d_u = dh act'(u), then linear_backward; linear_backward whose d_input
                    comes back multiplied by act'(u) (the layer's input was act(u)).
  linear_residual   x W^T + b + residual.

Inference only:
  linear_act_infer  act(x W_t + b) with W_t (in, out): the same GEMM, bias and activation
                    in its epilogue (one store per output, no activation pass over memory).
  skinny_linear     the few-row product of KV-cache decoding (M of 1..16 rows), a GEMV
                    more than a GEMM, so no tiles: with W (in, out) one thread per output,
                    consecutive threads on consecutive columns (each weight row read
                    coalesced, once per output row; x rows broadcast); with W (out, in)
                    one block per output column, its threads striding along the
                    contiguous weight row, a block sum per output row (fixed order:
                    deterministic).
  pack_linear_weight / packed_linear_infer
                    the cpu small-M GEMM's weight panels ((ceil(out/16), in, 16), zero
                    past out).  The GPU GEMM reads row-major weights, so here the pack is
                    a layout op (one thread per panel element) and packed_linear_infer
                    unpacks the first n_out columns (one pass) before the same GEMM as
                    linear_act_infer: same results as the reference, no panel GEMM.
"""
from .. import _kit
from .._gemm import ACT, gemm
from .._kit import ROW_THREADS, SBUF, THREADS, block_sum, cuda, dm, gid, gsz, kernel

OPS = ("linear", "linear_backward", "linear_act", "linear_act_backward", "linear_backward_act",
       "linear_residual", "linear_act_infer", "skinny_linear", "pack_linear_weight",
       "packed_linear_infer")
PANEL = 16          # the cpu micro-kernel's panel width (fastnn.reference.dense.PANEL)


@_kit.per_dtype
def _kernels(dt):
    NT, T, zero, one = _kit.scalars(dt)

    @kernel
    def skinny_io(x, w, b, y, total, K, N, has_b):
        # y[m, n] = sum_k x[m, k] w[k, n] (+ b[n]); threads walk (m, n) with n fastest
        for e in range(gid(), total, gsz()):
            m, n = dm(e, N)
            acc = zero
            for k in range(K):
                acc += x[m, k] * w[k, n]
            if has_b:
                acc += b[n]
            y[m, n] = acc

    @kernel
    def skinny_oi(x, w, b, y, M, K, N, has_b):
        # y[m, n] = sum_k x[m, k] w[n, k] (+ b[n]); one block per column n
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        for n in range(cuda.blockIdx.x, N, cuda.gridDim.x):
            for m in range(M):
                s = zero
                for k in range(t, K, cuda.blockDim.x):
                    s += x[m, k] * w[n, k]
                s = block_sum(s, sbuf)
                if t == 0:
                    if has_b:
                        s += b[n]
                    y[m, n] = s

    @kernel
    def pack(w, packed, total, K, N, io):
        # packed[p, k, j] = W[k, 16 p + j] (0 past N); W = w (in, out) if io else w.T
        for e in range(gid(), total, gsz()):
            p, r = dm(e, K * PANEL)
            k, j = dm(r, PANEL)
            n = p * PANEL + j
            v = zero
            if n < N:
                v = w[k, n] if io else w[n, k]
            packed[p, k, j] = v

    @kernel
    def unpack(packed, w, total, N):
        # w[k, n] = packed[n // 16, k, n % 16] for the first N columns
        for e in range(gid(), total, gsz()):
            k, n = dm(e, N)
            p, j = dm(n, PANEL)
            w[k, n] = packed[p, k, j]

    return _kit.named(skinny_io=skinny_io, skinny_oi=skinny_oi, pack=pack, unpack=unpack)


def _rows(x, n_in):
    shape = _kit.shape_of(x)
    return shape, _kit.reshape(x, (_kit.numel(shape[:-1]), n_in))


def linear(x, weight, bias):
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    n_out, n_in = _kit.shape_of(weight)
    shape, x2 = _rows(x, n_in)
    y = gemm(x2, weight, tb=True, bias=bias)
    return _kit.reshape(y, shape[:-1] + (n_out,)), (x, weight, bias is not None)


def linear_backward(dy, saved, weight_grad=True, bias_grad=True):
    x, weight, has_bias = saved
    n_out, n_in = _kit.shape_of(weight)
    shape = _kit.shape_of(x)
    rows = _kit.numel(shape[:-1])
    g = _kit.reshape(_kit.dev(dy), (rows, n_out))
    x2 = _kit.reshape(x, (rows, n_in))
    dx = _kit.reshape(gemm(g, weight), shape)
    dw = gemm(g, x2, ta=True) if weight_grad else None
    db = _kit.colsum(g) if has_bias and bias_grad else None
    return dx, dw, db


_TRAIN_ACT = {"gelu": "none", "gelu_tanh": "tanh"}


def _approximate(activation):
    if activation not in _TRAIN_ACT:
        raise ValueError(f"activation must be 'gelu' or 'gelu_tanh', got {activation!r}")
    return _TRAIN_ACT[activation]


def linear_act(x, weight, bias, activation):
    from .activation import gelu
    approximate = _approximate(activation)
    u, saved = linear(x, weight, bias)
    return gelu(u, approximate)[0], saved + (u, activation)


def linear_act_backward(dh, saved, weight_grad=True, bias_grad=True):
    from .activation import gelu_backward
    x, weight, has_bias, u, activation = saved
    du = gelu_backward(dh, (u, _approximate(activation) == "tanh"))
    return linear_backward(du, (x, weight, has_bias), weight_grad, bias_grad)


def linear_backward_act(dy, saved, u, activation, weight_grad=True, bias_grad=True):
    from .activation import gelu_backward
    approximate = _approximate(activation)
    dx, dw, db = linear_backward(dy, saved, weight_grad, bias_grad)
    return gelu_backward(dx, (_kit.dev(u), approximate == "tanh")), dw, db


def linear_residual(x, weight, bias, residual):
    from .layout import add
    y, saved = linear(x, weight, bias)
    return add(y, residual), saved


def linear_act_infer(x, weight_t, bias, activation):
    """act(x weight_t + b), weight_t (in, out) (inference-only: returns just y)."""
    if activation not in ACT:
        raise ValueError(f"unknown activation {activation!r}")
    x, weight_t, bias = _kit.dev(x), _kit.dev(weight_t), _kit.dev(bias)
    n_in, n_out = _kit.shape_of(weight_t)
    shape, x2 = _rows(x, n_in)
    y = gemm(x2, weight_t, bias=bias, act=activation)
    return _kit.reshape(y, shape[:-1] + (n_out,))


def skinny_linear(x, weight, bias, weight_in_out):
    """x (M, in) @ weight (in, out) when ``weight_in_out``, else x @ weight (out, in)^T;
    + bias (inference-only: returns just y)."""
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    dt = _kit.dtype_of(x)
    M, K = _kit.shape_of(x)
    N = _kit.shape_of(weight)[1 if weight_in_out else 0]
    y = _kit.empty((M, N), dt)
    if M * N == 0:
        return y
    ks = _kernels(dt)
    b = bias if bias is not None else _kit.empty((1,), dt)
    if weight_in_out:
        ks.skinny_io[_kit.blocks_for(M * N), THREADS](x, weight, b, y, M * N, K, N,
                                                      bias is not None)
    else:
        ks.skinny_oi[_kit.row_blocks(N), ROW_THREADS](x, weight, b, y, M, K, N,
                                                     bias is not None)
    return y


def pack_linear_weight(weight, weight_in_out):
    """The panels (ceil(out / 16), in, 16) of weight (in, out) when ``weight_in_out``, else of
    weight.T (weight (out, in)); zero past out."""
    weight = _kit.dev(weight)
    dt = _kit.dtype_of(weight)
    K, N = _kit.shape_of(weight) if weight_in_out else _kit.shape_of(weight)[::-1]
    P = -(-N // PANEL)
    packed = _kit.empty((P, K, PANEL), dt)
    total = P * K * PANEL
    if total:
        _kernels(dt).pack[_kit.blocks_for(total), THREADS](weight, packed, total, K, N,
                                                          bool(weight_in_out))
    return packed


def packed_linear_infer(x, packed, n_out, bias, activation):
    """act(x W + b), W the first n_out columns of pack_linear_weight's panels."""
    if activation not in ACT:
        raise ValueError(f"unknown activation {activation!r}")
    packed = _kit.dev(packed)
    dt = _kit.dtype_of(packed)
    P, K, nr = _kit.shape_of(packed)
    if nr != PANEL or not 0 <= n_out <= P * PANEL:
        raise ValueError(f"packed must be (panels, in, {PANEL}) holding n_out={n_out} columns, "
                         f"got {(P, K, nr)}")
    w = _kit.empty((K, n_out), dt)
    if K * n_out:
        _kernels(dt).unpack[_kit.blocks_for(K * n_out), THREADS](packed, w, K * n_out, n_out)
    return linear_act_infer(x, w, bias, activation)
