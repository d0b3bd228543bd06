"""Backend selection, the op tables, threads, seeds."""
import os
import re
import threading

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn._backend import backend

# Ops the cuda backend does not implement yet.  This list must equal the cuda backend's
# fallbacks exactly (so it shrinks as kernels land, and nothing slips in unnoticed);
# issue "GPU path" is done when it is empty.
CUDA_PENDING = set()   # e.g. set() | {"new_op", "new_op_backward"} while a kernel is pending


def test_cpu_compiles_every_op():
    """No op of the cpu backend falls back to the NumPy reference."""
    cpu = backend("cpu")
    assert cpu.fallbacks == (), f"cpu ops served by the reference: {cpu.fallbacks}"
    assert set(cpu.ops) == set(backend("reference").ops)


def test_cuda_fallback_table_is_tracked():
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or the simulator) is not available here")
    cuda = backend("cuda")
    assert set(cuda.fallbacks) == CUDA_PENDING
    assert set(cuda.ops) == set(backend("reference").ops)


def test_backend_selection():
    assert fastnn.get_backend() == "cpu"
    with fastnn.use_backend("reference"):
        assert fastnn.get_backend() == "reference"
        with fastnn.use_backend("cpu"):
            assert fastnn.get_backend() == "cpu"
        assert fastnn.get_backend() == "reference"
    assert fastnn.get_backend() == "cpu"
    fastnn.set_backend("reference")
    try:
        assert fastnn.get_backend() == "reference"
    finally:
        fastnn.set_backend("cpu")
    assert "cpu" in fastnn.available_backends() and "reference" in fastnn.available_backends()


def test_use_backend_is_per_thread():
    seen = {}

    def worker():
        seen["other"] = fastnn.get_backend()

    with fastnn.use_backend("reference"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen["other"] == "cpu"


def test_backend_errors():
    with pytest.raises(ValueError, match="unknown backend"):
        fastnn.set_backend("tpu")
    with pytest.raises(TypeError):
        fastnn.set_backend(3)


def test_num_threads_roundtrip_and_determinism():
    old = fastnn.get_num_threads()
    x = np.random.default_rng(0).standard_normal((512, 768)).astype(np.float32)
    w = np.ones(768, np.float32)
    b = np.zeros(768, np.float32)
    try:
        results = []
        for n in (1, 2, 3):
            fastnn.set_num_threads(n)
            assert fastnn.get_num_threads() == n
            y, ctx = F.layer_norm_fwd(x, 768, w, b)
            results.append((y,) + tuple(F.layer_norm_bwd(ctx, x)))
        for r in results[1:]:
            for a, b_ in zip(r, results[0]):
                np.testing.assert_array_equal(a, b_)
    finally:
        fastnn.set_num_threads(old)
    with pytest.raises(ValueError):
        fastnn.set_num_threads(0)
    with pytest.raises(TypeError):
        fastnn.set_num_threads(1.5)


def test_manual_seed_drives_init():
    fastnn.manual_seed(3)
    a = fastnn.nn.Linear(4, 3).weight.data.copy()
    fastnn.manual_seed(3)
    b = fastnn.nn.Linear(4, 3).weight.data.copy()
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError):
        fastnn.manual_seed("x")


def test_philox_known_answer():
    """Philox4x32-10 known-answer vectors (Random123's kat_vectors)."""
    from fastnn._random import philox4x32
    out = philox4x32(0, 0, 0, 0, 0, 0)
    assert [int(v) for v in out] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    out = philox4x32(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    assert [int(v) for v in out] == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


# ------------------------------------------------------------------ cuda inference kernels
# The inference-only ops return just their output and have no backward, so they are
# compared here (cuda against the reference, non-contiguous host views and device inputs,
# float32 and float64) rather than through the F-pair harness.
_DT = [np.float32, np.float64]
_DT_IDS = ["f32", "f64"]


def _cuda_or_skip():
    if "cuda" not in fastnn.available_backends():
        pytest.skip("the cuda backend (numba-cuda or the simulator) is not available here")
    return backend("cuda"), backend("reference")


def _strided(a):
    """A non-contiguous view holding ``a`` (every other column of a wider array)."""
    wide = np.full(a.shape[:-1] + (2 * a.shape[-1],), np.nan, a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def _close(got, want, dt):
    got = fastnn.to_numpy(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = dict(rtol=2e-5, atol=2e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("dt", _DT, ids=_DT_IDS)
def test_cuda_add_layer_norm_infer(dt):
    cu, ref = _cuda_or_skip()
    rng = np.random.default_rng(0)
    for shape, affine in (((3, 5, 11), True), ((4, 40), False), ((0, 6), True)):
        x, r = (rng.standard_normal(shape).astype(dt) for _ in range(2))
        D = shape[-1]
        w = rng.standard_normal(D).astype(dt) if affine else None
        b = rng.standard_normal(D).astype(dt) if affine else None
        want = ref.add_layer_norm_infer(x, r, w, b, D, 1e-5)
        _close(cu.add_layer_norm_infer(_strided(x), fastnn.to_device(r), w, b, D, 1e-5), want, dt)


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("dt", _DT, ids=_DT_IDS)
def test_cuda_linear_act_infer(act, dt):
    cu, ref = _cuda_or_skip()
    from fastnn.cuda import _gemm
    rng = np.random.default_rng(1)
    for (M, K, N), tiled in (((5, 7, 3), False), ((9, 13, 7), True), ((0, 4, 3), False)):
        x = rng.standard_normal((M, K)).astype(dt)
        wt = rng.standard_normal((K, N)).astype(dt)
        b = rng.standard_normal(N).astype(dt)
        _gemm.SIM_TILED[0] = tiled      # the tiled kernel's epilogue (real GPUs) too
        try:
            for bias in (b, None):
                want = ref.linear_act_infer(x, wt, bias, act)
                _close(cu.linear_act_infer(_strided(x), wt, bias, act), want, dt)
        finally:
            _gemm.SIM_TILED[0] = False
    with pytest.raises(ValueError, match="unknown activation"):
        cu.linear_act_infer(x, wt, b, "tanh")


@pytest.mark.parametrize("dt", _DT, ids=_DT_IDS)
def test_cuda_skinny_linear(dt):
    cu, ref = _cuda_or_skip()
    rng = np.random.default_rng(2)
    for M, K, N in ((1, 37, 5), (3, 6, 9), (2, 0, 4), (0, 5, 6), (2, 5, 0)):
        x = rng.standard_normal((M, K)).astype(dt)
        for io in (True, False):
            w = rng.standard_normal((K, N) if io else (N, K)).astype(dt)
            for b in (rng.standard_normal(N).astype(dt), None):
                want = ref.skinny_linear(x, w, b, io)
                _close(cu.skinny_linear(_strided(x) if x.size else x, w, b, io), want, dt)


@pytest.mark.parametrize("dt", _DT, ids=_DT_IDS)
def test_cuda_packed_linear_infer(dt):
    cu, ref = _cuda_or_skip()
    rng = np.random.default_rng(4)
    for M, K, N in ((1, 7, 5), (3, 6, 17), (2, 0, 4), (0, 5, 6), (2, 5, 0), (4, 3, 32)):
        x = rng.standard_normal((M, K)).astype(dt)
        for io in (True, False):
            w = rng.standard_normal((K, N) if io else (N, K)).astype(dt)
            packed = cu.pack_linear_weight(w, io)
            want_packed = ref.pack_linear_weight(w, io)
            np.testing.assert_array_equal(cu.to_host(packed), want_packed)
            for b in (rng.standard_normal(N).astype(dt), None):
                for act in ("none", "gelu"):
                    want = ref.packed_linear_infer(x, want_packed, N, b, act)
                    _close(cu.packed_linear_infer(_strided(x) if x.size else x, packed, N, b, act),
                           want, dt)


@pytest.mark.parametrize("seq_first", [False, True], ids=["batch_first", "seq_first"])
@pytest.mark.parametrize("dt", _DT, ids=_DT_IDS)
def test_cuda_varlen_attention(dt, seq_first):
    cu, ref = _cuda_or_skip()
    rng = np.random.default_rng(3)
    H, E = 2, 3

    def views(B, L, S):
        # q, k, v as column views of one fused projection (read in place on the host)
        qkv = rng.standard_normal((B, max(L, S), 3 * H * E)).astype(dt)
        if seq_first:
            qkv = np.ascontiguousarray(qkv.transpose(1, 0, 2))
        return tuple(qkv[..., i * H * E:(i + 1) * H * E] for i in range(3))

    # packed: B = 1, sequences one after another (a zero-length one, a 1-row one, a gap)
    lens = np.array([3, 0, 5, 1])
    starts = np.array([0, 3, 4, 10])
    q, k, v = views(1, 11, 11)
    for causal in (False, True):
        args = (starts, lens, starts, lens, H, seq_first, causal, 0.4)
        _close(cu.varlen_attention(q, k, v, *args), ref.varlen_attention(q, k, v, *args), dt)
    # padded: one range per batch entry, key ranges of their own (right-padded keys, an
    # empty key range, an offset query range)
    q, k, v = views(3, 6, 6)
    qs, ql = np.array([0, 1, 0]), np.array([6, 4, 2])
    ks, kl = np.array([0, 2, 0]), np.array([4, 3, 0])
    for causal in (False, True):
        args = (qs, ql, ks, kl, H, seq_first, causal, 0.7)
        _close(cu.varlen_attention(q, k, v, *args), ref.varlen_attention(q, k, v, *args), dt)


def test_cuda_varlen_attention_through_functional():
    """F.varlen_attention on device arrays dispatches to the cuda kernel."""
    cu, ref = _cuda_or_skip()
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 7, 4)) for _ in range(3))
    lens, starts = np.array([4, 3]), np.array([0, 4])
    got = F.varlen_attention(*(fastnn.to_device(a) for a in (q, k, v)), 2, starts, lens)
    assert not isinstance(got, np.ndarray)
    want = ref.varlen_attention(q, k, v, starts, lens, starts, lens, 2, False, False, 0.5 ** 0.5)
    _close(got, want, np.float64)


# ------------------------------------------------------------------ 32-bit kernel indices
def test_cuda_launch_arguments_are_int32_and_large_sizes_are_refused():
    """Kernels index in 32 bits (issue 17): a launch passes its integers as int32 and
    refuses, with a clear error, an integer or a device array 32-bit indices cannot
    address."""
    _cuda_or_skip()
    from fastnn.cuda import _kit
    u = np.uint64(1 << 40)
    args = _kit._index_args("k", (3, np.int64(5), True, u, np.float32(2.5)))
    assert [type(a) for a in args] == [np.int32, np.int32, bool, np.uint64, np.float32]
    assert args[3] == u                            # Philox words stay uint64
    with pytest.raises(ValueError, match=r"k: integer argument 1 = 2147483648 is outside"):
        _kit._index_args("k", (0, 1 << 31))
    _kit._index_args("k", (0, (1 << 31) - 1))      # the largest size that fits

    class Huge:                                    # a device array of 2**31 elements
        shape = (1 << 16, 1 << 15)
        size = 1 << 31

        def copy_to_host(self):                    # pragma: no cover - never called
            raise AssertionError

    with pytest.raises(ValueError, match="32-bit integers and take at most 2\\*\\*31 - 1"):
        _kit._index_args("k", (Huge(), 3))
    # through a real op: a size past int32 is refused before any launch
    with pytest.raises(ValueError, match="outside the 32-bit index range"):
        _kit._rowsum_kernel(np.float32)[1, 1](_kit.dev(np.zeros((1, 1), np.float32)),
                                              _kit.dev(np.zeros(1, np.float32)), 1 << 31, 1)


def test_cuda_adaptive_pool_refuses_window_products_past_32_bits():
    _cuda_or_skip()
    from fastnn.cuda.ops import pool
    with pytest.raises(ValueError, match="below 2\\*\\*31"):
        pool._adaptive_sizes(1 << 16, 4, 1 << 16, 2)
    pool._adaptive_sizes(1 << 10, 4, 1 << 10, 2)


# ------------------------------------------------------------------ layout ops (issue 20)


def test_nn_and_functional_never_import_cuda_nor_branch_on_device():
    """Device helpers are backend ops (fastnn/reference/layout.py): the layers call
    ``placed(a).<op>`` and never import fastnn.cuda; the files that used to branch on
    where an array lives no longer do."""
    imports = re.compile(r"fastnn\.cuda|from \.\.cuda\b|from \.\. import (\w+, )*cuda\b|"
                         r"^\s*import cuda\b", re.M)
    branches = re.compile(r"\bis_device\(|\.name == [\"']cuda[\"']")
    bad = []
    pkg = os.path.dirname(os.path.abspath(fastnn.__file__))     # the tree or an installed copy
    for sub in ("nn", "functional"):
        d = os.path.join(pkg, sub)
        for fn in sorted(os.listdir(d)):
            if not fn.endswith(".py"):
                continue
            src = open(os.path.join(d, fn)).read()
            for m in imports.finditer(src):
                bad.append(f"{sub}/{fn}: imports {m.group(0)!r}")
    pkg = os.path.dirname(os.path.abspath(fastnn.__file__))     # the tree or an installed copy
    for sub in ("nn", "functional"):
        d = os.path.join(pkg, sub)
        for fn in sorted(os.listdir(d)):
            if fn.endswith(".py"):
                src = open(os.path.join(d, fn)).read()
                for m in branches.finditer(src):
                    bad.append(f"{sub}/{fn}: branches on the device ({m.group(0)!r})")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", ["reference", "cpu", "cuda"])
@pytest.mark.parametrize("dt", _DT, ids=_DT_IDS)
def test_layout_ops(name, dt):
    if name not in fastnn.available_backends():
        pytest.skip(f"the {name} backend is not available here")
    be = backend(name)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 3, 4)).astype(dt)
    b = rng.standard_normal((3, 4)).astype(dt)
    h = fastnn.to_numpy

    def put(x):
        return fastnn.to_device(x) if name == "cuda" else x

    np.testing.assert_array_equal(h(be.add(put(a), put(b))), a + b)
    np.testing.assert_array_equal(h(be.add(put(a), b)), a + b)    # a host operand joins
    np.testing.assert_array_equal(h(be.add(put(b), put(b))), b + b)
    with pytest.raises(ValueError, match="suffix"):
        be.add(put(b), put(a))
    d = put(a.copy())
    assert be.accumulate(d, put(a)) is d
    np.testing.assert_array_equal(h(d), a + a)
    np.testing.assert_array_equal(h(be.transpose2d(put(b))), b.T)
    np.testing.assert_array_equal(h(be.swap_last_two(put(a))), a.transpose(0, 2, 1))
    out = be.broadcast_to(put(b), (2, 3, 4))
    np.testing.assert_array_equal(h(out), np.broadcast_to(b, (2, 3, 4)))
    assert be.broadcast_to(put(a), (2, 3, 4)) is not None
    assert isinstance(be.to_host(put(a)), np.ndarray)
    assert tuple(be.to_backend(np.array(3, np.int64)).shape) == ()   # 0-d stays 0-d
    moved = be.to_backend(a[:, ::2], np.float64)
    assert (type(moved) is np.ndarray) == (name != "cuda")
    np.testing.assert_array_equal(h(moved), a[:, ::2].astype(np.float64))
    bad = np.array([0.5, 1.5, -1.0], dt)
    assert be.first_outside(bad, 0.0, 1.0) == (None if name == "cuda" else 1.5)
    assert be.first_outside(np.array([0.0, np.nan, 1.0], dt), 0.0, 1.0) is None

    # column blocks of a fused projection: views on the host, device copies on cuda
    c = rng.standard_normal((2, 3, 9)).astype(dt)
    parts = be.split_columns(put(c), (2, 3, 4))
    for got, want in zip(parts, (c[..., :2], c[..., 2:5], c[..., 5:])):
        np.testing.assert_array_equal(h(got), want)
    if name != "cuda":
        assert all(np.shares_memory(p_, c) for p_ in parts)
    with pytest.raises(ValueError, match="cover"):
        be.split_columns(put(c), (2, 3))
    joined = be.concat_columns(parts)
    np.testing.assert_array_equal(h(joined), c)
    cl = be.clone(put(a))
    np.testing.assert_array_equal(h(cl), a)
    assert cl is not a
    other = np.float64 if np.dtype(dt) == np.float32 else np.float32
    cast = be.cast(put(a), other)
    assert np.dtype(cast.dtype) == np.dtype(other)
    np.testing.assert_array_equal(h(cast), a.astype(other))
    g = put(np.array([1.0, np.inf, -2.0, np.nan], dt))
    assert be.scale_(g, 0.5) is g
    np.testing.assert_array_equal(h(g), np.array([0.5, np.inf, -1.0, np.nan], dt))
    be.scale_(g, 0.0)                           # inf * 0 -> nan, as torch
    assert np.isnan(h(g)[1])
    g = put(np.array([3.0, -3.0, 0.25, np.nan], dt))
    assert be.clamp_(g, -1.0, 1.0) is g
    np.testing.assert_array_equal(h(g), np.array([1.0, -1.0, 0.25, np.nan], dt))
    s0 = be.scalar_result(put(np.array(2.5, dt)))
    assert (type(s0) is float) == (name != "cuda") and float(h(s0)) == 2.5
    dst = put(np.zeros((2, 3, 4), dt))
    assert be.copy_into(dst, put(a)) is dst
    np.testing.assert_array_equal(h(dst), a)
    z = put(a.copy())
    assert be.zero_(z) is z
    np.testing.assert_array_equal(h(z), np.zeros_like(a))
    o = put(np.zeros((2, 3, 4), dt))
    assert be.out_target(o, put(a)) is o
    with pytest.raises(ValueError, match="shape"):
        be.out_target(put(np.zeros((2, 3), dt)), put(a))
    if name != "cuda":
        assert be.out_target(a, a) is a            # exact aliasing: in place
        assert be.out_target(np.zeros((4, 3, 2), dt).transpose(2, 1, 0), a) is None
        with pytest.raises(ValueError, match="overlaps"):
            be.out_target(a.reshape(-1)[::-1].reshape(2, 3, 4), a)


def test_layout_accumulate_into_host_array_on_cuda():
    """A host gradient accumulating a device one: the result lands in the host array."""
    cu, _ = _cuda_or_skip()
    g = np.ones(3)
    cu.accumulate(g, fastnn.to_device(np.arange(3.0)))
    np.testing.assert_array_equal(g, [1.0, 2.0, 3.0])


def test_placed_picks_where_the_arrays_live():
    from fastnn._backend import placed
    x = np.zeros(2)
    assert placed(x).name == fastnn.get_backend()
    with fastnn.use_backend("reference"):
        assert placed(x).name == "reference"
    if "cuda" in fastnn.available_backends():
        with fastnn.use_backend("cuda"):
            assert placed(x).name == "cpu"          # host arrays stay on the host
        assert placed(x, fastnn.to_device(x)).name == "cuda"
