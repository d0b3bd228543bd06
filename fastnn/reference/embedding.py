"""Embedding family, reference: row gather forward, scatter-add backward.

``idx`` is a C-contiguous int64 array of valid row numbers (the functional shell checks
the range); the padding row, when given, receives no gradient.  np.add.at adds duplicate
indices one after another in index order, so the sum is deterministic.
"""
import numpy as np

from ._util import cast, f64

OPS = ("embedding", "embedding_backward")


def embedding(idx, weight, padding_idx):
    out = np.asarray(weight)[idx]                    # a fresh array of weight's dtype
    return out, (idx, weight.shape[0], padding_idx)


def embedding_backward(dy, saved):
    idx, num, padding_idx = saved
    dim = dy.shape[-1] if dy.ndim else 0
    dw = np.zeros((num, dim), np.float64)
    np.add.at(dw, idx.reshape(-1), f64(dy).reshape(idx.size, dim))  # not -1: dim may be 0
    if padding_idx is not None:
        dw[padding_idx] = 0.0
    return cast(dw, dy)
