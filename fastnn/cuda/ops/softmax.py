"""Softmax family on the GPU: softmax / log_softmax along any dim.

The input is seen as (outer, n, inner) with the reduction over n.
- inner == 1 (the last axis): one block per row; max and sum of exp are block
  reductions (warp shuffles on a GPU, ``_kit.block_max/block_sum``); the row is read
  three times (max, sum, write), which stays in L1/L2 for realistic rows.
- inner > 1: one thread per (outer, inner) column looping over n; neighbouring threads
  read neighbouring addresses, so the strided reduction is still coalesced and no
  transposed copy is made.
Backward: softmax dx = y (g - sum(g y)); log_softmax dx = g - exp(y) sum(g).
"""
import math

import numpy as np

from .. import _kit
from .._kit import (ROW_THREADS, SBUF, THREADS, block_max, block_sum, cuda, dm, gid, gsz, int32,
                    kernel)

OPS = ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward")


@_kit.per_dtype
def _kernels(dt):
    NT = _kit.shared_type(dt)
    T = dt.type
    zero = T(0)
    ninf = T(-np.inf)

    @kernel
    def fwd_rows(x, y, R, n, logsm):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            m = ninf
            for j in range(t, n, B):
                m = max(m, x[r, j])
            m = block_max(m, sbuf)
            s = zero
            for j in range(t, n, B):
                s += math.exp(x[r, j] - m)
            s = block_sum(s, sbuf)
            if logsm:
                lse = m + math.log(s)
                for j in range(t, n, B):
                    y[r, j] = x[r, j] - lse
            else:
                for j in range(t, n, B):
                    y[r, j] = math.exp(x[r, j] - m) / s

    @kernel
    def fwd_cols(x, y, outer, n, inner, logsm):
        for p in range(gid(), int32(outer * inner), gsz()):
            o = dm(p, inner)[0]
            i = p - o * inner
            m = ninf
            for j in range(n):
                m = max(m, x[o, j, i])
            s = zero
            for j in range(n):
                s += math.exp(x[o, j, i] - m)
            if logsm:
                lse = m + math.log(s)
                for j in range(n):
                    y[o, j, i] = x[o, j, i] - lse
            else:
                for j in range(n):
                    y[o, j, i] = math.exp(x[o, j, i] - m) / s

    @kernel
    def bwd_rows(dy, y, dx, R, n, logsm):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            s = zero
            for j in range(t, n, B):
                if logsm:
                    s += dy[r, j]
                else:
                    s += dy[r, j] * y[r, j]
            s = block_sum(s, sbuf)
            for j in range(t, n, B):
                if logsm:
                    dx[r, j] = dy[r, j] - math.exp(y[r, j]) * s
                else:
                    dx[r, j] = y[r, j] * (dy[r, j] - s)

    @kernel
    def bwd_cols(dy, y, dx, outer, n, inner, logsm):
        for p in range(gid(), int32(outer * inner), gsz()):
            o = dm(p, inner)[0]
            i = p - o * inner
            s = zero
            for j in range(n):
                if logsm:
                    s += dy[o, j, i]
                else:
                    s += dy[o, j, i] * y[o, j, i]
            for j in range(n):
                if logsm:
                    dx[o, j, i] = dy[o, j, i] - math.exp(y[o, j, i]) * s
                else:
                    dx[o, j, i] = y[o, j, i] * (dy[o, j, i] - s)

    return _kit.named(fwd_rows=fwd_rows, fwd_cols=fwd_cols, bwd_rows=bwd_rows, bwd_cols=bwd_cols)


def _geometry(shape, dim):
    return _kit.numel(shape[:dim]), int(shape[dim]), _kit.numel(shape[dim + 1:])


def _forward(x, dim, logsm):
    x = _kit.dev(x)
    shape = _kit.shape_of(x)
    outer, n, inner = _geometry(shape, dim)
    y = _kit.empty(shape, x.dtype)
    if outer * n * inner:
        ks = _kernels(x.dtype)
        if inner == 1:
            ks.fwd_rows[_kit.row_blocks(outer), ROW_THREADS](
                _kit.reshape(x, (outer, n)), _kit.reshape(y, (outer, n)), outer, n, logsm)
        else:
            g = (outer, n, inner)
            ks.fwd_cols[_kit.blocks_for(outer * inner), THREADS](
                _kit.reshape(x, g), _kit.reshape(y, g), outer, n, inner, logsm)
    return y, (y, dim)


def _backward(dy, saved, logsm):
    y, dim = saved
    dy = _kit.dev(dy)
    shape = _kit.shape_of(y)
    outer, n, inner = _geometry(shape, dim)
    dx = _kit.empty(shape, y.dtype)
    if outer * n * inner:
        ks = _kernels(y.dtype)
        if inner == 1:
            g = (outer, n)
            ks.bwd_rows[_kit.row_blocks(outer), ROW_THREADS](
                _kit.reshape(dy, g), _kit.reshape(y, g), _kit.reshape(dx, g), outer, n, logsm)
        else:
            g = (outer, n, inner)
            ks.bwd_cols[_kit.blocks_for(outer * inner), THREADS](
                _kit.reshape(dy, g), _kit.reshape(y, g), _kit.reshape(dx, g), outer, n, inner,
                logsm)
    return dx


def softmax(x, dim):
    return _forward(x, dim, 0)


def softmax_backward(dy, saved):
    return _backward(dy, saved, 0)


def log_softmax(x, dim):
    return _forward(x, dim, 1)


def log_softmax_backward(dy, saved):
    return _backward(dy, saved, 1)
