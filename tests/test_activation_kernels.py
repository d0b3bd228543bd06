"""The activation kernels' own forms on every built variant (fastnn._cpu.<variant>.activation):
accuracy of the 16-lane math on dense grids, and the saved state the training forward leaves."""

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
import fastnn.nn as nn
from harness import variant_modules


VARIANTS = variant_modules("activation")


def _ulp(got, ref):
    ref32 = np.abs(ref).astype(np.float32)
    return np.abs(got.astype(np.float64) - ref) / np.spacing(ref32).astype(np.float64)


@pytest.mark.parametrize("mod", VARIANTS)
@pytest.mark.parametrize("beta,threshold", [(1.0, 20.0), (2.0, 5.0), (-1.5, 20.0), (0.5, 3.0)])
def test_softplus_forward_accuracy(mod, beta, threshold):
    """Softplus forward (avx512: e + e^2 R(e) for log1p(e), e = exp(-|bx|), no division)
    within 3 ulp of (max(bx, 0) + log1p(exp(-|bx|))) / beta in float64, bx = x beta rounded
    to float as the kernel forms it, wherever the result is a normal float and bx > -87
    (below, the result flushes to 0 as fnn_exp_nonpos does); the threshold's switch to x,
    +-0, +-inf and NaN as the reference.  The grid's length is not a multiple of 16: the
    masked tail runs too."""
    x = np.concatenate([np.linspace(-90, 30, 1_000_003), np.geomspace(1e-38, 90, 50_001),
                        -np.geomspace(1e-38, 90, 50_001)]).astype(np.float32)
    y, _ = mod.softplus(x, beta, threshold, None)
    bx = (x * np.float32(beta)).astype(np.float64)
    ref = np.where(bx > threshold, x.astype(np.float64),
                   (np.maximum(bx, 0) + np.log1p(np.exp(-np.abs(bx)))) / beta)
    ok = (np.abs(ref) > 1.2e-38) & (bx > -87.0)
    err = _ulp(y[ok], ref[ok])
    worst = int(np.argmax(err))
    assert err.max() <= 3.0, f"{err.max():.2f} ulp at x={x[ok][worst]!r}"
    assert np.all(np.abs(y[bx <= -87.0]) <= 1.7e-38)      # exp(-87): 0 or a last normal
    s = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1e30, 1e30], np.float32)
    with fastnn.use_backend("reference"):
        want = F.softplus(s.astype(np.float64), beta, threshold)
    got = mod.softplus(s, beta, threshold, None)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30, equal_nan=True)


def test_bench_counts_the_mask_not_a_saved_array():
    """`fastnn bench` counts what the kernels move: relu / leaky_relu save N / 8 bytes of
    mask, so fwd+bwd moves x, y, d_out, d_input and the mask twice -- not five arrays --
    and each pass's working set is two arrays and the mask; sigmoid saves y (five arrays,
    the backward's read of y counted past the last-level cache only: reread_traffic)."""
    from fastnn.bench.activation import N, cases
    from fastnn.bench.core import reread_traffic
    rows = {c.op: c for c in cases()}
    for name in ("relu", "leaky_relu"):
        assert rows[f"{name} fwd+bwd"].bytes == 16.0 * N + N / 4.0
        assert rows[f"{name} fwd+bwd"].working_set == 8.0 * N + N / 8.0
        assert rows[f"{name} fwd"].bytes == 8.0 * N + N / 8.0
    assert rows["sigmoid fwd+bwd"].bytes == 16.0 * N + reread_traffic(4.0 * N)
    # every activation has its forward alone too (issue #16's forward goal), which moves
    # x and y (rrelu: and its slopes)
    ops = {op.rsplit(" ", 1)[0] for op in rows}
    assert all(f"{name} fwd" in rows and f"{name} fwd+bwd" in rows for name in ops)
    assert rows["sigmoid fwd"].bytes == 8.0 * N and rows["rrelu fwd"].bytes == 12.0 * N
    # the mask really is what the training forward keeps
    y, ctx = F.relu_fwd(np.ones(64, np.float32))
    assert ctx[1].nbytes == 8


@pytest.mark.parametrize("mod", VARIANTS)
@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "tanh"])
def test_lanewise_forms_depend_on_the_element_alone(mod, name):
    """The avx512 build picks the table form or the general form lane by lane (the GELUs
    pack the lanes past the table's cut and run the general form on them alone), so an
    element's result is a function of its value only: the same bits whatever its
    neighbours, its offset in a 16-lane vector, or the chunk it falls in.  Checked on
    3 x N(0, 1) inputs (most vectors mix both forms) with infinities, NaN, signed zeros
    and huge values sprinkled in, a length that is not a multiple of 16, shifted by one
    element; in place (out = x) gives the same bits; the backward the same way."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(100_003) * 3).astype(np.float32)
    x[rng.integers(0, x.size, 64)] = rng.choice(
        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 3.9375, -3.9375, 7.875],
                 np.float32), 64)
    dy = rng.standard_normal(x.size).astype(np.float32)

    def fwd(v, out=None):
        if name == "tanh":
            return mod.tanh(v, out)
        return mod.gelu(v, "tanh" if name == "gelu_tanh" else "none", out)

    def bwd(g, saved):
        return mod.tanh_backward(g, saved) if name == "tanh" else mod.gelu_backward(g, saved)

    with np.errstate(invalid="ignore", over="ignore"):
        y, saved = fwd(x)
        y1, saved1 = fwd(x[1:].copy())
        np.testing.assert_array_equal(y[1:], y1)            # NaN positions equal too
        xi = x.copy()
        yi, _ = fwd(xi, xi)
        assert yi is xi or np.shares_memory(yi, xi)
        np.testing.assert_array_equal(yi, y)
        d = bwd(dy, saved)
        d1 = bwd(dy[1:].copy(), saved1)
        np.testing.assert_array_equal(d[1:], d1)
    # and the values are the reference's, within test_math's bounds for |x| <= 5 (the
    # reference's float64 1 + erf cancels in the far negative tail: test_math holds the
    # whole range to an erfc oracle)
    finite = np.abs(x) < 5
    with fastnn.use_backend("reference"):
        xr = x[finite].astype(np.float64)
        want = (F.tanh(xr) if name == "tanh" else
                F.gelu(xr, approximate="tanh" if name == "gelu_tanh" else "none"))
    np.testing.assert_allclose(y[finite], want, rtol=4e-6, atol=1e-30)   # test_math: 2 x 2e-6
