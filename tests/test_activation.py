"""Activation family: bad input, extremes (NaN / inf / +-0) against the reference and
PyTorch, out= and in-place aliasing, determinism, RReLU's randomness, module defaults and
torch state dicts.  (Per-op forward/backward comparisons are the harness cases in
tests/cases/activation.py.)"""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
import fastnn.nn as nn

# name -> (fwd, bwd, args after x, torch function of (torch, x) or None)
UNARY = {
    "relu": (F.relu_fwd, F.relu_bwd, (), lambda t, x: t.relu(x)),
    "leaky_relu": (F.leaky_relu_fwd, F.leaky_relu_bwd, (),
                   lambda t, x: t.nn.functional.leaky_relu(x)),
    "leaky_relu_0.001": (F.leaky_relu_fwd, F.leaky_relu_bwd, (0.001,),
                         lambda t, x: t.nn.functional.leaky_relu(x, 0.001)),
    "leaky_relu_neg": (F.leaky_relu_fwd, F.leaky_relu_bwd, (-0.2,),
                       lambda t, x: t.nn.functional.leaky_relu(x, -0.2)),
    "rrelu_eval": (F.rrelu_fwd, F.rrelu_bwd, (0.1, 0.3, False),
                   lambda t, x: t.nn.functional.rrelu(x, 0.1, 0.3, False)),
    "elu": (F.elu_fwd, F.elu_bwd, (), lambda t, x: t.nn.functional.elu(x)),
    "elu_neg_alpha": (F.elu_fwd, F.elu_bwd, (-0.5,), lambda t, x: t.nn.functional.elu(x, -0.5)),
    "selu": (F.selu_fwd, F.selu_bwd, (), lambda t, x: t.nn.functional.selu(x)),
    "celu": (F.celu_fwd, F.celu_bwd, (1.5,), lambda t, x: t.nn.functional.celu(x, 1.5)),
    "gelu": (F.gelu_fwd, F.gelu_bwd, (), lambda t, x: t.nn.functional.gelu(x)),
    "gelu_tanh": (F.gelu_fwd, F.gelu_bwd, ("tanh",),
                  lambda t, x: t.nn.functional.gelu(x, approximate="tanh")),
    "silu": (F.silu_fwd, F.silu_bwd, (), lambda t, x: t.nn.functional.silu(x)),
    "softplus": (F.softplus_fwd, F.softplus_bwd, (), lambda t, x: t.nn.functional.softplus(x)),
    "softplus_beta": (F.softplus_fwd, F.softplus_bwd, (2.0, 3.0),
                      lambda t, x: t.nn.functional.softplus(x, 2.0, 3.0)),
    "sigmoid": (F.sigmoid_fwd, F.sigmoid_bwd, (), lambda t, x: t.sigmoid(x)),
    "tanh": (F.tanh_fwd, F.tanh_bwd, (), lambda t, x: t.tanh(x)),
    "hardtanh": (F.hardtanh_fwd, F.hardtanh_bwd, (), lambda t, x: t.nn.functional.hardtanh(x)),
    "hardtanh_range": (F.hardtanh_fwd, F.hardtanh_bwd, (-3.0, 0.5),
                       lambda t, x: t.nn.functional.hardtanh(x, -3.0, 0.5)),
    "relu6": (F.relu6_fwd, F.relu6_bwd, (), lambda t, x: t.nn.functional.relu6(x)),
    "hardsigmoid": (F.hardsigmoid_fwd, F.hardsigmoid_bwd, (),
                    lambda t, x: t.nn.functional.hardsigmoid(x)),
    "hardswish": (F.hardswish_fwd, F.hardswish_bwd, (),
                  lambda t, x: t.nn.functional.hardswish(x)),
    "mish": (F.mish_fwd, F.mish_bwd, (), lambda t, x: t.nn.functional.mish(x)),
}

EXTREMES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 100.0, -100.0, 30.0, -30.0,
                     1e-40, -1e-40, 1e-3, -1e-3, 0.5, -0.5, 3.0, -3.0,
                     # the hard activations' kinks and Mish's exp cap
                     1.0, -1.0, 6.0, 2.9999998, -2.9999998, 20.0, 21.0, -20.0])

DTYPES = [np.float32, np.float64]


def _run(name, x, dy, backend):
    fwd, bwd, args, _ = UNARY[name]
    with fastnn.use_backend(backend):
        y, ctx = fwd(x, *args)
        return y, bwd(ctx, dy)


def _same_nan_inf(a, b, what):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"{what}: NaN positions")
    fin = np.isfinite(b)
    np.testing.assert_array_equal(a[~fin & ~np.isnan(b)], b[~fin & ~np.isnan(b)],
                                  err_msg=f"{what}: infinities")


# ---------------------------------------------------------------- extremes
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_extremes_cpu_matches_reference(name, dtype):
    x = EXTREMES.astype(dtype)
    dy = np.linspace(-1.5, 2.0, x.size).astype(dtype)
    y, dx = _run(name, x, dy, "cpu")
    ry, rdx = _run(name, x, dy, "reference")
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    for a, b, what in ((y, ry, "forward"), (dx, rdx, "backward")):
        assert a.dtype == dtype
        _same_nan_inf(a, b, f"{name} {what}")
        np.testing.assert_allclose(a, b, equal_nan=True, err_msg=f"{name} {what}", **tol)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_extremes_reference_matches_torch(name):
    """NaN and inf propagate as in PyTorch, and gradients at 0 are torch's (ReLU'(0) = 0)."""
    torch = pytest.importorskip("torch")
    x = EXTREMES.astype(np.float64)
    dy = np.linspace(-1.5, 2.0, x.size)
    y, dx = _run(name, x, dy, "reference")
    tx = torch.tensor(x, requires_grad=True)
    ty = UNARY[name][3](torch, tx)
    ty.backward(torch.tensor(dy))
    for a, b, what in ((y, ty.detach().numpy(), "forward"), (dx, tx.grad.numpy(), "backward")):
        _same_nan_inf(a, b, f"{name} {what} vs torch")
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-30, equal_nan=True,
                                   err_msg=f"{name} {what} vs torch")


def test_prelu_extremes_and_zero_gradient():
    torch = pytest.importorskip("torch")
    x = EXTREMES.reshape(1, -1).repeat(2, 0)
    w = np.array([0.25, -0.5])
    dy = np.linspace(-1, 1, x.size).reshape(x.shape)
    for backend in ("reference", "cpu"):
        with fastnn.use_backend(backend):
            y, ctx = F.prelu_fwd(x.T.copy().reshape(-1, 2), w)
            dx, dw = F.prelu_bwd(ctx, dy.T.copy().reshape(-1, 2))
        tx = torch.tensor(x.T.copy().reshape(-1, 2), requires_grad=True)
        tw = torch.tensor(w, requires_grad=True)
        ty = torch.nn.functional.prelu(tx, tw)
        ty.backward(torch.tensor(dy.T.copy().reshape(-1, 2)))
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_large_arrays_match_reference(name, dtype):
    """Sizes that split over threads into chunks (and a ragged tail)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(200_003) * 4).astype(dtype)
    dy = rng.standard_normal(x.size).astype(dtype)
    old = fastnn.get_num_threads()
    try:
        fastnn.set_num_threads(3)
        y, dx = _run(name, x, dy, "cpu")
    finally:
        fastnn.set_num_threads(old)
    ry, rdx = _run(name, x, dy, "reference")
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(y, ry, **tol)
    np.testing.assert_allclose(dx, rdx, **tol)


# ---------------------------------------------------------------- bad input
BAD_INPUTS = [np.arange(6).reshape(2, 3), np.ones(3, dtype=bool), np.array(["a", "b"]),
              np.ones(3, dtype=np.complex64), np.ones(3, dtype=np.float16), [1.0, 2.0], "x", None]


@pytest.mark.parametrize("fn", [F.relu, F.leaky_relu, F.elu, F.selu, F.celu, F.gelu, F.silu,
                                F.softplus, F.sigmoid, F.tanh, F.rrelu, F.softmin, F.hardtanh,
                                F.relu6, F.hardsigmoid, F.hardswish, F.mish],
                         ids=lambda f: f.__name__)
def test_non_float_inputs(fn):
    for bad in BAD_INPUTS:
        with pytest.raises(TypeError, match="input"):
            fn(bad)


def test_prelu_weight_errors():
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="weight must have 1 or 3 elements"):
        F.prelu(x, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="weight must have 1 or 1 elements"):
        F.prelu(np.ones(5, np.float32), np.ones(5, np.float32))
    with pytest.raises(ValueError, match="weight must be 1-D"):
        F.prelu(x, np.ones((3, 1), np.float32))
    with pytest.raises(TypeError, match="weight"):
        F.prelu(x, np.ones(3, np.float64))
    with pytest.raises(TypeError, match="weight"):
        F.prelu(x, np.ones(3, np.int64))
    m = nn.PReLU(4)
    with pytest.raises(ValueError, match="weight must have 1 or 3 elements"):
        m(x)
    with pytest.raises(ValueError, match="num_parameters"):
        nn.PReLU(0)


def test_hyperparameter_errors():
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="alpha must not be 0"):
        F.celu(x, 0.0)
    with pytest.raises(ValueError, match="alpha must not be 0"):
        nn.CELU(0.0)
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        F.softplus(x, 1.0, -1.0)
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        nn.Softplus(threshold=-2)
    with pytest.raises(ValueError, match="beta must not be 0"):
        F.softplus(x, 0.0)
    with pytest.raises(ValueError, match="lower .* must be <= upper"):
        F.rrelu(x, 0.5, 0.2)
    with pytest.raises(ValueError, match="lower .* must be <= upper"):
        F.rrelu(x, 0.5, 0.2, training=True)
    with pytest.raises(ValueError, match="lower .* must be <= upper"):
        nn.RReLU(0.5, 0.2)
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(x, "erf")
    with pytest.raises(TypeError, match="negative_slope"):
        F.leaky_relu(x, "0.1")
    with pytest.raises(ValueError, match="negative_slope must be finite"):
        F.leaky_relu(x, float("nan"))
    with pytest.raises(ValueError, match="in-place leaky_relu"):
        F.leaky_relu(x.copy(), -0.1, inplace=True)
    with pytest.raises(ValueError, match="in-place elu"):
        F.elu(x.copy(), -1.0, inplace=True)
    with pytest.raises(TypeError, match="inplace"):
        F.relu(x, inplace=1)
    with pytest.raises(ValueError, match="dim"):
        F.softmin(np.ones((2, 3), np.float32), 2)


def test_out_errors():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="out must have the input's shape"):
        F.sigmoid(x, out=np.empty((4, 3), np.float32))
    with pytest.raises(TypeError, match="out has dtype"):
        F.sigmoid(x, out=np.empty((3, 4), np.float64))
    with pytest.raises(TypeError, match="out must be a float32 or float64"):
        F.sigmoid(x, out=np.empty((3, 4), np.int32))
    with pytest.raises(TypeError, match="out must be a NumPy array"):
        F.sigmoid(x, out=[0.0] * 12)
    with pytest.raises(ValueError, match="either out= or inplace"):
        F.relu(x, inplace=True, out=np.empty_like(x))
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        F.tanh(x, out=ro)
    big = np.arange(13, dtype=np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        F.tanh(big[:12], out=big[1:])


# ---------------------------------------------------------------- out= and in-place
INPLACE = {
    "relu": (F.relu, F.relu_fwd, F.relu_bwd, ()),
    "leaky_relu": (F.leaky_relu, F.leaky_relu_fwd, F.leaky_relu_bwd, (0.001,)),
    "rrelu_eval": (F.rrelu, F.rrelu_fwd, F.rrelu_bwd, (0.1, 0.3, False)),
    "rrelu_train": (F.rrelu, F.rrelu_fwd, F.rrelu_bwd, (0.1, 0.3, True)),
    "elu": (F.elu, F.elu_fwd, F.elu_bwd, (0.7,)),
    "selu": (F.selu, F.selu_fwd, F.selu_bwd, ()),
    "celu": (F.celu, F.celu_fwd, F.celu_bwd, (-1.5,)),
    "silu": (F.silu, F.silu_fwd, F.silu_bwd, ()),
    "hardtanh": (F.hardtanh, F.hardtanh_fwd, F.hardtanh_bwd, (-2.0, 1.5)),
    "relu6": (F.relu6, F.relu6_fwd, F.relu6_bwd, ()),
    "hardsigmoid": (F.hardsigmoid, F.hardsigmoid_fwd, F.hardsigmoid_bwd, ()),
    "hardswish": (F.hardswish, F.hardswish_fwd, F.hardswish_bwd, ()),
    "mish": (F.mish, F.mish_fwd, F.mish_bwd, ()),
}
OUT_ONLY = {
    "gelu": (F.gelu, F.gelu_fwd, F.gelu_bwd, ("none",)),
    "gelu_tanh": (F.gelu, F.gelu_fwd, F.gelu_bwd, ("tanh",)),
    "softplus": (F.softplus, F.softplus_fwd, F.softplus_bwd, (1.5, 4.0)),
    "sigmoid": (F.sigmoid, F.sigmoid_fwd, F.sigmoid_bwd, ()),
    "tanh": (F.tanh, F.tanh_fwd, F.tanh_bwd, ()),
}
ALL_OUT = {**INPLACE, **OUT_ONLY}


def _data(dtype=np.float32, shape=(6, 37)):
    rng = np.random.default_rng(4)
    return (rng.standard_normal(shape) * 3).astype(dtype), rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_aliases_input_and_backward_still_right(name, backend):
    fn, fwd, bwd, args = INPLACE[name]
    x, dy = _data()
    with fastnn.use_backend(backend):
        fastnn.manual_seed(5)
        want_y, ctx = fwd(x.copy(), *args)
        want_dx = bwd(ctx, dy)
        xi = x.copy()
        fastnn.manual_seed(5)
        y, ctx = fwd(xi, *args, inplace=True)
        assert y is xi
        np.testing.assert_array_equal(xi, want_y)
        # elu & co. go backward from the output in place (from the input otherwise)
        np.testing.assert_allclose(bwd(ctx, dy), want_dx, rtol=1e-6, atol=1e-6)
        xi = x.copy()
        fastnn.manual_seed(5)
        assert fn(xi, *args, inplace=True) is xi
        np.testing.assert_array_equal(xi, want_y)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_on_noncontiguous_input(name):
    fn, fwd, bwd, args = INPLACE[name]
    x, dy = _data()
    fastnn.manual_seed(5)
    want = fn(x[:, ::2].copy(), *args)
    wide = x.copy()
    view = wide[:, ::2]
    fastnn.manual_seed(5)
    assert fn(view, *args, inplace=True) is view
    np.testing.assert_array_equal(view, want)
    np.testing.assert_array_equal(wide[:, 1::2], x[:, 1::2])   # the gaps are untouched


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(ALL_OUT))
def test_out_argument(name, dtype):
    fn, fwd, bwd, args = ALL_OUT[name]
    x, dy = _data(dtype)
    fastnn.manual_seed(5)
    want_y, ctx = fwd(x, *args)
    want_dx = bwd(ctx, dy)
    # a separate out: written and returned
    out = np.full_like(x, 7.0)
    fastnn.manual_seed(5)
    y, ctx = fwd(x, *args, out=out)
    assert y is out
    np.testing.assert_array_equal(out, want_y)
    np.testing.assert_array_equal(bwd(ctx, dy), want_dx)
    # out = the input itself: backward must not see the overwritten input
    xa = x.copy()
    fastnn.manual_seed(5)
    y, ctx = fwd(xa, *args, out=xa)
    assert y is xa
    np.testing.assert_array_equal(xa, want_y)
    np.testing.assert_allclose(bwd(ctx, dy), want_dx, rtol=1e-6, atol=1e-6)
    # a non-contiguous out
    wide = np.zeros((x.shape[0], 2 * x.shape[1]), dtype)
    fastnn.manual_seed(5)
    y = fn(x, *args, out=wide[:, ::2])
    np.testing.assert_array_equal(wide[:, ::2], want_y)
    assert not wide[:, 1::2].any()
    # out aliasing the input through another view object
    xb = x.copy()
    fastnn.manual_seed(5)
    fn(xb, *args, out=xb[...])
    np.testing.assert_array_equal(xb, want_y)


def test_modules_inplace():
    x, dy = _data()
    for m, ref in [(nn.ReLU(inplace=True), nn.ReLU()), (nn.SiLU(True), nn.SiLU()),
                   (nn.ELU(0.5, inplace=True), nn.ELU(0.5)), (nn.SELU(True), nn.SELU()),
                   (nn.CELU(2.0, True), nn.CELU(2.0)), (nn.LeakyReLU(0.001, True), nn.LeakyReLU(0.001))]:
        xi = x.copy()
        y = m(xi)
        assert y is xi
        np.testing.assert_array_equal(y, ref(x))
        np.testing.assert_allclose(m.backward(dy), ref.backward(dy), rtol=1e-6, atol=1e-6)
        assert "inplace=True" in repr(m)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("slope", [None, 0.01, 0.0, -0.2])
def test_relu_backward_from_a_bit_mask(slope, dtype):
    """ReLU / LeakyReLU keep one bit per element for the backward (a third of its memory
    traffic), not y or x: the saved state is ceil(n / 8) bytes, and overwriting the output
    and the input after the forward leaves the gradient alone.  Sizes around the vector
    widths (16, 8, 4 lanes and the scalar tail) and past the two-thread split, with
    NaN / +-inf / +-0 in every position class; the reference backend's results."""
    fwd, bwd = (F.relu_fwd, F.relu_bwd) if slope is None else (F.leaky_relu_fwd, F.leaky_relu_bwd)
    args = () if slope is None else (slope,)
    rng = np.random.default_rng(3)
    for n in list(range(1, 42)) + [1000, 200_003]:
        x = rng.standard_normal(n).astype(dtype)
        x[rng.integers(0, n, 3 + n // 50)] = rng.choice(EXTREMES, 3 + n // 50)
        dy = rng.standard_normal(n).astype(dtype)
        with fastnn.use_backend("reference"):
            ry, rctx = fwd(x, *args)
            rdx = bwd(rctx, dy)
        want = bwd(fwd(x, *args)[1], dy)
        np.testing.assert_allclose(want, rdx, rtol=1e-6, atol=0, equal_nan=True, err_msg=f"n={n}")
        xc = x.copy()
        y, ctx = fwd(xc, *args)
        mask = ctx[1] if slope is None else ctx[1][0]
        assert mask.dtype == np.uint8 and mask.shape == ((n + 7) // 8,)
        np.testing.assert_allclose(y, ry, rtol=1e-6, atol=0, equal_nan=True)
        y[...] = np.nan
        xc[...] = np.nan
        np.testing.assert_array_equal(bwd(ctx, dy), want, err_msg=f"n={n}")


# ---------------------------------------------------------------- accumulation and RReLU
# (bit-identical results for any thread count: tests/test_threads.py, from the registry)
def test_prelu_weight_grad_accumulates_in_double():
    x = np.full((1, 1, 1 << 20), -1.0, np.float32)
    dy = np.full(x.shape, 0.1, np.float32)
    _, ctx = F.prelu_fwd(x, np.array([0.25], np.float32))
    _, dw = F.prelu_bwd(ctx, dy)
    # float32 running sums of 2^20 terms would drift by ~1e-2 relative
    np.testing.assert_allclose(dw, [-0.1 * (1 << 20) * np.float64(np.float32(0.1)) / 0.1], rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_rrelu_training_slopes(dtype):
    x = np.concatenate([-np.linspace(0.5, 3, 5000), np.linspace(0.1, 2, 300), [0.0]]).astype(dtype)
    fastnn.manual_seed(3)
    y, ctx = F.rrelu_fwd(x, 0.1, 0.4, training=True)
    neg = x < 0
    slope = y[neg] / x[neg]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.4 + 1e-6
    assert abs(slope.mean() - 0.25) < 0.01 and slope.std() > 0.07      # U(0.1, 0.4): std 0.087
    np.testing.assert_array_equal(y[x > 0], x[x > 0])
    dy = np.ones_like(x)
    dx = F.rrelu_bwd(ctx, dy)
    np.testing.assert_allclose(dx[neg], slope, rtol=1e-6)
    np.testing.assert_array_equal(dx[x > 0], 1)
    assert 0.1 <= dx[-1] <= 0.4                                        # x = 0 draws a slope
    # the reference draws the same numbers (seed, call offset, element index)
    fastnn.manual_seed(3)
    with fastnn.use_backend("reference"):
        ry, _ = F.rrelu_fwd(x, 0.1, 0.4, training=True)
    np.testing.assert_allclose(y, ry, rtol=1e-6)
    # successive calls draw new slopes; reseeding repeats them
    y2 = F.rrelu(x, 0.1, 0.4, training=True)
    assert not np.array_equal(y, y2)
    fastnn.manual_seed(3)
    np.testing.assert_array_equal(F.rrelu(x, 0.1, 0.4, training=True), y)


def test_rrelu_module_train_and_eval():
    x = np.linspace(-3, 3, 101).astype(np.float32)
    m = nn.RReLU(0.1, 0.3)
    fastnn.manual_seed(0)
    y = m(x)
    dx = m.backward(np.ones_like(x))
    neg = x < 0
    np.testing.assert_allclose(dx[neg], y[neg] / x[neg], rtol=1e-6)
    m.eval()
    np.testing.assert_allclose(m(x), np.where(x > 0, x, 0.2 * x), rtol=1e-6)
    with pytest.raises(RuntimeError, match="forward in training mode"):
        m.backward(np.ones_like(x))
    assert nn.RReLU().lower == 1 / 8 and nn.RReLU().upper == 1 / 3


# ---------------------------------------------------------------- modules vs torch
def test_module_defaults_match_torch():
    torch = pytest.importorskip("torch")
    assert nn.LeakyReLU().negative_slope == torch.nn.LeakyReLU().negative_slope == 0.01
    assert nn.ELU().alpha == torch.nn.ELU().alpha
    assert nn.CELU().alpha == torch.nn.CELU().alpha
    sp, tsp = nn.Softplus(), torch.nn.Softplus()
    assert (sp.beta, sp.threshold) == (tsp.beta, tsp.threshold)
    assert nn.GELU().approximate == torch.nn.GELU().approximate
    p = nn.PReLU()
    assert p.weight.shape == (1,) and p.weight.dtype == np.float32
    np.testing.assert_array_equal(p.weight.data, torch.nn.PReLU().weight.detach().numpy())
    p = nn.PReLU(5, init=0.1)
    np.testing.assert_allclose(p.weight.data, torch.nn.PReLU(5, init=0.1).weight.detach().numpy())
    assert [n for n, _ in p.named_parameters()] == [n for n, _ in torch.nn.PReLU(5).named_parameters()]


def test_prelu_module_loads_torch_weights_and_matches():
    torch = pytest.importorskip("torch")
    tm = torch.nn.PReLU(3).double()
    with torch.no_grad():
        tm.weight.copy_(torch.tensor([0.1, -0.2, 0.7]))
    m = nn.PReLU(3).double()
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5))
    dy = rng.standard_normal(x.shape)
    for _ in range(2):                     # gradients accumulate like torch's
        tx = torch.tensor(x, requires_grad=True)
        ty = tm(tx)
        ty.backward(torch.tensor(dy))
        y = m(x)
        dx = m.backward(dy)
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(m.weight.grad, tm.weight.grad.numpy(), rtol=1e-12)


def test_module_stack_matches_torch():
    torch = pytest.importorskip("torch")
    tnn = torch.nn
    pairs = [(nn.ReLU(), tnn.ReLU()), (nn.LeakyReLU(0.001), tnn.LeakyReLU(0.001)),
             (nn.ELU(0.8), tnn.ELU(0.8)), (nn.SELU(), tnn.SELU()), (nn.CELU(1.3), tnn.CELU(1.3)),
             (nn.GELU(), tnn.GELU()), (nn.GELU("tanh"), tnn.GELU("tanh")), (nn.SiLU(), tnn.SiLU()),
             (nn.Softplus(2.0, 5.0), tnn.Softplus(2.0, 5.0)), (nn.Sigmoid(), tnn.Sigmoid()),
             (nn.Tanh(), tnn.Tanh()), (nn.Softmin(1), tnn.Softmin(1)), (nn.Softmax(1), tnn.Softmax(1)),
             (nn.LogSoftmax(1), tnn.LogSoftmax(1)), (nn.RReLU(0.2, 0.2), tnn.RReLU(0.2, 0.2)),
             (nn.Hardtanh(-0.5, 2.0), tnn.Hardtanh(-0.5, 2.0)), (nn.ReLU6(), tnn.ReLU6()),
             (nn.Hardsigmoid(), tnn.Hardsigmoid()), (nn.Hardswish(), tnn.Hardswish()),
             (nn.Mish(), tnn.Mish())]
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 7)) * 2
    dy = rng.standard_normal(x.shape)
    for m, tm in pairs:
        # torch's celu rounds 1/alpha, and its hardsigmoid's backward 1/6, to float32
        # (relative 6e-8) even for float64 input
        tol64 = 2e-7 if isinstance(m, (nn.CELU, nn.Hardsigmoid)) else 1e-10
        for dt, tol in ((np.float64, tol64), (np.float32, 2e-5)):
            m.to(np.dtype(dt))
            tx = torch.tensor(x, requires_grad=True)
            ty = tm(tx)
            ty.backward(torch.tensor(dy))
            y = m(x.astype(dt))
            dx = m.backward(dy.astype(dt))
            assert y.dtype == dt and dx.dtype == dt
            np.testing.assert_allclose(y, ty.detach().numpy(), rtol=tol, atol=tol, err_msg=repr(m))
            np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=tol, atol=tol, err_msg=repr(m))


def test_softmin_functional():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((3, 4, 5))
    for dim in (0, 1, 2, -1):
        np.testing.assert_allclose(F.softmin(x, dim),
                                   torch.nn.functional.softmin(torch.tensor(x), dim).numpy(),
                                   rtol=1e-12)
    y = F.softmin(np.array(3.0), 0)
    assert y.shape == () and y == 1.0
