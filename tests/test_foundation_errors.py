"""Bad input to the first slice: clear ValueError/TypeError naming the argument."""
import numpy as np
import pytest

import fastnn.functional as F
from fastnn import nn

f32 = np.float32


@pytest.mark.parametrize("call, exc, match", [
    (lambda: F.linear(np.ones((2, 3), f32), np.ones((4, 5), f32)), ValueError, "in_features"),
    (lambda: F.linear(np.ones((2, 3), f32), np.ones((4,), f32)), ValueError, "weight must be 2-D"),
    (lambda: F.linear(np.ones((2, 3), f32), np.ones((4, 3), f32), np.ones(5, f32)), ValueError, "bias"),
    (lambda: F.linear(np.ones((2, 3), np.int64), np.ones((4, 3), f32)), TypeError, "input"),
    (lambda: F.linear(np.ones((2, 3), f32), np.ones((4, 3), np.float64)), TypeError, "weight"),
    (lambda: F.linear("abc", np.ones((4, 3), f32)), TypeError, "input"),
    (lambda: F.linear(np.array([["a"]], dtype=object), np.ones((4, 3), f32)), TypeError, "input"),
    (lambda: F.linear(np.float32(3.0), np.ones((4, 3), f32)), TypeError, "input"),
    (lambda: F.layer_norm(np.ones((2, 3), f32), 4), ValueError, "normalized_shape"),
    (lambda: F.layer_norm(np.ones((2, 3), f32), 3, np.ones(4, f32)), ValueError, "weight"),
    (lambda: F.layer_norm(np.ones((2, 3), f32), 3, None, np.ones(2, f32)), ValueError, "bias"),
    (lambda: F.layer_norm(np.ones((2, 3), f32), 3, eps=0.0), ValueError, "eps"),
    (lambda: F.layer_norm(np.ones((2, 3), f32), 3, eps=-1e-5), ValueError, "eps"),
    (lambda: F.layer_norm(np.ones((2, 3), f32), "3"), TypeError, "normalized_shape"),
    (lambda: F.layer_norm(np.ones((2, 3), f32), 3, np.ones(3, np.float64)), TypeError, "weight"),
    (lambda: F.layer_norm(np.ones((2, 3), dtype=bool), 3), TypeError, "input"),
    (lambda: F.layer_norm(np.ones((2, 3), dtype=complex), 3), TypeError, "input"),
    (lambda: F.softmax(np.ones((2, 3), f32), 2), ValueError, "dim"),
    (lambda: F.softmax(np.ones((2, 3), f32), 1.0), TypeError, "dim"),
    (lambda: F.log_softmax(np.ones((2, 3), np.int32)), TypeError, "input"),
    (lambda: F.gelu(np.ones(3, f32), approximate="fast"), ValueError, "approximate"),
    (lambda: nn.GELU("x"), ValueError, "approximate"),
    (lambda: nn.Linear(-1, 3), ValueError, "in_features"),
    (lambda: nn.Linear(2.5, 3), TypeError, "in_features"),
])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_views_and_readonly_inputs_give_right_answers():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 10)).astype(f32)
    ro = x.copy()
    ro.flags.writeable = False
    ref = F.layer_norm(x, 10)
    np.testing.assert_allclose(F.layer_norm(ro, 10), ref, rtol=1e-6)
    np.testing.assert_allclose(F.layer_norm(np.asfortranarray(x), 10), ref, rtol=1e-6)
    np.testing.assert_allclose(F.softmax(x.T, 0), F.softmax(x, 1).T, rtol=1e-6)
    big = np.zeros(x.size * 4 + 1, np.uint8)
    mis = big[1:1 + x.size * 4].view(f32).reshape(x.shape)
    mis[...] = x
    assert not mis.flags.aligned
    np.testing.assert_allclose(F.layer_norm(mis, 10), ref, rtol=1e-6)
    swapped = x.astype(x.dtype.newbyteorder(">"))
    np.testing.assert_allclose(F.layer_norm(swapped, 10), ref, rtol=1e-6)
