from fastnn import nn
from harness import ModuleCase, in_dtype
from reliability_registry import op


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


embedding = op("embedding")
CASES = [
    embedding.case("embedding_2d_idx", _emb(11, 6, (3, 5), dups=True)),
    # padding_idx: the padding row is read by the forward but gets no gradient (torch's rule),
    # so central differences disagree there by design; the torch comparison checks these.
    embedding.case("embedding_1d_idx_padding", _emb(7, 4, (9,), 2, True), gradcheck=False),
    embedding.case("embedding_neg_padding", _emb(6, 5, (2, 2, 3), -1, True), gradcheck=False),
    embedding.case("embedding_scalar_idx", _emb(5, 3, ())),
    embedding.case("embedding_empty_idx", _emb(5, 3, (0, 4)), gradcheck=False),
]


def _idx(B, T, num):
    return lambda rng, dt: (rng.integers(0, num, (B, T)),)


MODULE_CASES = [
    ModuleCase("embedding_module_padding", in_dtype(lambda: nn.Embedding(9, 4, padding_idx=0)),
               _idx(3, 6, 9)),
    ModuleCase("positional_embedding", in_dtype(lambda: nn.PositionalEmbedding(8, 5)), _idx(3, 6, 50)),
]
