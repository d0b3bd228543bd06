"""csrc/fnn_math.h's vectorisable float functions against float64, on every built variant.

Dense grids over each function's interesting range plus log-spaced magnitudes down to
subnormals, measured in float32 ulps of the correctly rounded result; then the extremes
(+-0 with their sign, +-inf, NaN, huge |x|) must match libm's answers exactly.
"""

import numpy as np
import pytest

from harness import variant_modules

scipy_special = pytest.importorskip("scipy.special")


VARIANTS = variant_modules("activation")

# name -> (float64 reference, grid, max ulp allowed)
_LOG = np.geomspace(1e-38, 1e2, 200_001)


def _grid(lo, hi, n=1_000_001, logs=True):
    parts = [np.linspace(lo, hi, n)]
    if logs:
        parts += [_LOG[_LOG < max(abs(lo), abs(hi))], -_LOG[_LOG < max(abs(lo), abs(hi))]]
    x = np.concatenate(parts)
    return x[(x >= lo) & (x <= hi)].astype(np.float32)


FUNCS = {
    "exp": (np.exp, _grid(-103.0, 88.7), 1.5),
    "expm1": (np.expm1, _grid(-20.0, 88.7), 2.0),
    "tanh": (np.tanh, _grid(-12.0, 12.0), 2.5),
    "erf": (scipy_special.erf, _grid(-6.0, 6.0), 1.5),
    "log1p": (np.log1p, np.concatenate([_grid(-0.99999, 10.0),
                                        np.geomspace(10, 3e38, 100_001).astype(np.float32)]), 1.5),
}


def ulp_error(got, ref):
    """|got - ref| in units of the float32 spacing at ref (ref in float64)."""
    ref32 = np.abs(ref).astype(np.float32)
    spacing = np.spacing(ref32).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref) / spacing


@pytest.mark.parametrize("mod", VARIANTS)
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_dense_grid_ulp(mod, name):
    ref_fn, x, bound = FUNCS[name]
    got = mod._math_hook(name, x)
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.float64))
    fin = np.isfinite(ref) & (np.abs(ref) < np.finfo(np.float32).max)
    assert np.all(np.isfinite(got[fin])), f"{name}: non-finite result where float64 is finite"
    err = ulp_error(got[fin], ref[fin])
    worst = int(np.argmax(err))
    assert err.max() <= bound, (f"{name}: {err.max():.2f} ulp at x={x[fin][worst]!r} "
                                f"(got {got[fin][worst]!r}, want {ref[fin][worst]!r})")


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-40, -1e-40, 1e-45,
                    -1e-45, 1.0, -1.0, 100.0, -100.0, 1e10, -1e10], np.float32)


@pytest.mark.parametrize("mod", VARIANTS)
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_extremes(mod, name):
    ref_fn = FUNCS[name][0]
    got = mod._math_hook(name, SPECIAL)
    with np.errstate(all="ignore"):
        ref = ref_fn(SPECIAL.astype(np.float64)).astype(np.float32)
    for x, g, r in zip(SPECIAL, got, ref):
        if np.isnan(r):
            assert np.isnan(g), f"{name}({x!r}) = {g!r}, want NaN"
        elif np.isinf(r) or r == 0:
            assert g == r and np.signbit(g) == np.signbit(r), f"{name}({x!r}) = {g!r}, want {r!r}"
        else:
            assert ulp_error(np.array([g]), np.array([ref_fn(np.float64(x))]))[0] <= 2, \
                f"{name}({x!r}) = {g!r}, want {r!r}"


@pytest.mark.parametrize("mod", VARIANTS)
def test_gauss_cdf(mod):
    """GELU's Phi(x) and exp(-x^2/2) (one shared exponential): relative error ~1e-6 in the
    body, a few 1e-6 far in the lower tail (the rounding of x^2/2 in the exponent)."""
    x = np.concatenate([np.linspace(-14, 14, 1_000_001), _LOG[_LOG < 14], -_LOG[_LOG < 14]])
    x = x.astype(np.float32)
    x64 = x.astype(np.float64)
    cdf = mod._math_hook("gauss_cdf", x).astype(np.float64)
    gauss = mod._math_hook("gauss", x).astype(np.float64)
    ref_cdf = 0.5 * scipy_special.erfc(-x64 / np.sqrt(2.0))
    ref_gauss = np.exp(-0.5 * x64 * x64)
    body = np.abs(x64) <= 5
    normal = ref_cdf > 1e-37
    rel = np.abs(cdf - ref_cdf)[normal] / ref_cdf[normal]
    assert rel[body[normal]].max() < 1e-6
    assert rel.max() < 6e-6
    normal = ref_gauss > 1e-37
    rel = np.abs(gauss - ref_gauss)[normal] / ref_gauss[normal]
    assert rel[body[normal]].max() < 1e-6
    assert rel.max() < 6e-6
    s = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30], np.float32)
    c = mod._math_hook("gauss_cdf", s)
    np.testing.assert_array_equal(c, np.array([1, 0, np.nan, 0.5, 0.5, 1, 0], np.float32))
    np.testing.assert_array_equal(mod._math_hook("gauss", s),
                                  np.array([0, 0, np.nan, 1, 1, 0, 0], np.float32))


@pytest.mark.parametrize("mod", VARIANTS)
def test_gelu_fwd(mod):
    """The float GELU forward x Phi(x) as the kernel computes it (the avx512 build: a
    16-lane table-driven polynomial for vectors with every |x| < 3.9375, x times the
    general 16-lane Phi otherwise -- the grid mixes both; elsewhere x times fnn_gauss_cdf_f)
    is held to test_gauss_cdf's bounds for Phi: relative error < 1e-6 for |x| <= 5, < 6e-6
    down to results of 1e-37.  The grid's length is not a multiple of 16 (the masked tail),
    and the special values match x * fnn_gauss_cdf_f's (signed zeros, infinities, NaN)."""
    x = np.concatenate([np.linspace(-14, 14, 1_000_003), _LOG[_LOG < 14], -_LOG[_LOG < 14]])
    x = x.astype(np.float32)
    x64 = x.astype(np.float64)
    y = mod._math_hook("gelu", x).astype(np.float64)
    ref = x64 * 0.5 * scipy_special.erfc(-x64 / np.sqrt(2.0))
    normal = np.abs(ref) > 1e-37
    rel = np.abs(y - ref)[normal] / np.abs(ref[normal])
    body = (np.abs(x64) <= 5)[normal]
    worst = int(np.argmax(rel))
    assert rel[body].max() < 1e-6, f"{rel[body].max():.3g}"
    assert rel.max() < 6e-6, f"{rel.max():.3g} at x={x[normal][worst]!r}"
    assert np.all(np.abs(y[~normal]) <= 1e-37)
    # zeros, subnormals and small values alone in a vector (the table form), then with
    # infinities, NaN and huge values (the general form), and in a short tail
    for s in (np.array([0.0, -0.0, 1e-40, -1e-40, 1e-45, 0.1, -0.1, 3.9, -3.9] * 2, np.float32),
              np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 20, -20, 1e-40,
                        -1e-40, 3.9375, -3.9375, 2.0, -2.0, 0.5, -0.5], np.float32),
              np.array([0.0, -0.0, np.nan, -30.0], np.float32)):
        got = mod._math_hook("gelu", s)
        with np.errstate(invalid="ignore"):
            want = s * mod._math_hook("gauss_cdf", s)          # -inf * 0: NaN, as torch
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        # (x = 1e-45: x / 2 is a tie between 0 and 1e-45 -- either is 1/2 ulp off)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=2e-45)


def _gelu_tanh_ref(x64):
    """GPT-2's tanh GELU x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), and its
    derivative, in float64 (the sigmoid form: no 1 + tanh cancellation)."""
    with np.errstate(over="ignore"):
        u = np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)
        s = 1 / (1 + np.exp(-2 * u))
    d = s + 2 * x64 * s * (1 - s) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x64 * x64)
    return x64 * s, d


@pytest.mark.parametrize("mod", VARIANTS)
def test_gelu_tanh(mod):
    """The tanh GELU's forward and derivative as the float kernels compute them (the avx512
    build: 16-lane table-driven polynomials for vectors with every |x| < 3.9375, the
    16-lane exp form otherwise -- the grid mixes both; elsewhere the per-lane exp form).
    Forward relative error for |x| < 3.5 < 5e-7 with the tables (~2e-7), < 2e-6 in the
    exp form; < 4e-6 to |x| = 5 and < 3e-5 down to results of 1e-30 (float's rounding of
    u ~ 70 moves exp(-2u) by ~1e-5 there).  The derivative likewise, relative to
    max(|d|, 1e-2) across its zero at x = -0.75: < 5e-7 with the tables, < 8e-6 in the exp
    form (5.3e-6 measured), < 1.6e-5 to |x| = 5.  Special values as the per-lane form: -inf * 0 is NaN, as torch's."""
    x = np.concatenate([np.linspace(-14, 14, 1_000_003), _LOG[_LOG < 14], -_LOG[_LOG < 14]])
    x = x.astype(np.float32)
    x64 = x.astype(np.float64)
    ref, dref = _gelu_tanh_ref(x64)
    y = mod._math_hook("gelu_tanh", x).astype(np.float64)
    d = mod._math_hook("gelu_tanh_grad", x).astype(np.float64)
    tables = mod.__name__.split(".")[-2] == "avx512"
    for got, want, floor, body in ((y, ref, 0.0, 2e-6), (d, dref, 1e-2, 8e-6)):
        big = np.abs(want) > 1e-30
        rel = np.abs(got - want)[big] / np.maximum(np.abs(want[big]), floor)
        ax = np.abs(x64[big])
        lim = 5e-7 if tables else body
        assert rel[ax < 3.5].max() < lim, f"{rel[ax < 3.5].max():.3g}"
        assert rel[ax <= 5].max() < 2 * body, f"{rel[ax <= 5].max():.3g}"
        assert rel.max() < 3e-5, f"{rel.max():.3g} at x={x[big][np.argmax(rel)]!r}"
        assert np.all(np.abs(got[~big]) <= 1e-29)
    s = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 20, -20, 1e-40, -1e-40,
                  3.9375, -3.9375, 2.0, -2.0, 0.5, -0.5], np.float32)
    with np.errstate(invalid="ignore"):
        got, gd = mod._math_hook("gelu_tanh", s), mod._math_hook("gelu_tanh_grad", s)
    assert np.isnan(got[[1, 2]]).all() and np.isnan(gd[[0, 1, 2]]).all()
    np.testing.assert_array_equal(got[[0, 3, 4, 5, 6, 8]],
                                  np.array([np.inf, 0, -0.0, 1e30, -0.0, -0.0], np.float32))
    np.testing.assert_array_equal(np.signbit(got[[3, 4, 6, 8, 10]]), [False, True, True, True, True])
    np.testing.assert_array_equal(gd[[3, 4, 5, 6, 7, 8]], np.array([0.5, 0.5, 1, 0, 1, 0], np.float32))
    r, dr = _gelu_tanh_ref(s[9:].astype(np.float64))
    np.testing.assert_allclose(got[9:], r, rtol=2e-6, atol=1e-45)
    np.testing.assert_allclose(gd[9:], dr, rtol=2e-6, atol=1e-7)
    # every lane in the table form's range, and a short (masked) tail
    t = np.array([0.0, -0.0, 1e-40, -1e-40, 0.1, -0.1, 3.9, -3.9, 0.7, -0.75] * 2, np.float32)
    r, dr = _gelu_tanh_ref(t.astype(np.float64))
    np.testing.assert_allclose(mod._math_hook("gelu_tanh", t), r, rtol=2e-6, atol=1e-45)
    np.testing.assert_allclose(mod._math_hook("gelu_tanh_grad", t), dr, rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(np.signbit(mod._math_hook("gelu_tanh", t)), np.signbit(t))


@pytest.mark.parametrize("mod", VARIANTS)
def test_gelu_grad(mod):
    """GELU's derivative Phi(x) + x phi(x) as the float backward computes it (the avx512
    build: a 16-lane table-driven polynomial where every |x| < 3.9375, the general 16-lane
    form otherwise; elsewhere fnn_gauss_cdf_f's).  It crosses zero at x = -0.7518 (GELU's
    minimum), so the body is held to an absolute bound and to the error relative to
    max(|d|, 1e-2); the negative tail past -1.5 to the relative bounds of test_gauss_cdf."""
    x = np.concatenate([np.linspace(-14, 14, 1_000_003), _LOG[_LOG < 14], -_LOG[_LOG < 14]])
    x = x.astype(np.float32)
    x64 = x.astype(np.float64)
    d = mod._math_hook("gelu_grad", x).astype(np.float64)
    ref = 0.5 * scipy_special.erfc(-x64 / np.sqrt(2.0)) + x64 * np.exp(-0.5 * x64 * x64) / np.sqrt(2 * np.pi)
    err = np.abs(d - ref)
    assert err.max() < 2.5e-7, f"{err.max():.3g} at x={x[np.argmax(err)]!r}"
    assert (err / np.maximum(np.abs(ref), 1e-2)).max() < 1e-5
    tail = (x64 <= -1.5) & (np.abs(ref) > 1e-37)
    rel = err[tail] / np.abs(ref[tail])
    assert rel[x64[tail] >= -5].max() < 1e-6
    assert rel.max() < 6e-6
    s = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 0.5, -0.5, -0.7518, 3.0,
                  -3.0, 1e-40, -1e-40, 2.0, -2.0, -3.9], np.float32)
    got = mod._math_hook("gelu_grad", s)
    with np.errstate(invalid="ignore"):      # +-inf: Phi + inf * 0 = NaN, as the reference
        want = mod._math_hook("gauss_cdf", s) + s * np.float32(0.3989423) * mod._math_hook("gauss", s)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got[[3, 4, 5, 6]], np.array([0.5, 0.5, 1, 0], np.float32))
    small = s.copy()
    small[:7] = 0.25                    # every lane in the table form's range
    got = mod._math_hook("gelu_grad", small)
    s64 = small.astype(np.float64)
    want = 0.5 * scipy_special.erfc(-s64 / np.sqrt(2.0)) + s64 * np.exp(-0.5 * s64 * s64) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mod", VARIANTS)
def test_exp_nonpos(mod):
    """exp of x - rowmax (softmax, cross-entropy, attention): <= 1.5 ulp down to the
    smallest normal result, 0 below -87.3 (a flushed subnormal), exact at 0 and -inf,
    NaN propagates.  The grid's length is not a multiple of 8, so the vector and the
    scalar tail forms are both checked."""
    x = -_grid(0.0, 87.3, n=2_000_003)
    got = mod._math_hook("exp_nonpos", x)
    ref = np.exp(x.astype(np.float64))
    err = ulp_error(got, ref)
    worst = int(np.argmax(err))
    assert err.max() <= 1.5, f"{err.max():.2f} ulp at x={x[worst]!r}"
    low = np.array([-87.31, -87.5, -88.0, -100.0, -1e30, -np.inf, -3e38, 0.0, -0.0, np.nan,
                    -1e-45, -1e-30, -1.0, -2.0, -10.0, -50.0, -87.0], np.float32)
    got = mod._math_hook("exp_nonpos", low)
    np.testing.assert_array_equal(got[:8], np.array([0, 0, 0, 0, 0, 0, 0, 1], np.float32))
    assert got[8] == 1 and np.isnan(got[9]) and got[10] == 1 and got[11] == 1
    assert ulp_error(got[12:], np.exp(low[12:].astype(np.float64))).max() <= 1.5


def test_hook_rejects_unknown_name():
    mod = VARIANTS[0].values[0]
    with pytest.raises(ValueError, match="unknown function"):
        mod._math_hook("sin", np.zeros(3, np.float32))


@pytest.mark.parametrize("mod", VARIANTS)
def test_sigmoid(mod):
    """fnn_sigmoidf (sigmoid, SiLU, softplus' backward, tanh-GELU): one exp of -|x| and one
    division, <= 3 ulp down to the smallest normal result; 0 below -87.3 (the exact value
    is below FLT_MIN), 1/2 at +-0, the limits at +-inf, NaN propagates.  The grid's length
    is not a multiple of 16: the vector and scalar-tail forms are both checked."""
    x = np.concatenate([np.linspace(-87.3, 40.0, 2_000_003), _LOG[_LOG < 87], -_LOG[_LOG < 87]])
    x = x.astype(np.float32)
    got = mod._math_hook("sigmoid", x)
    ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    err = ulp_error(got, ref)
    worst = int(np.argmax(err))
    assert err.max() <= 3.0, f"{err.max():.2f} ulp at x={x[worst]!r}"
    s = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -88.0, -1e30, 1e30, 100.0], np.float32)
    np.testing.assert_array_equal(mod._math_hook("sigmoid", s),
                                  np.array([0.5, 0.5, 1, 0, np.nan, 0, 0, 1, 1], np.float32))


@pytest.mark.parametrize("mod", VARIANTS)
def test_gelu_thread_grain(mod):
    """The erf GELU's 16-lane table form (avx512) is ~3x cheaper an element, so it stays on
    one thread up to 2 x 16384 elements (a team's wake-up costs more below); the other
    builds keep the math ops' 8192 a thread."""
    avx512 = mod.__name__.split(".")[-2] == "avx512"
    assert mod._gelu_grain() == (1 << 14 if avx512 else 1 << 13)
