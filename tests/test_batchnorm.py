"""BatchNorm family: modules against torch over several steps (running statistics,
momentum / cumulative average, num_batches_tracked, eval), switches, in-place running
updates of F.batch_norm, thread determinism, float32 accuracy, bad input."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn

torch = pytest.importorskip("torch")


def _pair(cls, tcls, C, **kw):
    m = cls(C, **kw).double()
    t = tcls(C, **kw).double()
    with torch.no_grad():
        if t.weight is not None:
            t.weight.uniform_(0.5, 1.5)
            t.bias.uniform_(-0.5, 0.5)
    m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    return m, t


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cls,tcls,shape,kw", [
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 9, 10), {}),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, (3, 5, 2, 3), dict(momentum=None)),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), dict(affine=False, momentum=0.3)),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), dict(track_running_stats=False)),
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, (7, 4), dict(eps=1e-3)),
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, (3, 4, 70), dict(momentum=None)),
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, (300, 6), {}),
])
def test_batchnorm_module_steps_like_torch(cls, tcls, shape, kw, threads):
    old = fastnn.get_num_threads()
    fastnn.set_num_threads(threads)
    try:
        m, t = _pair(cls, tcls, shape[1], **kw)
        rng = np.random.default_rng(0)
        for step in range(3):
            x = rng.standard_normal(shape) * (1 + step) + 0.5 * step
            dy = rng.standard_normal(shape)
            m.zero_grad()
            t.zero_grad()
            y = m(x)
            tx = torch.tensor(x, requires_grad=True)
            ty = t(tx)
            np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-10)
            dx = m.backward(dy)
            ty.backward(torch.tensor(dy))
            np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-10)
            if t.weight is not None:
                np.testing.assert_allclose(m.weight.grad, t.weight.grad.numpy(), rtol=1e-9, atol=1e-10)
                np.testing.assert_allclose(m.bias.grad, t.bias.grad.numpy(), rtol=1e-9, atol=1e-10)
            for k, v in t.state_dict().items():
                np.testing.assert_allclose(m.state_dict()[k], v.numpy(), rtol=1e-12, atol=1e-14,
                                           err_msg=k)
        m.eval()
        t.eval()
        x = rng.standard_normal(shape)
        tx = torch.tensor(x, requires_grad=True)
        ty = t(tx)
        np.testing.assert_allclose(m(x), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
        m.train()
        y = m(x)   # backward in eval mode goes through the running statistics; check train too
        assert y.shape == x.shape
    finally:
        fastnn.set_num_threads(old)


def test_batchnorm_eval_backward_like_torch():
    m, t = _pair(nn.BatchNorm2d, torch.nn.BatchNorm2d, 3)
    m.running_mean[...] = [0.1, -0.2, 0.3]
    m.running_var[...] = [0.5, 2.0, 1.5]
    t.load_state_dict({k: torch.tensor(v) for k, v in m.state_dict().items()})
    m.eval()
    t.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4))
    dy = np.random.default_rng(2).standard_normal((2, 3, 4, 4))
    y, ctx = F.batch_norm_fwd(x, m.running_mean, m.running_var, m.weight.data, m.bias.data, False)
    dx, dw, db = F.batch_norm_bwd(ctx, dy)
    tx = torch.tensor(x, requires_grad=True)
    ty = t(tx)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(dw, t.weight.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(db, t.bias.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_functional_updates_running_stats_in_place(backend):
    x = np.random.default_rng(0).standard_normal((6, 3, 4)).astype(np.float32) * 2 + 1
    wide = np.zeros((3, 2), np.float32)
    rm = wide[:, 0]                       # a strided view: updated through the view
    rv = np.ones(3, np.float32)
    with fastnn.use_backend(backend):
        F.batch_norm(x, rm, rv, training=True, momentum=0.25)
    xs = x.astype(np.float64).transpose(1, 0, 2).reshape(3, -1)
    np.testing.assert_allclose(rm, 0.25 * xs.mean(1), rtol=1e-5)
    np.testing.assert_allclose(rv, 0.75 + 0.25 * xs.var(1, ddof=1), rtol=1e-5)
    assert rm.base is wide and rm.dtype == np.float32


def test_batchnorm_float32_with_large_offset():
    # one-pass statistics shifted by the first value: no cancellation for mean >> std
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((16, 4, 32, 32)) + 1000.0).astype(np.float32)
    y = F.batch_norm(x, None, None, training=True)
    with fastnn.use_backend("reference"):
        yr = F.batch_norm(x, None, None, training=True)
    np.testing.assert_allclose(y, yr, rtol=1e-3, atol=2e-3)


def test_batchnorm_state_dict_names_like_torch():
    for cls, tcls in ((nn.BatchNorm1d, torch.nn.BatchNorm1d), (nn.BatchNorm2d, torch.nn.BatchNorm2d)):
        assert list(cls(5).state_dict()) == list(tcls(5).state_dict())
        assert list(cls(5, affine=False).state_dict()) == list(tcls(5, affine=False).state_dict())
        assert list(cls(5, track_running_stats=False).state_dict()) == \
            list(tcls(5, track_running_stats=False).state_dict())
    m = nn.BatchNorm2d(3)
    assert m.num_batches_tracked.dtype == np.int64 and m.num_batches_tracked.shape == ()
    m.double()
    assert m.running_mean.dtype == np.float64 and m.num_batches_tracked.dtype == np.int64


@pytest.mark.parametrize("call,exc,match", [
    (lambda: nn.BatchNorm2d(3)(np.ones((1, 3, 1, 1), np.float32)), ValueError,
     "more than 1 value per channel"),
    (lambda: nn.BatchNorm1d(3)(np.ones((1, 3), np.float32)), ValueError, "more than 1 value"),
    (lambda: nn.BatchNorm2d(3)(np.ones((2, 3, 4), np.float32)), ValueError, r"4-D.*\(2, 3, 4\)"),
    (lambda: nn.BatchNorm1d(3)(np.ones((2, 3, 4, 4), np.float32)), ValueError, "2-D"),
    (lambda: nn.BatchNorm2d(4)(np.ones((2, 3, 4, 4), np.float32)), ValueError,
     r"running_mean must have shape \(num_features,\) = \(3,\)"),
    (lambda: F.batch_norm(np.ones((2, 3)), None, None), ValueError, "required when training=False"),
    (lambda: F.batch_norm(np.ones(3), None, None, training=True), ValueError, "at least 2 dim"),
    (lambda: F.batch_norm(np.ones((2, 3)), np.zeros(3, np.float32), np.ones(3)), TypeError,
     "running_mean has dtype float32"),
    (lambda: F.batch_norm(np.ones((2, 3)), None, None, np.ones(4), training=True), ValueError,
     "weight must have shape"),
    (lambda: F.batch_norm(np.ones((2, 3)), None, None, training=True, eps=0), ValueError, "eps"),
    (lambda: F.batch_norm(np.ones((2, 3)), None, None, training=True, momentum="x"), TypeError,
     "momentum"),
    (lambda: nn.BatchNorm2d(0), ValueError, "num_features"),
])
def test_batchnorm_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_batchnorm_eval_no_tracking_uses_batch_stats():
    m = nn.BatchNorm2d(2, track_running_stats=False).eval()
    x = np.random.default_rng(0).standard_normal((3, 2, 4, 4)).astype(np.float32) + 3
    y = m(x)
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)
