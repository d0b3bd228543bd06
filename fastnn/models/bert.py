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
import math
from operator import attrgetter, is_ as _is

import numpy as np

from .. import functional as F
from .._validate import int_arg, is_real
from ..nn import init
from ..nn.module import Module, ModuleList, subtree_hooked

__all__ = ["BertConfig", "BertEncoder", "mean_pool"]

# config.json's hidden_act -> (fastnn.nn module name, its argument): transformers' ACT2FN
# names that are the exact GELU, its tanh approximation, or ReLU
_ACTIVATIONS = {"gelu": ("GELU", "none"), "gelu_new": ("GELU", "tanh"),
                "gelu_pytorch_tanh": ("GELU", "tanh"), "gelu_fast": ("GELU", "tanh"),
                "relu": ("ReLU", None)}


_data = attrgetter("data")

# hidden_act -> the activation name of the fused inference GEMM (linear_act_infer)
_ACT_KERNEL = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "relu": "relu"}


def _nn():
    from .. import nn
    return nn


def _act_module(name):
    nn = _nn()
    cls, arg = _ACTIVATIONS[name]
    return nn.GELU(approximate=arg) if cls == "GELU" else nn.ReLU()


class BertConfig:
    """BERT hyperparameters with Hugging Face's names (bert-base's values by default)."""

    def __init__(self, vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512,
                 type_vocab_size=2, layer_norm_eps=1e-12, hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, initializer_range=0.02, pad_token_id=0,
                 add_pooling_layer=True, hidden_act="gelu"):
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
            if not is_real(v) or not 0 <= v < 1:
                raise ValueError(f"{n} must be in [0, 1), got {v!r}")
        if not is_real(layer_norm_eps) \
                or not layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {layer_norm_eps!r}")
        self.layer_norm_eps = float(layer_norm_eps)
        self.hidden_dropout_prob = float(hidden_dropout_prob)
        self.attention_probs_dropout_prob = float(attention_probs_dropout_prob)
        self.initializer_range = float(initializer_range)
        self.pad_token_id = pad_token_id
        self.add_pooling_layer = bool(add_pooling_layer)
        if hidden_act not in _ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {', '.join(map(repr, _ACTIVATIONS))}, "
                             f"got {hidden_act!r}")
        self.hidden_act = hidden_act

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

    def _add_forward_hook(this, which, hook, prepend, with_kwargs):
        # never called (BertLayer calls the modules inside): a hook here would never run
        raise TypeError(f"this {type(this).__name__} only groups the checkpoint's names "
                        f"({', '.join(this._modules)}) and is never called itself: hook "
                        f"the modules inside it or the BertLayer")


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
        self.hidden_act = cfg.hidden_act
        self.attn_dropout = cfg.attention_probs_dropout_prob
        self.attention = _Holder(
            self=_Holder(query=nn.Linear(D, D), key=nn.Linear(D, D), value=nn.Linear(D, D)),
            output=_Holder(dense=nn.Linear(D, D),
                           LayerNorm=nn.LayerNorm(D, eps=cfg.layer_norm_eps),
                           dropout=nn.Dropout(cfg.hidden_dropout_prob)))
        self.intermediate = _Holder(dense=nn.Linear(D, I),
                                    intermediate_act_fn=_act_module(cfg.hidden_act))
        self.output = _Holder(dense=nn.Linear(I, D), LayerNorm=nn.LayerNorm(D, eps=cfg.layer_norm_eps),
                              dropout=nn.Dropout(cfg.hidden_dropout_prob))

    def _infer_weights(self, be):
        """The inference GEMMs' weights, packed once (``be.pack_linear_weight``: the column
        panels the small-M kernel reads), the query, key and value ones fused into one
        (D, 3D) product.  Built at the first eval-mode forward and kept until a parameter's
        ``.data`` is replaced (load_state_dict, .to), a training-mode forward (optimizer
        steps change the weights in place) or ``train()`` / ``eval()`` is called.  So:
        after writing into a parameter's array in place while in eval mode, call
        ``model.eval()`` again (the packs cannot see in-place writes)."""
        c = self.__dict__.get("_infer")
        # the check runs at every layer of every call (a sentence is ~4 ms): the cache keeps
        # the Parameter objects and compares their current .data by identity in C loops
        if c is not None and c[0] is be and all(map(_is, map(_data, c[3]), c[1])):
            return c[2]
        sa, so, inter, out = (self.attention.self, self.attention.output, self.intermediate,
                              self.output)
        lins = (sa.query, sa.key, sa.value, so.dense, inter.dense, out.dense)
        params = tuple(p for m in lins for p in (m.weight, m.bias))
        srcs = tuple(p.data for p in params)
        pk = lambda w: (be.pack_linear_weight(w, False), w.shape[0])  # noqa: E731
        w = (pk(np.concatenate([m.weight.data for m in lins[:3]])),
             np.concatenate([m.bias.data for m in lins[:3]]),
             pk(so.dense.weight.data), so.dense.bias.data, pk(inter.dense.weight.data),
             inter.dense.bias.data, pk(out.dense.weight.data), out.dense.bias.data)
        object.__setattr__(self, "_infer", (be, srcs, w, params))
        return w

    def forward_packed(self, be, x, starts, lengths):
        """Inference on a packed batch: x (total_tokens, D), the real tokens of every
        sequence one after another (sequence b: rows starts[b] .. + lengths[b]).  Dense
        layers run on the packed matrix with packed weights (bias and GELU fused into the
        GEMM's output tiles), attention per sequence (varlen, reading q, k, v in place
        from the fused projection), the residual adds fused into the layer norms."""
        so, out = self.attention.output, self.output
        (wqkv, n3), bqkv, (wo, no), bo, (wi, ni), bi, (wo2, no2), bo2 = self._infer_weights(be)
        D = x.shape[1]
        lin = be.packed_linear_infer
        qkv = lin(x, wqkv, n3, bqkv, "none")[None]
        ctx = be.varlen_attention(qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:], starts,
                                  lengths, starts, lengths, self.num_heads, False, False,
                                  1.0 / math.sqrt(D // self.num_heads))[0]
        ln = so.LayerNorm
        h = be.add_layer_norm_infer(lin(ctx, wo, no, bo, "none"), x,
                                    ln.weight.data, ln.bias.data, D, ln.eps)
        a = lin(h, wi, ni, bi, _ACT_KERNEL[self.hidden_act])
        ln = out.LayerNorm
        return be.add_layer_norm_infer(lin(a, wo2, no2, bo2, "none"), h,
                                       ln.weight.data, ln.bias.data, D, ln.eps)

    def forward(self, x, mask=None, mask_index=None):
        if self.training:
            self.__dict__.pop("_infer", None)
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
    backward(d_hidden) accumulates every parameter's gradient (returns None).

    In eval mode forward takes the padding-free inference path, whose GEMMs read weights
    packed once (at the first eval-mode forward) into the kernel's panel layout.  The packs
    follow ``load_state_dict``, ``.to``, training and every ``train()`` / ``eval()`` call,
    but not an in-place write into a parameter's array made in eval mode: call
    ``model.eval()`` again after one."""

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
        am = None
        if attention_mask is not None:
            am = np.asarray(attention_mask)
            if am.shape != (N, T):
                raise ValueError(f"attention_mask must have shape {(N, T)} (1 = token, "
                                 f"0 = padding), got {am.shape}")
        # the padding-free path runs the layers' work itself: with forward hooks on a
        # submodule, the modules run (the hooks see each call, as in torch)
        hooked = subtree_hooked(self)
        be = None if hooked else self._inference_backend()
        if be is not None:
            packed, flat, starts, lengths = self._packed(be, ids, am, token_type_ids)
            if flat is None:
                return packed.reshape(N, T, -1)
            out = np.zeros((N * T, packed.shape[1]), packed.dtype)
            out[flat] = packed
            return out.reshape(N, T, -1)
        x = self.embeddings(ids, token_type_ids)
        mask = index = None
        if am is not None:
            padding = am == 0
            if padding.any():
                mask, index = F.attention_mask(None, padding, N, cfg.num_attention_heads, T, T,
                                               x.dtype)
        for layer in self.encoder.layer:
            x = layer(x, mask, index)
        if hooked and mask is not None and self._inference_backend() is not None:
            # eval mode's padded rows are zeros, as on the packed path (a new array: a hook
            # may hold the last layer's output)
            x = np.where(padding[:, :, None], x.dtype.type(0), x)
        return x

    # ------------------------------------------------------------------ inference fast path
    def _inference_backend(self):
        """The host backend when forward may take the padding-free inference path (eval
        mode, parameters on the host), else None."""
        if self.training:
            return None
        from .._backend import host_backend
        be = host_backend()
        if be is None or type(self.embeddings.word_embeddings.weight.data) is not np.ndarray:
            return None
        return be

    def _packed(self, be, ids, attention_mask, token_type_ids):
        """-> (hidden (total_tokens, D), flat, starts, lengths): the real tokens only
        (attention_mask != 0), sequence after sequence; ``flat`` their indices in the
        flattened (N*T) batch (None when every token is real)."""
        N, T = ids.shape
        if attention_mask is None or attention_mask.all():
            flat = None
            lengths = np.full(N, T, np.int64)
            ids_p = ids.reshape(-1)
            pos = np.arange(T) if N == 1 else np.tile(np.arange(T), N)
            tt = token_type_ids.reshape(-1)
        else:
            real = attention_mask.reshape(-1) != 0
            flat = np.flatnonzero(real)
            lengths = real.reshape(N, T).sum(axis=1).astype(np.int64)
            ids_p = ids.reshape(-1)[flat]
            pos = flat % T                   # absolute positions, as the padded model
            tt = token_type_ids.reshape(-1)[flat]
        starts = np.cumsum(lengths) - lengths
        return self.forward_packed(ids_p, pos, tt, starts, lengths, be), flat, starts, lengths

    def forward_packed(self, input_ids, position_ids, token_type_ids, starts, lengths,
                       backend=None):
        """Inference on a packed batch (no padding anywhere): input_ids, position_ids,
        token_type_ids (total_tokens,) hold the tokens of every sequence one after another,
        sequence b at rows starts[b] .. starts[b] + lengths[b] - 1 -> hidden states
        (total_tokens, hidden_size).  What forward runs in eval mode."""
        be = backend or self._inference_backend()
        if be is None:
            raise RuntimeError("forward_packed is inference-only: call model.eval() (and keep "
                               "the parameters on the host)")
        emb = self.embeddings
        nv, npos = self.config.vocab_size, self.config.max_position_embeddings
        for a, n, hi in ((input_ids, "input_ids", nv), (position_ids, "position_ids", npos),
                         (token_type_ids, "token_type_ids", self.config.type_vocab_size)):
            if a.size and (a.min() < 0 or a.max() >= hi):
                raise ValueError(f"{n} must be in [0, {hi}), got values in "
                                 f"[{a.min()}, {a.max()}]")
        x = emb.word_embeddings.weight.data[input_ids]
        x += emb.position_embeddings.weight.data[position_ids]
        x += emb.token_type_embeddings.weight.data[token_type_ids]
        ln = emb.LayerNorm
        D = x.shape[1]
        x = be.layer_norm_infer(x, ln.weight.data, ln.bias.data, D, ln.eps)
        for layer in self.encoder.layer:
            x = layer.forward_packed(be, x, starts, lengths)
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
    @classmethod
    def from_pretrained(cls, path, dtype=None):
        """The BertEncoder of a Hugging Face model directory: ``config.json`` (model_type
        "bert") + ``model.safetensors``, in eval mode.  Never unpickles: a directory with
        only ``pytorch_model.bin`` is refused.  A missing or invalid config field, an
        unsupported architecture, or a tensor whose shape disagrees with the config is a
        ValueError naming the file and the field."""
        from ._hf import HFDir, check_shapes
        d = HFDir(path, "BertEncoder")
        cfg = _config_from_dir(d)
        weights = d.weights()
        names = {_bert_key(k) for k in weights}
        cfg.add_pooling_layer = "pooler.dense.weight" in names
        with init.skip_init():              # every parameter is loaded below
            model = cls(cfg)
        expected = {k: v.shape for k, v in model.state_dict().items()}
        for k in names:
            if k and k.startswith("encoder.layer.") and k not in expected:
                raise ValueError(f"{d.file(d.weights_name())}: tensor {k!r} is not in a model "
                                 f"with config.json's num_hidden_layers="
                                 f"{cfg.num_hidden_layers}")
        check_shapes(d, expected, weights, hint=_shape_fields, rename=_bert_key)
        model.load_state_dict({k: v for k, v in weights.items() if _bert_key(k) in expected})
        if dtype is not None and np.dtype(dtype) != np.float32:
            model.to(np.dtype(dtype))
        return model.eval()

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


def _config_from_dir(d):
    """BertConfig from an HFDir's config.json (every field checked, named on error)."""
    d.check_model(("bert",), tuple(f"Bert{a}" for a in (
        "Model", "ForMaskedLM", "ForPreTraining", "ForSequenceClassification",
        "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice",
        "ForNextSentencePrediction", "LMHeadModel")))
    pet = d.field("position_embedding_type", str, "absolute")
    if pet != "absolute":
        raise ValueError(f"{d.file('config.json')}: field 'position_embedding_type' is {pet!r}; "
                         f"only 'absolute' is supported")
    if d.field("is_decoder", bool, False) or d.field("add_cross_attention", bool, False):
        raise ValueError(f"{d.file('config.json')}: field 'is_decoder' / 'add_cross_attention' "
                         f"is set; BertEncoder is the encoder only")
    act = d.field("hidden_act", str, "gelu")
    if act not in _ACTIVATIONS:
        raise ValueError(f"{d.file('config.json')}: field 'hidden_act' is {act!r}; supported: "
                         f"{', '.join(map(repr, _ACTIVATIONS))}")
    pos = lambda v: v > 0   # noqa: E731
    kw = {n: d.field(n, int, check=pos) for n in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size")}
    kw["max_position_embeddings"] = d.field("max_position_embeddings", int, 512, check=pos)
    kw["type_vocab_size"] = d.field("type_vocab_size", int, 2, check=pos)
    kw["layer_norm_eps"] = d.field("layer_norm_eps", float, 1e-12, check=pos)
    kw["pad_token_id"] = (None if d.config.get("pad_token_id", 0) is None
                          else d.field("pad_token_id", int, 0))
    for n in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        kw[n] = d.field(n, float, 0.1, check=lambda v: 0 <= v < 1)
    kw["initializer_range"] = d.field("initializer_range", float, 0.02)
    if kw["hidden_size"] % kw["num_attention_heads"]:
        raise ValueError(f"{d.file('config.json')}: field 'hidden_size' "
                         f"({kw['hidden_size']}) is not divisible by 'num_attention_heads' "
                         f"({kw['num_attention_heads']})")
    if kw["pad_token_id"] is not None and not 0 <= kw["pad_token_id"] < kw["vocab_size"]:
        kw["pad_token_id"] = None
    return BertConfig(hidden_act=act, **kw)


def _shape_fields(name):
    """The config.json fields a parameter's shape comes from (for error messages)."""
    if "word_embeddings" in name:
        return "vocab_size, hidden_size"
    if "position_embeddings" in name:
        return "max_position_embeddings, hidden_size"
    if "token_type_embeddings" in name:
        return "type_vocab_size, hidden_size"
    if "intermediate.dense" in name or (".output.dense" in name and "attention" not in name):
        return "intermediate_size, hidden_size"
    return "hidden_size"


def _bert_key(k):
    """A checkpoint name -> this model's name, or None for what is not a parameter here
    (pre-training heads, the position_ids buffer)."""
    if k.startswith("bert."):
        k = k[len("bert."):]
    if k.startswith("cls.") or k == "embeddings.position_ids":
        return None
    if k.endswith("LayerNorm.gamma"):
        k = k[:-len("gamma")] + "weight"
    elif k.endswith("LayerNorm.beta"):
        k = k[:-len("beta")] + "bias"
    return k


def _bert_keys(state_dict):
    if not hasattr(state_dict, "items"):
        raise TypeError(f"state_dict must be a mapping of names to arrays, got "
                        f"{type(state_dict).__name__}")
    out = {}
    for k, v in state_dict.items():
        if not isinstance(k, str):
            out[k] = v
            continue
        k = _bert_key(k)
        if k is not None:
            out[k] = v
    return out
