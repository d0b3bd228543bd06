"""The short-sequence inference paths of the padding-free encoder (one sentence at a time):
varlen attention with key ranges of at most 64 rows (csrc/fnn_attn_short.h, no BLAS),
against the NumPy reference and the tiled path, at any thread count."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn._backend import backend
from harness import in_python_threads


@pytest.fixture
def restore_threads():
    old = fastnn.get_num_threads()
    yield
    fastnn.set_num_threads(old)


def _qkv(rng, T, H, E, Ev, B=1, dtype=np.float32):
    x = rng.standard_normal((B, T, H * (2 * E + Ev))).astype(dtype)
    return x[..., :H * E], x[..., H * E:2 * H * E], x[..., 2 * H * E:]


def _both(q, k, v, qs, ql, ks, kl, H, seq_first=False, scale=None, causal=False):
    E = q.shape[2] // H
    args = (q, k, v, qs, ql, ks, kl, H, seq_first, causal, scale or E ** -0.5)
    return backend("cpu").ops["varlen_attention"](*args), \
        backend("reference").ops["varlen_attention"](*args)


@pytest.mark.parametrize("lens,H,E,Ev", [
    ([25], 6, 64, 64),                      # MiniLM's one sentence
    ([5, 17, 0, 1, 64, 8, 16, 33], 4, 8, 8),  # every key-vector count, 64 = the limit
    ([3, 64, 33, 1], 2, 128, 128),          # the widest heads
    ([7, 20], 3, 16, 48),                   # Ev = 3 vectors
    ([7, 12], 3, 33, 33),                   # Ev not a multiple of 16: the plain C row
    ([64, 65, 2], 2, 64, 64),               # one range past the limit: the tiled path
])
@pytest.mark.parametrize("causal", [False, True])
def test_short_varlen_attention_matches_reference(lens, H, E, Ev, causal):
    rng = np.random.default_rng(len(lens) * 7 + E)
    lens = np.array(lens)
    starts = np.cumsum(lens) - lens
    q, k, v = _qkv(rng, int(lens.sum()), H, E, Ev)
    got, want = _both(q, k, v, starts, lens, starts, lens, H, causal=causal)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    for s, n in zip(starts, lens):          # each sequence alone through sdpa
        if n:
            one = F.scaled_dot_product_attention(
                *(a[0, s:s + n].reshape(n, H, -1).transpose(1, 0, 2) for a in (q, k, v)),
                is_causal=causal)
            np.testing.assert_allclose(got[0, s:s + n], one.transpose(1, 0, 2).reshape(n, -1),
                                       rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("seq_first", [False, True])
def test_short_varlen_attention_padded_layout(seq_first):
    """One range per batch entry, right-padded keys (k_len < L), sequence-first too."""
    rng = np.random.default_rng(3)
    N, L, H, E = 5, 12, 2, 16
    q, k, v = _qkv(rng, L, H, E, E, B=N)
    if seq_first:
        q, k, v = (np.ascontiguousarray(a.transpose(1, 0, 2)) for a in (q, k, v))
    z = np.zeros(N, np.int64)
    kl = np.array([12, 3, 1, 0, 7])
    got, want = _both(q, k, v, z, np.full(N, L), z, kl, H, seq_first, 0.3)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    bi = 3 if not seq_first else (slice(None), 3)
    assert not got[bi].any()                # no key at all: zeros


def test_short_varlen_attention_same_bits_any_thread_count(restore_threads):
    rng = np.random.default_rng(5)
    lens = np.array([40] * 24 + [64, 1, 9])   # enough work for a thread team
    starts = np.cumsum(lens) - lens
    q, k, v = _qkv(rng, int(lens.sum()), 6, 64, 64)
    outs = []
    for n in (1, 2, 3):
        fastnn.set_num_threads(n)
        outs.append(_both(q, k, v, starts, lens, starts, lens, 6)[0])
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_short_varlen_attention_one_sentence_on_the_gemm_pool(restore_threads):
    """One sentence's heads (batch 1) run on the dense family's thread pool where it is
    built (one pool per process: attention between a sentence's GEMMs finds its worker
    spinning, not an OpenMP team that would need that core): the same bits on 1 and 2
    threads, also from two Python threads at once (one finds the pool busy and runs alone)."""
    from fastnn.cpu import compiled_modules
    mods = {m.__name__.rsplit(".", 1)[-1]: m for m in compiled_modules()}
    assert mods["attention"].SHORT_ATTENTION_POOL == mods["dense"].SMALL_GEMM_POOL
    rng = np.random.default_rng(8)
    lens = np.array([25])
    q, k, v = _qkv(rng, 25, 12, 32, 32)
    z = np.zeros(1, np.int64)
    fastnn.set_num_threads(1)
    want, ref = _both(q, k, v, z, lens, z, lens, 12)
    np.testing.assert_allclose(want, ref, rtol=2e-5, atol=2e-6)
    fastnn.set_num_threads(2)
    np.testing.assert_array_equal(_both(q, k, v, z, lens, z, lens, 12)[0], want)
    for g in in_python_threads(lambda: [_both(q, k, v, z, lens, z, lens, 12)[0]
                                        for _ in range(50)]):
        for o in g:
            np.testing.assert_array_equal(o, want)


def test_short_varlen_attention_non_finite():
    """A NaN input makes its rows NaN (as torch); other sequences are untouched."""
    rng = np.random.default_rng(6)
    lens = np.array([6, 9])
    starts = np.cumsum(lens) - lens
    q, k, v = (np.array(a) for a in _qkv(rng, 15, 2, 16, 16))
    k[0, 2, 0] = np.nan                     # sequence 0, head 0
    got, want = _both(q, k, v, starts, lens, starts, lens, 2)
    assert np.isnan(got[0, :6, :16]).all()
    np.testing.assert_allclose(got[0, 6:], want[0, 6:], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(got[0, :6, 16:], want[0, :6, 16:], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("M", [1, 15, 16, 17, 25, 33, 64])
@pytest.mark.parametrize("K,N", [(384, 1152), (1536, 384), (40, 1000), (17, 4096)])
def test_packed_linear_one_row_block_any_thread_count(M, K, N, restore_threads):
    """One row block on several threads: x is transposed once (in 16 x 16 register blocks
    on AVX-512, partial blocks at both edges) and the panels shared out in 4 ranges per
    thread; the same bits at 1, 2 and 3 threads, and the float64 product within float32
    rounding."""
    rng = np.random.default_rng(M * 31 + K)
    cpu = backend("cpu").ops
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    pk = cpu["pack_linear_weight"](w, False)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    outs = []
    for n in (1, 2, 3):
        fastnn.set_num_threads(n)
        outs.append(cpu["packed_linear_infer"](x, pk, N, b, "none"))
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
