"""Dense family on the GPU: y = x W^T + b.

Forward is one GEMM with the bias added in its epilogue (tiled kernel) or right after
(cuBLAS).  Backward: dx = dy W and dW = dy^T x are GEMMs on the same buffers; db is a
deterministic column sum of dy (fixed row chunks, partials reduced in order).
"""
from .. import _kit
from .._gemm import gemm

OPS = ("linear", "linear_backward")


def linear(x, weight, bias):
    x, weight, bias = _kit.dev(x), _kit.dev(weight), _kit.dev(bias)
    shape = _kit.shape_of(x)
    n_out, n_in = _kit.shape_of(weight)
    x2 = _kit.reshape(x, (_kit.numel(shape[:-1]), n_in))
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
