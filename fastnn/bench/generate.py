"""Inference benchmark: GPT-2 small greedy generation with a key/value cache.

GPT-2 small's shape (12 layers, d_model 768, 12 heads, vocab 50257, 1024 positions) with
random weights, a 32-token prompt and 128 new tokens, batch 1 and 8.  fastnn's
``GPT.generate(temperature=0)`` vs Hugging Face transformers' ``GPT2LMHeadModel.generate``
(do_sample=False, use_cache=True) with the same weights, in the same run.  "torch" in the
table is transformers here; tokens/s counts new tokens (batch x 128).

``bytes`` is the weights read per call: decoding at small batch streams every weight once
per step (the GEMVs of 12 layers and the 50257 x 768 LM head), so the achieved GB/s
against the machine's copy bandwidth says how close a step is to its memory-bound limit.
"""
import numpy as np

from .core import BenchCase, torch_or_none

SHAPE = dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, d_model=768)
PROMPT = 32
NEW = 128


def transformers_or_none():
    if torch_or_none() is None:
        return None
    try:
        import transformers
    except ImportError:
        return None
    return transformers


def hf_gpt2(model):
    """transformers' GPT2LMHeadModel with the weights of fastnn GPT ``model`` (eval mode),
    or None when transformers is not installed."""
    tr = transformers_or_none()
    if tr is None:
        return None
    import torch
    c = model.config
    cfg = tr.GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.d_model,
                        n_layer=c.n_layer, n_head=c.n_head, layer_norm_epsilon=c.layer_norm_epsilon,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, tie_word_embeddings=c.tie_weights,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    hf = tr.GPT2LMHeadModel(cfg).eval()
    sd = {"transformer." + k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()}
    if c.tie_weights:
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
    hf.load_state_dict(sd, strict=False)
    return hf


def _generate(batch):
    def make():
        import fastnn
        from fastnn.models import GPT
        fastnn.manual_seed(0)
        model = GPT(**SHAPE).eval()
        idx = np.random.default_rng(0).integers(0, SHAPE["vocab_size"], (batch, PROMPT))
        fns = {"fastnn": lambda: model.generate(idx, NEW, temperature=0),
               "reference": None, "torch": None}
        hf = hf_gpt2(model)
        if hf is not None:
            import torch
            tidx = torch.from_numpy(idx)
            tmask = torch.ones_like(tidx)

            def t():
                with torch.no_grad():
                    return hf.generate(tidx, attention_mask=tmask, max_new_tokens=NEW,
                                       min_new_tokens=NEW, do_sample=False, use_cache=True,
                                       pad_token_id=0)
            fns["torch"] = t
        return fns
    n_params = (SHAPE["vocab_size"] + SHAPE["block_size"]) * SHAPE["d_model"] \
        + SHAPE["n_layer"] * (12 * SHAPE["d_model"] ** 2 + 13 * SHAPE["d_model"])
    case = BenchCase("inference", f"GPT-2 generate greedy b{batch}",
                     f"B{batch} prompt{PROMPT} new{NEW}", make,
                     bytes=4.0 * n_params * NEW, working_set=4.0 * n_params,
                     min_time=0.0, max_reps=2)
    case.tokens = batch * NEW
    return case


def cases():
    return [_generate(1), _generate(8)]
