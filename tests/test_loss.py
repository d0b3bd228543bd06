"""cross_entropy / CrossEntropyLoss against torch: every option, every shape form, errors."""
import itertools
import zlib

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn

torch = pytest.importorskip("torch")

BACKENDS = ["reference", "cpu"]


def _inputs(rng, shape, prob, ignore, ignore_index, dtype):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    C = shape[0] if len(shape) == 1 else shape[1]
    if prob:
        p = rng.random(shape) ** 2
        t = (p / p.sum(axis=0 if len(shape) == 1 else 1, keepdims=True)).astype(dtype)
    else:
        t = rng.integers(0, C, shape[:1] + shape[2:] if len(shape) > 1 else ())
        if ignore and t.ndim:
            flat = t.reshape(-1)
            flat[::3] = ignore_index
    return x, t


def _torch_ce(x, t, w, **kw):
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tt = torch.tensor(t, dtype=torch.float64 if t.dtype.kind == "f" else torch.int64)
    tw = None if w is None else torch.tensor(w, dtype=torch.float64)
    loss = torch.nn.functional.cross_entropy(tx, tt, weight=tw, **kw)
    return tx, loss


SHAPES = [(9, 7), (4, 5, 3), (2, 6, 3, 2), (5,)]
# (prob, weighted, ignore, label_smoothing, reduction); ignore_index has no meaning for
# probability targets, so those combinations are not generated
OPTIONS = [o for o in itertools.product([False, True], [False, True], [False, True], [0.0, 0.25],
                                        ["mean", "sum", "none"]) if not (o[0] and o[2])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("prob,weighted,ignore,ls,reduction", OPTIONS,
                         ids=lambda v: str(v))
def test_matches_torch(backend, shape, prob, weighted, ignore, ls, reduction):
    rng = np.random.default_rng(zlib.crc32(repr((shape, prob, weighted, ignore, ls, reduction)).encode()))
    ignore_index = 2 if ignore and len(shape) > 1 and shape[0] % 2 else -100
    x, t = _inputs(rng, shape, prob, ignore, ignore_index, np.float64)
    C = shape[0] if len(shape) == 1 else shape[1]
    w = rng.random(C) + 0.2 if weighted else None
    kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=ls)
    tx, tloss = _torch_ce(x, t, w, **kw)
    g = rng.standard_normal(tuple(tloss.shape))
    tloss.backward(torch.tensor(g))
    for dtype, rtol, atol in ((np.float64, 1e-10, 1e-12), (np.float32, 2e-5, 2e-6)):
        with fastnn.use_backend(backend):
            loss, ctx = F.cross_entropy_fwd(x.astype(dtype), t if t.dtype.kind != "f" else t.astype(dtype),
                                            None if w is None else w.astype(dtype), **kw)
            dx = F.cross_entropy_bwd(ctx, g.astype(dtype) if g.ndim else float(g))
        assert loss.dtype == dtype and loss.shape == tuple(tloss.shape)
        assert dx.dtype == dtype and dx.shape == x.shape
        np.testing.assert_allclose(loss, tloss.detach().numpy(), rtol=rtol, atol=atol)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_rows_and_extreme_logits(backend):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((33, 1000)) * 30).astype(np.float32)
    x[0, 5] = 80.0                                  # exp overflows float32 without the max shift
    x[1, :] = -50.0
    t = rng.integers(0, 1000, 33)
    t[0] = 5
    for ls, w in ((0.0, None), (0.1, rng.random(1000).astype(np.float32) + 0.5)):
        tx, tl = _torch_ce(x, t, w, label_smoothing=ls)
        tl.backward()
        with fastnn.use_backend(backend):
            l, ctx = F.cross_entropy_fwd(x, t, w, label_smoothing=ls)
            dx = F.cross_entropy_bwd(ctx)
        np.testing.assert_allclose(l, tl.item(), rtol=1e-5)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_ignored_and_empty_follow_torch(backend):
    x = np.random.default_rng(2).standard_normal((4, 3))
    t = np.full(4, -100)
    with fastnn.use_backend(backend), np.errstate(all="ignore"):
        for ls in (0.0, 0.2):
            l, ctx = F.cross_entropy_fwd(x, t, label_smoothing=ls)
            assert np.isnan(l)                                      # 0 / 0, as torch
            np.testing.assert_array_equal(F.cross_entropy_bwd(ctx), 0)   # torch: zero gradient
        assert float(F.cross_entropy(x, t, reduction="sum")) == 0
        np.testing.assert_array_equal(F.cross_entropy(x, t, reduction="none"), 0)
        e = np.zeros((0, 3))
        assert np.isnan(F.cross_entropy(e, np.zeros(0, np.int64)))
        assert float(F.cross_entropy(e, np.zeros(0, np.int64), reduction="sum")) == 0
        assert F.cross_entropy(e, np.zeros((0, 3)), reduction="none").shape == (0,)
        assert np.isnan(F.cross_entropy(e, np.zeros((0, 3))))
    tl = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(t))
    assert torch.isnan(tl)


def test_noncontiguous_and_int32_targets():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 10))
    t = rng.integers(0, 5, 12).astype(np.int32)
    a = F.cross_entropy(x[:, ::2], t[::2])
    b = F.cross_entropy(np.ascontiguousarray(x[:, ::2]), t[::2].astype(np.int64))
    assert a == b
    assert F.cross_entropy(x[0], 3) == F.cross_entropy(x[:1], np.array([3]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_module(backend, reduction):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    t = rng.integers(0, 6, 8)
    t[3] = 1
    w = rng.random(6) + 0.5                       # float64 weight, float32 logits: cast
    crit = nn.CrossEntropyLoss(weight=w, ignore_index=1, reduction=reduction, label_smoothing=0.1)
    tcrit = torch.nn.CrossEntropyLoss(weight=torch.tensor(w, dtype=torch.float32), ignore_index=1,
                                      reduction=reduction, label_smoothing=0.1)
    assert set(crit.state_dict()) == set(tcrit.state_dict()) == {"weight"}
    with fastnn.use_backend(backend):
        loss = crit(x, t)
        dx = crit.backward()
    tx = torch.tensor(x, requires_grad=True)
    tl = tcrit(tx, torch.tensor(t))
    tl.backward(torch.ones_like(tl))
    if reduction == "none":
        assert isinstance(loss, np.ndarray) and loss.shape == (8,)
    else:
        assert isinstance(loss, float)
    np.testing.assert_allclose(loss, tl.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(RuntimeError, match="backward"):
        crit.backward()
    # an upstream gradient scales d_logits
    with fastnn.use_backend(backend):
        crit(x, t)
        g = 2.5 if reduction != "none" else np.full(8, 2.5, np.float32)
        np.testing.assert_allclose(crit.backward(g), 2.5 * dx, rtol=1e-6, atol=1e-7)


def test_module_defaults_and_repr():
    crit = nn.CrossEntropyLoss()
    assert crit.state_dict() == {}
    x = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
    t = np.array([0, 3, 1])
    assert abs(crit(x, t) - float(torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(t)))) < 1e-6
    assert crit.backward().shape == (3, 4)
    assert "reduction='mean'" in repr(crit)
    assert "label_smoothing=0.3" in repr(nn.CrossEntropyLoss(label_smoothing=0.3))


def test_bad_targets():
    x = np.zeros((4, 5), np.float32)
    with pytest.raises(IndexError, match="target contains class index 5.*5 classes"):
        F.cross_entropy(x, np.array([0, 1, 5, 2]))
    with pytest.raises(IndexError, match="target contains class index -1"):
        F.cross_entropy(x, np.array([0, -1, 2, 2]))
    with pytest.raises(IndexError, match="target"):
        F.cross_entropy(x, np.array([0, -100, 2, 2]), ignore_index=3)
    F.cross_entropy(x, np.array([0, 7, 2, 2]), ignore_index=7)           # ignored: fine
    with pytest.raises(TypeError, match="target must be an integer array"):
        F.cross_entropy(x, np.array([True, False, True, True]))
    with pytest.raises(TypeError, match="target"):
        F.cross_entropy(x, "abc")
    with pytest.raises(ValueError, match=r"class-index target must have shape \(4,\)"):
        F.cross_entropy(x, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"class-index target must have shape \(4,\)"):
        F.cross_entropy(x, np.zeros((4, 1), np.int64))
    with pytest.raises(ValueError, match=r"probability target must have the input's shape \(4, 5\)"):
        F.cross_entropy(x, np.zeros((4,), np.float32))
    with pytest.raises(ValueError, match="probability target"):
        F.cross_entropy(x, np.zeros((4, 4), np.float32))
    with pytest.raises(TypeError, match="target has dtype float64"):
        F.cross_entropy(x, np.zeros((4, 5), np.float64))
    x4 = np.zeros((2, 3, 4, 5), np.float32)
    with pytest.raises(ValueError, match=r"\(2, 4, 5\)"):
        F.cross_entropy(x4, np.zeros((2, 3, 4), np.int64))


def test_bad_arguments():
    x = np.zeros((4, 5), np.float32)
    t = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"weight must have shape \(C,\) = \(5,\)"):
        F.cross_entropy(x, t, weight=np.ones(4, np.float32))
    with pytest.raises(TypeError, match="weight"):
        F.cross_entropy(x, t, weight=np.ones(5, np.float64))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, t, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(TypeError, match="ignore_index"):
        F.cross_entropy(x, t, ignore_index=1.0)
    with pytest.raises(ValueError, match="0-d"):
        F.cross_entropy(np.zeros((), np.float32), t)
    with pytest.raises(TypeError, match="input"):
        F.cross_entropy(np.zeros((4, 5), np.int64), t)
    with pytest.raises(ValueError, match="reduction"):
        nn.CrossEntropyLoss(reduction="batchmean")
    with pytest.raises(ValueError, match="1-D"):
        nn.CrossEntropyLoss(weight=np.ones((2, 2)))
    l, ctx = F.cross_entropy_fwd(x, t)
    with pytest.raises(ValueError, match="grad_output"):
        F.cross_entropy_bwd(ctx, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="grad_output"):
        F.cross_entropy_bwd(ctx, "1")
    l, ctx = F.cross_entropy_fwd(x, t, reduction="none")
    with pytest.raises(ValueError, match="grad_output"):
        F.cross_entropy_bwd(ctx, 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("target0", [0, -100])
def test_special_logits_follow_torch(backend, bad, target0):
    """inf/NaN logits: the same NaN pattern as torch, also in an ignored row (0 * softmax)."""
    x = np.random.default_rng(7).standard_normal((3, 5)).astype(np.float32)
    x[0, 3] = bad
    t = np.array([target0, 1, 2])
    for red in ("mean", "none"):
        with fastnn.use_backend(backend), np.errstate(all="ignore"):
            l, ctx = F.cross_entropy_fwd(x, t, reduction=red)
            dx = F.cross_entropy_bwd(ctx, 1.0 if red == "mean" else np.ones(3, np.float32))
        tx = torch.tensor(x, requires_grad=True)
        tl = torch.nn.functional.cross_entropy(tx, torch.tensor(t), reduction=red)
        tl.backward(torch.ones_like(tl))
        np.testing.assert_allclose(l, tl.detach().numpy(), rtol=1e-5, equal_nan=True)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-7, equal_nan=True)


def test_device_logits_with_extra_dims():
    """(N, C, d1) logits on the device: the shell moves the class axis last on the device."""
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or the simulator) is not available here")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    t = np.random.default_rng(1).integers(0, 3, (2, 4))
    loss, ctx = F.cross_entropy_fwd(fastnn.to_device(x), fastnn.to_device(t))
    dx = F.cross_entropy_bwd(ctx, 1.0)
    with fastnn.use_backend("reference"):
        rl, rctx = F.cross_entropy_fwd(x, t)
        rdx = F.cross_entropy_bwd(rctx, 1.0)
    np.testing.assert_allclose(fastnn.to_numpy(loss), rl, rtol=1e-5)
    np.testing.assert_allclose(fastnn.to_numpy(dx), rdx, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ the other losses (issue 19)
_LOSSES = [  # (module class, kwargs, F name, x kind, y kind)
    ("MSELoss", {}, "mse_loss", "normal", "normal"),
    ("L1Loss", {}, "l1_loss", "normal", "normal"),
    ("SmoothL1Loss", dict(beta=0.4), "smooth_l1_loss", "normal", "normal"),
    ("HuberLoss", dict(delta=0.6), "huber_loss", "normal", "normal"),
    ("BCELoss", {}, "binary_cross_entropy", "prob", "prob"),
    ("BCEWithLogitsLoss", {}, "binary_cross_entropy_with_logits", "normal", "prob"),
    ("KLDivLoss", {}, "kl_div", "logprob", "prob"),
    ("KLDivLoss", dict(log_target=True), "kl_div", "logprob", "logprob"),
]


def _vals(rng, kind, shape, dt):
    if kind == "prob":
        return rng.random(shape).astype(dt)
    if kind == "logprob":
        return np.log(0.01 + rng.random(shape)).astype(dt)
    return (2 * rng.standard_normal(shape)).astype(dt)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")   # torch's KLDivLoss notice
@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none", "batchmean"])
@pytest.mark.parametrize("spec", _LOSSES, ids=lambda s: s[0] + "".join(f"-{k}" for k in s[1]))
def test_loss_modules_match_torch(spec, reduction, backend):
    """crit(input, target) is a float (an array for "none") equal to torch's; crit.backward()
    equals torch's input gradient (float32 inputs, 8-d-free shapes)."""
    torch = pytest.importorskip("torch")
    name, kw, fname, xk, yk = spec
    if reduction == "batchmean" and name != "KLDivLoss":
        with pytest.raises(ValueError, match="reduction"):
            getattr(nn, name)(reduction=reduction, **kw)
        return
    rng = np.random.default_rng(3)
    x, y = _vals(rng, xk, (6, 7, 3), np.float32), _vals(rng, yk, (6, 7, 3), np.float32)
    crit = getattr(nn, name)(reduction=reduction, **kw)
    with fastnn.use_backend(backend):
        loss = crit(x, y)
        d = crit.backward()
    tcrit = getattr(torch.nn, name)(reduction=reduction, **kw)
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tl = tcrit(tx, torch.tensor(y, dtype=torch.float64))
    (tl if reduction != "none" else tl.sum()).backward()
    if reduction == "none":
        assert isinstance(loss, np.ndarray) and loss.shape == x.shape and loss.dtype == np.float32
    else:
        assert isinstance(loss, float)
    np.testing.assert_allclose(loss, tl.detach().numpy(), rtol=2e-5, atol=1e-6)
    assert d.shape == x.shape and d.dtype == np.float32
    np.testing.assert_allclose(d, tx.grad.numpy(), rtol=2e-5, atol=1e-7)
    # the functional form agrees
    args = dict(reduction=reduction)
    if "beta" in kw or "delta" in kw or "log_target" in kw:
        args.update(kw)
    with fastnn.use_backend(backend):
        np.testing.assert_array_equal(getattr(F, fname)(x, y, **args), loss)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_bce_family_weights_and_extremes_follow_torch(backend):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((5, 4)) * 30).astype(np.float32)   # saturating logits
    y = rng.random((5, 4)).astype(np.float32)
    w, pw = rng.random(4).astype(np.float32) + 0.5, rng.random(4).astype(np.float32) + 0.5
    crit = nn.BCEWithLogitsLoss(weight=w, pos_weight=pw)
    with fastnn.use_backend(backend):
        loss, d = crit(x, y), crit.backward()
    tx = torch.tensor(x, requires_grad=True)
    tl = torch.nn.BCEWithLogitsLoss(weight=torch.tensor(w), pos_weight=torch.tensor(pw))(tx, torch.tensor(y))
    tl.backward()
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, tl.item(), rtol=1e-5)
    np.testing.assert_allclose(d, tx.grad.numpy(), rtol=1e-5, atol=1e-8)
    # BCELoss: log clamped at -100 where the probability is exactly 0 or 1
    p = np.array([0.0, 1.0, 0.5, 1.0], np.float32)
    t = np.array([1.0, 0.0, 0.5, 1.0], np.float32)
    with fastnn.use_backend(backend):
        got = F.binary_cross_entropy(p, t, reduction="none")
    want = torch.nn.functional.binary_cross_entropy(torch.tensor(p), torch.tensor(t), reduction="none")
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_nll_loss_module_matches_torch(backend):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = np.log(rng.dirichlet(np.ones(6), size=(4, 3))).transpose(0, 2, 1).astype(np.float32)
    t = rng.integers(0, 6, (4, 3))
    t[0, 0] = 2
    w = rng.random(6).astype(np.float32) + 0.2
    crit = nn.NLLLoss(weight=w, ignore_index=2)
    with fastnn.use_backend(backend):
        loss, d = crit(x, t), crit.backward()
    tx = torch.tensor(x, requires_grad=True)
    tl = torch.nn.NLLLoss(weight=torch.tensor(w), ignore_index=2)(tx, torch.tensor(t))
    tl.backward()
    np.testing.assert_allclose(loss, tl.item(), rtol=1e-5)
    np.testing.assert_allclose(d, tx.grad.numpy(), rtol=1e-5, atol=1e-8)


def test_elementwise_loss_bad_input_names_the_argument():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="target"):
        F.mse_loss(x, np.zeros((3, 5), np.float32))
    with pytest.raises(TypeError, match="target"):
        F.l1_loss(x, np.zeros((3, 4), np.float64))
    with pytest.raises(ValueError, match="input"):
        F.binary_cross_entropy(x + 1.5, x)
    with pytest.raises(ValueError, match="input"):
        nn.BCELoss()(x - 0.1, x)
    with pytest.raises(IndexError, match="target"):
        F.nll_loss(x, np.array([0, 1, 4]))
    with pytest.raises(ValueError, match="reduction"):
        F.kl_div(x, x, reduction="avg")
    with pytest.raises(ValueError, match="weight"):
        F.mse_loss(x, x, weight=np.ones(4, np.float32))   # torch: the input's exact shape
    with pytest.raises(ValueError, match="pos_weight"):
        F.binary_cross_entropy_with_logits(x, x, pos_weight=np.ones(3, np.float32))
    # torch's legacy size_average / reduce map onto reduction
    assert F.mse_loss(x + 1, x, size_average=False) == pytest.approx(12.0)
    assert F.l1_loss(x + 1, x, reduce=False).shape == (3, 4)


def test_issue19_names_are_importable():
    import fastnn.optim as optim
    from fastnn.optim import lr_scheduler
    for n in ("Flatten", "Unflatten", "ModuleDict", "TransformerEncoder", "TransformerDecoder",
              "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss",
              "NLLLoss", "KLDivLoss"):
        assert issubclass(getattr(nn, n), nn.Module), n
    for n in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
              "binary_cross_entropy_with_logits", "nll_loss", "kl_div"):
        assert callable(getattr(F, n)), n
    assert optim.RMSprop and optim.Adagrad and nn.utils.clip_grad_value_
    for n in ("OneCycleLR", "ReduceLROnPlateau", "LinearLR", "ExponentialLR", "SequentialLR"):
        assert getattr(lr_scheduler, n), n


def test_cpu_kernel_takes_either_int64_type_number():
    """int64 has two type numbers on 64-bit Linux ('l' and 'q'): the compiled shell must read
    both as class indices, not as probabilities, and refuse other integer widths."""
    from fastnn._backend import backend
    cpu = backend("cpu")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    t = np.array([0, 4, 2, 1, 3, 0], np.int64)
    ref, _ = cpu.cross_entropy(x, t, None, -100, "mean", 0.0)
    for code in ("q", "l"):
        tq = t.astype(np.dtype(code))
        got, saved = cpu.cross_entropy(x, tq, None, -100, "mean", 0.0)
        assert float(got) == float(ref)
        dx = cpu.cross_entropy_backward(np.ones((), np.float32), saved)
        assert dx.shape == x.shape
    with pytest.raises(TypeError, match="target"):
        cpu.cross_entropy(x, t.astype(np.int32), None, -100, "mean", 0.0)
