"""Conv1d, ConvTranspose2d, adaptive / 1-d pools, GroupNorm, RMSNorm: modules against torch
(torch's state_dict loads, same outputs and gradients), the compiled paths against each
other, thread determinism, torch's init and defaults."""
import importlib

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn

torch = pytest.importorskip("torch")


def _load_from_torch(m, t):
    m = m.to(np.float64)   # first: loading keeps the parameters' dtype
    m.load_state_dict({k: v.detach().numpy().astype(np.float64) for k, v in t.state_dict().items()})
    return m


MODULES = [
    (lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2),
     lambda: torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 11)),
    (lambda: nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1, groups=2),
     lambda: torch.nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1, groups=2), (2, 4, 5, 6)),
    (lambda: nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1, output_padding=2, bias=False),
     lambda: torch.nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1, output_padding=2, bias=False),
     (1, 3, 4, 4)),
    (lambda: nn.GroupNorm(3, 6), lambda: torch.nn.GroupNorm(3, 6), (2, 6, 4, 5)),
    (lambda: nn.RMSNorm((4, 5)), lambda: torch.nn.RMSNorm((4, 5)), (3, 4, 5)),
    (lambda: nn.AdaptiveAvgPool2d((3, None)), lambda: torch.nn.AdaptiveAvgPool2d((3, None)), (2, 3, 7, 5)),
    (lambda: nn.AdaptiveMaxPool2d((2, 4)), lambda: torch.nn.AdaptiveMaxPool2d((2, 4)), (2, 3, 7, 5)),
    (lambda: nn.MaxPool1d(3, 2, 1), lambda: torch.nn.MaxPool1d(3, 2, 1), (2, 3, 9)),
    (lambda: nn.AvgPool1d(3, 2, 1, count_include_pad=False),
     lambda: torch.nn.AvgPool1d(3, 2, 1, count_include_pad=False), (2, 3, 9)),
]


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("i", range(len(MODULES)))
def test_module_matches_torch_with_its_state_dict(i, backend):
    make, tmake, shape = MODULES[i]
    t = tmake().double()
    with torch.no_grad():
        for p in t.parameters():   # not torch's init values (ones, zeros): any values
            p.add_(torch.randn_like(p) * 0.3)
    m = _load_from_torch(make(), t)
    assert set(m.state_dict()) == set(t.state_dict())
    x = np.random.default_rng(i).standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    ty = t(tx)
    dy = np.random.default_rng(99).standard_normal(tuple(ty.shape))
    ty.backward(torch.tensor(dy))
    with fastnn.use_backend(backend):
        m.train()
        y = m(x)
        dx = m.backward(dy)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    for n, p in m.named_parameters():
        tp = dict(t.named_parameters())[n]
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=n)


def test_init_and_defaults_follow_torch():
    fastnn.manual_seed(0)
    c = nn.Conv1d(4, 8, 3, groups=2)
    assert c.weight.shape == (8, 2, 3) and c.kernel_size == (3,) and c.stride == (1,)
    bound = 1 / np.sqrt(2 * 3)
    assert np.abs(c.weight.data).max() <= bound and np.abs(c.bias.data).max() <= bound
    t = nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert t.weight.shape == (4, 3, 3, 3)     # (in, out/groups, kH, kW)
    bound = 1 / np.sqrt(3 * 9)                 # torch's fan_in: weight.size(1) * kH * kW
    assert np.abs(t.weight.data).max() <= bound and np.abs(t.weight.data).max() > 0.5 * bound
    g = nn.GroupNorm(2, 4)
    assert g.eps == 1e-5 and (g.weight.data == 1).all() and (g.bias.data == 0).all()
    assert nn.GroupNorm(2, 4, affine=False).weight is None
    r = nn.RMSNorm(6)
    assert r.eps is None and (r.weight.data == 1).all() and "bias" not in r.state_dict()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_norm_eps_none_is_the_dtype_eps(dtype):
    x = np.full((2, 4), 1e-5, dtype)
    y = F.rms_norm(x, 4)
    expect = torch.nn.functional.rms_norm(torch.tensor(x), (4,)).numpy()
    np.testing.assert_allclose(y, expect, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_adaptive_max_pool_return_indices_match_torch():
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6))
    y, idx = F.adaptive_max_pool2d(x, (3, 4), return_indices=True)
    ty, tidx = torch.nn.functional.adaptive_max_pool2d(torch.tensor(x), (3, 4), return_indices=True)
    np.testing.assert_array_equal(idx, tidx.numpy())
    assert idx.dtype == np.int64
    m = nn.AdaptiveMaxPool2d(2, return_indices=True)
    out, ind = m(x[0])
    assert out.shape == ind.shape == (3, 2, 2)


def test_conv_transpose_output_size_picks_output_padding():
    m = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    x = np.zeros((1, 2, 4, 4), np.float32)
    assert m(x).shape == (1, 3, 7, 7)
    assert m(x, output_size=(8, 8)).shape == (1, 3, 8, 8)
    assert m(x, output_size=(1, 3, 8, 7)).shape == (1, 3, 8, 7)


def test_conv_transpose_fused_backward_equals_the_two_pass_one():
    """The one-pass backward (dy's im2col tiles shared by d_input and d_weight) against
    conv2d forward + the d_weight-only pass."""
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        x = rng.standard_normal((5, 4, 6, 7)).astype(dt)
        w = rng.standard_normal((4, 3, 4, 3)).astype(dt)
        y, ctx = F.conv_transpose2d_fwd(x, w, None, (2, 3), 1, groups=1)
        dy = rng.standard_normal(y.shape).astype(dt)
        got = F.conv_transpose2d_bwd(ctx, dy)
        conv._FUSED_TBWD = False
        try:
            want = F.conv_transpose2d_bwd(ctx, dy)
        finally:
            conv._FUSED_TBWD = True
        tol = 1e-4 if dt == np.float32 else 1e-11
        for a, b in zip(got[:2], want[:2]):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
