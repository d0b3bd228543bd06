"""fastnn._validate: the one home of the argument checks (issue #20 item 3).

Each validator's edge cases, the dropout-probability rule at every place that takes one,
and a scan of the package so hand-rolled ``isinstance(v, bool) or not isinstance(v,
numbers...)`` copies cannot come back."""
import fractions
import pathlib
import re

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import _validate as V
from fastnn import nn

PKG = pathlib.Path(fastnn.__file__).parent


# ---------------------------------------------------------------- no copies
# isinstance(v, bool) or not isinstance(v, ...)  /  isinstance(v, ...) and not isinstance(v, bool)
_HAND_ROLLED = [
    re.compile(r"isinstance\(\s*([\w.\[\]\"']+)\s*,\s*bool\s*\)\s*or\s+not\s+isinstance\(\s*\1\s*,"),
    re.compile(r"isinstance\(\s*([\w.\[\]\"']+)\s*,[^()]*(?:\([^()]*\))?[^()]*\)\s*and\s+not\s+"
               r"isinstance\(\s*\1\s*,\s*bool\s*\)"),
    re.compile(r"\bnumbers\.(?:Integral|Real|Number|Rational|Complex)\b"),
]
# fastnn.io checks a file header's JSON values and save()'s dict keys, which must be
# exactly the JSON types (a NumPy integer key would fail later in json.dumps): not a
# call argument, so not _validate's int rule.
_ALLOWED = {"_validate.py", "io.py"}


def test_no_hand_rolled_scalar_checks():
    hits = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in _ALLOWED:
            continue
        text = path.read_text(encoding="utf-8")
        for pat in _HAND_ROLLED:
            for m in pat.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{rel}:{line}: {m.group(0)}")
    assert not hits, ("scalar argument checks belong in fastnn/_validate.py (is_int, is_real, "
                      "real, int_arg, bool_arg, probability, ...):\n" + "\n".join(hits))


def test_scan_finds_the_patterns_it_forbids():
    samples = ["if isinstance(v, bool) or not isinstance(v, numbers.Real):",
               "ok = isinstance(d, int) and not isinstance(d, bool)",
               "if isinstance(k, bool) or not isinstance(k, (str, int)):",
               "x = numbers.Integral"]
    for s in samples:
        assert any(p.search(s) for p in _HAND_ROLLED), s
    assert not any(p.search("ok = isinstance(v, bool)") for p in _HAND_ROLLED)


# ---------------------------------------------------------------- predicates
@pytest.mark.parametrize("v, is_int, is_real", [
    (3, True, True), (np.int64(3), True, True), (np.uint8(3), True, True),
    (True, False, False), (np.bool_(True), False, False),
    (3.0, False, True), (np.float32(2.5), False, True), (fractions.Fraction(1, 3), False, True),
    (float("nan"), False, True), (1j, False, False), ("3", False, False), (None, False, False),
    (np.array(3), False, False),
])
def test_is_int_is_real(v, is_int, is_real):
    assert V.is_int(v) is is_int
    assert V.is_real(v) is is_real


# ---------------------------------------------------------------- real numbers
def test_real():
    assert V.real(2, "a") == 2.0 and type(V.real(2, "a")) is float
    assert V.real(np.float32(0.5), "a") == 0.5
    assert np.isnan(V.real(float("nan"), "a"))
    assert V.real(float("inf"), "a") == float("inf")
    for bad in (True, "1", None, 1j):
        with pytest.raises(TypeError, match="a must be a real number, got"):
            V.real(bad, "a")
    with pytest.raises(TypeError, match="scale must be a real number or None"):
        V.real("x", "scale", what="a real number or None")
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="a must be finite"):
            V.real(bad, "a", finite=True)


def test_positive_float():
    assert V.positive_float(1e-300, "eps") == 1e-300
    assert V.positive_float(0, "beta", allow_zero=True) == 0.0
    for bad in (0, 0.0, -0.0, -1e-9, float("nan")):
        with pytest.raises(ValueError, match="eps must be > 0"):
            V.positive_float(bad, "eps")
    for bad in (-1e-9, float("nan")):
        with pytest.raises(ValueError, match="beta must be >= 0"):
            V.positive_float(bad, "beta", allow_zero=True)
    with pytest.raises(TypeError):
        V.positive_float(True, "eps")


@pytest.mark.parametrize("p", [0, 0.0, 1, 1.0, 0.5, np.float32(1.0), fractions.Fraction(1, 2)])
def test_probability_accepts_closed_interval(p):
    assert V.probability(p, "p") == float(p)


@pytest.mark.parametrize("p", [-1e-12, 1 + 1e-12, float("nan"), float("inf"), -float("inf")])
def test_probability_refuses_outside(p):
    with pytest.raises(ValueError, match="p must be between 0 and 1"):
        V.probability(p, "p")


def test_probability_half_open_and_types():
    assert V.probability(0.0, "dropout", allow_one=False) == 0.0
    assert V.probability(np.nextafter(1.0, 0.0), "dropout", allow_one=False) < 1.0
    for bad in (1.0, 1, float("nan"), -0.1):
        with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
            V.probability(bad, "dropout", allow_one=False)
    for bad in (True, False, "0.5", None):
        with pytest.raises(TypeError, match="p must be a real number"):
            V.probability(bad, "p")


# ---------------------------------------------------------------- ints and flags
def test_int_arg():
    assert V.int_arg(np.int32(4), "n") == 4 and type(V.int_arg(np.int32(4), "n")) is int
    assert V.int_arg(1, "n", minimum=1) == 1
    assert V.int_arg(-5, "n") == -5
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        V.int_arg(0, "n", minimum=1)
    for bad in (True, 1.0, "1", None, np.float64(1)):
        with pytest.raises(TypeError, match="n must be an int, got"):
            V.int_arg(bad, "n")
    with pytest.raises(TypeError, match="divisor_override must be an int or None"):
        V.int_arg(2.0, "divisor_override", what="an int or None")


def test_bool_arg():
    assert V.bool_arg(True, "f") is True and V.bool_arg(np.bool_(False), "f") is False
    for bad in (1, 0, None, "True", 1.0):
        with pytest.raises(TypeError, match="f must be a bool"):
            V.bool_arg(bad, "f")
    assert V.bool_arg(1, "bias", allow_int=True) is True
    assert V.bool_arg(np.int64(0), "bias", allow_int=True) is False
    with pytest.raises(TypeError):
        V.bool_arg(1.0, "bias", allow_int=True)


def test_groups_arg():
    assert V.groups_arg(1) == 1 and V.groups_arg(np.int64(3)) == 3
    with pytest.raises(ValueError, match="groups must be >= 1"):
        V.groups_arg(0)
    for bad in (True, 2.0, None):
        with pytest.raises(TypeError, match="groups must be an int"):
            V.groups_arg(bad)


def test_groups_checked_by_the_same_rule_in_module_and_function():
    x = np.zeros((1, 4, 5, 5), np.float32)
    w = np.zeros((4, 4, 3, 3), np.float32)
    for call in (lambda g: nn.Conv2d(4, 4, 3, groups=g), lambda g: F.conv2d(x, w, groups=g),
                 lambda g: nn.Conv1d(4, 4, 3, groups=g),
                 lambda g: F.conv_transpose2d(x, w, groups=g)):
        with pytest.raises(ValueError, match="groups must be >= 1, got 0"):
            call(0)
        with pytest.raises(TypeError, match="groups must be an int, got bool"):
            call(True)


# ---------------------------------------------------------------- geometry
def test_pair_and_single():
    assert V.pair(3, "k") == (3, 3)
    assert V.pair((2, 5), "k") == (2, 5) and V.pair([4], "k") == (4, 4)
    assert V.pair(np.int64(2), "k") == (2, 2)
    assert V.pair(0, "padding", minimum=0) == (0, 0)
    with pytest.raises(ValueError, match="k must be positive"):
        V.pair((1, 0), "k")
    with pytest.raises(ValueError, match="padding must be >= 0"):
        V.pair(-1, "padding", minimum=0)
    for bad in ((1, 2, 3), (), (1.0, 2), (True, 2), "ab", 2.0, None):
        with pytest.raises(TypeError, match="k must be an int or a pair of ints"):
            V.pair(bad, "k")
    assert V.single(4, "k") == 4 and V.single((4,), "k") == 4 and V.single([0], "p", 0) == 0
    for bad in ((1, 2), (), 1.5):
        with pytest.raises(TypeError, match="k must be an int or a 1-tuple of ints"):
            V.single(bad, "k")
    with pytest.raises(ValueError):
        V.single(0, "k")


def test_conv_padding():
    assert V.conv_padding("valid", (3, 3), (2, 2), (1, 1)) == (0, 0, 0, 0)
    assert V.conv_padding("same", (3, 3), (1, 1), (1, 1)) == (1, 1, 1, 1)
    assert V.conv_padding("same", (4, 2), (1, 1), (1, 3)) == (1, 2, 1, 2)   # odd extra at the end
    assert V.conv_padding((1, 2), (3, 3), (2, 2), (1, 1)) == (1, 1, 2, 2)
    with pytest.raises(ValueError, match="not supported for strided"):
        V.conv_padding("same", (3, 3), (2, 1), (1, 1))
    with pytest.raises(ValueError, match="'same' or 'valid'"):
        V.conv_padding("full", (3, 3), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="padding must be >= 0"):
        V.conv_padding(-1, (3, 3), (1, 1), (1, 1))


def test_output_size_pair():
    assert V.output_size_pair(3, (7, 9)) == (3, 3)
    assert V.output_size_pair((None, 2), (7, 9)) == (7, 2)
    assert V.output_size_pair((0, 0), (7, 9)) == (0, 0)
    with pytest.raises(ValueError, match="must have 2 entries"):
        V.output_size_pair((1, 2, 3), (7, 9))
    with pytest.raises(ValueError, match="non-negative"):
        V.output_size_pair((1, -1), (7, 9))
    with pytest.raises(TypeError, match="entries must be ints or None"):
        V.output_size_pair((1.0, 2), (7, 9))
    with pytest.raises(TypeError, match="an int or a pair"):
        V.output_size_pair(2.0, (7, 9))


def test_normalized_shape_arg():
    assert V.normalized_shape_arg(5) == (5,)
    assert V.normalized_shape_arg([2, np.int64(3)]) == (2, 3)
    assert V.normalized_shape_arg((0,)) == (0,)
    with pytest.raises(ValueError, match="at least one dimension"):
        V.normalized_shape_arg(())
    with pytest.raises(ValueError, match="non-negative"):
        V.normalized_shape_arg((2, -1))
    with pytest.raises(TypeError, match="must contain ints"):
        V.normalized_shape_arg((2, 3.0))
    with pytest.raises(TypeError, match="an int or a sequence of ints"):
        V.normalized_shape_arg(2.0)
    with pytest.raises(TypeError, match="must contain ints"):
        V.normalized_shape_arg((True,))


# ---------------------------------------------------------------- indices and enums
def test_index_array():
    a = V.index_array(np.array([[0, 4]], np.int32), 5)
    assert a.dtype == np.int64 and a.flags.c_contiguous and a.tolist() == [[0, 4]]
    assert V.index_array([1, 2], 3).tolist() == [1, 2]
    assert V.index_array(2, 3).tolist() == 2
    assert V.index_array(np.zeros((0,), np.int64), 0).shape == (0,)
    with pytest.raises(IndexError, match="contains index 5"):
        V.index_array(np.array([5]), 5)
    with pytest.raises(IndexError, match="contains index -1"):
        V.index_array(np.array([-1]), 5)
    with pytest.raises(TypeError, match="integer array of indices"):
        V.index_array(np.array([1.0]), 5)
    with pytest.raises(TypeError, match="integer NumPy array"):
        V.index_array(True, 5)


def test_padding_index():
    assert V.padding_index(None, 4) is None
    assert V.padding_index(-4, 4) == 0 and V.padding_index(3, 4) == 3 and V.padding_index(-1, 4) == 3
    for bad in (4, -5):
        with pytest.raises(ValueError, match="padding_idx must be within num_embeddings"):
            V.padding_index(bad, 4)
    with pytest.raises(TypeError):
        V.padding_index(1.0, 4)


def test_reduction_and_loss_args():
    for r in ("none", "mean", "sum"):
        assert V.reduction(r) == r
    assert V.reduction("batchmean", batchmean=True) == "batchmean"
    for bad in ("batchmean", "Mean", None, ["mean"]):
        with pytest.raises(ValueError, match="reduction must be one of"):
            V.reduction(bad)
    assert V.loss_args(-100, "sum", 1) == (-100, "sum", 1.0)
    with pytest.raises(ValueError, match="label_smoothing must be between 0 and 1"):
        V.loss_args(-100, "mean", 1.01)
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        V.loss_args(True, "mean", 0.0)


# ---------------------------------------------------------------- one dropout rule
@pytest.mark.parametrize("p", [0.0, 1.0, 1])
def test_dropout_probability_edges_everywhere(p):
    """torch's rule 0 <= p <= 1 for nn.Dropout, F.dropout, attention dropout and
    label_smoothing; the recurrent layers keep [0, 1) (their kernels scale by 1/(1-p))."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    y = F.dropout(x, p)
    np.testing.assert_array_equal(y, x if p == 0 else np.zeros_like(x))
    assert nn.Dropout(p).p == float(p)
    out = F.scaled_dot_product_attention(x, x, x, dropout_p=p)
    if p:
        np.testing.assert_array_equal(out, np.zeros_like(out))
    assert nn.MultiheadAttention(4, 2, dropout=p).dropout == float(p)
    assert np.isfinite(F.cross_entropy(x[0], np.array([0, 1, 2]), label_smoothing=p))
    if p:
        with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
            nn.LSTM(4, 3, num_layers=2, dropout=p)
    else:
        assert nn.LSTM(4, 3, num_layers=2, dropout=p).dropout == 0.0


@pytest.mark.parametrize("p", [-1e-9, 1 + 1e-9, float("nan")])
def test_dropout_probability_outside_refused_everywhere(p):
    x = np.ones((2, 3, 4), np.float32)
    for call in (lambda: F.dropout(x, p), lambda: nn.Dropout(p),
                 lambda: F.scaled_dot_product_attention(x, x, x, dropout_p=p),
                 lambda: nn.MultiheadAttention(4, 2, dropout=p),
                 lambda: nn.CausalSelfAttention(4, 2, dropout=p),
                 lambda: F.cross_entropy(x[0], np.array([0, 1, 2]), label_smoothing=p),
                 lambda: nn.GRU(4, 3, num_layers=2, dropout=p)):
        with pytest.raises(ValueError):
            call()
    for call in (lambda: F.dropout(x, True), lambda: nn.Dropout(True),
                 lambda: nn.RNN(4, 3, dropout=False)):
        with pytest.raises(TypeError, match="must be a real number"):
            call()


# ---------------------------------------------------------------- norm and conv parameters
def test_normalized_dims():
    x = np.zeros((2, 3, 4))
    assert V.normalized_dims(x, 4) == ((4,), 4)
    assert V.normalized_dims(x, (3, 4)) == ((3, 4), 12)
    assert V.normalized_dims(x, [2, 3, 4]) == ((2, 3, 4), 24)
    assert V.normalized_dims(np.zeros((2, 0)), 0) == ((0,), 0)
    for bad in (3, (2, 4), (1, 2, 3, 4)):
        with pytest.raises(ValueError, match="does not end in normalized_shape"):
            V.normalized_dims(x, bad)


def test_param_arrays():
    x = np.zeros((2, 3), np.float32)
    w = np.ones(3, np.float32)
    a, b = V.param_arrays(x, (3,), "normalized_shape", ("weight", w), ("bias", None))
    assert a is w and b is None
    strided = np.ones(6, np.float32)[::2]
    (c,) = V.param_arrays(x, (3,), "(num_channels,)", ("weight", strided))
    assert c.flags.c_contiguous and c.tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match=r"bias must have shape \(out_channels,\) = \(4,\), got \(3,\)"):
        V.param_arrays(x, (4,), "(out_channels,)", ("bias", w))
    with pytest.raises(TypeError, match="bias has dtype float64 but input has dtype float32"):
        V.param_arrays(x, (3,), "normalized_shape", ("weight", w), ("bias", np.ones(3)))
    # every array is converted before a shape is checked: a list is a TypeError first
    with pytest.raises(TypeError, match="bias must be a float32 or float64 NumPy array"):
        V.param_arrays(x, (3,), "normalized_shape", ("weight", np.ones(2, np.float32)),
                       ("bias", [1.0, 2.0, 3.0]))
