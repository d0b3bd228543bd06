"""Attention modules: MultiheadAttention (torch's) and CausalSelfAttention (GPT-2's).

Both run the attention core of fastnn.functional.attention on the projections as they
come out of the GEMMs -- heads interleaved in the features, batch- or sequence-first --
so no head transposes are made.

Fully masked query rows (every key masked) give zero attention output, as torch's
scaled_dot_product_attention path (need_weights=False) does.
"""
import math

import numpy as np

from .. import functional as F
from .._backend import placed
from .._validate import float_array, int_arg, probability, same_dtype
from ..functional.attention import joined, padding_lengths
from . import init
from .dense import Linear
from .dropout import Dropout
from .blocks import Conv1D, _Fused, _identity_dropout, add_residual
from .module import Module, Parameter, grad_flags

__all__ = ["MultiheadAttention", "CausalSelfAttention"]


def _xavier(shape, dt):
    fan_in, fan_out = init.fan_in_out(shape)
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    return init.uniform(shape, -bound, bound, dt)


def _split3(qkv, E):
    """q, k, v of a fused (.., 3E) projection: column views on the host (the cpu kernel
    reads them in place, and its gradients come back as blocks of one array), copies on
    the device."""
    return placed(qkv).split_columns(qkv, (E, E, E))


def _join3(dq, dk, dv):
    """The (.., 3E) gradient of a fused projection from its three blocks (no copy when
    they already are the blocks of one array)."""
    j = joined(dq, dk, dv)
    return j if j is not None else placed(dq, dk, dv).concat_columns((dq, dk, dv))


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention.  Parameters: ``in_proj_weight`` (3E, E) (or
    ``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim) when
    kdim/vdim differ from E), ``in_proj_bias`` (3E), ``out_proj.weight``, ``out_proj.bias``;
    torch's init (xavier-uniform projections, zero biases).

    forward(query, key, value, key_padding_mask=None, attn_mask=None, need_weights=False,
    is_causal=False) -> (output, weights or None).  Inputs (L, N, E) or, batch_first,
    (N, L, E); unbatched (L, E) also works.  Masks follow torch's MHA convention: bool
    True = NOT allowed / padding, or additive float.  attn_mask (L, S) or (N*num_heads, L, S),
    key_padding_mask (N, S).  is_causal applies the causal mask itself (torch only treats it
    as a hint about attn_mask); a given attn_mask is applied as well.  need_weights=True
    also returns the (undropped) attention weights, averaged over heads unless
    average_attn_weights=False; they are computed separately on the host.

    backward(d_output) -> (d_query, d_key, d_value): three gradients even when the same
    array was passed three times (self-attention) -- the caller sums them.  When the very
    same array object is passed as query, key and value, the three projections run as one
    fused GEMM (as torch does) and backward returns (d_x, 0, 0): the sum is the gradient of
    that array, which is all a caller can use.
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None,
                 batch_first=False, dtype=None):
        super().__init__()
        self.embed_dim = E = int_arg(embed_dim, "embed_dim", 1)
        self.num_heads = int_arg(num_heads, "num_heads", 1)
        if E % self.num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got embed_dim={E} "
                             f"and num_heads={self.num_heads}")
        self.head_dim = E // self.num_heads
        self.kdim = E if kdim is None else int_arg(kdim, "kdim", 1)
        self.vdim = E if vdim is None else int_arg(vdim, "vdim", 1)
        self._qkv_same_embed_dim = self.kdim == E and self.vdim == E
        self.dropout = probability(dropout, "dropout")
        self.batch_first = bool(batch_first)
        dt = dtype or "float32"
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(_xavier((3 * E, E), dt))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = Parameter(_xavier((E, E), dt))
            self.k_proj_weight = Parameter(_xavier((E, self.kdim), dt))
            self.v_proj_weight = Parameter(_xavier((E, self.vdim), dt))
        if bias:
            self.in_proj_bias = Parameter(init.zeros((3 * E,), dt))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(E, E, bias=bias, dtype=dt)
        if bias:
            self.out_proj.bias.data[...] = 0

    def _reset_parameters(self):
        """torch's MultiheadAttention._reset_parameters, in place: the input projections
        xavier_uniform_, in_proj_bias and out_proj.bias 0 (out_proj.weight as it is)."""
        for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
            p = getattr(self, name)
            if p is not None:
                init.xavier_uniform_(p)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    # ------------------------------------------------------------ helpers
    def _weights(self):
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight.data
            ws = (w[:E], w[E:2 * E], w[2 * E:])
        else:
            ws = (self.q_proj_weight.data, self.k_proj_weight.data, self.v_proj_weight.data)
        b = self.in_proj_bias
        bs = (None, None, None) if b is None else (b.data[:E], b.data[E:2 * E], b.data[2 * E:])
        return ws, bs

    def _check(self, query, key, value):
        q = float_array(query, "query")
        k = float_array(key, "key")
        v = float_array(value, "value")
        same_dtype(q, k, "key", "query")
        same_dtype(q, v, "value", "query")
        if q.ndim not in (2, 3):
            raise ValueError(f"query must be 2-D (L, E) or 3-D ({'N, L' if self.batch_first else 'L, N'}"
                             f", E), got shape {tuple(q.shape)}")
        for a, n, d in ((q, "query", self.embed_dim), (k, "key", self.kdim),
                        (v, "value", self.vdim)):
            if a.ndim != q.ndim:
                raise ValueError(f"{n} must have as many dimensions as query ({q.ndim}), "
                                 f"got shape {tuple(a.shape)}")
            if a.shape[-1] != d:
                what = "embed_dim" if n == "query" else ("kdim" if n == "key" else "vdim")
                raise ValueError(f"{n}'s last dimension must be {what} = {d}, got shape "
                                 f"{tuple(a.shape)}")
        unbatched = q.ndim == 2
        if unbatched:
            q, k, v = q[:, None], k[:, None], v[:, None]   # (T, 1, E): sequence-first
            seq_first = True
        else:
            seq_first = not self.batch_first
        if seq_first:
            L, N = q.shape[:2]
            S, Nk = k.shape[:2]
            Sv, Nv = v.shape[:2]
        else:
            N, L = q.shape[:2]
            Nk, S = k.shape[:2]
            Nv, Sv = v.shape[:2]
        if Nk != N or Nv != N:
            raise ValueError(f"query, key and value must have the same batch size, got "
                             f"{N}, {Nk}, {Nv}")
        if Sv != S:
            raise ValueError(f"key and value must have the same sequence length, got "
                             f"key {tuple(key.shape)} and value {tuple(value.shape)}")
        return q, k, v, unbatched, seq_first, N, L, S

    # ------------------------------------------------------------ forward / backward
    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None,
                need_weights=False, is_causal=False, average_attn_weights=True):
        q, k, v, unbatched, seq_first, N, L, S = self._check(query, key, value)
        H = self.num_heads
        if unbatched:
            if key_padding_mask is not None:
                kp = np.asarray(key_padding_mask)
                if kp.shape != (S,):
                    raise ValueError(f"key_padding_mask must have shape (S,) = ({S},) for "
                                     f"unbatched input, got {kp.shape}")
                key_padding_mask = kp[None]
        mask, index = F.attention_mask(attn_mask, key_padding_mask, N, H, L, S, q.dtype)
        E = self.embed_dim
        fused = self._qkv_same_embed_dim and query is key and key is value
        if fused:
            # self-attention: one (.., 3E) projection GEMM instead of three thin ones
            b = self.in_proj_bias
            qkv, cq = F.linear_fwd(q, self.in_proj_weight.data, None if b is None else b.data)
            qp, kp_, vp = _split3(qkv, E)
            ck = cv = None
        else:
            (wq, wk, wv), (bq, bk, bv) = self._weights()
            qp, cq = F.linear_fwd(q, wq, bq)
            kp_, ck = F.linear_fwd(k, wk, bk)
            vp, cv = F.linear_fwd(v, wv, bv)
        p = self.dropout if self.training else 0.0
        lengths = None
        if (not self.training and key_padding_mask is not None and attn_mask is None
                and not is_causal and not need_weights):
            lengths = padding_lengths(key_padding_mask)
        if lengths is not None:
            # inference with right-padded keys: variable-length attention never reads a
            # padded key (the same result as the masked kernel, without the masked work)
            z = np.zeros(N, np.int64)
            o = F.varlen_attention(qp, kp_, vp, H, z, np.full(N, L, np.int64), z, lengths,
                                   batch_first=not seq_first)
            ca = None
        else:
            o, ca = F.multi_head_attention_fwd(qp, kp_, vp, H, not seq_first, mask, index, p,
                                               bool(is_causal))
        y = self.out_proj(o)
        weights = None
        if need_weights:
            weights = self._attn_weights(qp, kp_, seq_first, mask, index, is_causal,
                                         average_attn_weights)
            if unbatched:
                weights = weights[0]
        if unbatched:
            y = y[:, 0]
        self._keep((cq, ck, cv, ca, unbatched))
        return y, weights

    def _attn_weights(self, qp, kp, seq_first, mask, index, is_causal, average):
        """softmax(q k^T / sqrt(d) + mask) per head, (N, H, L, S) (or its head mean)."""
        H, D = self.num_heads, self.head_dim
        if seq_first:
            qp, kp = qp.transpose(1, 0, 2), kp.transpose(1, 0, 2)
        N, L, _ = qp.shape
        S = kp.shape[1]
        Q = np.asarray(qp, np.float64).reshape(N, L, H, D).transpose(0, 2, 1, 3)
        K = np.asarray(kp, np.float64).reshape(N, S, H, D).transpose(0, 2, 1, 3)
        s = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(D)
        if mask is not None:
            s = s + mask[index].reshape(N, H, mask.shape[1], mask.shape[2])
        if is_causal:
            s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
        with np.errstate(invalid="ignore"):
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            w = e / e.sum(axis=-1, keepdims=True)       # NaN for a fully masked row (torch)
        w = w.mean(axis=1) if average else w
        return w.astype(qp.dtype)

    def backward(self, d_output):
        cq, ck, cv, ca, unbatched = self._take()
        d = float_array(d_output, "d_output")
        if unbatched:
            d = d[:, None]
        do = self.out_proj.backward(d)
        dqp, dkp, dvp = F.multi_head_attention_bwd(ca, do)
        if ck is None:                       # fused self-attention projection
            dx, dw, db = F.linear_bwd(cq, _join3(dqp, dkp, dvp),
                                      **grad_flags(self.in_proj_weight, self.in_proj_bias))
            self.in_proj_weight.accumulate_grad(dw)
            if self.in_proj_bias is not None:
                self.in_proj_bias.accumulate_grad(db)
            z = np.zeros_like(dx)
            if unbatched:
                dx, z = dx[:, 0], z[:, 0]
            return dx, z, z
        if self._qkv_same_embed_dim:
            ws = (self.in_proj_weight,) * 3
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = self.in_proj_bias
        dq, dwq, dbq = F.linear_bwd(cq, dqp, **grad_flags(ws[0], b))
        dk, dwk, dbk = F.linear_bwd(ck, dkp, **grad_flags(ws[1], b))
        dv, dwv, dbv = F.linear_bwd(cv, dvp, **grad_flags(ws[2], b))
        if not self._qkv_same_embed_dim:
            for w, dw in zip(ws, (dwq, dwk, dwv)):
                w.accumulate_grad(dw)
        elif dwq is not None:
            self.in_proj_weight.accumulate_grad(np.concatenate((dwq, dwk, dwv)))
        if dbq is not None:
            b.accumulate_grad(np.concatenate((dbq, dbk, dbv)))
        if unbatched:
            dq, dk, dv = dq[:, 0], dk[:, 0], dv[:, 0]
        return dq, dk, dv

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, batch_first={self.batch_first}")


class CausalSelfAttention(Module):
    """GPT-2's attention: c_attn = Conv1D(3d, d) makes q, k, v; causal multi-head
    attention (dropout ``dropout`` on the weights, inside the kernel); c_proj = Conv1D(d, d)
    then ``resid_dropout``.  Input and output (B, T, d_model); backward(dy) -> dx."""

    def __init__(self, d_model, n_heads, dropout=0.0, dtype=None):
        super().__init__()
        self.d_model = d = int_arg(d_model, "d_model", 1)
        self.n_heads = int_arg(n_heads, "n_heads", 1)
        if d % self.n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={d} and "
                             f"n_heads={self.n_heads}")
        self.dropout = probability(dropout, "dropout")
        self.c_attn = Conv1D(3 * d, d, dtype)
        self.c_proj = Conv1D(d, d, dtype)
        self.resid_dropout = Dropout(self.dropout)

    def forward(self, x, *, residual=None):
        """resid_dropout(c_proj(attention(c_attn(x)))), plus ``residual`` when given (a
        transformer block's residual connection: made inside c_proj's product when
        resid_dropout passes its input through and c_proj is a plain Conv1D)."""
        x = float_array(x, "input")
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"input must have shape (B, T, d_model={self.d_model}), got "
                             f"{tuple(x.shape)}")
        d = self.d_model
        qkv = self.c_attn(x)
        q, k, v = _split3(qkv, d)
        p = self.dropout if self.training else 0.0
        o, ca = F.multi_head_attention_fwd(q, k, v, self.n_heads, True, None, None, p, True)
        if (residual is not None and self.c_proj._plain()
                and _identity_dropout(self.resid_dropout)):
            y, cp = F.linear_fwd(o, self.c_proj._linear_weight(), self.c_proj.bias.data,
                                 residual=residual)
            self._keep(_Fused((ca, cp), False))
            return y
        self._keep(ca)
        return add_residual(self.resid_dropout(self.c_proj(o)), residual)

    def backward(self, dy):
        ca = self._take()
        if type(ca) is _Fused:
            ca, cp = ca.ctxs
            do, dw, db = F.linear_bwd(cp, dy, **self.c_proj._grad_flags())
            self.c_proj._accumulate(dw, db)
        else:
            do = self.c_proj.backward(self.resid_dropout.backward(dy))
        dq, dk, dv = F.multi_head_attention_bwd(ca, do)
        return self.c_attn.backward(_join3(dq, dk, dv))

    def extra_repr(self):
        return f"d_model={self.d_model}, n_heads={self.n_heads}, dropout={self.dropout}"
