"""linear with a weight in GPT-2's Conv1D layout: the (out, in) weight given as the
transpose of a C-contiguous (in, out) array is taken as it is (no copy per call), the
results equal those of the contiguous copy, d_weight comes back in the weight's layout,
and the bits do not depend on the thread count."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn
from fastnn._backend import backend

SHAPES = [(1024, 128, 384), (7, 5, 3), (300, 200, 96), (64, 4096, 1000), (2100, 96, 40),
          (0, 4, 3), (3, 1, 1)]


@pytest.fixture
def restore_threads():
    old = fastnn.get_num_threads()
    yield
    fastnn.set_num_threads(old)


def _data(shape, dtype, seed=0):
    rows, n_in, n_out = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n_in)).astype(dtype)
    w_in_out = rng.standard_normal((n_in, n_out)).astype(dtype)
    b = rng.standard_normal(n_out).astype(dtype)
    dy = rng.standard_normal((rows, n_out)).astype(dtype)
    return x, w_in_out, b, dy


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_transposed_weight_equals_contiguous_weight(shape, dtype, with_bias):
    x, wc, b, dy = _data(shape, dtype)
    b = b if with_bias else None
    y_t, ctx_t = F.linear_fwd(x, wc.T, b)
    # taken as it is: the saved weight is the caller's view, not a copy
    assert np.shares_memory(ctx_t[1][1], wc)
    y_c, ctx_c = F.linear_fwd(x, np.ascontiguousarray(wc.T), b)
    g_t = F.linear_bwd(ctx_t, dy)
    g_c = F.linear_bwd(ctx_c, dy)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(y_t, y_c, **tol)
    for a, c in zip(g_t, g_c):
        if c is None:
            assert a is None
        else:
            np.testing.assert_allclose(a, c, **tol)
    # d_weight has the weight's shape and layout: its transpose is C-contiguous (in, out)
    assert g_t[1].shape == (shape[2], shape[1])
    assert g_t[1].T.flags.c_contiguous
    # the float64 reference
    ref = backend("reference")
    y_r, s_r = ref.linear(x, wc.T, b)
    np.testing.assert_allclose(y_t, y_r, **tol)
    for a, c in zip(g_t, ref.linear_backward(dy, s_r)):
        if c is not None:
            np.testing.assert_allclose(a, c, **tol)


@pytest.mark.parametrize("shape", [(1024, 128, 384), (300, 200, 96), (64, 4096, 1000),
                                   (2100, 96, 40)], ids=str)
def test_transposed_weight_same_bits_for_any_thread_count(shape, restore_threads):
    x, wc, b, dy = _data(shape, np.float32, seed=2)
    res = {}
    for n in (1, 2, 3):
        fastnn.set_num_threads(n)
        y, ctx = F.linear_fwd(x, wc.T, b)
        res[n] = (y,) + tuple(F.linear_bwd(ctx, dy))
    for n in (2, 3):
        for a, c in zip(res[n], res[1]):
            np.testing.assert_array_equal(a, c)


def test_weight_neither_c_nor_f_contiguous_is_copied_not_misread():
    x, wc, b, dy = _data((64, 32, 48), np.float32)
    w = np.ascontiguousarray(wc.T)
    w_strided = np.zeros((48, 64), np.float32)[:, ::2]
    w_strided[...] = w
    y, ctx = F.linear_fwd(x, w_strided, b)
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-5, atol=1e-4)
    cpu = backend("cpu")
    with pytest.raises(ValueError, match="C-contiguous"):
        cpu.linear(x, w_strided, b)


def test_conv1d_passes_its_weight_without_a_copy():
    """Conv1D on the host: the weight is read in its (in, out) layout and its gradient comes
    back C-contiguous (in, out); values as the reference backend's."""
    fastnn.manual_seed(0)
    m = nn.Conv1D(96, 40)
    m.train()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 25, 40)).astype(np.float32)
    dy = rng.standard_normal((4, 25, 96)).astype(np.float32)
    y = m(x)
    dx = m.backward(dy)
    assert m.weight.grad.shape == (40, 96) and m.weight.grad.flags.c_contiguous
    with fastnn.use_backend("reference"):
        r = nn.Conv1D(96, 40)
        r.load_state_dict(m.state_dict())
        r.train()
        yr = r(x)
        dxr = r.backward(dy)
    np.testing.assert_allclose(y, yr, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, dxr, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.weight.grad, r.weight.grad, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(m.bias.grad, r.bias.grad, rtol=1e-5, atol=1e-4)
    # a second backward accumulates
    m(x)
    m.backward(dy)
    np.testing.assert_allclose(m.weight.grad, 2 * r.weight.grad, rtol=1e-5, atol=2e-4)


def test_conv1d_forward_makes_no_weight_copy(monkeypatch):
    """The host path hands linear a view of the weight (the copy per call is gone)."""
    seen = []
    real = F.linear_fwd

    def spy(x, weight, bias=None):
        seen.append(weight)
        return real(x, weight, bias)

    monkeypatch.setattr(F, "linear_fwd", spy)
    m = nn.Conv1D(16, 8)
    m(np.ones((3, 8), np.float32))
    assert np.shares_memory(seen[0], m.weight.data)
