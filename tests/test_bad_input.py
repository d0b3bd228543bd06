"""Bad input, table-driven: every op and module of tests/reliability_registry.py.

Each row is one invalid call; it must raise ValueError, TypeError or IndexError (a
module's backward without a training-mode forward raises RuntimeError, as module.py
documents) with a message that names the offending argument.  Rows come from three
places: generated for every op from its argument names (wrong dtypes: int, bool,
object, complex, float16; mixed float32/float64; Python lists instead of arrays; a
bad grad_output), the op's own ``bad`` list (wrong ndim / shapes, out-of-range
indices, invalid hyperparameters) and the module / constructor tables.
"""
import re
import time

import numpy as np
import pytest

import fastnn
from harness import as_tuple
from reliability_registry import BAD_CALLS, E, FUZZ, MODULES, RngDraw

WRONG_DTYPES = [np.int32, np.int64, np.bool_, object, np.complex128, np.float16]


def _valid(op, dtype=np.float32, seed=0):
    args, kwargs = op.draw(RngDraw(seed), dtype)
    return list(args), dict(kwargs)


def _forms(op):
    return [("fwd", op.fwd)] + ([("infer", op.infer)] if op.infer is not None else [])


def _float_positions(args):
    return [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]


def expect_error(call, exc, match, what):
    try:
        call()
    except exc as e:
        assert re.search(match, str(e)), f"{what}: {type(e).__name__}({e}) does not name {match!r}"
        return e
    except Exception as e:  # noqa: BLE001 - the wrong exception type is the failure
        raise AssertionError(f"{what}: raised {type(e).__name__}({e}), expected one of "
                             f"{[t.__name__ for t in as_tuple(exc)]} naming {match!r}") from e
    raise AssertionError(f"{what}: no error (expected one naming {match!r})")


# ------------------------------------------------------------------ generated rows
def _op_rows():
    rows = []
    for op in FUZZ:
        args, _ = _valid(op)
        floats = [i for i in _float_positions(args) if op.names[i]]
        for i in floats:
            for dt in WRONG_DTYPES:
                rows.append((op, "dtype", (i, dt)))
            rows.append((op, "list", i))
            if op.mixed and len(floats) > 1:
                rows.append((op, "mixed", i))
        for b in op.bad:
            rows.append((op, "bad", b))
        if op.bwd is not None:
            for kind in ("shape", "dtype64", "int", "list", "ndim"):
                rows.append((op, "grad", kind))
    return rows


def _row_id(row):
    op, kind, arg = row
    if kind == "dtype":
        return f"{op.name}-{op.names[arg[0]]}-{np.dtype(arg[1]).name}"
    if kind in ("list", "mixed"):
        return f"{op.name}-{op.names[arg]}-{kind}"
    if kind == "bad":
        return f"{op.name}-{arg.what}"
    return f"{op.name}-grad_output-{arg}"


OP_ROWS = _op_rows()


def _other_float(a):
    return a.astype(np.float64 if a.dtype == np.float32 else np.float32)


@pytest.mark.parametrize("row", OP_ROWS, ids=[_row_id(r) for r in OP_ROWS])
def test_op_rejects(row):
    op, kind, arg = row
    if kind == "grad":
        return _check_grad(op, arg)
    args, kwargs = _valid(op)
    if kind == "dtype":
        i, dt = arg
        if dt is object:
            args[i] = args[i].astype(object)
        else:
            args[i] = args[i].astype(dt)
        match = op.names[i]
    elif kind == "list":
        args[arg] = args[arg].tolist()
        match = op.names[arg]
    elif kind == "mixed":
        args[arg] = _other_float(args[arg])
        others = [op.names[j] for j in _float_positions(args) if op.names[j]]
        match = "|".join(re.escape(n) for n in set(others))
    else:
        res = arg.mutate(args, kwargs)
        if res is not None:
            args, kwargs = res
        match = arg.match
    exc = arg.exc if kind == "bad" else (TypeError if kind in ("dtype", "list", "mixed") else E)
    for form, fn in _forms(op):
        if op.random:
            fastnn.manual_seed(0)
        expect_error(lambda: fn(*args, **kwargs), exc, match, f"{_row_id(row)} ({form})")


def _check_grad(op, kind):
    args, kwargs = _valid(op)
    if op.random:
        fastnn.manual_seed(0)
    out, ctx = op.fwd(*args, **kwargs)
    outs = as_tuple(out)
    g = [np.ones(np.shape(o), np.asarray(o).dtype) for o in outs]
    if kind == "shape":
        g[0] = np.ones(np.shape(outs[0]) + (2,), g[0].dtype)
        exc, match = ValueError, "grad"
    elif kind == "ndim":
        g[0] = np.ones((), g[0].dtype) if np.ndim(outs[0]) else np.ones((1, 1), g[0].dtype)
        exc, match = ValueError, "grad"
    elif kind == "dtype64":
        g[0] = _other_float(g[0])
        exc, match = TypeError, "grad"
    elif kind == "int":
        g[0] = g[0].astype(np.int64)
        exc, match = TypeError, "grad"
    else:
        g[0] = g[0].tolist() if g[0].ndim else [g[0].tolist()]   # a 0-d array's tolist is a float
        exc, match = (TypeError, ValueError), "grad"
    d = tuple(g) if isinstance(out, tuple) else g[0]
    expect_error(lambda: op.bwd(ctx, d), exc, match, f"{op.name} backward with a bad grad ({kind})")


# ------------------------------------------------------------------ modules
def _module_and_inputs(spec, dtype=np.float32):
    m = spec.build(dtype)
    m.train()
    return m, list(spec.make(np.random.default_rng(0), dtype))


def _grads_for(spec, out):
    if spec.grads is not None:
        return spec.grads(np.random.default_rng(1), out)
    outs = as_tuple(out)
    return tuple(np.ones(np.shape(o), np.asarray(o).dtype) for o in outs)


@pytest.mark.parametrize("spec", MODULES, ids=str)
def test_module_backward_before_forward(spec):
    m, inputs = _module_and_inputs(spec)
    out = m(*inputs)
    g = _grads_for(spec, out)
    fresh = spec.build(np.float32)
    expect_error(lambda: fresh.backward(*g), RuntimeError, "forward",
                 f"{spec.name}.backward before forward")


@pytest.mark.parametrize("spec", MODULES, ids=str)
def test_module_backward_twice(spec):
    m, inputs = _module_and_inputs(spec)
    out = m(*inputs)
    g = _grads_for(spec, out)
    m.backward(*g)
    expect_error(lambda: m.backward(*g), RuntimeError, "forward", f"{spec.name}.backward twice")


@pytest.mark.parametrize("spec", MODULES, ids=str)
def test_module_backward_after_eval_forward(spec):
    m, inputs = _module_and_inputs(spec)
    m.eval()
    out = m(*inputs)
    g = _grads_for(spec, out)
    expect_error(lambda: m.backward(*g), RuntimeError, "forward",
                 f"{spec.name}.backward after an eval-mode forward")


@pytest.mark.parametrize("spec", MODULES, ids=str)
def test_module_bad_grad(spec):
    m, inputs = _module_and_inputs(spec)
    out = m(*inputs)
    g = list(_grads_for(spec, out))
    if not g:   # a loss: backward() takes no gradient
        g = [np.ones((2, 3, 3), np.float32)]
    else:
        g[0] = np.ones(np.shape(g[0]) + (3,), np.asarray(g[0]).dtype)
    expect_error(lambda: m.backward(*g), E, "grad", f"{spec.name}.backward with a wrong-shape grad")


def _module_rows():
    return [(spec, b) for spec in MODULES for b in spec.bad_inputs]


MODULE_ROWS = _module_rows()


@pytest.mark.parametrize("row", MODULE_ROWS, ids=[f"{s.name}-{b[0]}" for s, b in MODULE_ROWS])
def test_module_rejects_input(row):
    spec, (what, mutate, match) = row
    m, inputs = _module_and_inputs(spec)
    inputs[0] = mutate(inputs[0])
    expect_error(lambda: m(*inputs), E, match, f"{spec.name}: {what}")


@pytest.mark.parametrize("row", BAD_CALLS, ids=str)
def test_bad_call(row):
    expect_error(row.call, row.exc, row.match, row.what)


def test_tables_are_not_empty():
    assert len(OP_ROWS) > 10 * len(FUZZ) and MODULES and BAD_CALLS


# ------------------------------------------------------------------ fastnn.load on hostile files
LOAD_ERRORS = (ValueError, TypeError)


def _model():
    fastnn.manual_seed(0)
    return fastnn.nn.Sequential(fastnn.nn.Linear(3, 4), fastnn.nn.LayerNorm(4))


def _snapshot(m):
    return {k: np.array(v) for k, v in m.state_dict().items()}


def _unchanged(m, snap):
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, snap[k], err_msg=f"{k} changed after a failed load")


def _load_into(m, path):
    """What a user does; must raise a clear error and leave ``m`` as it was."""
    snap = _snapshot(m)
    try:
        m.load_state_dict(fastnn.load(str(path)))
    except LOAD_ERRORS + (RuntimeError,):
        _unchanged(m, snap)
        raise
    return True


class _Boom:
    """Unpickling this writes a marker file: proof that a loader ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("ext", ["npz", "safetensors"])
def test_load_truncated_files(tmp_path, ext):
    m = _model()
    good = tmp_path / f"good.{ext}"
    fastnn.save(m.state_dict(), str(good))
    data = good.read_bytes()
    cuts = sorted(set([0, 1, 7, 8, 9, 16, len(data) // 2, len(data) - 1]
                      + list(np.random.default_rng(0).integers(1, len(data), 30))))
    for n in cuts:
        p = tmp_path / f"cut{n}.{ext}"
        p.write_bytes(data[:n])
        with pytest.raises(LOAD_ERRORS):
            _load_into(m, p)


@pytest.mark.parametrize("ext", ["npz", "safetensors"])
def test_load_corrupted_files(tmp_path, ext):
    """Random byte flips: a clear error or a state dict, never another exception or a crash."""
    m = _model()
    good = tmp_path / f"good.{ext}"
    fastnn.save(m.state_dict(), str(good))
    data = bytearray(good.read_bytes())
    rng = np.random.default_rng(1)
    outcomes = {"error": 0, "loaded": 0}
    for k in range(60):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), 1 + k % 4):
            bad[pos] = int(rng.integers(0, 256))
        p = tmp_path / f"bad{k}.{ext}"
        p.write_bytes(bytes(bad))
        try:
            sd = fastnn.load(str(p))
        except LOAD_ERRORS:
            outcomes["error"] += 1
            continue
        assert hasattr(sd, "items")
        outcomes["loaded"] += 1
    assert outcomes["error"] > 0, outcomes


def test_load_never_unpickles(tmp_path):
    marker = tmp_path / "ran"
    m = _model()
    # an .npz whose member is a pickled object array
    p = tmp_path / "evil.npz"
    np.savez(str(p), **{"0.weight": np.array([_Boom(marker)], dtype=object)})
    with pytest.raises(LOAD_ERRORS):
        _load_into(m, p)
    # a raw pickle under both extensions
    import pickle
    for name in ("evil2.npz", "evil.safetensors", "evil.bin"):
        q = tmp_path / name
        q.write_bytes(pickle.dumps({"0.weight": _Boom(marker)}))
        with pytest.raises(LOAD_ERRORS):
            _load_into(m, q)
    assert not marker.exists(), "loading ran code from a pickle"


def _safetensors(header, payload=b""):
    import json
    import struct
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + payload


@pytest.mark.parametrize("case", ["huge_len", "len_past_end", "bad_json", "not_dict", "offsets_past_end",
                                  "offsets_overlap_size", "negative_shape", "dtype_F8", "dtype_obj",
                                  "complex_npz", "wrong_dtype_values", "wrong_shape"])
def test_load_bad_headers_and_dtypes(tmp_path, case):
    import struct
    m = _model()
    p = tmp_path / ("x.npz" if case == "complex_npz" else "x.safetensors")
    w = {"dtype": "F32", "shape": [4, 3], "data_offsets": [0, 48]}
    if case == "huge_len":
        p.write_bytes(struct.pack("<Q", 2 ** 62) + b"{}")
    elif case == "len_past_end":
        p.write_bytes(struct.pack("<Q", 4096) + b"{}      ")
    elif case == "bad_json":
        p.write_bytes(struct.pack("<Q", 8) + b"{nope:1}")
    elif case == "not_dict":
        p.write_bytes(_safetensors([1, 2, 3]))
    elif case == "offsets_past_end":
        p.write_bytes(_safetensors({"0.weight": dict(w, data_offsets=[0, 4800])}, b"\0" * 48))
    elif case == "offsets_overlap_size":
        p.write_bytes(_safetensors({"0.weight": dict(w, data_offsets=[0, 40])}, b"\0" * 48))
    elif case == "negative_shape":
        p.write_bytes(_safetensors({"0.weight": dict(w, shape=[-4, -3])}, b"\0" * 48))
    elif case == "dtype_F8":
        p.write_bytes(_safetensors({"0.weight": dict(w, dtype="F8_E4M3", data_offsets=[0, 12])},
                                   b"\0" * 12))
    elif case == "dtype_obj":
        p.write_bytes(_safetensors({"0.weight": dict(w, dtype="OBJECT")}, b"\0" * 48))
    elif case == "complex_npz":
        np.savez(str(p), **{"0.weight": np.ones((4, 3), np.complex64)})
    elif case == "wrong_dtype_values":
        # a readable file whose values cannot be parameters (bytes as text)
        sd = {k: np.array(v) for k, v in m.state_dict().items()}
        sd["0.weight"] = np.array(["a"] * 12).reshape(4, 3)
        p = tmp_path / "x.npz"
        np.savez(str(p), **sd)
    elif case == "wrong_shape":
        sd = {k: np.array(v) for k, v in m.state_dict().items()}
        sd["0.weight"] = np.ones((3, 4), np.float32)
        fastnn.save(sd, str(p))
    t0 = time.perf_counter()
    with pytest.raises(LOAD_ERRORS + (RuntimeError,)) as ei:
        _load_into(m, p)
    assert time.perf_counter() - t0 < 5, "a bad header must be rejected without reading/allocating"
    assert str(ei.value), "the error must say what is wrong"


def test_every_public_op_and_module_is_in_the_registry():
    """A family that lands without reliability entries fails here (add a few lines to
    tests/reliability_registry.py)."""
    import fastnn.functional as F
    import fastnn.nn as nn
    from reliability_registry import NOT_FUZZED
    fuzzed = {o.fwd.__name__ for o in FUZZ}
    missing = sorted(n for n in dir(F) if n.endswith("_fwd") and n not in fuzzed and n not in NOT_FUZZED)
    assert not missing, f"functional ops with no FuzzOp: {missing}"
    abstract = {"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Identity",
                "RNNBase", "RNNCellBase"}
    specs = {s.name for s in MODULES}
    mods = sorted(n for n in dir(nn) if isinstance(getattr(nn, n), type)
                  and issubclass(getattr(nn, n), nn.Module) and n not in abstract and n not in specs)
    assert not mods, f"modules with no ModuleSpec: {mods}"


def test_every_op_is_declared_once_and_has_harness_cases():
    """One declaration per op: each harness case (tests/cases/) is made from a registry op
    with ``op(name).case(...)``, and each op has at least one fixed harness configuration."""
    from cases import all_cases
    from reliability_registry import all_ops
    ops = all_ops()
    names = [o.name for o in ops]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"ops declared twice: {twice}"
    cases = all_cases()
    loose = sorted(c.name for c in cases if c.op is None or c.op not in ops)
    assert not loose, f"harness cases not made from a registry op (use op(name).case(...)): {loose}"
    covered = {c.op.name for c in cases}
    bare = sorted(n for n in names if n not in covered)
    assert not bare, f"ops with no harness case in tests/cases/: {bare}"
