"""Embedding, PositionalEmbedding, sinusoidal encoding: torch parity, determinism, errors."""
import math

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn

BACKENDS = ["reference", "cpu"]


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("padding_idx", [None, 0, 5, -2])
def test_module_matches_torch(backend, padding_idx):
    torch = _torch()
    fastnn.manual_seed(0)
    m = nn.Embedding(40, 12, padding_idx=padding_idx)
    t = torch.nn.Embedding(40, 12, padding_idx=padding_idx)
    assert set(m.state_dict()) == set(t.state_dict()) == {"weight"}
    if padding_idx is not None:
        np.testing.assert_array_equal(m.weight.data[padding_idx], 0)
    m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 40, (4, 50))            # 200 draws from 40 rows: many duplicates
    dy = rng.standard_normal((4, 50, 12)).astype(np.float32)
    with fastnn.use_backend(backend):
        y = m(idx)
        assert m.backward(dy) is None
        m(idx)
        m.backward(dy)                              # grads accumulate like torch
    ty = t(torch.tensor(idx))
    ty.backward(torch.tensor(dy))
    ty = t(torch.tensor(idx))
    ty.backward(torch.tensor(dy))
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_allclose(m.weight.grad, t.weight.grad.numpy(), rtol=1e-5, atol=1e-5)
    if padding_idx is not None:
        np.testing.assert_array_equal(m.weight.grad[padding_idx], 0)


def test_init_statistics_and_repr():
    fastnn.manual_seed(2)
    m = nn.Embedding(1000, 64, padding_idx=3)
    w = m.weight.data
    assert w.dtype == np.float32 and w.shape == (1000, 64)
    assert abs(w.std() - 1) < 0.02 and abs(w.mean()) < 0.02
    assert "padding_idx=3" in repr(m)
    assert nn.Embedding(4, 3, padding_idx=-1).padding_idx == 3


def test_duplicate_indices_accumulate_deterministically():
    """Accumulated in double (the same bits for any thread count: tests/test_threads.py)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((300, 96)).astype(np.float32)
    idx = rng.integers(0, 30, (64, 40))             # heavy duplication, 2560 rows
    dy = rng.standard_normal((64, 40, 96)).astype(np.float32)
    _, ctx = F.embedding_fwd(idx, w)
    got = F.embedding_bwd(ctx, dy)
    expect = np.zeros((300, 96))
    np.add.at(expect, idx.ravel(), dy.reshape(-1, 96).astype(np.float64))
    np.testing.assert_allclose(got, expect, rtol=1e-6, atol=1e-6)   # double accumulation
    assert not got[30:].any()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int16])
def test_index_dtypes_and_views(dtype):
    w = np.arange(40, dtype=np.float64).reshape(10, 4)
    idx = np.array([[1, 9, 0], [3, 3, 2]], dtype=dtype)
    np.testing.assert_array_equal(F.embedding(idx, w), w[idx.astype(np.int64)])
    np.testing.assert_array_equal(F.embedding(idx.T, w), w[idx.T.astype(np.int64)])
    np.testing.assert_array_equal(F.embedding(idx, w[:, ::2]), w[:, ::2][idx.astype(np.int64)])
    np.testing.assert_array_equal(F.embedding([1, 2], w), w[[1, 2]])


def test_a_single_index_in_any_layout_gives_one_row():
    """A 0-d index (one token) looks up one row, shape (dim,), as torch does, in whatever
    memory it sits: a misaligned or read-only int64 scalar used to come back (1, dim) (the
    index was made contiguous with np.ascontiguousarray, which makes 0-d arrays 1-d)."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    buf = np.zeros(17, np.uint8)
    mis = np.frombuffer(buf.data, np.int64, 1, offset=1).reshape(())   # not 8-byte aligned
    mis[...] = 2
    assert not mis.flags.aligned and mis.ndim == 0
    ro = np.array(2, np.int32)
    ro.flags.writeable = False
    for idx in (np.array(2), mis, ro, np.int64(2), 2):
        np.testing.assert_array_equal(F.embedding(idx, w), w[2])
        y, ctx = F.embedding_fwd(idx, w)
        assert y.shape == (3,)
        dw = F.embedding_bwd(ctx, np.ones(3, np.float32))
        expect = np.zeros((4, 3), np.float32)
        expect[2] = 1
        np.testing.assert_array_equal(dw, expect)
        emb = nn.Embedding(4, 3)
        emb.weight.data[...] = w
        np.testing.assert_array_equal(emb(idx), w[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_indices(backend):
    w = np.zeros((10, 3), np.float32)
    with fastnn.use_backend(backend):
        with pytest.raises(IndexError, match="input contains index 10.*0 <= index < 10"):
            F.embedding(np.array([1, 10]), w)
        with pytest.raises(IndexError, match="input contains index -1"):
            F.embedding(np.array([[-1, 2]]), w)
        with pytest.raises(TypeError, match="integer"):
            F.embedding(np.array([1.0, 2.0]), w)
        with pytest.raises(TypeError, match="integer"):
            F.embedding(np.array([True, False]), w)
        with pytest.raises(TypeError, match="integer"):
            F.embedding("abc", w)
        with pytest.raises(ValueError, match="padding_idx"):
            F.embedding(np.array([1]), w, padding_idx=10)
        with pytest.raises(ValueError, match="padding_idx"):
            F.embedding(np.array([1]), w, padding_idx=-11)
        with pytest.raises(TypeError, match="padding_idx"):
            F.embedding(np.array([1]), w, padding_idx=1.5)
        with pytest.raises(ValueError, match="2-D"):
            F.embedding(np.array([1]), np.zeros(10, np.float32))
        with pytest.raises(TypeError, match="weight"):
            F.embedding(np.array([1]), np.zeros((10, 3), np.int64))
    m = nn.Embedding(5, 2)
    with pytest.raises(IndexError, match="input"):
        m(np.array([5]))
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(5, 2, padding_idx=5)
    _, ctx = F.embedding_fwd(np.array([1, 2]), w)
    with pytest.raises(ValueError, match="grad_output"):
        F.embedding_bwd(ctx, np.zeros((3, 3), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        F.embedding_bwd(ctx, np.zeros((2, 3), np.float64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_positional_embedding(backend):
    fastnn.manual_seed(4)
    m = nn.PositionalEmbedding(16, 6).double()
    assert set(m.state_dict()) == {"weight"}
    idx = np.random.default_rng(0).integers(0, 1000, (3, 10))    # values are ignored
    dy = np.random.default_rng(1).standard_normal((3, 10, 6))
    with fastnn.use_backend(backend):
        y = m(idx)
        assert m.backward(dy) is None
    assert y.shape == (3, 10, 6)
    for b in range(3):
        np.testing.assert_array_equal(y[b], m.weight.data[:10])
    expect = np.zeros((16, 6))
    expect[:10] = dy.sum(axis=0)
    np.testing.assert_allclose(m.weight.grad, expect, rtol=1e-12, atol=1e-14)
    with pytest.raises(IndexError, match="max_len"):
        m(np.zeros((2, 17), np.int64))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        m(np.zeros(5, np.int64))


def test_sinusoidal_table_formula():
    pe = F.sinusoidal_positional_encoding(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == np.float32
    for pos in (0, 1, 7, 49):
        for i in range(8):
            ang = pos / 10000 ** (2 * i / 16)
            assert abs(pe[pos, 2 * i] - math.sin(ang)) < 1e-6
            assert abs(pe[pos, 2 * i + 1] - math.cos(ang)) < 1e-6
    odd = F.sinusoidal_positional_encoding(5, 7, dtype=np.float64)
    assert odd.shape == (5, 7) and odd.dtype == np.float64
    np.testing.assert_allclose(odd[:, :6], F.sinusoidal_positional_encoding(5, 7, np.float64)[:, :6])
    np.testing.assert_allclose(odd[3, 6], math.sin(3 / 10000 ** (6 / 7)), rtol=1e-14)
    with pytest.raises(ValueError, match="seq_len"):
        F.sinusoidal_positional_encoding(-1, 4)
    with pytest.raises(TypeError, match="d_model"):
        F.sinusoidal_positional_encoding(3, 4.0)


def test_sinusoidal_matches_annotated_transformer():
    torch = _torch()
    d, max_len = 20, 60
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * -(math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    np.testing.assert_allclose(F.sinusoidal_positional_encoding(max_len, d, np.float64), pe.numpy(),
                               rtol=0, atol=1e-15)


def test_sinusoidal_module():
    m = nn.SinusoidalPositionalEncoding(8, max_len=32)
    assert list(m.parameters()) == [] and m.state_dict() == {}
    x = np.random.default_rng(5).standard_normal((2, 10, 8)).astype(np.float32)
    y = m(x)
    np.testing.assert_allclose(y, x + F.sinusoidal_positional_encoding(10, 8), rtol=1e-6)
    dy = np.ones_like(y)
    assert m.backward(dy) is dy
    np.testing.assert_allclose(m(x[0]), y[0], rtol=1e-6)      # (T, d) input
    md = nn.SinusoidalPositionalEncoding(8, max_len=32).double()
    assert md(x.astype(np.float64)).dtype == np.float64
    with pytest.raises(TypeError, match="dtype"):
        m(x.astype(np.float64))
    with pytest.raises(ValueError, match="max_len"):
        m(np.zeros((1, 33, 8), np.float32))
    with pytest.raises(ValueError, match="d_model"):
        m(np.zeros((1, 3, 7), np.float32))
    assert nn.SinusoidalPositionalEncoding(4).pe.shape == (5000, 4)


def test_sinusoidal_module_on_device():
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or the simulator) is not available here")
    m = nn.SinusoidalPositionalEncoding(8, max_len=16)
    x = np.random.default_rng(6).standard_normal((3, 5, 8)).astype(np.float32)
    ref = m(x)
    for mod in (m, nn.SinusoidalPositionalEncoding(8, max_len=16).to("cuda")):
        xd = fastnn.to_device(x)
        y = mod(xd)
        np.testing.assert_allclose(fastnn.to_numpy(y), ref, rtol=1e-6)
        np.testing.assert_array_equal(fastnn.to_numpy(xd), x)                # input not mutated
        np.testing.assert_allclose(fastnn.to_numpy(mod(fastnn.to_device(x[1]))), ref[1], rtol=1e-6)
