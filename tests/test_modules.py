"""Module base semantics: parameters, caches, gradient accumulation, state dicts, containers."""
import numpy as np
import pytest

import fastnn
from fastnn import nn


def _mlp():
    fastnn.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.LayerNorm(5), nn.Linear(5, 3))


def test_named_parameters_and_state_dict_names():
    m = _mlp()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"]
    sd = m.state_dict()
    assert list(sd) == names
    assert sd["0.weight"].shape == (5, 6) and sd["0.weight"].dtype == np.float32


def test_backward_accumulates_like_torch():
    m = _mlp()
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    dy = np.ones((4, 3), np.float32)
    m(x)
    m.backward(dy)
    g1 = {n: p.grad.copy() for n, p in m.named_parameters()}
    m(x)
    m.backward(dy)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad, 2 * g1[n], rtol=1e-6, atol=1e-7)
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_backward_needs_training_forward_and_consumes_cache():
    m = nn.Linear(3, 2)
    x = np.ones((1, 3), np.float32)
    with pytest.raises(RuntimeError, match="forward in training mode"):
        m.backward(np.ones((1, 2), np.float32))
    m(x)
    m.backward(np.ones((1, 2), np.float32))
    with pytest.raises(RuntimeError, match="forward in training mode"):
        m.backward(np.ones((1, 2), np.float32))
    m.eval()
    m(x)
    with pytest.raises(RuntimeError):
        m.backward(np.ones((1, 2), np.float32))


def test_grad_output_is_validated():
    m = nn.Linear(3, 2)
    m(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="grad_output"):
        m.backward(np.ones((4, 3), np.float32))
    m(np.ones((4, 3), np.float32))
    with pytest.raises(TypeError, match="grad_output"):
        m.backward(np.ones((4, 2), np.float64))


def test_load_state_dict_strict_and_unchanged_on_error():
    m = _mlp()
    before = {k: v.copy() for k, v in m.state_dict().items()}
    bad = dict(before)
    bad["0.weight"] = np.zeros((4, 6), np.float32)   # wrong shape
    bad["3.bias"] = np.full(3, 7.0, np.float32)
    with pytest.raises(RuntimeError, match="size mismatch for '0.weight'"):
        m.load_state_dict(bad)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])   # nothing was changed
    extra = dict(before)
    extra["nope"] = np.zeros(1)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        m.load_state_dict(extra)
    missing = dict(before)
    del missing["2.bias"]
    with pytest.raises(RuntimeError, match="Missing key"):
        m.load_state_dict(missing)
    res = m.load_state_dict(dict(missing, nope=np.zeros(1)), strict=False)
    assert res.missing_keys == ["2.bias"] and res.unexpected_keys == ["nope"]
    new = {k: np.full_like(v, 0.5, dtype=np.float64) for k, v in before.items()}
    m.load_state_dict(new)
    assert m[0].weight.data.dtype == np.float32 and float(m[0].weight.data[0, 0]) == 0.5


def test_dtype_conversion_and_mixing_is_an_error():
    m = nn.Linear(3, 2)
    with pytest.raises(TypeError, match="float32 and float64"):
        m(np.ones((1, 3), np.float64))
    m.double()
    assert m.weight.dtype == np.float64
    assert m(np.ones((1, 3), np.float64)).dtype == np.float64


def test_sequential_container():
    m = _mlp()
    assert len(m) == 4 and isinstance(m[1], nn.GELU)
    assert isinstance(m[1:], nn.Sequential) and len(m[1:]) == 3
    ml = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    assert len(list(ml.parameters())) == 4
    with pytest.raises(TypeError):
        nn.Sequential(nn.Linear(2, 2), "relu")
    assert "Linear(in_features=6, out_features=5, bias=True)" in repr(m)


def test_shared_parameter_counted_once():
    a = nn.Linear(3, 3)
    b = nn.Linear(3, 3)
    b.weight = a.weight
    seq = nn.Sequential(a, b)
    assert len(list(seq.parameters())) == 3


def test_linear_init_matches_torch_bounds():
    fastnn.manual_seed(0)
    m = nn.Linear(400, 300)
    bound = 1 / np.sqrt(400)
    assert np.abs(m.weight.data).max() <= bound and np.abs(m.weight.data).max() > 0.95 * bound
    assert np.abs(m.bias.data).max() <= bound
    assert abs(float(m.weight.data.std()) - bound / np.sqrt(3)) < 0.01 * bound


def test_mlp_against_torch_with_loaded_weights():
    torch = pytest.importorskip("torch")
    m = _mlp().double()
    tm = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.LayerNorm(5),
                             torch.nn.Linear(5, 3)).double()
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = np.random.default_rng(2).standard_normal((7, 6))
    dy = np.random.default_rng(3).standard_normal((7, 3))
    for backend in ("reference", "cpu"):
        with fastnn.use_backend(backend):
            m.zero_grad()
            y = m(x)
            dx = m.backward(dy)
        tx = torch.tensor(x, requires_grad=True)
        tm.zero_grad()
        ty = tm(tx)
        ty.backward(torch.tensor(dy))
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
        for (n, p), (tn, tp) in zip(m.named_parameters(), tm.named_parameters()):
            assert n == tn
            np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_layernorm_module_options():
    ln = nn.LayerNorm((3, 4), elementwise_affine=False)
    assert list(ln.state_dict()) == []
    ln2 = nn.LayerNorm(4, bias=False)
    assert list(ln2.state_dict()) == ["weight"]
    with pytest.raises(ValueError, match="eps"):
        nn.LayerNorm(4, eps=0)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    y = ln(x)
    np.testing.assert_allclose(y.reshape(2, -1).mean(1), 0, atol=1e-6)
    dx = ln.backward(np.ones_like(x))
    np.testing.assert_allclose(dx, 0, atol=1e-5)


def test_readme_training_loop_runs_and_learns():
    fastnn.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 20)).astype(np.float32)
    target = rng.standard_normal((64, 4)).astype(np.float32)
    losses = []
    for _ in range(60):
        y = model(x)
        losses.append(float(((y - target) ** 2).mean()))
        dy = 2 * (y - target) / y.size
        model.zero_grad()
        model.backward(dy)
        for p in model.parameters():
            p.data -= 0.5 * p.grad
    assert losses[-1] < 0.5 * losses[0]


# ------------------------------------------------------------------ Flatten / Unflatten / ModuleDict
@pytest.mark.parametrize("start,end", [(1, -1), (0, -1), (1, 2), (-3, -2), (2, 2)])
def test_flatten_matches_torch(start, end):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    m = nn.Flatten(start, end)
    y = m(x)
    assert y.shape == tuple(torch.nn.Flatten(start, end)(torch.tensor(x)).shape)
    np.testing.assert_array_equal(y, torch.nn.Flatten(start, end)(torch.tensor(x)).numpy())
    dy = np.arange(y.size, dtype=np.float32).reshape(y.shape)
    np.testing.assert_array_equal(m.backward(dy), dy.reshape(x.shape))
    with pytest.raises(ValueError, match="start_dim"):
        nn.Flatten(3, 1)(x)


@pytest.mark.parametrize("dim,sizes", [(1, (2, 6)), (-1, (5, 1)), (1, (3, -1)), (0, (1, 2))])
def test_unflatten_matches_torch(dim, sizes):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((2, 12, 5)).astype(np.float32)
    m = nn.Unflatten(dim, sizes)
    y = m(x)
    ty = torch.nn.Unflatten(dim, sizes)(torch.tensor(x))
    np.testing.assert_array_equal(y, ty.numpy())
    np.testing.assert_array_equal(m.backward(np.ones_like(y)), np.ones_like(x))
    with pytest.raises(ValueError, match="unflattened_size"):
        nn.Unflatten(1, (5, 5))(x)


def test_flatten_in_a_sequential_trains_like_torch():
    """Conv-free CNN head: Flatten between a (N, C, H, W) input and a Linear; gradients equal."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 4, 4)).astype(np.float32)
    m = nn.Sequential(nn.Flatten(), nn.Linear(32, 5))
    tm = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(32, 5))
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    dy = rng.standard_normal((3, 5)).astype(np.float32)
    dx = (m(x), m.backward(dy))[1]
    tx = torch.tensor(x, requires_grad=True)
    tm(tx).backward(torch.tensor(dy))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m[1].weight.grad, tm[1].weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_module_dict_like_torch():
    torch = pytest.importorskip("torch")
    d = nn.ModuleDict({"enc": nn.Linear(3, 4), "act": nn.ReLU()})
    d.update([("dec", nn.Linear(4, 2))])
    d["norm"] = nn.LayerNorm(2)
    td = torch.nn.ModuleDict({"enc": torch.nn.Linear(3, 4), "act": torch.nn.ReLU()})
    td.update([("dec", torch.nn.Linear(4, 2))])
    td["norm"] = torch.nn.LayerNorm(2)
    assert list(d) == list(td) == list(d.keys()) == ["enc", "act", "dec", "norm"]
    assert list(d.state_dict()) == list(td.state_dict())
    d.load_state_dict({k: v.numpy() for k, v in td.state_dict().items()})
    assert "dec" in d and "x" not in d and len(d) == 4
    assert [k for k, _ in d.items()] == list(d) and list(d.values())[0] is d["enc"]
    assert len(list(d.parameters())) == 6
    del d["act"]
    assert list(d) == ["enc", "dec", "norm"] and d.pop("norm").__class__ is nn.LayerNorm
    d.update(nn.ModuleDict({"head": nn.Linear(2, 1)}))
    assert list(d) == ["enc", "dec", "head"]
    d.clear()
    assert len(d) == 0 and not list(d.parameters())
    with pytest.raises(KeyError):
        nn.ModuleDict({"a.b": nn.ReLU()})
    with pytest.raises(KeyError):
        nn.ModuleDict({"forward": nn.ReLU()})   # would shadow a method
    with pytest.raises(TypeError, match="Module"):
        nn.ModuleDict({"a": 3})
    with pytest.raises(ValueError, match="pair"):
        nn.ModuleDict().update([("a", nn.ReLU(), 3)])
