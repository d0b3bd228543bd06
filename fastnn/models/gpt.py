"""GPT: a GPT-2 style decoder-only language model built from fastnn layers.

    idx (B, T) -> wte(idx) + wpe(0..T-1) -> dropout -> h.0 .. h.{n_layer-1}
    (pre-LN TransformerBlock: ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj)
    -> ln_f -> LM head (x @ wte.weight^T when tied, else lm_head.weight) -> logits (B, T, V)

Parameter names follow the GPT-2 checkpoint layout (``wte.weight``, ``wpe.weight``,
``h.{i}.ln_1.weight``, ``h.{i}.attn.c_attn.weight`` (nx, 3 nx) in Conv1D layout, ...,
``ln_f.bias``), so the ``model.safetensors`` of a GPT-2 checkpoint loads directly:
``load_state_dict`` also accepts the ``transformer.`` prefix, the causal-mask buffers
(``h.{i}.attn.bias`` / ``masked_bias``, not parameters here) and a tied ``lm_head.weight``.
``GPT.from_state_dict(sd, n_head=12)`` builds the model that matches a checkpoint.
"""
import numbers

import numpy as np

from .. import functional as F
from .._random import generator
from .._validate import int_arg
from ..nn import init
from ..nn.module import Module, ModuleList, Parameter

__all__ = ["GPT", "GPTConfig"]


class GPTConfig:
    """Hyperparameters (GPT-2 small's by default; GPT-2's config.json names in brackets)."""

    def __init__(self, vocab_size=50257, block_size=1024, n_layer=12, n_head=12, d_model=768,
                 dropout=0.0, tie_weights=True, layer_norm_epsilon=1e-5):
        self.vocab_size = int_arg(vocab_size, "vocab_size", 1)      # [vocab_size]
        self.block_size = int_arg(block_size, "block_size", 1)      # [n_positions]
        self.n_layer = int_arg(n_layer, "n_layer", 0)
        self.n_head = int_arg(n_head, "n_head", 1)
        self.d_model = int_arg(d_model, "d_model", 1)              # [n_embd]
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if not isinstance(dropout, numbers.Real) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        self.tie_weights = bool(tie_weights)
        self.layer_norm_epsilon = float(layer_norm_epsilon)

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
        if self.drop.p > 0:
            x = self.drop(x)
        for blk in self.h:
            x = blk(x)
        x = self.ln_f(x)
        if self.lm_head is None:
            logits, ctx = F.linear_fwd(x, self.wte.weight.data, None)
            self._keep(ctx)
        else:
            logits = self.lm_head(x)
            self._keep(True)
        return logits

    def backward(self, d_logits):
        ctx = self._take()
        if self.lm_head is None:
            dx, dw, _ = F.linear_bwd(ctx, d_logits)
            self.wte.weight.accumulate_grad(dw)
        else:
            dx = self.lm_head.backward(d_logits)
        dx = self.ln_f.backward(dx)
        for blk in reversed(list(self.h)):
            dx = blk.backward(dx)
        if self.drop.p > 0:
            dx = self.drop.backward(dx)
        self.wpe.backward(dx.sum(axis=0))
        self.wte.backward(dx)
        return None

    # ------------------------------------------------------------------ sampling
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, rng=None):
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (B, T) and return (B, T + n).

        Each step runs the model (eval mode) on the last ``block_size`` tokens, divides the
        last position's logits by ``temperature``, keeps the ``top_k`` largest (all when
        None; top_k=1 is greedy decoding) and samples from the softmax.  Random numbers
        come from ``rng`` (a numpy Generator) or fastnn's generator (``manual_seed``)."""
        idx = np.asarray(idx)
        if idx.ndim == 1:
            idx = idx[None, :]
        if idx.dtype.kind not in "iu" or idx.ndim != 2 or idx.shape[1] < 1:
            raise ValueError(f"idx must be a (batch, time) integer array with time >= 1, got "
                             f"{idx.dtype} {idx.shape}")
        max_new_tokens = int_arg(max_new_tokens, "max_new_tokens", 0)
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) \
                or not temperature > 0:
            raise ValueError(f"temperature must be > 0 (use top_k=1 for greedy), got {temperature!r}")
        if top_k is not None:
            top_k = int_arg(top_k, "top_k", 1)
        rng = generator() if rng is None else rng
        was_training = self.training
        self.eval()
        out = idx.astype(np.int64)
        try:
            for _ in range(max_new_tokens):
                cond = out[:, -self.config.block_size:]
                logits = np.asarray(self.forward(cond)[:, -1, :], dtype=np.float64) / temperature
                if top_k is not None and top_k < logits.shape[-1]:
                    kth = np.partition(logits, -top_k, axis=-1)[:, -top_k][:, None]
                    logits = np.where(logits < kth, -np.inf, logits)
                logits -= logits.max(axis=-1, keepdims=True)
                probs = np.exp(logits)
                probs /= probs.sum(axis=-1, keepdims=True)
                u = rng.random((probs.shape[0], 1))
                nxt = (np.cumsum(probs, axis=-1) < u).sum(axis=-1)
                nxt = np.minimum(nxt, probs.shape[-1] - 1)
                out = np.concatenate([out, nxt[:, None].astype(np.int64)], axis=1)
        finally:
            self.train(was_training)
        return out

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

    def num_parameters(self):
        return sum(int(p.size) for p in self.parameters())

    def extra_repr(self):
        c = self.config
        return (f"vocab_size={c.vocab_size}, block_size={c.block_size}, n_layer={c.n_layer}, "
                f"n_head={c.n_head}, d_model={c.d_model}, tie_weights={c.tie_weights}")


def _gpt2_keys(state_dict, tied):
    """A GPT-2 checkpoint's names -> fastnn GPT's: strip ``transformer.``, drop the causal
    mask buffers, and a tied ``lm_head.weight`` (when ``tied``; it is wte.weight)."""
    if not hasattr(state_dict, "items"):
        raise TypeError(f"state_dict must be a mapping of names to arrays, got "
                        f"{type(state_dict).__name__}")
    out = {}
    for k, v in state_dict.items():
        if isinstance(k, str) and k.startswith("transformer."):
            k = k[len("transformer."):]
        parts = k.split(".") if isinstance(k, str) else []
        if len(parts) == 4 and parts[0] == "h" and parts[2] == "attn" and \
                parts[3] in ("bias", "masked_bias"):
            continue   # GPT-2's causal-mask buffers (the mask is built in, not stored)
        if tied and k == "lm_head.weight":
            continue
        out[k] = v
    return out
