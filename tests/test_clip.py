"""fastnn.nn.utils.clip_grad_norm_ / clip_grad_value_ against torch.nn.utils."""
import math

import numpy as np
import pytest

from fastnn.nn import Parameter
from fastnn.nn.utils import clip_grad_norm_, clip_grad_value_, get_total_norm


def _pair(torch, dtype, scale=1.0, seed=0, empty=True):
    rng = np.random.default_rng(seed)
    shapes = [(5, 4), (7,), (3, 2, 2)] + ([(0,)] if empty else [])
    ps, tps = [], []
    for s in shapes:
        d = rng.standard_normal(s).astype(dtype)
        g = (rng.standard_normal(s) * scale).astype(dtype)
        p = Parameter(d)
        p.grad = g.copy()
        tp = torch.tensor(d, requires_grad=True)
        tp.grad = torch.tensor(g)
        ps.append(p)
        tps.append(tp)
    nog = Parameter(np.ones(3, dtype))          # no gradient: ignored
    ps.append(nog)
    tps.append(torch.ones(3, dtype=tps[0].dtype, requires_grad=True))
    return ps, tps


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(dtype, norm_type, max_norm):
    torch = pytest.importorskip("torch")
    # torch's inf norm fails on an empty gradient (fastnn counts it as 0)
    ps, tps = _pair(torch, dtype, empty=norm_type != math.inf)
    total = clip_grad_norm_(ps, max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type)
    assert isinstance(total, float)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    assert total == pytest.approx(float(ttotal), rel=rtol)
    for p, tp in zip(ps, tps):
        if tp.grad is None:
            assert p.grad is None
            continue
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=rtol, atol=1e-7)
        assert p.grad.dtype == np.dtype(dtype)
    if max_norm == 0.5:
        assert get_total_norm([p.grad for p in ps], norm_type) == pytest.approx(0.5, rel=1e-4)


def test_clip_grad_value_matches_torch():
    torch = pytest.importorskip("torch")
    ps, tps = _pair(torch, np.float32, scale=3.0)
    clip_grad_value_(ps, 1.5)
    torch.nn.utils.clip_grad_value_(tps, 1.5)
    for p, tp in zip(ps, tps):
        if tp.grad is not None:
            np.testing.assert_array_equal(p.grad, tp.grad.numpy())
    assert max(np.abs(p.grad).max() for p in ps if p.grad is not None and p.grad.size) <= 1.5


def test_single_parameter_and_no_grads():
    p = Parameter(np.zeros(4))
    assert clip_grad_norm_(p, 1.0) == 0.0
    p.grad = np.full(4, 2.0)
    assert clip_grad_norm_(p, 1.0) == pytest.approx(4.0)
    np.testing.assert_allclose(np.linalg.norm(p.grad), 1.0, rtol=1e-5)


def test_nonfinite_and_bad_input():
    p = Parameter(np.zeros(2))
    p.grad = np.array([np.inf, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert clip_grad_norm_([p], 1.0) == math.inf
    with pytest.raises(ValueError):
        clip_grad_norm_([p], -1.0)
    with pytest.raises(TypeError):
        clip_grad_norm_([p], "1")
    with pytest.raises(TypeError):
        clip_grad_norm_([np.zeros(2)], 1.0)
    with pytest.raises(ValueError):
        clip_grad_value_([p], -0.1)
