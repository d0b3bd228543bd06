"""Attention and transformer layers against torch (weights loaded from torch state dicts)."""
import numpy as np
import pytest

import fastnn
import fastnn.nn as nn

torch = pytest.importorskip("torch")
TOL = dict(rtol=1e-8, atol=1e-10)


def _load(m, tm):
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


def _t(a):
    return torch.tensor(a, requires_grad=True)


def _grads_match(m, tm, prefix=""):
    tg = {n: p.grad for n, p in tm.named_parameters()}
    names = dict(m.named_parameters())
    assert set(names) == set(tg), (sorted(names), sorted(tg))
    for n, p in names.items():
        np.testing.assert_allclose(p.grad, tg[n].numpy(), err_msg=prefix + n, **TOL)


# ---------------------------------------------------------------- MultiheadAttention
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", [None, "bool", "float"])
def test_mha_matches_torch(batch_first, masks):
    rng = np.random.default_rng(0)
    E, H, N, L, S = 12, 3, 2, 5, 7
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first).double()
    with torch.no_grad():
        tm.in_proj_bias.normal_()
        tm.out_proj.bias.normal_()
    m = nn.MultiheadAttention(E, H, batch_first=batch_first).double()
    _load(m, tm)
    shp = (lambda T: (N, T, E)) if batch_first else (lambda T: (T, N, E))
    q, k, v = rng.standard_normal(shp(L)), rng.standard_normal(shp(S)), rng.standard_normal(shp(S))
    am = kp = None
    if masks == "bool":
        am = rng.random((L, S)) < 0.3
        kp = np.zeros((N, S), bool)
        kp[1, :3] = True
    elif masks == "float":
        am = rng.standard_normal((N * H, L, S))
        kp = rng.standard_normal((N, S))
    y, w = m(q, k, v, key_padding_mask=kp, attn_mask=am)
    assert w is None
    dy = rng.standard_normal(y.shape)
    dq, dk, dv = m.backward(dy)
    tq, tk, tv = _t(q), _t(k), _t(v)
    ty, _ = tm(tq, tk, tv, key_padding_mask=None if kp is None else torch.tensor(kp),
               attn_mask=None if am is None else torch.tensor(am), need_weights=False)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    for a, t in zip((dq, dk, dv), (tq, tk, tv)):
        np.testing.assert_allclose(a, t.grad.numpy(), **TOL)
    _grads_match(m, tm)


def test_mha_self_attention_kdim_vdim_causal_and_weights():
    rng = np.random.default_rng(1)
    E, H, N, L = 8, 2, 3, 6
    # self-attention: pass x three times, sum the three gradients
    tm = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
    m = nn.MultiheadAttention(E, H, batch_first=True).double()
    _load(m, tm)
    x = rng.standard_normal((N, L, E))
    causal = np.triu(np.ones((L, L), bool), 1)
    y, w = m(x, x, x, attn_mask=causal, need_weights=True, is_causal=True)
    dy = rng.standard_normal(y.shape)
    dx = sum(m.backward(dy))
    tx = _t(x)
    ty, tw = tm(tx, tx, tx, attn_mask=torch.tensor(causal), need_weights=True)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(w, tw.detach().numpy(), **TOL)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **TOL)
    _grads_match(m, tm)
    # is_causal alone applies the causal mask
    y2, _ = m(x, x, x, is_causal=True)
    np.testing.assert_allclose(y2, y, **TOL)
    # kdim / vdim: separate projection weights, torch's names
    tm = torch.nn.MultiheadAttention(E, H, kdim=5, vdim=3, bias=False).double()
    m = nn.MultiheadAttention(E, H, kdim=5, vdim=3, bias=False).double()
    assert list(m.state_dict()) == list(tm.state_dict())
    _load(m, tm)
    q, k, v = rng.standard_normal((L, N, E)), rng.standard_normal((4, N, 5)), rng.standard_normal((4, N, 3))
    y, _ = m(q, k, v)
    dy = rng.standard_normal(y.shape)
    grads = m.backward(dy)
    tq, tk, tv = _t(q), _t(k), _t(v)
    ty, _ = tm(tq, tk, tv, need_weights=False)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    for a, t in zip(grads, (tq, tk, tv)):
        np.testing.assert_allclose(a, t.grad.numpy(), **TOL)
    _grads_match(m, tm)


def test_mha_unbatched_and_float32_and_state_names():
    rng = np.random.default_rng(2)
    tm = torch.nn.MultiheadAttention(8, 4)
    m = nn.MultiheadAttention(8, 4)
    assert list(m.state_dict()) == list(tm.state_dict())
    assert m.in_proj_weight.shape == (24, 8) and np.all(m.in_proj_bias.data == 0)
    assert np.all(m.out_proj.bias.data == 0)
    bound = np.sqrt(6 / (8 + 24))
    assert np.abs(m.in_proj_weight.data).max() <= bound
    _load(m, tm)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    y, _ = m(x, x, x)
    assert y.shape == (5, 8) and y.dtype == np.float32
    tx = torch.tensor(x, requires_grad=True)
    ty, _ = tm(tx, tx, tx, need_weights=False)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = sum(m.backward(dy))
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_mha_dropout_and_eval():
    rng = np.random.default_rng(3)
    m = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    fastnn.manual_seed(1)
    a, _ = m(x, x, x)
    fastnn.manual_seed(1)
    b, _ = m(x, x, x)
    np.testing.assert_array_equal(a, b)
    c, _ = m(x, x, x)
    assert not np.array_equal(a, c)
    m.eval()
    d, _ = m(x, x, x)
    e, _ = m(x, x, x)
    np.testing.assert_array_equal(d, e)
    with pytest.raises(RuntimeError, match="backward"):
        m.backward(d)


def test_mha_bad_input():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(10, 3)
    m = nn.MultiheadAttention(8, 2, batch_first=True)
    x = np.zeros((2, 5, 8), np.float32)
    with pytest.raises(ValueError, match="key"):
        m(x, np.zeros((2, 5, 6), np.float32), x)
    with pytest.raises(ValueError, match="batch size"):
        m(x, np.zeros((3, 5, 8), np.float32), np.zeros((3, 5, 8), np.float32))
    with pytest.raises(ValueError, match="sequence length"):
        m(x, x, np.zeros((2, 4, 8), np.float32))
    with pytest.raises(ValueError, match="attn_mask"):
        m(x, x, x, attn_mask=np.zeros((5, 4), bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=np.zeros((2, 4), bool))
    with pytest.raises(TypeError, match="attn_mask"):
        m(x, x, x, attn_mask=np.zeros((5, 5), np.int64))
    with pytest.raises(TypeError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=np.zeros((2, 5), np.int8))
    with pytest.raises(TypeError, match="key"):
        m(x, x.astype(np.float64), x)
    with pytest.raises(ValueError, match="n_heads"):
        nn.CausalSelfAttention(10, 4)


# ---------------------------------------------------------------- GPT-2 attention / block
def _torch_causal_attn(torch, x, ca_w, ca_b, cp_w, cp_b, H):
    B, T, d = x.shape
    qkv = x @ ca_w + ca_b
    q, k, v = qkv.split(d, dim=-1)
    sh = lambda a: a.view(B, T, H, d // H).transpose(1, 2)  # noqa: E731
    o = torch.nn.functional.scaled_dot_product_attention(sh(q), sh(k), sh(v), is_causal=True)
    o = o.transpose(1, 2).reshape(B, T, d)
    return o @ cp_w + cp_b


def _tp(p):
    return torch.tensor(p.data, requires_grad=True)


def test_causal_self_attention_matches_torch():
    rng = np.random.default_rng(4)
    m = nn.CausalSelfAttention(12, 3).double()
    for p in m.parameters():
        p.data[...] = rng.standard_normal(p.shape) * 0.3
    assert set(m.state_dict()) == {"c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"}
    assert m.c_attn.weight.shape == (12, 36)
    x = rng.standard_normal((2, 7, 12))
    y = m(x)
    dy = rng.standard_normal(y.shape)
    dx = m.backward(dy)
    tx = _t(x)
    tps = [_tp(p) for p in (m.c_attn.weight, m.c_attn.bias, m.c_proj.weight, m.c_proj.bias)]
    ty = _torch_causal_attn(torch, tx, *tps, 3)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **TOL)
    for p, t in zip((m.c_attn.weight, m.c_attn.bias, m.c_proj.weight, m.c_proj.bias), tps):
        np.testing.assert_allclose(p.grad, t.grad.numpy(), **TOL)


def test_transformer_block_matches_torch():
    rng = np.random.default_rng(5)
    d, H = 8, 2
    m = nn.TransformerBlock(d, H).double()
    for p in m.parameters():
        p.data[...] = rng.standard_normal(p.shape) * 0.3
    names = set(m.state_dict())
    assert {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "ln_2.weight",
            "mlp.c_fc.weight", "mlp.c_proj.bias"} <= names
    x = rng.standard_normal((2, 5, d))
    y = m(x)
    dy = rng.standard_normal(y.shape)
    dx = m.backward(dy)
    tx = _t(x)
    P = {n: _tp(p) for n, p in m.named_parameters()}
    ln = lambda a, pre: torch.nn.functional.layer_norm(a, (d,), P[pre + ".weight"], P[pre + ".bias"])  # noqa: E731
    h = tx + _torch_causal_attn(torch, ln(tx, "ln_1"), P["attn.c_attn.weight"], P["attn.c_attn.bias"],
                                P["attn.c_proj.weight"], P["attn.c_proj.bias"], H)
    f = torch.nn.functional.gelu(ln(h, "ln_2") @ P["mlp.c_fc.weight"] + P["mlp.c_fc.bias"],
                                 approximate="tanh")
    ty = h + f @ P["mlp.c_proj.weight"] + P["mlp.c_proj.bias"]
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **TOL)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad, P[n].grad.numpy(), err_msg=n, **TOL)


def test_transformer_block_with_replaced_sublayers():
    """The block adds a residual into its sublayer's output in place only for its own
    sublayer kinds: a replaced MLP that keeps its output for backward (Tanh's y) still
    gets the right gradient, and identity sublayers leave the caller's arrays alone."""
    rng = np.random.default_rng(6)
    d = 8
    m = nn.TransformerBlock(d, 2).double()
    m.mlp = nn.Sequential(nn.Linear(d, d), nn.Tanh()).double()
    x = rng.standard_normal((2, 5, d))
    dy = rng.standard_normal((2, 5, d))
    x0, dy0 = x.copy(), dy.copy()
    m(x)
    dx = m.backward(dy)
    assert np.array_equal(x, x0) and np.array_equal(dy, dy0)
    m.eval()
    num = np.empty_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += 1e-6
        xm[i] -= 1e-6
        num[i] = ((m(xp) - m(xm)) * dy).sum() / 2e-6
    np.testing.assert_allclose(dx, num, rtol=1e-5, atol=1e-7)
    ident = nn.TransformerBlock(d, 2).double()
    ident.ln_1, ident.attn, ident.ln_2, ident.mlp = (nn.Identity() for _ in range(4))
    y = ident(x)
    g = ident.backward(dy)
    assert np.array_equal(x, x0) and np.array_equal(dy, dy0)
    np.testing.assert_array_equal(y, 4 * x)
    np.testing.assert_array_equal(g, 4 * dy)


# ---------------------------------------------------------------- torch encoder / decoder
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_matches_torch(norm_first, activation, batch_first):
    rng = np.random.default_rng(6)
    d, H, N, T = 8, 2, 3, 5
    kw = dict(dim_feedforward=16, dropout=0.0, activation=activation, batch_first=batch_first,
              norm_first=norm_first)
    tm = torch.nn.TransformerEncoderLayer(d, H, **kw).double()
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    m = nn.TransformerEncoderLayer(d, H, **kw).double()
    assert list(m.state_dict()) == list(tm.state_dict())
    _load(m, tm)
    x = rng.standard_normal((N, T, d) if batch_first else (T, N, d))
    mask = np.triu(np.ones((T, T), bool), 1)
    kpm = np.zeros((N, T), bool)
    kpm[0, -2:] = True
    y = m(x, src_mask=mask, src_key_padding_mask=kpm)
    dy = rng.standard_normal(y.shape)
    dx = m.backward(dy)
    tm.train()
    tx = _t(x)
    ty = tm(tx, src_mask=torch.tensor(mask), src_key_padding_mask=torch.tensor(kpm))
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **TOL)
    _grads_match(m, tm)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_torch(norm_first, activation):
    rng = np.random.default_rng(7)
    d, H, N, T, S = 8, 2, 2, 5, 6
    kw = dict(dim_feedforward=12, dropout=0.0, activation=activation, batch_first=True,
              norm_first=norm_first)
    tm = torch.nn.TransformerDecoderLayer(d, H, **kw).double()
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    m = nn.TransformerDecoderLayer(d, H, **kw).double()
    assert list(m.state_dict()) == list(tm.state_dict())
    _load(m, tm)
    tgt = rng.standard_normal((N, T, d))
    mem = rng.standard_normal((N, S, d))
    tmask = np.triu(np.ones((T, T), bool), 1)
    mkpm = np.zeros((N, S), bool)
    mkpm[1, 0] = True
    y = m(tgt, mem, tgt_mask=tmask, memory_key_padding_mask=mkpm)
    dy = rng.standard_normal(y.shape)
    dtgt, dmem = m.backward(dy)
    tt, tmem = _t(tgt), _t(mem)
    ty = tm(tt, tmem, tgt_mask=torch.tensor(tmask), memory_key_padding_mask=torch.tensor(mkpm))
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(dtgt, tt.grad.numpy(), **TOL)
    np.testing.assert_allclose(dmem, tmem.grad.numpy(), **TOL)
    _grads_match(m, tm)


def test_layers_bad_arguments():
    with pytest.raises(ValueError, match="activation"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.TransformerDecoderLayer(8, 3)
    with pytest.raises(ValueError, match="dropout"):
        nn.TransformerEncoderLayer(8, 2, dropout=2.0)
    m = nn.CausalSelfAttention(8, 2)
    with pytest.raises(ValueError, match="d_model"):
        m(np.zeros((2, 3, 6), np.float32))


# ---------------------------------------------------------------- encoder / decoder stacks
@pytest.mark.parametrize("with_norm", [False, True])
def test_encoder_stack_loads_torch_state_dict(with_norm):
    """torch.nn.TransformerEncoder's state_dict loads (same names); outputs, input gradients and
    parameter gradients equal torch's through the whole stack."""
    rng = np.random.default_rng(8)
    d, H, N, T, L = 8, 2, 3, 5, 3
    kw = dict(dim_feedforward=16, dropout=0.0, batch_first=True)
    tl = torch.nn.TransformerEncoderLayer(d, H, **kw)
    tm = torch.nn.TransformerEncoder(tl, L, norm=torch.nn.LayerNorm(d) if with_norm else None,
                                     enable_nested_tensor=False).double()
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    m = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, H, **kw), L,
                              norm=nn.LayerNorm(d) if with_norm else None).double()
    assert list(m.state_dict()) == list(tm.state_dict())
    assert "layers.0.self_attn.in_proj_weight" in m.state_dict()
    _load(m, tm)
    # the copies are independent: loading gave each layer its own weights
    assert not np.array_equal(m.layers[0].linear1.weight.data, m.layers[1].linear1.weight.data)
    x = rng.standard_normal((N, T, d))
    mask = np.triu(np.ones((T, T), bool), 1)
    y = m(x, mask=mask)
    dy = rng.standard_normal(y.shape)
    dx = m.backward(dy)
    tx = _t(x)
    ty = tm(tx, mask=torch.tensor(mask))
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **TOL)
    _grads_match(m, tm)


def test_decoder_stack_loads_torch_state_dict():
    rng = np.random.default_rng(9)
    d, H, N, T, S, L = 8, 2, 2, 4, 6, 2
    kw = dict(dim_feedforward=12, dropout=0.0, batch_first=False, norm_first=True)
    tm = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(d, H, **kw), L,
                                     norm=torch.nn.LayerNorm(d)).double()
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    m = nn.TransformerDecoder(nn.TransformerDecoderLayer(d, H, **kw), L,
                              norm=nn.LayerNorm(d)).double()
    assert list(m.state_dict()) == list(tm.state_dict())
    _load(m, tm)
    tgt, mem = rng.standard_normal((T, N, d)), rng.standard_normal((S, N, d))
    tmask = np.triu(np.ones((T, T), bool), 1)
    y = m(tgt, mem, tgt_mask=tmask)
    dy = rng.standard_normal(y.shape)
    dtgt, dmem = m.backward(dy)
    tt, tmem = _t(tgt), _t(mem)
    ty = tm(tt, tmem, tgt_mask=torch.tensor(tmask))
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), **TOL)
    np.testing.assert_allclose(dtgt, tt.grad.numpy(), **TOL)
    np.testing.assert_allclose(dmem, tmem.grad.numpy(), **TOL)
    _grads_match(m, tm)


def test_stacks_bad_arguments():
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    with pytest.raises(ValueError, match="num_layers"):
        nn.TransformerEncoder(layer, 0)
    with pytest.raises(TypeError, match="encoder_layer"):
        nn.TransformerEncoder(nn.Linear(2, 2), 2)
    with pytest.raises(TypeError, match="decoder_layer"):
        nn.TransformerDecoder(layer, 2)
    with pytest.raises(TypeError, match="norm"):
        nn.TransformerEncoder(layer, 2, norm=3)
