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
