"""fastnn.save / fastnn.load: state dicts as ``.npz`` or ``.safetensors``, never pickle.

A state dict is a flat mapping of names to arrays (``model.state_dict()``).  Both formats
hold raw little-endian numbers plus a header, so a file can never run code when loaded:

* ``.npz``: NumPy's zip of ``.npy`` members, written and read with pickling disabled.
* ``.safetensors``: written and read here without the ``safetensors`` package -- an
  8-byte little-endian header length N, N bytes of JSON
  ``{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__":
  {str: str}}`` (padded with spaces to a multiple of 8), then the raw data; offsets are
  relative to the end of the header.  Every field is checked before anything is read,
  so a truncated or corrupt file is a ``ValueError`` naming the problem, not a crash or
  a silently short array.  BF16 tensors are widened to float32 on load.

Nested state (``optimizer.state_dict()``, ``scheduler.state_dict()``, or a checkpoint dict
such as ``{"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}``) is saved
as a *tree*: every array leaf is an ordinary entry named by its path (``state.0.exp_avg``),
and the rest -- the nesting, Python ints/floats/bools/strings/None, lists and tuples -- is
one JSON document stored as a uint8 array under ``__fastnn_tree__``.  ``load`` rebuilds the
same object (ints stay ints, tuples stay tuples, floats keep every bit), so
``opt.load_state_dict(fastnn.load(path))`` restores exactly.  A mapping of names to arrays
(a model's state dict) is saved flat, as before, and loads as that flat mapping.

Loading a PyTorch checkpoint: convert once with
``fastnn.save({k: v.detach().cpu().numpy() for k, v in torch_model.state_dict().items()},
"model.safetensors")`` (or pass that dict straight to ``model.load_state_dict``).
"""
import json
import os
import secrets
import stat
import struct
import zipfile
from collections import OrderedDict

import numpy as np

__all__ = ["save", "load", "load_metadata", "MAX_HEADER_BYTES"]

TREE_KEY = "__fastnn_tree__"

# the safetensors reference implementation's limit: a larger header is a corrupt file
MAX_HEADER_BYTES = 100 * 1000 * 1000

_ST_CODES = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8",
    np.dtype(np.uint16): "U16", np.dtype(np.int16): "I16", np.dtype(np.uint32): "U32",
    np.dtype(np.int32): "I32", np.dtype(np.uint64): "U64", np.dtype(np.int64): "I64",
    np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
}
_ST_DTYPES = {v: k for k, v in _ST_CODES.items()}
_ST_DTYPES["BF16"] = np.dtype(np.uint16)   # read as raw bits, widened to float32


def _format(path, reading):
    ext = os.path.splitext(path)[1].lower()
    if ext in (".npz", ".safetensors"):
        return ext[1:]
    if reading:
        return None   # sniff the content
    raise ValueError(f"fastnn.save: unknown file type {ext!r} for {path!r}; use a path ending "
                     f"in .npz or .safetensors")


# ------------------------------------------------------------------ checking a state dict
def _as_array(k, v):
    """``v`` (an array, Parameter, device array or number) as a little-endian C array."""
    if hasattr(v, "data") and type(v).__name__ == "Parameter":
        v = v.data
    if type(v) is not np.ndarray and (hasattr(v, "__cuda_array_interface__")
                                      or hasattr(v, "copy_to_host")):
        from . import to_numpy
        v = to_numpy(v)
    try:
        a = np.asarray(v)
    except Exception as e:  # noqa: BLE001 - any conversion failure is the user's value
        raise TypeError(f"fastnn.save: {k!r} is not an array ({e})") from None
    dt = a.dtype.newbyteorder("=") if a.dtype.byteorder not in ("=", "|") else a.dtype
    if dt not in _ST_CODES:
        raise TypeError(f"fastnn.save: {k!r} has dtype {a.dtype}; only bool, integer and "
                        f"float16/32/64 arrays can be saved (no objects, no pickle)")
    return np.asarray(a, dtype=dt.newbyteorder("<"), order="C")   # keeps 0-d arrays 0-d


_PLAIN = (str, int, float, type(None))      # bool is an int: JSON keeps true/false apart


def _is_tree(state_dict):
    """True when a value is not an array: nested state that ``_flatten_tree`` encodes."""
    return any(isinstance(v, (dict, list, tuple) + _PLAIN) for v in state_dict.values())


def _flatten_tree(obj):
    """(arrays by path, JSON document of everything else) for nested state: dicts (str or
    int keys), lists, tuples, Python scalars, strings, None and array leaves."""
    arrays = OrderedDict()

    def enc(v, path):
        if isinstance(v, dict):
            items = []
            for k, x in v.items():
                if isinstance(k, bool) or not isinstance(k, (str, int)):
                    raise TypeError(f"fastnn.save: keys must be strings or ints, got {k!r} "
                                    f"under {'.'.join(path) or 'the top level'}")
                items.append([k, enc(x, path + (str(k),))])
            return {"dict": items}
        if isinstance(v, (list, tuple)):
            kind = "list" if isinstance(v, list) else "tuple"
            return {kind: [enc(x, path + (str(i),)) for i, x in enumerate(v)]}
        if isinstance(v, _PLAIN):
            return v
        key = ".".join(path)
        if key in arrays or key == TREE_KEY:
            raise ValueError(f"fastnn.save: two entries of the state have the path {key!r}")
        a = _as_array(key, v)
        arrays[key] = a
        return {"array": key, "scalar": True} if isinstance(v, np.generic) else {"array": key}

    doc = enc(dict(obj), ())
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    arrays[TREE_KEY] = np.frombuffer(raw.encode("utf-8"), dtype=np.uint8)
    return arrays


def _unflatten_tree(arrays, path):
    try:
        doc = json.loads(bytes(arrays.pop(TREE_KEY).astype(np.uint8)).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"fastnn.load: {path!r}: corrupt {TREE_KEY} entry ({e})") from None

    def dec(v):
        if not isinstance(v, dict):
            return v
        if "dict" in v:
            return {k: dec(x) for k, x in v["dict"]}
        if "list" in v:
            return [dec(x) for x in v["list"]]
        if "tuple" in v:
            return tuple(dec(x) for x in v["tuple"])
        try:
            a = arrays[v["array"]]
        except KeyError:
            raise ValueError(f"fastnn.load: {path!r} lacks the array {v.get('array')!r} its "
                             f"{TREE_KEY} names") from None
        return a[()] if v.get("scalar") else a

    return dec(doc)


def _as_arrays(state_dict):
    if not hasattr(state_dict, "items"):
        raise TypeError(f"fastnn.save: state_dict must be a mapping of names to arrays, got "
                        f"{type(state_dict).__name__}")
    if _is_tree(state_dict):
        return _flatten_tree(state_dict)
    out = OrderedDict()
    for k, v in state_dict.items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"fastnn.save: state_dict keys must be non-empty strings, got {k!r}")
        if k == TREE_KEY:
            raise ValueError(f"fastnn.save: {TREE_KEY!r} is a reserved name")
        out[k] = _as_array(k, v)
    return out


def save(state_dict, path, metadata=None):
    """Write ``state_dict`` (names -> arrays, or nested state such as an optimizer's
    ``state_dict()``: see the module docstring) to ``path`` (.npz or .safetensors).

    ``metadata`` (safetensors only): a dict of str -> str stored in the header.
    The file is written to a temporary name and renamed, so an interrupted save never
    leaves a half-written file under ``path``."""
    path = os.fspath(path)
    fmt = _format(path, reading=False)
    arrays = _as_arrays(state_dict)
    if metadata is not None:
        if fmt != "safetensors":
            raise ValueError("fastnn.save: metadata is only stored in .safetensors files")
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("fastnn.save: metadata must be a dict of str -> str")
    if fmt == "safetensors" and "__metadata__" in arrays:
        raise ValueError("fastnn.save: '__metadata__' is reserved in safetensors files")
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            if fmt == "npz":
                _write_npz(f, arrays)
            else:
                _write_safetensors(f, arrays, metadata)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _create_beside(path):
    """(fd, name) of a new file in ``path``'s directory with the permissions ``open(path,
    "wb")`` would give: an existing file's mode, else 0666 less the umask (the kernel applies
    it; mkstemp's 0600 would make checkpoints unreadable to the rest of a group)."""
    d = os.path.dirname(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mode = None
    for _ in range(100):
        tmp = os.path.join(d, f".fastnn-{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                         0o666)
        except FileExistsError:
            continue
        if mode is not None and hasattr(os, "fchmod"):
            try:
                os.fchmod(fd, mode)
            except OSError:     # e.g. a file system without modes: keep the umask's
                pass
        return fd, tmp
    raise FileExistsError(f"fastnn.save: could not create a temporary file in {d!r}")


def _write_npz(f, arrays):
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for k, a in arrays.items():
            with zf.open(k + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, a, allow_pickle=False)


def _write_safetensors(f, arrays, metadata):
    # data ordered by decreasing item size so every tensor is aligned to its item size
    # (the header is padded to 8); the header lists tensors in the caller's order.
    order = sorted(arrays, key=lambda k: -arrays[k].dtype.itemsize)
    offsets = {}
    pos = 0
    for k in order:
        n = arrays[k].nbytes
        offsets[k] = (pos, pos + n)
        pos += n
    header = OrderedDict()
    if metadata:
        header["__metadata__"] = dict(metadata)
    for k, a in arrays.items():
        header[k] = {"dtype": _ST_CODES[a.dtype.newbyteorder("=")], "shape": list(a.shape),
                     "data_offsets": list(offsets[k])}
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for k in order:
        a = arrays[k]
        if a.nbytes:
            f.write(memoryview(a.reshape(-1)).cast("B"))


# ------------------------------------------------------------------ loading
def load(path):
    """Read a state dict (an OrderedDict of name -> NumPy array) saved as .npz or
    .safetensors (by fastnn, NumPy, or the safetensors package).  Never unpickles.
    A truncated, corrupt or unsupported file raises ValueError saying what is wrong."""
    path = os.fspath(path)
    fmt = _format(path, reading=True)
    size = os.path.getsize(path)   # FileNotFoundError for a missing file
    with open(path, "rb") as f:
        magic = f.read(4)
    is_zip = magic in (b"PK\x03\x04", b"PK\x05\x06")
    if fmt is None:
        fmt = "npz" if is_zip else "safetensors"
    if fmt == "npz":
        if not is_zip:
            raise ValueError(f"fastnn.load: {path!r} is not a valid .npz file (it does not start "
                             f"with a zip signature; truncated or not an .npz)")
        out = _read_npz(path)
    else:
        out = _read_safetensors(path, size)
    return _unflatten_tree(out, path) if TREE_KEY in out else out


def _read_npz(path):
    out = OrderedDict()
    try:
        with np.load(path, allow_pickle=False) as z:
            for name in z.files:
                a = z[name]
                if a.dtype.newbyteorder("=") not in _ST_CODES:
                    raise ValueError(f"array {name!r} has unsupported dtype {a.dtype}")
                out[name] = a.astype(a.dtype.newbyteorder("="), copy=False)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError, struct.error,
            RuntimeError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"fastnn.load: {path!r} is not a valid .npz state dict "
                         f"(truncated or corrupt): {e}") from None
    except Exception as e:  # zlib.error and friends
        raise ValueError(f"fastnn.load: {path!r} is not a valid .npz state dict "
                         f"(truncated or corrupt): {type(e).__name__}: {e}") from None
    return out


def load_metadata(path):
    """The ``__metadata__`` (str -> str) of a .safetensors file ({} when it has none)."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    header, _ = _read_header(path, size)
    return dict(header.get("__metadata__") or {})


def _bad(path, why):
    return ValueError(f"fastnn.load: {path!r} is not a valid safetensors file: {why}")


def _read_safetensors(path, size):
    header, n = _read_header(path, size)
    with open(path, "rb") as f:
        data_len = size - 8 - n
        entries = []
        for name, info in header.items():
            if name == "__metadata__":
                continue
            entries.append((name,) + _check_entry(path, name, info, data_len))
        # the data regions must not overlap and must fill the data section exactly
        spans = sorted((b, e, name) for name, _, _, b, e in entries)
        pos = 0
        for b, e, name in spans:
            if b < pos:
                raise _bad(path, f"tensor {name!r} overlaps the previous tensor's data")
            pos = e
        if pos != data_len and entries:
            raise _bad(path, f"the tensors cover {pos} bytes of data but the file holds "
                             f"{data_len} (truncated, or trailing garbage)")
        out = OrderedDict()
        for name, code, shape, b, e in entries:
            dt = _ST_DTYPES[code].newbyteorder("<")
            a = np.empty(shape, dtype=dt)
            if e > b:
                f.seek(8 + n + b)
                got = f.readinto(memoryview(a.reshape(-1)).cast("B"))
                if got != e - b:
                    raise _bad(path, f"truncated while reading {name!r}")
            if code == "BF16":
                a = (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
            elif not dt.isnative:
                a = a.astype(dt.newbyteorder("="))
            out[name] = a
    return out


def _read_header(path, size):
    """(header dict, header length) of a safetensors file, validated as JSON."""
    if size < 8:
        raise _bad(path, f"truncated: {size} bytes, but the file must start with an 8-byte "
                         f"header length")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER_BYTES:
            raise _bad(path, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit "
                             f"(corrupt file or not safetensors)")
        if 8 + n > size:
            raise _bad(path, f"truncated: the header says {n} bytes but the file has only "
                             f"{size - 8} after the length")
        raw = f.read(n)
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=OrderedDict)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _bad(path, f"the header is not valid UTF-8 JSON ({e})") from None
        if not isinstance(header, dict):
            raise _bad(path, "the header is not a JSON object")
        meta = header.get("__metadata__")
        if meta is not None and (not isinstance(meta, dict)
                                 or not all(isinstance(v, str) for v in meta.values())):
            raise _bad(path, "__metadata__ must map strings to strings")
    return header, n


def _check_entry(path, name, info, data_len):
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise _bad(path, f"entry {name!r} must have exactly 'dtype', 'shape' and 'data_offsets'")
    code = info["dtype"]
    if code not in _ST_DTYPES:
        raise _bad(path, f"tensor {name!r} has unsupported dtype {code!r} (supported: "
                         f"{', '.join(sorted(_ST_DTYPES))})")
    shape = info["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d >= 0 for d in shape):
        raise _bad(path, f"tensor {name!r} has an invalid shape {shape!r}")
    offs = info["data_offsets"]
    if not (isinstance(offs, list) and len(offs) == 2 and all(
            isinstance(o, int) and not isinstance(o, bool) for o in offs)):
        raise _bad(path, f"tensor {name!r} has invalid data_offsets {offs!r}")
    b, e = offs
    if not 0 <= b <= e:
        raise _bad(path, f"tensor {name!r} has invalid data_offsets {offs!r}")
    if e > data_len:
        raise _bad(path, f"truncated: tensor {name!r} ends at byte {e} of the data but the "
                         f"file holds only {data_len}")
    count = 1
    for d in shape:
        count *= d
    if e - b != count * _ST_DTYPES[code].itemsize:
        raise _bad(path, f"tensor {name!r}: {e - b} bytes of data for shape {shape} and dtype "
                         f"{code} (expected {count * _ST_DTYPES[code].itemsize})")
    return code, tuple(shape), b, e
