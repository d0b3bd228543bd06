"""fastnn.save / fastnn.load: both formats, interop with NumPy and the safetensors package,
and every kind of broken file."""
import json
import os
import struct
import zipfile

import numpy as np
import pytest

import fastnn
from fastnn import nn


def _sd():
    rng = np.random.default_rng(0)
    return {
        "h.0.attn.c_attn.weight": rng.standard_normal((4, 12)).astype(np.float32),
        "h.0.attn.c_attn.bias": rng.standard_normal(12).astype(np.float32),
        "f64": rng.standard_normal((2, 3)),
        "half": rng.standard_normal(5).astype(np.float16),
        "ints": np.arange(7, dtype=np.int64),
        "i8": np.arange(-3, 3, dtype=np.int8),
        "mask": np.array([True, False, True]),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "file": np.ones(2, np.float32),         # a name np.savez(**kw) could not take
    }


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_roundtrip(tmp_path, ext):
    sd = _sd()
    p = tmp_path / ("m" + ext)
    fastnn.save(sd, p)
    back = fastnn.load(str(p))
    assert list(back) == list(sd)
    for k in sd:
        assert back[k].dtype == sd[k].dtype and back[k].shape == sd[k].shape, k
        np.testing.assert_array_equal(back[k], sd[k])
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".fastnn-")]   # no temp left


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_model_roundtrip_and_noncontiguous(tmp_path, ext):
    m = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4))
    sd = dict(m.state_dict())
    sd["0.weight"] = np.asfortranarray(sd["0.weight"])   # strides do not matter
    p = tmp_path / ("m" + ext)
    fastnn.save(sd, p)
    m2 = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4))
    m2.load_state_dict(fastnn.load(p))
    for (k, a), (_, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        np.testing.assert_array_equal(a, b)
    # Parameters themselves can be saved
    fastnn.save({"w": m[0].weight}, p)
    np.testing.assert_array_equal(fastnn.load(p)["w"], m[0].weight.data)


def test_safetensors_interop_with_the_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    sd = {k: v for k, v in _sd().items() if k != "scalar"}
    sd["scalar"] = np.array(2.0, np.float64)
    ours = tmp_path / "ours.safetensors"
    fastnn.save(sd, ours, metadata={"format": "np", "step": "3"})
    theirs = st.load_file(str(ours))
    assert set(theirs) == set(sd)
    for k in sd:
        np.testing.assert_array_equal(theirs[k], sd[k])
        assert theirs[k].dtype == sd[k].dtype
    from safetensors import safe_open
    with safe_open(str(ours), framework="np") as f:
        assert f.metadata() == {"format": "np", "step": "3"}
    from fastnn.io import load_metadata
    assert load_metadata(ours) == {"format": "np", "step": "3"}
    other = tmp_path / "theirs.safetensors"
    st.save_file(sd, str(other), metadata={"a": "b"})
    back = fastnn.load(other)
    assert set(back) == set(sd)
    for k in sd:
        np.testing.assert_array_equal(back[k], sd[k])
        assert back[k].dtype == sd[k].dtype


def test_bf16_is_widened(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    t = torch.randn(3, 4).to(torch.bfloat16)
    p = tmp_path / "bf.safetensors"
    st.save_file({"w": t}, str(p))
    w = fastnn.load(p)["w"]
    assert w.dtype == np.float32
    np.testing.assert_array_equal(w, t.float().numpy())


def test_torch_state_dict_conversion(tmp_path):
    """The two-line conversion in the README: a torch model's weights load by name."""
    torch = pytest.importorskip("torch")
    tm = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.LayerNorm(3))
    fastnn.save({k: v.detach().cpu().numpy() for k, v in tm.state_dict().items()},
                tmp_path / "t.safetensors")
    m = nn.Sequential(nn.Linear(6, 3), nn.LayerNorm(3))
    m.load_state_dict(fastnn.load(tmp_path / "t.safetensors"))
    x = np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_allclose(m(x), tm(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_npz_from_numpy_and_no_pickle(tmp_path):
    p = tmp_path / "np.npz"
    np.savez(p, a=np.arange(3.0), b=np.ones((2, 2), np.float32))
    back = fastnn.load(p)
    np.testing.assert_array_equal(back["a"], np.arange(3.0))
    bad = tmp_path / "obj.npz"
    np.savez(bad, a=np.array([{"x": 1}], dtype=object))   # a pickled object array
    with pytest.raises(ValueError, match="not a valid .npz"):
        fastnn.load(bad)


def _write(p, data):
    with open(p, "wb") as f:
        f.write(data)


def test_broken_safetensors_files(tmp_path):
    good = tmp_path / "g.safetensors"
    fastnn.save({"a": np.arange(6, dtype=np.float32).reshape(2, 3),
                 "b": np.ones(4, np.float64)}, good)
    raw = good.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    cases = {
        "empty": (b"", "truncated"),
        "short": (raw[:5], "truncated"),
        "cut_header": (raw[:8 + n // 2], "truncated"),
        "cut_data": (raw[:-3], "truncated"),
        "huge_header": (struct.pack("<Q", 1 << 40) + raw[8:], "exceeds"),
        "garbage_json": (raw[:8] + b"\xff" * n + raw[8 + n:], "JSON"),
        "trailing": (raw + b"xxxx", "trailing"),
    }

    def with_header(h):
        b = json.dumps(h).encode()
        b += b" " * (-len(b) % 8)
        return struct.pack("<Q", len(b)) + b + raw[8 + n:]

    h = json.loads(json.dumps(header))
    h["a"]["dtype"] = "F8_E4M3"
    cases["bad_dtype"] = (with_header(h), "unsupported dtype")
    h = json.loads(json.dumps(header))
    h["a"]["shape"] = [3, 3]
    cases["wrong_size"] = (with_header(h), "bytes of data")
    h = json.loads(json.dumps(header))
    h["a"]["shape"] = [-2, -3]
    cases["negative_shape"] = (with_header(h), "invalid shape")
    h = json.loads(json.dumps(header))
    h["a"]["data_offsets"] = h["b"]["data_offsets"][:1] + [h["b"]["data_offsets"][0] + 24]
    cases["overlap"] = (with_header(h), "overlaps")
    h = json.loads(json.dumps(header))
    h["a"]["extra"] = 1
    cases["extra_key"] = (with_header(h), "exactly")
    cases["not_object"] = (with_header([1, 2]), "JSON object")
    for name, (data, msg) in cases.items():
        p = tmp_path / f"{name}.safetensors"
        _write(p, data)
        with pytest.raises(ValueError, match=msg):
            fastnn.load(p)


def test_broken_npz_files(tmp_path):
    good = tmp_path / "g.npz"
    fastnn.save({"a": np.arange(1000, dtype=np.float32)}, good)
    raw = good.read_bytes()
    for name, data in {"truncated": raw[: len(raw) // 2], "not_zip": b"hello world",
                       "corrupt": raw[:200] + bytes(b ^ 0xFF for b in raw[200:400]) + raw[400:]
                       }.items():
        p = tmp_path / f"{name}.npz"
        _write(p, data)
        with pytest.raises(ValueError, match="npz"):
            fastnn.load(p)
    p = tmp_path / "strings.npz"
    with zipfile.ZipFile(p, "w") as z:
        with z.open("s.npy", "w") as f:
            np.lib.format.write_array(f, np.array(["a", "b"]))
    with pytest.raises(ValueError, match="unsupported dtype"):
        fastnn.load(p)
    with pytest.raises(FileNotFoundError):
        fastnn.load(tmp_path / "missing.npz")


def test_save_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown file type"):
        fastnn.save({"a": np.ones(2)}, tmp_path / "x.pt")
    with pytest.raises(TypeError, match="dtype"):
        fastnn.save({"a": np.array(["s"])}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="dtype"):
        fastnn.save({"a": np.array([object()])}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="dtype"):
        fastnn.save({"a": np.ones(2, np.complex64)}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="keys"):
        fastnn.save({1: np.ones(2)}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="mapping"):
        fastnn.save([np.ones(2)], tmp_path / "x.npz")
    with pytest.raises(ValueError, match="metadata"):
        fastnn.save({"a": np.ones(2)}, tmp_path / "x.npz", metadata={"a": "b"})
    with pytest.raises(TypeError, match="metadata"):
        fastnn.save({"a": np.ones(2)}, tmp_path / "x.safetensors", metadata={"a": 1})
    assert not os.listdir(tmp_path)   # nothing half-written


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_wrong_shaped_file_leaves_model_unchanged(tmp_path, ext):
    m = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4))
    before = {k: v.copy() for k, v in m.state_dict().items()}
    sd = {k: np.zeros_like(v) for k, v in before.items()}
    sd["1.weight"] = np.zeros(5, np.float32)        # wrong shape
    p = tmp_path / ("m" + ext)
    fastnn.save(sd, p)
    with pytest.raises(RuntimeError, match="size mismatch"):
        m.load_state_dict(fastnn.load(p))
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    # unknown / missing names: errors when strict, reported when not (as torch)
    sd = {k: np.zeros_like(v) for k, v in before.items()}
    sd["extra.weight"] = np.ones(3, np.float32)
    del sd["0.bias"]
    fastnn.save(sd, p)
    with pytest.raises(RuntimeError, match="Unexpected key.*extra.weight"):
        m.load_state_dict(fastnn.load(p))
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    missing, unexpected = m.load_state_dict(fastnn.load(p), strict=False)
    assert missing == ["0.bias"] and unexpected == ["extra.weight"]
    np.testing.assert_array_equal(m.state_dict()["0.weight"], 0)
    np.testing.assert_array_equal(m.state_dict()["0.bias"], before["0.bias"])
