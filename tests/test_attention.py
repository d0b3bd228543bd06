"""scaled_dot_product_attention: options, tile paths, determinism, memory, bad input."""
import tracemalloc

import numpy as np
import pytest

import fastnn
import fastnn.functional as F


@pytest.fixture
def restore_threads():
    old = fastnn.get_num_threads()
    yield
    fastnn.set_num_threads(old)


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


# ---------------------------------------------------------------- fused QKV projections
def _split_views(qkv, E):
    return tuple(qkv[..., i * E:(i + 1) * E] for i in range(3))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("N,H,T,causal", [
    (3, 6, 300, False),     # 18 (b, h): one task per pair, 256-row tiles + a partial one
    (1, 2, 270, False),     # few pairs: two-pass backward
    (2, 8, 200, True),
])
def test_fused_qkv_views_are_read_in_place(batch_first, N, H, T, causal):
    """q, k, v as column views of one (.., 3E) projection: no copies, gradients come back
    as the blocks of one array, and everything equals the contiguous path."""
    from fastnn.functional.attention import joined
    rng = np.random.default_rng(11)
    E = 4 * H
    shape = (N, T, 3 * E) if batch_first else (T, N, 3 * E)
    qkv = rng.standard_normal(shape).astype(np.float32)
    do = rng.standard_normal(shape[:2] + (E,)).astype(np.float32)
    mask, idx = F.attention_mask(None, rng.random((N, T)) < 0.2, N, H, T, T, np.float32)
    views = _split_views(qkv, E)
    copies = tuple(np.ascontiguousarray(a) for a in views)
    o1, c1 = F.multi_head_attention_fwd(*views, H, batch_first, mask, idx, 0.0, causal)
    assert c1[1][0] is views[0], "the view is read in place"
    g1 = F.multi_head_attention_bwd(c1, do)
    j = joined(*g1)
    assert j is not None and j.shape == qkv.shape
    o2, c2 = F.multi_head_attention_fwd(*copies, H, batch_first, mask, idx, 0.0, causal)
    g2 = F.multi_head_attention_bwd(c2, do)
    assert joined(*g2) is None
    np.testing.assert_array_equal(o1, o2)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)
    with fastnn.use_backend("reference"):
        o3, c3 = F.multi_head_attention_fwd(*views, H, batch_first, mask, idx, 0.0, causal)
        g3 = F.multi_head_attention_bwd(c3, do)
    for a, b in zip((o1,) + tuple(g1), (o3,) + tuple(g3)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_odd_strides_are_copied():
    """Views the kernels cannot read in place (zero or negative row strides) are copied."""
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((2, 9, 8)).astype(np.float64) for _ in range(3))
    do = rng.standard_normal((2, 9, 8))
    kb = np.broadcast_to(k[:, :1], k.shape)        # row stride 0
    vr = v[:, ::-1]                                # negative row stride
    got = F.multi_head_attention_fwd(q, kb, vr, 2, True, None, None, 0.0, True)
    ref = F.multi_head_attention_fwd(q, np.ascontiguousarray(kb), np.ascontiguousarray(vr),
                                     2, True, None, None, 0.0, True)
    np.testing.assert_array_equal(got[0], ref[0])
    for a, b in zip(F.multi_head_attention_bwd(got[1], do), F.multi_head_attention_bwd(ref[1], do)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("batch_first", [True, False])
def test_mha_self_attention_multi_tile_matches_torch(batch_first):
    """The fused self-attention path at sizes that cross the kernels' tiles, float32,
    with a key padding mask; and bit-identical at 1 and 2 threads."""
    torch = pytest.importorskip("torch")
    import fastnn.nn as nn
    rng = np.random.default_rng(13)
    N, T, E, H = 3, 300, 48, 6
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
    m = nn.MultiheadAttention(E, H, batch_first=batch_first)
    m.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    shape = (N, T, E) if batch_first else (T, N, E)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    kpm = rng.random((N, T)) < 0.1
    res = []
    old = fastnn.get_num_threads()
    try:
        for nt in (1, 2):
            fastnn.set_num_threads(nt)
            m.zero_grad()
            y, _ = m(x, x, x, key_padding_mask=kpm)
            dq, dk, dv = m.backward(dy)
            res.append((y, dq + dk + dv, m.in_proj_weight.grad.copy(),
                        m.in_proj_bias.grad.copy(), m.out_proj.weight.grad.copy()))
    finally:
        fastnn.set_num_threads(old)
    for a, b in zip(*res):
        np.testing.assert_array_equal(a, b)
    tx = torch.tensor(x, requires_grad=True)
    ty = tm(tx, tx, tx, key_padding_mask=torch.tensor(kpm), need_weights=False)[0]
    ty.backward(torch.tensor(dy))
    want = (ty.detach().numpy(), tx.grad.numpy(), tm.in_proj_weight.grad.numpy(),
            tm.in_proj_bias.grad.numpy(), tm.out_proj.weight.grad.numpy())
    for a, b, n in zip(res[0], want, ("y", "dx", "dW_in", "db_in", "dW_out")):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-4, err_msg=n)


def test_fused_qkv_views_on_the_cuda_backend():
    """Host column views handed to the cuda backend (in force) give the cpu results."""
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or the simulator) is not available here")
    from fastnn.cuda import to_numpy
    rng = np.random.default_rng(14)
    qkv = rng.standard_normal((2, 5, 24))
    views = _split_views(qkv, 8)
    do = rng.standard_normal((2, 5, 8))
    o1, c1 = F.multi_head_attention_fwd(*views, 2, True, None, None, 0.0, True)
    g1 = F.multi_head_attention_bwd(c1, do)
    with fastnn.use_backend("cuda"):
        o2, c2 = F.multi_head_attention_fwd(*views, 2, True, None, None, 0.0, True)
        g2 = F.multi_head_attention_bwd(c2, do)
    for a, b in zip((o2,) + tuple(g2), (o1,) + tuple(g1)):
        np.testing.assert_allclose(to_numpy(a), b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal,dropout", [(True, 0.0), (False, 0.0), (True, 0.3)])
def test_few_pairs_backward_same_bits_for_any_thread_count(causal, dropout):
    """Few (b, h) pairs: the key blocks of a pair are split over several tasks whose dQ
    partials are added in a fixed order -- the bits do not depend on the thread count,
    and every gradient matches the reference."""
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, (1, 3), 700, 650, 16, 8)
    do = rng.standard_normal((1, 3, 700, 8)).astype(np.float32)
    kw = dict(is_causal=causal, dropout_p=dropout)
    old = fastnn.get_num_threads()
    runs = []
    try:
        for nt in (1, 2, 3):
            fastnn.set_num_threads(nt)
            fastnn.manual_seed(5)
            runs.append(_fb("cpu", q, k, v, do, **kw))
    finally:
        fastnn.set_num_threads(old)
    for got in runs[1:]:
        for a, b in zip(got, runs[0]):
            np.testing.assert_array_equal(a, b)
    if dropout == 0.0:
        ref = _fb("reference", q, k, v, do, **kw)
        for a, b, n in zip(runs[0], ref, ("out", "dq", "dk", "dv")):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5, err_msg=n)


@pytest.mark.parametrize("B,L,S,E,Ev,causal", [
    ((16, 4), 64, 64, 32, 32, True),     # the GPT demo's layer
    ((2, 3), 40, 64, 16, 48, True),      # causal, L < S: keys past the last query get 0
    ((2, 1), 64, 20, 64, 16, True),      # causal, L > S
    ((3, 2), 17, 33, 48, 32, False),
    ((1, 1), 1, 1, 16, 16, True),
    ((2, 2), 64, 64, 64, 64, False),
    ((2, 2), 30, 65, 32, 32, True),      # S past the whole-pair kernels: tiles
])
def test_short_training_attention_matches_reference(B, L, S, E, Ev, causal, restore_threads):
    """Float32 sequences of <= 64 queries and keys with head widths that are multiples of
    16 (the GPT demo's 64 x 32 heads) run forward and backward as one kernel per (b, h)
    pair in the avx512 and avx2 builds: every output and gradient matches the reference,
    and the bits do not depend on the thread count."""
    from fastnn.cpu import compiled_modules
    mod = next(m for m in compiled_modules() if m.__name__.rsplit(".", 1)[-1] == "attention")
    assert mod.SHORT_TRAIN == (mod.__name__.split(".")[-2] in ("avx512", "avx2"))
    rng = np.random.default_rng(12)
    q, k, v = _qkv(rng, B, L, S, E, Ev)
    do = rng.standard_normal(B + (L, Ev)).astype(np.float32)
    ref = _fb("reference", q.astype(np.float64), k.astype(np.float64),
              v.astype(np.float64), do.astype(np.float64), is_causal=causal)
    runs = []
    for nt in (1, 2, 3):
        fastnn.set_num_threads(nt)
        runs.append(_fb("cpu", q, k, v, do, is_causal=causal))
    for got in runs[1:]:
        for a, b in zip(got, runs[0]):
            np.testing.assert_array_equal(a, b)
    for a, b, n in zip(runs[0], ref, ("out", "dq", "dk", "dv")):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5, err_msg=n)


@pytest.mark.parametrize("batch_first", [True, False])
def test_short_training_attention_nan_and_views(batch_first):
    """A NaN query makes its row's output and dq NaN, as the tiled path and torch; q, k, v
    read in place as column blocks of one fused projection (batch- or sequence-first)
    give the reference's values."""
    rng = np.random.default_rng(13)
    B, T, H, E = 2, 48, 2, 32
    shape = (B, T) if batch_first else (T, B)
    qkv = rng.standard_normal(shape + (3 * H * E,)).astype(np.float32)
    q, k, v = qkv[..., :H * E], qkv[..., H * E:2 * H * E], qkv[..., 2 * H * E:]
    do = rng.standard_normal(shape + (H * E,)).astype(np.float32)
    with fastnn.use_backend("cpu"):
        o, ctx = F.multi_head_attention_fwd(q, k, v, H, batch_first, None, None, 0.0, True)
        got = (o,) + tuple(F.multi_head_attention_bwd(ctx, do))[:3]
    with fastnn.use_backend("reference"):
        o, ctx = F.multi_head_attention_fwd(q, k, v, H, batch_first, None, None, 0.0, True)
        ref = (o,) + tuple(F.multi_head_attention_bwd(ctx, do))[:3]
    for a, b, n in zip(got, ref, ("out", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5, err_msg=n)
    qn = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    kn, vn = qn + 1, qn - 1
    qn[0, 0, 5, 3] = np.nan
    d8 = np.ones((1, 1, 8, 16), np.float32)
    o, dq, dk, dv = _fb("cpu", qn, kn, vn, d8, is_causal=True)
    assert np.isnan(o[0, 0, 5]).all() and np.isfinite(np.delete(o[0, 0], 5, 0)).all()
    assert np.isnan(dq[0, 0, 5]).all()


@pytest.mark.parametrize("causal", [True, False])
def test_short_training_attention_dropout_is_the_reference_dropout(causal, restore_threads):
    """Dropout in the whole-pair kernels: the tiled path's Philox elements ((bh * L + i) * S
    + j of the call's stream), so forward and every gradient match the reference run
    with the same seed, at any thread count; successive calls draw new masks."""
    rng = np.random.default_rng(14)
    B, L, S, E = (3, 2), 48, 64, 32
    q, k, v = _qkv(rng, B, L, S, E, E)
    do = rng.standard_normal(B + (L, E)).astype(np.float32)
    kw = dict(is_causal=causal, dropout_p=0.3)
    fastnn.manual_seed(21)
    ref = _fb("reference", *(a.astype(np.float64) for a in (q, k, v, do)), **kw)
    runs = []
    for nt in (1, 2):
        fastnn.set_num_threads(nt)
        fastnn.manual_seed(21)
        runs.append(_fb("cpu", q, k, v, do, **kw))
    for a, b in zip(runs[1], runs[0]):
        np.testing.assert_array_equal(a, b)
    for a, b, n in zip(runs[0], ref, ("out", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5, err_msg=n)
    fastnn.manual_seed(21)
    no_drop = _fb("cpu", q, k, v, do, is_causal=causal)
    assert not np.allclose(no_drop[0], runs[0][0], atol=1e-3)
    first = _fb("cpu", q, k, v, do, **kw)[0]
    assert not np.array_equal(_fb("cpu", q, k, v, do, **kw)[0], first)
    p1 = _fb("cpu", q, k, v, do, is_causal=causal, dropout_p=1.0)
    for a in p1:
        assert not np.any(a), "p = 1 drops every weight: zero output and gradients"
