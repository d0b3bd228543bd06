"""Every op, declared once, and what the reliability tests (fuzz, bad input, threads, leaks)
run, one entry per op / module.

A family joins with a few declarative lines here:

* ``Op`` (tests/harness.py) -- an F pair plus ``draw(D, dtype) -> (args, kwargs)``, which builds VALID
  arguments of a random configuration through the drawer ``D`` (shapes with zero-size and
  length-1 dims, hyperparameters in their valid ranges).  The same ``draw`` drives
  hypothesis (``HypDraw``, tests/test_fuzz.py), the fixed examples of the bad-input table
  (``RngDraw``) and the large inputs of the thread-determinism test (``RngDraw(big=True)``).
  ``names`` gives the name the error message must use for each positional argument;
  ``bad`` lists op-specific invalid calls (``Bad``); dtype / non-array / grad_output
  mistakes are generated for every op from ``names`` alone.  ``grad_of`` and ``torch_fn``
  serve the harness: its fixed configurations (tests/cases/<family>.py) are made with
  ``op("name").case("case_id", make)`` and take the F pair, ``grad_of`` and ``torch_fn``
  from here.  An op without ``draw`` is checked by its harness cases only (``not_fuzzed``).
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
from harness import Op

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


FuzzOp = Op   # the old name (branches that still declare ``FuzzOp(...)``): same fields


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


def _readonly(a):
    a.flags.writeable = False
    return a


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


def _torch_linear(torch, x, w, b):
    return torch.nn.functional.linear(x, w, b)


FUZZ.append(Op(
    "linear", F.linear_fwd, F.linear_bwd, _linear_draw, ("input", "weight", "bias"),
    ("linear", "linear_backward"), infer=F.linear, blas=True, family="dense",
    grad_of=(0, 1, 2), torch_fn=_torch_linear,
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


def _linear_act_draw(D, dt):
    args, kwargs = _linear_draw(D, dt)
    return args + [D.choice(["gelu", "gelu_tanh"])], kwargs


def _torch_linear_act(torch, x, w, b, activation):
    approximate = "tanh" if activation == "gelu_tanh" else "none"
    return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b), approximate=approximate)


FUZZ.append(Op(
    "linear_act", F.linear_act_fwd, F.linear_act_bwd, _linear_act_draw,
    ("input", "weight", "bias", "activation"), ("linear_act", "linear_act_backward"),
    blas=True, family="dense", grad_of=(0, 1, 2), torch_fn=_torch_linear_act,
    bad=[
        Bad("in_features mismatch", _set(1, lambda w: np.concatenate([w, w[:, :1]], 1)), "in_features"),
        Bad("bias wrong length", _set(2, lambda b: np.zeros(b.shape[0] + 1, b.dtype) if b is not None
                                       else np.zeros(99, np.float32)), "bias"),
        Bad("activation='relu'", _set(3, "relu"), "activation"),
        Bad("activation=None", _set(3, None), "activation"),
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


def _torch_ln(torch, x, ns, w, b, eps):
    return torch.nn.functional.layer_norm(x, ns, w, b, eps)


FUZZ.append(Op(
    "layer_norm", F.layer_norm_fwd, F.layer_norm_bwd, _ln_draw,
    ("input", None, "weight", "bias", None), ("layer_norm", "layer_norm_backward"),
    infer=F.layer_norm, family="norm", huge=True, rtol32=5e-4, atol32=5e-4,
    grad_of=(0, 2, 3), torch_fn=_torch_ln,
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
FUZZ.append(Op("softmax", F.softmax_fwd, F.softmax_bwd, _sm_draw, ("input", "dim"),
               ("softmax", "softmax_backward"), infer=F.softmax, huge=True, bad=_sm_bad,
               family="softmax", torch_fn=lambda torch, x, d: torch.softmax(x, d)))
FUZZ.append(Op("log_softmax", F.log_softmax_fwd, F.log_softmax_bwd, _sm_draw, ("input", "dim"),
               ("log_softmax", "log_softmax_backward"), infer=F.log_softmax, huge=True,
               bad=_sm_bad, family="softmax", torch_fn=lambda torch, x, d: torch.log_softmax(x, d)))


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


FUZZ.append(Op("gelu", F.gelu_fwd, F.gelu_bwd, _gelu_draw, ("input", "approximate"),
               ("gelu", "gelu_backward"), infer=F.gelu, family="activation",
               threads=(5, 6),   # tanh, none
               torch_fn=lambda torch, x, a: torch.nn.functional.gelu(x, approximate=a),
               bad=[Bad("approximate='erf'", _set(1, "erf"), "approximate"),
                    Bad("approximate=None", _set(1, None), "approximate")]))
MODULES.append(ModuleSpec("GELU", lambda dt: nn.GELU("tanh"), _x_make((4, 3)),
                          bad_inputs=[("bool input", lambda x: x > 0, "input")]))
BAD_CALLS += [BadCall("GELU(approximate='fast')", lambda: nn.GELU("fast"), "approximate")]


# ================================================================== activations (all)
def _tf(name, **fixed):
    """torch.nn.functional.<name>(x, *rest, **fixed)."""
    def fn(torch, *args, **kw):
        return getattr(torch.nn.functional, name)(*args, **fixed, **kw)
    return fn


def _act(name, extra=None, huge=False, scale=3.0, bad=(), random=False, kernels=None, torch_fn=None,
         threads=(5,)):
    """An elementwise activation F.<name>_fwd(x, *extra(D)); torch: F.<name>(x, *extra)."""
    fwd, bwd, inf = getattr(F, name + "_fwd"), getattr(F, name + "_bwd"), getattr(F, name)

    def draw(D, dt):
        x = D.array(D.dims(0, 4), dt, scale)
        return [x] + (list(extra(D)) if extra else []), {}
    n_extra = len(extra(RngDraw(0))) if extra else 0
    return Op(name, fwd, bwd, draw, ("input",) + (None,) * n_extra,
              kernels or (name, name + "_backward"), infer=inf, huge=huge, bad=list(bad),
              family="activation", random=random, torch_fn=torch_fn or _tf(name), threads=threads)


FUZZ += [
    _act("relu"),
    _act("leaky_relu", lambda D: [D.choice([0.01, 0.2, -0.5, 1.5])]),
    _act("elu", lambda D: [D.choice([1.0, 0.5, 2.0])],
         bad=[Bad("alpha str", _set(1, "a"), "alpha")]),
    _act("selu"),
    _act("celu", lambda D: [D.choice([1.0, 0.5, 2.0])],
         bad=[Bad("alpha = 0", _set(1, 0.0), "alpha")]),
    _act("silu"),
    _act("softplus", lambda D: [D.choice([1.0, 0.5, 2.0]), D.choice([20.0, 1.0, 5.0])], huge=True,
         bad=[Bad("beta = 0", _set(1, 0.0), "beta"), Bad("threshold str", _set(2, "x"), "threshold")]),
    _act("sigmoid", huge=True, torch_fn=lambda torch, x: torch.sigmoid(x)),
    _act("tanh", torch_fn=lambda torch, x: torch.tanh(x)),
    _act("hardtanh", lambda D: D.choice([[-1.0, 1.0], [0.0, 6.0], [-2.5, 0.5], [1.0, 1.0]]),
         bad=[Bad("min_val > max_val", _set(1, 100.0), "min_val|max_val"),
              Bad("max_val str", _set(2, "x"), "max_val")]),
    _act("relu6", kernels=("hardtanh", "hardtanh_backward")),
    _act("hardsigmoid"),
    _act("hardswish"),
    _act("mish", huge=True),
    _act("rrelu", lambda D: [D.choice([0.125, 0.0]), D.choice([1 / 3, 0.5]), D.bool()], random=True,
         threads=(5, 6),   # eval, training (random slopes)
         bad=[Bad("lower > upper", _set(1, 0.9), "lower|upper"),
              Bad("lower str", _set(1, "a"), "lower")]),
]
FUZZ.append(Op("softmin", F.softmin_fwd, F.softmin_bwd, _sm_draw, ("input", "dim"),
               ("softmax", "softmax_backward", "neg"), infer=F.softmin, huge=True, bad=_sm_bad,
               family="softmax", torch_fn=lambda torch, x, d: torch.nn.functional.softmin(x, d)))


def _prelu_draw(D, dt):
    shape = D.dims(1, 4, big=(64, 32, 50))
    c = shape[1] if len(shape) > 1 and D.bool() else 1
    return [D.array(shape, dt, 3.0), D.array((c,), dt, 0.3, 0.25)], {}


FUZZ.append(Op("prelu", F.prelu_fwd, F.prelu_bwd, _prelu_draw, ("input", "weight"),
               ("prelu", "prelu_backward"), infer=F.prelu, family="activation",
               grad_of=(0, 1), torch_fn=_tf("prelu"),
               bad=[Bad("weight wrong length", _set(1, lambda w: np.ones(w.size + 7, w.dtype)),
                        "weight"),
                    Bad("weight 2-D", _set(1, lambda w: w.reshape(1, -1)), "weight")]))

for _cls, _args in [(nn.ReLU, ()), (nn.LeakyReLU, (0.2,)), (nn.ELU, (0.7,)), (nn.SELU, ()),
                    (nn.CELU, (1.3,)), (nn.SiLU, ()), (nn.Softplus, (2.0, 5.0)), (nn.Sigmoid, ()),
                    (nn.Tanh, ()), (nn.PReLU, (3,)), (nn.Softmin, (1,)),
                    (nn.Hardtanh, (-0.5, 2.0)), (nn.ReLU6, ()), (nn.Hardsigmoid, ()),
                    (nn.Hardswish, ()), (nn.Mish, ())]:
    MODULES.append(ModuleSpec(_cls.__name__, (lambda c, a: lambda dt: c(*a).to(dt))(_cls, _args),
                              _x_make((4, 3), (64, 3, 400)),
                              bad_inputs=[("int input", lambda x: x.astype(np.int32), "input")]))
MODULES.append(ModuleSpec("RReLU", lambda dt: nn.RReLU(0.1, 0.3), _x_make((4, 3)), random=True))
BAD_CALLS += [
    BadCall("ELU(alpha='a')", lambda: nn.ELU("a"), "alpha"),
    BadCall("Softplus(beta=0)", lambda: nn.Softplus(0.0), "beta"),
    BadCall("Hardtanh(min_val=1, max_val=-1)", lambda: nn.Hardtanh(1.0, -1.0), "min_val"),
    BadCall("RReLU(lower=0.5, upper=0.1)", lambda: nn.RReLU(0.5, 0.1), "lower|upper"),
    BadCall("PReLU(num_parameters=0)", lambda: nn.PReLU(0), "num_parameters"),
]


# ================================================================== dropout
def _dropout_draw(D, dt):
    return [D.array(D.dims(0, 4), dt), D.choice([0.0, 0.1, 0.5, 0.9, 1.0]), D.bool()], {}


FUZZ.append(Op("dropout", F.dropout_fwd, F.dropout_bwd, _dropout_draw, ("input", "p", None),
               ("dropout", "dropout_backward"), infer=F.dropout, random=True, family="dropout",
               # torch's mask is its own: compared where p and training fix the result
               torch_fn=lambda torch, x, p, t: torch.nn.functional.dropout(x, p, t),
               bad=[Bad("p = 1.5", _set(1, 1.5), "p"), Bad("p < 0", _set(1, -0.1), "p"),
                    Bad("p str", _set(1, "0.5"), "p")]))
MODULES.append(ModuleSpec("Dropout", lambda dt: nn.Dropout(0.3), _x_make((4, 3)), random=True))
BAD_CALLS += [BadCall("Dropout(p=2)", lambda: nn.Dropout(2.0), "p")]


# ================================================================== embedding
def _emb_draw(D, dt):
    num, dim = D.side(1, 7, 1000), D.side(0, 5, 256)
    idx = D.integers(D.dims(0, 3, big=(64, 256)), 0, num)
    pad = D.choice([None, 0, num - 1, -1])
    return [idx, D.array((num, dim), dt), pad], {}


def _torch_emb(torch, idx, w, padding_idx):
    return torch.nn.functional.embedding(idx, w, padding_idx)


FUZZ.append(Op("embedding", F.embedding_fwd, F.embedding_bwd, _emb_draw,
                   ("input", "weight", "padding_idx"), ("embedding", "embedding_backward"),
                   infer=F.embedding, family="embedding", special=False,
                   grad_of=(1,), torch_fn=_torch_emb,
                   bad=[Bad("index too large", _set(0, lambda i: i + 1000), "input|ind", exc=(IndexError, ValueError)),
                        Bad("index negative", _set(0, lambda i: i - 1000), "input|ind", exc=(IndexError, ValueError)),
                        Bad("float indices", _set(0, lambda i: i.astype(np.float32)), "input|ind"),
                        Bad("weight 1-D", _set(1, lambda w: w[0]), "weight"),
                        Bad("padding_idx out of range", _set(2, 10 ** 6), "padding_idx"),
                        Bad("padding_idx float", _set(2, 1.5), "padding_idx")]))
MODULES.append(ModuleSpec(
    "Embedding", lambda dt: nn.Embedding(10, 4, padding_idx=0).to(dt),
    lambda rng, dt, big=False: (rng.integers(0, 10, (64, 32) if big else (3, 5)),),
    bad_inputs=[("index 10 of 10", lambda i: i + 10, "input|ind"),
                ("float indices", lambda i: i.astype(np.float64), "input|ind")]))
BAD_CALLS += [BadCall("Embedding(num_embeddings=-1)", lambda: nn.Embedding(-1, 3), "num_embeddings"),
              BadCall("Embedding(padding_idx=5) of 3", lambda: nn.Embedding(3, 2, padding_idx=5),
                      "padding_idx")]


# ================================================================== loss
def _ce_draw(D, dt):
    n, c = D.side(0, 6, 16384), D.side(1, 6, 100)
    extra = D.dims(0, 1, side_lo=1, side_hi=3, big=())
    x = D.array((n, c) + extra, dt, D.choice([1.0, 4.0]))
    t = D.integers((n,) + extra, 0, c)
    if D.bool() and t.size:
        t.reshape(-1)[0] = -100
    w = D.uniform((c,), dt, 0.2, 2.0) if D.bool() else None
    return [x, t, w, -100, D.choice(["mean", "sum", "none"]), D.choice([0.0, 0.1, 0.5])], {}


def _torch_ce(torch, x, t, w, ignore_index, reduction, ls):
    w = None if w is None else w.detach()       # torch: nll_loss is not differentiable in weight
    return torch.nn.functional.cross_entropy(x, t, weight=w, ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=ls)


FUZZ.append(Op("cross_entropy", F.cross_entropy_fwd, F.cross_entropy_bwd, _ce_draw,
                   ("input", "target", "weight", None, None, None), ("cross_entropy", "cross_entropy_backward"),
                   infer=F.cross_entropy, huge=True, family="loss", rtol32=5e-4, atol32=5e-5,
                   torch_fn=_torch_ce, threads=(5, 6),   # "none"; weighted "sum", label smoothing
                   bad=[Bad("target out of range", _set(1, lambda t: t + 1000), "target",
                            exc=(IndexError, ValueError)),
                        Bad("target float", _set(1, lambda t: t.astype(np.float32)[..., None]), "target"),
                        Bad("target wrong shape", _set(1, lambda t: np.zeros(t.shape[:1] + (7, 7), np.int64)),
                            "target"),
                        Bad("weight wrong length", _set(2, lambda w: np.ones(99, np.float32)), "weight"),
                        Bad("reduction 'avg'", _set(4, "avg"), "reduction"),
                        Bad("label_smoothing 1.5", _set(5, 1.5), "label_smoothing"),
                        Bad("input 1-D", _set(0, lambda x: x.reshape(-1)), "input|target")]))


class _CELossSpec:
    @staticmethod
    def make(rng, dt, big=False):
        n = 256 if big else 4
        return rng.standard_normal((n, 5)).astype(dt), rng.integers(0, 5, n)


MODULES.append(ModuleSpec("CrossEntropyLoss", lambda dt: nn.CrossEntropyLoss(label_smoothing=0.1),
                          _CELossSpec.make, grads=lambda rng, out: (),
                          bad_inputs=[("int logits", lambda x: x.astype(np.int64), "input")]))
BAD_CALLS += [BadCall("CrossEntropyLoss(reduction='x')", lambda: nn.CrossEntropyLoss(reduction="x"),
                      "reduction")]


def _nll_draw(D, dt):
    n, c = D.side(0, 6, 16384), D.side(1, 6, 100)
    extra = D.dims(0, 1, side_lo=1, side_hi=3, big=())
    x = D.array((n, c) + extra, dt, 2.0)
    t = D.integers((n,) + extra, 0, c)
    if D.bool() and t.size:
        t.reshape(-1)[0] = -100
    w = D.uniform((c,), dt, 0.2, 2.0) if D.bool() else None
    return [x, t, w, -100, D.choice(["mean", "sum", "none"])], {}


def _torch_nll(torch, x, t, w, ignore_index, reduction):
    w = None if w is None else w.detach()
    return torch.nn.functional.nll_loss(x, t, weight=w, ignore_index=ignore_index,
                                        reduction=reduction)


FUZZ.append(Op("nll_loss", F.nll_loss_fwd, F.nll_loss_bwd, _nll_draw,
                   ("input", "target", "weight", None, None), ("nll_loss", "nll_loss_backward"),
                   torch_fn=_torch_nll,
                   infer=lambda x, t, w, ii, red: F.nll_loss(x, t, w, ignore_index=ii, reduction=red),
                   family="loss",
                   bad=[Bad("target out of range", _set(1, lambda t: t + 1000), "target",
                            exc=(IndexError, ValueError)),
                        Bad("target float", _set(1, lambda t: t.astype(np.float32)), "target"),
                        Bad("target wrong shape", _set(1, lambda t: np.zeros(t.shape[:1] + (7, 7), np.int64)),
                            "target"),
                        Bad("weight wrong length", _set(2, lambda w: np.ones(99, np.float32)), "weight"),
                        Bad("reduction 'batchmean'", _set(4, "batchmean"), "reduction")]))


def _ew_draw(x_kind="normal", y_kind="normal", weight=False, pos_weight=False, tail=None):
    """Draw for an elementwise loss F.<loss>_fwd(input, target, *tail(D, w, pw)): one shape of
    0-4 dims, values by kind ("prob" in [0, 1], incl. the ends; "logprob" <= 0)."""
    def values(D, kind, shape, dt):
        if kind == "prob":
            a = D.uniform(shape, dt, 0.0, 1.0)
            if a.size and D.bool():
                a.reshape(-1)[0] = D.choice([0.0, 1.0])
            return a
        if kind == "logprob":
            return np.asarray(np.log(D.uniform(shape, np.float64, 0.01, 1.0)), dt)
        return D.array(shape, dt, D.choice([1.0, 3.0]))

    def draw(D, dt):
        # big: 1M elements, so one call is long against its Python overhead (the GIL test)
        shape = D.dims(0, 4, big=(512, 2048))
        x, y = values(D, x_kind, shape, dt), values(D, y_kind, shape, dt)
        w = D.uniform(shape, dt, 0.2, 2.0) if weight and D.bool() else None
        pw = (D.uniform(shape[-1:], dt, 0.5, 3.0) if pos_weight and shape and D.bool() else None)
        return [x, y] + list(tail(D, w, pw)), {}
    return draw


_RED = ["mean", "sum", "none"]
_ew_bad = [Bad("target shape != input shape", _set(1, lambda y: np.zeros(y.shape + (2,), y.dtype)),
               "target"),
           Bad("target int", _set(1, lambda y: y.astype(np.int64)), "target")]


def _torch_ew(name, params):
    """torch.nn.functional.<name>(x, y, **params) for F.<name>_fwd(x, y, *params): the
    positional tail is given again by name; target and weights are not differentiated."""
    def fn(torch, x, y, *rest, **kw):
        import warnings
        kw = dict(zip(params, rest), **kw)
        kw = {k: (v.detach() if hasattr(v, "detach") else v) for k, v in kw.items()}
        with warnings.catch_warnings():   # kl_div's "mean" warns that it will change
            warnings.simplefilter("ignore", UserWarning)
            return getattr(torch.nn.functional, name)(x, y.detach(), **kw)
    return fn


def _ew_op(name, draw, names, params, bad=(), infer=None, **kw):
    """``infer`` maps the draw's positional arguments onto the torch-shaped F.<name>;
    ``params``: torch's names of the positional arguments after (input, target)."""
    fwd, bwd = getattr(F, name + "_fwd"), getattr(F, name + "_bwd")
    return Op(name, fwd, bwd, draw, ("input", "target") + tuple(names),
              ("elementwise_loss", "elementwise_loss_backward"), infer=infer, family="loss",
              bad=_ew_bad + list(bad), rtol32=5e-4, atol32=5e-5,
              torch_fn=_torch_ew(name, params), **kw)


FUZZ += [
    _ew_op("mse_loss", _ew_draw(weight=True, tail=lambda D, w, pw: (D.choice(_RED), w)),
           (None, "weight"), ("reduction", "weight"), threads=(5, 6),   # "none"; weighted "sum"
           infer=lambda x, y, r, w: F.mse_loss(x, y, reduction=r, weight=w),
           bad=[Bad("reduction 'avg'", _set(2, "avg"), "reduction"),
                                  Bad("weight of another shape", _set(3, np.ones(1, np.float32)),
                                      "weight")]),
    _ew_op("l1_loss", _ew_draw(tail=lambda D, w, pw: (D.choice(_RED),)), (None,), ("reduction",),
           infer=lambda x, y, r: F.l1_loss(x, y, reduction=r),
           bad=[Bad("reduction 'batchmean'", _set(2, "batchmean"), "reduction")]),
    _ew_op("smooth_l1_loss", _ew_draw(tail=lambda D, w, pw: (D.choice(_RED), D.choice([1.0, 0.5, 0.0]))),
           (None, None), ("reduction", "beta"),
           infer=lambda x, y, r, b: F.smooth_l1_loss(x, y, reduction=r, beta=b),
           bad=[Bad("beta < 0", _set(3, -1.0), "beta"),
                              Bad("beta str", _set(3, "1"), "beta")]),
    _ew_op("huber_loss", _ew_draw(weight=True, tail=lambda D, w, pw: (D.choice(_RED), D.choice([1.0, 0.3]), w)),
           (None, None, "weight"), ("reduction", "delta", "weight"),
           infer=F.huber_loss, bad=[Bad("delta 0", _set(3, 0.0), "delta"),
                                        Bad("weight not broadcastable",
                                            _set(4, np.ones((7, 9, 11), np.float32)), "weight")]),
    # probabilities: +-inf cannot be injected (outside [0, 1] is refused), so no special test
    _ew_op("binary_cross_entropy", _ew_draw("prob", "prob", weight=True,
                                            tail=lambda D, w, pw: (w, D.choice(_RED))),
           ("weight", None), ("weight", "reduction"), special=False,
           infer=lambda x, y, w, r: F.binary_cross_entropy(x, y, w, reduction=r),
           bad=[Bad("input > 1", _set(0, lambda x: x + 2.0), "input", exc=ValueError),
                Bad("input < 0", _set(0, lambda x: x - 2.0), "input", exc=ValueError)]),
    _ew_op("binary_cross_entropy_with_logits",
           _ew_draw(y_kind="prob", weight=True, pos_weight=True,
                    tail=lambda D, w, pw: (w, D.choice(_RED), pw)),
           ("weight", None, "pos_weight"), ("weight", "reduction", "pos_weight"), huge=True,
           infer=lambda x, y, w, r, pw: F.binary_cross_entropy_with_logits(x, y, w, reduction=r,
                                                                           pos_weight=pw),
           bad=[Bad("pos_weight not broadcastable", _set(4, np.ones(13, np.float32)), "pos_weight")]),
    _ew_op("kl_div", _ew_draw("logprob", "prob",
                              tail=lambda D, w, pw: (D.choice(_RED + ["batchmean"]), False)),
           (None, None), ("reduction", "log_target"),
           infer=lambda x, y, r, lt: F.kl_div(x, y, reduction=r, log_target=lt),
           bad=[Bad("log_target str", _set(3, "yes"), "log_target")]),
]
FUZZ.append(dataclasses.replace(
    _ew_op("kl_div", _ew_draw("logprob", "logprob",
                              tail=lambda D, w, pw: (D.choice(_RED + ["batchmean"]), True)),
           (None, None), ("reduction", "log_target"),
           infer=lambda x, y, r, lt: F.kl_div(x, y, reduction=r, log_target=lt)),
    name="kl_div_log_target"))


def _loss_make(x_kind="normal", y_kind="normal", classes=None):
    def make(rng, dt, big=False):
        shape = (16384, 5) if big else (4, 5)   # 5 classes: NLLLoss's weight, pos_weight
        if classes is not None:
            x = rng.standard_normal(shape).astype(dt)
            return x, rng.integers(0, shape[1], shape[0])
        gen = {"normal": lambda: rng.standard_normal(shape),
               "prob": lambda: rng.random(shape),
               "logprob": lambda: np.log(0.01 + rng.random(shape))}
        return gen[x_kind]().astype(dt), gen[y_kind]().astype(dt)
    return make


_loss_bad = [("int input", lambda x: x.astype(np.int64), "input")]
for _cls, _kw, _mk in [
        (nn.MSELoss, {}, _loss_make()), (nn.L1Loss, dict(reduction="sum"), _loss_make()),
        (nn.SmoothL1Loss, dict(beta=0.5), _loss_make()), (nn.HuberLoss, dict(delta=0.7), _loss_make()),
        (nn.BCELoss, {}, _loss_make("prob", "prob")),
        (nn.BCEWithLogitsLoss, dict(pos_weight=np.full(5, 2.0)), _loss_make(y_kind="prob")),
        (nn.KLDivLoss, dict(reduction="batchmean"), _loss_make("logprob", "prob")),
        (nn.NLLLoss, dict(weight=np.linspace(0.5, 2, 5)), _loss_make(classes=5))]:
    MODULES.append(ModuleSpec(_cls.__name__, (lambda c, k: lambda dt: c(**k))(_cls, _kw), _mk,
                              grads=lambda rng, out: (), bad_inputs=_loss_bad))
BAD_CALLS += [
    BadCall("MSELoss(reduction='avg')", lambda: nn.MSELoss(reduction="avg"), "reduction"),
    BadCall("HuberLoss(delta=0)", lambda: nn.HuberLoss(delta=0.0), "delta"),
    BadCall("SmoothL1Loss(beta=-1)", lambda: nn.SmoothL1Loss(beta=-1.0), "beta"),
    BadCall("KLDivLoss(log_target='no')", lambda: nn.KLDivLoss(log_target="no"), "log_target"),
    BadCall("NLLLoss(ignore_index=1.5)", lambda: nn.NLLLoss(ignore_index=1.5), "ignore_index"),
    BadCall("BCELoss(reduction='batchmean')", lambda: nn.BCELoss(reduction="batchmean"), "reduction"),
]


# ================================================================== stdnorm
def _std_draw(D, dt):
    d = D.side(2, 7, 768)
    x = D.array(D.dims(0, 2, big=(256,)) + (d,), dt, 2.0, 0.5)
    return [x, D.array((d,), dt, 0.3, 1.0) if D.bool() else None,
            D.array((d,), dt) if D.bool() else None, D.choice([1e-6, 1e-3])], {}


def _torch_sln(torch, x, a, b, eps):
    y = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps)
    if a is not None:
        y = a * y
    if b is not None:
        y = y + b
    return y


FUZZ.append(Op("std_layer_norm", F.std_layer_norm_fwd, F.std_layer_norm_bwd, _std_draw,
                   ("input", "a", "b", "eps"), ("std_layer_norm", "std_layer_norm_backward"),
                   grad_of=(0, 1, 2), torch_fn=_torch_sln,
                   infer=F.std_layer_norm, family="stdnorm", rtol32=5e-4, atol32=5e-4,
                   bad=[Bad("a wrong shape", _set(1, lambda a: np.ones(99, np.float32)), "a"),
                        Bad("eps < 0", _set(3, -1.0), "eps")]))
MODULES.append(ModuleSpec("StdLayerNorm", lambda dt: nn.StdLayerNorm(8).to(dt),
                          lambda rng, dt, big=False: (rng.standard_normal((64 if big else 3, 8)).astype(dt),),
                          bad_inputs=[("wrong features", lambda x: x[..., :-1], "input|features|shape|a")]))


# ================================================================== batchnorm
def _bn_draw(D, dt):
    train = D.bool()
    n = D.side(2 if train else 0, 5, 64)
    c = D.side(1, 4, 32)
    spatial = D.dims(0, 2, side_lo=1, side_hi=3, big=(16, 16))
    if D.big and D.bool():   # large inputs: also the (N, C) layout, many rows
        n, spatial = 16384, ()
    x = D.array((n, c) + spatial, dt, 2.0, 0.5)
    stats = D.bool() or not train
    rm = D.array((c,), dt, 0.1) if stats else None
    rv = D.uniform((c,), dt, 0.5, 2.0) if stats else None
    w = D.array((c,), dt, 0.3, 1.0) if D.bool() else None
    b = D.array((c,), dt) if D.bool() else None
    return [x, rm, rv, w, b, train, D.choice([0.1, 0.5]), D.choice([1e-5, 1e-3])], {}


def _torch_bn(torch, x, rm, rv, w, b, training, momentum, eps):
    rm = None if rm is None else rm.detach()
    rv = None if rv is None else rv.detach()
    return torch.nn.functional.batch_norm(x, rm, rv, w, b, training, momentum, eps)


FUZZ.append(Op("batch_norm", F.batch_norm_fwd, F.batch_norm_bwd, _bn_draw,
                   ("input", "running_mean", "running_var", "weight", "bias", None, "momentum", "eps"),
                   ("batch_norm", "batch_norm_backward"), infer=F.batch_norm, family="batchnorm",
                   grad_of=(0, 3, 4), torch_fn=_torch_bn,
                   threads=(5, 8, 11),   # (N, C) training; (N, C, H, W) training, eval
                   rtol32=5e-4, atol32=5e-4, mutable=(1, 2),
                   bad=[Bad("running_mean wrong length", _set(1, lambda a: np.zeros(9, np.float32)),
                            "running_mean"),
                        Bad("weight wrong length", _set(3, lambda a: np.ones(9, np.float32)), "weight"),
                        Bad("1-D input", _set(0, lambda x: x.reshape(-1)), "input"),
                        Bad("eps = 0", _set(7, 0.0), "eps"),
                        Bad("read-only running_mean in training",
                            lambda a, k: (a.__setitem__(1, _readonly(np.zeros(a[0].shape[1], a[0].dtype))),
                                          a.__setitem__(2, np.ones(a[0].shape[1], a[0].dtype)),
                                          a.__setitem__(5, True)) and None, "running_mean")]))
MODULES.append(ModuleSpec("BatchNorm1d", lambda dt: nn.BatchNorm1d(3).to(dt),
                          lambda rng, dt, big=False: (rng.standard_normal((64 if big else 4, 3)).astype(dt),),
                          bad_inputs=[("wrong channels", lambda x: x[:, :2], "input|channel|features")]))
MODULES.append(ModuleSpec("BatchNorm2d", lambda dt: nn.BatchNorm2d(2).to(dt),
                          lambda rng, dt, big=False: (rng.standard_normal((8 if big else 2, 2, 6, 5)).astype(dt),),
                          bad_inputs=[("3-D input", lambda x: x[0], "input")]))
BAD_CALLS += [BadCall("BatchNorm1d(num_features=0)", lambda: nn.BatchNorm1d(0), "num_features"),
              BadCall("BatchNorm2d(eps=-1)", lambda: nn.BatchNorm2d(3, eps=-1.0), "eps")]


# ================================================================== conv / pool
def _conv_draw(D, dt):
    groups = D.choice([1, 2]) if not D.big else 1
    cg, og = D.side(1, 3, 32), D.side(1, 3, 32)
    kh, kw = D.side(1, 3, 3), D.side(1, 3, 3)
    dil, stride = D.choice([1, 2]), D.choice([1, 2])
    pad = D.choice([0, 1, "valid"] + (["same"] if stride == 1 else []))
    p = pad if isinstance(pad, int) else 0
    h = max(dil * (kh - 1) + 1 - 2 * p, 1) + D.side(0, 3, 30)
    w = max(dil * (kw - 1) + 1 - 2 * p, 1) + D.side(0, 3, 30)
    x = D.array((D.side(0, 2, 8), cg * groups, h, w), dt)
    wt = D.array((og * groups, cg, kh, kw), dt, 0.5)
    b = D.array((og * groups,), dt) if D.bool() else None
    return [x, wt, b, stride, pad, dil, groups], {}


def _torch_conv(name):
    def fn(torch, *args):
        import warnings
        with warnings.catch_warnings():
            # torch notes that padding='same' with an even kernel pads a copy of the input
            warnings.simplefilter("ignore", UserWarning)
            return getattr(torch.nn.functional, name)(*args)
    return fn


FUZZ.append(Op("conv2d", F.conv2d_fwd, F.conv2d_bwd, _conv_draw,
                   ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
                   ("conv2d", "conv2d_backward"), infer=F.conv2d, family="conv",
                   grad_of=(0, 1, 2), torch_fn=_torch_conv("conv2d"),
                   rtol32=5e-4, atol32=5e-5, examples=30,
                   bad=[Bad("weight 3-D", _set(1, lambda w: w[0]), "weight"),
                        Bad("channels mismatch", _set(1, lambda w: np.concatenate([w, w], 1)),
                            "channel|weight|input|groups"),
                        Bad("stride 0", _set(3, 0), "stride"),
                        Bad("padding -1", _set(4, -1), "padding"),
                        Bad("padding 'full'", _set(4, "full"), "padding"),
                        Bad("dilation 0", _set(5, 0), "dilation"),
                        Bad("groups 0", _set(6, 0), "groups"),
                        Bad("3-D input", _set(0, lambda x: x[0] if x.shape[0] else x[:, 0]), "input"),
                        Bad("bias wrong length", _set(2, lambda b: np.ones(99, np.float32)), "bias")]))


def _pool_hw(D, k, d, p):
    return max(d * (k - 1) + 1 - 2 * p, 1) + D.side(0, 3, 60)


def _maxpool_draw(D, dt):
    k, d = D.side(1, 3, 3), D.choice([1, 2])
    p = D.int(0, k // 2)
    x = D.array((D.side(0, 2, 8), D.side(1, 3, 16), _pool_hw(D, k, d, p), _pool_hw(D, k, d, p)), dt)
    return [x, k, D.choice([None, 1, 2, 3]), p, d, D.bool()], {}


def _avgpool_draw(D, dt):
    k = D.side(1, 3, 3)
    p = D.int(0, k // 2)
    x = D.array((D.side(0, 2, 8), D.side(1, 3, 16), _pool_hw(D, k, 1, p), _pool_hw(D, k, 1, p)), dt)
    return [x, k, D.choice([None, 1, 2, 3]), p, D.bool(), D.bool(), D.choice([None, 3])], {}


_pool_bad = [Bad("kernel_size 0", _set(1, 0), "kernel_size"),
             Bad("stride 0", _set(2, 0), "stride"),
             Bad("padding > kernel/2", _set(3, 5), "padding|pad"),
             Bad("2-D input", _set(0, lambda x: x[0, 0]), "input")]
FUZZ.append(Op("max_pool2d", F.max_pool2d_fwd, F.max_pool2d_bwd, _maxpool_draw,
                   ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                   ("max_pool2d", "max_pool2d_backward"), infer=F.max_pool2d, family="pool",
                   torch_fn=_tf("max_pool2d"),
                   bad=_pool_bad + [Bad("dilation 0", _set(4, 0), "dilation")]))
FUZZ.append(Op("avg_pool2d", F.avg_pool2d_fwd, F.avg_pool2d_bwd, _avgpool_draw,
                   ("input", "kernel_size", "stride", "padding", None, None, "divisor_override"),
                   ("avg_pool2d", "avg_pool2d_backward"), infer=F.avg_pool2d, family="pool",
                   torch_fn=_tf("avg_pool2d"), threads=(5, 6),   # count_include_pad True; False
                   bad=_pool_bad + [Bad("divisor_override 0", _set(6, 0), "divisor_override")]))


def _img(c):
    return lambda rng, dt, big=False: (rng.standard_normal((4 if big else 1, c, 16 if big else 6,
                                                            16 if big else 5)).astype(dt),)


MODULES += [
    ModuleSpec("Conv2d", lambda dt: nn.Conv2d(2, 3, 3, padding=1).to(dt), _img(2),
               bad_inputs=[("wrong channels", lambda x: x[:, :1], "channel|input|weight")]),
    ModuleSpec("DepthwiseSeparableConv2d", lambda dt: nn.DepthwiseSeparableConv2d(2, 3, 3).to(dt),
               _img(2)),
    ModuleSpec("MaxPool2d", lambda dt: nn.MaxPool2d(2), _img(2),
               bad_inputs=[("2-D input", lambda x: x[0, 0], "input")]),
    ModuleSpec("AvgPool2d", lambda dt: nn.AvgPool2d(2, ceil_mode=True), _img(2)),
]
BAD_CALLS += [BadCall("Conv2d(groups=3) of 2 channels", lambda: nn.Conv2d(2, 3, 3, groups=3),
                      "groups|channels"),
              BadCall("Conv2d(kernel_size=0)", lambda: nn.Conv2d(2, 3, 0), "kernel_size"),
              BadCall("MaxPool2d(kernel_size=-1)", lambda: nn.MaxPool2d(-1), "kernel_size")]


# ================================================================== conv1d / transposed conv / 1-d and adaptive pools
def _conv1d_draw(D, dt):
    groups = D.choice([1, 2]) if not D.big else 1
    cg, og = D.side(1, 3, 32), D.side(1, 3, 32)
    k, dil, stride = D.side(1, 3, 3), D.choice([1, 2]), D.choice([1, 2])
    pad = D.choice([0, 1, "valid"] + (["same"] if stride == 1 else []))
    p = pad if isinstance(pad, int) else 0
    L = max(dil * (k - 1) + 1 - 2 * p, 1) + D.side(0, 3, 900)
    lead = (D.side(0, 2, 8),) if D.bool() or D.big else ()
    x = D.array(lead + (cg * groups, L), dt)
    wt = D.array((og * groups, cg, k), dt, 0.5)
    b = D.array((og * groups,), dt) if D.bool() else None
    return [x, wt, b, stride, pad, dil, groups], {}


FUZZ.append(Op("conv1d", F.conv1d_fwd, F.conv1d_bwd, _conv1d_draw,
                   ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
                   ("conv2d", "conv2d_backward"), infer=F.conv1d, family="conv",
                   grad_of=(0, 1, 2), torch_fn=_torch_conv("conv1d"),
                   rtol32=5e-4, atol32=5e-5, examples=30,
                   bad=[Bad("weight 2-D", _set(1, lambda w: w[0]), "weight"),
                        Bad("4-D input", _set(0, lambda x: x[None, None]), "input"),
                        Bad("channels mismatch", _set(1, lambda w: np.concatenate([w, w], 1)),
                            "channel|weight|input|groups"),
                        Bad("stride 0", _set(3, 0), "stride"),
                        Bad("stride pair", _set(3, (1, 1)), "stride"),
                        Bad("padding -1", _set(4, -1), "padding"),
                        Bad("dilation 0", _set(5, 0), "dilation"),
                        Bad("groups 0", _set(6, 0), "groups"),
                        Bad("bias wrong length", _set(2, lambda b: np.ones(99, np.float32)), "bias")]))


def _tconv_draw(D, dt):
    groups = D.choice([1, 2]) if not D.big else 1
    cg, og = D.side(1, 3, 32), D.side(1, 3, 16)
    kh, kw = D.side(1, 4, 4), D.side(1, 4, 4)
    stride, dil = D.choice([1, 2]), D.choice([1, 2])
    h, w = D.side(1, 4, 28), D.side(1, 4, 28)
    pad = D.int(0, 1)
    # torch: output_padding < stride or < dilation; only < stride here (cuda refuses more)
    opad = D.int(0, stride - 1)
    if min(transpose_output_size(h, kh, stride, pad, opad, dil),
           transpose_output_size(w, kw, stride, pad, opad, dil)) < 1:
        pad = 0
    x = D.array((D.side(0, 2, 16), cg * groups, h, w), dt)
    wt = D.array((cg * groups, og, kh, kw), dt, 0.5)
    b = D.array((og * groups,), dt) if D.bool() else None
    return [x, wt, b, stride, pad, opad, groups, dil], {}


from fastnn.functional.conv import transpose_output_size  # noqa: E402

FUZZ.append(Op("conv_transpose2d", F.conv_transpose2d_fwd, F.conv_transpose2d_bwd, _tconv_draw,
                   ("input", "weight", "bias", "stride", "padding", "output_padding", "groups",
                    "dilation"),
                   ("conv_transpose2d", "conv_transpose2d_backward"), infer=F.conv_transpose2d,
                   grad_of=(0, 1, 2), torch_fn=_torch_conv("conv_transpose2d"),
                   family="conv", rtol32=5e-4, atol32=5e-5, examples=30,
                   bad=[Bad("weight 3-D", _set(1, lambda w: w[0]), "weight"),
                        Bad("in_channels mismatch", _set(1, lambda w: np.concatenate([w, w], 0)),
                            "channel|weight|input"),
                        Bad("3-D input", _set(0, lambda x: x[0] if x.shape[0] else x[:, 0]), "input"),
                        Bad("stride 0", _set(3, 0), "stride"),
                        Bad("padding 'same'", _set(4, "same"), "padding"),
                        Bad("output_padding >= stride and dilation",
                            lambda a, k: a.__setitem__(5, 2) or a.__setitem__(3, 1)
                            or a.__setitem__(7, 1), "output_padding"),
                        Bad("groups 0", _set(6, 0), "groups"),
                        Bad("groups not dividing in_channels", _set(6, 7), "groups"),
                        Bad("bias wrong length", _set(2, lambda b: np.ones(99, np.float32)), "bias")]))


def _pool1d_x(D, dt, k, d, p):
    L = max(d * (k - 1) + 1 - 2 * p, 1) + D.side(0, 3, 2000)
    lead = (D.side(0, 2, 16),) if D.bool() or D.big else ()
    return D.array(lead + (D.side(1, 3, 32), L), dt)


def _maxpool1d_draw(D, dt):
    k, d = D.side(1, 3, 3), D.choice([1, 2])
    p = D.int(0, k // 2)
    return [_pool1d_x(D, dt, k, d, p), k, D.choice([None, 1, 2, 3]), p, d, D.bool()], {}


def _avgpool1d_draw(D, dt):
    k = D.side(1, 3, 3)
    p = D.int(0, k // 2)
    return [_pool1d_x(D, dt, k, 1, p), k, D.choice([None, 1, 2, 3]), p, D.bool(), D.bool()], {}


_pool1d_bad = [Bad("kernel_size 0", _set(1, 0), "kernel_size"),
               Bad("kernel_size pair", _set(1, (2, 2)), "kernel_size"),
               Bad("stride 0", _set(2, 0), "stride"),
               Bad("padding > kernel/2", _set(3, 5), "padding|pad"),
               Bad("4-D input", _set(0, lambda x: x[None, None] if x.ndim == 2 else x[None]), "input")]
FUZZ.append(Op("max_pool1d", F.max_pool1d_fwd, F.max_pool1d_bwd, _maxpool1d_draw,
                   ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                   ("max_pool2d", "max_pool2d_backward"), infer=F.max_pool1d, family="pool",
                   torch_fn=_tf("max_pool1d"),
                   bad=_pool1d_bad + [Bad("dilation 0", _set(4, 0), "dilation")]))
FUZZ.append(Op("avg_pool1d", F.avg_pool1d_fwd, F.avg_pool1d_bwd, _avgpool1d_draw,
                   ("input", "kernel_size", "stride", "padding", None, None),
                   ("avg_pool2d", "avg_pool2d_backward"), infer=F.avg_pool1d, family="pool",
                   torch_fn=_tf("avg_pool1d"),
                   bad=_pool1d_bad))


def _adaptive_draw(D, dt):
    h, w = D.side(1, 7, 14), D.side(1, 7, 14)
    lead = (D.side(0, 2, 32),) if D.bool() or D.big else ()
    x = D.array(lead + (D.side(1, 3, 64), h, w), dt)
    size = D.choice(["int", "pair", "none"])
    if size == "int":
        out = D.int(1, 4)
    elif size == "pair":
        out = (D.int(0, h + 2), D.int(1, w + 2))
    else:
        out = (None, D.int(1, 3)) if D.bool() else (D.int(1, 3), None)
    return [x, out], {}


_adaptive_bad = [Bad("output_size negative", _set(1, (-1, 2)), "output_size"),
                 Bad("output_size 3 entries", _set(1, (1, 2, 3)), "output_size"),
                 Bad("output_size float", _set(1, 2.5), "output_size"),
                 Bad("2-D input", _set(0, lambda x: x.reshape(x.shape[-2], -1)), "input"),
                 Bad("empty spatial input", _set(0, lambda x: x[..., :0]), "input")]
FUZZ.append(Op("adaptive_avg_pool2d", F.adaptive_avg_pool2d_fwd, F.adaptive_avg_pool2d_bwd,
                   _adaptive_draw, ("input", "output_size"),
                   ("adaptive_avg_pool2d", "adaptive_avg_pool2d_backward"),
                   infer=F.adaptive_avg_pool2d, family="pool", bad=_adaptive_bad,
                   torch_fn=_tf("adaptive_avg_pool2d")))
FUZZ.append(Op("adaptive_max_pool2d", F.adaptive_max_pool2d_fwd, F.adaptive_max_pool2d_bwd,
                   _adaptive_draw, ("input", "output_size"),
                   ("adaptive_max_pool2d", "adaptive_max_pool2d_backward"),
                   infer=F.adaptive_max_pool2d, family="pool", bad=_adaptive_bad,
                   torch_fn=_tf("adaptive_max_pool2d")))


def _seq1d(c):
    return lambda rng, dt, big=False: (rng.standard_normal((4 if big else 2, c, 64 if big else 9)).astype(dt),)


MODULES += [
    ModuleSpec("Conv1d", lambda dt: nn.Conv1d(2, 3, 3, padding="same").to(dt), _seq1d(2),
               bad_inputs=[("wrong channels", lambda x: x[:, :1], "channel|input|weight")]),
    ModuleSpec("ConvTranspose2d", lambda dt: nn.ConvTranspose2d(2, 3, 4, stride=2, padding=1).to(dt),
               _img(2), bad_inputs=[("wrong channels", lambda x: x[:, :1], "channel|input|weight")]),
    ModuleSpec("MaxPool1d", lambda dt: nn.MaxPool1d(3, stride=2, padding=1), _seq1d(2),
               bad_inputs=[("4-D input", lambda x: x[None], "input")]),
    ModuleSpec("AvgPool1d", lambda dt: nn.AvgPool1d(2, ceil_mode=True), _seq1d(2)),
    ModuleSpec("AdaptiveAvgPool2d", lambda dt: nn.AdaptiveAvgPool2d((2, None)), _img(2),
               bad_inputs=[("2-D input", lambda x: x[0, 0], "input")]),
    ModuleSpec("AdaptiveMaxPool2d", lambda dt: nn.AdaptiveMaxPool2d(3), _img(2),
               bad_inputs=[("empty plane", lambda x: x[..., :0], "input")]),
]
BAD_CALLS += [
    BadCall("Conv1d(groups=2) of 3 channels", lambda: nn.Conv1d(3, 4, 3, groups=2), "groups|channels"),
    BadCall("Conv1d(kernel_size=(2, 2))", lambda: nn.Conv1d(2, 3, (2, 2)), "kernel_size"),
    BadCall("Conv1d(padding='same', stride=2)", lambda: nn.Conv1d(2, 3, 3, 2, "same"), "same|stride"),
    BadCall("ConvTranspose2d(output_padding=2, stride=2)",
            lambda: nn.ConvTranspose2d(2, 3, 3, stride=2, output_padding=2), "output_padding"),
    BadCall("ConvTranspose2d(groups=2) of 3 channels", lambda: nn.ConvTranspose2d(3, 4, 3, groups=2),
            "groups|channels"),
    BadCall("ConvTranspose2d(padding='same')", lambda: nn.ConvTranspose2d(2, 3, 3, padding="same"),
            "padding"),
    BadCall("AdaptiveAvgPool2d(output_size=-1)", lambda: nn.AdaptiveAvgPool2d(-1), "output_size"),
    BadCall("AdaptiveMaxPool2d(output_size='a')", lambda: nn.AdaptiveMaxPool2d("a"), "output_size"),
    BadCall("MaxPool1d(kernel_size=0)", lambda: nn.MaxPool1d(0), "kernel_size"),
    BadCall("AvgPool1d(padding=3) with kernel 2", lambda: nn.AvgPool1d(2, padding=3), "padding"),
    BadCall("ConvTranspose2d forward(output_size) unreachable",
            lambda: nn.ConvTranspose2d(2, 3, 3, stride=2)(np.zeros((1, 2, 4, 4), np.float32),
                                                          output_size=(20, 20)), "output_size"),
]


# ================================================================== groupnorm / rmsnorm
def _gn_draw(D, dt):
    G, cg = D.side(1, 3, 32), D.side(1, 3, 2)
    spatial = D.dims(0, 2, side_lo=0, side_hi=5, big=(56, 56))
    x = D.array((D.side(0, 3, 8), G * cg) + spatial, dt, D.choice([0.5, 3.0]), D.float(-1, 1))
    affine = D.choice(["both", "weight", "bias", "none"])
    w = D.array((G * cg,), dt, 0.3, 1.0) if affine in ("both", "weight") else None
    b = D.array((G * cg,), dt) if affine in ("both", "bias") else None
    return [x, G, w, b, D.choice([1e-5, 1e-3, 0.1])], {}


def _torch_gn(torch, x, G, w, b, eps):
    return torch.nn.functional.group_norm(x, G, w, b, eps)


FUZZ.append(Op(
    "group_norm", F.group_norm_fwd, F.group_norm_bwd, _gn_draw,
    ("input", None, "weight", "bias", None), ("group_norm", "group_norm_backward"),
    infer=F.group_norm, family="groupnorm", huge=True, rtol32=5e-4, atol32=5e-4,
    grad_of=(0, 2, 3), torch_fn=_torch_gn,
    bad=[Bad("num_groups not dividing channels", _set(1, lambda g: g * 2 + 5), "num_groups"),
         Bad("num_groups 0", _set(1, 0), "num_groups"),
         Bad("num_groups float", _set(1, 2.0), "num_groups"),
         Bad("1-D input", _set(0, lambda x: x.reshape(-1)), "input"),
         Bad("weight wrong shape", _set(2, lambda w: np.ones(99, np.float32)), "weight"),
         Bad("bias 2-D", _set(3, lambda b: np.ones((1, 2), np.float32)), "bias"),
         Bad("eps = 0", _set(4, 0.0), "eps"),
         Bad("eps nan", _set(4, float("nan")), "eps")]))


def _rms_draw(D, dt):
    ns = D.dims(1, 2, side_lo=0, side_hi=7, big=(768,))
    lead = D.dims(0, 2, big=(2, 160))
    x = D.array(lead + ns, dt, D.choice([0.5, 3.0]), D.float(-1, 1))
    w = D.array(ns, dt, 0.3, 1.0) if D.bool() else None
    return [x, ns, w, D.choice([None, 1e-5, 1e-3, 0.1])], {}


def _torch_rms(torch, x, ns, w, eps):
    return torch.nn.functional.rms_norm(x, ns, w, eps)


FUZZ.append(Op(
    "rms_norm", F.rms_norm_fwd, F.rms_norm_bwd, _rms_draw,
    ("input", None, "weight", None), ("rms_norm", "rms_norm_backward"),
    infer=F.rms_norm, family="rmsnorm", huge=True, rtol32=5e-4, atol32=5e-4,
    grad_of=(0, 2), torch_fn=_torch_rms,
    bad=[Bad("normalized_shape mismatch", _set(1, lambda ns: tuple(ns[:-1]) + (ns[-1] + 1,)),
             "normalized_shape"),
         Bad("normalized_shape empty", _set(1, ()), "normalized_shape"),
         Bad("weight wrong shape", _set(2, lambda w: np.ones(99, np.float32)), "weight"),
         Bad("eps = 0", _set(3, 0.0), "eps"),
         Bad("eps < 0", _set(3, -1e-5), "eps"),
         Bad("eps str", _set(3, "1e-5"), "eps")]))

MODULES += [
    ModuleSpec("GroupNorm", lambda dt: nn.GroupNorm(2, 4).to(dt),
               lambda rng, dt, big=False: (rng.standard_normal((8 if big else 2, 4, 6, 5)).astype(dt),),
               bad_inputs=[("wrong channels", lambda x: x[:, :3], "input|channel")]),
    ModuleSpec("RMSNorm", lambda dt: nn.RMSNorm(8).to(dt),
               lambda rng, dt, big=False: (rng.standard_normal((64, 8) if big else (3, 8)).astype(dt),),
               bad_inputs=[("wrong last dim", lambda x: x[..., :-1], "normalized_shape")]),
]
BAD_CALLS += [
    BadCall("GroupNorm(3, 4)", lambda: nn.GroupNorm(3, 4), "num_groups|num_channels|divisible"),
    BadCall("GroupNorm(0, 4)", lambda: nn.GroupNorm(0, 4), "num_groups"),
    BadCall("GroupNorm(eps=0)", lambda: nn.GroupNorm(2, 4, eps=0.0), "eps"),
    BadCall("RMSNorm(eps=-1)", lambda: nn.RMSNorm(4, eps=-1.0), "eps"),
    BadCall("RMSNorm(normalized_shape='a')", lambda: nn.RMSNorm("a"), "normalized_shape"),
]


# ================================================================== attention
def _sdpa_draw(D, dt):
    lead = D.dims(0, 2, side_hi=3, big=(2, 4))
    L, S = D.side(0, 5, 128), D.side(1, 5, 128)
    E, Ev = D.side(1, 4, 32), D.side(1, 4, 32)
    q, k, v = D.array(lead + (L, E), dt), D.array(lead + (S, E), dt), D.array(lead + (S, Ev), dt)
    causal = D.bool()
    mask = None
    if not causal:
        kind = D.choice([None, "bool", "float"])
        if kind == "bool":
            mask = D.integers((L, S), 0, 2).astype(bool)
            mask[:, 0] = True  # every query may attend somewhere
        elif kind == "float":
            mask = D.array((L, S), dt)
    p = 0.2 if D.big else 0.0   # the thread tests: dropout's Philox offsets per thread, too
    return [q, k, v, mask, p, causal, D.choice([None, 0.5])], {}


def _torch_sdpa(torch, q, k, v, m, p, causal, scale):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=p,
                                                            is_causal=causal, scale=scale)


FUZZ.append(Op("scaled_dot_product_attention", F.scaled_dot_product_attention_fwd,
                   F.scaled_dot_product_attention_bwd, _sdpa_draw,
                   ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"),
                   ("scaled_dot_product_attention", "scaled_dot_product_attention_backward"),
                   infer=F.scaled_dot_product_attention, family="attention", random=True,
                   grad_of=(0, 1, 2), torch_fn=_torch_sdpa,
                   rtol32=5e-4, atol32=5e-5, examples=30,
                   bad=[Bad("key wrong E", _set(1, lambda k: np.concatenate([k, k], -1)), "key|query"),
                        Bad("value wrong S", _set(2, lambda v: np.concatenate([v, v], -2)), "value|key"),
                        Bad("mask wrong shape", _set(3, lambda m: np.ones((9, 9), bool)), "mask"),
                        Bad("dropout_p 1.5", _set(4, 1.5), "dropout_p"),
                        Bad("1-D query", _set(0, lambda q: q.reshape(-1)), "query")]))


def _seq(rng, dt, big=False):
    x = rng.standard_normal((16 if big else 3, 2, 8)).astype(dt)
    return (x, x, x)


MODULES += [
    ModuleSpec("MultiheadAttention", lambda dt: nn.MultiheadAttention(8, 2).to(dt), _seq,
               grads=lambda rng, out: (rng.standard_normal(out[0].shape).astype(out[0].dtype),),
               bad_inputs=[("wrong embed_dim", lambda q: q[..., :-1], "query|embed")]),
    ModuleSpec("CausalSelfAttention", lambda dt: nn.CausalSelfAttention(8, 2).to(dt),
               lambda rng, dt, big=False: (rng.standard_normal((2, 16 if big else 3, 8)).astype(dt),)),
    ModuleSpec("TransformerBlock", lambda dt: nn.TransformerBlock(8, 2).to(dt),
               lambda rng, dt, big=False: (rng.standard_normal((2, 16 if big else 3, 8)).astype(dt),)),
]
BAD_CALLS += [BadCall("MultiheadAttention(8, num_heads=3)", lambda: nn.MultiheadAttention(8, 3),
                      "num_heads|embed_dim")]


# ================================================================== rnn cells
def _cell(kind):
    g = {"rnn": 1, "gru": 3, "lstm": 4}[kind]

    def draw(D, dt):
        n, i, h = D.side(0, 4, 256), D.side(1, 5, 128), D.side(1, 5, 128)
        x = D.array((n, i), dt)
        hx = D.array((n, h), dt)
        if kind == "lstm":
            hx = (hx, D.array((n, h), dt))
        bias = D.bool()
        args = [x, hx, D.array((g * h, i), dt, 0.4), D.array((g * h, h), dt, 0.4),
                D.array((g * h,), dt) if bias else None, D.array((g * h,), dt) if bias else None]
        if kind == "rnn":
            args.append(D.choice(["tanh", "relu"]))
        return args, {}
    fwd, bwd = getattr(F, kind + "_cell_fwd"), getattr(F, kind + "_cell_bwd")
    if kind == "lstm":
        bwd = (lambda b: lambda ctx, d: b(ctx, *d))(bwd)
    names = ("input", "hx" if kind != "lstm" else None, "weight_ih|w_ih", "weight_hh|w_hh",
             "bias_ih|b_ih", "bias_hh|b_hh") + ((None,) if kind == "rnn" else ())
    bad = [Bad("w_ih wrong shape", _set(2, lambda w: w[:-1]), "w_ih|weight_ih"),
           Bad("input 1-D", _set(0, lambda x: x.reshape(-1)), "input")]
    if kind == "rnn":
        bad.append(Bad("nonlinearity 'sigmoid'", _set(6, "sigmoid"), "nonlinearity"))
    return Op(kind + "_cell", fwd, bwd, draw, names, (kind + "_cell", kind + "_cell_backward"),
                  infer=getattr(F, kind + "_cell"), family="rnn", rtol32=5e-4,
                  atol32=5e-5, bad=bad)


FUZZ += [_cell("rnn"), _cell("gru"), _cell("lstm")]


def _rnn_grads(rng, out):
    return (rng.standard_normal(out[0].shape).astype(out[0].dtype),)


for _cls in (nn.RNN, nn.GRU, nn.LSTM):
    MODULES.append(ModuleSpec(
        _cls.__name__, (lambda c: lambda dt: c(4, 5, num_layers=2, bidirectional=True).to(dt))(_cls),
        lambda rng, dt, big=False: (rng.standard_normal((12 if big else 3, 2, 4)).astype(dt),),
        grads=_rnn_grads, bad_inputs=[("wrong input_size", lambda x: x[..., :-1], "input")]))
BAD_CALLS += [BadCall("RNN(nonlinearity='sigmoid')", lambda: nn.RNN(3, 4, nonlinearity="sigmoid"),
                      "nonlinearity"),
              BadCall("LSTM(hidden_size=0)", lambda: nn.LSTM(3, 0), "hidden_size"),
              BadCall("GRU(num_layers=0)", lambda: nn.GRU(3, 4, num_layers=0), "num_layers")]


# ================================================================== more modules
def _x3(shape, big_shape):
    return lambda rng, dt, big=False: (rng.standard_normal(big_shape if big else shape).astype(dt),)


def _d_first(rng, out):
    o = out[0] if isinstance(out, tuple) else out
    return (rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype),)


MODULES += [
    ModuleSpec("Conv1D", lambda dt: nn.Conv1D(6, 4).to(dt), _x3((3, 4), (64, 4)),
               bad_inputs=[("wrong nx", lambda x: x[..., :-1], "input|nx|in_features")]),
    ModuleSpec("FeedForward", lambda dt: nn.FeedForward(8, 16).to(dt), _x3((2, 3, 8), (4, 16, 8))),
    ModuleSpec("FeedForwardReLU", lambda dt: nn.FeedForward(8, 16, activation="relu").to(dt),
               _x3((2, 3, 8), (4, 16, 8))),
    ModuleSpec("RNNCell", lambda dt: nn.RNNCell(4, 5).to(dt), _x3((3, 4), (64, 4)),
               bad_inputs=[("wrong input_size", lambda x: x[:, :-1], "input")]),
    ModuleSpec("GRUCell", lambda dt: nn.GRUCell(4, 5).to(dt), _x3((3, 4), (64, 4))),
    ModuleSpec("LSTMCell", lambda dt: nn.LSTMCell(4, 5).to(dt), _x3((3, 4), (64, 4)),
               grads=lambda rng, out: tuple(rng.standard_normal(o.shape).astype(o.dtype) for o in out)),
    ModuleSpec("PositionalEmbedding", lambda dt: nn.PositionalEmbedding(16, 4).to(dt),
               lambda rng, dt, big=False: (rng.integers(0, 50, (4, 16) if big else (2, 3)),),
               bad_inputs=[("longer than max_len", lambda i: np.zeros((2, 99), np.int64), "max_len|input|len")]),
    ModuleSpec("SinusoidalPositionalEncoding", lambda dt: nn.SinusoidalPositionalEncoding(8, 32).to(dt),
               _x3((2, 3, 8), (4, 32, 8)),
               bad_inputs=[("wrong d_model", lambda x: x[..., :-1], "d_model|input")]),
    ModuleSpec("Residual", lambda dt: nn.Residual(nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 6))).to(dt),
               _x3((3, 6), (64, 6))),
    ModuleSpec("Sequential", lambda dt: nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.Linear(5, 2)).to(dt),
               _x3((3, 6), (64, 6))),
    ModuleSpec("TransformerEncoderLayer",
               lambda dt: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0).to(dt), _x3((3, 2, 8), (16, 2, 8))),
    ModuleSpec("TransformerDecoderLayer",
               lambda dt: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=True).to(dt),
               lambda rng, dt, big=False: tuple(rng.standard_normal((16 if big else 3, 2, 8)).astype(dt)
                                                for _ in range(2))),
]
MODULES += [
    ModuleSpec("Flatten", lambda dt: nn.Flatten(), _x3((2, 3, 4), (64, 8, 50)),
               bad_inputs=[("0-d input", lambda x: x.reshape(-1)[0].copy(), "dim")]),
    ModuleSpec("Unflatten", lambda dt: nn.Unflatten(1, (2, -1)), _x3((3, 6), (64, 400)),
               bad_inputs=[("odd dim", lambda x: x[:, :-1], "unflattened_size")]),
    ModuleSpec("TransformerEncoder",
               lambda dt: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2,
                                                norm=nn.LayerNorm(8)).to(dt),
               _x3((3, 2, 8), (16, 2, 8)),
               bad_inputs=[("wrong d_model", lambda x: x[..., :-1], "query|embed")]),
    ModuleSpec("TransformerDecoder",
               lambda dt: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2).to(dt),
               lambda rng, dt, big=False: tuple(rng.standard_normal((16 if big else 3, 2, 8)).astype(dt)
                                                for _ in range(2)),
               grads=_d_first),
]
BAD_CALLS += [
    BadCall("Flatten(start_dim=1.5)", lambda: nn.Flatten(1.5), "start_dim"),
    BadCall("Unflatten(1, (2, -1, -1))", lambda: nn.Unflatten(1, (2, -1, -1)), "unflattened_size"),
    BadCall("Unflatten(1, 6)", lambda: nn.Unflatten(1, 6), "unflattened_size"),
    BadCall("ModuleDict({'a.b': Linear})", lambda: nn.ModuleDict({"a.b": nn.Linear(2, 2)}), "name",
            exc=KeyError),   # torch raises KeyError here
    BadCall("ModuleDict({'a': 3})", lambda: nn.ModuleDict({"a": 3}), "Module"),
    BadCall("TransformerEncoder(layer, num_layers=0)",
            lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 0), "num_layers"),
]
BAD_CALLS += [
    BadCall("FeedForward(activation='swish')", lambda: nn.FeedForward(8, activation="swish"), "activation"),
    BadCall("Residual(3)", lambda: nn.Residual(3), "module|Module"),
    BadCall("Sequential(3)", lambda: nn.Sequential(3), "argument|Module"),
    BadCall("TransformerEncoderLayer(8, nhead=3)", lambda: nn.TransformerEncoderLayer(8, 3), "nhead|num_heads|embed"),
]

# Functional ops not fuzzed one by one: checked by their harness cases (tests/cases/) and
# exercised elsewhere as ``not_fuzzed`` says.
_SEQ = "full sequences: built from {0}_cell's kernels (fuzzed); nn.{1} in the module tables"
HARNESS_ONLY = [
    Op("rnn", F.rnn_fwd, F.rnn_bwd, family="rnn", not_fuzzed=_SEQ.format("rnn", "RNN")),
    Op("gru", F.gru_fwd, F.gru_bwd, family="rnn", not_fuzzed=_SEQ.format("gru", "GRU")),
    Op("lstm", F.lstm_fwd, F.lstm_bwd, family="rnn", not_fuzzed=_SEQ.format("lstm", "LSTM")),
    Op("multi_head_attention", F.multi_head_attention_fwd, F.multi_head_attention_bwd,
       family="attention", grad_of=(0, 1, 2),
       not_fuzzed="nn.MultiheadAttention / CausalSelfAttention / Transformer layers in the module "
                  "tables; its core is scaled_dot_product_attention (fuzzed)"),
]
NOT_FUZZED = {o.fwd.__name__: o.not_fuzzed for o in HARNESS_ONLY}


# ------------------------------------------------------------------ lookups
def all_ops():
    """Every declared op: the fuzzed ones, then those checked by harness cases only."""
    return list(FUZZ) + list(HARNESS_ONLY)


def op(name):
    """The declaration named ``name`` (tests/cases/<family>.py: ``op("linear").case(...)``)."""
    for o in all_ops():
        if o.name == name:
            return o
    raise KeyError(f"no op {name!r} in tests/reliability_registry.py")


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
