"""KV-cache decoding for fastnn.models.GPT (what ``GPT.generate`` runs).

Generation is inference only, so it does not go through the modules (which keep a cache
for backward per call, and whose Conv1D copies its weight transposed on every call): it
reads the modules' parameter arrays as they are and runs the same ops on them.

* Prefill: the prompt (B, T) runs once through every layer; each layer's keys and values
  are written into a cache preallocated for the whole generation (B, H, T + n, E), so a
  decode step never concatenates or copies the past.
* Decode: one token per sequence per step, (B, d_model) rows through each layer: the
  GEMMs read each weight once for the whole batch (a GEMV at batch 1: the step is bound by
  the weights' memory traffic), attention is one query against the cached keys.
* Packed weights: in float32 on the cpu backend the four GEMMs of every layer and the LM
  head run on weights packed once into column panels (``pack_linear_weight``: each panel
  one contiguous stream) by the register-tile kernel ``packed_linear_infer``, GELU fused
  into the MLP's first GEMM.  (GPT-2 small, 2 threads: a step took 13.7 ms at batch 8
  with the head packed, 15.1 with ``skinny_linear`` on the (vocab, d_model) weight; 9.3
  and 10.5 ms at batch 1.)  In eval mode the packs are kept on each block (the
  head's on the model) until a parameter's ``.data`` is replaced or ``train()`` /
  ``eval()`` is called (after an in-place write into a weight in eval mode, call
  ``model.eval()`` again); in training mode they are built per ``generate`` call.  They
  take as much memory again as the layers' weights and the head.
* Left padding (prompts of different lengths): ``pad[b]`` leading positions of row b are
  padding.  Their keys are masked everywhere, and row b's real tokens take positions
  0, 1, ... from its first real token, as Hugging Face's generate does (position_ids from
  the attention mask's cumulative sum), so results match a per-prompt run.
"""
import numpy as np

from .. import functional as F
from .._backend import host_backend

_ACT = {"gelu_tanh": "tanh", "gelu": "none"}
_ACT_KERNEL = {"gelu_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def block_packs(blk, be):
    """The packed (panels, n_out) weights of a GPT block's four GEMMs (Conv1D (in, out)
    weights), cached on the block in eval mode (see the module docstring)."""
    ws = (blk.attn.c_attn.weight.data, blk.attn.c_proj.weight.data,
          blk.mlp.c_fc.weight.data, blk.mlp.c_proj.weight.data)
    c = blk.__dict__.get("_infer")
    if c is not None and c[0] is be and all(a is b for a, b in zip(c[1], ws)):
        return c[2]
    packs = tuple((be.pack_linear_weight(w, True), w.shape[1]) for w in ws)
    if not blk.training:
        object.__setattr__(blk, "_infer", (be, ws, packs))
    return packs


def head_pack(model, head, be):
    """The LM head's packed (panels, vocab) weight (``head``: (vocab, d_model)), cached on
    the model in eval mode as ``block_packs`` caches a block's."""
    c = model.__dict__.get("_infer")
    if c is not None and c[0] is be and c[1] is head:
        return c[2]
    pack = (be.pack_linear_weight(head, False), head.shape[0])
    if not model.training:
        object.__setattr__(model, "_infer", (be, head, pack))
    return pack


_SKINNY_ROWS = 16    # up to this many rows a GEMM streams its weight once (skinny_linear)


def matmul(x, w, b, weight_in_out):
    """x (..., in) times w -- (in, out) when ``weight_in_out`` (Conv1D), else (out, in) --
    plus b (or None).  Decode steps (a few rows) use the backend's skinny_linear; the
    prompt's many rows are a BLAS GEMM."""
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] <= _SKINNY_ROWS:
        be = host_backend()
        if be is not None:
            c = np.ascontiguousarray     # no copy of what already is (the parameters)
            y = be.skinny_linear(c(rows), c(w), None if b is None else c(b), weight_in_out)
            return y.reshape(x.shape[:-1] + y.shape[-1:])
    y = np.matmul(x, w if weight_in_out else w.T)
    if b is not None:
        y += b
    return y


class KVDecoder:
    """Decoding state of one ``generate`` call: the model's weights (views, not copies),
    the key/value caches and the left-padding of each row."""

    def __init__(self, model, batch, max_len, pad=None):
        cfg = model.config
        self.D = D = cfg.d_model
        self.H = H = cfg.n_head
        self.E = D // H
        self.eps = cfg.layer_norm_epsilon
        self.wte = model.wte.weight.data
        self.wpe = model.wpe.weight.data
        self.head = self.wte if model.lm_head is None else model.lm_head.weight.data
        self.ln_f = (model.ln_f.weight.data, model.ln_f.bias.data)
        dt = self.wte.dtype
        be = host_backend()
        self.be = be if be is not None and be.name == "cpu" and dt == np.float32 else None
        self.layers, self.packs = [], []
        for blk in model.h:
            act = blk.mlp.activation
            self.layers.append((
                blk.ln_1.weight.data, blk.ln_1.bias.data, blk.ln_1.eps,
                blk.attn.c_attn.weight.data, blk.attn.c_attn.bias.data,
                blk.attn.c_proj.weight.data, blk.attn.c_proj.bias.data,
                blk.ln_2.weight.data, blk.ln_2.bias.data, blk.ln_2.eps,
                blk.mlp.c_fc.weight.data, blk.mlp.c_fc.bias.data,
                blk.mlp.c_proj.weight.data, blk.mlp.c_proj.bias.data, act))
            self.packs.append(None if self.be is None else block_packs(blk, self.be))
        self.head_pack = None if self.be is None else head_pack(model, self.head, self.be)
        L = len(self.layers)
        # one block for all layers' caches: (layer, k/v, B, H, T, E)
        self.cache = np.zeros((L, 2, batch, H, max_len, self.E), dt)
        self.B = batch
        self.pad = np.zeros(batch, np.int64) if pad is None else np.asarray(pad, np.int64)
        self.padded = bool(self.pad.any())
        self.scale = dt.type(1.0 / np.sqrt(self.E))
        self.t = 0          # positions filled in the cache
        # additive key mask (B, 1, 1, max_len): -inf on each row's left padding
        self.key_mask = None
        if self.padded:
            cols = np.arange(max_len)
            self.key_mask = np.where(cols[None, :] < self.pad[:, None], -np.inf, 0.0
                                     ).astype(dt)[:, None, None, :]

    # ------------------------------------------------------------------ shared pieces
    def _lin(self, x, li, i, w, b, act=None):
        """GEMM i (0 c_attn, 1 c_proj, 2 c_fc, 3 mlp c_proj) of layer li: act(x w + b)."""
        packs = self.packs[li]
        if packs is not None:
            pk, n = packs[i]
            rows = np.ascontiguousarray(x.reshape(-1, x.shape[-1]))
            y = self.be.packed_linear_infer(rows, pk, n, b, "none" if act is None
                                            else _ACT_KERNEL[act])
            return y.reshape(x.shape[:-1] + (n,))
        y = matmul(x, w, b, True)
        if act == "relu":
            np.maximum(y, 0, out=y)
        elif act is not None:
            y = F.gelu(y, _ACT[act], out=y)
        return y

    def _mlp(self, x, lw, li):
        (_, _, _, _, _, _, _, w2, b2, eps2, wfc, bfc, wp, bp, act) = lw
        h = F.layer_norm(x, (self.D,), w2, b2, eps2)
        h = self._lin(h, li, 2, wfc, bfc, act)
        x += self._lin(h, li, 3, wp, bp)
        return x

    def logits(self, x):
        """(B, D) last hidden rows -> (B, vocab) logits (final layer norm, LM head)."""
        h = F.layer_norm(x, (self.D,), self.ln_f[0], self.ln_f[1], self.eps)
        if self.head_pack is not None:
            pk, n = self.head_pack
            return self.be.packed_linear_infer(np.ascontiguousarray(h), pk, n, None, "none")
        return matmul(h, self.head, None, False)

    # ------------------------------------------------------------------ prefill
    def prefill(self, idx):
        """Run the prompt (B, T) through the model, filling the cache; -> (B, vocab) logits
        of each row's last position."""
        B, T = idx.shape
        D, H, E = self.D, self.H, self.E
        pos = np.maximum(np.arange(T)[None, :] - self.pad[:, None], 0)
        x = self.wte[idx] + self.wpe[pos]                 # (B, T, D), fresh
        mask = mask_index = None
        if self.padded:
            kpm = np.arange(T)[None, :] < self.pad[:, None]          # True = padding
            mask, mask_index = F.attention_mask(None, kpm, B, H, T, T, x.dtype)
        for li, lw in enumerate(self.layers):
            w1, b1, eps1, wa, ba, wo, bo = lw[:7]
            h = F.layer_norm(x, (D,), w1, b1, eps1)
            qkv = self._lin(h, li, 0, wa, ba)
            q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
            kv = self.cache[li]
            kv[0, :, :, :T] = k.reshape(B, T, H, E).transpose(0, 2, 1, 3)
            kv[1, :, :, :T] = v.reshape(B, T, H, E).transpose(0, 2, 1, 3)
            o, _ = F.multi_head_attention_fwd(q, k, v, H, True, mask, mask_index, 0.0, True)
            x += self._lin(o, li, 1, wo, bo)
            x = self._mlp(x, lw, li)
        self.t = T
        return self.logits(x[:, -1])

    # ------------------------------------------------------------------ one decode step
    def step(self, tokens):
        """Feed one token per row (B,) at the next position; -> (B, vocab) logits."""
        B, D, H, E = self.B, self.D, self.H, self.E
        t = self.t
        x = self.wte[tokens] + self.wpe[t - self.pad]     # (B, D)
        n = t + 1
        km = None if self.key_mask is None else self.key_mask[..., :n]
        for li, lw in enumerate(self.layers):
            w1, b1, eps1, wa, ba, wo, bo = lw[:7]
            h = F.layer_norm(x, (D,), w1, b1, eps1)
            qkv = self._lin(h, li, 0, wa, ba)
            kv = self.cache[li]
            kv[0, :, :, t] = qkv[:, D:2 * D].reshape(B, H, E)
            kv[1, :, :, t] = qkv[:, 2 * D:].reshape(B, H, E)
            o = decode_attention(qkv[:, :D].reshape(B, H, 1, E), kv[0, :, :, :n],
                                 kv[1, :, :, :n], km, self.scale)
            x += self._lin(o.reshape(B, D), li, 1, wo, bo)
            x = self._mlp(x, lw, li)
        self.t = n
        return self.logits(x)


def decode_attention(q, k, v, key_mask, scale):
    """One query per (batch, head) against the cache: q (B, H, 1, E), k and v (B, H, n, E)
    (views of the cache), key_mask None or additive (B, 1, 1, n) -> (B, H, 1, E).
    Every row has at least one unmasked key (its own token)."""
    s = np.matmul(q, k.swapaxes(-1, -2))
    s *= scale
    if key_mask is not None:
        s += key_mask
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


# ---------------------------------------------------------------------- sampling
def next_tokens(logits, temperature, top_k, top_p, rng):
    """(B, V) logits -> (B,) int64 next tokens.

    temperature == 0: greedy (argmax; the first of tied maxima).  Otherwise the logits are
    divided by ``temperature``, restricted to the ``top_k`` largest (ties at the k-th value
    are all kept) and then to the smallest set of most likely tokens whose probability
    reaches ``top_p`` (the token that crosses ``top_p`` is kept), and one token per row is
    drawn with one uniform number per row from ``rng``."""
    if temperature == 0:
        return np.argmax(logits, axis=-1).astype(np.int64)
    z = np.asarray(logits, dtype=np.float64) / temperature
    V = z.shape[-1]
    if top_k is not None and top_k < V:
        kth = np.partition(z, -top_k, axis=-1)[:, -top_k][:, None]
        z = np.where(z < kth, -np.inf, z)
    z = z - z.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-probs, axis=-1, kind="stable")
        sp = np.take_along_axis(probs, order, axis=-1)
        before = np.cumsum(sp, axis=-1) - sp          # mass of the more likely tokens
        drop = before >= top_p
        drop[:, 0] = False
        sp[drop] = 0.0
        probs = np.zeros_like(probs)
        np.put_along_axis(probs, order, sp, axis=-1)
        probs /= probs.sum(axis=-1, keepdims=True)
    # u > 0, so a token of probability 0 (filtered out) is never drawn
    u = np.maximum(rng.random((probs.shape[0], 1)), np.finfo(np.float64).tiny)
    nxt = (np.cumsum(probs, axis=-1) < u).sum(axis=-1)
    # u just below 1 with rounding in the cumsum: the last token still allowed
    last = V - 1 - np.argmax(probs[:, ::-1] > 0, axis=-1)
    return np.minimum(nxt, last).astype(np.int64)
