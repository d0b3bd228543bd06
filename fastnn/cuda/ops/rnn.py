"""Recurrent family on the GPU: multi-layer (bi)directional RNN (tanh/relu), GRU, LSTM.

Per layer and direction:
  forward   XP = X W_ih^T + b_ih for ALL time steps in one GEMM; then per step one GEMM
            HH = h W_hh^T + b_hh and one fused cell kernel (thread per (batch, unit)) that
            applies the gates (torch's order: LSTM i, f, g, o; GRU r, z, n with r applied to
            W_hn h + b_hn), writes h into the layer output and keeps the activations.
  backward  per step (reversed) one fused cell-backward kernel gives the gate gradients
            GX (w.r.t. the input projection) and GH (w.r.t. the hidden projection), and one
            GEMM dh = GH W_hh (+ the GRU's direct z term); after the loop the weight
            gradients are single GEMMs over all steps: dW_ih = GX^T X, dW_hh = GH^T H_prev,
            biases are column sums, dX = GX W_ih -- no per-step weight accumulation, so the
            sums are deterministic.
Dropout between layers uses the reference's Philox numbering (boundary k starts at
k * N4, N4 = T*B*D*H rounded up to 4), so masks match the cpu backend.
"""
import math

import numpy as np

from .. import _kit
from .._gemm import gemm
from .._kit import THREADS, U8, cuda, dm, gid, gsz, int32, kernel, philox4x32
from ...reference.rnn import stack_ops
from .conv import _swap01

OPS = ("rnn", "rnn_backward", "gru", "gru_backward", "lstm", "lstm_backward")

_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "gru": 3, "lstm": 4}
_MODE = {"rnn_tanh": 0, "rnn_relu": 1, "gru": 2, "lstm": 3}


@_kit.per_dtype
def _kernels(dt):
    T_ = dt.type
    zero = T_(0)
    one = T_(1)
    U64 = np.uint64
    M3 = U64(3)
    S2 = U64(2)

    @cuda.jit(device=True)
    def sig(v):
        return one / (one + math.exp(-v))

    @kernel
    def cell_fwd(xp, hh, hp, cp, out, acts, aux, t, B, H, doff, mode):
        # hp / cp (B, H): the state, updated in place (each thread owns its (b, j))
        for e in range(gid(), int32(B * H), gsz()):
            b = dm(e, H)[0]
            j = e - b * H
            if mode == 0 or mode == 1:
                a = xp[t, b, j] + hh[b, j]
                if mode == 0:
                    h = math.tanh(a)
                else:
                    h = a if a > zero else zero
            elif mode == 2:
                r = sig(xp[t, b, j] + hh[b, j])
                z = sig(xp[t, b, H + j] + hh[b, H + j])
                hn = hh[b, 2 * H + j]
                n = math.tanh(xp[t, b, 2 * H + j] + r * hn)
                h = (one - z) * n + z * hp[b, j]
                acts[t, b, j] = r
                acts[t, b, H + j] = z
                acts[t, b, 2 * H + j] = n
                aux[t, b, j] = hn
            else:
                ig = sig(xp[t, b, j] + hh[b, j])
                fg = sig(xp[t, b, H + j] + hh[b, H + j])
                gg = math.tanh(xp[t, b, 2 * H + j] + hh[b, 2 * H + j])
                og = sig(xp[t, b, 3 * H + j] + hh[b, 3 * H + j])
                c = fg * cp[b, j] + ig * gg
                h = og * math.tanh(c)
                acts[t, b, j] = ig
                acts[t, b, H + j] = fg
                acts[t, b, 2 * H + j] = gg
                acts[t, b, 3 * H + j] = og
                aux[t, b, j] = c
                cp[b, j] = c
            hp[b, j] = h
            out[t, b, doff + j] = h

    @kernel
    def cell_bwd(dy, out, acts, aux, hprev, cprev, dh, dc, gx, gh, direct, t, B, H, doff, mode):
        # dh / dc (B, H): the incoming state gradients; dc is updated in place
        for e in range(gid(), int32(B * H), gsz()):
            b = dm(e, H)[0]
            j = e - b * H
            dht = dy[t, b, doff + j] + dh[b, j]
            if mode == 0 or mode == 1:
                h = out[t, b, doff + j]
                if mode == 0:
                    g = dht * (one - h * h)
                else:
                    g = dht if h > zero else zero
                gx[t, b, j] = g
                gh[t, b, j] = g
            elif mode == 2:
                r = acts[t, b, j]
                z = acts[t, b, H + j]
                n = acts[t, b, 2 * H + j]
                hn = aux[t, b, j]
                dan = dht * (one - z) * (one - n * n)
                dar = dan * hn * r * (one - r)
                daz = dht * (hprev[t, b, j] - n) * z * (one - z)
                gx[t, b, j] = dar
                gx[t, b, H + j] = daz
                gx[t, b, 2 * H + j] = dan
                gh[t, b, j] = dar
                gh[t, b, H + j] = daz
                gh[t, b, 2 * H + j] = dan * r
                direct[b, j] = dht * z
            else:
                ig = acts[t, b, j]
                fg = acts[t, b, H + j]
                gg = acts[t, b, 2 * H + j]
                og = acts[t, b, 3 * H + j]
                tc = math.tanh(aux[t, b, j])
                dct = dc[b, j] + dht * og * (one - tc * tc)
                gx[t, b, j] = dct * gg * ig * (one - ig)
                gx[t, b, H + j] = dct * cprev[t, b, j] * fg * (one - fg)
                gx[t, b, 2 * H + j] = dct * ig * (one - gg * gg)
                gx[t, b, 3 * H + j] = dht * tc * og * (one - og)
                for q in range(4):
                    gh[t, b, q * H + j] = gx[t, b, q * H + j]
                dc[b, j] = dct * fg

    @kernel
    def prev_states(out, aux, h0, c0, hprev, cprev, T, B, H, doff, reverse, has_h0, has_c0,
                    lstm):
        # hprev[t] = h_{t-1} in the direction's order (h0 at the start); cprev likewise
        for e in range(gid(), int32(T * B * H), gsz()):
            r, j = dm(e, H)
            t, b = dm(r, B)
            tp = t + 1 if reverse else t - 1
            if tp >= 0 and tp < T:
                hprev[t, b, j] = out[tp, b, doff + j]
                if lstm:
                    cprev[t, b, j] = aux[tp, b, j]
            else:
                hprev[t, b, j] = h0[b, j] if has_h0 else zero
                if lstm:
                    cprev[t, b, j] = c0[b, j] if has_c0 else zero

    @kernel
    def drop(src, dst, n, base, thr, scale, off_lo, off_hi, k0, k1):
        # dst[e] = src[e] * keep(base + e) / (1 - p): the reference's layer-boundary mask
        for e in range(gid(), n, gsz()):
            ue = U64(base + e)
            r0, r1, r2, r3 = philox4x32(ue >> S2, off_lo, off_hi, k0, k1)
            lane = ue & M3
            r = r0
            if lane == U64(1):
                r = r1
            elif lane == U64(2):
                r = r2
            elif lane == U64(3):
                r = r3
            dst[e] = src[e] * scale if (r >> U8) >= thr else zero

    return _kit.named(cell_fwd=cell_fwd, cell_bwd=cell_bwd, prev_states=prev_states, drop=drop)


def _copy_into(dst, src):
    n = _kit.numel(_kit.shape_of(src))
    if n:
        _kit._copy1[_kit.blocks_for(n), THREADS](_kit.flat(src), _kit.flat(dst), n)


def _dropout(ks, a, k, n4, drop):
    p, seed, offset = drop
    out = _kit.empty_like(a)
    n = _kit.numel(_kit.shape_of(a))
    if n:
        thr = np.uint64(math.ceil(p * 16777216.0))
        scale = _kit.dtype_of(a).type(0.0 if p >= 1.0 else 1.0 / (1.0 - p))
        ks.drop[_kit.blocks_for(n), THREADS](_kit.flat(a), _kit.flat(out), n, k * n4, thr, scale,
                                           *_kit.philox_args(seed, offset))
    return out


def _forward(mode, x, h0, c0, weights, L, bidirectional, batch_first, p, train, seed, offset):
    G = _GATES[mode]
    D = 2 if bidirectional else 1
    weights = [_kit.dev(w) for w in weights]
    nw = len(weights) // (L * D)
    H = _kit.shape_of(weights[1])[1]
    x = _kit.dev(x)
    h0, c0 = _kit.dev(h0), _kit.dev(c0)
    dt = _kit.dtype_of(x)
    xs = _swap01(x) if batch_first else x                       # (T, B, I)
    T, B = _kit.shape_of(xs)[:2]
    ks = _kernels(dt)
    use_drop = bool(train) and p > 0 and L > 1
    n4 = -(-(T * B * D * H) // 4) * 4
    h_n = _kit.zeros((L * D, B, H), dt)
    c_n = _kit.zeros((L * D, B, H), dt)
    layers = []
    inp = xs
    out = None
    dummy3 = _kit.empty((1, 1, 1), dt)
    for k in range(L):
        I = _kit.shape_of(inp)[2]
        out = _kit.empty((T, B, D * H), dt)
        dirs = []
        for d in range(D):
            w = weights[(k * D + d) * nw:(k * D + d + 1) * nw]
            w_ih, w_hh = w[0], w[1]
            b_ih = w[2] if nw == 4 else None
            b_hh = w[3] if nw == 4 else None
            xp = _kit.reshape(gemm(_kit.reshape(inp, (T * B, I)), w_ih, tb=True, bias=b_ih),
                              (T, B, G * H))
            hp = _kit.copy(h0[k * D + d]) if h0 is not None else _kit.zeros((B, H), dt)
            cp = _kit.copy(c0[k * D + d]) if c0 is not None else _kit.zeros((B, H), dt)
            acts = _kit.empty((T, B, G * H), dt) if G > 1 else dummy3
            aux = _kit.empty((T, B, H), dt) if G > 1 else dummy3
            for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
                hh = gemm(hp, w_hh, tb=True, bias=b_hh)
                if B * H:
                    ks.cell_fwd[_kit.blocks_for(B * H), THREADS](xp, hh, hp, cp, out, acts, aux, t, B, H,
                                                           d * H, _MODE[mode])
            _copy_into(h_n[k * D + d], hp)
            _copy_into(c_n[k * D + d], cp)
            dirs.append((acts, aux))
        layers.append((inp, out, dirs))
        if k < L - 1:
            inp = _dropout(ks, out, k, n4, (p, seed, offset)) if use_drop else out
    y = _swap01(out) if batch_first else out
    saved = (mode, h0, c0, weights, L, D, batch_first, (p, seed, offset) if use_drop else None,
             n4, layers, H, dt)
    return y, h_n, c_n, saved


def _backward(d_out, d_h_n, d_c_n, saved, weight_grad=True):
    mode, h0, c0, weights, L, D, batch_first, drop, n4, layers, H, dt = saved
    G = _GATES[mode]
    nw = len(weights) // (L * D)
    ks = _kernels(dt)
    T, B = _kit.shape_of(layers[0][0])[:2]
    if d_out is None:
        dy = _kit.zeros((T, B, D * H), dt)
    else:
        dy = _kit.dev(d_out)
        dy = _swap01(dy) if batch_first else dy
    d_h_n, d_c_n = _kit.dev(d_h_n), _kit.dev(d_c_n)
    dweights = [None] * len(weights)
    dh0 = _kit.empty((L * D, B, H), dt)
    dc0 = _kit.empty((L * D, B, H), dt)
    dinp = None
    dummy3 = _kit.empty((1, 1, 1), dt)
    for k in range(L - 1, -1, -1):
        inp, out, dirs = layers[k]
        I = _kit.shape_of(inp)[2]
        dinp = _kit.zeros((T * B, I), dt)
        for d in range(D):
            base = (k * D + d) * nw
            w_ih, w_hh = weights[base], weights[base + 1]
            acts, aux = dirs[d]
            dh = _kit.copy(d_h_n[k * D + d]) if d_h_n is not None else _kit.zeros((B, H), dt)
            dc = _kit.copy(d_c_n[k * D + d]) if d_c_n is not None else _kit.zeros((B, H), dt)
            hprev = _kit.empty((T, B, H), dt)
            lstm = mode == "lstm"
            cprev = _kit.empty((T, B, H), dt) if lstm else dummy3
            hk = h0[k * D + d] if h0 is not None else _kit.empty((1, 1), dt)
            ck = c0[k * D + d] if c0 is not None else _kit.empty((1, 1), dt)
            if T * B * H:
                ks.prev_states[_kit.blocks_for(T * B * H), THREADS](
                    out, aux, hk, ck, hprev, cprev, T, B, H, d * H, d == 1, h0 is not None,
                    c0 is not None, lstm)
            gx = _kit.empty((T, B, G * H), dt)
            gh = _kit.empty((T, B, G * H), dt)
            direct = _kit.empty((B, H), dt)
            for t in (range(T - 1, -1, -1) if d == 0 else range(T)):
                if B * H:
                    ks.cell_bwd[_kit.blocks_for(B * H), THREADS](
                        dy, out, acts, aux, hprev, cprev, dh, dc, gx, gh, direct, t, B, H, d * H,
                        _MODE[mode])
                dh = gemm(gh[t], w_hh)
                if mode == "gru":
                    _kit.accumulate(dh, direct)
            _copy_into(dh0[k * D + d], dh)
            _copy_into(dc0[k * D + d], dc)
            gx2 = _kit.reshape(gx, (T * B, G * H))
            gh2 = _kit.reshape(gh, (T * B, G * H))
            if weight_grad:     # frozen weights: no products for them
                dweights[base] = gemm(gx2, _kit.reshape(inp, (T * B, I)), ta=True)
                dweights[base + 1] = gemm(gh2, _kit.reshape(hprev, (T * B, H)), ta=True)
                if nw == 4:
                    dweights[base + 2] = _kit.colsum(gx2)
                    dweights[base + 3] = _kit.colsum(gh2)
            _kit.accumulate(dinp, gemm(gx2, w_ih))
        if k > 0:
            dinp3 = _kit.reshape(dinp, (T, B, I))
            dy = _dropout(ks, dinp3, k - 1, n4, drop) if drop is not None else dinp3
    dx = _kit.reshape(dinp, (T, B, _kit.shape_of(layers[0][0])[2]))
    dx = _swap01(dx) if batch_first else dx
    return (dx, dh0 if h0 is not None else None, dc0 if c0 is not None else None,
            tuple(dweights))


# the public ops: the reference's wrappers over this file's whole-stack pair
rnn, rnn_backward, gru, gru_backward, lstm, lstm_backward = stack_ops(_forward, _backward)
