"""Embedding family: embedding lookup, and the sinusoidal positional encoding table."""
import math
import numbers

import numpy as np

from .._backend import dispatch
from .._validate import float_array, int_arg, is_device
from ._core import grad_in, make_ctx

__all__ = ["embedding", "embedding_fwd", "embedding_bwd", "sinusoidal_positional_encoding",
           "check_padding_idx", "index_array"]

I64 = np.dtype(np.int64)


def index_array(idx, num, name="input"):
    """``idx`` as a C-contiguous int64 array of row numbers in [0, num).

    TypeError for a non-integer dtype, IndexError (naming ``name``) for a value out of range."""
    if is_device(idx):
        dt = np.dtype(idx.dtype)
        if dt.kind not in "iu":
            raise TypeError(f"{name} must be an integer array of indices, got a device array of dtype {dt}")
        from .. import to_numpy
        _check_range(to_numpy(idx), num, name)
        return idx
    if not isinstance(idx, np.ndarray):
        if isinstance(idx, (numbers.Integral, list, tuple)) and not isinstance(idx, bool):
            idx = np.asarray(idx)
        else:
            raise TypeError(f"{name} must be an integer NumPy array of indices, got {type(idx).__name__}")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array of indices (int32/int64), got dtype {idx.dtype}")
    _check_range(idx, num, name)
    if idx.dtype != I64 or not idx.flags.c_contiguous or not idx.flags.aligned:
        idx = np.ascontiguousarray(idx, dtype=I64)
    return idx


def _check_range(idx, num, name):
    if idx.size == 0:
        return
    lo, hi = idx.min(), idx.max()
    if lo < 0 or hi >= num:
        bad = int(lo) if lo < 0 else int(hi)
        raise IndexError(f"{name} contains index {bad}, out of range for an embedding table of "
                         f"{num} rows (expected 0 <= index < {num})")


def check_padding_idx(padding_idx, num):
    """torch's rule: None, or an int in [-num, num); negative counts from the end."""
    if padding_idx is None:
        return None
    p = int_arg(padding_idx, "padding_idx")
    if not -num <= p < num:
        raise ValueError(f"padding_idx must be within num_embeddings: expected -{num} <= "
                         f"padding_idx < {num}, got {p}")
    return p + num if p < 0 else p


def embedding_fwd(idx, weight, padding_idx=None):
    """weight[idx] -> (out idx.shape + (dim,), ctx).  The padding row gets no gradient."""
    weight = float_array(weight, "weight")
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D (num_embeddings, embedding_dim), got shape "
                         f"{tuple(weight.shape)}")
    num = weight.shape[0]
    idx = index_array(idx, num, "input")
    pad = check_padding_idx(padding_idx, num)
    if is_device(weight) and not is_device(idx):
        from .. import to_device   # host token ids for a table on the device: one small copy
        idx = to_device(idx)
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
