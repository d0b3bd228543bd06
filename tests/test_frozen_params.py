"""Frozen parameters (requires_grad False, torch's habit for fine-tuning): the backward
makes no gradient for them -- F.linear_bwd / F.linear_act_bwd take ``weight_grad`` and
``bias_grad`` and return None for a gradient they were told not to make -- while every
other gradient keeps its value (on the cpu backend its bits) and d_input is unchanged.
The modules pass their parameters' requires_grad: Linear, Conv1D, FeedForward,
MultiheadAttention (joined and separate projections), CausalSelfAttention, GPT's tied
head; a bias-only fine-tune (BitFit: weights frozen, biases trained) gets its biases'
gradients."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn
from fastnn.models import GPT

BACKENDS = ["reference"] + [b for b in ("cpu", "cuda") if b in fastnn.available_backends()]
FLAGS = [(False, True), (True, False), (False, False)]


def _put(backend):
    return fastnn.to_device if backend == "cuda" else (lambda a: a)


def _host(a):
    return None if a is None else fastnn.to_numpy(a)


def _check(full, part, weight_grad, bias_grad, exact):
    """``part`` (a backward with the flags) against ``full`` (both gradients made)."""
    same = np.testing.assert_array_equal if exact else (
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6))
    same(_host(part[0]), _host(full[0]))
    if weight_grad:
        same(_host(part[1]), _host(full[1]))
    else:
        assert part[1] is None
    if bias_grad:
        same(_host(part[2]), _host(full[2]))
    else:
        assert part[2] is None


# rows: the few-row tiles (5), few rows on the GEMM blocks (20), the backward's one region
# of d_input and d_weight blocks with the bias partials (300); the cuda backend (numba's
# simulator in CI, one Python call per GPU thread) on the few-row shape only
CASES = [(be, rows) for be in BACKENDS for rows in ((5,) if be == "cuda" else (5, 20, 300))]


@pytest.mark.parametrize("backend,rows", CASES)
@pytest.mark.parametrize("in_out", [False, True])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_linear_bwd_makes_only_the_gradients_asked_for(backend, rows, in_out, dt):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 48)).astype(dt)
    w = (rng.standard_normal((40, 48)) * 0.2).astype(dt)
    if in_out:                                   # GPT-2's Conv1D layout
        w = np.ascontiguousarray(w.T).T
    b = rng.standard_normal(40).astype(dt)
    dy = rng.standard_normal((rows, 40)).astype(dt)
    put = _put(backend)
    with fastnn.use_backend(backend):
        xd, wd, bd, dyd = (put(a) for a in (x, w, b, dy))
        full = F.linear_bwd(F.linear_fwd(xd, wd, bd)[1], dyd)
        for wg, bg in FLAGS:
            part = F.linear_bwd(F.linear_fwd(xd, wd, bd)[1], dyd, weight_grad=wg, bias_grad=bg)
            _check(full, part, wg, bg, exact=True)
    if backend != "reference":                   # and the reference's values
        with fastnn.use_backend("reference"):
            want = F.linear_bwd(F.linear_fwd(x, w, b)[1], dy, weight_grad=False)
        tol = 2e-4 if dt == np.float32 else 1e-10
        np.testing.assert_allclose(_host(full[0]), want[0], rtol=tol, atol=tol)
        np.testing.assert_allclose(_host(full[2]), want[2], rtol=tol, atol=tol)


@pytest.mark.parametrize("backend,rows", [(be, rows) for be, rows in CASES if rows != 20])
def test_fused_linear_backwards_make_only_the_gradients_asked_for(backend, rows):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, 32)).astype(np.float32)
    w1 = (rng.standard_normal((64, 32)) * 0.2).astype(np.float32)
    w2 = np.ascontiguousarray((rng.standard_normal((16, 64)) * 0.2).astype(np.float32).T).T
    b1, b2 = rng.standard_normal(64).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    dy = rng.standard_normal((rows, 16)).astype(np.float32)
    put = _put(backend)
    with fastnn.use_backend(backend):
        xd, w1d, b1d, w2d, b2d, dyd = (put(a) for a in (x, w1, b1, w2, b2, dy))

        def run(**flags):
            h, c1 = F.linear_act_fwd(xd, w1d, b1d, "gelu")
            _, c2 = F.linear_fwd(h, w2d, b2d)
            du, dw2, db2 = F.linear_bwd(c2, dyd, act=c1, **flags)
            return ((du, dw2, db2), F.linear_act_bwd(c1, du, pre_activation=True, **flags),
                    F.linear_act_bwd(c1, du, **flags))

        full = run()
        for wg, bg in FLAGS:
            for f, p in zip(full, run(weight_grad=wg, bias_grad=bg)):
                _check(f, p, wg, bg, exact=True)


def _grads(model):
    return {n: (None if p.grad is None else np.array(fastnn.to_numpy(p.grad)))
            for n, p in model.named_parameters()}


def _fwd_bwd(model, x, dy):
    out = model(x)
    if isinstance(out, tuple):
        out = out[0]
    d = model.backward(dy)
    return [np.array(fastnn.to_numpy(a)) for a in (d if isinstance(d, tuple) else (d,))]


def _frozen_run(make, x, dy, frozen):
    """(d_inputs, grads) of a fresh model from ``make`` with the parameters named in
    ``frozen`` (a predicate on the name) set requires_grad False."""
    model = make()
    for n, p in model.named_parameters():
        if frozen(n):
            p.requires_grad = False
    return _fwd_bwd(model, x, dy), _grads(model)


def _assert_frozen_matches(make, x, dy, frozen, exact):
    d_full, g_full = _frozen_run(make, x, dy, lambda n: False)
    d_part, g_part = _frozen_run(make, x, dy, frozen)
    same = np.testing.assert_array_equal if exact else (
        lambda a, b, err_msg="": np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6,
                                                            err_msg=err_msg))
    for a, b in zip(d_part, d_full):
        same(a, b)
    n_frozen = 0
    for n, g in g_part.items():
        if frozen(n):
            assert g is None, f"{n} is frozen but has a gradient"
            n_frozen += 1
        else:
            assert g is not None, f"{n} is trained but has no gradient"
            same(g, g_full[n], err_msg=n)
    assert n_frozen > 0


def _seeded(cls, *args, **kw):
    def make():
        fastnn.manual_seed(0)
        return cls(*args, **kw)
    return make


@pytest.mark.parametrize("frozen", ["all", "weight", "bias"])
def test_frozen_linear_and_conv1d(frozen):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 30, 24)).astype(np.float32)
    dy = rng.standard_normal((2, 30, 12)).astype(np.float32)
    pick = {"all": lambda n: True, "weight": lambda n: n.endswith("weight"),
            "bias": lambda n: n.endswith("bias")}[frozen]
    _assert_frozen_matches(_seeded(nn.Linear, 24, 12), x, dy, pick, exact=True)
    _assert_frozen_matches(_seeded(nn.Conv1D, 12, 24), x, dy, pick, exact=True)


def test_requires_grad_false_leaves_grad_none_through_linear():
    lin = nn.Linear(8, 4).requires_grad_(False)
    lin(np.ones((3, 8), np.float32))
    dx = lin.backward(np.ones((3, 4), np.float32))
    assert dx.shape == (3, 8)
    assert lin.weight.grad is None and lin.bias.grad is None


@pytest.mark.parametrize("joined", [True, False])
def test_frozen_multihead_attention_projections(joined):
    rng = np.random.default_rng(2)
    kw = {} if joined else {"kdim": 12, "vdim": 10}
    q = rng.standard_normal((2, 5, 16)).astype(np.float32)
    k = rng.standard_normal((2, 7, 16 if joined else 12)).astype(np.float32)
    v = rng.standard_normal((2, 7, 16 if joined else 10)).astype(np.float32)
    dy = rng.standard_normal((2, 5, 16)).astype(np.float32)

    class Self(nn.Module):            # the joined q = k = v projection path
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(16, 4, batch_first=True, **kw)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

        def backward(self, d):
            return self.mha.backward(d)[0]

    class Cross(Self):
        def forward(self, x):
            return self.mha(x, k, v, need_weights=False)[0]

    make = _seeded(Self if joined else Cross)
    for pick in (lambda n: "in_proj" in n or "_proj_weight" in n,     # input projections
                 lambda n: n.endswith("weight"),                         # BitFit
                 lambda n: "out_proj" in n):
        _assert_frozen_matches(make, q, dy, pick, exact=False)


def test_frozen_feedforward_and_causal_attention_fused_paths():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16, 32)).astype(np.float32)
    dy = rng.standard_normal((2, 16, 32)).astype(np.float32)
    for pick in (lambda n: n.startswith("mlp.c_fc"), lambda n: n.startswith("mlp.c_proj"),
                 lambda n: n.startswith("attn."), lambda n: n.endswith("weight")):
        _assert_frozen_matches(_seeded(nn.TransformerBlock, 32, 4), x, dy, pick, exact=True)


def test_gpt_with_frozen_embeddings_and_first_block():
    """GPT fine-tuning with the token table (and so the tied head's d_weight) and the first
    block frozen: the other parameters' gradients are those of the unfrozen model."""
    idx = np.random.default_rng(4).integers(0, 50, (2, 12))

    def make():
        fastnn.manual_seed(0)
        return GPT(vocab_size=50, block_size=16, n_layer=2, n_head=2, d_model=32)

    def run(frozen):
        m = make()
        for n, p in m.named_parameters():
            if frozen(n):
                p.requires_grad = False
        logits = m(idx)
        m.backward(np.ones_like(logits) / logits.size)
        return _grads(m)

    full = run(lambda n: False)
    pick = lambda n: n.startswith(("wte", "h.0."))
    part = run(pick)
    for n, g in part.items():
        if pick(n):
            assert g is None, n
        else:
            np.testing.assert_array_equal(g, full[n], err_msg=n)


CONVS = [  # (module factory, input shape): the im2col GEMM, the direct 3x3, the depthwise,
           # 1-D, and the transposed convolution's fused and unfused backwards
    (lambda: nn.Conv2d(3, 8, 3, padding=1), (2, 3, 9, 9)),
    (lambda: nn.Conv2d(16, 12, 3, padding=1), (2, 16, 12, 12)),
    (lambda: nn.Conv2d(6, 6, 3, groups=6), (2, 6, 8, 8)),
    (lambda: nn.Conv1d(4, 6, 5, stride=2), (3, 4, 20)),
    (lambda: nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1), (2, 4, 6, 6)),
    (lambda: nn.ConvTranspose2d(4, 3, 1), (2, 4, 5, 5)),
]


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("frozen", ["all", "weight", "bias"])
def test_frozen_convolutions(case, frozen):
    make, shape = CONVS[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(shape).astype(np.float32)
    fastnn.manual_seed(0)
    dy = rng.standard_normal(make()(x).shape).astype(np.float32)
    pick = {"all": lambda n: True, "weight": lambda n: n == "weight",
            "bias": lambda n: n == "bias"}[frozen]
    # the transposed convolution's d_input comes from its own kernels when the weight is
    # frozen, from the fused pass otherwise: the same values, not always the same bits
    _assert_frozen_matches(_seeded(make), x, dy, pick, exact=case < 4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transposed", [False, True])
def test_conv_bwd_flags_on_every_backend(backend, transposed):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3) if transposed else (3, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    fwd, bwd = ((F.conv_transpose2d_fwd, F.conv_transpose2d_bwd) if transposed
                else (F.conv2d_fwd, F.conv2d_bwd))
    put = _put(backend)
    with fastnn.use_backend(backend):
        xd, wd, bd = (put(a) for a in (x, w, b))
        y, ctx = fwd(xd, wd, bd, 1, 1)
        dy = put(rng.standard_normal(fastnn.to_numpy(y).shape).astype(np.float32))
        full = bwd(fwd(xd, wd, bd, 1, 1)[1], dy)
        for wg, bg in FLAGS:
            part = bwd(fwd(xd, wd, bd, 1, 1)[1], dy, weight_grad=wg, bias_grad=bg)
            _check(full, part, wg, bg, exact=backend != "cpu" or not transposed)


RNNS = [(nn.LSTM, {}), (nn.GRU, {"num_layers": 2}), (nn.RNN, {"bidirectional": True}),
        (nn.LSTM, {"num_layers": 2, "bidirectional": True, "batch_first": True})]


@pytest.mark.parametrize("case", range(len(RNNS)))
def test_frozen_recurrent_layers(case):
    """Every weight frozen: no weight gradient is made (F.*_bwd weight_grad=False) and
    d_input keeps its bits; one weight still trained: all are made, the frozen dropped."""
    cls, kw = RNNS[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal((5, 3, 6)).astype(np.float32)
    make = _seeded(lambda: cls(6, 8, **kw))
    D = 2 if kw.get("bidirectional") else 1
    dy = rng.standard_normal((5, 3, 8 * D)).astype(np.float32)
    _assert_frozen_matches(make, x, dy, lambda n: True, exact=True)
    _assert_frozen_matches(make, x, dy, lambda n: n != "weight_hh_l0", exact=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_recurrent_bwd_flag_on_every_backend(backend, kind):
    rng = np.random.default_rng(9)
    T, B, I, H = 3, 2, 4, 5
    G = {"rnn": 1, "gru": 3, "lstm": 4}[kind]
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    ws = [(rng.standard_normal(s) * 0.4).astype(np.float32)
          for s in ((G * H, I), (G * H, H), (G * H,), (G * H,))]
    dy = rng.standard_normal((T, B, H)).astype(np.float32)
    fwd, bwd = getattr(F, kind + "_fwd"), getattr(F, kind + "_bwd")
    put = _put(backend)
    with fastnn.use_backend(backend):
        xd, dyd = put(x), put(dy)
        wd = [put(w) for w in ws]
        full = bwd(fwd(xd, None, wd)[1], dyd)
        part = bwd(fwd(xd, None, wd)[1], dyd, weight_grad=False)
    np.testing.assert_array_equal(_host(part[0]), _host(full[0]))
    assert all(g is None for g in part[2]) and all(g is not None for g in full[2])


@pytest.mark.parametrize("cls", [nn.RNNCell, nn.GRUCell, nn.LSTMCell])
def test_frozen_recurrent_cells(cls):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    dy = rng.standard_normal((3, 8)).astype(np.float32)

    class Step(nn.Module):       # the cell's h' alone, so _fwd_bwd sees one output
        def __init__(self):
            super().__init__()
            self.cell = cls(6, 8)

        def forward(self, v):
            out = self.cell(v)
            return out[0] if isinstance(out, tuple) else out

        def backward(self, d):
            return self.cell.backward(d)

    make = _seeded(Step)
    _assert_frozen_matches(make, x, dy, lambda n: True, exact=True)
    _assert_frozen_matches(make, x, dy, lambda n: n.endswith("bias_hh"), exact=True)
