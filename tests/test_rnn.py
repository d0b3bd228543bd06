"""Recurrent family: modules against torch.nn with loaded weights, options, bad input,
threads.  (Op-level checks of every backend are the cases in tests/cases/rnn.py.)"""
import math

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
import fastnn.nn as nn

torch = pytest.importorskip("torch")

KINDS = ["LSTM", "GRU", "RNN_tanh", "RNN_relu"]


def _pair(kind, I, H, L, bi, bf, bias=True, dropout=0.0, dtype=np.float64):
    """A torch module and a fastnn module with the same weights."""
    torch.manual_seed(0)
    kw = dict(num_layers=L, bidirectional=bi, batch_first=bf, bias=bias, dropout=dropout)
    if kind.startswith("RNN"):
        nl = kind.split("_")[1]
        tm = torch.nn.RNN(I, H, nonlinearity=nl, **kw)
        fm = nn.RNN(I, H, nonlinearity=nl, **kw)
    else:
        tm = getattr(torch.nn, kind)(I, H, **kw)
        fm = getattr(nn, kind)(I, H, **kw)
    tm = tm.double()
    fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    fm.to(dtype)
    return tm, fm


def _tol(dtype):
    return dict(rtol=1e-9, atol=1e-11) if dtype == np.float64 else dict(rtol=2e-4, atol=2e-5)


def _compare(kind, T, B, I, H, L, bi, bf, hx, dtype, backend="cpu", bias=True, unbatched=False):
    tm, fm = _pair(kind, I, H, L, bi, bf, bias, dtype=dtype)
    D = 2 if bi else 1
    rng = np.random.default_rng(1)
    if unbatched:
        xshape, sshape = (T, I), (L * D, H)
    else:
        xshape, sshape = ((B, T, I) if bf else (T, B, I)), (L * D, B, H)
    x = rng.standard_normal(xshape)
    states = [0.5 * rng.standard_normal(sshape) for _ in range(2 if kind == "LSTM" else 1)] if hx else []
    tx = torch.tensor(x, requires_grad=True)
    ts = [torch.tensor(s, requires_grad=True) for s in states]
    thx = (tuple(ts) if kind == "LSTM" else ts[0]) if hx else None
    ty, thn = tm(tx, thx)
    thn = thn if kind == "LSTM" else (thn,)
    dy = rng.standard_normal(tuple(ty.shape))
    dhn = [rng.standard_normal(sshape) for _ in thn]
    loss = (ty * torch.tensor(dy)).sum() + sum((a * torch.tensor(g)).sum() for a, g in zip(thn, dhn))
    loss.backward()

    fhx = None
    if hx:
        fhx = tuple(s.astype(dtype) for s in states) if kind == "LSTM" else states[0].astype(dtype)
    t = _tol(dtype)
    with fastnn.use_backend(backend):
        y, fhn = fm(x.astype(dtype), fhx)
        fhn = fhn if kind == "LSTM" else (fhn,)
        np.testing.assert_allclose(y, ty.detach().numpy(), **t, err_msg="output")
        assert y.dtype == dtype
        for a, b in zip(fhn, thn):
            np.testing.assert_allclose(a, b.detach().numpy(), **t, err_msg="h_n / c_n")
        grads = fm.backward(dy.astype(dtype), *[g.astype(dtype) for g in dhn])
    if hx:
        dx, dhx = grads
        dhx = dhx if kind == "LSTM" else (dhx,)
        assert len(dhx) == len(ts)
        for a, b in zip(dhx, ts):
            np.testing.assert_allclose(a, b.grad.numpy(), **t, err_msg="d_hx")
    else:
        dx = grads
    assert dx.shape == x.shape and dx.dtype == dtype
    np.testing.assert_allclose(dx, tx.grad.numpy(), **t, err_msg="d_input")
    tparams = dict(tm.named_parameters())
    names = [n for n, _ in fm.named_parameters()]
    assert names == list(tparams)
    for n, p in fm.named_parameters():
        assert p.grad is not None and p.grad.dtype == dtype, n
        np.testing.assert_allclose(p.grad, tparams[n].grad.numpy(), **t, err_msg=f"grad of {n}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("L,bi,bf,hx", [(1, False, False, True), (2, True, False, True),
                                        (3, True, True, False), (2, False, True, True)],
                         ids=["1layer_hx", "2layer_bidir_hx", "3layer_bidir_bf", "2layer_bf_hx"])
def test_module_matches_torch(kind, L, bi, bf, hx, dtype):
    _compare(kind, 5, 3, 4, 6, L, bi, bf, hx, dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_module_matches_torch_threaded_shapes(kind):
    """Shapes large enough that the time loop runs in a thread team (units split between
    threads, directions concurrent)."""
    old = fastnn.get_num_threads()
    try:
        fastnn.set_num_threads(2)
        _compare(kind, 4, 16, 24, 72, 2, True, False, True, np.float32)
        _compare(kind, 3, 16, 24, 72, 1, False, True, True, np.float64)
    finally:
        fastnn.set_num_threads(old)


@pytest.mark.parametrize("kind", KINDS)
def test_module_reference_backend_and_extras(kind):
    _compare(kind, 4, 2, 3, 5, 2, True, True, True, np.float64, backend="reference")
    _compare(kind, 4, 2, 3, 5, 2, True, False, True, np.float32, bias=False)
    _compare(kind, 4, 1, 3, 5, 2, True, False, True, np.float64, unbatched=True)
    _compare(kind, 1, 2, 3, 5, 1, False, False, False, np.float32)


def test_parameter_names_shapes_and_init():
    torch.manual_seed(0)
    for kind, G in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        tm = getattr(torch.nn, kind)(7, 10, num_layers=2, bidirectional=True)
        fm = getattr(nn, kind)(7, 10, num_layers=2, bidirectional=True)
        ts = tm.state_dict()
        fs = fm.state_dict()
        assert list(fs) == list(ts)
        for k in ts:
            assert fs[k].shape == tuple(ts[k].shape), k
            assert fs[k].dtype == np.float32
            assert np.abs(fs[k]).max() <= 1 / math.sqrt(10)
        assert fs["weight_ih_l1_reverse"].shape == (G * 10, 20)
        allw = np.concatenate([v.ravel() for v in fs.values()])
        assert allw.std() > 0.15  # U(-1/sqrt(10), 1/sqrt(10)) has std 0.18
        nb = getattr(nn, kind)(7, 10, bias=False)
        assert [n for n, _ in nb.named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    c = nn.LSTMCell(3, 4)
    assert [n for n, _ in c.named_parameters()] == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    assert c.weight_ih.shape == (16, 3) and c.weight_hh.shape == (16, 4)
    fastnn.manual_seed(5)
    a = nn.GRU(3, 4).weight_hh_l0.data.copy()
    fastnn.manual_seed(5)
    np.testing.assert_array_equal(a, nn.GRU(3, 4).weight_hh_l0.data)
    assert nn.GRU(3, 4, dtype=np.float64).weight_ih_l0.dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell_tanh", "RNNCell_relu"])
@pytest.mark.parametrize("hx", [True, False])
def test_cells_match_torch(kind, dtype, hx):
    torch.manual_seed(0)
    name, _, nl = kind.partition("_")
    kw = dict(nonlinearity=nl) if nl else {}
    tm = getattr(torch.nn, name)(5, 6, **kw).double()
    fm = getattr(nn, name)(5, 6, **kw)
    fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    fm.to(dtype)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5))
    states = [rng.standard_normal((3, 6)) for _ in range(2 if name == "LSTMCell" else 1)]
    tx = torch.tensor(x, requires_grad=True)
    ts = [torch.tensor(s, requires_grad=True) for s in states]
    thx = (tuple(ts) if name == "LSTMCell" else ts[0]) if hx else None
    tout = tm(tx, thx)
    tout = tout if name == "LSTMCell" else (tout,)
    ds = [rng.standard_normal((3, 6)) for _ in tout]
    sum((o * torch.tensor(d)).sum() for o, d in zip(tout, ds)).backward()
    fhx = None
    if hx:
        fhx = tuple(s.astype(dtype) for s in states) if name == "LSTMCell" else states[0].astype(dtype)
    out = fm(x.astype(dtype), fhx)
    out = out if name == "LSTMCell" else (out,)
    t = _tol(dtype)
    for a, b in zip(out, tout):
        np.testing.assert_allclose(a, b.detach().numpy(), **t)
    g = fm.backward(*[d.astype(dtype) for d in ds])
    dx = g[0] if hx else g
    np.testing.assert_allclose(dx, tx.grad.numpy(), **t)
    if hx:
        dhx = g[1] if name == "LSTMCell" else (g[1],)
        for a, b in zip(dhx, ts):
            np.testing.assert_allclose(a, b.grad.numpy(), **t)
    tp = dict(tm.named_parameters())
    for n, p in fm.named_parameters():
        np.testing.assert_allclose(p.grad, tp[n].grad.numpy(), **t, err_msg=n)


def test_cell_steps_equal_sequence():
    """Unrolling an LSTMCell step by step gives nn.LSTM's output."""
    fastnn.manual_seed(0)
    seq = nn.LSTM(3, 4, dtype=np.float64)
    cell = nn.LSTMCell(3, 4, dtype=np.float64)
    cell.load_state_dict({k[:-3]: v for k, v in seq.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    y, (h, c) = seq(x)
    hc = None
    for t in range(5):
        hc = cell(x[t], hc)
        np.testing.assert_allclose(hc[0], y[t], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hc[1], c[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", KINDS)
def test_bit_identical_for_any_thread_count(kind):
    old = fastnn.get_num_threads()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16, 24)).astype(np.float32)
    dy = rng.standard_normal((4, 16, 144)).astype(np.float32)
    results = []
    try:
        for n in (1, 2, 3):
            fastnn.set_num_threads(n)
            fastnn.manual_seed(0)
            m = nn.RNN(24, 72, 2, kind.split("_")[1], bidirectional=True, dropout=0.3) \
                if kind.startswith("RNN") else getattr(nn, kind)(24, 72, 2, bidirectional=True, dropout=0.3)
            fastnn.manual_seed(1)
            y, h = m(x)
            dx = m.backward(dy)
            results.append([y, dx] + [p.grad for p in m.parameters()])
    finally:
        fastnn.set_num_threads(old)
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            np.testing.assert_array_equal(a, b)


def test_dropout_between_layers():
    fastnn.manual_seed(0)
    m = nn.GRU(4, 6, num_layers=2, dropout=0.5, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((5, 3, 4))
    m.eval()
    y_eval, _ = m(x)
    with pytest.raises(RuntimeError, match="forward in training mode"):
        m.backward(np.ones_like(y_eval))
    m.train()
    fastnn.manual_seed(7)
    y1, _ = m(x)
    fastnn.manual_seed(7)
    y2, _ = m(x)
    y3, _ = m(x)
    np.testing.assert_array_equal(y1, y2)          # same seed, same mask
    assert not np.allclose(y1, y_eval)              # dropout is on in training
    assert not np.allclose(y2, y3)                  # each call draws a new mask
    single = nn.GRU(4, 6, dtype=np.float64)
    single.load_state_dict({k: v for k, v in m.state_dict().items() if k.endswith("l0")})
    np.testing.assert_allclose(single(x)[0].shape, y_eval.shape)
    # the first layer is never dropped: a one-layer network's h_n equals layer 0's
    np.testing.assert_allclose(single(x)[1][0], m(x)[1][0], rtol=1e-12)
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.2)


def test_backward_variants_and_accumulation():
    fastnn.manual_seed(0)
    m = nn.LSTM(3, 4, num_layers=2, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    y, (h, c) = m(x)
    d_c = np.ones_like(c)
    dx_only_c = m.backward(None, None, d_c)
    assert dx_only_c.shape == x.shape
    g1 = m.weight_hh_l1.grad.copy()
    # gradient of sum(c_n) by finite differences on the input
    eps = 1e-6
    x2 = x.copy()
    x2[2, 1, 0] += eps
    with fastnn.no_grad():       # probes only: no caches (each training call keeps one)
        fd = (m(x2)[1][1].sum() - m(x)[1][1].sum()) / eps
    assert abs(fd - dx_only_c[2, 1, 0]) < 1e-5
    m(x)
    m.backward(None, None, d_c)
    np.testing.assert_allclose(m.weight_hh_l1.grad, 2 * g1, rtol=1e-12)
    with pytest.raises(RuntimeError):
        m.backward(None, None, d_c)
    with pytest.raises(ValueError, match="grad_output"):
        m(x)
        m.backward(np.ones((5, 2, 5)))


def test_unbatched_module():
    fastnn.manual_seed(0)
    m = nn.GRU(3, 4, num_layers=2, bidirectional=True, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((5, 3))
    h0 = np.zeros((4, 4))
    y, h = m(x, h0)
    assert y.shape == (5, 8) and h.shape == (4, 4)
    yb, hb = m(x[:, None], h0[:, None])
    np.testing.assert_allclose(y, yb[:, 0], rtol=1e-12)
    m(x, h0)
    dx, dh = m.backward(np.ones((5, 8)), np.ones((4, 4)))
    assert dx.shape == (5, 3) and dh.shape == (4, 4)


def test_bad_input():
    m = nn.LSTM(3, 4, num_layers=2)
    x = np.zeros((5, 2, 3), np.float32)
    with pytest.raises(ValueError, match="input_size = 3"):
        m(np.zeros((5, 2, 4), np.float32))
    with pytest.raises(ValueError, match="3-D"):
        m(np.zeros((5, 2, 3, 1), np.float32))
    with pytest.raises(ValueError, match="sequence length"):
        m(np.zeros((0, 2, 3), np.float32))
    with pytest.raises(TypeError, match=r"\(h_0, c_0\)"):
        m(x, np.zeros((2, 2, 4), np.float32))
    with pytest.raises(ValueError, match="two arrays"):
        m(x, (np.zeros((2, 2, 4), np.float32),) * 3)
    with pytest.raises(ValueError, match=r"h_0 must have shape .*\(2, 2, 4\)"):
        m(x, (np.zeros((1, 2, 4), np.float32), np.zeros((2, 2, 4), np.float32)))
    with pytest.raises(ValueError, match=r"c_0 must have shape"):
        m(x, (np.zeros((2, 2, 4), np.float32), np.zeros((2, 2, 5), np.float32)))
    with pytest.raises(TypeError, match="float32 and float64"):
        m(x.astype(np.float64))
    with pytest.raises(TypeError):
        m(x.astype(np.int32))
    g = nn.GRU(3, 4)
    with pytest.raises(TypeError, match="only LSTM"):
        g(x, (np.zeros((1, 2, 4), np.float32),))
    # batch_first mismatch: a (B, T, I) input to a time-major module with a (L, B, H) state
    bfx = np.zeros((2, 5, 3), np.float32)
    with pytest.raises(ValueError, match=r"h_0 must have shape .*\(1, 5, 4\)"):
        g(bfx, np.zeros((1, 2, 4), np.float32))
    gb = nn.GRU(3, 4, batch_first=True)
    gb(bfx, np.zeros((1, 2, 4), np.float32))
    with pytest.raises(ValueError, match=r"\(1, 2, 4\)"):
        gb(np.zeros((5, 2, 3), np.float32), np.zeros((1, 2, 4), np.float32))
    for p in (1.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="dropout"):
            nn.LSTM(3, 4, num_layers=2, dropout=p)
    with pytest.raises(TypeError, match="dropout"):
        nn.GRU(3, 4, dropout="0.1")
    for bad in ("sigmoid", "Tanh"):
        with pytest.raises(ValueError, match="nonlinearity"):
            nn.RNN(3, 4, nonlinearity=bad)
        with pytest.raises(ValueError, match="nonlinearity"):
            nn.RNNCell(3, 4, nonlinearity=bad)
    with pytest.raises(TypeError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity=None)
    with pytest.raises(ValueError, match="nonlinearity"):
        F.rnn(x, None, [np.zeros((4, 3), np.float32), np.zeros((4, 4), np.float32)], "gelu")
    with pytest.raises(ValueError, match="hidden_size"):
        nn.GRU(3, 0)
    with pytest.raises(TypeError, match="hidden_size"):
        nn.GRU(3, 4.0)
    with pytest.raises(ValueError, match="num_layers"):
        nn.LSTM(3, 4, num_layers=0)
    with pytest.raises(ValueError, match="weights must hold 2 arrays .* or 4"):
        F.lstm(x, None, [np.zeros((16, 3), np.float32)] * 3)
    with pytest.raises(ValueError, match=r"weight_hh_l0\) must have shape"):
        F.gru(x, None, [np.zeros((12, 3), np.float32), np.zeros((12, 5), np.float32)])
    c = nn.LSTMCell(3, 4)
    with pytest.raises(TypeError, match=r"\(h, c\)"):
        c(np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"h must have shape \(2, 4\)"):
        c(np.zeros((2, 3), np.float32), (np.zeros((3, 4), np.float32), np.zeros((2, 4), np.float32)))
    with pytest.raises(ValueError, match="input_size = 3"):
        nn.GRUCell(3, 4)(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="both"):
        F.rnn_cell(np.zeros((2, 3)), None, np.zeros((4, 3)), np.zeros((4, 4)), np.zeros(4), None)


def test_functional_matches_module():
    fastnn.manual_seed(0)
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    y, (h, c) = m(x)
    y2, h2, c2 = F.lstm(x, None, m._flat_weights, num_layers=2, bidirectional=True)
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(h, h2)
    np.testing.assert_array_equal(c, c2)
    assert "num_layers=2" in repr(m) and "bidirectional=True" in repr(m)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_scipy_blas_fallback_agrees(kind):
    """The kernels' GEMMs run on NumPy's OpenBLAS when loaded; SciPy's gives the same answer."""
    from fastnn._backend import backend
    import importlib
    cmod = importlib.import_module(backend("cpu").lstm.__module__)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3, 8))
    dy = rng.standard_normal((5, 3, 24))
    m = getattr(nn, kind)(8, 12, 2, bidirectional=True)
    m.to(np.float64)
    res = []
    for use_scipy in (False, True):
        if use_scipy:
            cmod._use_scipy_blas()
        try:
            with fastnn.use_backend("cpu"):
                for p in m.parameters():
                    p.grad = None
                y, _ = m(x)
                dx = m.backward(dy)
            res.append([y, dx] + [p.grad.copy() for p in m.parameters()])
        finally:
            cmod._load_numpy_blas()
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("B", [13, 10, 1])
def test_packed_recurrent_gemm_agrees_with_blas(kind, B):
    """float32 per-step GEMMs run on W_hh packed once per call (AVX2 and AVX-512 builds);
    they agree with the BLAS path, including row and column tails: H = 40 gives partial
    panels, B = 13 a short last row tile, B = 10 a remainder merged into two near-halves
    (8-row tiles), B = 1 a single row."""
    from fastnn._backend import backend
    import importlib
    cmod = importlib.import_module(backend("cpu").lstm.__module__)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, B, 9)).astype(np.float32)
    dy = rng.standard_normal((6, B, 80)).astype(np.float32)
    m = getattr(nn, kind)(9, 40, 2, bidirectional=True)
    h0 = rng.standard_normal((4, B, 40)).astype(np.float32)
    hx = (h0, 0.5 * h0) if kind == "LSTM" else h0
    res = []
    old = cmod._use_packed(True)
    try:
        for packed in (True, False):
            cmod._use_packed(packed)
            with fastnn.use_backend("cpu"):
                for p in m.parameters():
                    p.grad = None
                y, _ = m(x, hx)
                dx, dhx = m.backward(dy)
            dhx = dhx if kind == "LSTM" else (dhx,)
            res.append([y, dx, *dhx] + [p.grad.copy() for p in m.parameters()])
    finally:
        cmod._use_packed(old)
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_row_split_time_loop_matches_torch_and_thread_counts(kind):
    """A direction shared by several threads splits its batch rows when each thread gets at
    least 8 (the packed float32 kernel): no barrier per step.  Unidirectional B = 24 splits
    rows at 2 and 3 threads; B = 12 splits units at 2 (too few rows; the plain RNN's step
    is too small to share at all); the results equal torch and are the same bits at every
    thread count."""
    cmod = _cpu_rnn_module()
    if not cmod._use_packed(True):
        cmod._use_packed(False)
        pytest.skip("this build has no packed recurrent kernel (the base variant): "
                    "its time loop splits units only")
    mode = kind.split("_")[0]
    old = fastnn.get_num_threads()
    rng = np.random.default_rng(5)
    try:
        for B, splits in ((24, {2: "rows", 3: "rows"}),
                          (12, {2: "units"} if mode != "RNN" else {2: "one"})):
            x = rng.standard_normal((5, B, 40)).astype(np.float32)
            dy = rng.standard_normal((5, B, 96)).astype(np.float32)
            results = []
            for n in (1, 2, 3):
                fastnn.set_num_threads(n)
                team, how = cmod._time_loop_split(mode, B, 96, False, np.float32)
                if n in splits:
                    assert how == splits[n] and team == (n if how != "one" else 1), \
                        (B, n, team, how)
                fastnn.manual_seed(0)
                m = nn.RNN(40, 96, 2, kind.split("_")[1]) if mode == "RNN" \
                    else getattr(nn, kind)(40, 96, 2)
                y, _ = m(x)
                dx = m.backward(dy)
                results.append([y, dx] + [p.grad for p in m.parameters()])
            for r in results[1:]:
                for a, b in zip(r, results[0]):
                    np.testing.assert_array_equal(a, b)
        fastnn.set_num_threads(2)
        _compare(kind, 4, 24, 24, 72, 2, False, False, True, np.float32)
    finally:
        fastnn.set_num_threads(old)


def _cpu_rnn_module():
    import importlib
    from fastnn._backend import backend
    return importlib.import_module(backend("cpu").lstm.__module__)


def _op_args(rng, dtype, T=5, B=3, I=4, H=24, L=2, D=2):
    x = rng.standard_normal((T, B, I)).astype(dtype)
    ws = []
    for k in range(L):
        for _ in range(D):
            n_in = I if k == 0 else D * H
            ws += [0.3 * rng.standard_normal((4 * H, n_in)).astype(dtype),
                   0.3 * rng.standard_normal((4 * H, H)).astype(dtype),
                   0.3 * rng.standard_normal(4 * H).astype(dtype),
                   0.3 * rng.standard_normal(4 * H).astype(dtype)]
    return x, ws


def test_cpu_saved_state_has_named_fields():
    """The cpu ops' saved state is a small object with named fields (not a positional
    tuple): the stack's shape facts and one entry per layer with its kept buffers."""
    cmod = _cpu_rnn_module()
    x, ws = _op_args(np.random.default_rng(0), np.float32)
    (y, h_n, c_n), saved = cmod.lstm(x, None, None, ws, 2, True, False, 0.0, False, 0, 0)
    assert (saved.L, saved.D, saved.G, saved.H, saved.T, saved.B) == (2, 2, 4, 24, 5, 3)
    assert not saved.has_hx and not saved.batch_first and not saved.use_drop
    assert len(saved.layers) == 2
    top = saved.layers[1]
    np.testing.assert_array_equal(top.out, y)                 # the last layer's output
    assert top.act.shape == (5, 3, 2 * 4 * 24) and top.aux.shape == (5, 3, 2 * 24)
    assert len(top.w_ih) == len(top.w_hh) == 2
    # the kernel's row order is a permutation of torch's
    np.testing.assert_array_equal(top.w_hh[1], ws[(1 * 2 + 1) * 4 + 1][saved.perm])
    with pytest.raises(TypeError):
        cmod.lstm_backward(None, None, None, ("not", "a", "saved", "state"))


def test_cpu_ops_come_from_reference_stack_ops():
    """The six cpu ops are the reference's stack_ops wrappers over the compiled pair, so
    their signatures are the reference's."""
    import inspect
    import fastnn.reference.rnn as ref
    cmod = _cpu_rnn_module()
    for name in cmod.OPS:
        fn = getattr(cmod, name)
        assert fn.__module__ == cmod.__name__
        assert inspect.signature(fn) == inspect.signature(getattr(ref, name)), name


def test_cpu_op_reads_strided_states_and_checks_dtypes():
    """The op reads its buffers through typed views: a non-contiguous h0 / c0 gives the
    contiguous result, and a weight of another dtype is an error, not garbage."""
    cmod = _cpu_rnn_module()
    rng = np.random.default_rng(1)
    x, ws = _op_args(rng, np.float64)
    h0 = rng.standard_normal((4, 3, 48))[:, :, ::2]         # (L*D, B, H) strided
    c0 = rng.standard_normal((3, 4, 24)).transpose(1, 0, 2)  # (L*D, B, H) transposed
    assert not h0.flags.c_contiguous and not c0.flags.c_contiguous
    want = cmod.lstm(x, h0.copy(), c0.copy(), ws, 2, True, False, 0.0, False, 0, 0)[0]
    got = cmod.lstm(x, h0, c0, ws, 2, True, False, 0.0, False, 0, 0)[0]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    bad = list(ws)
    bad[1] = bad[1].astype(np.float32)
    with pytest.raises(ValueError):
        cmod.lstm(x, None, None, bad, 2, True, False, 0.0, False, 0, 0)
