"""BertEncoder: a BERT-style post-LN transformer encoder built from fastnn layers.

    embeddings: word_embeddings(ids) + position_embeddings(0..T-1) + token_type_embeddings
                -> LayerNorm(eps = config.layer_norm_eps) -> dropout
    encoder.layer.{i}: attention.self.{query,key,value} (Linear) -> multi-head attention with
                the key padding mask -> attention.output.dense -> dropout -> LayerNorm(+ x)
                -> intermediate.dense -> exact GELU -> output.dense -> dropout -> LayerNorm(+ h)
    pooler.dense (+ tanh on the first token; kept so checkpoints load; see ``cls_pool``)

Parameter names are those of the common BERT checkpoint layout (Hugging Face ``BertModel``):
``embeddings.word_embeddings.weight`` ... ``encoder.layer.{i}.output.LayerNorm.bias``,
``pooler.dense.weight``.  ``load_state_dict`` also accepts the ``bert.`` prefix, old
``gamma``/``beta`` LayerNorm names, drops the ``embeddings.position_ids`` buffer and the
pre-training heads (``cls.*``).

``attention_mask`` follows the tokenizers' convention: 1 (or True) = a real token,
0 = padding.  ``mean_pool`` averages the real tokens' hidden states.
"""
import numbers

import numpy as np

from .. import functional as F
from .._validate import int_arg
from ..nn import init
from ..nn.module import Module, ModuleList

__all__ = ["BertConfig", "BertEncoder", "mean_pool"]


class BertConfig:
    """BERT hyperparameters with Hugging Face's names (bert-base's values by default)."""

    def __init__(self, vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512,
                 type_vocab_size=2, layer_norm_eps=1e-12, hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, initializer_range=0.02, pad_token_id=0,
                 add_pooling_layer=True):
        self.vocab_size = int_arg(vocab_size, "vocab_size", 1)
        self.hidden_size = int_arg(hidden_size, "hidden_size", 1)
        self.num_hidden_layers = int_arg(num_hidden_layers, "num_hidden_layers", 0)
        self.num_attention_heads = int_arg(num_attention_heads, "num_attention_heads", 1)
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size ({hidden_size}) must be divisible by "
                             f"num_attention_heads ({num_attention_heads})")
        self.intermediate_size = int_arg(intermediate_size, "intermediate_size", 1)
        self.max_position_embeddings = int_arg(max_position_embeddings, "max_position_embeddings", 1)
        self.type_vocab_size = int_arg(type_vocab_size, "type_vocab_size", 1)
        for v, n in ((hidden_dropout_prob, "hidden_dropout_prob"),
                     (attention_probs_dropout_prob, "attention_probs_dropout_prob")):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= v < 1:
                raise ValueError(f"{n} must be in [0, 1), got {v!r}")
        if isinstance(layer_norm_eps, bool) or not isinstance(layer_norm_eps, numbers.Real) \
                or not layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {layer_norm_eps!r}")
        self.layer_norm_eps = float(layer_norm_eps)
        self.hidden_dropout_prob = float(hidden_dropout_prob)
        self.attention_probs_dropout_prob = float(attention_probs_dropout_prob)
        self.initializer_range = float(initializer_range)
        self.pad_token_id = pad_token_id
        self.add_pooling_layer = bool(add_pooling_layer)

    @classmethod
    def from_dict(cls, d):
        """From a config.json's dict (unknown keys such as ``architectures`` are ignored)."""
        import inspect
        names = set(inspect.signature(cls.__init__).parameters) - {"self"}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self):
        return dict(self.__dict__)


class _Holder(Module):
    """A named container (BERT's nesting: attention.self, attention.output, ...)."""

    def __init__(this, /, **children):   # positional-only: BERT has a child named "self"
        super().__init__()
        for k, v in children.items():
            setattr(this, k, v)


class BertEmbeddings(Module):
    def __init__(self, cfg):
        super().__init__()
        from .. import nn
        # as BERT: the pad token's row gets no gradient (and starts at zero)
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                            padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        T = input_ids.shape[1]
        x = self.word_embeddings(input_ids)
        x = x + self.position_embeddings(np.arange(T, dtype=np.int64))
        x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))

    def backward(self, dy):
        d = self.LayerNorm.backward(self.dropout.backward(dy))
        self.token_type_embeddings.backward(d)
        self.position_embeddings.backward(d.sum(axis=0))
        self.word_embeddings.backward(d)


class BertLayer(Module):
    """Post-LN encoder layer with BERT's parameter names."""

    def __init__(self, cfg):
        super().__init__()
        from .. import nn
        D, I = cfg.hidden_size, cfg.intermediate_size
        self.num_heads = cfg.num_attention_heads
        self.attn_dropout = cfg.attention_probs_dropout_prob
        self.attention = _Holder(
            self=_Holder(query=nn.Linear(D, D), key=nn.Linear(D, D), value=nn.Linear(D, D)),
            output=_Holder(dense=nn.Linear(D, D),
                           LayerNorm=nn.LayerNorm(D, eps=cfg.layer_norm_eps),
                           dropout=nn.Dropout(cfg.hidden_dropout_prob)))
        self.intermediate = _Holder(dense=nn.Linear(D, I), intermediate_act_fn=nn.GELU())
        self.output = _Holder(dense=nn.Linear(I, D), LayerNorm=nn.LayerNorm(D, eps=cfg.layer_norm_eps),
                              dropout=nn.Dropout(cfg.hidden_dropout_prob))

    def forward(self, x, mask=None, mask_index=None):
        sa, so = self.attention.self, self.attention.output
        q, k, v = sa.query(x), sa.key(x), sa.value(x)
        p = self.attn_dropout if self.training else 0.0
        ctx, actx = F.multi_head_attention_fwd(q, k, v, self.num_heads, True, mask, mask_index,
                                               dropout_p=p)
        self._keep(actx)
        h = so.LayerNorm(so.dropout(so.dense(ctx)) + x)
        inter = self.intermediate.intermediate_act_fn(self.intermediate.dense(h))
        out = self.output
        return out.LayerNorm(out.dropout(out.dense(inter)) + h)

    def backward(self, dy):
        actx = self._take()
        sa, so, out = self.attention.self, self.attention.output, self.output
        d_sum2 = out.LayerNorm.backward(dy)
        d_inter = out.dense.backward(out.dropout.backward(d_sum2))
        d_h = self.intermediate.dense.backward(self.intermediate.intermediate_act_fn.backward(d_inter))
        d_h = d_h + d_sum2
        d_sum1 = so.LayerNorm.backward(d_h)
        d_ctx = so.dense.backward(so.dropout.backward(d_sum1))
        dq, dk, dv = F.multi_head_attention_bwd(actx, d_ctx)
        dx = sa.query.backward(dq)
        dx += sa.key.backward(dk)
        dx += sa.value.backward(dv)
        dx += d_sum1
        return dx


class BertEncoder(Module):
    """BertEncoder(config) or BertEncoder(vocab_size=..., hidden_size=..., ...).

    forward(input_ids (N, T), attention_mask=None (N, T) 1 = token / 0 = padding,
    token_type_ids=None) -> last hidden state (N, T, hidden_size).
    backward(d_hidden) accumulates every parameter's gradient (returns None)."""

    def __init__(self, config=None, dtype=None, **kwargs):
        super().__init__()
        from .. import nn
        if config is None:
            config = BertConfig(**kwargs)
        elif kwargs:
            raise TypeError("give either a BertConfig or keyword hyperparameters, not both")
        self.config = cfg = config
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = _Holder(layer=ModuleList([BertLayer(cfg) for _ in range(cfg.num_hidden_layers)]))
        if cfg.add_pooling_layer:
            self.pooler = _Holder(dense=nn.Linear(cfg.hidden_size, cfg.hidden_size))
        else:
            self.pooler = None
        self._init_weights()
        if dtype is not None and np.dtype(dtype) != np.float32:
            self.to(np.dtype(dtype))

    def _init_weights(self):
        """BERT's init: N(0, initializer_range) weights and embeddings, zero biases,
        LayerNorm 1/0."""
        std = self.config.initializer_range
        for name, p in self.named_parameters():
            if "LayerNorm" in name:
                p.data[...] = 1 if name.endswith("weight") else 0
            elif name.endswith(".bias"):
                p.data[...] = 0
            else:
                p.data = init.normal(p.shape, std, 0.0, p.dtype)
        pad = self.embeddings.word_embeddings.padding_idx
        if pad is not None:
            self.embeddings.word_embeddings.weight.data[pad] = 0

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        cfg = self.config
        ids = np.asarray(input_ids)
        if ids.dtype.kind not in "iu" or ids.ndim != 2:
            raise ValueError(f"input_ids must be a (batch, seq) integer array, got {ids.dtype} "
                             f"{ids.shape}")
        N, T = ids.shape
        if T > cfg.max_position_embeddings:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings "
                             f"{cfg.max_position_embeddings}")
        if token_type_ids is None:
            token_type_ids = np.zeros((N, T), np.int64)
        else:
            token_type_ids = np.asarray(token_type_ids)
            if token_type_ids.shape != (N, T) or token_type_ids.dtype.kind not in "iu":
                raise ValueError(f"token_type_ids must be an integer array of shape {(N, T)}, "
                                 f"got {token_type_ids.dtype} {token_type_ids.shape}")
        x = self.embeddings(ids, token_type_ids)
        mask = index = None
        if attention_mask is not None:
            am = np.asarray(attention_mask)
            if am.shape != (N, T):
                raise ValueError(f"attention_mask must have shape {(N, T)} (1 = token, "
                                 f"0 = padding), got {am.shape}")
            padding = am == 0
            if padding.any():
                mask, index = F.attention_mask(None, padding, N, cfg.num_attention_heads, T, T,
                                               x.dtype)
        for layer in self.encoder.layer:
            x = layer(x, mask, index)
        return x

    def backward(self, d_hidden):
        for layer in reversed(list(self.encoder.layer)):
            d_hidden = layer.backward(d_hidden)
        self.embeddings.backward(d_hidden)
        return None

    def cls_pool(self, hidden):
        """BERT's pooler: tanh(dense(hidden[:, 0])) (inference)."""
        if self.pooler is None:
            raise RuntimeError("this BertEncoder was built with add_pooling_layer=False")
        return np.tanh(F.linear(np.ascontiguousarray(hidden[:, 0]), self.pooler.dense.weight.data,
                                self.pooler.dense.bias.data))

    # ------------------------------------------------------------------ checkpoints
    def load_state_dict(self, state_dict, strict=True):
        """Module.load_state_dict, accepting the common BERT checkpoint layouts."""
        return super().load_state_dict(_bert_keys(state_dict), strict)

    def num_parameters(self):
        return sum(int(p.size) for p in self.parameters())


def mean_pool(hidden, attention_mask=None):
    """Mean of the hidden states over the real tokens (attention_mask 1) -> (N, D);
    all tokens when no mask.  A row with no real token gives zeros."""
    h = np.asarray(hidden)
    if attention_mask is None:
        return h.mean(axis=1)
    m = np.asarray(attention_mask).astype(h.dtype)
    if m.shape != h.shape[:2]:
        raise ValueError(f"attention_mask must have shape {h.shape[:2]}, got {m.shape}")
    s = np.einsum("ntd,nt->nd", h, m)
    return (s / np.maximum(m.sum(axis=1, keepdims=True), 1)).astype(h.dtype)


def _bert_keys(state_dict):
    if not hasattr(state_dict, "items"):
        raise TypeError(f"state_dict must be a mapping of names to arrays, got "
                        f"{type(state_dict).__name__}")
    out = {}
    for k, v in state_dict.items():
        if not isinstance(k, str):
            out[k] = v
            continue
        if k.startswith("bert."):
            k = k[len("bert."):]
        if k.startswith("cls.") or k == "embeddings.position_ids":
            continue
        if k.endswith("LayerNorm.gamma"):
            k = k[:-len("gamma")] + "weight"
        elif k.endswith("LayerNorm.beta"):
            k = k[:-len("beta")] + "bias"
        out[k] = v
    return out
