"""Transformer layers: GPT-2's pre-LN TransformerBlock and torch's TransformerEncoderLayer /
TransformerDecoderLayer (same submodule and parameter names, so torch state dicts load).

Backward walks the residual graph explicitly: every sublayer's backward consumes the
cache of its forward, residual branches add their gradients, and a self-attention
sublayer's three input gradients (query, key, value are the same array) are summed.
"""
from .. import functional as F
from .._validate import int_arg, positive_float
from .attention import CausalSelfAttention, MultiheadAttention
from .blocks import FeedForward
from .dense import Linear
from .dropout import Dropout
from .module import Module
from .norm import LayerNorm

__all__ = ["TransformerBlock", "TransformerEncoderLayer", "TransformerDecoderLayer"]


class TransformerBlock(Module):
    """GPT-2 block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).  (B, T, d_model)."""

    def __init__(self, d_model, n_heads, dropout=0.0, dtype=None):
        super().__init__()
        d = int_arg(d_model, "d_model", 1)
        self.ln_1 = LayerNorm(d, dtype=dtype)
        self.attn = CausalSelfAttention(d, n_heads, dropout, dtype=dtype)
        self.ln_2 = LayerNorm(d, dtype=dtype)
        self.mlp = FeedForward(d, dropout=dropout, dtype=dtype)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    def backward(self, dy):
        dx = dy + self.ln_2.backward(self.mlp.backward(dy))
        return dx + self.ln_1.backward(self.attn.backward(dx))


_ACT = {"relu": (F.relu_fwd, F.relu_bwd),
        "gelu": (lambda h: F.gelu_fwd(h, "none"), F.gelu_bwd)}


def _activation(activation):
    if not isinstance(activation, str) or activation not in _ACT:
        raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
    return activation


class _FFMixin:
    """linear2(dropout(activation(linear1(x)))), then dropout_k (torch's _ff_block)."""

    def _ff(self, x, out_dropout):
        act_fwd = _ACT[self.activation][0]
        h, actx = act_fwd(self.linear1(x))
        self._ff_ctx = actx
        return out_dropout(self.linear2(self.dropout(h)))

    def _ff_back(self, dy, out_dropout):
        act_bwd = _ACT[self.activation][1]
        actx = self._ff_ctx
        self._ff_ctx = None
        dh = self.dropout.backward(self.linear2.backward(out_dropout.backward(dy)))
        return self.linear1.backward(act_bwd(actx, dh))


class TransformerEncoderLayer(_FFMixin, Module):
    """torch.nn.TransformerEncoderLayer: self_attn, linear1, dropout, linear2, norm1, norm2,
    dropout1, dropout2; norm_first both ways; activation "relu" or "gelu".
    forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False); backward -> d_src."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 dtype=None):
        super().__init__()
        d = int_arg(d_model, "d_model", 1)
        dff = int_arg(dim_feedforward, "dim_feedforward", 1)
        eps = positive_float(layer_norm_eps, "layer_norm_eps")
        self.activation = _activation(activation)
        self.batch_first = bool(batch_first)
        self.norm_first = bool(norm_first)
        self.self_attn = MultiheadAttention(d, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d, dff, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dff, d, bias=bias, dtype=dtype)
        self.norm1 = LayerNorm(d, eps=eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d, eps=eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def _sa(self, x, mask, kpm, is_causal):
        y = self.self_attn(x, x, x, key_padding_mask=kpm, attn_mask=mask,
                           is_causal=is_causal)[0]
        return self.dropout1(y)

    def _sa_back(self, dy):
        dq, dk, dv = self.self_attn.backward(self.dropout1.backward(dy))
        return dq + dk + dv

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff(self.norm2(x), self.dropout2)
        else:
            x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff(x, self.dropout2))
        self._keep(True)
        return x

    def backward(self, dy):
        self._take()
        if self.norm_first:
            dx = dy + self.norm2.backward(self._ff_back(dy, self.dropout2))
            return dx + self.norm1.backward(self._sa_back(dx))
        d = self.norm2.backward(dy)
        dx = d + self._ff_back(d, self.dropout2)
        d = self.norm1.backward(dx)
        return d + self._sa_back(d)


class TransformerDecoderLayer(_FFMixin, Module):
    """torch.nn.TransformerDecoderLayer: self_attn, multihead_attn, linear1, dropout, linear2,
    norm1..3, dropout1..3; norm_first both ways; activation "relu" or "gelu".
    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False);
    backward(dy) -> (d_tgt, d_memory)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 dtype=None):
        super().__init__()
        d = int_arg(d_model, "d_model", 1)
        dff = int_arg(dim_feedforward, "dim_feedforward", 1)
        eps = positive_float(layer_norm_eps, "layer_norm_eps")
        self.activation = _activation(activation)
        self.batch_first = bool(batch_first)
        self.norm_first = bool(norm_first)
        self.self_attn = MultiheadAttention(d, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, dtype=dtype)
        self.multihead_attn = MultiheadAttention(d, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d, dff, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dff, d, bias=bias, dtype=dtype)
        self.norm1 = LayerNorm(d, eps=eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d, eps=eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d, eps=eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)

    def _sa(self, x, mask, kpm, is_causal):
        y = self.self_attn(x, x, x, key_padding_mask=kpm, attn_mask=mask,
                           is_causal=is_causal)[0]
        return self.dropout1(y)

    def _sa_back(self, dy):
        dq, dk, dv = self.self_attn.backward(self.dropout1.backward(dy))
        return dq + dk + dv

    def _mha(self, x, mem, mask, kpm, is_causal):
        y = self.multihead_attn(x, mem, mem, key_padding_mask=kpm, attn_mask=mask,
                                is_causal=is_causal)[0]
        return self.dropout2(y)

    def _mha_back(self, dy):
        dq, dk, dv = self.multihead_attn.backward(self.dropout2.backward(dy))
        return dq, dk + dv

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                              memory_is_causal)
            x = x + self._ff(self.norm3(x), self.dropout3)
        else:
            x = self.norm1(x + self._sa(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha(x, memory, memory_mask, memory_key_padding_mask,
                                         memory_is_causal))
            x = self.norm3(x + self._ff(x, self.dropout3))
        self._keep(True)
        return x

    def backward(self, dy):
        self._take()
        if self.norm_first:
            dx2 = dy + self.norm3.backward(self._ff_back(dy, self.dropout3))
            dq, dmem = self._mha_back(dx2)
            dx1 = dx2 + self.norm2.backward(dq)
            return dx1 + self.norm1.backward(self._sa_back(dx1)), dmem
        d = self.norm3.backward(dy)
        dx2 = d + self._ff_back(d, self.dropout3)
        d = self.norm2.backward(dx2)
        dq, dmem = self._mha_back(d)
        dx1 = d + dq
        d = self.norm1.backward(dx1)
        return d + self._sa_back(d), dmem
