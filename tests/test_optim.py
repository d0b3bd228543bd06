"""fastnn.optim: the fused kernels vs their reference twins, the optimizers vs torch.optim
over several steps, state dicts, schedules, bad input."""
import math
import warnings

import numpy as np
import pytest

import fastnn
from fastnn import optim
from fastnn._backend import backend
from fastnn.nn import Parameter
from fastnn.optim import lr_scheduler

SHAPES = [(7, 5), (300,), (3, 2, 4), (0, 3), (70000,)]   # 70000: the threaded path


def _params(dtype, seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(s).astype(dtype)) for s in shapes]


def _grads(params, step, seed=1):
    rng = np.random.default_rng(seed * 1000 + step)
    return [rng.standard_normal(tuple(p.shape)).astype(np.asarray(p.data).dtype
                                                       if hasattr(p, "data") else None)
            for p in params]


CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)),
    ("SGD", dict(lr=0.05, momentum=0.8, maximize=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True, maximize=True)),
    ("Adam", dict(lr=0.01, betas=(0.3, 0.9))),   # lerp weight >= 0.5: torch's other branch
    ("AdamW", dict()),
    ("AdamW", dict(lr=0.02, betas=(0.9, 0.95), weight_decay=0.1)),
    ("AdamW", dict(lr=0.02, weight_decay=0.0, amsgrad=True)),
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
    ("RMSprop", dict(lr=0.01, alpha=0.3, centered=True, maximize=True)),  # lerp weight >= 0.5
    ("RMSprop", dict(lr=0.005, momentum=0.5, weight_decay=0.01)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.05, initial_accumulator_value=0.3, eps=1e-6, maximize=True)),
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.05, decoupled_weight_decay=True, maximize=True)),
    ("NAdam", dict(lr=0.01, betas=(0.3, 0.9))),   # lerp weight >= 0.5
    ("RAdam", dict()),
    ("RAdam", dict(lr=0.01, betas=(0.9, 0.9), weight_decay=0.1)),   # rectified from step 6
    ("RAdam", dict(lr=0.01, betas=(0.3, 0.6), weight_decay=0.05, decoupled_weight_decay=True,
                   maximize=True)),   # never rectified (rho_inf = 4 < 5)
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    ("Adamax", dict(lr=0.01, betas=(0.3, 0.5), maximize=True)),
]


def _cfg_id(c):
    return c[0] + "-" + ",".join(f"{k}={v}" for k, v in c[1].items())


def _run_fastnn(name, kw, dtype, steps=6, be="cpu"):
    params = _params(dtype)
    opt = getattr(optim, name)(params, **kw)
    with fastnn.use_backend(be):
        for t in range(steps):
            for p, g in zip(params, _grads(params, t)):
                p.grad = g
            opt.step()
    return params, opt


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=_cfg_id)
def test_matches_torch_over_steps(cfg, dtype):
    torch = pytest.importorskip("torch")
    name, kw = cfg
    tparams = [torch.tensor(p.data, requires_grad=True) for p in _params(dtype)]
    topt = getattr(torch.optim, name)(tparams, **kw)
    for t in range(6):
        for tp, g in zip(tparams, _grads(_params(dtype), t)):
            tp.grad = torch.tensor(g)
        topt.step()
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    if kw.get("centered") and dtype == np.float32:
        # sqrt(square_avg - grad_avg^2) cancels where the two are close: a fused multiply-add
        # (one rounding) vs torch's two roundings moves such elements by ~1e-4 relative
        tol = dict(rtol=5e-4, atol=2e-5)
    for be in ("cpu", "reference"):
        params, opt = _run_fastnn(name, kw, dtype, be=be)
        for i, (p, tp) in enumerate(zip(params, tparams)):
            assert p.data.dtype == np.dtype(dtype)
            np.testing.assert_allclose(p.data, tp.detach().numpy(), err_msg=f"param {i} on {be}", **tol)
            tstate = topt.state[tp]
            for k, v in opt.state[p].items():
                if k == "step":
                    assert v == float(tstate["step"])
                else:
                    np.testing.assert_allclose(v, tstate[k].numpy(), err_msg=f"{k} of {i} on {be}", **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", ["sgd_step", "adam_step", "adamw_step"])
def test_kernel_matches_reference(op, dtype):
    """The compiled kernel against its reference twin, every option, in place, None returned."""
    rng = np.random.default_rng(3)
    n = 100003
    cpu, ref = backend("cpu"), backend("reference")
    tol = dict(rtol=3e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    if op == "sgd_step":
        variants = [(m, d, wd, nes, mx, first) for m, d, wd, nes, mx, first in
                    [(0, 0, 0, False, False, False), (0, 0, 0.1, False, True, False),
                     (0.9, 0, 0, False, False, True), (0.9, 0.2, 0.01, False, False, False),
                     (0.9, 0, 0.01, True, True, False)]]
    else:
        variants = [(ams, mx, wd, b1, step) for ams, mx, wd, b1, step in
                    [(False, False, 0.0, 0.9, 1), (True, False, 0.05, 0.9, 7),
                     (False, True, 0.01, 0.2, 3)]]
    for v in variants:
        base = [rng.standard_normal(n).astype(dtype) for _ in range(4)]
        base[3] = np.abs(base[3])
        results = []
        for be in (cpu, ref):
            p, g, m, s = (a.copy() for a in base)
            vmax = np.abs(rng.standard_normal(n)).astype(dtype) if op != "sgd_step" and v[0] else None
            if op == "sgd_step":
                mom, damp, wd, nes, mx, first = v
                out = be.sgd_step(p, g, m if mom else None, 0.05, mom, damp, wd, nes, mx, first)
                results.append((p, m))
            else:
                ams, mx, wd, b1, step = v
                rng2 = np.random.default_rng(5)
                vmax = np.abs(rng2.standard_normal(n)).astype(dtype) if ams else None
                out = getattr(be, op)(p, g, m, s, vmax, 1e-2, b1, 0.999, 1e-8, wd, step, mx)
                results.append((p, m, s) + ((vmax,) if ams else ()))
            assert out is None
            np.testing.assert_array_equal(g, base[1])   # grad is read only
        for a, b in zip(*results):
            np.testing.assert_allclose(a, b, err_msg=f"{op} {v}", **tol)
        if op == "sgd_step" and v[0] == 0:
            pass


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", ["rmsprop_step", "adagrad_step"])
def test_rmsprop_adagrad_kernels_match_reference(op, dtype):
    """The compiled RMSprop / Adagrad kernels against their reference twins (threaded size),
    every option, in place, grad read only."""
    rng = np.random.default_rng(4)
    n = 100003
    cpu, ref = backend("cpu"), backend("reference")
    tol = dict(rtol=3e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    variants = ([(0.0, False, 0.0, False, 0.99), (0.9, True, 0.01, True, 0.99),
                 (0.5, False, 0.0, True, 0.3), (0.0, True, 0.1, False, 0.2)]
                if op == "rmsprop_step" else [(0.0, False), (0.1, True)])
    for v in variants:
        p0, g = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
        sq0 = np.abs(rng.standard_normal(n)).astype(dtype) + 1
        ga0, buf0 = (0.1 * rng.standard_normal(n)).astype(dtype), rng.standard_normal(n).astype(dtype)
        results = []
        for be in (cpu, ref):
            p, sq, ga, buf, g_in = p0.copy(), sq0.copy(), ga0.copy(), buf0.copy(), g.copy()
            if op == "rmsprop_step":
                mom, centered, wd, mx, alpha = v
                out = be.rmsprop_step(p, g_in, sq, ga if centered else None, buf if mom else None,
                                      0.01, alpha, 1e-8, wd, mom, mx)
                results.append((p, sq, ga, buf))
            else:
                wd, mx = v
                out = be.adagrad_step(p, g_in, sq, 0.05, 1e-10, wd, mx)
                results.append((p, sq))
            assert out is None
            np.testing.assert_array_equal(g_in, g)
        for a, b in zip(*results):
            np.testing.assert_allclose(a, b, err_msg=f"{op} {v}", **tol)


def test_adagrad_state_exists_before_the_first_step_like_torch():
    torch = pytest.importorskip("torch")
    p = Parameter(np.ones((2, 3), np.float32))
    opt = optim.Adagrad([p], initial_accumulator_value=0.25)
    tp = torch.ones(2, 3, requires_grad=True)
    topt = torch.optim.Adagrad([tp], initial_accumulator_value=0.25)
    assert set(opt.state[p]) == set(topt.state[tp]) == {"step", "sum"}
    np.testing.assert_array_equal(opt.state[p]["sum"], topt.state[tp]["sum"].numpy())
    sd = opt.state_dict()
    assert sd["state"][0]["step"] == 0.0 and sd["param_groups"][0]["lr_decay"] == 0.0


def test_results_do_not_depend_on_threads():
    old = fastnn.get_num_threads()
    try:
        outs = []
        for nt in (1, 2, 3):
            fastnn.set_num_threads(nt)
            params, _ = _run_fastnn("AdamW", dict(lr=0.01), np.float32, steps=3)
            outs.append([p.data.copy() for p in params])
        for o in outs[1:]:
            for a, b in zip(o, outs[0]):
                np.testing.assert_array_equal(a, b)
    finally:
        fastnn.set_num_threads(old)


def test_params_without_grad_are_skipped():
    params = _params(np.float32, shapes=[(3,), (4,)])
    before = params[1].data.copy()
    params[0].grad = np.ones(3, np.float32)
    opt = optim.Adam(params, lr=0.1)
    opt.step()
    np.testing.assert_array_equal(params[1].data, before)
    assert params[1] not in opt.state or not opt.state[params[1]]
    params[1].grad = np.ones(4, np.float32)
    params[1].requires_grad = False
    opt.step()
    np.testing.assert_array_equal(params[1].data, before)
    assert opt.state[params[0]]["step"] == 2.0


def test_zero_grad():
    p = _params(np.float32, shapes=[(3,)])[0]
    p.grad = np.ones(3, np.float32)
    opt = optim.SGD([p], lr=0.1)
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad, 0)
    opt.zero_grad()
    assert p.grad is None


def test_noncontiguous_param_and_grad():
    """A parameter loaded as a transposed view is given its own C-contiguous array."""
    base = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    p = Parameter(base)
    p.data = base.T   # F-ordered view, as load_state_dict of a transposed array could leave
    g = np.ones((12, 4), np.float32)[::2]   # strided grad
    p.grad = g
    optim.SGD([p], lr=0.5).step()
    np.testing.assert_allclose(p.data, base.T - 0.5)
    np.testing.assert_array_equal(base, np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32))


def test_param_groups_like_torch():
    torch = pytest.importorskip("torch")
    a, b = _params(np.float64, shapes=[(5,), (6,)])
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5, "momentum": 0.9}], lr=0.1)
    ta, tb = (torch.tensor(p.data, requires_grad=True) for p in (a, b))
    topt = torch.optim.SGD([{"params": [ta]}, {"params": [tb], "lr": 0.5, "momentum": 0.9}], lr=0.1)
    for t in range(3):
        for p, tp, g in zip((a, b), (ta, tb), _grads([a, b], t)):
            p.grad, tp.grad = g, torch.tensor(g)
        opt.step()
        topt.step()
    np.testing.assert_allclose(a.data, ta.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.data, tb.detach().numpy(), rtol=1e-12)
    assert opt.param_groups[0]["momentum"] == 0 and opt.param_groups[1]["lr"] == 0.5
    c = Parameter(np.zeros(2))
    opt.add_param_group({"params": c, "lr": 1.0})
    assert len(opt.param_groups) == 3
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})


def test_state_dict_roundtrip_continues_identically():
    params, opt = _run_fastnn("AdamW", dict(lr=0.01, amsgrad=True), np.float32, steps=3)
    sd = opt.state_dict()
    assert sorted(sd["state"]) == [0, 1, 2, 3, 4]
    assert sd["param_groups"][0]["params"] == [0, 1, 2, 3, 4]
    assert sd["state"][0]["step"] == 3.0
    saved_params = [p.data.copy() for p in params]
    # continue the original
    for p, g in zip(params, _grads(params, 10)):
        p.grad = g
    opt.step()
    # a fresh optimizer loaded from the state dict does the same step
    params2 = [Parameter(d) for d in saved_params]
    opt2 = optim.AdamW(params2, lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.01
    for p, g in zip(params2, _grads(params2, 10)):
        p.grad = g
    opt2.step()
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.data, q.data)


def test_a_scalar_parameter_keeps_scalar_state():
    """A 0-d parameter (a learnable temperature) keeps 0-d moments through a state_dict
    round trip and a dtype change (.double()), as torch's optimizers do; the state was
    rebuilt with np.ascontiguousarray, which made it 1-d."""
    t = Parameter(np.array(1.5, np.float32))
    opt = optim.AdamW([t], lr=0.1)
    t.grad = np.array(0.5, np.float32)
    opt.step()
    assert all(np.shape(v) == () for v in opt.state[t].values())
    opt2 = optim.AdamW([t], lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    assert {k: np.shape(v) for k, v in opt2.state[t].items()} == {
        "exp_avg": (), "exp_avg_sq": (), "step": ()}
    t.data = np.array(1.0, np.float64)
    t.grad = np.array(0.25)
    opt2.step()           # parameter now float64: its moments are recast, still 0-d
    assert t.data.shape == ()
    assert {k: (np.shape(v), getattr(v, "dtype", None)) for k, v in opt2.state[t].items()
            if k != "step"} == {"exp_avg": ((), np.float64), "exp_avg_sq": ((), np.float64)}


def test_load_state_dict_errors_leave_optimizer_unchanged():
    params, opt = _run_fastnn("Adam", dict(lr=0.01), np.float32, steps=1)
    sd = opt.state_dict()
    other = optim.Adam(_params(np.float32, shapes=[(7, 5)]), lr=0.3)
    with pytest.raises(ValueError, match="doesn't match the size"):
        other.load_state_dict(sd)
    assert other.param_groups[0]["lr"] == 0.3 and not other.state
    bad = opt.state_dict()
    bad["state"][0]["exp_avg"] = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match="shape"):
        opt.load_state_dict(bad)
    np.testing.assert_array_equal(opt.state[params[0]]["exp_avg"], sd["state"][0]["exp_avg"])
    with pytest.raises(ValueError):
        opt.load_state_dict({"state": {}})
    two = optim.Adam([{"params": params[:1]}, {"params": params[1:]}])
    with pytest.raises(ValueError, match="parameter groups"):
        two.load_state_dict(sd)


def test_dtype_change_recasts_state():
    params, opt = _run_fastnn("AdamW", dict(lr=0.01), np.float32, steps=2)
    for p in params:
        p.data = p.data.astype(np.float64)
        p.grad = np.ones(p.shape)
    opt.step()
    assert all(opt.state[p]["exp_avg"].dtype == np.float64 for p in params)


def test_bad_input():
    p = _params(np.float32, shapes=[(3,)])
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD(p, lr=-0.1)
    with pytest.raises(ValueError, match="learning rate"):
        optim.Adam(p, lr=-1e-3)
    with pytest.raises(ValueError, match="beta parameter at index 0"):
        optim.Adam(p, betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        optim.AdamW(p, betas=(0.9, -0.1))
    with pytest.raises(ValueError, match="betas"):
        optim.AdamW(p, betas=0.9)
    with pytest.raises(ValueError, match="epsilon"):
        optim.Adam(p, eps=-1e-8)
    with pytest.raises(ValueError, match="weight_decay"):
        optim.AdamW(p, weight_decay=-0.1)
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD(p, lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="Parameter"):
        optim.SGD([np.zeros(3)], lr=0.1)
    with pytest.raises(TypeError, match="single Parameter"):
        optim.SGD(p[0], lr=0.1)
    with pytest.raises(TypeError):
        optim.SGD(p, lr="0.1")
    opt = optim.SGD(p, lr=0.1)
    p[0].grad = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="grad of shape"):
        opt.step()
    p[0].grad = np.ones(3, np.float64)
    with pytest.raises(TypeError, match="dtype"):
        opt.step()
    opt.param_groups[0]["lr"] = -1.0
    p[0].grad = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="learning rate"):
        opt.step()


def test_closure_returns_loss():
    p = _params(np.float64, shapes=[(2,)])[0]
    opt = optim.SGD([p], lr=0.1)

    def closure():
        p.grad = 2 * p.data
        return float(np.sum(p.data ** 2))

    before = float(np.sum(p.data ** 2))
    assert opt.step(closure) == before
    assert float(np.sum(p.data ** 2)) < before


# ------------------------------------------------------------------ schedules
def _sched_pair(torch, make, make_t, steps=25):
    p = Parameter(np.zeros(2))
    opt = optim.SGD([p, ], lr=0.5)
    opt.add_param_group({"params": [Parameter(np.zeros(1))], "lr": 0.2})
    tp = [torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)]
    topt = torch.optim.SGD([{"params": [tp[0]]}, {"params": [tp[1]], "lr": 0.2}], lr=0.5)
    s, ts = make(opt), make_t(topt)
    ours, theirs = [s.get_last_lr()], [ts.get_last_lr()]
    for _ in range(steps):
        opt.step()
        topt.step()
        s.step()
        ts.step()
        ours.append(s.get_last_lr())
        theirs.append(ts.get_last_lr())
        assert [g["lr"] for g in opt.param_groups] == ours[-1]
    return np.array(ours), np.array(theirs), s, opt


def test_step_lr_matches_torch():
    torch = pytest.importorskip("torch")
    a, b, _, _ = _sched_pair(torch, lambda o: lr_scheduler.StepLR(o, 4, gamma=0.5),
                             lambda o: torch.optim.lr_scheduler.StepLR(o, 4, gamma=0.5))
    np.testing.assert_array_equal(a, b)


def test_cosine_annealing_matches_torch():
    torch = pytest.importorskip("torch")
    a, b, s, _ = _sched_pair(torch, lambda o: lr_scheduler.CosineAnnealingLR(o, 10, eta_min=0.01),
                             lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, eta_min=0.01))
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)   # 25 steps: past T_max and back
    s.step(5)   # closed form
    assert math.isclose(s.get_last_lr()[0], 0.01 + 0.49 * (1 + math.cos(math.pi / 2)) / 2)


def test_lambda_and_warmup_cosine():
    torch = pytest.importorskip("torch")
    f = lambda e: 0.9 ** e  # noqa: E731
    a, b, _, _ = _sched_pair(torch, lambda o: lr_scheduler.LambdaLR(o, f),
                             lambda o: torch.optim.lr_scheduler.LambdaLR(o, f))
    np.testing.assert_allclose(a, b, rtol=1e-15)
    p = Parameter(np.zeros(1))
    opt = optim.AdamW([p], lr=1.0)
    s = lr_scheduler.get_cosine_schedule_with_warmup(opt, 4, 20)
    lrs = [s.get_last_lr()[0]]
    for _ in range(22):
        opt.step()
        s.step()
        lrs.append(s.get_last_lr()[0])
    np.testing.assert_allclose(lrs[:5], [0, 0.25, 0.5, 0.75, 1.0])
    assert all(x >= y for x, y in zip(lrs[4:21], lrs[5:21]))
    assert lrs[12] == pytest.approx(0.5) and lrs[20] == pytest.approx(0.0) and lrs[22] == 0.0


def test_scheduler_state_dict_and_errors():
    p = Parameter(np.zeros(1))
    opt = optim.SGD([p], lr=1.0)
    s = lr_scheduler.StepLR(opt, 2)
    for _ in range(5):
        s.step()
    sd = s.state_dict()
    assert "optimizer" not in sd and sd["last_epoch"] == 5
    opt2 = optim.SGD([Parameter(np.zeros(1))], lr=1.0)
    s2 = lr_scheduler.StepLR(opt2, 2)
    s2.load_state_dict(sd)
    s.step()
    s2.step()
    assert s2.last_epoch == 6
    with pytest.raises(TypeError):
        lr_scheduler.StepLR(object(), 2)
    with pytest.raises(ValueError):
        lr_scheduler.StepLR(opt, 0)
    with pytest.raises(ValueError):
        lr_scheduler.CosineAnnealingLR(opt, 0)
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(optim.SGD([Parameter(np.zeros(1))], lr=1.0), 2, last_epoch=3)


def _sched_run(torch, opt_name, opt_kw, make, make_t, steps, metrics=None, momentum_key=None):
    """Our scheduler and torch's on the same optimizer setup (two groups); the lr sequences
    (and the cycled momentum / beta1 where ``momentum_key`` names it) must be equal."""
    p, q = Parameter(np.zeros(2)), Parameter(np.zeros(1))
    opt = getattr(optim, opt_name)([{"params": [p]}, {"params": [q], "lr": 0.2}], **opt_kw)
    tp = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    tq = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    topt = getattr(torch.optim, opt_name)([{"params": [tp]}, {"params": [tq], "lr": 0.2}], **opt_kw)
    s, ts = make(opt), make_t(topt)

    def snap(o, sch):
        mom = [g[momentum_key] for g in o.param_groups] if momentum_key else []
        return [float(v) for v in sch.get_last_lr()] + [float(np.ravel(m)[0]) for m in mom]
    ours, theirs = [snap(opt, s)], [snap(topt, ts)]
    for t in range(steps):
        p.grad, q.grad = np.ones(2), np.ones(1)
        tp.grad, tq.grad = torch.ones(2, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
        opt.step()
        topt.step()
        if metrics is None:
            s.step()
            ts.step()
        else:
            s.step(metrics[t])
            ts.step(metrics[t])
        ours.append(snap(opt, s))
        theirs.append(snap(topt, ts))
        assert [g["lr"] for g in opt.param_groups] == s.get_last_lr()
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-13, atol=1e-15)
    # the parameters moved the same way: the schedule reached the optimizer
    np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-12, atol=1e-14)
    return s, opt


@pytest.mark.parametrize("kw", [dict(), dict(start_factor=0.1, end_factor=0.6, total_iters=7),
                                dict(start_factor=1.0, end_factor=0.0, total_iters=4)])
def test_linear_lr_matches_torch(kw):
    torch = pytest.importorskip("torch")
    s, _ = _sched_run(torch, "SGD", dict(lr=0.5), lambda o: lr_scheduler.LinearLR(o, **kw),
                      lambda o: torch.optim.lr_scheduler.LinearLR(o, **kw), 12)
    s.step(3)   # closed form
    t = kw.get("total_iters", 5)
    sf, ef = kw.get("start_factor", 1 / 3), kw.get("end_factor", 1.0)
    assert math.isclose(s.get_last_lr()[0], 0.5 * (sf + (ef - sf) * min(t, 3) / t))


def test_exponential_lr_matches_torch():
    torch = pytest.importorskip("torch")
    s, _ = _sched_run(torch, "Adam", dict(lr=0.5), lambda o: lr_scheduler.ExponentialLR(o, 0.8),
                      lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.8), 10)
    s.step(4)
    assert math.isclose(s.get_last_lr()[1], 0.2 * 0.8 ** 4)


def test_sequential_lr_matches_torch():
    torch = pytest.importorskip("torch")

    def make(mod):
        def build(o):
            warm = mod.LinearLR(o, start_factor=0.1, total_iters=3)
            cos = mod.CosineAnnealingLR(o, T_max=6, eta_min=0.01)
            exp = mod.ExponentialLR(o, 0.9)
            return mod.SequentialLR(o, [warm, cos, exp], milestones=[3, 9])
        return build
    s, _ = _sched_run(torch, "SGD", dict(lr=0.5), make(lr_scheduler),
                      make(torch.optim.lr_scheduler), 16)
    sd = s.state_dict()
    assert len(sd["_schedulers"]) == 3 and "optimizer" not in sd


@pytest.mark.parametrize("opt_name,opt_kw,key", [("SGD", dict(lr=0.1, momentum=0.9), "momentum"),
                                                 ("Adam", dict(lr=0.1), "betas"),
                                                 ("RMSprop", dict(lr=0.1, momentum=0.5), "momentum")])
@pytest.mark.parametrize("kw", [dict(), dict(anneal_strategy="linear", pct_start=0.4),
                                dict(three_phase=True, div_factor=10.0, final_div_factor=100.0),
                                dict(cycle_momentum=False, max_lr=[1.0, 0.3])])
def test_one_cycle_lr_matches_torch(kw, opt_name, opt_kw, key):
    torch = pytest.importorskip("torch")
    kw = dict(kw)
    kw.setdefault("max_lr", 1.0)
    key = key if kw.get("cycle_momentum", True) else None
    _sched_run(torch, opt_name, opt_kw, lambda o: lr_scheduler.OneCycleLR(o, total_steps=20, **kw),
               lambda o: torch.optim.lr_scheduler.OneCycleLR(o, total_steps=20, **kw), 20,
               momentum_key=key)


def test_one_cycle_lr_steps_past_the_end_raise_and_epochs_form():
    p = Parameter(np.zeros(1))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    s = lr_scheduler.OneCycleLR(opt, max_lr=1.0, epochs=2, steps_per_epoch=3)
    assert s.total_steps == 6
    for _ in range(6):
        s.step()
    with pytest.raises(ValueError, match="total steps"):
        s.step()
    with pytest.raises(ValueError, match="total_steps"):
        lr_scheduler.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="momentum"):
        lr_scheduler.OneCycleLR(optim.Adagrad([p]), max_lr=1.0, total_steps=5)
    with pytest.raises(ValueError, match="anneal_strategy"):
        lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=5, anneal_strategy="exp")


@pytest.mark.parametrize("kw", [dict(patience=2), dict(mode="max", factor=0.5, patience=1, cooldown=2),
                                dict(threshold_mode="abs", threshold=0.05, patience=0, min_lr=0.02),
                                dict(mode="max", threshold_mode="abs", min_lr=[0.1, 0.001],
                                     patience=1, eps=1e-3)])
def test_reduce_lr_on_plateau_matches_torch(kw):
    torch = pytest.importorskip("torch")
    metrics = [1.0, 0.9, 0.95, 0.95, 0.97, 0.8, 0.8, 0.81, 0.85, 0.9, 1.2, 0.5, 0.5, 0.5, 0.5,
               0.49, 0.6, 0.7, 0.7, 0.7]
    s, _ = _sched_run(torch, "SGD", dict(lr=0.5), lambda o: lr_scheduler.ReduceLROnPlateau(o, **kw),
                      lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, **kw), len(metrics),
                      metrics=metrics)
    assert s.state_dict()["num_bad_epochs"] >= 0


def test_new_schedulers_bad_arguments():
    p = Parameter(np.zeros(1))
    opt = optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="start_factor"):
        lr_scheduler.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ValueError, match="end_factor"):
        lr_scheduler.LinearLR(opt, end_factor=1.5)
    with pytest.raises(TypeError, match="gamma"):
        lr_scheduler.ExponentialLR(opt, "0.9")
    with pytest.raises(ValueError, match="factor"):
        lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode"):
        lr_scheduler.ReduceLROnPlateau(opt, mode="avg")
    with pytest.raises(ValueError, match="threshold_mode"):
        lr_scheduler.ReduceLROnPlateau(opt, threshold_mode="pct")
    with pytest.raises(ValueError, match="min_lr"):
        lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0.1, 0.2])
    a = lr_scheduler.ExponentialLR(opt, 0.9)
    with pytest.raises(ValueError, match="milestones"):
        lr_scheduler.SequentialLR(opt, [a], milestones=[2])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        lr_scheduler.SequentialLR(opt, [a, lr_scheduler.ReduceLROnPlateau(opt)], milestones=[2])
    other = optim.SGD([Parameter(np.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="same optimizer"):
        lr_scheduler.SequentialLR(opt, [a, lr_scheduler.ExponentialLR(other, 0.5)], milestones=[2])


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize("kw", [dict(), dict(amsgrad=True, maximize=True, weight_decay=0.1),
                                dict(betas=(0.3, 0.9), weight_decay=0.02)])
def test_foreach_step_same_bits_as_one_call_per_parameter(name, kw):
    """foreach (the default: a group's host parameters of each dtype in one kernel call,
    one parallel region) gives the bits of one call per parameter (foreach=False), on 1
    and 2 threads, with float32 and float64 parameters in one group, a parameter without a
    gradient in some steps (its own step count) and sizes over several chunks."""
    shapes = [(7, 5), (300,), (0, 3), (70000,), (3, 40000), (1,)]
    old = fastnn.get_num_threads()
    runs = []
    try:
        for foreach, nt in ((False, 1), (None, 1), (None, 2), (True, 2)):
            fastnn.set_num_threads(nt)
            ps = _params(np.float32, seed=4, shapes=shapes) + _params(np.float64, seed=5,
                                                                       shapes=shapes[:2])
            opt = getattr(optim, name)(ps, lr=0.01, foreach=foreach, **kw)
            for step in range(4):
                for i, (p, g) in enumerate(zip(ps, _grads(ps, step))):
                    p.grad = None if (i == 1 and step == 2) else g
                opt.step()
            assert opt.state[ps[1]]["step"] == 3.0 and opt.state[ps[0]]["step"] == 4.0
            runs.append([np.array(p.data) for p in ps] +
                        [np.array(v) for p in ps for v in opt.state.get(p, {}).values()
                         if isinstance(v, np.ndarray)])
    finally:
        fastnn.set_num_threads(old)
    for got in runs[1:]:
        assert len(got) == len(runs[0])
        for a, b in zip(got, runs[0]):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op", ["adam_step_foreach", "adamw_step_foreach"])
def test_foreach_kernel_matches_single_kernel_and_reference(op):
    """The list kernel: the cpu single-tensor kernel's bits for every entry, the
    reference's values, every list argument updated in place, grads read only."""
    rng = np.random.default_rng(6)
    sizes = [5, 40000, 1, 100003, 0]
    cpu, ref = backend("cpu"), backend("reference")
    single = op.replace("_foreach", "")
    steps = [1.0, 3.0, 2.0, 7.0, 1.0]
    base = [[rng.standard_normal(n).astype(np.float32) for _ in range(5)] for n in sizes]
    for b in base:
        b[3] = np.abs(b[3])
        b[4] = np.abs(b[4])
    res = {}
    for key, be in (("list", cpu), ("ref", ref)):
        arrs = [[a.copy() for a in b] for b in base]
        out = getattr(be, op)([a[0] for a in arrs], [a[1] for a in arrs], [a[2] for a in arrs],
                              [a[3] for a in arrs], [a[4] for a in arrs], 1e-2, 0.9, 0.999,
                              1e-8, 0.05, steps, True)
        assert out is None
        res[key] = arrs
    arrs = [[a.copy() for a in b] for b in base]
    for a, st in zip(arrs, steps):
        getattr(cpu, single)(a[0], a[1], a[2], a[3], a[4], 1e-2, 0.9, 0.999, 1e-8, 0.05, st,
                             True)
    for a, b, c, orig in zip(res["list"], arrs, res["ref"], base):
        np.testing.assert_array_equal(a[1], orig[1])
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_allclose(x, z, rtol=3e-6, atol=1e-6)


def test_foreach_kernel_rejects_bad_lists():
    cpu = backend("cpu")
    f = cpu.adamw_step_foreach
    a = [np.zeros(4, np.float32) for _ in range(4)]

    def call(p, g, m, v, steps=(1.0,), vmax=None):
        f(p, g, m, v, vmax, 1e-3, 0.9, 0.999, 1e-8, 0.0, list(steps), False)

    with pytest.raises(ValueError, match="one entry per parameter"):
        call([a[0]], [a[1]], [a[2]], [])
    with pytest.raises(TypeError, match="dtype"):
        call([a[0]], [a[1].astype(np.float64)], [a[2]], [a[3]])
    with pytest.raises(ValueError, match="elements"):
        call([a[0]], [np.zeros(5, np.float32)], [a[2]], [a[3]])
    with pytest.raises(ValueError, match="C-contiguous"):
        call([a[0]], [np.zeros(8, np.float32)[::2]], [a[2]], [a[3]])
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        call([a[0]], [a[1]], [ro], [a[3]])
    with pytest.raises(TypeError, match="NumPy array"):
        call([a[0]], [[0.0] * 4], [a[2]], [a[3]])
    with pytest.raises(TypeError, match="foreach"):
        optim.AdamW(_params(np.float32), foreach="yes")
    opt = optim.Adam(_params(np.float32), foreach=False)
    assert opt.state_dict()["param_groups"][0]["foreach"] is False


# ------------------------------------------------------------------ more of torch's schedules
_MORE = {
    "multistep": lambda m: lambda o: m.MultiStepLR(o, milestones=[6, 2, 6, 9], gamma=0.5),
    "multiplicative": lambda m: lambda o: m.MultiplicativeLR(o, lambda e: 0.9 if e % 2 else 0.97),
    "constant": lambda m: lambda o: m.ConstantLR(o, factor=0.25, total_iters=4),
    "polynomial": lambda m: lambda o: m.PolynomialLR(o, total_iters=8, power=2.0),
    "warm_restarts": lambda m: lambda o: m.CosineAnnealingWarmRestarts(o, T_0=3, eta_min=0.01),
    "warm_restarts_mult": lambda m: lambda o: m.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2),
    "chained": lambda m: lambda o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, 0.9)]),
    "sequential_poly": lambda m: lambda o: m.SequentialLR(
        o, [m.ConstantLR(o, factor=0.1, total_iters=2), m.PolynomialLR(o, total_iters=6)],
        milestones=[3]),
}


@pytest.mark.parametrize("kind", sorted(_MORE))
def test_more_schedulers_match_torch(kind):
    torch = pytest.importorskip("torch")
    _sched_run(torch, "SGD", dict(lr=0.5), _MORE[kind](lr_scheduler),
               _MORE[kind](torch.optim.lr_scheduler), 18)


@pytest.mark.parametrize("opt_name,opt_kw,key", [("SGD", dict(lr=0.1, momentum=0.9), "momentum"),
                                                 ("Adam", dict(lr=0.1), "betas")])
@pytest.mark.parametrize("kw", [dict(), dict(mode="triangular2", step_size_down=3),
                                dict(mode="exp_range", gamma=0.9, base_lr=[0.01, 0.02]),
                                dict(cycle_momentum=False, max_lr=[1.0, 0.3])])
def test_cyclic_lr_matches_torch(kw, opt_name, opt_kw, key):
    torch = pytest.importorskip("torch")
    kw = dict(kw)
    kw.setdefault("base_lr", 0.05)
    kw.setdefault("max_lr", 1.0)
    key = key if kw.get("cycle_momentum", True) else None
    _sched_run(torch, opt_name, opt_kw, lambda o: lr_scheduler.CyclicLR(o, step_size_up=4, **kw),
               lambda o: torch.optim.lr_scheduler.CyclicLR(o, step_size_up=4, **kw), 25,
               momentum_key=key)


def test_cyclic_lr_custom_scale_fn_matches_torch():
    torch = pytest.importorskip("torch")
    fn = lambda x: 1.0 / (1.0 + x)   # noqa: E731
    for mode in ("cycle", "iterations"):
        _sched_run(torch, "SGD", dict(lr=0.1, momentum=0.9),
                   lambda o: lr_scheduler.CyclicLR(o, 0.1, 1.0, 3, scale_fn=fn, scale_mode=mode),
                   lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.1, 1.0, 3, scale_fn=fn,
                                                               scale_mode=mode), 14,
                   momentum_key="momentum")


def test_closed_forms_and_fractional_epochs_match_torch():
    """step(epoch): the closed forms, and the warm restarts' fractional epochs (epoch +
    i / iters within an epoch) and T_mult jumps."""
    torch = pytest.importorskip("torch")
    cases = [(lambda m, o: m.MultiStepLR(o, [2, 5, 5]), [0, 3, 5, 7, 1]),
             (lambda m, o: m.ConstantLR(o, 0.3, 4), [2, 4, 9, 0]),
             (lambda m, o: m.PolynomialLR(o, 6, 0.5), [1, 3, 6, 11]),
             (lambda m, o: m.CosineAnnealingWarmRestarts(o, 3, 2, 0.001),
              [0.5, 1.25, 2.9, 3.0, 7.5, 8.999, 21.0, 4.0])]
    for make, epochs in cases:
        opt = optim.SGD([Parameter(np.zeros(1))], lr=0.5)
        topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
        s, ts = make(lr_scheduler, opt), make(torch.optim.lr_scheduler, topt)
        for e in epochs:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")      # torch's epoch-deprecation warning
                ts.step(e)
            s.step(e)
            assert s.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-13), (type(s), e)


@pytest.mark.parametrize("ext", ["npz", "safetensors"])
def test_more_schedulers_state_round_trip(tmp_path, ext):
    """State dicts save with fastnn.save and resume the same sequence."""
    makers = [lambda o: lr_scheduler.MultiStepLR(o, [3, 5]),
              lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, 2, 2),
              lambda o: lr_scheduler.CyclicLR(o, 0.01, 0.5, 3, mode="triangular2"),
              lambda o: lr_scheduler.ChainedScheduler([lr_scheduler.ConstantLR(o, 0.5, 4),
                                                       lr_scheduler.PolynomialLR(o, 9)])]
    for i, make in enumerate(makers):
        def fresh():
            o = optim.SGD([Parameter(np.zeros(1))], lr=0.5, momentum=0.9)
            return o, make(o)
        o1, s1 = fresh()
        for _ in range(4):
            s1.step()
        path = tmp_path / f"s{i}.{ext}"
        fastnn.save({"sched": s1.state_dict(), "opt": o1.state_dict()}, str(path))
        o2, s2 = fresh()
        back = fastnn.load(str(path))
        o2.load_state_dict(back["opt"])
        s2.load_state_dict(back["sched"])
        for _ in range(6):
            s1.step()
            s2.step()
            assert s2.get_last_lr() == pytest.approx(s1.get_last_lr(), rel=1e-15), i
            assert o2.param_groups[0]["lr"] == pytest.approx(o1.param_groups[0]["lr"], rel=1e-15)


def test_more_schedulers_bad_arguments():
    opt = optim.SGD([Parameter(np.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="milestones"):
        lr_scheduler.MultiStepLR(opt, [-1])
    with pytest.raises(ValueError, match="factor"):
        lr_scheduler.ConstantLR(opt, factor=2.0)
    with pytest.raises(ValueError, match="T_0"):
        lr_scheduler.CosineAnnealingWarmRestarts(opt, 0)
    with pytest.raises(ValueError, match="T_mult"):
        lr_scheduler.CosineAnnealingWarmRestarts(opt, 2, T_mult=0)
    with pytest.raises(ValueError, match="mode"):
        lr_scheduler.CyclicLR(opt, 0.1, 1.0, mode="sine")
    with pytest.raises(ValueError, match="momentum"):
        lr_scheduler.CyclicLR(optim.Adagrad([Parameter(np.zeros(1))]), 0.1, 1.0)
    with pytest.raises(TypeError, match="callable"):
        lr_scheduler.MultiplicativeLR(opt, 0.9)
    other = optim.SGD([Parameter(np.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="same optimizer"):
        lr_scheduler.ChainedScheduler([lr_scheduler.ExponentialLR(opt, 0.9),
                                       lr_scheduler.ExponentialLR(other, 0.9)])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        lr_scheduler.ChainedScheduler([lr_scheduler.ReduceLROnPlateau(opt)])



@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", ["nadam_step", "radam_step", "adamax_step"])
def test_adam_variant_kernels_match_reference(op, dtype):
    """The compiled NAdam / RAdam / Adamax kernels against their reference twins at a
    threaded size, every option (RAdam both sides of its rectification: steps 1 and 3
    before it, 9 after), in place, grad read only; a NaN in the gradient reaches the
    parameter and the state as in torch."""
    rng = np.random.default_rng(9)
    n = 100003
    cpu, ref = backend("cpu"), backend("reference")
    tol = dict(rtol=3e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    for wd, dec, mx, b1, step in [(0.0, False, False, 0.9, 1.0), (0.1, False, True, 0.3, 3.0),
                                  (0.05, True, False, 0.9, 9.0)]:
        p0, g = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
        g[7] = np.nan
        m0 = rng.standard_normal(n).astype(dtype)
        s0 = np.abs(rng.standard_normal(n)).astype(dtype) + 0.1
        results = []
        for be in (cpu, ref):
            p, m, s, g_in = p0.copy(), m0.copy(), s0.copy(), g.copy()
            if op == "nadam_step":
                out = be.nadam_step(p, g_in, m, s, 0.01, b1, 0.999, 1e-8, wd, dec, 0.45, 0.46,
                                    0.2, step, mx)
            elif op == "radam_step":
                out = be.radam_step(p, g_in, m, s, 0.01, b1, 0.999, 1e-8, wd, dec, step, mx)
            else:
                out = be.adamax_step(p, g_in, m, s, 0.01, b1, 0.9, 1e-8, wd, step, mx)
            assert out is None
            np.testing.assert_array_equal(g_in, g)
            assert np.isnan(p[7]) and np.isnan(m[7])
            results.append((p, m, s))
        for a, b in zip(*results):
            np.testing.assert_allclose(a, b, err_msg=f"{op} {wd} {dec} {mx}", **tol)


def test_adam_variants_state_dict_and_torch_state_names(tmp_path):
    torch = pytest.importorskip("torch")
    for name in ("NAdam", "RAdam", "Adamax"):
        params, opt = _run_fastnn(name, dict(lr=0.01), np.float32, steps=3)
        tp = torch.zeros(3, requires_grad=True)
        topt = getattr(torch.optim, name)([tp])
        tp.grad = torch.ones(3)
        topt.step()
        assert set(opt.state[params[0]]) == set(topt.state[tp]), name
        path = tmp_path / f"{name}.safetensors"
        fastnn.save(opt.state_dict(), str(path))
        params2 = [Parameter(p.data.copy()) for p in params]
        opt2 = getattr(optim, name)(params2, lr=0.5)
        opt2.load_state_dict(fastnn.load(str(path)))
        for o, ps in ((opt, params), (opt2, params2)):
            for p, g in zip(ps, _grads(ps, 10)):
                p.grad = g
            o.step()
        for p, q in zip(params, params2):
            np.testing.assert_array_equal(p.data, q.data)
    with pytest.raises(ValueError, match="momentum_decay"):
        optim.NAdam([Parameter(np.zeros(1))], momentum_decay=-1.0)
    with pytest.raises(ValueError, match="beta"):
        optim.Adamax([Parameter(np.zeros(1))], betas=(0.9, 1.0))
