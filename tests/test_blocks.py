"""Transformer blocks (Conv1D, FeedForward, Residual, StdLayerNorm) against PyTorch."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn

torch = pytest.importorskip("torch")


def _t(a, grad=True):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=grad)


def _grads_close(m, tgrads, rtol=1e-9, atol=1e-11):
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad, tgrads[name], rtol=rtol, atol=atol, err_msg=name)


def test_conv1d_matches_torch_and_init():
    fastnn.manual_seed(0)
    m = nn.Conv1D(3072, 768)
    assert m.weight.shape == (768, 3072) and m.bias.shape == (3072,)
    assert m.weight.dtype == np.float32
    assert abs(float(m.weight.data.std()) - 0.02) < 5e-4 and abs(float(m.weight.data.mean())) < 5e-4
    np.testing.assert_array_equal(m.bias.data, 0)
    assert set(m.state_dict()) == {"weight", "bias"}

    rng = np.random.default_rng(1)
    m = nn.Conv1D(7, 5).double()
    m.load_state_dict({"weight": rng.standard_normal((5, 7)), "bias": rng.standard_normal(7)})
    x = rng.standard_normal((2, 3, 5))
    dy = rng.standard_normal((2, 3, 7))
    y = m(x)
    dx = m.backward(dy)
    tx, tw, tb = _t(x), _t(m.weight.data), _t(m.bias.data)
    ty = torch.addmm(tb, tx.view(-1, 5), tw).view(2, 3, 7)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12)
    _grads_close(m, {"weight": tw.grad.numpy(), "bias": tb.grad.numpy()})
    assert m.weight.grad.flags.c_contiguous


class _TorchMLP(torch.nn.Module):
    """HF GPT-2 MLP (Conv1D c_fc, c_proj) with a choice of activation."""

    def __init__(self, d, dff, act):
        super().__init__()
        self.c_fc_w = torch.nn.Parameter(torch.zeros(d, dff, dtype=torch.float64))
        self.c_fc_b = torch.nn.Parameter(torch.zeros(dff, dtype=torch.float64))
        self.c_proj_w = torch.nn.Parameter(torch.zeros(dff, d, dtype=torch.float64))
        self.c_proj_b = torch.nn.Parameter(torch.zeros(d, dtype=torch.float64))
        self.act = act

    def forward(self, x):
        h = self.act(x @ self.c_fc_w + self.c_fc_b)
        return h @ self.c_proj_w + self.c_proj_b


@pytest.mark.parametrize("activation,tact", [
    ("gelu_tanh", lambda h: torch.nn.functional.gelu(h, approximate="tanh")),
    ("relu", torch.relu),
    ("gelu", torch.nn.functional.gelu),
])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_feedforward_matches_torch(activation, tact, backend):
    fastnn.manual_seed(3)
    m = nn.FeedForward(8, activation=activation).double()
    assert m.d_ff == 32
    assert set(m.state_dict()) == {"c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"}
    rng = np.random.default_rng(2)
    m.load_state_dict({k: rng.standard_normal(v.shape) * 0.5 for k, v in m.state_dict().items()})
    t = _TorchMLP(8, 32, tact)
    with torch.no_grad():
        t.c_fc_w.copy_(torch.tensor(m.c_fc.weight.data))
        t.c_fc_b.copy_(torch.tensor(m.c_fc.bias.data))
        t.c_proj_w.copy_(torch.tensor(m.c_proj.weight.data))
        t.c_proj_b.copy_(torch.tensor(m.c_proj.bias.data))
    x = rng.standard_normal((2, 5, 8))
    dy = rng.standard_normal((2, 5, 8))
    with fastnn.use_backend(backend):
        y = m(x)
        dx = m.backward(dy)
    tx = _t(x)
    ty = t(tx)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    _grads_close(m, {"c_fc.weight": t.c_fc_w.grad.numpy(), "c_fc.bias": t.c_fc_b.grad.numpy(),
                     "c_proj.weight": t.c_proj_w.grad.numpy(), "c_proj.bias": t.c_proj_b.grad.numpy()})


def test_feedforward_dropout_train_and_eval():
    fastnn.manual_seed(0)
    m = nn.FeedForward(6, 12, dropout=0.5)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    m.eval()
    y_eval = m(x)
    m.train()
    fastnn.manual_seed(9)
    y = m(x)
    dropped = y == 0
    assert dropped.any() and not dropped.all()
    np.testing.assert_allclose(y[~dropped], 2 * y_eval[~dropped], rtol=1e-5)
    dx = m.backward(np.ones_like(y))
    assert dx.shape == x.shape
    # the c_proj bias gradient sees the dropout mask (scaled by 2)
    np.testing.assert_allclose(m.c_proj.bias.grad, 2 * (~dropped).sum(axis=0), rtol=1e-6)


def test_feedforward_bad_args():
    with pytest.raises(ValueError, match="activation"):
        nn.FeedForward(4, activation="tanh")
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.FeedForward(4, dropout=1.5)
    with pytest.raises(ValueError, match="d_model"):
        nn.FeedForward(0)


def test_residual_backward_through_both_paths():
    fastnn.manual_seed(1)
    inner = nn.Linear(5, 5).double()
    m = nn.Residual(inner)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5))
    dy = rng.standard_normal((3, 5))
    y = m(x)
    dx = m.backward(dy)
    tx, tw, tb = _t(x), _t(inner.weight.data), _t(inner.bias.data)
    ty = tx + torch.nn.functional.linear(tx, tw, tb)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12)
    _grads_close(m, {"module.weight": tw.grad.numpy(), "module.bias": tb.grad.numpy()})
    with pytest.raises(RuntimeError, match="backward"):
        m.backward(dy)
    with pytest.raises(TypeError, match="Module"):
        nn.Residual(lambda x: x)
    with pytest.raises(ValueError, match="shape"):
        nn.Residual(nn.Linear(5, 4))(x.astype(np.float32))


class _TorchStdLN(torch.nn.Module):
    """The Annotated Transformer's LayerNorm."""

    def __init__(self, features, eps):
        super().__init__()
        self.a_2 = torch.nn.Parameter(torch.ones(features, dtype=torch.float64))
        self.b_2 = torch.nn.Parameter(torch.zeros(features, dtype=torch.float64))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("eps", [1e-6, 0.1])
def test_std_layer_norm_module_matches_annotated_transformer(backend, eps):
    m = nn.StdLayerNorm(16, eps=eps).double()
    assert set(m.state_dict()) == {"a", "b"}
    np.testing.assert_array_equal(m.a.data, 1)
    np.testing.assert_array_equal(m.b.data, 0)
    rng = np.random.default_rng(4)
    m.load_state_dict({"a": rng.standard_normal(16), "b": rng.standard_normal(16)})
    t = _TorchStdLN(16, eps)
    with torch.no_grad():
        t.a_2.copy_(torch.tensor(m.a.data))
        t.b_2.copy_(torch.tensor(m.b.data))
    x = rng.standard_normal((3, 70, 16)) * 3 + 1
    dy = rng.standard_normal(x.shape)
    with fastnn.use_backend(backend):
        y = m(x)
        dx = m.backward(dy)
    tx = _t(x)
    ty = t(tx)
    ty.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-11)
    _grads_close(m, {"a": t.a_2.grad.numpy(), "b": t.b_2.grad.numpy()}, rtol=1e-9)
    # unlike LayerNorm: unbiased std, eps outside the root
    ln = F.layer_norm(x, 16, eps=eps)
    assert not np.allclose(F.std_layer_norm(x, eps=eps), ln)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_std_layer_norm_single_feature_is_nan_like_torch(backend):
    with fastnn.use_backend(backend), np.errstate(all="ignore"):
        y = F.std_layer_norm(np.ones((3, 1)))
    assert np.isnan(y).all()
    with pytest.warns(UserWarning, match="degrees of freedom"):
        assert torch.isnan(_TorchStdLN(1, 1e-6)(torch.ones(3, 1, dtype=torch.float64))).all()


def test_std_layer_norm_bad_input():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match=r"a must have shape \(features,\) = \(4,\)"):
        F.std_layer_norm(x, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="b must have shape"):
        F.std_layer_norm(x, None, np.ones((4, 1), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        F.std_layer_norm(x, np.ones(4, np.float64))
    with pytest.raises(ValueError, match="eps"):
        F.std_layer_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="0-d"):
        F.std_layer_norm(np.ones((), np.float32))
    with pytest.raises(ValueError, match="features"):
        nn.StdLayerNorm(0)
    m = nn.StdLayerNorm(4)
    with pytest.raises(ValueError, match="a must have shape"):
        m(np.ones((2, 5), np.float32))
