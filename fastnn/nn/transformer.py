"""Transformer layers: GPT-2's pre-LN TransformerBlock and torch's TransformerEncoderLayer /
TransformerDecoderLayer (same submodule and parameter names, so torch state dicts load).

Backward walks the residual graph explicitly: every sublayer's backward consumes the
cache of its forward, residual branches add their gradients, and a self-attention
sublayer's three input gradients (query, key, value are the same array) are summed.
"""
import copy

from .. import functional as F
from .._validate import int_arg, positive_float
from .attention import CausalSelfAttention, MultiheadAttention
from .blocks import FeedForward, add_residual
from .dense import Linear
from .dropout import Dropout
from .module import Module, ModuleList
from .norm import LayerNorm

__all__ = ["TransformerBlock", "TransformerEncoderLayer", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerDecoder"]


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
        x = _sublayer(self.attn, CausalSelfAttention, self.ln_1(x), x)
        return _sublayer(self.mlp, FeedForward, self.ln_2(x), x)

    def backward(self, dy):
        dx = _norm_back(self.ln_2, self.mlp.backward(dy), dy)
        return _norm_back(self.ln_1, self.attn.backward(dx), dx)


def _sublayer(sub, own, h, x):
    """x + sub(h).  The block's own kinds take x as their ``residual`` (made inside their
    last product, F.linear_fwd(residual=)); a replaced or hooked sublayer's result is added
    to x (its forward hooks see its own output)."""
    if type(sub) is own and sub._fhooks is None:
        return sub(h, residual=x)
    return add_residual(sub(h), x)


def _norm_back(ln, d, plus):
    """ln.backward(d) + plus (the residual branch's gradient): made inside fastnn's
    LayerNorm backward (F.layer_norm_bwd(plus=)) when it has no backward hooks (they are
    handed d_input alone); else the two added."""
    if type(ln) is LayerNorm and not ln._backward_hooks:
        return ln._backward_plus(d, plus)
    return add_residual(ln.backward(d), plus)


_ACT = {"relu": (F.relu_fwd, F.relu_bwd),
        "gelu": (lambda h: F.gelu_fwd(h, "none"), F.gelu_bwd)}


def _activation(activation):
    if not isinstance(activation, str) or activation not in _ACT:
        raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
    return activation


class _TorchLayer(Module):
    """What torch's encoder and decoder layers share: the submodules in torch's order
    (self_attn[, multihead_attn], linear1, dropout, linear2, norm1..k, dropout1..k for k
    sublayers), the self-attention sublayer (dropout1) and the feed-forward block
    linear2(dropout(activation(linear1(x)))) with its output dropout (torch's _sa_block
    and _ff_block)."""

    def _build(self, sublayers, d_model, nhead, dim_feedforward, dropout, activation,
               layer_norm_eps, batch_first, norm_first, bias, dtype):
        d = int_arg(d_model, "d_model", 1)
        dff = int_arg(dim_feedforward, "dim_feedforward", 1)
        eps = positive_float(layer_norm_eps, "layer_norm_eps")
        self.activation = _activation(activation)
        self.batch_first = bool(batch_first)
        self.norm_first = bool(norm_first)
        self.self_attn = MultiheadAttention(d, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, dtype=dtype)
        if sublayers == 3:
            self.multihead_attn = MultiheadAttention(d, nhead, dropout=dropout, bias=bias,
                                                     batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d, dff, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dff, d, bias=bias, dtype=dtype)
        for k in range(1, sublayers + 1):
            setattr(self, f"norm{k}", LayerNorm(d, eps=eps, bias=bias, dtype=dtype))
        for k in range(1, sublayers + 1):
            setattr(self, f"dropout{k}", Dropout(dropout))

    def _residual(self, x, norm, sublayer):
        """x + sublayer(norm(x)) when norm_first, else norm(x + sublayer(x))."""
        if self.norm_first:
            return x + sublayer(norm(x))
        return norm(x + sublayer(x))

    def _residual_back(self, dy, norm, sublayer_back):
        """_residual's backward: the input gradient of the residual branch and the norm."""
        if self.norm_first:
            return dy + norm.backward(sublayer_back(dy))
        d = norm.backward(dy)
        return d + sublayer_back(d)

    def _sa(self, x, mask, kpm, is_causal):
        y = self.self_attn(x, x, x, key_padding_mask=kpm, attn_mask=mask,
                           is_causal=is_causal)[0]
        return self.dropout1(y)

    def _sa_back(self, dy):
        dq, dk, dv = self.self_attn.backward(self.dropout1.backward(dy))
        return dq + dk + dv

    def _ff(self, x, out_dropout):
        act_fwd = _ACT[self.activation][0]
        h, actx = act_fwd(self.linear1(x))
        self._keep(actx)     # the layer's own cache: its activation's (one per call)
        return out_dropout(self.linear2(self.dropout(h)))

    def _ff_back(self, dy, out_dropout):
        act_bwd = _ACT[self.activation][1]
        actx = self._take()
        dh = self.dropout.backward(self.linear2.backward(out_dropout.backward(dy)))
        return self.linear1.backward(act_bwd(actx, dh))


class TransformerEncoderLayer(_TorchLayer):
    """torch.nn.TransformerEncoderLayer: self_attn, linear1, dropout, linear2, norm1, norm2,
    dropout1, dropout2; norm_first both ways; activation "relu" or "gelu".
    forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False); backward -> d_src."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 dtype=None):
        super().__init__()
        self._build(2, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, dtype)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = self._residual(src, self.norm1,
                           lambda h: self._sa(h, src_mask, src_key_padding_mask, is_causal))
        x = self._residual(x, self.norm2, lambda h: self._ff(h, self.dropout2))
        return x

    def backward(self, dy):
        dx = self._residual_back(dy, self.norm2, lambda d: self._ff_back(d, self.dropout2))
        return self._residual_back(dx, self.norm1, self._sa_back)


class TransformerDecoderLayer(_TorchLayer):
    """torch.nn.TransformerDecoderLayer: self_attn, multihead_attn, linear1, dropout, linear2,
    norm1..3, dropout1..3; norm_first both ways; activation "relu" or "gelu".
    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False);
    backward(dy) -> (d_tgt, d_memory)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 dtype=None):
        super().__init__()
        self._build(3, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, dtype)

    def _mha(self, x, mem, mask, kpm, is_causal):
        y = self.multihead_attn(x, mem, mem, key_padding_mask=kpm, attn_mask=mask,
                                is_causal=is_causal)[0]
        return self.dropout2(y)

    def _mha_back(self, dy):
        dq, dk, dv = self.multihead_attn.backward(self.dropout2.backward(dy))
        return dq, dk + dv

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = self._residual(tgt, self.norm1,
                           lambda h: self._sa(h, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self._residual(x, self.norm2,
                           lambda h: self._mha(h, memory, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
        x = self._residual(x, self.norm3, lambda h: self._ff(h, self.dropout3))
        return x

    def backward(self, dy):
        dmem = []

        def mha_back(d):
            dq, dm = self._mha_back(d)
            dmem.append(dm)
            return dq

        dx2 = self._residual_back(dy, self.norm3, lambda d: self._ff_back(d, self.dropout3))
        dx1 = self._residual_back(dx2, self.norm2, mha_back)
        return self._residual_back(dx1, self.norm1, self._sa_back), dmem[0]


def _stack(layer, num_layers, norm, kind):
    if not isinstance(layer, kind):
        raise TypeError(f"{kind.__name__[:-5].lower()}_layer must be a {kind.__name__}, got "
                        f"{type(layer).__name__}")
    n = int_arg(num_layers, "num_layers", 1)
    if norm is not None and not isinstance(norm, Module):
        raise TypeError(f"norm must be a Module or None, got {type(norm).__name__}")
    return ModuleList([copy.deepcopy(layer) for _ in range(n)]), n


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: ``num_layers`` deep copies of ``encoder_layer`` (parameters
    ``layers.<i>.self_attn.in_proj_weight``, ...) and an optional final ``norm``.
    forward(src, mask=None, src_key_padding_mask=None, is_causal=None); backward -> d_src."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers, self.num_layers = _stack(encoder_layer, num_layers, norm,
                                              TransformerEncoderLayer)
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x

    def backward(self, dy):
        if self.norm is not None:
            dy = self.norm.backward(dy)
        for layer in reversed(list(self.layers)):
            dy = layer.backward(dy)
        return dy


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder: ``num_layers`` deep copies of ``decoder_layer`` and an
    optional final ``norm``.  forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=None,
    memory_is_causal=False); backward(dy) -> (d_tgt, d_memory), d_memory summed over the
    layers (every layer attends to the same memory)."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers, self.num_layers = _stack(decoder_layer, num_layers, norm,
                                              TransformerDecoderLayer)
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x

    def backward(self, dy):
        if self.norm is not None:
            dy = self.norm.backward(dy)
        d_memory = None
        for layer in reversed(list(self.layers)):
            dy, dm = layer.backward(dy)
            d_memory = dm if d_memory is None else d_memory + dm
        return dy, d_memory
