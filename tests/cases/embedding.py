import numpy as np

import fastnn.functional as F
from fastnn import nn
from harness import ModuleCase, OpCase


def _emb(num, dim, idx_shape, padding_idx=None, dups=False):
    def make(rng, dt):
        w = rng.standard_normal((num, dim)).astype(dt)
        idx = rng.integers(0, num, idx_shape)
        if dups and idx.size > 3:
            idx.reshape(-1)[:3] = 1            # the same row several times
        if padding_idx is not None and idx.size:
            idx.reshape(-1)[-1] = padding_idx % num
        return (idx, w, padding_idx), {}
    return make


def _torch_emb(torch, idx, w, padding_idx):
    return torch.nn.functional.embedding(idx, w, padding_idx)


CASES = [
    OpCase("embedding_2d_idx", F.embedding_fwd, F.embedding_bwd, _emb(11, 6, (3, 5), dups=True),
           (1,), _torch_emb),
    # padding_idx: the padding row is read by the forward but gets no gradient (torch's rule),
    # so central differences disagree there by design; the torch comparison checks these.
    OpCase("embedding_1d_idx_padding", F.embedding_fwd, F.embedding_bwd, _emb(7, 4, (9,), 2, True),
           (1,), _torch_emb, gradcheck=False),
    OpCase("embedding_neg_padding", F.embedding_fwd, F.embedding_bwd, _emb(6, 5, (2, 2, 3), -1, True),
           (1,), _torch_emb, gradcheck=False),
    OpCase("embedding_scalar_idx", F.embedding_fwd, F.embedding_bwd, _emb(5, 3, ()), (1,), _torch_emb),
    OpCase("embedding_empty_idx", F.embedding_fwd, F.embedding_bwd, _emb(5, 3, (0, 4)), (1,),
           _torch_emb, gradcheck=False),
]


def _idx(B, T, num):
    return lambda rng, dt: (rng.integers(0, num, (B, T)),)


def _build(ctor):
    def build(dt):
        m = ctor()
        return m.double() if np.dtype(dt) == np.float64 else m
    return build


MODULE_CASES = [
    ModuleCase("embedding_module_padding", _build(lambda: nn.Embedding(9, 4, padding_idx=0)),
               _idx(3, 6, 9)),
    ModuleCase("positional_embedding", _build(lambda: nn.PositionalEmbedding(8, 5)), _idx(3, 6, 50)),
]
