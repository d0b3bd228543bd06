"""Every declared op and module case x backend x dtype (see tests/harness.py)."""
import numpy as np
import pytest

import fastnn
from harness import (DTYPES, as_tuple, assert_close, is_float_array, random_like, run_case,
                     to_host, tol)
from cases import all_cases, all_module_cases

CASES = all_cases()
MODULE_CASES = all_module_cases()
BACKENDS = [b for b in ("cpu", "cuda")]


def _skip_unavailable(backend):
    if backend not in fastnn.available_backends():
        pytest.skip(f"the {backend} backend is not available here (cuda needs numba-cuda: "
                    f"pip install -e '.[test]')")


def _inputs(case, dtype, seed=0):
    rng = np.random.default_rng(seed)
    args, kwargs = case.make(rng, dtype)
    return list(args), dict(kwargs)


def _ids(c):
    return c.name


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_op_matches_reference(case, backend, dtype):
    if backend not in case.backends:
        pytest.skip(f"{case.name} does not run on {backend}")
    _skip_unavailable(backend)
    args, kwargs = _inputs(case, dtype)
    originals = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    ref_out, _ = run_case(case, "reference", args, kwargs, None)
    d_out = random_like(np.random.default_rng(7), ref_out) if case.bwd is not None else None
    ref_out, ref_grads = run_case(case, "reference", args, kwargs, d_out)
    out, grads = run_case(case, backend, args, kwargs, d_out)
    t = tol(case, dtype)
    for i, (a, b) in enumerate(zip(as_tuple(out), as_tuple(ref_out))):
        assert_close(a, b, f"{case.name} output {i} on {backend}", **t)
    if case.bwd is not None:
        g, rg = as_tuple(grads), as_tuple(ref_grads)
        assert len(g) == len(rg), f"{case.name}: {len(g)} gradients vs {len(rg)} from the reference"
        for i, (a, b) in enumerate(zip(g, rg)):
            assert_close(a, b, f"{case.name} gradient {i} on {backend}", **t)
    for a, o in zip(args, originals):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, o, err_msg=f"{case.name} mutated an input on {backend}")


@pytest.mark.parametrize("case", [c for c in CASES if c.bwd is not None and c.gradcheck], ids=_ids)
def test_reference_gradcheck(case):
    """float64 reference backward == central differences along a random direction."""
    args, kwargs = _inputs(case, np.float64, seed=3)
    rng = np.random.default_rng(11)
    out, _ = run_case(case, "reference", args, kwargs, None)
    d_out = random_like(rng, out)
    _, grads = run_case(case, "reference", args, kwargs, d_out)
    idx = sorted({i for i in case.grad_of if i is not None and is_float_array(args[i])})
    v = {i: rng.standard_normal(args[i].shape) for i in idx}

    def phi(t):
        a2 = [a + t * v[i] if i in v else a for i, a in enumerate(args)]
        o, _ = run_case(case, "reference", a2, kwargs, None)
        return sum(float(np.sum(np.asarray(g, np.float64) * np.asarray(x, np.float64)))
                   for g, x in zip(as_tuple(d_out), as_tuple(o)))

    h = case.gradcheck_eps
    numeric = (phi(h) - phi(-h)) / (2 * h)
    analytic = 0.0
    for k, g in enumerate(as_tuple(grads)):
        i = case.grad_of[k] if k < len(case.grad_of) else None
        if i is None or i not in v or g is None:
            continue
        analytic += float(np.sum(np.asarray(g, np.float64) * v[i]))
    assert np.isclose(analytic, numeric, rtol=1e-5, atol=1e-7), \
        f"{case.name}: analytic {analytic!r} vs central difference {numeric!r}"


@pytest.mark.parametrize("case", [c for c in CASES if c.torch_fn is not None], ids=_ids)
def test_reference_matches_torch(case):
    """The reference (float64) equals PyTorch forward and autograd backward."""
    torch = pytest.importorskip("torch")
    args, kwargs = _inputs(case, np.float64, seed=5)
    out, _ = run_case(case, "reference", args, kwargs, None)
    d_out = random_like(np.random.default_rng(13), out) if case.bwd is not None else None
    out, grads = run_case(case, "reference", args, kwargs, d_out)
    targs = []
    for a in args:
        if is_float_array(a):
            targs.append(torch.tensor(a, dtype=torch.float64, requires_grad=True))
        elif isinstance(a, np.ndarray) and a.dtype.kind in "iu":
            targs.append(torch.tensor(a, dtype=torch.int64))
        elif isinstance(a, np.ndarray) and a.dtype.kind == "b":
            targs.append(torch.tensor(a))
        else:
            targs.append(a)
    tout = case.torch_fn(torch, *targs, **kwargs)
    touts = as_tuple(tout)
    for i, (a, b) in enumerate(zip(as_tuple(out), touts)):
        assert_close(np.asarray(a, np.float64), b.detach().numpy().astype(np.float64),
                     f"{case.name} output {i} vs torch", rtol=1e-7, atol=1e-9)
    if case.bwd is None:
        return
    total = sum((t * torch.tensor(g, dtype=t.dtype)).sum() for t, g in zip(touts, as_tuple(d_out))
                if t.dtype.is_floating_point)
    total.backward()
    for k, g in enumerate(as_tuple(grads)):
        i = case.grad_of[k] if k < len(case.grad_of) else None
        if i is None or not is_float_array(args[i]) or g is None:
            continue
        tg = targs[i].grad
        tg = np.zeros(args[i].shape) if tg is None else tg.numpy()
        assert_close(np.asarray(g, np.float64), tg, f"{case.name} gradient of arg {i} vs torch",
                     rtol=1e-7, atol=1e-9)


# ------------------------------------------------------------------ modules
def _float_to_device(a):
    """Float arrays (also inside tuples, e.g. an LSTM's (h0, c0)) on the device."""
    if isinstance(a, tuple):
        return tuple(_float_to_device(v) for v in a)
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return fastnn.to_device(a)
    return a


def _run_module(case, backend, dtype, inputs, d_out, seed=0):
    fastnn.manual_seed(seed)
    m = case.build(dtype)
    m.train()
    with fastnn.use_backend(backend):
        if backend == "cuda":
            m.to("cuda")
            inputs = [_float_to_device(a) for a in inputs]
        fastnn.manual_seed(seed + 1)
        out = m(*inputs)
        if d_out is None:
            return to_host(out), None, None
        d = d_out
        if backend == "cuda":
            d = tuple(fastnn.to_device(g) for g in as_tuple(d_out))
            d = d if isinstance(d_out, (tuple, list)) else d[0]
        dx = m.backward(*d) if isinstance(d, tuple) else m.backward(d)
        pgrads = {n: to_host(p.grad) for n, p in m.named_parameters()}
    return to_host(out), to_host(dx), pgrads


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", MODULE_CASES, ids=_ids)
def test_module_matches_reference(case, backend, dtype):
    if backend not in case.backends:
        pytest.skip(f"{case.name} does not run on {backend}")
    _skip_unavailable(backend)
    rng = np.random.default_rng(0)
    inputs = list(case.make(rng, dtype))
    ref_out, _, _ = _run_module(case, "reference", dtype, inputs, None)
    d_out = case.d_out(np.random.default_rng(9), ref_out) if case.d_out else \
        random_like(np.random.default_rng(9), ref_out)
    ref_out, ref_dx, ref_pg = _run_module(case, "reference", dtype, inputs, d_out)
    out, dx, pg = _run_module(case, backend, dtype, inputs, d_out)
    t = tol(case, dtype)
    for i, (a, b) in enumerate(zip(as_tuple(out), as_tuple(ref_out))):
        if isinstance(b, (tuple, list)):
            for j, (aa, bb) in enumerate(zip(a, b)):
                assert_close(aa, bb, f"{case.name} output {i}.{j} on {backend}", **t)
        else:
            assert_close(a, b, f"{case.name} output {i} on {backend}", **t)
    for i, (a, b) in enumerate(zip(as_tuple(dx), as_tuple(ref_dx))):
        assert_close(a, b, f"{case.name} input gradient {i} on {backend}", **t)
    assert set(pg) == set(ref_pg)
    for n in ref_pg:
        assert_close(pg[n], ref_pg[n], f"{case.name} grad of {n} on {backend}", **t)
