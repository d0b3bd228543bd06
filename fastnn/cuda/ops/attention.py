"""Attention family on the GPU: scaled dot-product attention over heads, flash-style.

Layouts as the reference: q (B, L, H*E) or, seq_first, (L, B, H*E); heads interleaved
in the feature dim.  Heads are gathered once into Q (BH, L, E), K (BH, S, E),
V (BH, S, Ev) (one kernel each); the L x S weights are never materialised:

  forward   one block per query row: key tiles of one key per thread, an online softmax
            (running max and sum, the output rescaled as the max grows), the output row in
            registers; saves the row's log-sum-exp (LSE).  O(L + S) memory per head.
  backward  D_i = dO_i . O_i; the weights are recomputed from LSE.  dQ: one block per
            query row (dS_ij = P_ij (dP_ij - D_i) scale summed against k_j); dK, dV: one
            block per key row, summing over query rows -- each block owns its output
            rows, so no atomics and the same bits on every run.
Masks, causal (top-left) and dropout as the reference; dropout's mask is regenerated from
Philox element ((bh*L + i)*S + j) wherever a weight is needed, so the masks match the
cpu backend.  A row whose every key is masked gets zero weights (LSE = -inf).

varlen_attention (inference, FlashAttention's varlen): the same online-softmax row loop
straight on the interleaved layouts (no head split or merge copies) and only over real
rows: the host lists the real query rows (range, row) once, one block per (real row,
head) reads its range's keys k_start .. k_start + k_len - 1 and nothing else; the output
rows outside every range are zero-filled, never computed.
"""
import math

import numpy as np

from .. import _kit
from .._runtime import to_numpy
from .._kit import (ROW_THREADS, SBUF, THREADS, U8, block_max, block_sum, cuda, dm, gid, gsz,
                    int32, kernel, philox4x32)

OPS = ("scaled_dot_product_attention", "scaled_dot_product_attention_backward",
       "varlen_attention")


@_kit.per_dtype
def _kernels(dt):
    T = dt.type
    NT = _kit.shared_type(dt)
    zero = T(0)
    one = T(1)
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
        for i in range(gid(), total, gsz()):
            r, e = dm(i, E)
            bh, l = dm(r, L)
            b, h = dm(bh, H)
            if seq_first:
                dst[bh, l, e] = src[l, b, h * E + e]
            else:
                dst[bh, l, e] = src[b, l, h * E + e]

    @kernel
    def merge_heads(src, dst, total, B, L, H, E, seq_first):
        # the inverse: dst (B, L, H*E) or (L, B, H*E) from src (B*H, L, E)
        HE = int32(H * E)
        for i in range(gid(), total, gsz()):
            r, f = dm(i, HE)
            h, e = dm(f, E)
            if seq_first:
                l, b = dm(r, B)
                dst[l, b, f] = src[b * H + h, l, e]
            else:
                b, l = dm(r, L)
                dst[b, l, f] = src[b * H + h, l, e]

    @cuda.jit(device=True)
    def score(Q, K, bh, i, j, E, scale, mask, mi, mrow, Sm, has_mask):
        # scale * q_i . k_j (+ the additive mask): one element of the score row
        s = zero
        for e in range(E):
            s += Q[bh, i, e] * K[bh, j, e]
        s *= scale
        if has_mask:
            s += mask[mi, mrow, j if Sm > 1 else 0]
        return s

    @cuda.jit(device=True)
    def drop_scale(on, e, thr, dscale, off_lo, off_hi, k0, k1):
        # the dropout multiplier of weight e: 1 without dropout, else 0 or 1/(1-p)
        if not on:
            return one
        if keep(e, thr, off_lo, off_hi, k0, k1):
            return dscale
        return zero

    @cuda.jit(device=True)
    def at(a, b, l, f, seq_first):
        # feature f of row l of batch entry b in a (B, L, F) or, seq_first, (L, B, F) array
        if seq_first:
            return a[l, b, f]
        return a[b, l, f]

    @cuda.jit(device=True)
    def put(a, b, l, f, v, seq_first):
        # at()'s element, written
        if seq_first:
            a[l, b, f] = v
        else:
            a[b, l, f] = v

    @cuda.jit(device=True)
    def acc4(a0, a1, a2, a3, w, X, b, r, f, e, B, n, seq_first):
        # the four per-thread accumulators of features f + e + c*B (< f + n) += w * row r of X
        if e < n:
            a0 += w * at(X, b, r, f + e, seq_first)
        if e + B < n:
            a1 += w * at(X, b, r, f + e + B, seq_first)
        if e + 2 * B < n:
            a2 += w * at(X, b, r, f + e + 2 * B, seq_first)
        if e + 3 * B < n:
            a3 += w * at(X, b, r, f + e + 3 * B, seq_first)
        return a0, a1, a2, a3

    @cuda.jit(device=True)
    def store4(out, b, i, f, e, B, n, a0, a1, a2, a3, c, seq_first):
        # acc4's accumulators times c into row i of out
        if e < n:
            put(out, b, i, f + e, a0 * c, seq_first)
        if e + B < n:
            put(out, b, i, f + e + B, a1 * c, seq_first)
        if e + 2 * B < n:
            put(out, b, i, f + e + 2 * B, a2 * c, seq_first)
        if e + 3 * B < n:
            put(out, b, i, f + e + 3 * B, a3 * c, seq_first)

    @cuda.jit(device=True)
    def online_row(Q, K, V, b, i, krow, send, fq, fv, E, Ev, e0, scale, seq_first, mask, mi,
                   mrow, Sm, has_mask, has_drop, dbase, thr, dscale, off_lo, off_hi, k0, k1,
                   sbuf, pbuf):
        # The online-softmax tile loop of one query row, shared by flash_fwd and varlen_fwd:
        # query row i of batch entry b (features fq ..) against its keys krow .. krow +
        # send - 1 in tiles of one key per thread (+ the additive mask row, the dropout of
        # weight dbase + j); the running max m and sum l rescale the output row kept in
        # four registers per thread (value features fv + e0 + t + c*B).  Every thread of
        # the block calls it (it synchronises).  -> (m, l, a0, a1, a2, a3).
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        m = ninf
        l = zero
        a0 = a1 = a2 = a3 = zero
        for j0 in range(int32(0), int32(send), B):
            j = j0 + t
            s = ninf
            if j < send:
                s = zero
                for e in range(E):
                    s += at(Q, b, i, fq + e, seq_first) * at(K, b, krow + j, fq + e, seq_first)
                s *= scale
                if has_mask:
                    s += mask[mi, mrow, j if Sm > 1 else 0]
            mn = max(m, block_max(s, sbuf))
            p = zero
            if s != ninf:
                p = math.exp(s - mn)
            tile = block_sum(p, sbuf)
            if mn != ninf:              # uniform over the block
                corr = zero if m == ninf else math.exp(m - mn)
                l = l * corr + tile
                a0 *= corr
                a1 *= corr
                a2 *= corr
                a3 *= corr
                m = mn
            pbuf[t] = p * drop_scale(has_drop and j < send, dbase + j, thr, dscale, off_lo,
                                     off_hi, k0, k1)
            cuda.syncthreads()
            for jj in range(min(B, send - j0)):
                a0, a1, a2, a3 = acc4(a0, a1, a2, a3, pbuf[jj], V, b, krow + j0 + jj, fv, e0 + t,
                                      B, Ev, seq_first)
            cuda.syncthreads()
        return m, l, a0, a1, a2, a3

    @cuda.jit(device=True)
    def store_row(out, b, i, f, B, Ev, e, a0, a1, a2, a3, l, seq_first):
        # online_row's four accumulators / l into row i of out (features f + e + c*B < Ev)
        store4(out, b, i, f, e, B, Ev, a0, a1, a2, a3, one / l if l > zero else zero, seq_first)

    @kernel
    def flash_fwd(Q, K, V, O, LSE, mask, midx, BH, L, S, E, Ev, Lm, Sm, scale, has_mask,
                  causal, has_drop, thr, dscale, off_lo, off_hi, k0, k1):
        # One block per query row (grid-stride): online_row over its keys.  Rows with more
        # than 4*B output features take several passes.  LSE[row] = m + log(l) (-inf for a
        # dead row).
        sbuf = cuda.shared.array(SBUF, NT)
        pbuf = cuda.shared.array(ROW_THREADS, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for r in range(cuda.blockIdx.x, int32(BH * L), cuda.gridDim.x):
            bh, i = dm(r, L)
            mi = midx[bh] if has_mask else 0
            mrow = i if Lm > 1 else 0
            send = min(S, i + 1) if causal else S
            for e0 in range(int32(0), int32(max(Ev, 1)), int32(4 * B)):
                m, l, a0, a1, a2, a3 = online_row(
                    Q, K, V, bh, i, 0, send, 0, 0, E, Ev, e0, scale, False, mask, mi, mrow,
                    Sm, has_mask, has_drop, r * S, thr, dscale, off_lo, off_hi, k0, k1, sbuf,
                    pbuf)
                store_row(O, bh, i, 0, B, Ev, e0 + t, a0, a1, a2, a3, l, False)
                if e0 == 0 and t == 0:
                    LSE[r] = m + math.log(l) if l > zero else ninf

    @kernel
    def flash_bwd_q(Q, K, V, O, dO, LSE, Dsum, dQ, mask, midx, BH, L, S, E, Ev, Lm, Sm, scale,
                    has_mask, causal, has_drop, thr, dscale, off_lo, off_hi, k0, k1):
        # Per query row: D = dO . O (= sum_j P dP with dropout too), then over key tiles
        # the weights recomputed from LSE, dS = P (dP - D) scale, dQ_row = sum_j dS_j k_j.
        sbuf = cuda.shared.array(SBUF, NT)
        pbuf = cuda.shared.array(ROW_THREADS, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for r in range(cuda.blockIdx.x, int32(BH * L), cuda.gridDim.x):
            bh, i = dm(r, L)
            mi = midx[bh] if has_mask else 0
            mrow = i if Lm > 1 else 0
            send = min(S, i + 1) if causal else S
            d = zero
            for e in range(t, Ev, B):
                d += dO[bh, i, e] * O[bh, i, e]
            d = block_sum(d, sbuf)
            if t == 0:
                Dsum[r] = d
            lse = LSE[r]
            for e0 in range(int32(0), int32(max(E, 1)), int32(4 * B)):
                a0 = a1 = a2 = a3 = zero
                for j0 in range(int32(0), int32(send), B):
                    j = j0 + t
                    ds = zero
                    if j < send and lse != ninf:
                        s = score(Q, K, bh, i, j, E, scale, mask, mi, mrow, Sm, has_mask)
                        if s != ninf:
                            dp = zero
                            for e in range(Ev):
                                dp += dO[bh, i, e] * V[bh, j, e]
                            dp *= drop_scale(has_drop, r * S + j, thr, dscale, off_lo, off_hi,
                                             k0, k1)
                            ds = math.exp(s - lse) * (dp - d) * scale
                    pbuf[t] = ds
                    cuda.syncthreads()
                    for jj in range(min(B, send - j0)):
                        a0, a1, a2, a3 = acc4(a0, a1, a2, a3, pbuf[jj], K, bh, j0 + jj, 0, e0 + t,
                                              B, E, False)
                    cuda.syncthreads()
                store4(dQ, bh, i, 0, e0 + t, B, E, a0, a1, a2, a3, one, False)

    @kernel
    def flash_bwd_kv(Q, K, V, dO, LSE, Dsum, dK, dV, mask, midx, BH, L, S, E, Ev, Lm, Sm,
                     scale, has_mask, causal, has_drop, thr, dscale, off_lo, off_hi, k0, k1):
        # Per key row j (no atomics: each block owns its dK/dV rows): over query tiles the
        # weight P_ij and dS_ij recomputed, dV_j = sum_i Pd_ij dO_i, dK_j = sum_i dS_ij q_i.
        pbuf = cuda.shared.array(ROW_THREADS, NT)
        gbuf = cuda.shared.array(ROW_THREADS, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        for r in range(cuda.blockIdx.x, int32(BH * S), cuda.gridDim.x):
            bh, j = dm(r, S)
            mi = midx[bh] if has_mask else 0
            istart = int32(min(j, L) if causal else 0)
            for e0 in range(int32(0), int32(max(E, Ev, 1)), int32(4 * B)):
                c0 = c1 = c2 = c3 = zero
                g0 = g1 = g2 = g3 = zero
                for i0 in range(istart, L, B):
                    i = i0 + t
                    pd = zero
                    ds = zero
                    if i < L:
                        row = bh * L + i
                        lse = LSE[row]
                        if lse != ninf:
                            s = score(Q, K, bh, i, j, E, scale, mask, mi, i if Lm > 1 else 0,
                                      Sm, has_mask)
                            if s != ninf:
                                p = math.exp(s - lse)
                                z = drop_scale(has_drop, row * S + j, thr, dscale, off_lo,
                                               off_hi, k0, k1)
                                dp = zero
                                for e in range(Ev):
                                    dp += dO[bh, i, e] * V[bh, j, e]
                                pd = p * z
                                ds = p * (dp * z - Dsum[row]) * scale
                    pbuf[t] = pd
                    gbuf[t] = ds
                    cuda.syncthreads()
                    for ii in range(min(B, L - i0)):
                        c0, c1, c2, c3 = acc4(c0, c1, c2, c3, pbuf[ii], dO, bh, i0 + ii, 0, e0 + t,
                                              B, Ev, False)
                        g0, g1, g2, g3 = acc4(g0, g1, g2, g3, gbuf[ii], Q, bh, i0 + ii, 0, e0 + t,
                                              B, E, False)
                    cuda.syncthreads()
                store4(dV, bh, j, 0, e0 + t, B, Ev, c0, c1, c2, c3, one, False)
                store4(dK, bh, j, 0, e0 + t, B, E, g0, g1, g2, g3, one, False)

    @kernel
    def varlen_fwd(q, k, v, out, row_b, row_l, qs, ks, kl, NR, H, E, Ev, scale, seq_first,
                   packed, causal):
        # One block per (real query row, head), grid-stride: online_row over the keys of
        # its range (as flash_fwd, without mask or dropout).  Head h reads features
        # h*E .. h*E + E - 1 in place.
        sbuf = cuda.shared.array(SBUF, NT)
        pbuf = cuda.shared.array(ROW_THREADS, NT)
        t = cuda.threadIdx.x
        B = cuda.blockDim.x
        u0 = U64(0)
        for w in range(cuda.blockIdx.x, int32(NR * H), cuda.gridDim.x):
            ri, h = dm(w, H)
            rb = row_b[ri]
            l = row_l[ri]
            bb = 0 if packed else rb
            send = kl[rb]
            if causal:
                send = min(send, int32(l - qs[rb] + 1))
            fv = h * Ev
            for e0 in range(int32(0), int32(max(Ev, 1)), int32(4 * B)):
                m, lsum, a0, a1, a2, a3 = online_row(
                    q, k, v, bb, l, ks[rb], send, h * E, fv, E, Ev, e0, scale, seq_first, q,
                    0, 0, 1, False, False, 0, u0, zero, u0, u0, u0, u0, sbuf, pbuf)
                store_row(out, bb, l, fv, B, Ev, e0 + t, a0, a1, a2, a3, lsum, seq_first)

    return _kit.named(split_heads=split_heads, merge_heads=merge_heads, flash_fwd=flash_fwd,
                      flash_bwd_q=flash_bwd_q, flash_bwd_kv=flash_bwd_kv, varlen_fwd=varlen_fwd)


def _split(x, H, seq_first):
    x = _kit.dev(x)
    dt = _kit.dtype_of(x)
    a, b, F = _kit.shape_of(x)
    B, L = (b, a) if seq_first else (a, b)
    E = F // H if H else 0
    out = _kit.empty((B * H, L, E), dt)
    total = B * H * L * E
    if total:
        _kernels(dt).split_heads[_kit.blocks_for(total), THREADS](x, out, total, B, L, H, E, seq_first)
    return out


def _merge(y, B, H, seq_first):
    dt = _kit.dtype_of(y)
    BH, L, E = _kit.shape_of(y)
    shape = (L, B, H * E) if seq_first else (B, L, H * E)
    out = _kit.empty(shape, dt)
    total = B * L * H * E
    if total:
        _kernels(dt).merge_heads[_kit.blocks_for(total), THREADS](y, out, total, B, L, H, E, seq_first)
    return out


def _drop_args(dt, p, seed, offset):
    if p > 0:
        thr = np.uint64(math.ceil(p * 16777216.0))
        dscale = dt.type(0.0 if p >= 1.0 else 1.0 / (1.0 - p))
        return (True, thr, dscale) + _kit.philox_args(seed, offset)
    z = np.uint64(0)
    return (False, z, dt.type(0), z, z, z, z)


def _mask_args(mask, mask_index, dt):
    if mask is not None:
        mask_d, midx = _kit.dev(mask), _kit.dev(mask_index)
        _, Lm, Sm = _kit.shape_of(mask_d)
        return mask_d, midx, Lm, Sm
    return _kit.empty((1, 1, 1), dt), _kit.empty((1,), np.int64), 1, 1


def scaled_dot_product_attention(q, k, v, num_heads, seq_first, mask, mask_index, dropout_p,
                                 is_causal, scale, seed, offset):
    H = int(num_heads)
    dt = _kit.dtype_of(q)
    shape_q = _kit.shape_of(q)
    B = shape_q[1] if seq_first else shape_q[0]
    Q, K, V = _split(q, H, seq_first), _split(k, H, seq_first), _split(v, H, seq_first)
    BH, L, E = _kit.shape_of(Q)
    S, Ev = _kit.shape_of(K)[1], _kit.shape_of(V)[2]
    O = _kit.empty((BH, L, Ev), dt)
    LSE = _kit.empty((BH * L,), dt)
    masks = _mask_args(mask, mask_index, dt)
    flags = (dt.type(scale), mask is not None, bool(is_causal))
    drop = _drop_args(dt, dropout_p, seed, offset)
    if BH * L:
        _kernels(dt).flash_fwd[_kit.row_blocks(BH * L), ROW_THREADS](
            Q, K, V, O, LSE, masks[0], masks[1], BH, L, S, E, Ev, masks[2], masks[3], *flags,
            *drop)
    out = _merge(O, B, H, seq_first)
    return out, (Q, K, V, O, LSE, masks, flags, drop, B, H, seq_first)


def scaled_dot_product_attention_backward(d_out, saved):
    Q, K, V, O, LSE, masks, flags, drop, B, H, seq_first = saved
    dt = _kit.dtype_of(Q)
    BH, L, E = _kit.shape_of(Q)
    S, Ev = _kit.shape_of(K)[1], _kit.shape_of(V)[2]
    dO = _split(d_out, H, seq_first)                           # (BH, L, Ev)
    dQ, dK, dV = _kit.empty((BH, L, E), dt), _kit.empty((BH, S, E), dt), _kit.empty((BH, S, Ev), dt)
    Dsum = _kit.empty((max(BH * L, 1),), dt)
    ks = _kernels(dt)
    geometry = (masks[0], masks[1], BH, L, S, E, Ev, masks[2], masks[3])
    if BH * L:
        ks.flash_bwd_q[_kit.row_blocks(BH * L), ROW_THREADS](
            Q, K, V, O, dO, LSE, Dsum, dQ, *geometry, *flags, *drop)
    if BH * S:
        ks.flash_bwd_kv[_kit.row_blocks(BH * S), ROW_THREADS](
            Q, K, V, dO, LSE, Dsum, dK, dV, *geometry, *flags, *drop)
    return (_merge(dQ, B, H, seq_first), _merge(dK, B, H, seq_first),
            _merge(dV, B, H, seq_first))


def varlen_attention(q, k, v, q_start, q_len, k_start, k_len, num_heads, seq_first, is_causal,
                     scale):
    """Variable-length attention (inference-only; see fastnn.reference.attention): the
    ranges are host integer arrays, q/k/v in the interleaved (B, L, H*E) or (L, B, H*E)
    layouts."""
    q, k, v = _kit.dev(q), _kit.dev(k), _kit.dev(v)
    dt = _kit.dtype_of(q)
    H = int(num_heads)
    shape_q = _kit.shape_of(q)
    Bq = shape_q[1] if seq_first else shape_q[0]
    E = shape_q[2] // H if H else 0
    Ev = _kit.shape_of(v)[2] // H if H else 0
    out_shape = shape_q[:2] + (H * Ev,)
    out = _kit.empty(out_shape, dt)
    qs, ql, ks, kl = (np.asarray(_kit_host(a), np.int64) for a in (q_start, q_len, k_start,
                                                                    k_len))
    nrows = int(ql.sum())
    if nrows * H * Ev < _kit.numel(out_shape):
        _kit.fill(out, 0)                     # rows outside every range (never computed)
    if nrows == 0 or H * Ev == 0:
        return out
    row_b = np.repeat(np.arange(len(ql), dtype=np.int32), ql)
    first = np.repeat(np.cumsum(ql) - ql, ql)
    row_l = (np.arange(nrows) - first + np.repeat(qs, ql)).astype(np.int32)
    ranges = [_kit.dev(a.astype(np.int32)) for a in (row_b, row_l, qs, ks, kl)]
    _kernels(dt).varlen_fwd[_kit.row_blocks(nrows * H), ROW_THREADS](
        q, k, v, out, *ranges, nrows, H, E, Ev, dt.type(scale), bool(seq_first), Bq == 1,
        bool(is_causal))
    return out


def _kit_host(a):
    """A host copy of a small integer array (the range arrays may arrive on the device)."""
    return a if isinstance(a, np.ndarray) else to_numpy(a)
