"""GPT.from_pretrained (Hugging Face GPT-2 directories) and KV-cache generation: logits and
greedy outputs against transformers' GPT2LMHeadModel with the same weights, the cache
against full re-runs, what sampling may pick, and bad input."""
import json

import numpy as np
import pytest

import fastnn
from fastnn.models import GPT
from fastnn.models._decode import KVDecoder, next_tokens

TINY = dict(vocab_size=41, block_size=40, n_layer=2, n_head=4, d_model=32)


def _hf(torch, tie=True, act="gelu_new", seed=0, **kw):
    """A tiny random GPT2LMHeadModel (no download).  A large init spread makes greedy
    decoding pick varied tokens, so comparing outputs tests something."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(
        vocab_size=TINY["vocab_size"], n_positions=TINY["block_size"], n_embd=TINY["d_model"],
        n_layer=TINY["n_layer"], n_head=TINY["n_head"], resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0,
        initializer_range=0.3, activation_function=act, tie_word_embeddings=tie, **kw)
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _saved(torch, tmp_path, **kw):
    hf = _hf(torch, **kw)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    return hf


@pytest.mark.parametrize("tie,act", [(True, "gelu_new"), (False, "gelu")],
                         ids=["tied-gelu_new", "untied-gelu"])
def test_from_pretrained_matches_transformers(tmp_path, tie, act):
    torch = pytest.importorskip("torch")
    hf = _saved(torch, tmp_path, tie=tie, act=act)
    m = GPT.from_pretrained(tmp_path)
    assert not m.training and m.config.tie_weights == tie and m.config.n_head == TINY["n_head"]
    idx = np.random.default_rng(3).integers(0, TINY["vocab_size"], (2, 9))
    with torch.no_grad():
        ref = hf(torch.tensor(idx)).logits.numpy()
    np.testing.assert_allclose(m(idx), ref, rtol=1e-4, atol=1e-4)
    m64 = GPT.from_pretrained(tmp_path, dtype=np.float64)
    assert m64.wte.weight.dtype == np.float64


def _rewrite_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def test_from_pretrained_bad_directories(tmp_path):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="not a directory"):
        GPT.from_pretrained(tmp_path / "nothing")
    _saved(torch, tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "keep.safetensors")
    with pytest.raises(ValueError, match="model.safetensors"):
        GPT.from_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not to be unpickled")
    with pytest.raises(ValueError, match="never unpickles"):
        GPT.from_pretrained(tmp_path)
    (tmp_path / "keep.safetensors").rename(tmp_path / "model.safetensors")
    GPT.from_pretrained(tmp_path)     # safetensors present: the pickle file is ignored
    good = (tmp_path / "config.json").read_text()
    for changes, match in [
            (dict(model_type="bert"), r"config\.json.*'model_type'"),
            (dict(n_embd=48), r"model\.safetensors: tensor 'transformer\..*has shape.*n_embd"),
            (dict(n_positions=50), r"model\.safetensors.*wpe.*n_positions"),
            (dict(n_layer=3), r"model\.safetensors.*missing tensor.*h\.2\."),
            (dict(n_layer=1), r"model\.safetensors.*'transformer\.h\.1\..*n_layer=1"),
            (dict(n_head=5), r"config\.json.*'n_embd'.*'n_head'"),
            (dict(activation_function="swish"), r"config\.json.*'activation_function'"),
            (dict(n_inner=100), r"config\.json.*'n_inner'"),
            (dict(scale_attn_by_inverse_layer_idx=True), r"config\.json.*inverse_layer_idx"),
            (dict(vocab_size="many"), r"config\.json.*'vocab_size'")]:
        (tmp_path / "config.json").write_text(good)
        _rewrite_config(tmp_path, **changes)
        with pytest.raises(ValueError, match=match):
            GPT.from_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json"):
        GPT.from_pretrained(tmp_path)


# ------------------------------------------------------------------ generation vs transformers
def _prompts():
    rng = np.random.default_rng(5)
    return [rng.integers(1, TINY["vocab_size"], n) for n in (7, 3, 5)]


def _hf_greedy(torch, hf, ids, mask, n):
    with torch.no_grad():
        return hf.generate(torch.tensor(ids), attention_mask=torch.tensor(mask),
                           max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           use_cache=True, pad_token_id=0).numpy()


def test_greedy_matches_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    hf = _saved(torch, tmp_path)
    m = GPT.from_pretrained(tmp_path)
    n = 20
    p = _prompts()[0][None, :]
    ref = _hf_greedy(torch, hf, p, np.ones_like(p), n)
    out = m.generate(p, n, temperature=0)
    np.testing.assert_array_equal(out, ref)
    assert len(set(out[0, 7:].tolist())) > 3      # the check is not about a constant run
    # a batch of different lengths: left-padded idx + attention_mask, as transformers takes it
    prompts = _prompts()
    T = max(len(q) for q in prompts)
    ids = np.full((len(prompts), T), 5, np.int64)      # any pad id
    mask = np.zeros_like(ids)
    for b, q in enumerate(prompts):
        ids[b, T - len(q):] = q
        mask[b, T - len(q):] = 1
    ref = _hf_greedy(torch, hf, ids, mask, n)
    out = m.generate(ids, n, temperature=0, attention_mask=mask)
    np.testing.assert_array_equal(out, ref)
    # ... and each row is what its prompt gives alone; a list of prompts gives the same
    for b, q in enumerate(prompts):
        np.testing.assert_array_equal(out[b, T:], m.generate(q, n, temperature=0)[0, len(q):])
    listed = m.generate(prompts, n, temperature=0)
    assert isinstance(listed, list)
    for b, q in enumerate(prompts):
        np.testing.assert_array_equal(listed[b], np.concatenate([q, out[b, T:]]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_cached_logits_equal_full_reruns(dtype):
    fastnn.manual_seed(1)
    m = GPT(dtype=dtype, **TINY).eval()
    rng = np.random.default_rng(0)
    seq = rng.integers(0, TINY["vocab_size"], (2, 14))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    full = m(seq)
    dec = KVDecoder(m, 2, 14)
    np.testing.assert_allclose(dec.prefill(seq[:, :6]), full[:, 5], **tol)
    for t in range(6, 14):
        np.testing.assert_allclose(dec.step(seq[:, t]), full[:, t], **tol)
    # left padding: row 0 has 4 pad positions; its logits are those of its real tokens alone
    pad = np.array([4, 0])
    padded = seq.copy()
    padded[0, :4] = 0
    dec = KVDecoder(m, 2, 14, pad)
    got = [dec.prefill(padded[:, :6])] + [dec.step(padded[:, t]) for t in range(6, 14)]
    alone = m(seq[:1, 4:])
    for i, t in enumerate(range(5, 14)):
        np.testing.assert_allclose(got[i][0], alone[0, t - 4], **tol)
        np.testing.assert_allclose(got[i][1], full[1, t], **tol)


def test_generate_cached_equals_uncached_and_keeps_no_cache():
    fastnn.manual_seed(2)
    m = GPT(**TINY)                    # training mode: generate is inference all the same
    idx = np.random.default_rng(1).integers(0, TINY["vocab_size"], (3, 5))
    out = m.generate(idx, 12, temperature=0)
    ref = np.empty_like(out)
    ref[:, :5] = idx
    m._generate_uncached(ref, 5, lambda lg: np.argmax(lg, axis=-1))
    np.testing.assert_array_equal(out, ref)
    assert m.training
    with pytest.raises(RuntimeError, match="forward"):
        m.backward(np.zeros((3, 5, TINY["vocab_size"]), np.float32))


def test_decoder_packs_follow_the_weights():
    """Float32 decoding on cpu runs on packed weights (the blocks' GEMMs and the LM head):
    cached on the blocks and the model in eval mode (reused by the next generate), rebuilt
    after eval() following an in-place write, never cached in training mode (an optimizer
    step would leave them stale)."""
    fastnn.manual_seed(3)
    m = GPT(**TINY)
    idx = np.random.default_rng(2).integers(0, TINY["vocab_size"], (2, 6))
    seq = np.random.default_rng(3).integers(0, TINY["vocab_size"], (2, 10))
    m.generate(idx, 3, temperature=0)
    assert all("_infer" not in b.__dict__ for b in m.h)          # training mode: per call
    assert "_infer" not in m.__dict__
    m.eval()
    dec = KVDecoder(m, 2, 10)
    assert dec.packs[0] is not None and dec.head_pack is not None
    packs = m.h[0].__dict__["_infer"]
    head = m.__dict__["_infer"]
    assert head[2] is dec.head_pack
    again = KVDecoder(m, 2, 10)
    assert again.packs[0] is packs[2] and again.head_pack is head[2]   # reused
    m.h[0].mlp.c_fc.weight.data *= 3.0                            # in place, eval mode
    m.wte.weight.data *= 0.5                                      # the (tied) head too
    m.eval()                                                      # drops the packs
    dec = KVDecoder(m, 2, 10)
    assert dec.packs[0] is not packs[2] and dec.head_pack is not head[2]
    full = m(seq)
    np.testing.assert_allclose(dec.prefill(seq[:, :4]), full[:, 3], rtol=1e-4, atol=1e-4)
    for t in range(4, 10):
        np.testing.assert_allclose(dec.step(seq[:, t]), full[:, t], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ sampling
def test_top_k_top_p_only_pick_allowed_tokens():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 50)).astype(np.float32) * 3
    order = np.argsort(-logits, axis=-1)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    sp = np.take_along_axis(probs, order, -1)
    for top_k, top_p in [(5, None), (None, 0.5), (8, 0.3), (1, None), (None, 1e-9)]:
        allowed = np.ones((4, 50), bool)
        if top_k is not None:
            allowed &= logits >= np.take_along_axis(logits, order[:, top_k - 1:top_k], -1)
        if top_p is not None:
            # smallest set of most likely tokens whose probability reaches top_p
            n_keep = 1 + (np.cumsum(sp, -1) < top_p).sum(-1)
            keep = np.zeros_like(allowed)
            for b in range(4):
                keep[b, order[b, :n_keep[b]]] = True
            allowed &= keep
        seen = np.zeros((4, 50), bool)
        for _ in range(300):
            tok = next_tokens(logits, 1.0, top_k, top_p, rng)
            assert allowed[np.arange(4), tok].all(), (top_k, top_p)
            seen[np.arange(4), tok] = True
        if top_k == 5:
            assert (seen == allowed).all()    # and every allowed token does come up
    np.testing.assert_array_equal(next_tokens(logits, 0, None, None, rng), order[:, 0])


def test_sampling_reproducible_with_a_seed_and_within_top_k():
    fastnn.manual_seed(3)
    m = GPT(**TINY).eval()
    idx = np.random.default_rng(2).integers(0, TINY["vocab_size"], (2, 4))
    kw = dict(temperature=0.8, top_k=3, top_p=0.9)
    fastnn.manual_seed(7)
    a = m.generate(idx, 10, **kw)
    fastnn.manual_seed(7)
    b = m.generate(idx, 10, **kw)
    np.testing.assert_array_equal(a, b)
    c = m.generate(idx, 10, rng=np.random.default_rng(7), **kw)
    np.testing.assert_array_equal(c, m.generate(idx, 10, rng=np.random.default_rng(7), **kw))
    for t in range(4, 14):        # every sampled token is among that step's top 3
        top3 = np.argsort(-m(a[:, :t])[:, -1], axis=-1)[:, :3]
        assert all(a[r, t] in top3[r] for r in range(2))


def test_generate_bad_input():
    m = GPT(**TINY)
    idx = np.array([[1, 2, 3]])
    for kw in (dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_p=0.0),
               dict(top_p=1.5), dict(top_k=0)):
        with pytest.raises(ValueError):
            m.generate(idx, 2, **kw)
    with pytest.raises(ValueError, match="left padding"):
        m.generate(np.array([[1, 2, 3]]), 2, attention_mask=np.array([[1, 1, 0]]))
    with pytest.raises(ValueError, match="left padding"):
        m.generate(np.array([[1, 2, 3]]), 2, attention_mask=np.array([[0, 0, 0]]))
    with pytest.raises(ValueError, match="shape"):
        m.generate(idx, 2, attention_mask=np.ones((1, 4)))
    with pytest.raises(ValueError, match="block_size"):
        m.generate(idx, 40, attention_mask=np.array([[0, 1, 1]]))
    with pytest.raises(IndexError):
        m.generate(np.array([[1, 99]]), 2)
    with pytest.raises(ValueError, match="prompt 1"):
        m.generate([np.array([1, 2]), np.array([], np.int64)], 2)
    # padding positions may hold any id, even one outside the vocabulary
    out = m.generate(np.array([[-1, 2, 3]]), 2, temperature=0, attention_mask=[[0, 1, 1]])
    np.testing.assert_array_equal(out[0, 1:], m.generate([2, 3], 2, temperature=0)[0])


# ------------------------------------------------------------------ the decode GEMM kernel
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_skinny_linear_matches_reference(dtype):
    from fastnn._backend import backend
    cpu, ref = backend("cpu"), backend("reference")
    rng = np.random.default_rng(0)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    # rows 1..9 cover the 4-row groups and their tails; in/out sizes off the 8/4/block grid
    for M, K, N in [(1, 37, 300), (4, 64, 513), (5, 13, 70), (9, 771, 65), (16, 8, 1),
                    (3, 1, 257), (0, 5, 6), (2, 5, 0)]:
        x = rng.standard_normal((M, K)).astype(dtype)
        for io in (True, False):
            w = rng.standard_normal((K, N) if io else (N, K)).astype(dtype)
            for b in (rng.standard_normal(N).astype(dtype), None):
                y = cpu.skinny_linear(x, w, b, io)
                assert y.shape == (M, N) and y.dtype == dtype
                if dtype == np.float32:
                    # against float64, within the rounding bound of a K-term float32 sum
                    # (a relative tolerance fails where the terms cancel)
                    x64, w64 = x.astype(np.float64), w.astype(np.float64)
                    wo = w64 if io else w64.T
                    b64 = 0.0 if b is None else b.astype(np.float64)
                    mag = np.abs(x64) @ np.abs(wo) + np.abs(b64)
                    err = np.abs(y - (x64 @ wo + b64))
                    assert np.all(err <= (K + 4) * np.finfo(np.float32).eps * mag + 1e-30)
                else:
                    np.testing.assert_allclose(y, ref.skinny_linear(x, w, b, io), **tol)
    # the same bits at any thread count (fixed column blocks, fixed summation order)
    x = rng.standard_normal((8, 768)).astype(dtype)
    w = rng.standard_normal((768, 3000)).astype(dtype)
    wt = w.T.copy()
    n = fastnn.get_num_threads()
    try:
        fastnn.set_num_threads(1)
        one = [cpu.skinny_linear(x, w, None, True), cpu.skinny_linear(x, wt, None, False)]
        fastnn.set_num_threads(2)
        two = [cpu.skinny_linear(x, w, None, True), cpu.skinny_linear(x, wt, None, False)]
    finally:
        fastnn.set_num_threads(n)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_skinny_linear_same_bits_whatever_the_tile():
    """An (out, in) weight's few-row product takes three weight rows by four x rows per
    tile where it can, else one weight row by up to four x rows: each output is the same
    sum either way, so a column computed alone (one weight row) has the bits it has
    inside the whole product -- for rows in and out of full 4-row groups and a depth
    with a tail past the 8-float steps."""
    from fastnn._backend import backend
    cpu = backend("cpu")
    rng = np.random.default_rng(3)
    for M, K, N in [(8, 771, 200), (6, 64, 97), (4, 8, 9), (3, 40, 12)]:
        x = rng.standard_normal((M, K)).astype(np.float32)
        w = rng.standard_normal((N, K)).astype(np.float32)
        b = rng.standard_normal(N).astype(np.float32)
        whole = cpu.skinny_linear(x, w, b, False)
        for n in range(N):
            one = cpu.skinny_linear(x, w[n:n + 1], b[n:n + 1], False)
            np.testing.assert_array_equal(whole[:, n:n + 1], one)
