"""GPT: a GPT-2 style decoder-only language model built from fastnn layers.

    idx (B, T) -> wte(idx) + wpe(0..T-1) -> dropout -> h.0 .. h.{n_layer-1}
    (pre-LN TransformerBlock: ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj)
    -> ln_f -> LM head (x @ wte.weight^T when tied, else lm_head.weight) -> logits (B, T, V)

Parameter names follow the GPT-2 checkpoint layout (``wte.weight``, ``wpe.weight``,
``h.{i}.ln_1.weight``, ``h.{i}.attn.c_attn.weight`` (nx, 3 nx) in Conv1D layout, ...,
``ln_f.bias``), so the ``model.safetensors`` of a GPT-2 checkpoint loads directly:
``load_state_dict`` also accepts the ``transformer.`` prefix, the causal-mask buffers
(``h.{i}.attn.bias`` / ``masked_bias``, not parameters here) and a tied ``lm_head.weight``.
``GPT.from_pretrained(dir)`` builds the model of a Hugging Face GPT-2 directory (config.json
gives the shapes and n_head); ``GPT.from_state_dict(sd, n_head=12)`` the one matching bare
weights.  ``generate`` decodes with a key/value cache (fastnn/models/_decode.py).
"""

import warnings

import numpy as np

from .. import functional as F
from .._random import generator
from .._validate import int_arg, is_real
from ..nn import init
from ..nn.module import Module, ModuleList, subtree_hooked

__all__ = ["GPT", "GPTConfig"]


class GPTConfig:
    """Hyperparameters (GPT-2 small's by default; GPT-2's config.json names in brackets)."""

    def __init__(self, vocab_size=50257, block_size=1024, n_layer=12, n_head=12, d_model=768,
                 dropout=0.0, tie_weights=True, layer_norm_epsilon=1e-5,
                 activation="gelu_tanh"):
        self.vocab_size = int_arg(vocab_size, "vocab_size", 1)      # [vocab_size]
        self.block_size = int_arg(block_size, "block_size", 1)      # [n_positions]
        self.n_layer = int_arg(n_layer, "n_layer", 0)
        self.n_head = int_arg(n_head, "n_head", 1)
        self.d_model = int_arg(d_model, "d_model", 1)              # [n_embd]
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if not is_real(dropout) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        self.tie_weights = bool(tie_weights)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        if activation not in ("gelu_tanh", "gelu", "relu"):   # [activation_function]
            raise ValueError(f"activation must be 'gelu_tanh' (GPT-2's gelu_new), 'gelu' or "
                             f"'relu', got {activation!r}")
        self.activation = activation

    def to_dict(self):
        return dict(self.__dict__)

    def __repr__(self):
        return "GPTConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


class GPT(Module):
    """GPT(config) or GPT(vocab_size=..., block_size=..., n_layer=..., n_head=..., d_model=...).

    forward(idx) -> logits (B, T, vocab); backward(d_logits) accumulates every parameter's
    gradient (returns None: token indices have no gradient)."""

    def __init__(self, config=None, dtype=None, **kwargs):
        super().__init__()
        from .. import nn
        if config is None:
            config = GPTConfig(**kwargs)
        elif kwargs:
            raise TypeError("give either a GPTConfig or keyword hyperparameters, not both")
        self.config = cfg = config
        dt = dtype or "float32"
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = ModuleList([nn.TransformerBlock(cfg.d_model, cfg.n_head, dropout=cfg.dropout)
                             for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        if cfg.tie_weights:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init_weights()
        for blk in self.h:
            for m in (blk.ln_1, blk.ln_2):
                m.eps = cfg.layer_norm_epsilon
            blk.mlp.activation = cfg.activation
        if np.dtype(dt) != np.float32:
            self.to(np.dtype(dt))

    def _init_weights(self):
        """GPT-2's init: N(0, 0.02) weights, zero biases, residual projections (c_proj)
        scaled by 1/sqrt(2 n_layer)."""
        cfg = self.config
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                p.data[...] = 0
            elif ".ln_" in name or name.startswith("ln_f"):
                p.data[...] = 1
            elif name.endswith("c_proj.weight"):
                p.data = init.normal(p.shape, 0.02 / np.sqrt(2 * max(cfg.n_layer, 1)), 0.0,
                                     p.dtype)
            else:
                p.data = init.normal(p.shape, 0.02, 0.0, p.dtype)

    # ------------------------------------------------------------------ forward / backward
    def forward(self, idx):
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"idx must be an integer array of token ids, got dtype {idx.dtype}")
        if idx.ndim != 2:
            raise ValueError(f"idx must have shape (batch, time), got {idx.shape}")
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
            raise IndexError(f"token ids must be in [0, {self.config.vocab_size}), got "
                             f"[{idx.min()}, {idx.max()}]")
        tok = self.wte(idx)
        pos = self.wpe(np.arange(T, dtype=np.int64))
        x = tok + pos
        dropped = self.drop.p > 0 or self.drop._fhooks is not None   # p = 0: identity
        if dropped:
            x = self.drop(x)
        for blk in self.h:
            x = blk(x)
        x = self.ln_f(x)
        if self.lm_head is None:
            logits, ctx = F.linear_fwd(x, self.wte.weight.data, None)
        else:
            logits, ctx = self.lm_head(x), None
        self._keep((ctx, dropped))
        return logits

    def backward(self, d_logits):
        ctx, dropped = self._take()
        if self.lm_head is None:
            dx, dw, _ = F.linear_bwd(ctx, d_logits, weight_grad=self.wte.weight.requires_grad,
                                     bias_grad=False)
            self.wte.weight.accumulate_grad(dw)
        else:
            dx = self.lm_head.backward(d_logits)
        dx = self.ln_f.backward(dx)
        for blk in reversed(list(self.h)):
            dx = blk.backward(dx)
        if dropped:
            dx = self.drop.backward(dx)
        self.wpe.backward(dx.sum(axis=0))
        self.wte.backward(dx)
        return None

    # ------------------------------------------------------------------ sampling
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None, rng=None,
                 attention_mask=None):
        """Append ``max_new_tokens`` tokens to each prompt, with a key/value cache.

        ``idx``: a (B, T) integer array (or one 1-D prompt, taken as B = 1) -> (B, T + n);
        prompts of different lengths either as a list of 1-D prompts -> a list of 1-D
        arrays (prompt + new tokens), or, as Hugging Face takes them, ``idx`` left-padded
        with ``attention_mask`` (B, T) of 1 for real tokens and 0 for the padding before
        them (any pad id) -> (B, T + n).  Each row then gives the tokens it would alone.

        Decoding: ``temperature=0`` is greedy (argmax; Hugging Face's do_sample=False).
        Otherwise the last logits are divided by ``temperature``, kept to the ``top_k``
        largest and then to the smallest most-likely set of probability >= ``top_p``
        (either None: no limit), and sampled with ``rng`` (a numpy Generator; default
        fastnn's generator, seeded by ``fastnn.manual_seed``).

        The prompt runs through the model once; then each step feeds one token per row
        through the cached keys and values (inference only: no dropout, nothing kept for
        backward).  When prompt + new tokens exceed ``block_size``, or the parameters live
        on a GPU, each step re-runs the model on the last ``block_size`` tokens instead.
        In float32 on the cpu backend the layers' GEMMs and the LM head read weights
        packed once; in eval mode the packs are kept between calls (as much memory again
        as the layers' weights and the head) and follow ``load_state_dict``, ``.to`` and
        ``train()`` / ``eval()``, but not an in-place write into a parameter's array in
        eval mode: call ``model.eval()`` again after one."""
        from ._decode import next_tokens
        ragged = isinstance(idx, (list, tuple)) and len(idx) > 0 and all(
            np.ndim(p) == 1 for p in idx)
        if ragged:
            if attention_mask is not None:
                raise ValueError("give either a list of prompts or idx with attention_mask, "
                                 "not both")
            idx, attention_mask = _left_pad(idx)
        idx = np.asarray(idx)
        if idx.ndim == 1:
            idx = idx[None, :]
        if idx.dtype.kind not in "iu" or idx.ndim != 2 or idx.shape[1] < 1:
            raise ValueError(f"idx must be a (batch, time) integer array with time >= 1, got "
                             f"{idx.dtype} {idx.shape}")
        B, T = idx.shape
        max_new_tokens = int_arg(max_new_tokens, "max_new_tokens", 0)
        if not is_real(temperature) \
                or not temperature >= 0 or not np.isfinite(temperature):
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature!r}")
        if top_k is not None:
            top_k = int_arg(top_k, "top_k", 1)
        if top_p is not None and (not is_real(top_p)
                                  or not 0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        pad = None
        if attention_mask is not None:
            pad = _left_padding(attention_mask, idx.shape)
        real = idx if pad is None else np.where(np.arange(T)[None, :] >= pad[:, None], idx, 0)
        if real.size and (real.min() < 0 or real.max() >= self.config.vocab_size):
            raise IndexError(f"token ids must be in [0, {self.config.vocab_size}), got "
                             f"[{real.min()}, {real.max()}]")
        rng = generator() if rng is None else rng
        total = T + max_new_tokens
        out = np.empty((B, total), np.int64)
        out[:, :T] = idx
        if max_new_tokens:
            cached = total <= self.config.block_size and all(
                type(p.data) is np.ndarray for p in self.parameters())
            if pad is not None and not cached:
                raise ValueError(f"prompts with an attention_mask need prompt + new tokens "
                                 f"<= block_size ({T} + {max_new_tokens} > "
                                 f"{self.config.block_size}) and the parameters on the host")
            sample = lambda logits: next_tokens(logits, temperature, top_k, top_p, rng)  # noqa: E731
            if cached:
                if subtree_hooked(self):
                    warnings.warn("GPT.generate: the key/value-cache decoder runs the layers' "
                                  "work itself, so the forward hooks registered on this "
                                  "model's submodules are not called while it decodes",
                                  stacklevel=2)
                self._generate_cached(out, T, pad, sample)
            else:
                self._generate_uncached(out, T, sample)
        if ragged:
            return [out[b, int(pad[b]):] for b in range(B)]
        return out

    def _generate_cached(self, out, T, pad, sample):
        from ._decode import KVDecoder
        dec = KVDecoder(self, out.shape[0], out.shape[1], pad)
        logits = dec.prefill(out[:, :T])
        for t in range(T, out.shape[1]):
            out[:, t] = sample(logits)
            if t + 1 < out.shape[1]:
                logits = dec.step(out[:, t])

    def _generate_uncached(self, out, T, sample):
        """Every step re-runs the model on the last block_size tokens (eval mode)."""
        was_training = self.training
        self.eval()
        try:
            for t in range(T, out.shape[1]):
                cond = out[:, max(0, t - self.config.block_size):t]
                out[:, t] = sample(self.forward(cond)[:, -1, :])
        finally:
            self.train(was_training)

    # ------------------------------------------------------------------ checkpoints
    def load_state_dict(self, state_dict, strict=True):
        """Module.load_state_dict, accepting a GPT-2 checkpoint's layout as it is (see the
        module docstring)."""
        return super().load_state_dict(_gpt2_keys(state_dict, self.lm_head is None), strict)

    @classmethod
    def from_state_dict(cls, state_dict, n_head, dropout=0.0, layer_norm_epsilon=1e-5,
                        dtype=None):
        """The GPT whose shapes match ``state_dict`` (e.g. ``fastnn.load("model.safetensors")``
        of GPT-2), with the weights loaded.  ``n_head`` is not in the weights: give it."""
        sd = _gpt2_keys(state_dict, None)
        try:
            V, D = np.shape(sd["wte.weight"])
            P = np.shape(sd["wpe.weight"])[0]
        except KeyError as e:
            raise ValueError(f"not a GPT state dict: {e.args[0]!r} is missing") from None
        n_layer = 0
        while f"h.{n_layer}.ln_1.weight" in sd:
            n_layer += 1
        # GPT-2 files store the tied head too: it is tied when it equals wte.weight
        tie = "lm_head.weight" not in sd or (
            np.shape(sd["lm_head.weight"]) == (V, D)
            and np.array_equal(np.asarray(sd["lm_head.weight"]), np.asarray(sd["wte.weight"])))
        model = cls(GPTConfig(vocab_size=V, block_size=P, n_layer=n_layer, n_head=n_head,
                              d_model=D, dropout=dropout, tie_weights=tie,
                              layer_norm_epsilon=layer_norm_epsilon), dtype=dtype)
        model.load_state_dict(sd)
        return model

    @classmethod
    def from_pretrained(cls, path, dtype=None):
        """The GPT of a Hugging Face GPT-2 directory (``config.json`` with model_type "gpt2"
        + ``model.safetensors``; the ``transformer.`` prefix, the causal-mask buffers and a
        tied ``lm_head.weight`` are handled), in eval mode.  Never unpickles: a directory
        with only ``pytorch_model.bin`` is refused.  A missing or invalid config field, an
        unsupported architecture or option, or a tensor whose shape disagrees with the
        config is a ValueError naming the file and the field."""
        from ._hf import HFDir, check_shapes
        d = HFDir(path, "GPT")
        cfg = _config_from_dir(d)
        weights = d.weights()
        model = cls(cfg)
        expected = {k: v.shape for k, v in model.state_dict().items()}
        rename = lambda k: _gpt2_key(k, cfg.tie_weights)  # noqa: E731
        for k in weights:
            name = rename(k)
            if name is not None and name not in expected:
                raise ValueError(f"{d.file(d.weights_name())}: tensor {k!r} is not in a GPT "
                                 f"with config.json's n_layer={cfg.n_layer}, "
                                 f"tie_word_embeddings={cfg.tie_weights}")
        check_shapes(d, expected, weights, hint=_shape_fields, rename=rename)
        model.load_state_dict({rename(k): v for k, v in weights.items() if rename(k)})
        if dtype is not None and np.dtype(dtype) != np.float32:
            model.to(np.dtype(dtype))
        return model.eval()

    def num_parameters(self):
        return sum(int(p.size) for p in self.parameters())

    def extra_repr(self):
        c = self.config
        return (f"vocab_size={c.vocab_size}, block_size={c.block_size}, n_layer={c.n_layer}, "
                f"n_head={c.n_head}, d_model={c.d_model}, tie_weights={c.tie_weights}")


def _left_pad(prompts):
    """A list of 1-D prompts -> (idx (B, T_max) left-padded with 0, attention_mask)."""
    rows = [np.asarray(p) for p in prompts]
    for i, r in enumerate(rows):
        if r.dtype.kind not in "iu" or r.size == 0:
            raise ValueError(f"prompt {i} must be a non-empty 1-D sequence of token ids, got "
                             f"{r.dtype} {r.shape}")
    T = max(r.size for r in rows)
    idx = np.zeros((len(rows), T), np.int64)
    mask = np.zeros((len(rows), T), np.int64)
    for i, r in enumerate(rows):
        idx[i, T - r.size:] = r
        mask[i, T - r.size:] = 1
    return idx, mask


def _left_padding(attention_mask, shape):
    """attention_mask (B, T) of 0/1, zeros only before each row's first 1 -> (B,) pad counts."""
    m = np.asarray(attention_mask)
    if m.shape != shape:
        raise ValueError(f"attention_mask must have idx's shape {shape}, got {m.shape}")
    if m.dtype.kind not in "biu" or (m.size and not np.isin(m, (0, 1)).all()):
        raise ValueError("attention_mask must hold 0 (padding) and 1 (token)")
    m = m.astype(bool)
    pad = (~m).sum(axis=1)
    left = np.arange(shape[1])[None, :] >= pad[:, None]
    if not np.array_equal(m, left) or (pad == shape[1]).any():
        raise ValueError("attention_mask must be left padding: each row zeros then ones, with "
                         "at least one 1 (pad prompts on the left for generation)")
    return pad.astype(np.int64)


def _gpt2_key(k, tied):
    """A GPT-2 checkpoint's tensor name -> fastnn GPT's (``transformer.`` stripped), or
    None for what is no parameter here: the causal-mask buffers and, when ``tied``, the
    LM head (it is wte.weight)."""
    if isinstance(k, str) and k.startswith("transformer."):
        k = k[len("transformer."):]
    parts = k.split(".") if isinstance(k, str) else []
    if len(parts) == 4 and parts[0] == "h" and parts[2] == "attn" and \
            parts[3] in ("bias", "masked_bias"):
        return None   # GPT-2's causal-mask buffers (the mask is built in, not stored)
    if tied and k == "lm_head.weight":
        return None
    return k


def _gpt2_keys(state_dict, tied):
    """A GPT-2 checkpoint's names -> fastnn GPT's (see ``_gpt2_key``)."""
    if not hasattr(state_dict, "items"):
        raise TypeError(f"state_dict must be a mapping of names to arrays, got "
                        f"{type(state_dict).__name__}")
    out = {}
    for k, v in state_dict.items():
        name = _gpt2_key(k, tied)
        if name is not None:
            out[name] = v
    return out


# config.json's activation_function -> FeedForward's activation ("gelu_new", GPT-2's, and
# its aliases are the tanh approximation; gelu_fast is the same formula)
_HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                   "gelu_fast": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def _config_from_dir(d):
    """GPTConfig from an HFDir's config.json (GPT-2 names, every field checked)."""
    d.check_model(("gpt2",), ("GPT2LMHeadModel", "GPT2Model"))
    cj = d.file("config.json")
    pos = lambda v: v > 0   # noqa: E731
    n_embd = d.field("n_embd", int, 768, check=pos)
    n_head = d.field("n_head", int, 12, check=pos)
    if n_embd % n_head:
        raise ValueError(f"{cj}: field 'n_embd' ({n_embd}) is not divisible by 'n_head' "
                         f"({n_head})")
    act = d.field("activation_function", str, "gelu_new", check=_HF_ACTIVATIONS.__contains__)
    n_inner = d.config.get("n_inner")
    if n_inner is not None and d.field("n_inner", int) != 4 * n_embd:
        raise ValueError(f"{cj}: field 'n_inner' is {n_inner!r}; fastnn's GPT has the "
                         f"GPT-2 MLP width 4 * n_embd = {4 * n_embd}")
    for name, default, want in (("scale_attn_weights", True, True),
                                ("scale_attn_by_inverse_layer_idx", False, False),
                                ("add_cross_attention", False, False)):
        if d.field(name, bool, default) != want:
            raise ValueError(f"{cj}: field {name!r} must be {want} for fastnn's GPT")
    return GPTConfig(vocab_size=d.field("vocab_size", int, 50257, check=pos),
                     block_size=d.field("n_positions", int, 1024, check=pos),
                     n_layer=d.field("n_layer", int, 12, check=lambda v: v >= 0),
                     n_head=n_head, d_model=n_embd,
                     dropout=d.field("resid_pdrop", float, 0.1, check=lambda v: 0 <= v < 1),
                     tie_weights=d.field("tie_word_embeddings", bool, True),
                     layer_norm_epsilon=d.field("layer_norm_epsilon", float, 1e-5, check=pos),
                     activation=_HF_ACTIVATIONS[act])


def _shape_fields(name):
    """The config.json fields a parameter's shape comes from (for error messages)."""
    if name.startswith("wte") or name.startswith("lm_head"):
        return "vocab_size, n_embd"
    if name.startswith("wpe"):
        return "n_positions, n_embd"
    if ".mlp." in name:
        return "n_embd, n_inner = 4 * n_embd"
    return "n_embd"
