"""Property tests: every op in tests/reliability_registry.py, fuzzed against the reference.

For each op and dtype hypothesis draws a configuration (shapes with zero-size and
length-1 dims, hyperparameters in their valid ranges) and a memory layout for every
array argument (C, strided, Fortran, read-only, misaligned, reversed).  The reference
runs on C-contiguous copies; the cpu backend (and cuda where its kernels exist) runs on
the views.  Forward (op_fwd and the inference form op) and backward must agree within
tolerance, and no input may change.  Separately: NaN and +-inf propagate as in the
reference, and 1e+-30 float32 inputs do not overflow where the op is meant to be stable.
"""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import fastnn
from fastnn._backend import backend
from harness import as_tuple, to_host
from reliability_registry import FUZZ, LAYOUTS, HypDraw, relayout

DTYPES = [np.float32, np.float64]
CUDA_EXAMPLES = 4
WRITEABLE = tuple(k for k in LAYOUTS if "readonly" not in k)   # for args updated in place

# How many examples ran (reported at the end of the session; RELIABILITY.md quotes it).
COUNTS = {}


def _settings(n, shrink=True):
    kw = {} if shrink else dict(phases=[Phase.explicit, Phase.generate])
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True, **kw)


def _tol(op, dtype):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=op.rtol32, atol=op.atol32)
    return dict(rtol=op.rtol64, atol=op.atol64)


def _close(actual, expected, what, rtol, atol, scale=True):
    if expected is None or actual is None:
        assert actual is None and expected is None, f"{what}: one side is None"
        return
    actual, expected = np.asarray(to_host(actual)), np.asarray(to_host(expected))
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if scale and expected.size:
        fin = np.abs(expected[np.isfinite(expected)].astype(np.float64))
        if fin.size:
            atol = atol * max(1.0, float(fin.max()))
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol,
                               atol=atol, err_msg=what, equal_nan=True)


def _run(op, be, args, kwargs, d_out, seed=0):
    if op.random:
        fastnn.manual_seed(seed)
    with fastnn.use_backend(be):
        if be == "cuda":
            args = [_nested(a, lambda v: fastnn.to_device(np.array(v, order="C"))
                            if isinstance(v, np.ndarray) else v) for a in args]
            if d_out is not None:
                d_out = _nested(d_out, lambda g: fastnn.to_device(np.array(g, order="C")))
        out, ctx = op.fwd(*args, **kwargs)
        grads = op.bwd(ctx, d_out) if (op.bwd is not None and d_out is not None) else None
        inf = None
        if op.infer is not None and d_out is not None:
            if op.random:
                fastnn.manual_seed(seed)
            inf = op.infer(*args, **kwargs)
    return to_host(out), to_host(grads), to_host(inf)


def _nested(x, fn):
    if isinstance(x, (tuple, list)):
        return tuple(_nested(v, fn) for v in x)
    return fn(x)


def _relayout_nested(x, layout):
    return _nested(x, lambda g: relayout(g, layout))


def _d_out(rng, out):
    if isinstance(out, (tuple, list)):
        return tuple(_d_out(rng, o) for o in out)
    o = np.asarray(out)
    return np.asarray(rng.standard_normal(o.shape)).astype(o.dtype)


def _flat(x):
    """Nested tuples/lists of results (an LSTM cell's (dh, dc)) as one flat tuple."""
    if isinstance(x, (tuple, list)):
        return tuple(v for item in x for v in _flat(item))
    return (x,)


def check_against_reference(op, dtype, be, args, kwargs, layouts, d_layout, what=""):
    """The body of every fuzz example: reference on C copies vs ``be`` on the views."""
    ref_out, _, _ = _run(op, "reference", args, kwargs, None)
    d_out = _d_out(np.random.default_rng(len(args)), ref_out) if op.bwd is not None else None
    ref_out, ref_grads, _ = _run(op, "reference", args, kwargs, d_out)
    views = [relayout(a, l) if l else a for a, l in zip(args, layouts)]
    snap = [np.array(v) if isinstance(v, np.ndarray) else None for v in views]
    if d_out is not None:
        d_view = _relayout_nested(d_out, d_layout)
    else:
        d_view = None
    out, grads, inf = _run(op, be, views, kwargs, d_view)
    t = _tol(op, dtype)
    tag = f"{op.name} on {be} {np.dtype(dtype)} layouts={layouts} {what}"
    for i, (a, b) in enumerate(zip(_flat(out), _flat(ref_out))):
        _close(a, b, f"{tag}: output {i}", **t)
    if inf is not None:
        for i, (a, b) in enumerate(zip(_flat(inf), _flat(out))):
            _close(a, b, f"{tag}: inference form vs op_fwd, output {i}", **t)
    if op.bwd is not None:
        g, rg = _flat(grads), _flat(ref_grads)
        assert len(g) == len(rg), f"{tag}: {len(g)} gradients, reference gives {len(rg)}"
        for i, (a, b) in enumerate(zip(g, rg)):
            _close(a, b, f"{tag}: gradient {i}", **t)
    for i, (v, s) in enumerate(zip(views, snap)):
        if s is not None and i not in op.mutable:
            np.testing.assert_array_equal(v, s, err_msg=f"{tag}: argument {i} was modified")


def _fuzz(op, dtype, be, n, max_side=None):
    # the CUDA simulator runs every GPU thread in Python: tiny shapes, no shrinking
    @_settings(n, shrink=be != "cuda")
    @given(st.data())
    def prop(data):
        D = HypDraw(data, max_side)
        args, kwargs = op.draw(D, dtype)
        layouts = [data.draw(st.sampled_from(WRITEABLE if i in op.mutable else LAYOUTS))
                   if isinstance(a, np.ndarray) else None for i, a in enumerate(args)]
        d_layout = data.draw(st.sampled_from(LAYOUTS))
        check_against_reference(op, dtype, be, list(args), dict(kwargs), layouts, d_layout)
        COUNTS[(op.name, be)] = COUNTS.get((op.name, be), 0) + 1

    prop()


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("op", FUZZ, ids=str)
def test_fuzz_cpu(op, dtype):
    _fuzz(op, dtype, "cpu", op.examples)


def _cuda_ready(op):
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or its simulator) is not available here")
    pending = set(backend("cuda").fallbacks) & set(op.kernels)
    if pending:
        pytest.skip(f"no cuda kernel yet for {sorted(pending)} (tests/test_backends.py CUDA_PENDING)")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("op", FUZZ, ids=str)
def test_fuzz_cuda(op, dtype):
    _cuda_ready(op)
    _fuzz(op, dtype, "cuda", CUDA_EXAMPLES, max_side=3)


# ------------------------------------------------------------------ special values
def _inject(a, rng, kinds):
    a = np.array(a)
    if a.size == 0:
        return a
    flat = a.reshape(-1)
    k = max(1, flat.size // 5)
    idx = rng.choice(flat.size, size=min(k, flat.size), replace=False)
    flat[idx] = rng.choice(kinds, size=idx.size)
    return a


def _known(op, reason):
    return pytest.param(op, marks=pytest.mark.xfail(strict=True, reason=reason)) if reason else op


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("op", [_known(o, o.special_known) for o in FUZZ if o.special], ids=str)
def test_special_values_propagate(op, dtype):
    """NaN and +-inf in the input give the reference's NaN/inf pattern, forward and backward."""
    @_settings(max(6, op.examples // 2), shrink=False)
    @given(st.data())
    def prop(data):
        D = HypDraw(data)
        args, kwargs = op.draw(D, dtype)
        kinds = data.draw(st.sampled_from([[np.nan], [np.inf], [-np.inf], [np.nan, np.inf, -np.inf]]))
        args = list(args)
        args[0] = _inject(args[0], D.rng(), kinds)
        layouts = [data.draw(st.sampled_from(WRITEABLE if i in op.mutable else LAYOUTS))
                   if isinstance(a, np.ndarray) else None for i, a in enumerate(args)]
        with np.errstate(all="ignore"):
            check_against_reference(op, dtype, "cpu", args, dict(kwargs), layouts, "C",
                                    f"with {kinds} injected")
        COUNTS[(op.name, "special")] = COUNTS.get((op.name, "special"), 0) + 1

    prop()


@pytest.mark.parametrize("magnitude", [1e30, 1e-30, "mixed"])
@pytest.mark.parametrize("op", [o for o in FUZZ if o.huge], ids=str)
def test_extreme_magnitudes_float32(op, magnitude):
    """1e+-30 in float32: no overflow (finite wherever the float64 reference is) and equal."""
    @_settings(8, shrink=False)
    @given(st.data())
    def prop(data):
        D = HypDraw(data)
        args, kwargs = op.draw(D, np.float32)
        args = list(args)
        x = np.asarray(args[0], np.float64)
        if magnitude == "mixed":
            scale = 10.0 ** D.rng().uniform(-30, 30, x.shape)
        else:
            scale = magnitude
        args[0] = np.asarray(x * scale).astype(np.float32)
        ref, _, _ = _run(op, "reference", args, kwargs, None)
        out, _, _ = _run(op, "cpu", args, kwargs, None)
        for o, r in zip(as_tuple(out), as_tuple(ref)):
            o, r = np.asarray(o), np.asarray(r)
            bad = np.isfinite(r) & ~np.isfinite(o)
            assert not bad.any(), f"{op.name}: overflow at {np.argwhere(bad)[:5].tolist()} " \
                                  f"for |x| ~ {magnitude}"
        # float32 cannot resolve finer than the inputs' own rounding (ops like the label-
        # smoothed loss subtract 1e30-sized terms): allow eps32 * max|x| absolute error
        xmax = float(np.max(np.abs(x * scale), initial=0.0)) if x.size else 0.0
        loose = dataclasses.replace(op, atol32=max(op.atol32, 4e-7 * xmax))
        check_against_reference(loose, np.float32, "cpu", args, dict(kwargs),
                                [None] * len(args), "C", f"|x| ~ {magnitude}")
        COUNTS[(op.name, "extreme")] = COUNTS.get((op.name, "extreme"), 0) + 1

    prop()


def test_zz_fuzz_counts_reported(capsys):
    """Print how many examples ran (pytest -s shows it; RELIABILITY.md quotes the numbers)."""
    total = sum(COUNTS.values())
    with capsys.disabled():
        print(f"\n[fuzz] {total} examples across {len({k[0] for k in COUNTS})} ops: "
              + ", ".join(f"{k[0]}/{k[1]}={v}" for k, v in sorted(COUNTS.items())))
    assert total > 0 or not FUZZ
