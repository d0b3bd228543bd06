"""fastnn.models: GPT against the same architecture in PyTorch (and a transformers GPT-2
checkpoint), BertEncoder against a randomly initialised transformers BertModel."""
import importlib.util

import numpy as np
import pytest

import fastnn
from fastnn.models import GPT, BertEncoder, GPTConfig, mean_pool

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAVE_TRANSFORMERS,
    reason="the transformers package is not installed (pip install transformers); the GPT "
           "and BERT layouts are also checked against PyTorch models defined in these tests")

TINY = dict(vocab_size=23, block_size=12, n_layer=2, n_head=2, d_model=16)


def _torch_gpt(torch, model, **kw):
    from fastnn.bench.train import torch_gpt
    c = model.config
    tm = torch_gpt(torch, c.vocab_size, c.block_size, c.n_layer, c.n_head, c.d_model,
                   tie_weights=c.tie_weights, **kw)
    sd = {k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()}
    tm.load_state_dict(sd)
    return tm.double() if model.wte.weight.dtype == np.float64 else tm


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_gpt_matches_torch_forward_and_backward(backend, dtype, tie):
    torch = pytest.importorskip("torch")
    fastnn.manual_seed(0)
    m = GPT(GPTConfig(**TINY, tie_weights=tie), dtype=dtype)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, TINY["vocab_size"], (3, 10))
    tm = _torch_gpt(torch, m)
    with fastnn.use_backend(backend):
        logits = m(idx)
        d = rng.standard_normal(logits.shape).astype(dtype)
        m.zero_grad()
        assert m.backward(d) is None
    tl = tm(torch.tensor(idx))
    tl.backward(torch.tensor(d))
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)
    assert logits.dtype == np.dtype(dtype) and logits.shape == (3, 10, TINY["vocab_size"])
    np.testing.assert_allclose(logits, tl.detach().numpy(), **tol)
    tgrads = dict(tm.named_parameters())
    names = [n for n, _ in m.named_parameters()]
    assert set(names) == set(tgrads)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad, tgrads[n].grad.numpy(), err_msg=n, **tol)


def test_gpt_parameter_names_follow_gpt2():
    m = GPT(**TINY)
    names = list(m.state_dict())
    assert names[:2] == ["wte.weight", "wpe.weight"]
    for suffix in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                   "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                   "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
        assert f"h.1.{suffix}" in names
    assert m.state_dict()["h.0.attn.c_attn.weight"].shape == (16, 48)   # Conv1D (nx, nf)
    assert names[-2:] == ["ln_f.weight", "ln_f.bias"]
    assert m.num_parameters() == sum(v.size for v in m.state_dict().values())


def test_gpt2_checkpoint_layout_loads(tmp_path):
    """A GPT-2 style file: 'transformer.' prefix, causal-mask buffers, tied lm_head."""
    torch = pytest.importorskip("torch")
    fastnn.manual_seed(1)
    src = GPT(**TINY)
    sd = {"transformer." + k: v for k, v in src.state_dict().items()}
    P = TINY["block_size"]
    for i in range(TINY["n_layer"]):
        sd[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((P, P), np.float32))[None, None]
        sd[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    sd["lm_head.weight"] = src.state_dict()["wte.weight"]
    path = tmp_path / "model.safetensors"
    fastnn.save(sd, path)
    m = GPT.from_state_dict(fastnn.load(path), n_head=TINY["n_head"])
    assert m.config.n_layer == 2 and m.config.tie_weights
    idx = np.random.default_rng(2).integers(0, TINY["vocab_size"], (2, 7))
    m.eval()
    src.eval()
    np.testing.assert_array_equal(m(idx), src(idx))
    m2 = GPT(**TINY)
    m2.load_state_dict(fastnn.load(path))     # straight into an existing model, strict
    np.testing.assert_array_equal(m2.eval()(idx), src(idx))


@needs_transformers
def test_gpt_loads_a_transformers_gpt2(tmp_path):
    torch = pytest.importorskip("torch")
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(vocab_size=TINY["vocab_size"], n_positions=TINY["block_size"],
                                  n_embd=TINY["d_model"], n_layer=TINY["n_layer"],
                                  n_head=TINY["n_head"], resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    # the README's conversion, then a safetensors file as a user would have it
    fastnn.save({k: v.detach().cpu().numpy() for k, v in hf.state_dict().items()},
                tmp_path / "gpt2.safetensors")
    m = GPT.from_state_dict(fastnn.load(tmp_path / "gpt2.safetensors"), n_head=TINY["n_head"])
    idx = np.random.default_rng(3).integers(0, TINY["vocab_size"], (2, 9))
    with torch.no_grad():
        ref = hf(torch.tensor(idx)).logits.numpy()
    np.testing.assert_allclose(m.eval()(idx), ref, rtol=2e-4, atol=2e-5)


def test_gpt_wrong_checkpoint_leaves_model_unchanged(tmp_path):
    m = GPT(**TINY)
    before = {k: v.copy() for k, v in m.state_dict().items()}
    other = GPT(**dict(TINY, d_model=8))
    fastnn.save(other.state_dict(), tmp_path / "o.npz")
    with pytest.raises(RuntimeError, match="size mismatch"):
        m.load_state_dict(fastnn.load(tmp_path / "o.npz"))
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(RuntimeError, match="Missing key"):
        m.load_state_dict({k: v for k, v in before.items() if k != "ln_f.bias"})


def test_gpt_generate():
    fastnn.manual_seed(0)
    m = GPT(**TINY)
    idx = np.array([[1, 2, 3]])
    out = m.generate(idx, 15, temperature=0.9, top_k=5, rng=np.random.default_rng(0))
    assert out.shape == (1, 18) and out.dtype == np.int64
    np.testing.assert_array_equal(out[:, :3], idx)
    assert out.min() >= 0 and out.max() < TINY["vocab_size"]
    again = m.generate(idx, 15, temperature=0.9, top_k=5, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(out, again)
    assert m.training   # restored
    # top_k=1 is greedy: each new token is the argmax of the model's logits
    g = m.generate(idx, 4, top_k=1)
    m.eval()
    for t in range(3, 7):
        assert g[0, t] == np.argmax(m(g[:, :t])[0, -1])
    m.train()
    # longer than block_size: the context is cropped
    long = m.generate(np.zeros((2, 1), np.int64), 20)
    assert long.shape == (2, 21)
    with pytest.raises(ValueError, match="temperature"):
        m.generate(idx, 2, temperature=-0.5)
    # temperature=0 is greedy, without drawing random numbers
    np.testing.assert_array_equal(m.generate(idx, 4, temperature=0, rng=None), g)
    with pytest.raises(ValueError):
        m.generate(idx, 2, top_k=0)
    with pytest.raises(ValueError):
        m.generate(np.array([[0.5]]), 2)


def test_gpt_bad_input():
    m = GPT(**TINY)
    with pytest.raises(ValueError, match="block_size"):
        m(np.zeros((1, 13), np.int64))
    with pytest.raises(IndexError):
        m(np.full((1, 3), 23))
    with pytest.raises(TypeError):
        m(np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError):
        GPT(vocab_size=10, block_size=4, n_layer=1, n_head=3, d_model=16)
    with pytest.raises(RuntimeError, match="forward"):
        GPT(**TINY).backward(np.zeros((1, 3, 23), np.float32))


# ------------------------------------------------------------------ BERT
BERT = dict(vocab_size=31, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=24, max_position_embeddings=20, type_vocab_size=2,
            layer_norm_eps=1e-12)


def _bert_inputs(rng):
    ids = rng.integers(0, BERT["vocab_size"], (3, 9))
    mask = np.ones((3, 9), np.int64)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    types = np.zeros((3, 9), np.int64)
    types[:, 5:] = 1
    return ids, mask, types


def test_bert_names_and_shapes():
    m = BertEncoder(**BERT)
    names = list(m.state_dict())
    assert names[:5] == ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                         "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
                         "embeddings.LayerNorm.bias"]
    for suffix in ("attention.self.query.weight", "attention.self.key.bias",
                   "attention.self.value.weight", "attention.output.dense.weight",
                   "attention.output.LayerNorm.weight", "intermediate.dense.weight",
                   "output.dense.bias", "output.LayerNorm.bias"):
        assert f"encoder.layer.1.{suffix}" in names
    assert names[-2:] == ["pooler.dense.weight", "pooler.dense.bias"]
    assert m.embeddings.LayerNorm.eps == 1e-12
    ids, mask, types = _bert_inputs(np.random.default_rng(0))
    h = m.eval()(ids, mask, types)
    assert h.shape == (3, 9, 16) and h.dtype == np.float32
    pooled = mean_pool(h, mask)
    np.testing.assert_allclose(pooled[2], h[2, :2].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(pooled[0], h[0].mean(axis=0), rtol=1e-6)


@needs_transformers
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_bert_matches_transformers(dtype):
    torch = pytest.importorskip("torch")
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.BertConfig(**BERT, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  hidden_act="gelu")
    torch.manual_seed(0)
    hf = transformers.BertModel(cfg).eval()
    if dtype == np.float64:
        hf = hf.double()
    sd = {k: v.detach().cpu().numpy() for k, v in hf.state_dict().items()}
    m = BertEncoder(**BERT, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, dtype=dtype)
    m.load_state_dict(sd)
    ids, mask, types = _bert_inputs(np.random.default_rng(1))
    h = m(ids, mask, types)
    out = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
             token_type_ids=torch.tensor(types))
    ref = out.last_hidden_state
    tol = dict(rtol=5e-4, atol=5e-5) if dtype == np.float32 else dict(rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(h, ref.detach().numpy(), **tol)
    np.testing.assert_allclose(m.cls_pool(h), out.pooler_output.detach().numpy(), **tol)
    # backward: parameter gradients equal autograd's
    d = np.random.default_rng(2).standard_normal(h.shape).astype(dtype)
    m.zero_grad()
    m.backward(d)
    (ref * torch.tensor(d)).sum().backward()
    tp = dict(hf.named_parameters())
    for n, p in m.named_parameters():
        if n.startswith("pooler."):
            assert p.grad is None
            continue
        np.testing.assert_allclose(p.grad, tp[n].grad.numpy(), err_msg=n, **tol)


def test_bert_checkpoint_name_variants_and_bad_input():
    src = BertEncoder(**BERT)
    sd = {"bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma")
          .replace("LayerNorm.bias", "LayerNorm.beta"): v for k, v in src.state_dict().items()}
    sd["bert.embeddings.position_ids"] = np.arange(20)[None]
    sd["cls.predictions.bias"] = np.zeros(31, np.float32)
    m = BertEncoder(**BERT)
    m.load_state_dict(sd)
    for k, v in src.state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k], v)
    ids, mask, types = _bert_inputs(np.random.default_rng(0))
    with pytest.raises(ValueError, match="attention_mask"):
        m(ids, mask[:, :3])
    with pytest.raises(ValueError, match="max_position"):
        m(np.zeros((1, 21), np.int64))
    with pytest.raises(ValueError, match="token_type_ids"):
        m(ids, mask, types[:1])
    with pytest.raises(ValueError, match="divisible"):
        BertEncoder(**dict(BERT, num_attention_heads=3))


def test_train_bench_case_does_the_same_work_in_fastnn_and_torch():
    """The end-to-end bench row: one fastnn step and one torch step from the same weights
    give the same updated weights (so the timing compares like with like)."""
    torch = pytest.importorskip("torch")
    from fastnn.bench import train
    case = train.cases()[0]
    assert case.tokens == 1024
    fns = case.make()
    fns["fastnn"]()
    fns["torch"]()
    # the closures share their models through the defaults / cells: pull them out
    m = fns["fastnn"].__defaults__[0]
    tm = next(c.cell_contents for c in fns["torch"].__closure__
              if isinstance(c.cell_contents, torch.nn.Module))
    tparams = dict(tm.named_parameters())
    for n, p in m.named_parameters():
        g, tg = p.grad, tparams[n].grad.numpy()
        scale = np.abs(tg).max()
        np.testing.assert_allclose(g, tg, rtol=1e-3, atol=1e-5 * scale, err_msg=n)
        # Adam's first step moves each element by ~lr * grad / (|grad| + eps) (lr = 1e-3):
        # where a gradient is at float32 rounding noise (below 1e-5 of the tensor's
        # largest; the two frameworks sum in other orders) its sign, and so the step, is
        # the rounding's; a few more elements may differ where |grad| ~ eps
        a, b = p.data, tparams[n].detach().numpy()
        noise = np.abs(tg) <= 1e-5 * scale
        off = ~np.isclose(a, b, rtol=1e-4, atol=2e-5) & ~noise
        assert off.mean() < 1e-3 and np.abs(a - b).max() <= 2e-3, n


def _torch_bert(torch, cfg):
    """A minimal BERT encoder in PyTorch with the checkpoint names (checks the layout and the
    numerics where the transformers package is not installed)."""
    nn = torch.nn
    D, I, H = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    eps = cfg["layer_norm_eps"]

    class Holder(nn.Module):
        def __init__(this, **kw):
            super().__init__()
            for k, v in kw.items():
                setattr(this, k, v)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Holder(self=Holder(query=nn.Linear(D, D), key=nn.Linear(D, D),
                                                value=nn.Linear(D, D)),
                                    output=Holder(dense=nn.Linear(D, D), LayerNorm=nn.LayerNorm(D, eps=eps)))
            self.intermediate = Holder(dense=nn.Linear(D, I))
            self.output = Holder(dense=nn.Linear(I, D), LayerNorm=nn.LayerNorm(D, eps=eps))

        def forward(self, x, add_mask):
            sa = self.attention.self
            N, T, _ = x.shape
            q, k, v = (f(x).view(N, T, H, D // H).transpose(1, 2) for f in (sa.query, sa.key, sa.value))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=add_mask)
            a = a.transpose(1, 2).reshape(N, T, D)
            h = self.attention.output.LayerNorm(self.attention.output.dense(a) + x)
            g = torch.nn.functional.gelu(self.intermediate.dense(h))
            return self.output.LayerNorm(self.output.dense(g) + h)

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Holder(
                word_embeddings=nn.Embedding(cfg["vocab_size"], D),
                position_embeddings=nn.Embedding(cfg["max_position_embeddings"], D),
                token_type_embeddings=nn.Embedding(cfg["type_vocab_size"], D),
                LayerNorm=nn.LayerNorm(D, eps=eps))
            self.encoder = Holder(layer=nn.ModuleList([Layer() for _ in range(cfg["num_hidden_layers"])]))
            self.pooler = Holder(dense=nn.Linear(D, D))

        def forward(self, ids, mask, types):
            e = self.embeddings
            T = ids.shape[1]
            x = e.LayerNorm(e.word_embeddings(ids) + e.position_embeddings(torch.arange(T))
                            + e.token_type_embeddings(types))
            add = torch.zeros(mask.shape, dtype=x.dtype).masked_fill(mask == 0, float("-inf"))
            for layer in self.encoder.layer:
                x = layer(x, add[:, None, None, :])
            return x

    return Bert()


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_bert_matches_a_torch_bert(backend):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tb = _torch_bert(torch, BERT).double()
    m = BertEncoder(**BERT, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                    dtype=np.float64)
    m.load_state_dict({k: v.detach().numpy() for k, v in tb.state_dict().items()})
    ids, mask, types = _bert_inputs(np.random.default_rng(4))
    with fastnn.use_backend(backend):
        h = m(ids, mask, types)
        d = np.random.default_rng(5).standard_normal(h.shape)
        m.zero_grad()
        m.backward(d)
    ref = tb(torch.tensor(ids), torch.tensor(mask), torch.tensor(types))
    np.testing.assert_allclose(h, ref.detach().numpy(), rtol=1e-8, atol=1e-9)
    (ref * torch.tensor(d)).sum().backward()
    tp = dict(tb.named_parameters())
    for n, p in m.named_parameters():
        if n.startswith("pooler."):
            continue
        g = tp[n].grad.numpy().copy()
        if n == "embeddings.word_embeddings.weight":
            g[BertEncoder(**BERT).config.pad_token_id] = 0   # BERT's pad row has no gradient
        np.testing.assert_allclose(p.grad, g, rtol=1e-8, atol=1e-9, err_msg=n)
