"""Modules in real pipelines (issue 13, the module and checkpoint half): a module called
several times keeps one cache per call and is backpropagated last-call-first; a rejected
backward keeps its cache; no_grad; backward hooks; per-call handles; pickling without
caches; optimizer and scheduler state through fastnn.save / fastnn.load; the umask."""
import copy
import pickle
import threading

import numpy as np
import pytest

import fastnn
from fastnn import nn

R = np.random.default_rng


def _grads(m):
    return {k: p.grad.copy() for k, p in m.named_parameters() if p.grad is not None}


def _backward_after(m, other, *grads):
    """m.backward(*grads) accumulating onto ``other``'s gradients: two separate copies of a
    module backpropagated in the same order as one module's two calls, so the oracle adds
    every gradient contribution in the same order (bit-for-bit, even for a parameter used
    several times per call)."""
    for p, q in zip(m.parameters(), other.parameters()):
        p.grad = None if q.grad is None else q.grad.copy()
    return m.backward(*grads)


def _assert_same_grads(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _twice(make, x1, x2, d1, d2, order=(2, 1)):
    """(dx1, dx2, grads) of one module called on x1 then x2 and backpropagated in ``order``,
    and the same from two separate copies of it (the oracle: summed parameter gradients)."""
    f = make()
    a, b = copy.deepcopy(f), copy.deepcopy(f)
    f(x1)
    f(x2)
    assert f._pending_calls() in (0, 2)     # 0: a test wrapper that keeps no cache itself
    dx = {}
    for i in order:
        dx[i] = f.backward(d2 if i == 2 else d1)
    assert all(m._pending_calls() == 0 for m in f.modules())
    a(x1)
    b(x2)
    first, second = (b, a) if order == (2, 1) else (a, b)
    ref = {}
    ref[2 if first is b else 1] = first.backward(d2 if first is b else d1)
    ref[1 if first is b else 2] = _backward_after(second, first, d1 if first is b else d2)
    return dx, (ref[1], ref[2]), _grads(f), _grads(second)


def _check_twice(make, x1, x2, d1, d2):
    """Both input gradients and every parameter gradient equal two separate copies' bits."""
    dx, ref, g, gref = _twice(make, x1, x2, d1, d2)
    np.testing.assert_array_equal(dx[1], ref[0])
    np.testing.assert_array_equal(dx[2], ref[1])
    _assert_same_grads(g, gref)


# ----------------------------------------------------------------------------- module reuse
def _linear():
    fastnn.manual_seed(0)
    return nn.Linear(6, 5, dtype=np.float64)


def _seq_shared_block():
    fastnn.manual_seed(0)
    blk = nn.Sequential(nn.Linear(6, 6, dtype=np.float64), nn.GELU(), nn.LayerNorm(6, dtype=np.float64))
    return nn.Sequential(blk, nn.Tanh(), blk, nn.Linear(6, 5, dtype=np.float64))


def _transformer_block():
    fastnn.manual_seed(0)
    return nn.TransformerBlock(6, 2, dtype=np.float64)


def _encoder_layer():
    fastnn.manual_seed(0)
    return nn.TransformerEncoderLayer(6, 2, dim_feedforward=8, dropout=0.0, batch_first=True,
                                      dtype=np.float64)


@pytest.mark.parametrize("make", [_linear, _seq_shared_block, _transformer_block, _encoder_layer],
                         ids=["linear", "shared-block", "gpt-block", "encoder-layer"])
def test_two_calls_backpropagate_like_two_copies(make):
    rng = R(1)
    shape = (2, 3, 6)
    x1, x2 = rng.standard_normal(shape), rng.standard_normal(shape)
    y = make()(x1)
    _check_twice(make, x1, x2, rng.standard_normal(y.shape), rng.standard_normal(y.shape))


def test_shared_block_in_sequential_matches_unshared_copy():
    """The same block applied twice in a Sequential gets the gradient of two blocks with the
    same weights: the summed gradients of the two positions."""
    seq = _seq_shared_block()
    blk = seq[0]
    b1, b2 = copy.deepcopy(blk), copy.deepcopy(blk)
    unshared = nn.Sequential(b1, nn.Tanh(), b2, copy.deepcopy(seq[3]))
    rng = R(2)
    x = rng.standard_normal((4, 6))
    y = seq(x)
    np.testing.assert_array_equal(y, unshared(x))
    d = rng.standard_normal(y.shape)
    np.testing.assert_array_equal(seq.backward(d), unshared.backward(d))
    for (k, p), q1, q2 in zip(blk.named_parameters(), b1.parameters(), b2.parameters()):
        np.testing.assert_array_equal(p.grad, q1.grad + q2.grad, err_msg=k)


def test_siamese_pair():
    fastnn.manual_seed(3)
    tower = nn.Sequential(nn.Linear(5, 8, dtype=np.float64), nn.ReLU(), nn.Linear(8, 4, dtype=np.float64))
    ta, tb = copy.deepcopy(tower), copy.deepcopy(tower)
    rng = R(3)
    xa, xb = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    ea, eb = tower(xa), tower(xb)
    d = ea - eb                          # gradient of 0.5 * |ea - eb|^2
    dxb = tower.backward(-d)            # last call first
    dxa = tower.backward(d)
    np.testing.assert_array_equal(dxa, (ta(xa), ta.backward(d))[1])
    np.testing.assert_array_equal(dxb, (tb(xb), tb.backward(-d))[1])
    for p, qa, qb in zip(tower.parameters(), ta.parameters(), tb.parameters()):
        np.testing.assert_array_equal(p.grad, qa.grad + qb.grad)


def test_gpt_tied_head_called_twice():
    from fastnn.models import GPT
    fastnn.manual_seed(4)
    m = GPT(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=8, dtype=np.float64)
    assert m.lm_head is None             # tied: the head is the embedding matrix
    rng = R(4)
    i1, i2 = rng.integers(0, 11, (2, 5)), rng.integers(0, 11, (2, 5))
    d1, d2 = rng.standard_normal((2, 5, 11)), rng.standard_normal((2, 5, 11))
    _check_twice(lambda: copy.deepcopy(m), i1, i2, d1, d2)


def test_bert_encoder_called_twice():
    from fastnn.models import BertEncoder
    fastnn.manual_seed(5)
    m = BertEncoder(vocab_size=13, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=12, max_position_embeddings=8, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, dtype=np.float64)
    rng = R(5)
    i1, i2 = rng.integers(0, 13, (2, 4)), rng.integers(0, 13, (2, 4))
    d1, d2 = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 4, 8))
    m(i1)
    m(i2)
    assert m._pending_calls() == 2
    m.backward(d2)
    m.backward(d1)
    _check_twice(lambda: copy.deepcopy(m), i1, i2, d1, d2)


def test_lstm_called_twice():
    fastnn.manual_seed(6)
    make = lambda: copy.deepcopy(lstm)  # noqa: E731
    lstm = nn.LSTM(3, 4, num_layers=2, dtype=np.float64)
    rng = R(6)
    x1, x2 = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 2, 3))
    d1, d2 = rng.standard_normal((5, 2, 4)), rng.standard_normal((5, 2, 4))

    class Out(nn.Module):            # the output sequence only, so _twice can drive it
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)[0]

        def backward(self, d):
            return self.m.backward(d)

    _check_twice(lambda: Out(make()), x1, x2, d1, d2)


def test_more_backwards_than_calls_is_an_error():
    f = _linear()
    x = R(7).standard_normal((2, 6))
    f(x)
    f(x)
    f.backward(np.ones((2, 5)))
    f.backward(np.ones((2, 5)))
    with pytest.raises(RuntimeError, match="preceding forward"):
        f.backward(np.ones((2, 5)))


# ----------------------------------------------------------------------------- per-call handles
def test_call_handle_backpropagates_out_of_order():
    seq = _seq_shared_block()
    ref1, ref2 = copy.deepcopy(seq), copy.deepcopy(seq)
    rng = R(8)
    x1, x2 = rng.standard_normal((3, 6)), rng.standard_normal((3, 6))
    d1, d2 = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    y1, h1 = seq.call(x1)
    y2, h2 = seq.call(x2)
    np.testing.assert_array_equal(y1, ref1(x1))
    assert h1.pending and h2.pending
    dx1 = h1.backward(d1)                # the first call first: against the stack order
    dx2 = h2.backward(d2)
    assert not h1.pending and seq._pending_calls() == 0
    np.testing.assert_array_equal(dx1, ref1.backward(d1))
    np.testing.assert_array_equal(dx2, (ref2(x2), _backward_after(ref2, ref1, d2))[1])
    _assert_same_grads(_grads(seq), _grads(ref2))
    with pytest.raises(RuntimeError, match="used once"):
        h1.backward(d1)


def test_call_handle_release_and_failed_backward_keeps_order():
    f = _linear()
    ref = copy.deepcopy(f)
    rng = R(9)
    x1, x2, x3 = (rng.standard_normal((2, 6)) for _ in range(3))
    f(x1)
    _, h2 = f.call(x2)
    f(x3)
    with pytest.raises(ValueError):
        h2.backward(np.ones((2, 4)))     # rejected: the stack keeps its order
    h2.release()
    assert f._pending_calls() == 2
    d = rng.standard_normal((2, 5))
    ref(x1)
    np.testing.assert_array_equal(f.backward(d), (ref(x3), ref.backward(d))[1])
    np.testing.assert_array_equal(f.backward(d), ref.backward(d))


def test_plain_backward_then_stale_handle_is_an_error():
    f = _linear()
    x = R(10).standard_normal((2, 6))
    _, h = f.call(x)
    f.backward(np.ones((2, 5)))
    with pytest.raises(RuntimeError, match="already consumed"):
        h.backward(np.ones((2, 5)))


# ----------------------------------------------------------------------------- failed backward
@pytest.mark.parametrize("bad", [np.ones((2, 4)), np.ones((2, 5), np.float32), np.ones((3, 5))],
                         ids=["shape", "dtype", "batch"])
def test_rejected_backward_keeps_the_cache(bad):
    f = _linear()
    ref = copy.deepcopy(f)
    x = R(11).standard_normal((2, 6))
    f(x)
    with pytest.raises((ValueError, TypeError)):
        f.backward(bad)
    assert f._pending_calls() == 1
    d = np.ones((2, 5))
    np.testing.assert_array_equal(f.backward(d), (ref(x), ref.backward(d))[1])
    _assert_same_grads(_grads(f), _grads(ref))


def test_rejected_backward_keeps_container_caches():
    m = _transformer_block()
    ref = copy.deepcopy(m)
    x = R(12).standard_normal((2, 3, 6))
    m(x)
    with pytest.raises((ValueError, TypeError)):
        m.backward(np.ones((2, 3, 5)))
    assert all(mm._pending_calls() == 1 for mm in m.modules() if mm._ctx or mm is m)
    d = np.ones((2, 3, 6))
    np.testing.assert_array_equal(m.backward(d), (ref(x), ref.backward(d))[1])


def test_user_subclass_backward_and_super_call_are_wrapped():
    class Scaled(nn.Linear):
        def backward(self, dy):
            return super().backward(2 * dy)

    fastnn.manual_seed(0)
    f = Scaled(3, 2, dtype=np.float64)
    x = np.ones((1, 3))
    f(x)
    f(x)
    f.backward(np.ones((1, 2)))          # super().backward inside: one pop, not two
    assert f._pending_calls() == 1


# ----------------------------------------------------------------------------- no_grad / eval
def test_no_grad_keeps_no_cache_and_is_per_thread():
    f = _linear()
    x = np.ones((2, 6))
    assert fastnn.is_grad_enabled()
    with fastnn.no_grad():
        assert not fastnn.is_grad_enabled()
        y = f(x)
        seen = []
        t = threading.Thread(target=lambda: (f(x), seen.append(fastnn.is_grad_enabled())))
        t.start()
        t.join()
        with fastnn.enable_grad():
            assert fastnn.is_grad_enabled()
        assert not fastnn.is_grad_enabled()
    assert seen == [True] and f._pending_calls() == 1     # the other thread kept its cache
    f.backward(np.ones((2, 5)))
    assert f._pending_calls() == 0
    np.testing.assert_array_equal(y, f(x))
    f.backward(np.ones((2, 5)))

    @fastnn.no_grad()
    def infer(v):
        assert not fastnn.is_grad_enabled()
        return f(v)

    infer(x)
    assert f._pending_calls() == 0 and fastnn.is_grad_enabled()
    with pytest.raises(RuntimeError, match="preceding forward"):
        f.backward(np.ones((2, 5)))
    f.eval()
    f(x)
    assert f._pending_calls() == 0
    with fastnn.set_grad_enabled(False):
        assert not fastnn.is_grad_enabled()
    assert fastnn.is_grad_enabled()


def test_no_grad_bounds_memory_of_repeated_inference():
    m = _encoder_layer()
    x = np.ones((2, 3, 6))
    with fastnn.no_grad():
        for _ in range(5):
            m(x)
    assert sum(mm._pending_calls() for mm in m.modules()) == 0


# ----------------------------------------------------------------------------- hooks
def test_full_backward_hook_order_args_and_remove():
    seq = _seq_shared_block()
    lin = seq[3]
    seen = []

    def hook(module, grad_input, grad_output):
        assert module.weight.grad is not None          # after the gradients were accumulated
        seen.append((module, grad_input, grad_output))

    h = lin.register_full_backward_hook(hook)
    hs = seq.register_full_backward_hook(lambda m, gi, go: seen.append(("seq", gi, go)))
    x = R(13).standard_normal((3, 6))
    d = np.ones((3, 5))
    seq(x)
    with pytest.raises(ValueError):
        seq.backward(np.ones((3, 4)))
    assert seen == []                                   # no hook for a failed backward
    dx = seq.backward(d)
    assert [s[0] for s in seen] == [lin, "seq"]
    assert seen[0][2][0] is d and isinstance(seen[0][1], tuple) and len(seen[0][1]) == 1
    assert seen[1][1][0] is dx
    h.remove()
    hs.remove()
    seq(x)
    seq.backward(d)
    assert len(seen) == 2


def test_backward_hook_may_replace_grad_input():
    f = _linear()
    f.register_full_backward_hook(lambda m, gi, go: (gi[0] * 0,))
    f(np.ones((2, 6)))
    assert not f.backward(np.ones((2, 5))).any()


def test_pending_calls_counts_containers():
    seq = _seq_shared_block()
    x = np.ones((2, 6))
    seq(x)
    seq(x)
    assert seq._pending_calls() == 2 and seq[0]._pending_calls() == 4
    seq.backward(np.ones((2, 5)))
    assert seq._pending_calls() == 1 and seq[0]._pending_calls() == 2

    class Model(nn.Module):          # a user's container: keeps nothing itself
        def __init__(self):
            super().__init__()
            self.body = _linear()

        def forward(self, x):
            return self.body(x)

        def backward(self, dy):
            return self.body.backward(dy)

    m = Model()
    m(x)
    m(x)
    with fastnn.no_grad():
        m(x)
    assert m._pending_calls() == 2
    with pytest.raises(ValueError):
        m.backward(np.ones((2, 4)))
    assert m._pending_calls() == 2
    m.backward(np.ones((2, 5)))
    _, h = m.call(x)
    assert m._pending_calls() == 2
    h.backward(np.ones((2, 5)))
    m.backward(np.ones((2, 5)))
    assert m._pending_calls() == 0 == m.body._pending_calls()


# ----------------------------------------------------------------------------- pickling
def test_pickle_after_training_forward_stores_no_cache():
    from fastnn.models import GPT
    fastnn.manual_seed(14)
    m = GPT(vocab_size=32, block_size=16, n_layer=2, n_head=2, d_model=32)
    idx = R(14).integers(0, 32, (8, 16))
    before = len(pickle.dumps(m))
    lock = threading.Lock()           # a hook tied to this process and thread
    m.register_full_backward_hook(lambda mod, gi, go: lock)
    m(idx)
    m(idx)
    assert m._pending_calls() == 2
    after = len(pickle.dumps(m))
    assert after == before           # no activation caches, no hooks
    assert len(pickle.dumps(copy.deepcopy(m))) == before
    clone = pickle.loads(pickle.dumps(m))
    assert clone._pending_calls() == 0 and not clone._backward_hooks
    with pytest.raises(RuntimeError, match="preceding forward"):
        clone.backward(np.ones((8, 16, 32), np.float32))
    with fastnn.no_grad():
        np.testing.assert_array_equal(clone(idx), m(idx))
    clone(idx)                        # the clone trains on its own
    clone.backward(np.ones((8, 16, 32), np.float32))
    assert m._pending_calls() == 2    # and never touched the original's caches


# ----------------------------------------------------------------------------- optimizer state
def _train(model, opt, sched, start, stop):
    """Steps start..stop-1; step i's batch depends on i only, so 0..5 then 5..12 sees the
    same data as 0..12."""
    for i in range(start, stop):
        rng = R([7, i])
        x = rng.standard_normal((4, 5)).astype(np.float32)
        target = rng.standard_normal((4, 3)).astype(np.float32)
        y = model(x)
        opt.zero_grad()
        model.backward(y - target)
        opt.step()
        if sched is not None:
            sched.step()


def _setup(kind, seed):
    from fastnn import optim
    from fastnn.optim import lr_scheduler as S
    fastnn.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    if kind == "sgd":
        opt = optim.SGD([{"params": model[0].parameters(), "lr": 0.05},
                         {"params": model[2].parameters()}], lr=0.1, momentum=0.9, nesterov=True,
                        weight_decay=1e-3)
        sched = S.StepLR(opt, step_size=3, gamma=0.5)
    elif kind == "adam":
        opt = optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.95), amsgrad=True)
        sched = S.CosineAnnealingLR(opt, T_max=7, eta_min=1e-4)
    else:
        opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        sched = S.get_cosine_schedule_with_warmup(opt, 3, 12, min_lr_ratio=0.1)
    return model, opt, sched


@pytest.mark.parametrize("ext", ["npz", "safetensors"])
@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_optimizer_and_scheduler_state_round_trip_exactly(tmp_path, kind, ext):
    ref = _setup(kind, 0)
    _train(*ref, 0, 12)

    part = _setup(kind, 0)
    _train(*part, 0, 5)
    model, opt, sched = part
    fastnn.save(opt.state_dict(), tmp_path / f"opt.{ext}")
    fastnn.save(sched.state_dict(), tmp_path / f"sched.{ext}")
    fastnn.save(model.state_dict(), tmp_path / f"model.{ext}")
    ckpt = tmp_path / f"all.{ext}"
    fastnn.save({"model": model.state_dict(), "optim": opt.state_dict(),
                 "sched": sched.state_dict(), "step": 5}, ckpt)

    loaded = fastnn.load(tmp_path / f"opt.{ext}")
    saved = opt.state_dict()
    assert loaded.keys() == saved.keys() and loaded["param_groups"] == saved["param_groups"]
    assert loaded["state"].keys() == saved["state"].keys()
    for i, st in saved["state"].items():
        for k, v in st.items():
            np.testing.assert_array_equal(loaded["state"][i][k], v)
            assert type(loaded["state"][i][k]) is type(v)

    for source in ("separate", "one file"):
        model2, opt2, sched2 = _setup(kind, 99)          # other weights, fresh state
        if source == "separate":
            model2.load_state_dict(fastnn.load(tmp_path / f"model.{ext}"))
            opt2.load_state_dict(fastnn.load(tmp_path / f"opt.{ext}"))
            sched2.load_state_dict(fastnn.load(tmp_path / f"sched.{ext}"))
        else:
            everything = fastnn.load(ckpt)
            assert everything["step"] == 5 and type(everything["step"]) is int
            model2.load_state_dict(everything["model"])
            opt2.load_state_dict(everything["optim"])
            sched2.load_state_dict(everything["sched"])
        _train(model2, opt2, sched2, 5, 12)
        for (k, a), b in zip(ref[0].state_dict().items(), model2.state_dict().values()):
            np.testing.assert_array_equal(a, b, err_msg=f"{kind} {ext} {source}: {k}")
        assert ref[2].get_last_lr() == sched2.get_last_lr()
        assert ref[1].state_dict()["param_groups"] == opt2.state_dict()["param_groups"]


def test_tree_save_keeps_types_and_flat_files_stay_flat(tmp_path):
    tree = {"a": {0: np.arange(3, dtype=np.int32), "b": (1, 2.5, True, None, "min")},
            "c": [np.float32(1.5), float("inf")], "x.y": np.ones((2, 2))}
    for ext in ("npz", "safetensors"):
        p = tmp_path / f"t.{ext}"
        fastnn.save(tree, p)
        got = fastnn.load(p)
        assert list(got) == ["a", "c", "x.y"]
        assert got["a"]["b"] == (1, 2.5, True, None, "min") and type(got["a"]["b"][0]) is int
        np.testing.assert_array_equal(got["a"][0], tree["a"][0])
        assert got["a"][0].dtype == np.int32
        assert got["c"][0] == np.float32(1.5) and type(got["c"][0]) is np.float32
        assert got["c"][1] == float("inf")
        flat = {"w": np.ones(3, np.float32)}
        fastnn.save(flat, p)
        assert list(fastnn.load(p)) == ["w"]
    with pytest.raises(ValueError, match="two entries"):
        fastnn.save({"a": {"b": np.ones(1)}, "a.b": np.ones(1), "n": 1}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match="keys must be"):
        fastnn.save({"a": {(1, 2): np.ones(1)}}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match="no objects"):
        fastnn.save({"a": {"b": object()}}, tmp_path / "c.npz")


# ----------------------------------------------------------------------------- file modes
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_save_respects_the_umask(tmp_path, umask):
    import os
    import stat
    old = os.umask(umask)
    try:
        for ext in ("npz", "safetensors"):
            p = tmp_path / f"m.{ext}"
            fastnn.save({"w": np.ones(2)}, p)
            with open(tmp_path / f"ref.{ext}", "wb"):
                pass
            want = stat.S_IMODE(os.stat(tmp_path / f"ref.{ext}").st_mode)
            assert stat.S_IMODE(os.stat(p).st_mode) == want == 0o666 & ~umask
            os.chmod(p, 0o640)                   # an existing file keeps its mode, as open()
            fastnn.save({"w": np.zeros(2)}, p)
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o640
        assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    finally:
        os.umask(old)


def test_forward_that_raises_halfway_leaves_no_cache():
    class Gate(nn.Module):             # fails on demand, after the Linear before it kept a cache
        fail = False

        def forward(self, x):
            if self.fail:
                raise ValueError("gate closed")
            self._keep(None)
            return x

        def backward(self, dy):
            self._take()
            return dy

    fastnn.manual_seed(15)
    seq = nn.Sequential(nn.Linear(6, 5, dtype=np.float64), nn.Tanh(), Gate(),
                        nn.Linear(5, 3, dtype=np.float64))
    ref = copy.deepcopy(seq)
    rng = R(15)
    x1, x2 = rng.standard_normal((2, 6)), rng.standard_normal((2, 6))
    seq(x1)
    seq[2].fail = True
    with pytest.raises(ValueError, match="gate closed"):
        seq(x2)
    with pytest.raises(ValueError, match="gate closed"):
        seq.call(x2)
    assert [m._pending_calls() for m in seq] == [1, 1, 1, 1]    # x2's caches were taken back
    d = rng.standard_normal((2, 3))
    np.testing.assert_array_equal(seq.backward(d), (ref(x1), ref.backward(d))[1])
    _assert_same_grads(_grads(seq), _grads(ref))


def test_forward_only_loop_in_training_mode_warns_once(monkeypatch):
    from fastnn.nn import module as M
    monkeypatch.setattr(M, "PENDING_WARN", 5)
    f = _linear()
    x = np.ones((1, 6))
    for _ in range(5):
        f(x)
    with pytest.warns(fastnn.PendingCallsWarning, match="no_grad") as rec:
        f(x)
    assert rec[0].filename == __file__   # it names the caller's line, not fastnn's
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(x)                             # once per module
    f.eval()
    assert f._pending_calls() == 0       # eval() drops pending calls


def test_pending_calls_warning_is_shown_by_default():
    """A ResourceWarning is ignored by Python's default filters: a forward-only loop in
    training mode ran out of memory without a word.  The warning is a UserWarning."""
    assert issubclass(fastnn.PendingCallsWarning, UserWarning)
    assert not issubclass(fastnn.PendingCallsWarning, ResourceWarning)
    import subprocess
    import sys
    code = ("import numpy as np, fastnn\n"
            "from fastnn import nn\n"
            "from fastnn.nn import module as M\n"
            "M.PENDING_BYTES_WARN = 1 << 20\n"
            "m = nn.LSTM(16, 16)\n"
            "x = np.ones((64, 32, 16), np.float32)\n"
            "for _ in range(64):\n"
            "    m(x)\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stderr
    assert "PendingCallsWarning: LSTM holds 64 training-mode calls" in err and "GiB" in err


def test_pending_calls_warn_by_bytes_before_the_count(monkeypatch):
    """An LSTM's cache is megabytes a call: a forward-only loop would fill the machine's
    memory long before 10,000 calls, so the bytes held are checked at 64, 128, ... calls."""
    from fastnn.nn import module as M
    m = nn.LSTM(32, 32)
    x = np.ones((64, 32, 32), np.float32)
    m(x)
    one = M._cache_bytes(m._ctx[-1], {id(p.data) for p in m.parameters()})
    # the gate activations, outputs and cell states of 64 x 32 rows at least
    assert one >= 64 * 32 * (4 * 32 + 2 * 32) * 4
    monkeypatch.setattr(M, "PENDING_BYTES_WARN", 96 * one)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(126):
            m(x)                          # 127 pending: checked at 64, under the limit
    with pytest.warns(fastnn.PendingCallsWarning, match=r"LSTM holds 128 .* GiB of caches"):
        m(x)
    with fastnn.no_grad():
        m(x)
    m.eval()
    assert m._pending_calls() == 0


def test_pending_bytes_of_a_container_count_all_its_layers(monkeypatch):
    """Each layer of a model may hold a modest cache a call while the model holds many
    times that: the outermost container checks the sum of its call's caches (an array two
    caches share counted once)."""
    from fastnn.nn import module as M
    fastnn.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(8)])
    x = np.ones((256, 64), np.float32)
    model(x)
    per_layer = 256 * 64 * 4
    one = M._cache_bytes([c for m in model.modules() for c in m._ctx],
                         {id(p.data) for p in model.parameters()})
    assert 8 * per_layer <= one <= 17 * per_layer
    # a limit no single layer's 64 calls reach, but the model's 64 calls do
    monkeypatch.setattr(M, "PENDING_BYTES_WARN", 4 * 64 * per_layer)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(62):
            model(x)
    with pytest.warns(fastnn.PendingCallsWarning, match="Sequential holds 64") as rec:
        model(x)
    assert rec[0].filename == __file__
    model.eval()
    assert model._pending_calls() == 0


def test_pending_bytes_leave_out_parameters(monkeypatch):
    """A cache that holds the layer's weight (as many do) adds only its input per call: a
    large Linear called on one row is far from any limit."""
    from fastnn.nn import module as M
    monkeypatch.setattr(M, "PENDING_BYTES_WARN", 16 << 20)
    lin = nn.Linear(1024, 1024)          # a 4 MiB weight
    x = np.ones((1, 1024), np.float32)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(256):
            lin(x)
    assert M._cache_bytes(lin._ctx[-1], {id(p.data) for p in lin.parameters()}) < 64 << 10
