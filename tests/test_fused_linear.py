"""The linear layer fused with its neighbours in a transformer block (F.linear_act_fwd /
F.linear_act_bwd, F.linear_bwd(act=), F.linear_fwd(residual=), F.layer_norm_bwd(plus=))
and the modules that use them (FeedForward, CausalSelfAttention, TransformerBlock, GPT).

The fused forms must give what the separate ops give: on the cpu backend the same bits
where the activation's 16-element vectors line up with the separate pass's (output rows
of a multiple of 16 floats, the GPT and BERT widths), else the same values within the
activation's accuracy; on every backend the reference's values."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn
from fastnn.models import GPT

BACKENDS = [b for b in ("cpu", "cuda") if b in fastnn.available_backends()]
ACTS = {"gelu": "none", "gelu_tanh": "tanh"}


def _arrays(rng, dt, rows, n_in, n_out, in_out):
    x = rng.standard_normal((rows, n_in)).astype(dt)
    w = (rng.standard_normal((n_out, n_in)) * 0.3).astype(dt)
    if in_out:                                   # GPT-2's Conv1D layout: w = Wc.T
        w = np.ascontiguousarray(w.T).T
    b = rng.standard_normal(n_out).astype(dt)
    return x, w, b


def _unfused(x, w, b, act, dh):
    u, c1 = F.linear_fwd(x, w, b)
    h, ca = F.gelu_fwd(u, ACTS[act])
    return h, F.linear_bwd(c1, F.gelu_bwd(ca, dh))


def _same(a, b, exact, dt):
    if exact:
        np.testing.assert_array_equal(a, b)
    else:
        tol = 2e-5 if dt == np.float32 else 1e-12
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# rows: the GEMM blocks (1024: two 512-row blocks), BLAS-sized and few-row (5) products;
# n_out 512 (a multiple of 16: the same bits) and 200 (block vectors need not line up)
@pytest.mark.parametrize("rows,n_in,n_out", [(1024, 128, 512), (300, 64, 200), (5, 48, 64),
                                             (40, 16, 24)])
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh"])
@pytest.mark.parametrize("in_out", [False, True])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_linear_act_equals_linear_then_gelu_on_cpu(rows, n_in, n_out, act, in_out, dt):
    rng = np.random.default_rng(rows + n_out)
    x, w, b = _arrays(rng, dt, rows, n_in, n_out, in_out)
    dh = rng.standard_normal((rows, n_out)).astype(dt)
    want_h, want_g = _unfused(x, w, b, act, dh)
    h, ctx = F.linear_act_fwd(x, w, b, act)
    exact = n_out % 16 == 0 or rows < 24
    _same(h, want_h, exact, dt)
    for g, wg in zip(F.linear_act_bwd(ctx, dh), want_g):
        _same(g, wg, exact, dt)
    # the saved pre-activation is linear's output
    np.testing.assert_array_equal(ctx[1][3], F.linear_fwd(x, w, b)[0])


@pytest.mark.parametrize("rows,n_mid", [(1024, 512), (300, 200), (6, 32)])
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh"])
def test_linear_bwd_with_act_is_the_activations_input_gradient(rows, n_mid, act):
    """An MLP's second layer: F.linear_bwd(ctx2, dy, act=ctx1) returns d_u (its d_input
    times act'(u), made in the d_input GEMM's blocks), then F.linear_act_bwd(ctx1, d_u,
    pre_activation=True) the first layer's gradients."""
    rng = np.random.default_rng(rows)
    dt = np.float32
    x, w1, b1 = _arrays(rng, dt, rows, 64, n_mid, True)
    _, w2, b2 = _arrays(rng, dt, 1, n_mid, 48, True)
    dy = rng.standard_normal((rows, 48)).astype(dt)
    h, c1 = F.linear_act_fwd(x, w1, b1, act)
    y, c2 = F.linear_fwd(h, w2, b2)
    du, dw2, db2 = F.linear_bwd(c2, dy, act=c1)
    dx, dw1, db1 = F.linear_act_bwd(c1, du, pre_activation=True)
    # the separate ops
    u, d1 = F.linear_fwd(x, w1, b1)
    h2, da = F.gelu_fwd(u, ACTS[act])
    y2, d2 = F.linear_fwd(h2, w2, b2)
    dh, ew2, eb2 = F.linear_bwd(d2, dy)
    ex, ew1, eb1 = F.linear_bwd(d1, F.gelu_bwd(da, dh))
    exact = n_mid % 16 == 0 or rows < 24
    for got, want in ((y, y2), (du, F.gelu_bwd(da, dh)), (dw2, ew2), (db2, eb2), (dx, ex),
                      (dw1, ew1), (db1, eb1)):
        _same(got, want, exact, dt)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fused_linear_ops_match_the_reference(backend, dt):
    rng = np.random.default_rng(3)
    x, w1, b1 = _arrays(rng, dt, 6, 5, 16, False)
    _, w2, b2 = _arrays(rng, dt, 1, 16, 4, True)
    res = rng.standard_normal((6, 4)).astype(dt)
    dy = rng.standard_normal((6, 4)).astype(dt)
    g = rng.standard_normal((6, 5)).astype(dt)
    ln_w, ln_b = rng.standard_normal(5).astype(dt), rng.standard_normal(5).astype(dt)

    def run(put):
        nonlocal x, w1, b1, w2, b2, res, dy, g, ln_w, ln_b
        x, w1, b1, w2, b2, res, dy, g, ln_w, ln_b = (
            put(a) for a in (x, w1, b1, w2, b2, res, dy, g, ln_w, ln_b))
        plus = put(np.ascontiguousarray(np.repeat(fastnn.to_numpy(res)[:, :1], 5, 1)))
        out = []
        h, c1 = F.linear_act_fwd(x, w1, b1, "gelu_tanh")
        y, c2 = F.linear_fwd(h, w2, b2, residual=res)
        du, dw2, db2 = F.linear_bwd(c2, dy, act=c1)
        out += [h, y, du, dw2, db2]
        out += list(F.linear_act_bwd(c1, du, pre_activation=True))
        out += list(F.linear_act_bwd(c1, du))
        z, cl = F.layer_norm_fwd(x, 5, ln_w, ln_b)
        out += list(F.layer_norm_bwd(cl, g, plus=plus))
        return [fastnn.to_numpy(o) for o in out]

    host = (x, w1, b1, w2, b2, res, dy, g, ln_w, ln_b)
    with fastnn.use_backend("reference"):
        want = run(lambda a: a)
    x, w1, b1, w2, b2, res, dy, g, ln_w, ln_b = host
    with fastnn.use_backend(backend):
        got = run(fastnn.to_device if backend == "cuda" else (lambda a: a))
    tol = 1e-4 if dt == np.float32 else 1e-10
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"output {i}")


@pytest.mark.parametrize("shape", [(1024, 128), (3, 7, 5)])
def test_linear_residual_and_layer_norm_plus_are_the_plain_sums(shape):
    rng = np.random.default_rng(1)
    n_in = 96
    x = rng.standard_normal(shape[:-1] + (n_in,)).astype(np.float32)
    w = rng.standard_normal((shape[-1], n_in)).astype(np.float32)
    b = rng.standard_normal(shape[-1]).astype(np.float32)
    r = rng.standard_normal(shape).astype(np.float32)
    y, ctx = F.linear_fwd(x, w, b, residual=r)
    np.testing.assert_array_equal(y, F.linear_fwd(x, w, b)[0] + r)
    assert not np.shares_memory(y, r)
    dy = rng.standard_normal(shape).astype(np.float32)
    for got, want in zip(F.linear_bwd(ctx, dy), F.linear_bwd(F.linear_fwd(x, w, b)[1], dy)):
        np.testing.assert_array_equal(got, want)
    z = rng.standard_normal(shape).astype(np.float32)
    lw = rng.standard_normal(shape[-1]).astype(np.float32)
    _, cl = F.layer_norm_fwd(z, shape[-1], lw, None)
    dx, dw, db = F.layer_norm_bwd(cl, dy, plus=r)
    ex, ew, eb = F.layer_norm_bwd(cl, dy)
    np.testing.assert_array_equal(dx, ex + r)
    np.testing.assert_array_equal(dw, ew)
    assert db is None and eb is None


def test_fused_argument_errors():
    rng = np.random.default_rng(0)
    x, w, b = _arrays(rng, np.float32, 4, 3, 5, False)
    with pytest.raises(ValueError, match="residual"):
        F.linear_fwd(x, w, b, residual=np.zeros((4, 4), np.float32))
    with pytest.raises(TypeError, match="residual"):
        F.linear_fwd(x, w, b, residual=np.zeros((4, 5), np.float64))
    with pytest.raises(ValueError, match="activation"):
        F.linear_act_fwd(x, w, b, "relu")
    h, c1 = F.linear_act_fwd(x, w, b, "gelu")
    _, c2 = F.linear_fwd(x, w, b)            # its input is x, not c1's output
    with pytest.raises(ValueError, match="act"):
        F.linear_bwd(c2, np.ones((4, 5), np.float32), act=c1)
    _, cl = F.layer_norm_fwd(x, 3)
    with pytest.raises(ValueError, match="plus"):
        F.layer_norm_bwd(cl, np.ones((4, 3), np.float32), plus=np.ones((4, 4), np.float32))


# ------------------------------------------------------------------ modules
def _unhook(handles):
    for h in handles:
        h.remove()


def _hooks(model, kinds):
    """A pass-through backward hook on every module of ``kinds``: the containers then run
    those sublayers one by one (their hooks must see each one's gradients)."""
    return [m.register_full_backward_hook(lambda mod, gi, go: None)
            for m in model.modules() if isinstance(m, kinds)]


def _step(model, x, dy):
    model.zero_grad()
    y = model(x)
    dx = model.backward(dy)
    return [y, dx] + [p.grad.copy() for p in model.parameters()]


@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu"])
def test_feedforward_fused_equals_its_sublayers_one_by_one(activation):
    fastnn.manual_seed(0)
    ff = nn.FeedForward(32, activation=activation)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64, 32)).astype(np.float32)
    dy = rng.standard_normal((2, 64, 32)).astype(np.float32)
    fused = _step(ff, x, dy)
    hooks = _hooks(ff, (nn.Conv1D,))
    seen = []
    hooks.append(ff.c_fc.register_full_backward_hook(lambda m, gi, go: seen.append(1)))
    plain = _step(ff, x, dy)
    _unhook(hooks)
    assert seen == [1]                       # the hooked layer ran its own backward
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)
    # the residual form: x + ff(h), in c_proj's product
    r = rng.standard_normal(x.shape).astype(np.float32)
    with fastnn.no_grad():
        np.testing.assert_array_equal(ff(x, residual=r), r + ff(x))
    assert ff._pending_calls() == 0


def test_transformer_block_and_gpt_fused_equal_unfused(monkeypatch):
    """A whole GPT training step: the fused block (residual sums in the products and the
    LayerNorm backward, GELU in the MLP's products) against the same model with hooks that
    make every sublayer run on its own -- the same loss and gradients, bit for bit."""
    fastnn.manual_seed(0)
    model = GPT(vocab_size=50, block_size=32, n_layer=2, n_head=2, d_model=64)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 50, (3, 32))
    tgt = rng.integers(0, 50, (3, 32))
    crit = nn.CrossEntropyLoss()

    def step():
        model.zero_grad()
        logits = model(idx)
        loss = crit(logits.reshape(-1, 50), tgt.reshape(-1))
        model.backward(crit.backward().reshape(logits.shape))
        return [np.array(loss)] + [p.grad.copy() for p in model.parameters()]

    calls = []

    def spy(name, fn):
        def wrapped(*a, **k):
            if name in ("linear_act_fwd",) or k.get("residual") is not None \
                    or k.get("plus") is not None or k.get("act") is not None:
                calls.append(name)
            return fn(*a, **k)
        monkeypatch.setattr(F, name, wrapped)

    for name in ("linear_act_fwd", "linear_fwd", "linear_bwd", "layer_norm_bwd"):
        spy(name, getattr(F, name))
    fused = step()
    # per block: GELU in c_fc, both residual sums in the products, act' in the MLP's
    # c_proj backward, both backward residual sums in the LayerNorm backwards
    assert sorted(calls) == sorted(["linear_act_fwd", "linear_fwd", "linear_fwd",
                                    "linear_bwd", "layer_norm_bwd", "layer_norm_bwd"] * 2)
    calls.clear()
    hooks = _hooks(model, (nn.Conv1D, nn.LayerNorm, nn.Dropout))
    plain = step()
    _unhook(hooks)
    assert calls == []
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)


def test_transformer_block_with_dropout_falls_back_and_stays_right():
    """With the residual dropout active the sums cannot move into the products: the block
    adds them itself, and its gradients still match the reference backend's."""
    fastnn.manual_seed(0)
    blk = nn.TransformerBlock(16, 2, dropout=0.3)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 16))
    dy = rng.standard_normal((2, 8, 16))
    blk.to(np.float64)
    fastnn.manual_seed(5)
    got = _step(blk, x, dy)
    with fastnn.use_backend("reference"):
        fastnn.manual_seed(5)
        want = _step(blk, x, dy)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
