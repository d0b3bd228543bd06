"""GroupNorm and BatchNorm where the mean dwarfs the spread.

The cpu kernels applied torch's form y = x * scale + (b - mean * scale): with a group of
equal values the variance is 0, scale = w / sqrt(eps) ~ 316 w, and the two 1e32-sized
terms cancel to float32 rounding noise -- a group of one element at 1e30 gave 2e25
instead of the bias (found by tests/test_fuzz.py's extreme-magnitude test, whose random
draws only sometimes make a one-element group).  Now y = (x - mean) * scale + b, as the
reference and the cuda kernels compute it; the backward likewise centres x first.
"""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F

BACKENDS = [b for b in fastnn.available_backends() if b != "reference"]
# the cuda kernels keep float32 statistics (Welford in the input's type, as torch's CUDA
# kernels): squared deviations overflow past |x| ~ 1e19, so 1e30 is a cpu-only case
HUGE_OK = [b for b in BACKENDS if b != "cuda"]


def _both(backend, fn):
    with fastnn.use_backend(backend):
        got = fn()
    with fastnn.use_backend("reference"):
        ref = fn()
    return [fastnn.to_numpy(g) if g is not None else None for g in got], ref


def _group_case(x, G):
    rng = np.random.default_rng(1)
    C = x.shape[1]
    w = rng.uniform(0.5, 2.0, C).astype(x.dtype)
    b = rng.standard_normal(C).astype(x.dtype)
    dy = rng.standard_normal(x.shape).astype(x.dtype)

    def run():
        y, ctx = F.group_norm_fwd(x, G, w, b)
        return (y,) + tuple(F.group_norm_bwd(ctx, dy))
    return run, b


@pytest.mark.parametrize("backend,magnitude", [(b, m) for b in BACKENDS for m in (1e3, -7.0)]
                         + [(b, 1e30) for b in HUGE_OK])
def test_group_norm_of_constant_groups_is_the_bias(backend, magnitude):
    """One-element groups (C = G, no spatial size) and groups of equal values: the output
    is the bias exactly, d_input is 0, as in the reference."""
    for shape, G in [((3, 2), 2), ((3, 4, 1), 4), ((2, 4, 5), 2)]:
        x = np.full(shape, magnitude, np.float32)
        run, b = _group_case(x, G)
        got, ref = _both(backend, run)
        bias = b.reshape((1, -1) + (1,) * (len(shape) - 2))
        np.testing.assert_array_equal(got[0], np.broadcast_to(bias, shape))
        np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=0)
        # d_input: rstd = eps^-1/2 ~ 316 scales dy, so float32 leaves ~1e-4 of the
        # reference's exact 0 for a one-element group
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-5, atol=1e-3)
        for g, r in zip(got[2:], ref[2:]):      # d_weight (0: x - mean is 0), d_bias
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_norm_with_a_large_offset_matches_the_reference(backend):
    """Groups of spread 1 around 1e4: the error is float32's rounding of x, not a
    cancellation of 1e4-sized terms."""
    rng = np.random.default_rng(0)
    x = (1e4 + rng.standard_normal((4, 8, 16))).astype(np.float32)
    run, _ = _group_case(x, 2)
    got, ref = _both(backend, run)
    np.testing.assert_allclose(got[0], ref[0], atol=5e-3)
    np.testing.assert_allclose(got[1], ref[1], atol=5e-3 * np.abs(ref[1]).max())


@pytest.mark.parametrize("backend", HUGE_OK)
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_a_constant_channel_at_1e30_is_the_bias(backend, training):
    rng = np.random.default_rng(2)
    x = np.full((4, 3, 5), 1e30, np.float32)
    x[:, 1] = rng.standard_normal((4, 5)) * 1e30          # one channel with a spread
    w = rng.uniform(0.5, 2.0, 3).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)

    def run():
        rm = np.full(3, 1e30, np.float32)
        rm[1] = 0.0
        rv = np.array([0.0, 1.0, 0.0], np.float32)
        with np.errstate(over="ignore"):     # the reference's running variance: 1e60
            y, _ = F.batch_norm_fwd(x, rm, rv, w, b, training=training)
        return (y,)
    got, ref = _both(backend, run)
    np.testing.assert_array_equal(got[0][:, 0], np.full((4, 5), b[0], np.float32))
    np.testing.assert_array_equal(got[0][:, 2], np.full((4, 5), b[2], np.float32))
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-4)
