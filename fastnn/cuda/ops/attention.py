"""Attention family on the GPU: scaled dot-product attention over heads.

Layouts as the reference: q (B, L, H*E) or, seq_first, (L, B, H*E); heads interleaved
in the feature dim.  The device path:

  split heads -> Q (BH, L, E), K (BH, S, E), V (BH, S, Ev)       (one gather kernel each)
  scores = Q K^T                          batched GEMM (cuBLAS through CuPy, or tiled)
  P = safe softmax(scale * scores + mask + causal)   one block per row; a fully masked
      row gets zero weights; dropout multiplies by the Philox mask of element
      ((bh*L + i)*S + j) -- the reference's numbering, so masks match the cpu backend
  out = (P * mask) V                      batched GEMM, then merge heads
Backward: dV = Pd^T dO, dP = dO V^T (GEMMs); dS = P (dP*m - rowsum(dP*m*P)) * scale in
one row kernel (mask regenerated from Philox); dQ = dS K, dK = dS^T Q (GEMMs).
The L x S weights are materialised (batched-GEMM attention, not a fused flash kernel).
"""
import math

import numpy as np

from .. import _kit
from .._gemm import gemm_batched
from .._kit import (ROW_THREADS, SBUF, THREADS, U8, block_max, block_sum, cuda, kernel,
                    philox4x32)

OPS = ("scaled_dot_product_attention", "scaled_dot_product_attention_backward")


@_kit.per_dtype
def _kernels(dt):
    T = dt.type
    NT = _kit.shared_type(dt)
    zero = T(0)
    ninf = T(-np.inf)
    U64 = np.uint64
    M3 = U64(3)
    S2 = U64(2)

    @cuda.jit(device=True)
    def keep(e, thr, off_lo, off_hi, k0, k1):
        # the dropout decision of element e of the Philox call (one lane of its block)
        ue = U64(e)
        r0, r1, r2, r3 = philox4x32(ue >> S2, off_lo, off_hi, k0, k1)
        lane = ue & M3
        r = r0
        if lane == U64(1):
            r = r1
        elif lane == U64(2):
            r = r2
        elif lane == U64(3):
            r = r3
        return (r >> U8) >= thr

    @kernel
    def split_heads(src, dst, total, B, L, H, E, seq_first):
        # dst[b*H + h, l, e] = src[b, l, h*E + e] (or src[l, b, h*E + e])
        for i in range(cuda.grid(1), total, cuda.gridsize(1)):
            e = i % E
            r = i // E
            l = r % L
            bh = r // L
            h = bh % H
            b = bh // H
            if seq_first:
                dst[bh, l, e] = src[l, b, h * E + e]
            else:
                dst[bh, l, e] = src[b, l, h * E + e]

    @kernel
    def merge_heads(src, dst, total, B, L, H, E, seq_first):
        # the inverse: dst (B, L, H*E) or (L, B, H*E) from src (B*H, L, E)
        for i in range(cuda.grid(1), total, cuda.gridsize(1)):
            f = i % (H * E)
            r = i // (H * E)
            h = f // E
            e = f - h * E
            if seq_first:
                b = r % B
                l = r // B
                dst[l, b, f] = src[b * H + h, l, e]
            else:
                l = r % L
                b = r // L
                dst[b, l, f] = src[b * H + h, l, e]

    @kernel
    def softmax_fwd(sc, P, Pd, mask, midx, BH, L, S, Lm, Sm, scale, has_mask, causal,
                    has_drop, thr, dscale, off_lo, off_hi, k0, k1):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for r in range(cuda.blockIdx.x, BH * L, cuda.gridDim.x):
            bh = r // L
            i = r - bh * L
            mi = midx[bh] if has_mask else 0
            mrow = i if Lm > 1 else 0
            m = ninf
            for j in range(t, S, B):
                s = sc[bh, i, j] * scale
                if has_mask:
                    s += mask[mi, mrow, j if Sm > 1 else 0]
                if causal and j > i:
                    s = ninf
                sc[bh, i, j] = s
                m = max(m, s)
            m = block_max(m, sbuf)
            dead = m == ninf
            tot = zero
            if not dead:
                for j in range(t, S, B):
                    tot += math.exp(sc[bh, i, j] - m)
            tot = block_sum(tot, sbuf)
            for j in range(t, S, B):
                p = zero
                if not dead:
                    p = math.exp(sc[bh, i, j] - m) / tot
                P[bh, i, j] = p
                if has_drop:
                    if keep(r * S + j, thr, off_lo, off_hi, k0, k1):
                        Pd[bh, i, j] = p * dscale
                    else:
                        Pd[bh, i, j] = zero

    @kernel
    def softmax_bwd(dP, P, BH, L, S, scale, has_drop, thr, dscale, off_lo, off_hi, k0, k1):
        # in place: dP <- P * (dP*m - sum_j dP*m*P) * scale
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for r in range(cuda.blockIdx.x, BH * L, cuda.gridDim.x):
            bh = r // L
            i = r - bh * L
            s = zero
            for j in range(t, S, B):
                g = dP[bh, i, j]
                if has_drop:
                    if keep(r * S + j, thr, off_lo, off_hi, k0, k1):
                        g = g * dscale
                    else:
                        g = zero
                    dP[bh, i, j] = g
                s += g * P[bh, i, j]
            s = block_sum(s, sbuf)
            for j in range(t, S, B):
                dP[bh, i, j] = P[bh, i, j] * (dP[bh, i, j] - s) * scale

    return split_heads, merge_heads, softmax_fwd, softmax_bwd


def _split(x, H, seq_first):
    x = _kit.dev(x)
    dt = _kit.dtype_of(x)
    a, b, F = _kit.shape_of(x)
    B, L = (b, a) if seq_first else (a, b)
    E = F // H if H else 0
    out = _kit.empty((B * H, L, E), dt)
    total = B * H * L * E
    if total:
        _kernels(dt)[0][_kit.blocks_for(total), THREADS](x, out, total, B, L, H, E, seq_first)
    return out


def _merge(y, B, H, seq_first):
    dt = _kit.dtype_of(y)
    BH, L, E = _kit.shape_of(y)
    shape = (L, B, H * E) if seq_first else (B, L, H * E)
    out = _kit.empty(shape, dt)
    total = B * L * H * E
    if total:
        _kernels(dt)[1][_kit.blocks_for(total), THREADS](y, out, total, B, L, H, E, seq_first)
    return out


def _drop_args(dt, p, seed, offset):
    if p > 0:
        thr = np.uint64(math.ceil(p * 16777216.0))
        dscale = dt.type(0.0 if p >= 1.0 else 1.0 / (1.0 - p))
        return (True, thr, dscale) + _kit.philox_args(seed, offset)
    z = np.uint64(0)
    return (False, z, dt.type(0), z, z, z, z)


def scaled_dot_product_attention(q, k, v, num_heads, seq_first, mask, mask_index, dropout_p,
                                 is_causal, scale, seed, offset):
    H = int(num_heads)
    dt = _kit.dtype_of(q)
    shape_q = _kit.shape_of(q)
    B = shape_q[1] if seq_first else shape_q[0]
    Q, K, V = _split(q, H, seq_first), _split(k, H, seq_first), _split(v, H, seq_first)
    BH, L, E = _kit.shape_of(Q)
    S = _kit.shape_of(K)[1]
    scores = gemm_batched(Q, K, tb=True)                       # (BH, L, S)
    P = _kit.empty((BH, L, S), dt)
    drop = _drop_args(dt, dropout_p, seed, offset)
    Pd = _kit.empty((BH, L, S), dt) if drop[0] else P
    if BH * L * S:
        if mask is not None:
            mask_d, midx = _kit.dev(mask), _kit.dev(mask_index)
            _, Lm, Sm = _kit.shape_of(mask_d)
        else:
            mask_d, midx = _kit.empty((1, 1, 1), dt), _kit.empty((1,), np.int64)
            Lm = Sm = 1
        _kernels(dt)[2][_kit.row_blocks(BH * L), ROW_THREADS](
            scores, P, Pd, mask_d, midx, BH, L, S, Lm, Sm, dt.type(scale), mask is not None,
            bool(is_causal), *drop)
    out = _merge(gemm_batched(Pd, V), B, H, seq_first)         # (BH, L, Ev) -> layout
    saved = (Q, K, V, P, Pd, B, H, seq_first, dropout_p, scale, seed, offset)
    return out, saved


def scaled_dot_product_attention_backward(d_out, saved):
    Q, K, V, P, Pd, B, H, seq_first, p, scale, seed, offset = saved
    dt = _kit.dtype_of(Q)
    BH, L, S = _kit.shape_of(P)
    dO = _split(d_out, H, seq_first)                           # (BH, L, Ev)
    dV = gemm_batched(Pd, dO, ta=True)                         # (BH, S, Ev)
    dP = gemm_batched(dO, V, tb=True)                          # (BH, L, S)
    if BH * L * S:
        _kernels(dt)[3][_kit.row_blocks(BH * L), ROW_THREADS](
            dP, P, BH, L, S, dt.type(scale), *_drop_args(dt, p, seed, offset))
    dQ = gemm_batched(dP, K)                                   # (BH, L, E)
    dK = gemm_batched(dP, Q, ta=True)                          # (BH, S, E)
    return (_merge(dQ, B, H, seq_first), _merge(dK, B, H, seq_first),
            _merge(dV, B, H, seq_first))
