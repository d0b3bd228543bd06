"""Attention family, reference: scaled dot-product attention over heads.

One op serves ``F.scaled_dot_product_attention`` (one head per batch entry) and the
multi-head layers (heads interleaved in the feature dimension, no transposed copies):

    q (B, L, H*E), k (B, S, H*E), v (B, S, H*Ev), out (B, L, H*Ev)     seq_first=False
    q (L, B, H*E), k (S, B, H*E), v (S, B, H*Ev), out (L, B, H*Ev)     seq_first=True

Head h of batch entry b reads features h*E..(h+1)*E.  For (b, h) -- flat index
``bh = b*H + h`` -- the weights are

    P = softmax(scale * q k^T + mask[mask_index[bh]] + causal),  out = dropout(P) v

``mask`` is None or an additive float array (M, Lm, Sm) of the input dtype (Lm in {1, L},
Sm in {1, S}: broadcast over query rows / keys), ``mask_index`` (B*H,) int64 picks the
matrix of each (b, h).  ``is_causal`` lets query i see keys j <= i (top-left aligned).
Dropout: weight (bh, i, j) is element ((bh*L + i)*S + j) of the Philox call (seed, offset),
kept when its uniform is >= p (fastnn.reference.dropout's rule), scaled by 1/(1-p).

A row whose every key is masked gets zero weights (output 0, zero gradients), as
torch's scaled_dot_product_attention does (its "safe softmax"), not NaN.
"""
import numpy as np

from .._random import philox_uniform
from ._util import cast, f64

OPS = ("scaled_dot_product_attention", "scaled_dot_product_attention_backward",
       "varlen_attention")


def dropout_multiplier(n, p, seed, offset):
    """float64 multipliers (0 or 1/(1-p)) of elements 0..n-1 of Philox call (seed, offset)."""
    u = philox_uniform(n, seed, offset, np.float64)
    return np.where(u >= p, 0.0 if p >= 1.0 else 1.0 / (1.0 - p), 0.0)


def _split(x, H, seq_first):
    """(B, L, H*E) or (L, B, H*E) -> float64 (B, H, L, E)."""
    x = f64(x)
    if seq_first:
        x = x.transpose(1, 0, 2)
    B, L, F = x.shape
    return x.reshape(B, L, H, F // H).transpose(0, 2, 1, 3)


def _merge(y, seq_first, like):
    B, H, L, E = y.shape
    y = y.transpose(0, 2, 1, 3).reshape(B, L, H * E)
    if seq_first:
        y = y.transpose(1, 0, 2)
    return cast(np.ascontiguousarray(y), like)


def _weights(q, k, v, H, seq_first, mask, mask_index, p, causal, scale, seed, offset):
    """float64 (Q, K, V, P, multiplier or None) with P the undropped weights (B, H, L, S)."""
    Q, K, V = _split(q, H, seq_first), _split(k, H, seq_first), _split(v, H, seq_first)
    B, _, L, _ = Q.shape
    S = K.shape[2]
    s = np.matmul(Q, K.transpose(0, 1, 3, 2)) * scale
    if mask is not None:
        s = s + f64(mask)[np.asarray(mask_index)].reshape(B, H, mask.shape[1], mask.shape[2])
    if causal:
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if S else np.zeros(s.shape[:-1] + (1,))
    dead = ~np.isfinite(m) & (m < 0)           # every key masked: zero weights
    m = np.where(dead, 0.0, m)
    e = np.exp(s - m)
    tot = e.sum(axis=-1, keepdims=True)
    P = np.where(dead, 0.0, e / np.where(tot == 0, 1.0, tot))
    mult = None
    if p > 0:
        mult = dropout_multiplier(B * H * L * S, p, seed, offset).reshape(B, H, L, S)
    return Q, K, V, P, mult


def scaled_dot_product_attention(q, k, v, num_heads, seq_first, mask, mask_index, dropout_p,
                                 is_causal, scale, seed, offset):
    Q, K, V, P, mult = _weights(q, k, v, num_heads, seq_first, mask, mask_index, dropout_p,
                                is_causal, scale, seed, offset)
    Pd = P if mult is None else P * mult
    out = _merge(np.matmul(Pd, V), seq_first, q)
    saved = (q, k, v, num_heads, seq_first, mask, mask_index, dropout_p, is_causal, scale,
             seed, offset)
    return out, saved


def scaled_dot_product_attention_backward(d_out, saved):
    q, k, v, H, seq_first, mask, mask_index, p, causal, scale, seed, offset = saved
    Q, K, V, P, mult = _weights(q, k, v, H, seq_first, mask, mask_index, p, causal, scale,
                                seed, offset)
    dO = _split(d_out, H, seq_first)
    Pd = P if mult is None else P * mult
    dV = np.matmul(Pd.transpose(0, 1, 3, 2), dO)
    dP = np.matmul(dO, V.transpose(0, 1, 3, 2))
    if mult is not None:
        dP = dP * mult
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) * scale
    dQ = np.matmul(dS, K)
    dK = np.matmul(dS.transpose(0, 1, 3, 2), Q)
    return (_merge(dQ, seq_first, q), _merge(dK, seq_first, k), _merge(dV, seq_first, v))


def varlen_attention(q, k, v, q_start, q_len, k_start, k_len, num_heads, seq_first, is_causal,
                     scale):
    """Variable-length attention (inference-only; FlashAttention's varlen): batch entry b
    uses query rows q_start[b] .. q_start[b] + q_len[b] - 1 and key/value rows
    k_start[b] .. k_start[b] + k_len[b] - 1 of its own sequence (layouts as above:
    a packed batch of sequences is B = 1 with starts = cu_seqlens[:-1]).  Keys outside a
    range are never read, query rows outside every range are 0 in the output.
    is_causal: row i of a range attends keys j <= i of its range (top-left aligned)."""
    H = num_heads
    Q, K, V = _split(q, H, seq_first), _split(k, H, seq_first), _split(v, H, seq_first)
    B, _, L, _ = Q.shape
    out = np.zeros(Q.shape[:3] + (V.shape[3],))
    nb = len(q_start)
    for b in range(nb):
        bb = b if B > 1 else 0
        qs, ql, ks, kl = int(q_start[b]), int(q_len[b]), int(k_start[b]), int(k_len[b])
        if ql == 0:
            continue
        s = np.matmul(Q[bb, :, qs:qs + ql], K[bb, :, ks:ks + kl].transpose(0, 2, 1)) * scale
        if is_causal:
            s = np.where(np.tril(np.ones((ql, kl), dtype=bool)), s, -np.inf)
        if kl == 0:
            continue
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        out[bb, :, qs:qs + ql] = np.matmul(e / e.sum(axis=-1, keepdims=True),
                                           V[bb, :, ks:ks + kl])
    return _merge(out, seq_first, q)
