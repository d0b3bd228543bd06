"""SentenceEncoder: sentence embeddings from a sentence-transformers directory.

A sentence-transformers model directory lists its pipeline in ``modules.json``:
a Transformer (the BERT encoder: ``config.json`` + ``model.safetensors`` in the module's
path, ``sentence_bert_config.json`` with ``max_seq_length``), a Pooling module
(``<path>/config.json``: CLS token, mean, max and/or mean-sqrt-len over the real tokens,
concatenated in sentence-transformers' order) and optionally Normalize (unit L2 norm).

Inference runs on the packed batch (BertEncoder.forward_packed): pooling reads the real
tokens of each sentence straight from the packed hidden states, so no padded token is
ever computed.  ``encode(list_of_str)`` needs the optional ``tokenizers`` package
(``pip install fastnn[text]``) and the directory's ``tokenizer.json``.
"""
import math
import os

import numpy as np

from .._validate import is_int
from ..nn.module import subtree_hooked
from ._hf import read_json

__all__ = ["SentenceEncoder"]

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
# sentence-transformers' Pooling concatenates the enabled modes in this order
_POOL_MODES = (("pooling_mode_cls_token", "cls"), ("pooling_mode_max_tokens", "max"),
               ("pooling_mode_mean_tokens", "mean"),
               ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"))
_UNSUPPORTED_MODES = ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


class SentenceEncoder:
    """SentenceEncoder(encoder, pooling=("mean",), normalize=False, tokenizer=None,
    max_seq_length=None); usually SentenceEncoder.from_pretrained(path).

    encode(input_ids, attention_mask=None, token_type_ids=None) -> (N, dim) embeddings
    of integer arrays (attention_mask: 1 = token, 0 = padding), or encode(list_of_str,
    batch_size=32) with a tokenizer."""

    def __init__(self, encoder, pooling=("mean",), normalize=False, tokenizer=None,
                 max_seq_length=None):
        if isinstance(pooling, str):
            pooling = (pooling,)
        pooling = tuple(pooling)
        known = {m for _, m in _POOL_MODES}
        if not pooling or any(m not in known for m in pooling):
            raise ValueError(f"pooling must be a non-empty sequence of {sorted(known)}, got "
                             f"{pooling!r}")
        self.encoder = encoder.eval()
        self.pooling = pooling
        self.normalize = bool(normalize)
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, path, dtype=None):
        """A sentence-transformers directory (modules.json; a plain Hugging Face BERT
        directory without modules.json gets mean pooling, as sentence-transformers
        does).  Unknown modules, pooling modes or files are ValueErrors naming them."""
        from .bert import BertEncoder
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise ValueError(f"SentenceEncoder path {path!r} is not a directory")
        mods_file = os.path.join(path, "modules.json")
        if os.path.isfile(mods_file):
            mods = read_json(mods_file, "the sentence-transformers module list")
            if not isinstance(mods, list) or not all(isinstance(m, dict) for m in mods):
                raise ValueError(f"{mods_file}: expected a list of module objects")
        else:
            mods = [{"type": _TRANSFORMER, "path": ""}]
        tpath = None
        pooling, normalize = ("mean",), False
        for m in mods:
            kind, sub = m.get("type"), os.path.join(path, m.get("path") or "")
            if kind == _TRANSFORMER:
                tpath = sub
            elif kind == _POOLING:
                pooling = _read_pooling(os.path.join(sub, "config.json"))
            elif kind == _NORMALIZE:
                normalize = True
            else:
                raise ValueError(f"{mods_file}: field 'type' is {kind!r}; supported modules: "
                                 f"{_TRANSFORMER}, {_POOLING}, {_NORMALIZE}")
        if tpath is None:
            raise ValueError(f"{mods_file}: no {_TRANSFORMER} module")
        encoder = BertEncoder.from_pretrained(tpath, dtype=dtype)
        max_len = encoder.config.max_position_embeddings
        st_cfg = os.path.join(tpath, "sentence_bert_config.json")
        if os.path.isfile(st_cfg):
            c = read_json(st_cfg, "sentence-transformers' settings")
            v = c.get("max_seq_length", max_len) if isinstance(c, dict) else None
            if not is_int(v) or v < 1:
                raise ValueError(f"{st_cfg}: field 'max_seq_length' has an invalid value {v!r}")
            max_len = min(v, max_len)
        tok_file = os.path.join(tpath, "tokenizer.json")
        tokenizer = tok_file if os.path.isfile(tok_file) else None
        return cls(encoder, pooling, normalize, tokenizer, max_len)

    # ------------------------------------------------------------------ encoding
    def encode(self, inputs, attention_mask=None, token_type_ids=None, batch_size=32):
        """Embeddings (N, dim) of token arrays or of a list of strings (see the class)."""
        if isinstance(inputs, str):
            raise TypeError("encode takes a list of strings (or token arrays), got one str: "
                            "wrap it in a list")
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str)
                                                                for t in inputs):
            return self._encode_text(list(inputs), batch_size)
        ids = np.asarray(inputs)
        if ids.dtype.kind not in "iu" or ids.ndim != 2:
            raise ValueError(f"input_ids must be a (batch, seq) integer array (or a list of "
                             f"str), got {ids.dtype} {ids.shape}")
        N, T = ids.shape
        am = np.ones((N, T), np.int64) if attention_mask is None else np.asarray(attention_mask)
        if am.shape != (N, T):
            raise ValueError(f"attention_mask must have shape {(N, T)}, got {am.shape}")
        tt = np.zeros((N, T), np.int64) if token_type_ids is None else np.asarray(token_type_ids)
        if tt.shape != (N, T) or tt.dtype.kind not in "iu":
            raise ValueError(f"token_type_ids must be an integer array of shape {(N, T)}")
        enc = self.encoder
        be = enc._inference_backend()
        if be is None:
            raise RuntimeError("SentenceEncoder runs on the host backends (cpu, reference)")
        if subtree_hooked(enc):
            return self._pool(*_through_modules(enc, ids, am, tt))
        hidden, _, starts, lengths = enc._packed(be, ids, am, tt)
        return self._pool(hidden, starts, lengths)

    def _pool(self, hidden, starts, lengths):
        """Pooling over each sentence's rows of the packed hidden states (+ normalize)."""
        N, D = len(lengths), hidden.shape[1]
        if N == 1 and self.pooling == ("mean",) and lengths[0] > 0:
            # one sentence (latency): the same sums as below in fewer NumPy calls
            e = (hidden.sum(axis=0, dtype=np.float64) / float(lengths[0])).astype(hidden.dtype)
            if self.normalize:
                n = math.sqrt(np.dot(e.astype(np.float64), e.astype(np.float64)))
                e = (e / np.float64(max(n, 1e-12))).astype(hidden.dtype)
            return e[None]
        parts = []
        nonempty = lengths > 0
        for mode in self.pooling:
            out = np.zeros((N, D), hidden.dtype)
            if nonempty.any():
                st = starts[nonempty]
                if mode == "cls":
                    out[nonempty] = hidden[st]
                elif mode == "max":
                    out[nonempty] = np.maximum.reduceat(hidden, st, axis=0)
                else:
                    s = np.add.reduceat(hidden.astype(np.float64), st, axis=0)
                    n = lengths[nonempty, None].astype(np.float64)
                    out[nonempty] = s / (n if mode == "mean" else np.sqrt(n))
            parts.append(out)
        e = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        if self.normalize:      # as torch.nn.functional.normalize: x / max(||x||, 1e-12)
            n = np.sqrt(np.einsum("nd,nd->n", e, e, dtype=np.float64))[:, None]
            e = (e / np.maximum(n, 1e-12)).astype(e.dtype)
        return e

    def _tokenizer(self):
        if self.tokenizer is None:
            raise ValueError("encode(list_of_str) needs a tokenizer: this model directory has "
                             "no tokenizer.json (pass token arrays instead)")
        if isinstance(self.tokenizer, str):
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise ImportError("encode(list_of_str) needs the optional 'tokenizers' package: "
                                  "pip install fastnn[text] (or pass token arrays)") from None
            tok = Tokenizer.from_file(self.tokenizer)
            tok.no_padding()
            if self.max_seq_length is not None:
                tok.enable_truncation(self.max_seq_length)
            self.tokenizer = tok
        return self.tokenizer

    def _encode_text(self, texts, batch_size):
        """Tokenize without padding; sort by length, run batches of ``batch_size``
        sentences packed (no padding), put the embeddings back in input order."""
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        encs = self._tokenizer().encode_batch(texts)
        lens = np.array([len(e.ids) for e in encs], np.int64)
        order = np.argsort(-lens, kind="stable")
        enc = self.encoder
        be = enc._inference_backend()
        if be is None:
            raise RuntimeError("SentenceEncoder runs on the host backends (cpu, reference)")
        out = None
        for b0 in range(0, len(texts), batch_size):
            idx = order[b0:b0 + batch_size]
            L = lens[idx]
            ids = np.concatenate([encs[i].ids for i in idx]).astype(np.int64)
            tt = np.concatenate([encs[i].type_ids for i in idx]).astype(np.int64)
            pos = np.concatenate([np.arange(n) for n in L]).astype(np.int64)
            starts = np.cumsum(L) - L
            if subtree_hooked(enc):
                e = self._pool(*_through_modules(enc, *_padded(encs, idx)))
            else:
                e = self._pool(enc.forward_packed(ids, pos, tt, starts, L, be), starts, L)
            if out is None:
                out = np.empty((len(texts), e.shape[1]), e.dtype)
            out[idx] = e
        return out


def _through_modules(enc, ids, am, tt):
    """(hidden (real tokens, D), starts, lengths) of the padded batch run through the
    encoder's modules -- the path taken when a submodule has forward hooks, which the
    padding-free kernels would skip.  The same rows as the packed path, in its order."""
    real = np.asarray(am).reshape(-1) != 0
    hidden = enc(ids, am, tt)
    lengths = (np.asarray(am) != 0).sum(axis=1).astype(np.int64)
    return hidden.reshape(-1, hidden.shape[-1])[real], np.cumsum(lengths) - lengths, lengths


def _padded(encs, idx):
    """(ids, attention_mask, token_type_ids) of tokenizer encodings ``encs[idx]``, padded
    on the right to the longest."""
    T = max(len(encs[i].ids) for i in idx)
    ids = np.zeros((len(idx), T), np.int64)
    am = np.zeros((len(idx), T), np.int64)
    tt = np.zeros((len(idx), T), np.int64)
    for r, i in enumerate(idx):
        n = len(encs[i].ids)
        ids[r, :n], am[r, :n], tt[r, :n] = encs[i].ids, 1, encs[i].type_ids
    return ids, am, tt


def _read_pooling(path):
    cfg = read_json(path, "the pooling configuration")
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a JSON object")
    for k in _UNSUPPORTED_MODES:
        if cfg.get(k):
            raise ValueError(f"{path}: field {k!r} is set; supported pooling: CLS token, mean, "
                             f"max, mean-sqrt-len")
    modes = tuple(m for k, m in _POOL_MODES if cfg.get(k))
    if not modes:
        mode = cfg.get("pooling_mode")     # newer configs may name the mode directly
        if mode in ("cls", "max", "mean", "mean_sqrt_len_tokens"):
            return ("mean_sqrt_len" if mode == "mean_sqrt_len_tokens" else mode,)
        raise ValueError(f"{path}: no pooling mode set (pooling_mode_mean_tokens, "
                         f"pooling_mode_cls_token, pooling_mode_max_tokens, ...)")
    return modes
