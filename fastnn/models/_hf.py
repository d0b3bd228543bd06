"""Reading Hugging Face model directories: ``config.json`` + ``model.safetensors``.

Shared by the ``from_pretrained`` constructors of fastnn.models.  fastnn never unpickles:
a directory that holds only ``pytorch_model.bin`` (or another pickle checkpoint) is refused
with a message saying how to convert it.  Every failure is a ValueError naming the file
and, where there is one, the field (config key or tensor name) that is wrong.

    d = HFDir(path)                          # checks the directory and reads config.json
    d.field("hidden_size", int)              # a config value, checked, named on error
    d.check_model(("bert",), ("BertModel", ...))
    weights = d.weights()                    # name -> ndarray (one file or index shards)
    check_shapes(d, expected, weights, hint) # config-vs-weights shape mismatches
"""
import json
import os

from .._validate import is_int, is_real

__all__ = ["HFDir", "check_shapes"]

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
# checkpoints that can only be read by unpickling (torch.load / pickle)
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5",
                "model.ckpt.index", "flax_model.msgpack")

_REQUIRED = object()


class HFDir:
    """A Hugging Face model directory, checked on construction: it exists, has a
    ``config.json`` that is a JSON object, and has safetensors weights (a pickle-only
    checkpoint is refused)."""

    def __init__(self, path, what="model"):
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise ValueError(f"{what} path {path!r} is not a directory (expected a Hugging Face "
                             f"model directory with {CONFIG} and {WEIGHTS})")
        self.path = path
        self.config = read_json(self.file(CONFIG), what=f"the {what}'s configuration")
        if not isinstance(self.config, dict):
            raise ValueError(f"{self.file(CONFIG)}: expected a JSON object, got "
                             f"{type(self.config).__name__}")
        self._weights_file()     # fail now, not after building the model

    def file(self, name):
        return os.path.join(self.path, name)

    def has(self, name):
        return os.path.isfile(self.file(name))

    # ---------------------------------------------------------------- config
    def field(self, name, kind=int, default=_REQUIRED, aliases=(), check=None):
        """config[name] (or the first alias present) converted to ``kind`` (int, float,
        str, bool); ``default`` when absent (else ValueError naming config.json and the
        field).  ``check(value) -> bool`` rejects out-of-range values."""
        for key in (name,) + tuple(aliases):
            if key in self.config:
                break
        else:
            if default is _REQUIRED:
                raise ValueError(f"{self.file(CONFIG)}: missing field {name!r}")
            return default
        v = self.config[key]
        ok = True
        if kind is int:
            ok = is_int(v)
        elif kind is float:
            ok = is_real(v)
        elif kind is bool:
            ok = isinstance(v, bool)
        elif kind is str:
            ok = isinstance(v, str)
        if ok:
            v = kind(v)
        if not ok or (check is not None and not check(v)):
            raise ValueError(f"{self.file(CONFIG)}: field {key!r} has an invalid value {v!r}"
                             + (f" (expected {kind.__name__})" if not ok else ""))
        return v

    def check_model(self, model_types, architectures=()):
        """Refuse a config whose ``model_type`` is not in ``model_types`` (and, when the
        config names ``architectures``, none of which is in ``architectures``)."""
        mt = self.config.get("model_type")
        archs = self.config.get("architectures") or []
        if mt is None and not archs:
            raise ValueError(f"{self.file(CONFIG)}: missing field 'model_type' (expected one of "
                             f"{', '.join(map(repr, model_types))})")
        if mt is not None and mt not in model_types:
            raise ValueError(f"{self.file(CONFIG)}: field 'model_type' is {mt!r}; this loader "
                             f"reads {', '.join(map(repr, model_types))}")
        if archs and architectures and not any(a in architectures for a in archs):
            raise ValueError(f"{self.file(CONFIG)}: field 'architectures' is {archs!r}; this "
                             f"loader reads {', '.join(map(repr, architectures))}")

    # ---------------------------------------------------------------- weights
    def _weights_file(self):
        if self.has(WEIGHTS):
            return self.file(WEIGHTS)
        if self.has(WEIGHTS_INDEX):
            return self.file(WEIGHTS_INDEX)
        pickled = [n for n in PICKLE_FILES if self.has(n)]
        if pickled:
            raise ValueError(
                f"{self.path!r} holds only {', '.join(pickled)} (a pickle checkpoint) and no "
                f"{WEIGHTS}: fastnn never unpickles, because loading a pickle can run "
                f"arbitrary code.  Convert it once where you trust the file, e.g. "
                f"transformers' model.save_pretrained(dir, safe_serialization=True), or "
                f"safetensors.torch.save_file(torch.load(f, weights_only=True), "
                f"'{WEIGHTS}')")
        raise ValueError(f"{self.path!r} has no {WEIGHTS} (nor {WEIGHTS_INDEX}): no weights to "
                         f"load")

    def weights(self):
        """name -> ndarray from model.safetensors, or from the shards that
        model.safetensors.index.json lists (fastnn.load: checked, never pickle)."""
        from ..io import load
        f = self._weights_file()
        if f.endswith(WEIGHTS):
            return load(f)
        index = read_json(f, what="the weights index")
        wm = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise ValueError(f"{f}: missing field 'weight_map' (an object of tensor name -> "
                             f"shard file)")
        out = {}
        for shard in sorted(set(wm.values())):
            if os.path.basename(shard) != shard:
                raise ValueError(f"{f}: field 'weight_map' names {shard!r}, not a file of this "
                                 f"directory")
            if not self.has(shard):
                raise ValueError(f"{f}: field 'weight_map' names {shard!r}, which is missing")
            out.update(load(self.file(shard)))
        return out

    def weights_name(self):
        return os.path.basename(self._weights_file())


def read_json(path, what="file"):
    if not os.path.isfile(path):
        raise ValueError(f"{path}: missing ({what})")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def check_shapes(d, expected, weights, hint=None, rename=None):
    """Compare ``weights`` (checkpoint name -> array) with ``expected`` (model name ->
    shape).  ``rename(checkpoint name) -> model name or None`` (None: not a parameter).
    Raises ValueError naming the weights file, the tensor and -- through ``hint(model
    name) -> str`` -- the config fields its shape comes from; also for tensors the
    config asks for but the file lacks."""
    src = d.weights_name()
    seen = set()
    for ck, arr in weights.items():
        name = rename(ck) if rename is not None else ck
        if name is None or name not in expected:
            continue
        seen.add(name)
        want = tuple(expected[name])
        got = tuple(getattr(arr, "shape", ()))
        if got != want:
            why = f" ({hint(name)})" if hint is not None and hint(name) else ""
            raise ValueError(f"{d.file(src)}: tensor {ck!r} has shape {got}, but {CONFIG} "
                             f"gives {want}{why}")
    missing = [n for n in expected if n not in seen]
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        raise ValueError(f"{d.file(src)}: missing tensor(s) {', '.join(map(repr, missing[:3]))}"
                         f"{more} that {CONFIG} asks for")
