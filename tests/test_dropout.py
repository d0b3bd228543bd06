"""Dropout: counter-based masks identical across backends and thread counts, scaling, errors."""
import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn
from fastnn._random import philox_uniform


def _run(backend, threads, x, p, seed=11, dy=None):
    old = fastnn.get_num_threads()
    try:
        fastnn.set_num_threads(threads)
        fastnn.manual_seed(seed)
        with fastnn.use_backend(backend):
            y, ctx = F.dropout_fwd(x, p)
            dx = F.dropout_bwd(ctx, np.ones_like(x) if dy is None else dy)
    finally:
        fastnn.set_num_threads(old)
    return y, dx


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_same_mask_on_every_backend_and_thread_count(dtype, p):
    # big enough for the cpu kernel to split the work over threads
    x = (np.random.default_rng(0).random((301, 509)) + 0.5).astype(dtype)   # no zeros in x
    masks = {}
    for backend in ("reference", "cpu"):
        for threads in (1, 2, 3):
            y, dx = _run(backend, threads, x, p)
            masks[backend, threads] = (y != 0, dx != 0)
    ref_y, ref_dx = masks["reference", 1]
    np.testing.assert_array_equal(ref_y, ref_dx)          # backward reuses the forward mask
    for k, (my, mdx) in masks.items():
        np.testing.assert_array_equal(my, ref_y, err_msg=f"forward mask of {k}")
        np.testing.assert_array_equal(mdx, ref_dx, err_msg=f"backward mask of {k}")
    # the mask is exactly "uniform of element i >= p" from the Philox twin
    fastnn.manual_seed(11)
    seed, offset = fastnn._random.next_offset()
    u = philox_uniform(x.size, seed, offset).reshape(x.shape)
    np.testing.assert_array_equal(ref_y, u >= p)


def test_cpu_outputs_bit_identical_across_threads():
    x = np.random.default_rng(1).standard_normal((257, 1031)).astype(np.float32)
    y1, d1 = _run("cpu", 1, x, 0.37, dy=x)
    y2, d2 = _run("cpu", 2, x, 0.37, dy=x)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(d1, d2)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_inverted_scaling_and_statistics(backend):
    x = np.ones((400, 500), np.float64)
    y, dx = _run(backend, 2, x, 0.25)
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(dx, y)                    # d(x*m)/dx = m
    assert abs(kept.mean() - 0.75) < 0.005                  # 200k draws: ~5 sigma
    assert abs(y.mean() - 1.0) < 0.01


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_p0_and_p1_exact(backend, dtype):
    x = np.random.default_rng(2).standard_normal((33, 65)).astype(dtype)
    y, dx = _run(backend, 2, x, 0.0, dy=x)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(dx, x)
    assert y is x          # as torch 2.13: p == 0 returns the input itself, no pass
    y, dx = _run(backend, 2, x, 1.0, dy=x)
    np.testing.assert_array_equal(y, np.zeros_like(x))
    np.testing.assert_array_equal(dx, np.zeros_like(x))
    assert y.dtype == dtype


def test_eval_is_identity_and_successive_calls_differ():
    x = np.random.default_rng(3).standard_normal((50, 60)).astype(np.float32)
    assert F.dropout(x, 0.5, training=False) is x
    fastnn.manual_seed(4)
    a = F.dropout(x, 0.5)
    b = F.dropout(x, 0.5)
    assert not np.array_equal(a != 0, b != 0)
    fastnn.manual_seed(4)
    np.testing.assert_array_equal(F.dropout(x, 0.5), a)
    fastnn.manual_seed(5)
    assert not np.array_equal(F.dropout(x, 0.5) != 0, a != 0)


def test_noncontiguous_input():
    x = np.random.default_rng(4).standard_normal((40, 80))
    fastnn.manual_seed(1)
    a = F.dropout(x[:, ::2], 0.4)
    fastnn.manual_seed(1)
    b = F.dropout(np.ascontiguousarray(x[:, ::2]), 0.4)
    np.testing.assert_array_equal(a, b)


def test_module_train_eval():
    m = nn.Dropout(0.5)
    x = np.random.default_rng(5).standard_normal((20, 30)).astype(np.float32)
    fastnn.manual_seed(0)
    y = m(x)
    dx = m.backward(np.ones_like(x))
    np.testing.assert_array_equal(y != 0, dx != 0)
    np.testing.assert_allclose(dx[dx != 0], 2.0)
    with pytest.raises(RuntimeError, match="backward"):
        m.backward(np.ones_like(x))
    m.eval()
    np.testing.assert_array_equal(m(x), x)
    with pytest.raises(RuntimeError):
        m.backward(np.ones_like(x))
    assert "p=0.5" in repr(m)
    md = nn.Dropout(0.2).double()
    assert md(x.astype(np.float64)).dtype == np.float64


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_bad_p(p):
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, p)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(p)


def test_bad_types():
    with pytest.raises(TypeError, match="p must be a real number"):
        F.dropout(np.ones(3), "0.5")
    with pytest.raises(TypeError, match="input"):
        F.dropout(np.ones(3, np.int64), 0.5)
    fastnn.manual_seed(0)
    _, ctx = F.dropout_fwd(np.ones((2, 3)), 0.5)
    with pytest.raises(ValueError, match="grad_output"):
        F.dropout_bwd(ctx, np.ones((3, 2)))
