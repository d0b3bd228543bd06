"""What the reliability tests (fuzz, bad input, threads, leaks) run, one entry per op / module.

A family joins with a few declarative lines here:

* ``FuzzOp`` -- an F pair plus ``draw(D, dtype) -> (args, kwargs)``, which builds VALID
  arguments of a random configuration through the drawer ``D`` (shapes with zero-size and
  length-1 dims, hyperparameters in their valid ranges).  The same ``draw`` drives
  hypothesis (``HypDraw``, tests/test_fuzz.py), the fixed examples of the bad-input table
  (``RngDraw``) and the large inputs of the thread-determinism test (``RngDraw(big=True)``).
  ``names`` gives the name the error message must use for each positional argument;
  ``bad`` lists op-specific invalid calls (``Bad``); dtype / non-array / grad_output
  mistakes are generated for every op from ``names`` alone.
* ``ModuleSpec`` -- how to build a module and its forward inputs (threads, leaks,
  backward-before-forward, backward twice, wrong inputs).
* ``BadCall`` -- a free-form invalid call (constructors, hyperparameters of modules).
"""
import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np

import fastnn
import fastnn.functional as F
import fastnn.nn as nn

E = (ValueError, TypeError, IndexError)


# ------------------------------------------------------------------ drawers
class _Draw:
    """Random choices for a ``draw`` function; subclasses decide where they come from."""

    big = False

    def _int(self, lo, hi):  # inclusive
        raise NotImplementedError

    def int(self, lo, hi):
        return self._int(lo, hi)

    def bool(self):
        return bool(self._int(0, 1))

    def choice(self, seq):
        seq = list(seq)
        return seq[self._int(0, len(seq) - 1)]

    def float(self, lo, hi):
        return lo + (hi - lo) * self._int(0, 1000) / 1000.0

    def side(self, lo=0, hi=6, big=None):
        """One dimension's length (0 and 1 are likely in fuzzing; 2..5 in fixed examples;
        ``big`` (default ``hi``) for the large inputs of the threading tests)."""
        if self.big:
            return hi if big is None else big
        return self._side(lo, hi)

    def _side(self, lo, hi):
        return self._int(lo, hi)

    def dims(self, lo=0, hi=3, side_lo=0, side_hi=6, big=(256, 400)):
        """A shape of lo..hi dimensions (``big`` for the threading tests)."""
        if self.big:
            return tuple(big)
        k = self._int(lo, hi)
        return tuple(self.side(side_lo, side_hi) for _ in range(k))

    # values -- a numpy Generator seeded from one drawn integer
    def rng(self):
        if getattr(self, "_rng", None) is None:
            self._rng = np.random.default_rng(self._int(0, 2 ** 31 - 1))
        return self._rng

    def array(self, shape, dtype, scale=1.0, loc=0.0):
        return np.asarray(loc + scale * self.rng().standard_normal(shape)).astype(dtype)

    def uniform(self, shape, dtype, lo, hi):
        return np.asarray(self.rng().uniform(lo, hi, shape)).astype(dtype)

    def integers(self, shape, lo, hi, dtype=np.int64):
        """Integers in [lo, hi) (an empty range gives zeros)."""
        if hi <= lo:
            return np.zeros(shape, dtype)
        return np.asarray(self.rng().integers(lo, hi, shape)).astype(dtype)


class RngDraw(_Draw):
    """Fixed, non-degenerate examples (sides 2..5) from a seed; ``big`` for threading tests."""

    def __init__(self, seed=0, big=False):
        self._r = np.random.default_rng(seed)
        self._rng = np.random.default_rng(seed + 1)
        self.big = big

    def _int(self, lo, hi):
        return int(self._r.integers(lo, hi + 1))

    def _side(self, lo, hi):
        return int(self._r.integers(max(lo, min(2, hi)), max(lo, min(5, hi)) + 1))


class HypDraw(_Draw):
    """Choices drawn by hypothesis (``st.data()``), so failures shrink."""

    def __init__(self, data, max_side=None):
        from hypothesis import strategies as st
        self._data = data
        self._st = st
        self._max_side = max_side   # tiny shapes for the CUDA simulator

    def _int(self, lo, hi):
        return self._data.draw(self._st.integers(lo, hi))

    def _side(self, lo, hi):
        # 0 and 1 are drawn often: that is where edge-case bugs live
        st = self._st
        if self._max_side is not None:
            hi = max(lo, min(hi, self._max_side))
        small = [v for v in (0, 1) if lo <= v <= hi]
        if small:
            return self._data.draw(st.one_of(st.sampled_from(small), st.integers(lo, hi)))
        return self._data.draw(st.integers(lo, hi))


# ------------------------------------------------------------------ entries
@dataclasses.dataclass
class Bad:
    """An invalid call made from a valid example: ``mutate(args, kwargs)`` edits them in place
    (or returns new (args, kwargs)); the call must raise one of ``exc`` with ``match`` in
    the message (a regex; defaults to the argument name)."""

    what: str
    mutate: Callable
    match: str
    exc: Any = E


@dataclasses.dataclass
class FuzzOp:
    name: str
    fwd: Callable
    bwd: Optional[Callable]
    draw: Callable                       # (D, dtype) -> (args, kwargs)
    names: Sequence[Optional[str]]       # error-message name of each positional arg
    kernels: Sequence[str]               # backend op names (cuda runs it when none is pending)
    infer: Optional[Callable] = None     # F.op, the inference form (same validation)
    rtol32: float = 1e-4
    atol32: float = 1e-5
    rtol64: float = 1e-9
    atol64: float = 1e-11
    special: bool = True                 # NaN / inf propagation test
    huge: bool = False                   # 1e+-30 float32 test
    random: bool = False                 # Philox RNG: reseed before each backend's run
    bad: Sequence[Bad] = ()
    mixed: bool = True                   # generate mixed float32/float64 bad calls
    examples: int = 40                   # hypothesis examples per dtype on cpu
    family: str = ""                     # for per-family tests (leaks); default: the name
    gil: bool = True                     # the compiled kernels release the GIL (tested)
    blas: bool = False                   # calls a multi-threaded BLAS GEMM (see test_threads)

    def __str__(self):
        return self.name


@dataclasses.dataclass
class ModuleSpec:
    name: str
    build: Callable                      # (dtype) -> module (training mode)
    make: Callable                       # (rng, dtype, big=False) -> tuple of forward inputs
    grads: Optional[Callable] = None     # (rng, out) -> backward args (default: randn like out)
    bad_inputs: Sequence[Any] = ()       # (what, inputs-mutator, match)
    random: bool = False                 # draws from the Philox stream (dropout, rrelu)

    def __str__(self):
        return self.name


@dataclasses.dataclass
class BadCall:
    what: str
    call: Callable
    match: str
    exc: Any = E

    def __str__(self):
        return self.what


FUZZ = []
MODULES = []
BAD_CALLS = []


def _set(i, value):
    def m(args, kwargs):
        args[i] = value(args[i]) if callable(value) else value
    return m


def _kw(key, value):
    def m(args, kwargs):
        kwargs[key] = value
    return m


# ================================================================== dense
def _linear_draw(D, dt):
    lead = D.dims(0, 3, big=(512,))
    n_in, n_out = D.side(0, 9, 256), D.side(0, 9, 192)
    x = D.array(lead + (n_in,), dt)
    w = D.array((n_out, n_in), dt, 0.5)
    b = D.array((n_out,), dt) if D.bool() else None
    return [x, w, b], {}


FUZZ.append(FuzzOp(
    "linear", F.linear_fwd, F.linear_bwd, _linear_draw, ("input", "weight", "bias"),
    ("linear", "linear_backward"), infer=F.linear, blas=True, family="dense",
    bad=[
        Bad("weight 1-D", _set(1, lambda w: w[0]), "weight"),
        Bad("weight 3-D", _set(1, lambda w: w[None]), "weight"),
        Bad("in_features mismatch", _set(1, lambda w: np.concatenate([w, w[:, :1]], 1)), "in_features"),
        Bad("bias wrong length", _set(2, lambda b: np.zeros(b.shape[0] + 1, b.dtype) if b is not None
                                       else np.zeros(99, np.float32)), "bias"),
        Bad("bias 2-D", _set(2, lambda b: np.zeros((1, 2), np.float32)), "bias"),
        Bad("0-d input", _set(0, lambda x: x.reshape(-1)[0].copy() if x.size else np.float32(1.0)),
            "input"),
    ]))


def _linear_module(dt):
    fastnn.manual_seed(0)
    return nn.Linear(6, 5).to(dt)


MODULES.append(ModuleSpec(
    "Linear", _linear_module,
    lambda rng, dt, big=False: (rng.standard_normal((64, 6) if big else (3, 6)).astype(dt),),
    bad_inputs=[("wrong in_features", lambda x: x[..., :-1], "in_features"),
                ("int input", lambda x: x.astype(np.int64), "input"),
                ("0-d input", lambda x: np.float64(1.0).astype(x.dtype).reshape(()), "input")]))
BAD_CALLS += [
    BadCall("Linear(in_features=-1)", lambda: nn.Linear(-1, 3), "in_features"),
    BadCall("Linear(in_features=2.5)", lambda: nn.Linear(2.5, 3), "in_features"),
    BadCall("Linear(out_features='a')", lambda: nn.Linear(2, "a"), "out_features"),
]


# ================================================================== norm
def _ln_draw(D, dt):
    ns = D.dims(1, 2, side_lo=0, side_hi=7, big=(768,))
    lead = D.dims(0, 2, big=(2, 160))
    x = D.array(lead + ns, dt, D.choice([0.5, 3.0]), D.float(-1, 1))
    affine = D.choice(["both", "weight", "none"])
    w = D.array(ns, dt, 0.3, 1.0) if affine != "none" else None
    b = D.array(ns, dt) if affine == "both" else None
    eps = D.choice([1e-5, 1e-3, 0.1])
    return [x, ns, w, b, eps], {}


FUZZ.append(FuzzOp(
    "layer_norm", F.layer_norm_fwd, F.layer_norm_bwd, _ln_draw,
    ("input", None, "weight", "bias", None), ("layer_norm", "layer_norm_backward"),
    infer=F.layer_norm, family="norm", huge=True, rtol32=5e-4, atol32=5e-4,
    bad=[
        Bad("normalized_shape mismatch", _set(1, lambda ns: tuple(ns[:-1]) + (ns[-1] + 1,)),
            "normalized_shape"),
        Bad("normalized_shape empty", _set(1, ()), "normalized_shape"),
        Bad("normalized_shape float", _set(1, 2.5), "normalized_shape"),
        Bad("normalized_shape negative", _set(1, (-1,)), "normalized_shape"),
        Bad("weight wrong shape", _set(2, lambda w: np.ones(7, np.float32)), "weight"),
        Bad("bias wrong shape", _set(3, lambda b: np.ones((2, 9), np.float32)), "bias"),
        Bad("eps = 0", _set(4, 0.0), "eps"),
        Bad("eps < 0", _set(4, -1e-5), "eps"),
        Bad("eps nan", _set(4, float("nan")), "eps"),
        Bad("eps str", _set(4, "1e-5"), "eps"),
    ]))


def _ln_module(dt):
    return nn.LayerNorm(8).to(dt)


MODULES.append(ModuleSpec(
    "LayerNorm", _ln_module,
    lambda rng, dt, big=False: (rng.standard_normal((64, 8) if big else (3, 8)).astype(dt),),
    bad_inputs=[("wrong last dim", lambda x: x[..., :-1], "normalized_shape"),
                ("complex input", lambda x: x.astype(np.complex64), "input")]))
BAD_CALLS += [
    BadCall("LayerNorm(eps=0)", lambda: nn.LayerNorm(4, eps=0.0), "eps"),
    BadCall("LayerNorm(normalized_shape='a')", lambda: nn.LayerNorm("a"), "normalized_shape"),
    BadCall("LayerNorm(normalized_shape=())", lambda: nn.LayerNorm(()), "normalized_shape"),
]


# ================================================================== softmax
def _sm_draw(D, dt):
    shape = D.dims(0, 4)
    nd = len(shape)
    dim = D.int(-max(nd, 1), max(nd, 1) - 1)
    return [D.array(shape, dt, D.choice([1.0, 5.0])), dim], {}


_sm_bad = [
    Bad("dim too large", _set(1, 7), "dim"),
    Bad("dim too small", _set(1, -8), "dim"),
    Bad("dim float", _set(1, 1.0), "dim"),
    Bad("dim None", _set(1, None), "dim"),
]
FUZZ.append(FuzzOp("softmax", F.softmax_fwd, F.softmax_bwd, _sm_draw, ("input", "dim"),
                   ("softmax", "softmax_backward"), infer=F.softmax, huge=True, bad=_sm_bad,
                   family="softmax"))
FUZZ.append(FuzzOp("log_softmax", F.log_softmax_fwd, F.log_softmax_bwd, _sm_draw, ("input", "dim"),
                   ("log_softmax", "log_softmax_backward"), infer=F.log_softmax, huge=True,
                   bad=_sm_bad, family="softmax"))


def _sm_module(cls):
    def build(dt):
        return cls(dim=1)
    return build


def _x_make(shape, big_shape=(64, 300)):
    def make(rng, dt, big=False):
        return ((rng.standard_normal(big_shape if big else shape) * 2).astype(dt),)
    return make


MODULES.append(ModuleSpec("Softmax", _sm_module(nn.Softmax), _x_make((3, 5)),
                          bad_inputs=[("dim out of range", lambda x: x[0], "dim")]))
MODULES.append(ModuleSpec("LogSoftmax", _sm_module(nn.LogSoftmax), _x_make((3, 5)),
                          bad_inputs=[("object input", lambda x: x.astype(object), "input")]))


# ================================================================== activations
def _elementwise_draw(scale=3.0):
    def draw(D, dt):
        return [D.array(D.dims(0, 4), dt, scale)], {}
    return draw


def _gelu_draw(D, dt):
    return [D.array(D.dims(0, 4), dt, 3.0), D.choice(["none", "tanh"])], {}


FUZZ.append(FuzzOp("gelu", F.gelu_fwd, F.gelu_bwd, _gelu_draw, ("input", "approximate"),
                   ("gelu", "gelu_backward"), infer=F.gelu, family="activation",
                   bad=[Bad("approximate='erf'", _set(1, "erf"), "approximate"),
                        Bad("approximate=None", _set(1, None), "approximate")]))
MODULES.append(ModuleSpec("GELU", lambda dt: nn.GELU("tanh"), _x_make((4, 3)),
                          bad_inputs=[("bool input", lambda x: x > 0, "input")]))
BAD_CALLS += [BadCall("GELU(approximate='fast')", lambda: nn.GELU("fast"), "approximate")]


# ------------------------------------------------------------------ lookups
def fuzz_ops():
    return list(FUZZ)


def module_specs():
    return list(MODULES)


# ------------------------------------------------------------------ memory layouts
LAYOUTS = ("C", "strided", "F", "readonly", "misaligned", "reversed", "readonly_strided")


def relayout(a, kind):
    """The same values as ``a`` in memory layout ``kind`` (non-arrays pass through).

    strided: every other element of a wider buffer; F: Fortran order; readonly:
    ``flags.writeable = False``; misaligned: at byte offset 1 of a uint8 buffer (not
    aligned for its dtype); reversed: negative strides on the first axis."""
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiub":
        return a
    if kind == "C":
        return np.array(a, order="C")
    if kind in ("strided", "readonly_strided"):
        if a.ndim == 0:
            v = np.array(a)
        else:
            wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
            v = wide[..., 1::2]
            v[...] = a
        if kind == "readonly_strided":
            v.flags.writeable = False
        return v
    if kind == "F":
        return np.array(a, order="F")  # not np.asfortranarray: it makes 0-d arrays 1-d
    if kind == "readonly":
        v = np.array(a)
        v.flags.writeable = False
        return v
    if kind == "misaligned":
        buf = np.zeros(a.nbytes + a.itemsize + 1, np.uint8)
        v = buf[1:1 + a.nbytes].view(a.dtype).reshape(a.shape)
        v[...] = a
        if a.itemsize > 1 and a.size:
            assert not v.flags.aligned
        return v
    if kind == "reversed":
        if a.ndim == 0:
            return np.array(a)
        v = np.array(a[::-1])[::-1]
        return v
    raise ValueError(kind)
