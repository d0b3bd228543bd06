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


def test_fast_path_test_accepts_and_refuses():
    """norm_fast_args: D for the plain case; -1 whenever the full validation must run
    (which then raises or normalises exactly as before)."""
    from fastnn._validate import norm_fast_args
    x = np.zeros((4, 6), np.float32)
    w = np.ones(6, np.float32)
    assert norm_fast_args(x, 6, w, None, 1e-5) == 6
    assert norm_fast_args(x, (6,), None, w, 1e-5) == 6
    refused = [
        (x, (2, 3), w, None, 1e-5),                    # several dims
        (x, 5, w, None, 1e-5),                         # wrong size
        (x, True, None, None, 1e-5),                   # bool is not a size
        (x, 6, w, None, 0.0),                          # eps <= 0
        (x, 6, w, None, 1),                            # eps not a float
        (x, 6, w.astype(np.float64), None, 1e-5),      # mixed dtypes
        (x, 6, np.ones(5, np.float32), None, 1e-5),    # weight of the wrong size
        (x, 6, None, np.ones((1, 6), np.float32), 1e-5),
        (x.T, 4, None, None, 1e-5),                    # not C-contiguous
        (x.astype(np.int32), 6, None, None, 1e-5),
        (np.float32(1.0), 1, None, None, 1e-5),
    ]
    for args in refused:
        assert norm_fast_args(*args) == -1, args
    with pytest.raises(ValueError):
        F.layer_norm(x, 5)
    with pytest.raises(ValueError):
        F.layer_norm(x, 6, eps=0.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_streamed_and_plain_stores_give_the_same_bits(dtype):
    """layer_norm forward / backward and (log_)softmax backward write an output from a
    machine-dependent size on (fnn_stream.h: 16 MiB, or half the last-level cache) with
    non-temporal stores through a stack row, each thread fencing once after its rows.
    Both paths, forced on small odd shapes (rows that start off the vector boundary; the
    larger one split over 2 threads), give the same bits; 0 restores the machine's
    threshold, which is at least 16 MiB."""
    import importlib
    import fastnn
    be = backend("cpu")
    mods = [importlib.import_module(be.layer_norm.__module__),
            importlib.import_module(be.softmax_backward.__module__)]
    rng = np.random.default_rng(7)
    D = 301
    w = rng.standard_normal(D).astype(dtype)
    b = rng.standard_normal(D).astype(dtype)
    threads = fastnn.get_num_threads()
    fastnn.set_num_threads(2)
    try:
        for rows in (67, 389):
            x = rng.standard_normal((rows, D)).astype(dtype)
            dy = rng.standard_normal((rows, D)).astype(dtype)
            runs = []
            for threshold in (1, 1 << 60):
                for m in mods:
                    m._stream_min_bytes(threshold)
                try:
                    y, saved = be.layer_norm(x, w, b, D, 1e-5)
                    out = [y, *be.layer_norm_backward(dy, saved)]
                    for fwd, bwd in ((be.softmax, be.softmax_backward),
                                     (be.log_softmax, be.log_softmax_backward)):
                        s, saved = fwd(x, 1)
                        out += [s, bwd(dy, saved)]
                finally:
                    for m in mods:
                        m._stream_min_bytes(0)
                runs.append(out)
            for a, c in zip(*runs):
                np.testing.assert_array_equal(a, c)
    finally:
        fastnn.set_num_threads(threads)
    for m in mods:
        assert m._stream_min_bytes() >= 16 << 20


def test_stream_threshold_is_half_the_sysfs_last_level_cache():
    """The default threshold is max(16 MiB, half the last-level cache), the cache size read
    from Linux's sysfs as fastnn bench reads it (not glibc's sysconf, which said 256 MiB
    for a Zen 3 VM's 32 MiB L3 and so kept a 25 MiB layer_norm output from streaming)."""
    import importlib
    from fastnn.bench.core import last_level_cache_bytes
    be = backend("cpu")
    for m in (importlib.import_module(be.layer_norm.__module__),
              importlib.import_module(be.softmax_backward.__module__)):
        llc = m._llc_bytes()
        assert llc >= 0
        sysfs = last_level_cache_bytes()
        if sysfs:                  # Linux with sysfs cache entries: the same reading
            assert llc == sysfs
        m._stream_min_bytes(0)
        assert m._stream_min_bytes() == max(16 << 20, llc // 2)
