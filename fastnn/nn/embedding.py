"""Embedding modules: Embedding, PositionalEmbedding (learned), SinusoidalPositionalEncoding."""
import numpy as np

from .. import functional as F
from .._backend import placed
from .._validate import float_array, int_arg, padding_index
from . import init
from .module import Module, Parameter

__all__ = ["Embedding", "PositionalEmbedding", "SinusoidalPositionalEncoding"]


class Embedding(Module):
    """torch.nn.Embedding: ``weight`` (num_embeddings, embedding_dim) ~ N(0, 1), the
    ``padding_idx`` row zero at init and never given a gradient.  backward(d_out) returns
    None (integer indices have no gradient) and accumulates weight.grad."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, dtype=None):
        super().__init__()
        self.num_embeddings = int_arg(num_embeddings, "num_embeddings", 0)
        self.embedding_dim = int_arg(embedding_dim, "embedding_dim", 0)
        self.padding_idx = padding_index(padding_idx, self.num_embeddings)
        self.weight = Parameter(init.zeros((self.num_embeddings, self.embedding_dim),
                                           dtype or "float32"))
        self.reset_parameters()

    def reset_parameters(self):
        """torch's init, drawn again, in place: N(0, 1), the padding_idx row zero."""
        init.normal_(self.weight)
        w = self.weight.data
        if self.padding_idx is not None and w[self.padding_idx].any():
            if type(w) is np.ndarray:
                w[self.padding_idx] = 0
            else:                                # a table on the device
                h = placed(w).to_host(w)
                h[self.padding_idx] = 0
                init.write_values(w, h)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """torch.nn.Embedding.from_pretrained: an Embedding whose ``weight`` is a copy of the
        2-D float array ``embeddings`` (num_embeddings, embedding_dim), its dtype kept
        (integer data becomes float32).  ``freeze=True`` sets ``weight.requires_grad =
        False``: backward then accumulates no gradient and optimizers leave the table as it
        is.  ``padding_idx`` marks the row that never gets a gradient; as in torch, its
        values are the given ones, not zeroed.  max_norm, scale_grad_by_freq and sparse are
        torch options this Embedding does not have: only their defaults are accepted."""
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise ValueError("Embedding.from_pretrained: max_norm, scale_grad_by_freq and "
                             "sparse are not supported (leave them at None / False)")
        w = Parameter(embeddings, requires_grad=not freeze)
        if w.ndim != 2:
            raise ValueError(f"embeddings must be 2-D (num_embeddings, embedding_dim), got "
                             f"shape {tuple(w.shape)}")
        with init.skip_init():
            m = cls(w.shape[0], w.shape[1], padding_idx=padding_idx, dtype=w.dtype)
        m.weight = w
        return m

    def forward(self, idx):
        # host token ids for a table on the device: F.embedding_fwd moves them
        y, ctx = F.embedding_fwd(idx, self.weight.data, self.padding_idx)
        self._keep(ctx)
        return y

    def backward(self, dy):
        ctx = self._take()
        if self.weight.requires_grad:      # a frozen table (from_pretrained): no gradient
            self.weight.accumulate_grad(F.embedding_bwd(ctx, dy))
        return None

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class PositionalEmbedding(Module):
    """Learned positional embedding: for a (B, T) input (only its shape is used) returns
    weight[0..T-1] for every batch row, (B, T, embedding_dim); ``weight`` (max_len,
    embedding_dim) ~ N(0, 1) like Embedding.  backward accumulates weight.grad (summed
    over the batch) and returns None."""

    def __init__(self, max_len, embedding_dim, dtype=None):
        super().__init__()
        self.max_len = int_arg(max_len, "max_len", 0)
        self.embedding_dim = int_arg(embedding_dim, "embedding_dim", 0)
        self.weight = Parameter(init.zeros((self.max_len, self.embedding_dim), dtype or "float32"))
        self.reset_parameters()

    def reset_parameters(self):
        """N(0, 1), drawn again, in place."""
        init.normal_(self.weight)

    def forward(self, idx):
        shape = tuple(getattr(idx, "shape", np.shape(idx)))
        if len(shape) != 2:
            raise ValueError(f"PositionalEmbedding expects a (B, T) input, got shape {shape}")
        B, T = shape
        if T > self.max_len:
            raise IndexError(f"input has T = {T} positions but the table has max_len = {self.max_len}")
        pos = np.broadcast_to(np.arange(T, dtype=np.int64), (B, T))
        y, ctx = F.embedding_fwd(pos, self.weight.data)   # moves pos to a device table
        self._keep(ctx)
        return y

    def backward(self, dy):
        ctx = self._take()
        if self.weight.requires_grad:      # a frozen table: no gradient made
            self.weight.accumulate_grad(F.embedding_bwd(ctx, dy))
        return None

    def extra_repr(self):
        return f"{self.max_len}, {self.embedding_dim}"


class SinusoidalPositionalEncoding(Module):
    """Adds the fixed sinusoidal table (F.sinusoidal_positional_encoding) to a (B, T, d_model)
    (or (T, d_model)) input; T <= max_len.  No parameters; the table is a non-persistent
    buffer ``pe`` (max_len, d_model) (moved by ``.to("cuda")``; device inputs are added on
    the device).  backward(d_out) returns d_out."""

    def __init__(self, d_model, max_len=5000, dtype=None):
        super().__init__()
        self.d_model = int_arg(d_model, "d_model", 1)
        self.max_len = int_arg(max_len, "max_len", 1)
        self.register_buffer("pe", F.sinusoidal_positional_encoding(self.max_len, self.d_model,
                                                                    dtype or np.float32),
                             persistent=False)

    def forward(self, x):
        x = float_array(x, "input")
        shape = tuple(x.shape)
        if len(shape) < 2 or shape[-1] != self.d_model:
            raise ValueError(f"input must have shape (B, T, d_model) or (T, d_model) with "
                             f"d_model = {self.d_model}, got {shape}")
        T = shape[-2]
        if T > self.max_len:
            raise ValueError(f"input has T = {T} positions but the table has max_len = {self.max_len}")
        if np.dtype(x.dtype) != np.dtype(self.pe.dtype):
            raise TypeError(f"input has dtype {x.dtype} but the table has dtype {self.pe.dtype}; "
                            f"convert the module with .double()/.float()")
        self._keep(shape)
        pe = self.pe[:T]
        return placed(x, pe).add(x, pe)     # the (T, d_model) table over the batch

    def backward(self, dy):
        shape = self._take()
        if tuple(np.shape(dy)) != shape:
            raise ValueError(f"grad_output must have the forward output's shape {shape}, "
                             f"got {tuple(np.shape(dy))}")
        return dy

    def extra_repr(self):
        return f"d_model={self.d_model}, max_len={self.max_len}"
