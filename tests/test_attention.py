"""scaled_dot_product_attention: options, tile paths, determinism, memory, bad input."""
import tracemalloc

import numpy as np
import pytest

import fastnn
import fastnn.functional as F


def _qkv(rng, B, L, S, E, Ev, dt=np.float32):
    return (rng.standard_normal(B + (L, E)).astype(dt), rng.standard_normal(B + (S, E)).astype(dt),
            rng.standard_normal(B + (S, Ev)).astype(dt))


def _fb(backend, q, k, v, do, **kw):
    with fastnn.use_backend(backend):
        o, ctx = F.scaled_dot_product_attention_fwd(q, k, v, **kw)
        return (o,) + tuple(F.scaled_dot_product_attention_bwd(ctx, do))


@pytest.mark.parametrize("B,L,S,causal", [
    ((2, 3), 200, 300, False),     # few (b, h): two-pass backward, partial tiles
    ((2, 3), 300, 170, True),      # causal, L > S
    ((20,), 130, 260, True),       # many (b, h): one task per (b, h); causal, L < S
    ((17,), 129, 129, False),
])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_multi_tile_matches_reference(B, L, S, causal, dt):
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, B, L, S, 16, 8, dt)
    do = rng.standard_normal(B + (L, 8)).astype(dt)
    ref = _fb("reference", q, k, v, do, is_causal=causal)
    got = _fb("cpu", q, k, v, do, is_causal=causal)
    t = dict(rtol=2e-4, atol=2e-5) if dt == np.float32 else dict(rtol=1e-9, atol=1e-11)
    for a, b, n in zip(got, ref, ("out", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, err_msg=n, **t)


def test_masks_across_tiles():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, (2, 2), 150, 260, 8, 8)
    do = rng.standard_normal((2, 2, 150, 8)).astype(np.float32)
    bmask = rng.random((2, 1, 150, 260)) > 0.5
    bmask[1, 0, 7] = False                                  # a fully masked row
    fmask = rng.standard_normal((260,)).astype(np.float32)  # broadcast over rows
    for m in (bmask, fmask):
        ref = _fb("reference", q, k, v, do, attn_mask=m)
        got = _fb("cpu", q, k, v, do, attn_mask=m)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
    out = got[0] if m is fmask else None
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=bmask)
    assert np.all(o[1, :, 7] == 0), "a row with every key masked gives zeros, as torch"
    assert np.isfinite(o).all()


def test_fully_masked_row_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, (1,), 4, 5, 3, 2, np.float64)
    m = np.ones((4, 5), bool)
    m[1] = False
    do = rng.standard_normal((1, 4, 2))
    o, dq, dk, dv = _fb("cpu", q, k, v, do, attn_mask=m)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(m))
    to.backward(torch.tensor(do))
    np.testing.assert_allclose(o, to.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(dq, tq.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(dk, tk.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(dv, tv.grad.numpy(), atol=1e-12)
    assert np.all(o[0, 1] == 0)


@pytest.mark.parametrize("B", [(2, 3), (20,)])
def test_same_result_at_any_thread_count(B):
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng, B, 300, 300, 16, 16)
    do = rng.standard_normal(B + (300, 16)).astype(np.float32)
    old = fastnn.get_num_threads()
    res = []
    try:
        for n in (1, 2, 3):
            fastnn.set_num_threads(n)
            fastnn.manual_seed(5)
            res.append(_fb("cpu", q, k, v, do, is_causal=True, dropout_p=0.2))
    finally:
        fastnn.set_num_threads(old)
    for r in res[1:]:
        for a, b in zip(r, res[0]):
            np.testing.assert_array_equal(a, b)


def test_dropout_mask_is_the_reference_mask():
    """The cpu kernel drops exactly the weights the reference drops (same Philox elements),
    and the drop rate is p."""
    rng = np.random.default_rng(6)
    B, L, S = (2, 3), 40, 150
    q, k, v = _qkv(rng, B, L, S, 4, 4, np.float64)
    q *= 0.0                                    # uniform weights 1/S
    v = np.broadcast_to(np.eye(S)[None, None], B + (S, S)).copy()   # out = the weights
    outs = []
    for be in ("reference", "cpu"):
        fastnn.manual_seed(9)
        with fastnn.use_backend(be):
            outs.append(F.scaled_dot_product_attention(q, k, v, dropout_p=0.4))
    np.testing.assert_array_equal(outs[0] == 0, outs[1] == 0)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-12)
    kept = outs[1] != 0
    assert abs(kept.mean() - 0.6) < 0.02
    np.testing.assert_allclose(outs[1][kept], 1 / S / 0.6, rtol=1e-12)
    # the mask is element ((bh * L + i) * S + j) of the call's Philox stream
    fastnn.manual_seed(9)
    seed, offset = fastnn._random.next_offset()
    u = fastnn._random.philox_uniform(6 * L * S, seed, offset).reshape(B + (L, S))
    np.testing.assert_array_equal(kept, u >= 0.4)


def test_dropout_p_one_and_successive_calls_differ():
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, (2,), 5, 6, 4, 3)
    assert np.all(F.scaled_dot_product_attention(q, k, v, dropout_p=1.0) == 0)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not np.array_equal(a, b)


def test_memory_is_o_tile_at_2048():
    """Forward + backward at T = 2048 allocates O(T) per (b, h), never a T x T matrix."""
    rng = np.random.default_rng(8)
    B, T, E = (1, 2), 2048, 32
    q, k, v = _qkv(rng, B, T, T, E, E)
    do = rng.standard_normal(B + (T, E)).astype(np.float32)
    io = 7 * q.nbytes                      # q, k, v, out, dq, dk, dv
    tracemalloc.start()
    try:
        _fb("cpu", q, k, v, do, is_causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    one_score_matrix = T * T * 4
    assert peak < io + one_score_matrix // 4, (peak, io)


def test_bad_input():
    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng, (2,), 4, 5, 3, 2)
    with pytest.raises(ValueError, match="key"):
        F.scaled_dot_product_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match="value"):
        F.scaled_dot_product_attention(q, k, v[:, :4])
    with pytest.raises(ValueError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 4), bool))
    with pytest.raises(ValueError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((3, 4, 5), bool))
    with pytest.raises(TypeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 5), np.int32))
    with pytest.raises(TypeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=[[True] * 5] * 4)
    with pytest.raises(ValueError, match="is_causal"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 5), bool), is_causal=True)
    with pytest.raises(ValueError, match="dropout_p"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match="key"):
        F.scaled_dot_product_attention(q, k.astype(np.float64), v)
    with pytest.raises(TypeError, match="query"):
        F.scaled_dot_product_attention(q.astype(np.int32), k, v)
    with pytest.raises(ValueError, match="query"):
        F.scaled_dot_product_attention(q[0, 0], k, v)
    with pytest.raises(ValueError, match="batch"):
        F.scaled_dot_product_attention(q, np.concatenate([k, k[:1]]), v)
    with pytest.raises(TypeError, match="scale"):
        F.scaled_dot_product_attention(q, k, v, scale="1")
    o, ctx = F.scaled_dot_product_attention_fwd(q, k, v)
    with pytest.raises(ValueError, match="grad_output"):
        F.scaled_dot_product_attention_bwd(ctx, o[:, :3])


def test_zero_length_keys_and_views():
    rng = np.random.default_rng(10)
    q, k, v = _qkv(rng, (2,), 3, 0, 4, 2)
    o = F.scaled_dot_product_attention(q, k, v)
    assert o.shape == (2, 3, 2) and np.all(o == 0)
    q, k, v = _qkv(rng, (2, 3), 6, 7, 4, 2)
    qt = np.ascontiguousarray(q.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)   # strided view
    np.testing.assert_allclose(F.scaled_dot_product_attention(qt, k, v),
                               F.scaled_dot_product_attention(q, k, v), rtol=1e-6)
