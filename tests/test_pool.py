"""Pool family: max/avg pooling against torch on larger shapes, torch's NaN / tie / ceil_mode
rules, thread determinism, modules, bad input."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn
from fastnn.functional.pool import pool_output_size

torch = pytest.importorskip("torch")

MAX_CFGS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), dilation=(2, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=2, ceil_mode=True),
    dict(kernel_size=4, stride=3, padding=2, dilation=2),
]
AVG_CFGS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), divisor_override=4),
    dict(kernel_size=5, stride=3, padding=2, ceil_mode=True),
]


def _ids(c):
    return ",".join(f"{k}={v}" for k, v in c.items())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind,cfg", [("max", c) for c in MAX_CFGS] + [("avg", c) for c in AVG_CFGS],
                         ids=lambda c: c if isinstance(c, str) else _ids(c))
def test_pool_matches_torch(kind, cfg, dtype, threads):
    old = fastnn.get_num_threads()
    fastnn.set_num_threads(threads)
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4, 6, 23, 18)).astype(dtype)
        m = (nn.MaxPool2d if kind == "max" else nn.AvgPool2d)(**cfg)
        tm = (torch.nn.MaxPool2d if kind == "max" else torch.nn.AvgPool2d)(**cfg)
        y = m(x)
        tx = torch.tensor(x, requires_grad=True)
        ty = tm(tx)
        tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(y, ty.detach().numpy(), **tol)
        dy = rng.standard_normal(y.shape).astype(dtype)
        dx = m.backward(dy)
        ty.backward(torch.tensor(dy))
        np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)
        assert y.dtype == dx.dtype == dtype
    finally:
        fastnn.set_num_threads(old)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_max_pool_nan_ties_and_infinities_like_torch(backend):
    x = np.array([[[[1.0, 1.0, -np.inf, -np.inf, 2.0, np.nan],
                    [0.5, 1.0, -np.inf, -np.inf, np.nan, 3.0],
                    [np.nan, 0.0, 5.0, 5.0, 7.0, 7.0],
                    [1.0, np.nan, 5.0, 4.0, 7.0, 1.0]]]], dtype=np.float32)
    for cfg in (dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1),
                dict(kernel_size=2, stride=1, ceil_mode=True)):
        with fastnn.use_backend(backend):
            y, ctx = F.max_pool2d_fwd(x, **cfg)
            dy = np.arange(1, y.size + 1, dtype=np.float32).reshape(y.shape)
            dx = F.max_pool2d_bwd(ctx, dy)
        tx = torch.tensor(x, requires_grad=True)
        ty = torch.nn.functional.max_pool2d(tx, **cfg)
        ty.backward(torch.tensor(dy))
        np.testing.assert_array_equal(y, ty.detach().numpy())
        np.testing.assert_array_equal(dx, tx.grad.numpy())


def test_ceil_mode_last_window_starts_inside():
    # (5 + 2*1 - 3 + 1) / 2 + 1 = 4 windows by ceil, but the 4th would start at 6 - 1 = 5 >= 5
    # (in the right padding): torch drops it
    x = np.zeros((1, 1, 5, 5), np.float32)
    assert F.max_pool2d(x, 3, 2, 1, ceil_mode=True).shape == (1, 1, 3, 3)
    assert F.avg_pool2d(x, 2, 2, 0, ceil_mode=True).shape == (1, 1, 3, 3)
    assert pool_output_size(5, 3, 2, 1, 1, True) == 3
    assert pool_output_size(6, 3, 2, 1, 1, True) == 4


def test_pool_modules_stride_default_and_repr():
    m = nn.MaxPool2d(3)
    assert m.stride == (3, 3)
    assert "kernel_size=(3, 3)" in repr(m)
    a = nn.AvgPool2d((2, 4), stride=1)
    assert a.stride == (1, 1) and list(a.state_dict()) == []
    x = np.ones((1, 1, 6, 6), np.float32)
    assert F.max_pool2d(x, 3).shape == (1, 1, 2, 2)
    assert F.avg_pool2d(x, 2, stride=[]).shape == (1, 1, 3, 3)


@pytest.mark.parametrize("call,match", [
    (lambda: F.max_pool2d(np.ones((1, 1, 6, 6)), 2, padding=2), r"padding \(2, 2\).*half"),
    (lambda: F.avg_pool2d(np.ones((1, 1, 6, 6)), 3, padding=(0, 2)), "half of kernel_size"),
    (lambda: F.max_pool2d(np.ones((1, 1, 6, 6)), 2, stride=0), "stride"),
    (lambda: F.max_pool2d(np.ones((1, 1, 6, 6)), 2, dilation=0), "dilation"),
    (lambda: F.max_pool2d(np.ones((1, 1, 6, 6)), 0), "kernel_size"),
    (lambda: F.max_pool2d(np.ones((1, 6, 6)), 2), r"4-D.*\(1, 6, 6\)"),
    (lambda: F.avg_pool2d(np.ones((6, 6)), 2), r"4-D.*\(6, 6\)"),
    (lambda: F.max_pool2d(np.ones((1, 1, 2, 2)), 3, padding=0), "larger than the padded input"),
    (lambda: F.max_pool2d(np.ones((1, 1, 4, 4)), 2, dilation=4), "larger than the padded input"),
    (lambda: F.avg_pool2d(np.ones((1, 1, 4, 4)), 2, divisor_override=0), "divisor_override"),
    (lambda: nn.MaxPool2d(2, padding=2), "half"),
    (lambda: nn.AvgPool2d(2, padding=3), "half"),
])
def test_pool_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pool_type_errors():
    with pytest.raises(TypeError):
        F.max_pool2d(np.ones((1, 1, 4, 4), np.int32), 2)
    with pytest.raises(TypeError, match="kernel_size"):
        F.max_pool2d(np.ones((1, 1, 4, 4)), 2.0)
    with pytest.raises(TypeError, match="divisor_override"):
        F.avg_pool2d(np.ones((1, 1, 4, 4)), 2, divisor_override=1.5)
