"""layer_norm_infer (F.layer_norm's fast path) equals layer_norm's output on every backend."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn._backend import backend


@pytest.mark.parametrize("be_name", ["reference", "cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 64, 65, 1000])          # stack and heap scratch
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_infer_equals_forward(be_name, dtype, rows, affine):
    be = backend(be_name)
    rng = np.random.default_rng(rows)
    D = 96
    x = (rng.standard_normal((rows, D)) * 3 + 1).astype(dtype)
    w = rng.standard_normal(D).astype(dtype) if affine in ("both", "weight") else None
    b = rng.standard_normal(D).astype(dtype) if affine in ("both", "bias") else None
    want = be.layer_norm(x, w, b, D, 1e-5)[0]
    got = be.layer_norm_infer(x, w, b, D, 1e-5)
    np.testing.assert_array_equal(got, want)
    with fastnn.use_backend(be_name):
        np.testing.assert_array_equal(F.layer_norm(x, (D,), w, b), want)


def test_fast_path_falls_back_for_other_inputs():
    """Non-contiguous input, several normalised dims: the validated path, same numbers."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4, 10)).astype(np.float32)
    ref = backend("reference")
    want = ref.layer_norm(np.ascontiguousarray(x), None, None, 40, 1e-5)[0]
    np.testing.assert_allclose(F.layer_norm(x, (4, 10)), want, rtol=1e-5, atol=1e-5)
    xt = rng.standard_normal((10, 6)).astype(np.float32).T
    want = ref.layer_norm(np.ascontiguousarray(xt), None, None, 10, 1e-5)[0]
    np.testing.assert_allclose(F.layer_norm(xt, (10,)), want, rtol=1e-5, atol=1e-5)
