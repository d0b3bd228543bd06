"""Attention family: scaled dot-product attention (and the multi-head core the layers use).

Kernels see C-contiguous q, k, v with heads interleaved in the feature dimension (see
fastnn/reference/attention.py) and an additive float mask (M, Lm, Sm) with a per-(b, h)
index, so a mask broadcast over batch or heads is never materialised per head.

A query row whose every key is masked gets zero weights -- output 0 and zero gradients
-- as torch.nn.functional.scaled_dot_product_attention does (torch >= 2.5 uses a "safe"
softmax there; the explicit softmax of older versions gave NaN).
"""
import math

import numpy as np

from .. import _random
from .._backend import dispatch, placed
from .._validate import float_array, same_dtype
from .._validate import bool_arg, probability, real
from ._core import grad_in

__all__ = ["scaled_dot_product_attention", "scaled_dot_product_attention_fwd",
           "scaled_dot_product_attention_bwd", "multi_head_attention_fwd",
           "multi_head_attention_bwd", "attention_mask", "varlen_attention"]




def _check_scale(scale, E):
    if scale is None:
        return 1.0 / math.sqrt(E) if E > 0 else 1.0
    return real(scale, "scale", finite=True, what="a real number or None")


def _as_additive(mask, name, dtype, invert=False):
    """A bool mask (True = may attend; True = masked when ``invert``) or a float additive
    mask -> additive array of ``dtype`` (0 / -inf for bool)."""
    if not isinstance(mask, np.ndarray):
        if hasattr(mask, "__cuda_array_interface__"):
            raise TypeError(f"{name} must be a NumPy array on the host")
        raise TypeError(f"{name} must be a bool or float NumPy array, got {type(mask).__name__}")
    if mask.dtype == np.bool_:
        allowed = ~mask if invert else mask
        return np.where(allowed, dtype.type(0), dtype.type(-np.inf))
    if mask.dtype.kind == "f":
        return np.asarray(mask, dtype=dtype)
    raise TypeError(f"{name} must be a bool or floating-point array, got dtype {mask.dtype}")


def _mask_tables(mask, batch, L, S, name, expected):
    """Additive mask broadcastable to batch + (L, S) -> (table (M, Lm, Sm), index (prod(batch),)).

    The table holds the mask's distinct matrices only; index[bh] picks the matrix of
    flat batch entry bh."""
    shape = tuple(mask.shape)
    full = tuple(batch) + (L, S)
    if len(shape) < 2:                     # (S,) or a scalar: broadcast over rows
        mask = mask.reshape((1,) * (2 - len(shape)) + shape)
        shape = tuple(mask.shape)
    if len(shape) > len(full):
        raise ValueError(f"{name} must be broadcastable to {expected} = {full}, got shape {shape}")
    try:
        np.broadcast_shapes(shape, full)
        ok = np.broadcast_shapes(shape, full) == full
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} must be broadcastable to {expected} = {full}, got shape {shape}")
    Lm, Sm = shape[-2], shape[-1]
    mb = shape[:-2]
    M = int(np.prod(mb)) if mb else 1
    table = np.ascontiguousarray(mask.reshape(M, Lm, Sm))
    idx = np.arange(M, dtype=np.int64).reshape(mb) if mb else np.zeros((), np.int64)
    idx = np.ascontiguousarray(np.broadcast_to(idx, tuple(batch)).reshape(-1), dtype=np.int64)
    return table, idx


def attention_mask(attn_mask, key_padding_mask, N, H, L, S, dtype):
    """torch.nn.MultiheadAttention's masks -> (table, index) for the kernels, or (None, None).

    attn_mask: (L, S) or (N*H, L, S); bool True = NOT allowed (torch's MHA convention) or
    additive float.  key_padding_mask: (N, S); bool True = padding (ignored) or additive."""
    dtype = np.dtype(dtype)
    add = None
    if attn_mask is not None:
        am = _as_additive(attn_mask, "attn_mask", dtype, invert=True)
        if am.shape == (L, S):
            add = am.reshape(1, 1, L, S)
        elif am.shape == (N * H, L, S):
            add = am.reshape(N, H, L, S)
        else:
            raise ValueError(f"attn_mask must have shape (L, S) = {(L, S)} or "
                             f"(N*num_heads, L, S) = {(N * H, L, S)}, got {tuple(am.shape)}")
    if key_padding_mask is not None:
        kp = _as_additive(key_padding_mask, "key_padding_mask", dtype, invert=True)
        if kp.shape != (N, S):
            raise ValueError(f"key_padding_mask must have shape (N, S) = {(N, S)}, "
                             f"got {tuple(kp.shape)}")
        kp = kp.reshape(N, 1, 1, S)
        add = kp if add is None else add + kp
    if add is None:
        return None, None
    return _mask_tables(add, (N, H), L, S, "attn_mask", "(N, num_heads, L, S)")


# ---------------------------------------------------------------- the public op
def scaled_dot_product_attention_fwd(query, key, value, attn_mask=None, dropout_p=0.0,
                                     is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v with dropout on the weights -> (out, ctx).

    query (..., L, E), key (..., S, E), value (..., S, Ev); the batch dims broadcast.
    attn_mask: bool (True = may attend) or additive float, broadcastable to (..., L, S).
    is_causal: query i attends keys j <= i (top-left aligned, as torch)."""
    q = float_array(query, "query")
    k = float_array(key, "key")
    v = float_array(value, "value")
    shapes = tuple(tuple(a.shape) for a in (q, k, v))
    for s, n in zip(shapes, ("query", "key", "value")):
        if len(s) < 2:
            raise ValueError(f"{n} must have at least 2 dimensions (..., seq, features), "
                             f"got shape {s}")
    same_dtype(q, k, "key", "query")
    same_dtype(q, v, "value", "query")
    (L, E), (S, Ek), (Sv, Ev) = (s[len(s) - 2:] for s in shapes)
    if Ek != E:
        raise ValueError(f"key's last dimension (head dim) must equal query's: query has "
                         f"E = {E}, key has shape {shapes[1]}")
    if Sv != S:
        raise ValueError(f"value's sequence length must equal key's: key has S = {S}, value "
                         f"has shape {shapes[2]}")
    bq, bk, bv = (s[:len(s) - 2] for s in shapes)
    try:
        batch = tuple(np.broadcast_shapes(bq, bk, bv))
    except ValueError:
        raise ValueError(f"the batch dimensions of query {bq}, key {bk} and value {bv} do "
                         f"not broadcast") from None
    is_causal = bool_arg(is_causal, "is_causal")
    p = probability(dropout_p, "dropout_p")
    sc = _check_scale(scale, E)
    mask = index = None
    if attn_mask is not None:
        if is_causal:
            raise ValueError("attn_mask must be None when is_causal=True (as torch: pass one "
                             "or the other)")
        attn_mask = placed(attn_mask).to_host(attn_mask)
        add = _as_additive(attn_mask, "attn_mask", np.dtype(q.dtype))
        mask, index = _mask_tables(add, batch, L, S, "attn_mask", "(..., L, S)")
        mask, index = placed(q).to_backend(mask), placed(q).to_backend(index)
    B = int(np.prod(batch)) if batch else 1
    qf, kf, vf = (placed(a).broadcast_to(a, batch + s[-2:]).reshape(B, s[-2], s[-1])
                  for a, s in zip((q, k, v), shapes))
    be = dispatch(qf, kf, vf)
    seed, offset = _random.next_offset() if p > 0 else (0, 0)
    out, saved = be.scaled_dot_product_attention(qf, kf, vf, 1, False, mask, index, p,
                                                 bool(is_causal), sc, seed, offset)
    out = out.reshape(batch + (L, Ev))
    return out, (be, saved, out.shape, out.dtype, (batch, shapes))


def _unbroadcast(g, shape):
    """Sum a gradient over the dims it was broadcast along to reach ``shape``."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1
                                      and g.shape[i + lead] != 1)
    return np.ascontiguousarray(g.sum(axis=axes).reshape(shape))


def scaled_dot_product_attention_bwd(ctx, d_out):
    """-> (d_query, d_key, d_value) (no gradient for the mask)."""
    be, saved, dy = grad_in(ctx[:4], d_out)
    batch, shapes = ctx[4]
    B = int(np.prod(batch)) if batch else 1
    dq, dk, dv = be.scaled_dot_product_attention_backward(
        dy.reshape((B,) + tuple(ctx[2][len(batch):])), saved)
    return tuple(_unbroadcast(g.reshape(batch + s[len(s) - 2:]), s)
                 for g, s in zip((dq, dk, dv), shapes))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None):
    """torch.nn.functional.scaled_dot_product_attention (dropout_p applies as given, as in
    torch: pass 0 for inference)."""
    return scaled_dot_product_attention_fwd(query, key, value, attn_mask, dropout_p,
                                            is_causal, scale)[0]


# ---------------------------------------------------------------- multi-head core
def multi_head_attention_fwd(q, k, v, num_heads, batch_first, mask=None, mask_index=None,
                             dropout_p=0.0, is_causal=False, scale=None):
    """Attention over heads interleaved in the features, no transposes -> (out, ctx).

    q (N, L, H*E) if batch_first else (L, N, H*E); k, v likewise with S and H*E / H*Ev.
    mask, mask_index: from ``attention_mask`` (additive, applied together with is_causal).
    Used by the multi-head layers, which validate their inputs.  Host arrays whose
    feature axis is unit-stride (the q, k, v column blocks of a fused projection) are
    passed as views: the cpu kernels read them in place, and then return the three
    gradients as column blocks of one array (see ``joined``)."""
    q = _feature_rows(q, "query")
    k = _feature_rows(k, "key")
    v = _feature_rows(v, "value")
    H = num_heads
    E = q.shape[2] // H
    if mask is not None:                   # where q is (cuda: host views copied by the op)
        mask = placed(q).to_backend(mask, q.dtype)
        mask_index = placed(q).to_backend(mask_index, np.int64)
    p = probability(dropout_p, "dropout_p")
    sc = _check_scale(scale, E)
    be = dispatch(q, k, v)
    seed, offset = _random.next_offset() if p > 0 else (0, 0)
    out, saved = be.scaled_dot_product_attention(q, k, v, H, not batch_first, mask, mask_index,
                                                 p, bool(is_causal), sc, seed, offset)
    return out, (be, saved, out.shape, out.dtype)


def _feature_rows(x, name):
    """float_array, except that a 3-D float NumPy view with unit-stride features stays
    a view (no copy)."""
    if (type(x) is np.ndarray and x.ndim == 3 and x.dtype in (np.float32, np.float64)
            and x.dtype.isnative and x.flags.aligned
            and (x.shape[2] <= 1 or x.strides[2] == x.itemsize)):
        return x
    return float_array(x, name)


def joined(*blocks):
    """The array whose adjacent column blocks (last axis) ``blocks`` are, in order,
    covering it exactly -- or None.  Lets the layers take the gradient of a fused
    projection as it comes out of the attention kernel instead of concatenating."""
    if not all(type(b) is np.ndarray for b in blocks):
        return None
    base = blocks[0].base
    if base is None or type(base) is not np.ndarray or not base.flags.c_contiguous:
        return None
    if base.ndim != blocks[0].ndim or base.shape[:-1] != blocks[0].shape[:-1]:
        return None
    isz = base.itemsize
    at = base.__array_interface__["data"][0]
    for b in blocks:
        if (b.base is not base or b.dtype != base.dtype or b.shape[:-1] != base.shape[:-1]
                or b.strides != base.strides or b.__array_interface__["data"][0] != at):
            return None
        at += b.shape[-1] * isz
    if at != base.__array_interface__["data"][0] + base.shape[-1] * isz:
        return None
    return base


def multi_head_attention_bwd(ctx, d_out):
    """-> (d_q, d_k, d_v) in the layouts of q, k, v."""
    be, saved, dy = grad_in(ctx, d_out)
    return be.scaled_dot_product_attention_backward(dy, saved)


# ---------------------------------------------------------------- variable-length attention
def _ranges(a, name, nb):
    a = np.asarray(a)
    if a.dtype.kind not in "iu" or a.shape != (nb,):
        raise ValueError(f"{name} must be an integer array of shape ({nb},), got {a.dtype} "
                         f"{a.shape}")
    if nb and a.min() < 0:
        raise ValueError(f"{name} must be >= 0, got {a.min()}")
    return np.ascontiguousarray(a, dtype=np.int64)


def varlen_attention(q, k, v, num_heads, q_start, q_len, k_start=None, k_len=None,
                     batch_first=True, is_causal=False, scale=None):
    """Multi-head attention over variable-length sequences without padding (inference;
    FlashAttention's varlen) -> out in q's layout.

    q (B, L, H*E), k (B, S, H*E), v (B, S, H*Ev) (or sequence-first); heads interleaved in
    the features, column views of a fused QKV projection read in place.  Sequence b
    attends its query rows q_start[b] .. q_start[b] + q_len[b] - 1 to key rows
    k_start[b] .. + k_len[b] - 1 (defaults: the query ranges).  Two layouts:

    * packed: B = 1 and the sequences one after another; q_start = cu_seqlens[:-1],
      q_len = lengths -- no padded row exists at all;
    * padded: one range per batch entry, e.g. q_start = 0, q_len = L, k_len = the real
      lengths of right-padded keys -- padded keys are never read.

    Query rows outside every range are 0.  Ranges must lie inside their sequence and
    query ranges of one batch entry must not overlap."""
    q = _feature_rows(q, "query")
    k = _feature_rows(k, "key")
    v = _feature_rows(v, "value")
    same_dtype(q, k, "key", "query")
    same_dtype(q, v, "value", "query")
    H = num_heads
    for a, n in ((q, "query"), (k, "key"), (v, "value")):
        if a.ndim != 3 or a.shape[2] % H:
            raise ValueError(f"{n} must be 3-D with features divisible by num_heads={H}, got "
                             f"shape {tuple(a.shape)}")
    ra = 1 if batch_first else 0
    B, L, S = q.shape[1 - ra], q.shape[ra], k.shape[ra]
    if k.shape[1 - ra] != B or v.shape[1 - ra] != B or v.shape[ra] != S or \
            k.shape[2] != q.shape[2]:
        raise ValueError(f"query {tuple(q.shape)}, key {tuple(k.shape)} and value "
                         f"{tuple(v.shape)} do not match")
    nb = np.asarray(q_start).shape[0] if np.ndim(q_start) == 1 else -1
    if B != 1 and nb != B:
        raise ValueError(f"q_start must have one entry per batch entry ({B}) unless the "
                         f"batch is packed (B = 1), got shape {np.shape(q_start)}")
    qs, ql = _ranges(q_start, "q_start", nb), _ranges(q_len, "q_len", nb)
    ks = qs if k_start is None else _ranges(k_start, "k_start", nb)
    kl = ql if k_len is None else _ranges(k_len, "k_len", nb)
    if nb and ((qs + ql).max() > L or (ks + kl).max() > S):
        raise ValueError(f"a query range ends after row {L} or a key range after row {S}")
    if B == 1 and nb > 1:
        o = np.argsort(qs, kind="stable")
        if np.any(qs[o][1:] < (qs + ql)[o][:-1]):
            raise ValueError("query ranges of a packed batch overlap")
    sc = _check_scale(scale, q.shape[2] // H)
    be = dispatch(q, k, v)
    return be.varlen_attention(q, k, v, qs, ql, ks, kl, H, not batch_first, bool(is_causal),
                               sc)


def padding_lengths(key_padding_mask):
    """Real lengths (N,) of a (N, S) key padding mask (bool True = padding, torch's MHA
    convention) when every row is right-padded (real tokens first), else None."""
    m = key_padding_mask
    if type(m) is not np.ndarray or m.dtype != np.bool_ or m.ndim != 2:
        return None
    lengths = m.shape[1] - m.sum(axis=1)
    if not np.array_equal(m, np.arange(m.shape[1]) >= lengths[:, None]):
        return None
    return lengths.astype(np.int64)
