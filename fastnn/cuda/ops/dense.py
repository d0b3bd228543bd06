"""Dense family on the GPU: y = x W^T + b.

Forward is one GEMM with the bias added in its epilogue (tiled kernel) or right after
(cuBLAS).  Backward: dx = dy W and dW = dy^T x are GEMMs on the same buffers; db is a
deterministic column sum of dy (fixed row chunks, partials reduced in order).

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
"""
from .. import _kit
from .._gemm import ACT, gemm
from .._kit import ROW_THREADS, SBUF, THREADS, block_sum, cuda, dm, gid, gsz, kernel

OPS = ("linear", "linear_backward", "linear_act_infer", "skinny_linear")


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

    return _kit.named(skinny_io=skinny_io, skinny_oi=skinny_oi)


def _rows(x, n_in):
    shape = _kit.shape_of(x)
    return shape, _kit.reshape(x, (_kit.numel(shape[:-1]), n_in))


def linear(x, weight, bias):
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    n_out, n_in = _kit.shape_of(weight)
    shape, x2 = _rows(x, n_in)
    y = gemm(x2, weight, tb=True, bias=bias)
    return _kit.reshape(y, shape[:-1] + (n_out,)), (x, weight, bias is not None)


def linear_backward(dy, saved):
    x, weight, has_bias = saved
    n_out, n_in = _kit.shape_of(weight)
    shape = _kit.shape_of(x)
    rows = _kit.numel(shape[:-1])
    g = _kit.reshape(_kit.dev(dy), (rows, n_out))
    x2 = _kit.reshape(x, (rows, n_in))
    dx = _kit.reshape(gemm(g, weight), shape)
    dw = gemm(g, x2, ta=True)
    db = _kit.colsum(g) if has_bias else None
    return dx, dw, db


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
