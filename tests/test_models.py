"""fastnn.models: GPT against the same architecture in PyTorch (and a transformers GPT-2
checkpoint), BertEncoder against a randomly initialised transformers BertModel."""
import importlib.util

import numpy as np
import pytest

import fastnn
from fastnn.models import BertEncoder, mean_pool

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAVE_TRANSFORMERS,
    reason="the transformers package is not installed (pip install transformers)")

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
