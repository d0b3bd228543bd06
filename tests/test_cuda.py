"""The cuda backend's own tests: toolkit pieces, every kernel launched, device-array
handling, bad input, whole models on the device.  They run under numba's CUDA simulator
(tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1) or on a real GPU (FASTNN_REAL_GPU=1);
shapes stay tiny because the simulator runs every CUDA thread as a Python thread.
The per-op comparisons with the reference are in the shared harness (tests/test_ops.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn
from fastnn._backend import backend

if "cuda" not in fastnn.available_backends():  # pragma: no cover - numba-cuda not installed
    pytest.skip("the cuda backend (numba-cuda or its simulator) is not available here",
                allow_module_level=True)

from fastnn.cuda import _gemm, _kit  # noqa: E402
from fastnn.cuda import _runtime  # noqa: E402
from fastnn.cuda._runtime import cuda  # noqa: E402

DT = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]


def _tol(dt):
    return dict(rtol=2e-4, atol=2e-5) if np.dtype(dt) == np.float32 else dict(rtol=1e-10, atol=1e-12)


def _on_device(a):
    return type(a) is not np.ndarray and hasattr(a, "copy_to_host")


# ------------------------------------------------------------------ toolkit
@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((1, 1), (1, 1)), ((9, 0), (0, 4)),
                                    ((2 * _kit.TILE + 1, 3), (3, _kit.TILE + 2)),
                                    ((2 * _kit.TILE + 1, 13), (13, _kit.TILE + 3))])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_matches_numpy(shapes, ta, tb, dt):
    """Tiny products take the untiled kernel, the last shape the shared-memory tiles
    (several tiles per block in the simulator's two-block grid)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shapes[0]).astype(dt)
    b = rng.standard_normal(shapes[1]).astype(dt)
    a_in = np.ascontiguousarray(a.T) if ta else a
    b_in = np.ascontiguousarray(b.T) if tb else b
    bias = rng.standard_normal(shapes[1][1]).astype(dt)
    c = _gemm.gemm(_kit.dev(a_in), _kit.dev(b_in), ta, tb, bias=_kit.dev(bias))
    assert _on_device(c)
    np.testing.assert_allclose(c.copy_to_host(), a.astype(np.float64) @ b + bias, **_tol(dt))


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_gemm_bias_epilogue_kernel(dt):
    """The separate bias (+ activation) kernel of the cuBLAS path (launched here also
    without CuPy)."""
    c = _kit.dev(np.arange(12, dtype=dt).reshape(3, 4) - 6)
    bias = np.array([1, 2, 3, 4], dt)
    bias_act = _gemm._kernels(dt).bias_act
    bias_act[1, _kit.THREADS](_kit.flat(c), _kit.dev(bias), 12, 4, True, _gemm.ACT["none"])
    want = np.arange(12, dtype=dt).reshape(3, 4) - 6 + bias
    np.testing.assert_array_equal(c.copy_to_host(), want)
    bias_act[1, _kit.THREADS](_kit.flat(c), _kit.dev(bias), 12, 4, False, _gemm.ACT["relu"])
    np.testing.assert_array_equal(c.copy_to_host(), np.maximum(want, 0))


def test_gemm_rejects_mismatched_inner_dims():
    with pytest.raises(ValueError, match="inner dimensions"):
        _gemm.gemm(_kit.dev(np.zeros((2, 3))), _kit.dev(np.zeros((4, 2))))


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_colsum_over_many_chunks(dt):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3 * _kit.CHUNK + 1, 5)).astype(dt)
    np.testing.assert_allclose(_kit.colsum(_kit.dev(x)).copy_to_host(), x.sum(0, dtype=np.float64),
                               **_tol(dt))
    np.testing.assert_array_equal(_kit.colsum(_kit.dev(np.zeros((0, 3), dt))).copy_to_host(), 0)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_noncontiguous_device_inputs_are_copied(ndim):
    rng = np.random.default_rng(2)
    shape = (2, 3, 2, 5)[4 - ndim:]
    host = rng.standard_normal(shape[:-1] + (2 * shape[-1],))
    view = _kit.dev(host)[(slice(None),) * (ndim - 1) + (slice(None, None, 2),)]
    assert not view.is_c_contiguous()
    c = _kit.dev(view)
    assert c.is_c_contiguous()
    np.testing.assert_array_equal(c.copy_to_host(), host[..., ::2])
    # an op on the strided device view gives the same as on the host copy
    y = F.gelu(view)
    np.testing.assert_allclose(fastnn.to_numpy(y), F.gelu(np.ascontiguousarray(host[..., ::2])),
                               rtol=1e-12)


def test_noncontiguous_5d_is_a_clear_error():
    view = _kit.dev(np.zeros((1, 1, 1, 2, 4)))[..., ::2]
    with pytest.raises(ValueError, match="non-contiguous device arrays of 5 dimensions"):
        _kit.dev(view)


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_block_reductions_longer_rows_than_threads_and_more_rows_than_blocks(dt):
    """Rows longer than a block and more rows than the grid: the grid-stride paths."""
    rng = np.random.default_rng(3)
    R, D = 2 * 2 + 1, 2 * _kit.ROW_THREADS + 3
    x = rng.standard_normal((R, D)).astype(dt) * 3 + 1
    w = rng.standard_normal(D).astype(dt)
    b = rng.standard_normal(D).astype(dt)
    dy = rng.standard_normal((R, D)).astype(dt)
    with fastnn.use_backend("cuda"):
        y, ctx = F.layer_norm_fwd(_kit.dev(x), D, _kit.dev(w), _kit.dev(b))
        g = F.layer_norm_bwd(ctx, _kit.dev(dy))
        s, sctx = F.log_softmax_fwd(_kit.dev(x), -1)
        ds = F.log_softmax_bwd(sctx, _kit.dev(dy))
    with fastnn.use_backend("reference"):
        ry, rctx = F.layer_norm_fwd(x, D, w, b)
        rg = F.layer_norm_bwd(rctx, dy)
        rs, rsctx = F.log_softmax_fwd(x, -1)
        rds = F.log_softmax_bwd(rsctx, dy)
    for a, e in zip((y, s, ds) + tuple(g), (ry, rs, rds) + tuple(rg)):
        np.testing.assert_allclose(fastnn.to_numpy(a), e, **_tol(dt))


def test_layer_norm_welford_is_stable_with_a_large_offset():
    """Mean 1e4, spread 1: a naive E[x^2] - E[x]^2 in float32 loses every digit."""
    rng = np.random.default_rng(4)
    x = (1e4 + rng.standard_normal((3, 40))).astype(np.float32)
    y = fastnn.to_numpy(F.layer_norm(_kit.dev(x), 40))
    with fastnn.use_backend("reference"):
        ref = F.layer_norm(x, 40)
    np.testing.assert_allclose(y, ref, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_accumulate_on_device(dt):
    a = _kit.dev(np.ones((2, 3), dt))
    fastnn.cuda.accumulate(a, _kit.dev(np.full((2, 3), 2, dt)))
    np.testing.assert_array_equal(a.copy_to_host(), 3)
    param = nn.Parameter(np.zeros(4, dt))
    param.data = _kit.dev(param.data)
    param.accumulate_grad(_kit.dev(np.ones(4, dt)))
    param.accumulate_grad(_kit.dev(np.full(4, 0.5, dt)))
    assert _on_device(param.grad)
    np.testing.assert_array_equal(fastnn.to_numpy(param.grad), 1.5)
    with pytest.raises(ValueError, match="shapes differ"):
        fastnn.cuda.accumulate(a, _kit.dev(np.ones(3, dt)))
    with pytest.raises(TypeError, match="dtypes differ"):
        fastnn.cuda.accumulate(a, _kit.dev(np.ones((2, 3), np.float32 if dt == np.float64 else np.float64)))


@_kit.kernel
def philox_kat(o):
    if cuda.grid(1) == 0:
        z = np.uint64(0)
        a0, a1, a2, a3 = _kit.philox4x32(z, z, z, z, z)
        m = np.uint64(0xFFFFFFFF)
        b0, b1, b2, b3 = _kit.philox4x32((m << np.uint64(32)) | m, m, m, m, m)
        o[0] = a0
        o[1] = a1
        o[2] = a2
        o[3] = a3
        o[4] = b0
        o[5] = b1
        o[6] = b2
        o[7] = b3


def test_philox_known_answer_on_device():
    """Random123's kat_vectors through the device function."""
    out = _kit.dev(np.zeros(8, np.uint64))
    philox_kat[1, 1](out)
    assert [int(v) for v in out.copy_to_host()] == [
        0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8,
        0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_dropout_mask_is_bit_identical_to_cpu_and_reference(dt):
    x = np.ones((3, 37), dt)
    masks = {}
    host = [be for be in ("cpu",) if be in fastnn.available_backends()]   # cpu: when built
    for be in ["reference", *host, "cuda"]:
        fastnn.manual_seed(123)
        with fastnn.use_backend(be):
            y, ctx = F.dropout_fwd(x if be != "cuda" else _kit.dev(x), 0.3)
            dx = F.dropout_bwd(ctx, np.ones_like(x) if be != "cuda" else _kit.dev(np.ones_like(x)))
        masks[be] = (fastnn.to_numpy(y), fastnn.to_numpy(dx))
    for be in (*host, "cuda"):
        np.testing.assert_array_equal(masks[be][0], masks["reference"][0])
        np.testing.assert_array_equal(masks[be][1], masks["reference"][1])
    assert 0 < (masks["cuda"][0] == 0).sum() < x.size


# ------------------------------------------------------------------ optimizer kernels
@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
@pytest.mark.parametrize("op", ["nadam_step", "radam_step", "adamax_step"])
def test_adam_variant_kernels_match_reference(op, dt):
    """NAdam / RAdam (before and after its rectification) / Adamax on the device against
    the reference: every option, in place."""
    rng = np.random.default_rng(6)
    cu, ref = backend("cuda"), backend("reference")
    tol = dict(rtol=3e-6, atol=1e-6) if dt == np.float32 else dict(rtol=1e-13, atol=1e-14)
    for wd, dec, mx, b1, step in [(0.0, False, False, 0.9, 1.0), (0.1, False, True, 0.3, 3.0),
                                  (0.05, True, False, 0.9, 9.0)]:
        base = [rng.standard_normal(37).astype(dt) for _ in range(4)]
        base[3] = np.abs(base[3]) + 0.1
        res = []
        for be in (cu, ref):
            p, g, m, s = [_kit.dev(a.copy()) if be is cu else a.copy() for a in base]
            if op == "nadam_step":
                out = be.nadam_step(p, g, m, s, 0.01, b1, 0.999, 1e-8, wd, dec, 0.45, 0.46, 0.2,
                                    step, mx)
            elif op == "radam_step":
                out = be.radam_step(p, g, m, s, 0.01, b1, 0.999, 1e-8, wd, dec, step, mx)
            else:
                out = be.adamax_step(p, g, m, s, 0.01, b1, 0.9, 1e-8, wd, step, mx)
            assert out is None
            res.append([fastnn.to_numpy(a) for a in (p, m, s)])
        for a, b in zip(*res):
            np.testing.assert_allclose(a, b, err_msg=f"{op} {wd} {dec} {mx} {step}", **tol)


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
@pytest.mark.parametrize("op", ["sgd_step", "adam_step", "adamw_step"])
def test_optimizer_kernels_match_reference(op, dt):
    rng = np.random.default_rng(5)
    cu, ref = backend("cuda"), backend("reference")
    tol = dict(rtol=3e-6, atol=1e-6) if dt == np.float32 else dict(rtol=1e-13, atol=1e-14)
    if op == "sgd_step":
        variants = [(0, 0, 0, False, False, False), (0, 0, 0.1, False, True, False),
                    (0.9, 0, 0, False, False, True), (0.9, 0.2, 0.01, False, False, False),
                    (0.9, 0, 0.01, True, True, False)]
    else:
        variants = [(False, False, 0.0, 0.9, 1), (True, False, 0.05, 0.9, 7),
                    (False, True, 0.01, 0.2, 3)]
    for v in variants:
        base = [rng.standard_normal(37).astype(dt) for _ in range(5)]
        base[3], base[4] = np.abs(base[3]), np.abs(base[4])
        res = []
        for be in (cu, ref):
            arrs = [a.copy() for a in base]
            if be is cu:
                arrs = [_kit.dev(a) for a in arrs]
            p, g, m, s, vmax = arrs
            if op == "sgd_step":
                mom, damp, wd, nes, mx, first = v
                out = be.sgd_step(p, g, m if mom else None, 0.05, mom, damp, wd, nes, mx, first)
                res.append((p, m))
            else:
                ams, mx, wd, b1, step = v
                out = getattr(be, op)(p, g, m, s, vmax if ams else None, 1e-2, b1, 0.999, 1e-8, wd,
                                      step, mx)
                res.append((p, m, s, vmax))
            assert out is None
        for a, b in zip(*res):
            np.testing.assert_allclose(fastnn.to_numpy(a), b, err_msg=f"{op} {v}", **tol)



@pytest.mark.parametrize("op", ["adam_step_foreach", "adamw_step_foreach"])
def test_foreach_optimizer_kernels_match_reference(op):
    """The list form on device arrays: every entry updated as the reference's."""
    rng = np.random.default_rng(6)
    cu, ref = backend("cuda"), backend("reference")
    base = [[rng.standard_normal(n).astype(np.float32) for _ in range(4)] for n in (37, 5)]
    for b in base:
        b[3] = np.abs(b[3])
    res = []
    for be in (cu, ref):
        arrs = [[_kit.dev(a) if be is cu else a.copy() for a in b] for b in base]
        out = getattr(be, op)(*([a[i] for a in arrs] for i in range(4)), None, 1e-2, 0.9,
                              0.999, 1e-8, 0.05, [2.0, 5.0], False)
        assert out is None
        res.append(arrs)
    for a, b in zip(res[0], res[1]):
        for x, y in zip(a, b):
            np.testing.assert_allclose(fastnn.to_numpy(x), y, rtol=3e-6, atol=1e-6)

def test_optimizer_kernel_updates_host_arrays_on_the_cuda_backend():
    p = np.ones(5, np.float32)
    with fastnn.use_backend("cuda"):
        backend("cuda").sgd_step(p, np.ones(5, np.float32), None, 0.5, 0, 0, 0, False, False, False)
    np.testing.assert_array_equal(p, 0.5)


def test_optimizer_kernel_rejects_a_strided_device_parameter():
    p = _kit.dev(np.ones(10, np.float32))[::2]
    with pytest.raises(ValueError, match="C-contiguous device array"):
        backend("cuda").sgd_step(p, _kit.dev(np.ones(5, np.float32)), None, 0.5, 0, 0, 0,
                                 False, False, False)


# ------------------------------------------------------------------ device arrays in and out
def test_numpy_inputs_on_the_cuda_backend_give_device_outputs():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((2, 4)).astype(np.float32)
    with fastnn.use_backend("cuda"):
        y, ctx = F.linear_fwd(x, w)
        dx, dw, db = F.linear_bwd(ctx, np.ones((3, 2), np.float32))
    assert _on_device(y) and _on_device(dx) and _on_device(dw) and db is None
    np.testing.assert_allclose(fastnn.to_numpy(y), x @ w.T, rtol=1e-5)
    np.testing.assert_allclose(fastnn.to_numpy(dw), np.ones((2, 3)) @ x, rtol=1e-5)


@pytest.mark.parametrize("be", ["reference", "cpu"])
def test_device_inputs_run_on_cuda_whatever_backend_is_in_force(be):
    if be not in fastnn.available_backends():
        pytest.skip(f"the {be} backend is not built here (python setup.py build_ext --inplace)")
    x = _kit.dev(np.linspace(-2, 2, 12).reshape(3, 4))
    with fastnn.use_backend(be):
        y = F.softmax(x, dim=0)
    assert _on_device(y)
    ref = np.exp(np.linspace(-2, 2, 12).reshape(3, 4))
    np.testing.assert_allclose(fastnn.to_numpy(y), ref / ref.sum(0), rtol=1e-12)


# ------------------------------------------------------------------ bad input
def test_device_array_of_wrong_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="input must be float32 or float64.*int64"):
        F.gelu(_kit.dev(np.arange(4)))
    with pytest.raises(TypeError, match="weight has dtype float64 but input has dtype float32"):
        F.linear(_kit.dev(np.ones((2, 3), np.float32)), _kit.dev(np.ones((4, 3))))


def test_device_array_of_wrong_shape_is_a_value_error():
    with pytest.raises(ValueError, match="in_features"):
        F.linear(_kit.dev(np.ones((2, 3))), _kit.dev(np.ones((4, 5))))
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(_kit.dev(np.ones((2, 3))), 4)
    y, ctx = F.gelu_fwd(_kit.dev(np.ones((2, 3))))
    with pytest.raises(ValueError, match=r"grad_output must have the forward output's shape \(2, 3\)"):
        F.gelu_bwd(ctx, _kit.dev(np.ones((3, 2))))


def test_mixing_host_and_device_arrays_is_an_error():
    with pytest.raises(ValueError, match="mixing host"):
        F.linear(_kit.dev(np.ones((2, 3))), np.ones((4, 3)))


def test_cuda_without_gpu_or_simulator_is_a_clear_error():
    """A fresh interpreter without the simulator on this (GPU-less) machine; on a machine
    with a GPU the backend is simply available and the test checks nothing else."""
    code = ("import fastnn, fastnn.cuda\n"
            "if fastnn.cuda.is_available():\n"
            "    print('GPU'); raise SystemExit(0)\n"
            "assert 'cuda' not in fastnn.available_backends()\n"
            "for f in (lambda: fastnn.set_backend('cuda'), lambda: fastnn.to_device([1.0])):\n"
            "    try:\n"
            "        f()\n"
            "    except RuntimeError as e:\n"
            "        assert 'CUDA GPU' in str(e) and 'NUMBA_ENABLE_CUDASIM' in str(e), e\n"
            "    else:\n"
            "        raise AssertionError('no error')\n"
            "print('OK')\n")
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["NUMBA_ENABLE_CUDASIM"] = "0"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] in ("OK", "GPU")


# ------------------------------------------------------------------ whole models on the device
def _mlp(dt):
    fastnn.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(approximate="tanh"),
                      nn.Dropout(0.25), nn.Linear(8, 5), nn.LogSoftmax(dim=-1))
    return m.to(np.dtype(dt))


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW", "RMSprop", "Adagrad", "NAdam", "RAdam",
                                      "Adamax"])
@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_sequential_training_steps_on_device_match_reference(dt, opt_name):
    from fastnn import optim
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 6)).astype(dt)
    dy = rng.standard_normal((4, 5)).astype(dt)
    results = {}
    for be in ("reference", "cuda"):
        m = _mlp(dt)
        kw = {"SGD": dict(lr=0.1, momentum=0.9), "AdamW": dict(lr=0.01),
              "RMSprop": dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
              "Adagrad": dict(lr=0.05, lr_decay=0.1, initial_accumulator_value=0.1),
              "NAdam": dict(lr=0.01, weight_decay=0.01, decoupled_weight_decay=True),
              "RAdam": dict(lr=0.01, betas=(0.9, 0.5), weight_decay=0.01),
              "Adamax": dict(lr=0.01, weight_decay=0.01, maximize=True)}[opt_name]
        opt = getattr(optim, opt_name)(m.parameters(), **kw)
        with fastnn.use_backend(be):
            if be == "cuda":
                m.to("cuda")
            xin = _kit.dev(x) if be == "cuda" else x
            fastnn.manual_seed(1)
            for _ in range(2):
                opt.zero_grad()
                y = m(xin)
                dx = m.backward(_kit.dev(dy) if be == "cuda" else dy)
                opt.step()
            if be == "cuda":
                assert _on_device(y) and _on_device(dx)
                assert all(_on_device(p.data) and _on_device(p.grad) for p in m.parameters())
            results[be] = (fastnn.to_numpy(y), fastnn.to_numpy(dx),
                           {n: fastnn.to_numpy(p.data) for n, p in m.named_parameters()})
            m.to("cpu")
            assert all(type(p.data) is np.ndarray for p in m.parameters())
    tol = dict(rtol=1e-3, atol=1e-4) if dt == np.float32 else dict(rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(results["cuda"][0], results["reference"][0], **tol)
    np.testing.assert_allclose(results["cuda"][1], results["reference"][1], **tol)
    for n, v in results["reference"][2].items():
        np.testing.assert_allclose(results["cuda"][2][n], v, err_msg=n, **tol)


def test_kernels_never_index_shapes_from_the_end():
    """Negative shape indices do not compile in kernels on a GPU; the simulator (whose host
    arrays _runtime gives plain-tuple shapes, as on a GPU) would not catch them."""
    import re
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fastnn", "cuda")
    bad = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                src = open(os.path.join(dirpath, f)).read()
                bad += [f"{f}: {m.group(0)}" for m in re.finditer(r"\.shape\[-\d", src)]
    assert not bad, bad



def test_kernel_factories_give_kernels_by_name():
    """Every per-dtype kernel factory returns one kernel or its kernels by name
    (``_kit.named`` / a dict), never a tuple fetched by position (issue #20)."""
    import importlib
    import pkgutil
    import fastnn.cuda.ops as pkg
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"fastnn.cuda.ops.{info.name}")
    bad = [f.__module__ + "." + f.__name__ for f in _kit.FACTORIES
           if isinstance(f(np.float32), (tuple, list))]
    assert not bad, bad

def test_device_shapes_index_like_tuples():
    x = _kit.dev(np.zeros((2, 3, 4)))
    assert x.shape[-1] == 4 and x.shape[-2:] == (3, 4)


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_transpose2d_and_conv1d_on_device(dt):
    a = np.arange(15, dtype=dt).reshape(3, 5)
    t = fastnn.cuda.transpose2d(_kit.dev(a))
    assert _on_device(t) and t.is_c_contiguous()
    np.testing.assert_array_equal(t.copy_to_host(), a.T)
    fastnn.manual_seed(0)
    m = nn.Conv1D(4, 3).to(np.dtype(dt))
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(dt)
    y_ref = m(x)
    dx_ref = m.backward(np.ones_like(y_ref))
    gw_ref = m.weight.grad.copy()
    m.zero_grad()
    m.to("cuda")
    y = m(_kit.dev(x))
    dx = m.backward(_kit.dev(np.ones_like(y_ref)))
    np.testing.assert_allclose(fastnn.to_numpy(y), y_ref, **_tol(dt))
    np.testing.assert_allclose(fastnn.to_numpy(dx), dx_ref, **_tol(dt))
    np.testing.assert_allclose(fastnn.to_numpy(m.weight.grad), gw_ref, **_tol(dt))


def test_gpu_benchmark_script_runs_under_the_simulator():
    """benchmarks/gpu.py's timing section at --smoke sizes (the numbers mean nothing here;
    this proves the script a GPU session will run is not broken)."""
    import importlib.util
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks", "gpu.py")
    if not os.path.exists(script):
        pytest.skip("benchmarks/gpu.py is not beside these tests (an installed copy)")
    spec = importlib.util.spec_from_file_location("fastnn_gpu_bench", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.op_benchmarks(quick=False, smoke=True, peak_gbs=None)
    assert {r["op"] for r in rows} >= {"layer_norm f+b", "softmax f+b", "linear f+b",
                                       "conv2d 3x3 f+b", "sdpa causal f+b"}
    assert all(r["fastnn_ms"] > 0 for r in rows)


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_gpt_training_step_on_device_matches_reference(dt):
    """A tiny GPT: forward, cross-entropy, backward and an AdamW step, all on the device."""
    from fastnn import optim
    from fastnn.models import GPT, GPTConfig
    cfg = dict(vocab_size=11, block_size=8, n_layer=1, n_head=2, d_model=8)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 11, (2, 5))
    y = rng.integers(0, 11, (2, 5))
    res = {}
    for be in ("reference", "cuda"):
        fastnn.manual_seed(0)
        m = GPT(GPTConfig(**cfg), dtype=dt)
        if be == "cuda":
            m.to("cuda")
        opt = optim.AdamW(m.parameters(), lr=1e-2)
        crit = nn.CrossEntropyLoss()
        with fastnn.use_backend(be):
            m.zero_grad()
            logits = m(x)
            loss = crit(logits.reshape(10, 11), y.reshape(-1))
            m.backward(crit.backward().reshape(logits.shape))
            opt.step()
        if be == "cuda":
            assert _on_device(logits)
            assert all(_on_device(p.data) and _on_device(p.grad) for p in m.parameters())
        res[be] = (float(np.asarray(fastnn.to_numpy(loss))), fastnn.to_numpy(logits),
                   {n: fastnn.to_numpy(p.data) for n, p in m.named_parameters()})
    tol = dict(rtol=1e-3, atol=1e-4) if dt == np.float32 else dict(rtol=1e-9, atol=1e-11)
    assert np.isclose(res["cuda"][0], res["reference"][0], **tol)
    np.testing.assert_allclose(res["cuda"][1], res["reference"][1], **tol)
    for n, v in res["reference"][2].items():
        np.testing.assert_allclose(res["cuda"][2][n], v, err_msg=n, **tol)


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_cross_entropy_nd_logits_on_device(dt):
    """(N, C, d1, d2) logits: the class axis is moved last on the device (swap_last_two)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 5, 3, 2)).astype(dt)
    t = rng.integers(0, 5, (2, 3, 2))
    w = (rng.random(5) + 0.5).astype(dt)
    loss, ctx = F.cross_entropy_fwd(_kit.dev(x), t, _kit.dev(w), label_smoothing=0.1)
    g = F.cross_entropy_bwd(ctx, 1.0)
    assert _on_device(g)
    with fastnn.use_backend("reference"):
        rl, rctx = F.cross_entropy_fwd(x, t, w, label_smoothing=0.1)
        rg = F.cross_entropy_bwd(rctx, 1.0)
    np.testing.assert_allclose(fastnn.to_numpy(loss), rl, **_tol(dt))
    np.testing.assert_allclose(fastnn.to_numpy(g), rg, **_tol(dt))


def _cpu_only_module_cases():
    """Module cases their families run on the cpu only: a representative one per family
    runs on the device here (the rest were checked by hand; see the report of issue 8)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cases import all_module_cases
    wanted = ("conv_pool_bn_stack", "BatchNorm1d_3d", "encoder_layer_pre_norm_gelu",
              "decoder_layer_post_norm", "LSTM_hx", "GRU_dropout_bf", "RNNCell_relu")
    return [c for c in all_module_cases() if c.name in wanted and "cuda" not in c.backends]


@pytest.mark.parametrize("case", _cpu_only_module_cases(), ids=str)
def test_cpu_only_module_cases_also_match_on_cuda(case):
    import dataclasses
    from test_ops import test_module_matches_reference
    test_module_matches_reference(dataclasses.replace(case, backends=("cuda",)), "cuda",
                                  np.float32)


def test_dlpack_only_cuda_tensors_need_cupy():
    """A CUDA tensor that speaks only DLPack (no __cuda_array_interface__) is read through
    CuPy; without CuPy the error says so (host DLPack tensors are plain host inputs)."""
    class CudaDLPackOnly:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):  # pragma: no cover - never reached without CuPy
            raise AssertionError

    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed: the DLPack path is exercised in tests/test_cuda_gpu.py")
    except ImportError:
        pass
    with pytest.raises(TypeError, match="DLPack.*CuPy"):
        fastnn.to_device(CudaDLPackOnly())

    class HostDLPack:
        def __dlpack_device__(self):
            return (1, 0)

        def __array__(self, dtype=None, copy=None):
            return np.arange(3.0)

    np.testing.assert_array_equal(fastnn.to_numpy(fastnn.to_device(HostDLPack())), [0, 1, 2])


def _block_sum_kernel():
    """A kernel whose block b writes sum_t (t + 1) over its threads, through one shared
    array, to out[b]: (n + 1) n / 2 for n threads when shared memory is shared."""
    from fastnn.cuda._runtime import numba_type

    @cuda.jit
    def block_sum(out):
        buf = cuda.shared.array(64, numba_type(np.float64))
        t = cuda.threadIdx.x
        buf[t] = t + 1.0
        cuda.syncthreads()
        if t == 0:
            s = 0.0
            for i in range(cuda.blockDim.x):
                s += buf[i]
            out[cuda.blockIdx.x] = s
    return block_sum


@pytest.mark.skipif(not _runtime.SIM, reason="a simulator-only hazard")
def test_simulator_kernel_error_leaves_no_running_threads():
    """A kernel that raises in one thread: its other threads are finished before the
    error reaches the caller, so the next launch sees its own blockDim and shared
    memory (the simulator alone would leave them running)."""
    import threading
    import time
    from fastnn.cuda._runtime import numba_type

    @cuda.jit
    def bad(out):
        buf = cuda.shared.array(64, numba_type(np.float64))
        t = cuda.threadIdx.x
        if t == 0:
            raise ValueError("boom")
        for _ in range(2000):              # the others keep writing shared memory
            buf[t] = -1.0
        out[t] = 1.0

    out = cuda.to_device(np.zeros(32))
    with pytest.raises(ValueError, match="boom"):
        bad[1, 32](out)
    from numba.cuda.simulator import kernel as sim_kernel
    assert not [t for t in threading.enumerate() if isinstance(t, sim_kernel.BlockThread)]
    res = cuda.to_device(np.zeros(1))
    _block_sum_kernel()[1, 8](res)
    assert res.copy_to_host()[0] == 36.0


@pytest.mark.skipif(not _runtime.SIM, reason="a simulator-only race")
def test_simulator_shared_array_is_one_per_block(monkeypatch):
    """Every thread of a block gets the same cuda.shared.array even when a thread switch
    falls between the simulator's lookup and its store (forced here by a slow
    allocation); unpatched, the threads got separate, uninitialised arrays and a block
    reduction summed garbage -- the rare wrong d_bias element 0 seen in full runs."""
    import time
    from numba.cuda.simulator import kernelapi

    class SlowNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(*a, **k):
            time.sleep(0.002)            # lets the other simulated threads run
            return np.empty(*a, **k)

    monkeypatch.setattr(kernelapi, "np", SlowNumpy())

    out = cuda.to_device(np.zeros(2))
    _block_sum_kernel()[2, 16](out)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(2, 16 * 17 / 2))


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
@pytest.mark.parametrize("M,N,K,ta,tb,Z", [(17, 33, 9, False, False, 1),
                                          (16, 16, 40, True, False, 1),
                                          (5, 21, 18, False, True, 2),
                                          (33, 7, 16, True, True, 2)])
def test_tiled_gemm_matches_numpy(M, N, K, ta, tb, Z, dt):
    """The tiled shared-memory GEMM (what a GPU runs; the simulator's default is the
    thread-per-output kernel): partial edge tiles, both transposes, a broadcast batch
    and a bias, against NumPy."""
    rng = np.random.default_rng(M * N + K)
    a = rng.standard_normal((Z, K, M) if ta else (Z, M, K)).astype(dt)
    b = rng.standard_normal((1, N, K) if tb else (1, K, N)).astype(dt)
    bias = rng.standard_normal(N).astype(dt)
    want = (np.swapaxes(a, 1, 2) if ta else a) @ (np.swapaxes(b, 1, 2) if tb else b) + bias
    _gemm.SIM_TILED[0] = True
    try:
        got = _gemm.gemm_batched(cuda.to_device(a), cuda.to_device(b), ta, tb,
                                 cuda.to_device(bias)).copy_to_host()
    finally:
        _gemm.SIM_TILED[0] = False
    np.testing.assert_allclose(got, want, **_tol(dt))


# ------------------------------------------------------------------ flash attention
_ATTN_CASES = {
    # name: (B, L, S, E, Ev, mask kind, causal, dropout p)
    "causal_L_ne_S": (2, 5, 7, 3, 4, None, True, 0.0),
    "bool_mask_with_a_dead_row": (1, 4, 6, 5, 3, "dead", False, 0.0),
    "float_mask_and_dropout": (2, 3, 9, 4, 4, "float", False, 0.3),
    "causal_dropout_more_keys_than_threads": (1, 3, 70, 2, 3, None, True, 0.2),
    "head_dims_past_one_pass": (1, 2, 3, 4 * _kit.ROW_THREADS + 3, 4 * _kit.ROW_THREADS + 1,
                                None, False, 0.0),
}


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
@pytest.mark.parametrize("name", sorted(_ATTN_CASES))
def test_flash_attention_matches_reference(name, dt):
    """The cuda kernels (online softmax, weights recomputed in backward) against the
    reference's materialised weights: masks, a fully masked row, causal with L != S,
    dropout (same Philox masks), key tiles past one block, head dims past one pass."""
    B, L, S, E, Ev, mask_kind, causal, p = _ATTN_CASES[name]
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((B, L, E)).astype(dt), rng.standard_normal((B, S, E)).astype(dt)
    v, dy = rng.standard_normal((B, S, Ev)).astype(dt), rng.standard_normal((B, L, Ev)).astype(dt)
    mask = None
    if mask_kind == "dead":
        mask = rng.random((L, S)) > 0.4
        mask[1] = False                                   # row 1 sees no key
    elif mask_kind == "float":
        mask = rng.standard_normal((B, 1, S)).astype(dt)
    res = {}
    for be in ("reference", "cuda"):
        fastnn.manual_seed(11)
        with fastnn.use_backend(be):
            args = [q, k, v] if be == "reference" else [_kit.dev(a) for a in (q, k, v)]
            out, ctx = F.scaled_dot_product_attention_fwd(*args, attn_mask=mask, dropout_p=p,
                                                          is_causal=causal)
            grads = F.scaled_dot_product_attention_bwd(ctx, dy if be == "reference" else _kit.dev(dy))
        res[be] = [fastnn.to_numpy(a) for a in (out, *grads)]
    for a, b in zip(res["cuda"], res["reference"]):
        np.testing.assert_allclose(a, b, **_tol(dt))
    if mask_kind == "dead":
        assert not res["cuda"][0][:, 1].any()             # zero output, not NaN


def test_flash_attention_keeps_no_score_matrix():
    """What forward keeps for backward is O(L + S) per head: no L x S array."""
    L = S = 48
    x = _kit.dev(np.ones((2, L, 8), np.float32))
    with fastnn.use_backend("cuda"):
        _, ctx = F.scaled_dot_product_attention_fwd(x, x, x, is_causal=True)

    def arrays(o):
        if isinstance(o, (tuple, list)):
            for e in o:
                yield from arrays(e)
        elif hasattr(o, "copy_to_host"):
            yield o
    assert max(int(np.prod(a.shape)) for a in arrays(ctx)) < L * S


# ------------------------------------------------------------------ no device branches in the layers (#20)
@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_fused_self_attention_stays_on_the_device(dt):
    """MultiheadAttention with query is key is value on device arrays, the cpu backend in
    force: the fused projection's q/k/v blocks and the backward's joined gradient stay on
    the device (split_columns / concat_columns; they went through the host before)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 8)).astype(dt)
    dy = rng.standard_normal((3, 2, 8)).astype(dt)
    fastnn.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, dtype=dt)
    fastnn.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, dtype=dt)
    m.to("cuda")
    xd = _kit.dev(x)
    y, _ = m(xd, xd, xd)
    dx = m.backward(_kit.dev(dy))
    assert _on_device(y) and _on_device(dx[0])
    with fastnn.use_backend("reference"):
        ry, _ = ref(x, x, x)
        rdx = ref.backward(dy)
    np.testing.assert_allclose(fastnn.to_numpy(y), ry, **_tol(dt))
    np.testing.assert_allclose(fastnn.to_numpy(dx[0]), rdx[0], **_tol(dt))


def test_padded_keys_run_varlen_attention_on_the_device_too(monkeypatch):
    """Eval-mode MultiheadAttention with a right-padded key_padding_mask takes the
    variable-length kernel on the device as on the host (the device was excluded when the
    cuda backend had no varlen kernel), with the masked kernel's result."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 8)).astype(np.float64)
    kpm = np.array([[False, False, True, True], [False, False, False, True]])
    fastnn.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=True, dtype=np.float64).eval()
    with fastnn.use_backend("reference"):
        want, _ = m(x, x, x, key_padding_mask=kpm)
    m.to("cuda")
    calls = []
    be = backend("cuda")
    real = be.varlen_attention
    monkeypatch.setattr(be, "varlen_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    xd = _kit.dev(x)
    y, _ = m(xd, xd, xd, key_padding_mask=kpm)
    assert calls and _on_device(y)
    np.testing.assert_allclose(fastnn.to_numpy(y), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dt", DT, ids=DT_IDS)
def test_clip_grad_on_device_works_in_place(dt):
    """clip_grad_norm_ / clip_grad_value_ scale and clamp a device gradient in place (the
    same array, as torch), with the host's values."""
    from fastnn.nn import Parameter
    from fastnn.nn.utils import clip_grad_norm_, clip_grad_value_
    g = np.array([[3.0, -4.0], [12.0, 0.5]], dt)
    p, h = Parameter(_kit.dev(np.zeros((2, 2), dt))), Parameter(np.zeros((2, 2), dt))
    p.grad, h.grad = _kit.dev(g), g.copy()
    d = p.grad
    assert clip_grad_norm_([p], 1.0) == pytest.approx(clip_grad_norm_([h], 1.0))
    assert p.grad is d
    np.testing.assert_allclose(fastnn.to_numpy(d), h.grad, **_tol(dt))
    clip_grad_value_([p], 0.1)
    clip_grad_value_([h], 0.1)
    assert p.grad is d
    np.testing.assert_array_equal(fastnn.to_numpy(d), h.grad)


def test_loss_weight_on_device_is_copied_and_cast():
    """A device class weight: the module keeps its own copy (as for a host weight), and a
    weight in another dtype than the input's is cast (it was left as it was on the device)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.integers(0, 3, 4)
    w = np.array([0.5, 1.0, 2.0])
    wd = _kit.dev(w)
    crit = nn.CrossEntropyLoss(weight=wd)
    assert _on_device(crit.weight) and crit.weight is not wd
    loss = crit(_kit.dev(x), t)
    with fastnn.use_backend("reference"):
        want = nn.CrossEntropyLoss(weight=w)(x, t)
    assert _on_device(loss)
    assert float(np.asarray(fastnn.to_numpy(loss))) == pytest.approx(want, rel=1e-5)


def test_parameter_on_device_zero_grad_keeps_the_array():
    """zero_grad(set_to_none=False) zeroes a device gradient in place (it was dropped to
    None, unlike the host's); np.asarray and load_state_dict work through the layout ops."""
    from fastnn.nn import Parameter
    m = nn.Linear(3, 2, dtype=np.float64)
    m.to("cuda")
    p = m.weight
    p.grad = _kit.dev(np.ones((2, 3)))
    g = p.grad
    m.zero_grad(set_to_none=False)
    assert p.grad is g
    np.testing.assert_array_equal(fastnn.to_numpy(g), np.zeros((2, 3)))
    w = np.arange(6.0).reshape(2, 3)
    m.load_state_dict({"weight": _kit.dev(w), "bias": np.zeros(2)})
    assert _on_device(m.weight.data)
    np.testing.assert_array_equal(np.asarray(m.weight), w)
    assert Parameter(_kit.dev(w)).data is not None
    m.to("cpu")
    assert type(m.weight.data) is np.ndarray
