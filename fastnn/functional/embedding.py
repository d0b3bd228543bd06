"""Embedding family: embedding lookup, and the sinusoidal positional encoding table."""
import math

import numpy as np

from .._backend import dispatch, placed
from .._validate import float_array, index_array, int_arg, padding_index
from ._core import grad_in, make_ctx

__all__ = ["embedding", "embedding_fwd", "embedding_bwd", "sinusoidal_positional_encoding"]


def embedding_fwd(idx, weight, padding_idx=None):
    """weight[idx] -> (out idx.shape + (dim,), ctx).  The padding row gets no gradient."""
    weight = float_array(weight, "weight")
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D (num_embeddings, embedding_dim), got shape "
                         f"{tuple(weight.shape)}")
    num = weight.shape[0]
    idx = index_array(idx, num, "input")
    pad = padding_index(padding_idx, num)
    # host token ids for a table on the device: one small copy (none on the host)
    idx = placed(weight, idx).to_backend(idx)
    be = dispatch(idx, weight)
    out, saved = be.embedding(idx, weight, pad)
    return out, make_ctx(be, saved, out)


def embedding_bwd(ctx, dy):
    """-> d_weight (num_embeddings, embedding_dim): duplicate indices accumulate (in a fixed
    order), the padding row stays zero."""
    be, saved, dy = grad_in(ctx, dy)
    return be.embedding_backward(dy, saved)


def embedding(idx, weight, padding_idx=None):
    """Look up rows of ``weight`` (num_embeddings, embedding_dim) by the integer ``idx``."""
    return embedding_fwd(idx, weight, padding_idx)[0]


def sinusoidal_positional_encoding(seq_len, d_model, dtype=np.float32):
    """The Transformer's table (seq_len, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d_model)),
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)); computed in float64, returned in ``dtype``."""
    seq_len = int_arg(seq_len, "seq_len", 0)
    d_model = int_arg(d_model, "d_model", 0)
    dt = np.dtype(dtype)
    if dt.kind != "f" or dt.itemsize not in (4, 8):
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    pos = np.arange(seq_len, dtype=np.float64)[:, None]
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(10000.0) / max(d_model, 1)))
    pe = np.empty((seq_len, d_model), np.float64)
    pe[:, 0::2] = np.sin(pos * div)
    pe[:, 1::2] = np.cos(pos * div[: d_model // 2])
    return pe.astype(dt)
