"""The op test harness (in the style of Chainer's FunctionTestCase).

Every op is declared once, as an ``Op`` in tests/reliability_registry.py: its F pair, the
inference form, kernels, argument names, ``grad_of``, ``torch_fn``, ``draw`` and bad calls.
The fuzzer, the bad-input table, the thread and leak tests run from those declarations;
the harness runs fixed, tiny configurations of them, declared in ``tests/cases/<family>.py``
as ``op("linear").case("linear_2d", make, **overrides)``: only how to make the inputs
(and what differs for that configuration) is written there.
The harness then checks, for every backend x dtype:

* the backend equals the reference, forward and backward, on NON-contiguous inputs;
* inputs are not mutated;
* the float64 reference backward equals central differences along a random direction;
* the reference equals PyTorch forward and autograd backward (where torch is installed).

Modules with state (RNNs, attention blocks) declare a ``ModuleCase`` instead.
"""
import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np

import fastnn

DTYPES = (np.float32, np.float64)


@dataclasses.dataclass
class Op:
    """One op, declared once (tests/reliability_registry.py); what every test of it reads.

    fwd(*args, **kwargs) -> (out, ctx);  bwd(ctx, d_out) -> grads;  infer: F.op, the
        inference form (same validation).
    draw(D, dtype) -> (args, kwargs): VALID arguments of a random configuration, built
        through the drawer ``D`` (tests/reliability_registry.py: hypothesis for the
        fuzzer, fixed seeds for the bad-input table, ``big`` inputs for the thread tests).
        None: the op is checked by its harness cases only (``not_fuzzed`` says where else).
    names: the name the error message must use for each positional argument.
    kernels: backend op names (cuda runs it when none is pending).
    grad_of, torch_fn: as in ``OpCase``; the defaults of the op's cases.
    rtol32 .. atol64: the fuzzer's tolerances (the cases keep ``OpCase``'s unless given).
    threads: RngDraw seeds of the large inputs the thread tests run (one id each; the
        first keeps the op's plain name).
    """

    name: str
    fwd: Callable
    bwd: Optional[Callable]
    draw: Optional[Callable] = None      # (D, dtype) -> (args, kwargs)
    names: Sequence[Optional[str]] = ()  # error-message name of each positional arg
    kernels: Sequence[str] = ()          # backend op names (cuda runs it when none is pending)
    infer: Optional[Callable] = None     # F.op, the inference form (same validation)
    rtol32: float = 1e-4
    atol32: float = 1e-5
    rtol64: float = 1e-9
    atol64: float = 1e-11
    special: bool = True                 # NaN / inf propagation test
    huge: bool = False                   # 1e+-30 float32 test
    random: bool = False                 # Philox RNG: reseed before each backend's run
    bad: Sequence[Any] = ()              # op-specific invalid calls (reliability_registry.Bad)
    mixed: bool = True                   # generate mixed float32/float64 bad calls
    examples: int = 40                   # hypothesis examples per dtype on cpu
    family: str = ""                     # for per-family tests (leaks); default: the name
    gil: bool = True                     # the compiled kernels release the GIL (tested)
    blas: bool = False                   # calls BLAS GEMMs (deterministic: fixed output blocks)
    mutable: Sequence[int] = ()          # args the op updates in place (running stats)
    special_known: str = ""              # a known NaN/inf divergence (strict xfail, reported)
    grad_of: Sequence[Optional[int]] = (0,)
    torch_fn: Optional[Callable] = None
    threads: Sequence[int] = (5,)
    not_fuzzed: str = ""                 # draw is None: where the op is exercised instead

    def __str__(self):
        return self.name

    def case(self, name, make, **overrides):
        """A fixed harness configuration of this op: ``make(rng, dtype) -> (args, kwargs)``;
        ``overrides`` are ``OpCase`` fields (gradcheck=False, backends=..., torch_fn=None,
        or fwd / bwd / grad_of adapters where the case lays the arguments out differently)."""
        kw = dict(fwd=self.fwd, bwd=self.bwd, grad_of=self.grad_of, torch_fn=self.torch_fn,
                  random=self.random)
        kw.update(overrides)
        return OpCase(name, make=make, op=self, **kw)


@dataclasses.dataclass
class OpCase:
    """One op configuration (made by ``Op.case``).

    make(rng, dtype) -> (args, kwargs): ``args`` are the positional inputs of ``fwd``
        (arrays, None, or other values); float arrays in ``args`` are the differentiable
        candidates.  Keep shapes tiny (a few hundred elements): the cuda backend runs
        them in the CUDA simulator.
    fwd(*args, **kwargs) -> (out, ctx);  bwd(ctx, d_out) -> grads.
    grad_of: for each entry of bwd's result, the index in ``args`` it is the gradient of
        (None for an entry that is not compared, e.g. a gradient of a non-array).
    torch_fn(torch, *targs, **kwargs) -> torch output, with float args as float64 tensors
        (requires_grad) and integer arrays as int64 tensors.
    """

    name: str
    fwd: Callable
    bwd: Optional[Callable]
    make: Callable
    grad_of: Sequence[Optional[int]] = (0,)
    torch_fn: Optional[Callable] = None
    backends: Sequence[str] = ("cpu", "cuda")
    rtol32: float = 2e-4
    atol32: float = 2e-5
    rtol64: float = 1e-9
    atol64: float = 1e-10
    gradcheck: bool = True
    gradcheck_eps: float = 1e-6
    noncontig: bool = True
    random: bool = False  # uses the counter-based RNG: reseed before each run
    op: Optional[Op] = None  # the declaration it configures

    def __str__(self):
        return self.name


@dataclasses.dataclass
class ModuleCase:
    """A module configuration: ``build(dtype)`` -> module (seeded), ``make(rng, dtype)`` ->
    forward inputs; ``d_out(rng, out)`` -> the gradient(s) backward takes (default:
    random arrays shaped like the output).  Outputs, input gradients and every parameter
    gradient are compared with the reference backend."""

    name: str
    build: Callable
    make: Callable
    backends: Sequence[str] = ("cpu", "cuda")
    rtol32: float = 5e-4
    atol32: float = 5e-5
    rtol64: float = 1e-8
    atol64: float = 1e-10
    torch_build: Optional[Callable] = None  # (torch, fastnn_module) -> torch module with same params
    torch_forward: Optional[Callable] = None  # (torch_module, *tensor_inputs) -> torch output(s)
    d_out: Optional[Callable] = None

    def __str__(self):
        return self.name


# ------------------------------------------------------------------ helpers
def in_dtype(ctor):
    """A ModuleCase ``build``: ``ctor()`` (float32), made float64 for the float64 runs."""
    def build(dt):
        m = ctor()
        return m.double() if np.dtype(dt) == np.float64 else m
    return build


def is_float_array(a):
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def noncontiguous(a):
    """A non-contiguous view with the same values (every other element of a wider array)."""
    if not isinstance(a, np.ndarray) or a.ndim == 0 or a.size == 0:
        return a
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    wide[..., ::2] = a
    wide[..., 1::2] = np.nan if a.dtype.kind == "f" else 0
    v = wide[..., ::2]
    assert not v.flags.c_contiguous or a.shape[-1] <= 1
    return v


def to_host(x):
    if x is None:
        return None
    if isinstance(x, (tuple, list)):
        return type(x)(to_host(v) for v in x)
    if isinstance(x, (float, int)):
        return np.asarray(x)
    return fastnn.to_numpy(x)


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def prepare(args, backend, noncontig):
    """Arguments for ``backend``: non-contiguous views of arrays, on the device for cuda."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            v = noncontiguous(a) if noncontig else a
            if backend == "cuda":
                v = fastnn.to_device(np.asarray(v, order="C"))  # keeps 0-d shapes
            out.append(v)
        else:
            out.append(a)
    return out


def tol(case, dtype):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=case.rtol32, atol=case.atol32)
    return dict(rtol=case.rtol64, atol=case.atol64)


def assert_close(actual, expected, what, **kw):
    actual = to_host(actual)
    expected = to_host(expected)
    if expected is None or actual is None:
        assert actual is None and expected is None, f"{what}: one side is None"
        return
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    np.testing.assert_allclose(actual, expected, err_msg=what, equal_nan=True, **kw)


def random_like(rng, out):
    outs = as_tuple(out)
    grads = tuple(rng.standard_normal(np.shape(to_host(o))).astype(to_host(o).dtype) for o in outs)
    return grads if isinstance(out, (tuple, list)) else grads[0]


def run_case(case, backend, args, kwargs, d_out, seed=0):
    """Forward and (if any) backward of ``case`` on ``backend``; host results."""
    if case.random:
        fastnn.manual_seed(seed)
    with fastnn.use_backend(backend):
        pargs = prepare(args, backend, case.noncontig)
        if backend == "cuda":
            d_dev = tuple(fastnn.to_device(g) for g in as_tuple(d_out)) if d_out is not None else None
            if d_dev is not None and not isinstance(d_out, (tuple, list)):
                d_dev = d_dev[0]
        else:
            d_dev = d_out
        try:
            out, ctx = case.fwd(*pargs, **kwargs)
        except NotImplementedError as e:
            if backend == "cuda" and type(e).__name__ == "MissingKernel":
                import pytest
                pytest.skip(f"{e} (listed in the cuda backend's fallbacks; see tests/test_backends.py)")
            raise
        grads = None
        if case.bwd is not None and d_out is not None:
            grads = case.bwd(ctx, d_dev)
    return to_host(out), to_host(grads)


def in_python_threads(fn, n=2):
    """[fn() results of thread i] for n Python threads started together (each calls fn
    once); an exception in a thread is raised here."""
    import threading
    out, errs = [None] * n, []

    def run(i):
        try:
            out[i] = fn()
        except BaseException as e:      # re-raised in the caller
            errs.append(e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return out


def variant_modules(family):
    """pytest params: the compiled ``family`` module of every CPU variant built here
    (id = the variant's name), for kernel tests that check each variant directly."""
    import importlib
    import pytest
    from fastnn.cpu import cpu_variants
    mods = []
    for v in cpu_variants():
        try:
            mods.append(pytest.param(importlib.import_module(f"fastnn._cpu.{v}.{family}"), id=v))
        except ImportError:
            pass
    return mods
