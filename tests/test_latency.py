"""Small-call latency paths (issue 16): the fast paths of F.layer_norm_fwd, F.linear_fwd,
the activations and the modules skip the full validation and dispatch for plain inputs --
with the same results, the same errors for anything else, and the validated path for
everything the fast test refuses.  Also: a bad FASTNN_VARIANT ends the `fastnn` command
in one line, not a traceback."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn
from fastnn._backend import backend
from fastnn.functional import activation as F_act
from fastnn.functional import dense as F_dense
from fastnn.functional import norm as F_norm


def _forbid(monkeypatch, module, name):
    """Make ``module.name`` (a validation step) fail the test if it is called."""
    def boom(*a, **k):
        raise AssertionError(f"{name} ran on the fast path")
    monkeypatch.setattr(module, name, boom)


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((8, 768)).astype(np.float32)


def test_layer_norm_fwd_fast_path_skips_validation(monkeypatch, x):
    w = np.linspace(0.5, 1.5, 768, dtype=np.float32)
    b = np.linspace(-1, 1, 768, dtype=np.float32)
    want, ctx_want = F.layer_norm_fwd(x, (768,), w, b)
    _forbid(monkeypatch, F_norm, "_check")
    _forbid(monkeypatch, F_norm, "dispatch")
    y, ctx = F.layer_norm_fwd(x, (768,), w, b)
    np.testing.assert_array_equal(y, want)
    dy = np.ones_like(x)
    for g, h in zip(F.layer_norm_bwd(ctx, dy), F.layer_norm_bwd(ctx_want, dy)):
        np.testing.assert_array_equal(g, h)


def test_linear_fwd_fast_path_skips_validation(monkeypatch, x):
    rng = np.random.default_rng(1)
    W = rng.standard_normal((768, 768)).astype(np.float32)
    b = rng.standard_normal(768).astype(np.float32)
    want = F.linear_fwd(x, W, b)[0]
    _forbid(monkeypatch, F_dense, "_check")
    _forbid(monkeypatch, F_dense, "dispatch")
    np.testing.assert_array_equal(F.linear_fwd(x, W, b)[0], want)
    np.testing.assert_array_equal(F.linear(x, W, b), want)


def test_activation_fast_path_skips_validation(monkeypatch, x):
    want = F.gelu_fwd(x)[0]
    _forbid(monkeypatch, F_act, "float_array")
    _forbid(monkeypatch, F_act, "dispatch")
    np.testing.assert_array_equal(F.gelu_fwd(x)[0], want)
    np.testing.assert_array_equal(F.gelu(x), want)


def test_fast_paths_refuse_what_they_cannot_check(monkeypatch, x):
    """Non-contiguous, float16, lists, wrong shapes: the validated path runs (and its
    errors are raised, word for word as before)."""
    calls = []
    real_check = F_norm._check
    monkeypatch.setattr(F_norm, "_check", lambda *a: calls.append(1) or real_check(*a))
    xt = np.asfortranarray(x)
    np.testing.assert_array_equal(F.layer_norm_fwd(xt, (768,))[0], F.layer_norm_fwd(x, (768,))[0])
    assert calls == [1]
    with pytest.raises(TypeError, match="input must be a float32 or float64 array, got dtype float16"):
        F.layer_norm_fwd(x.astype(np.float16), (768,))
    with pytest.raises(TypeError, match="input must be a float32 or float64 array, got dtype float16"):
        F.gelu_fwd(x.astype(np.float16))
    with pytest.raises(ValueError, match="input's last dimension must equal in_features"):
        F.linear_fwd(x, np.ones((4, 5), np.float32))
    with pytest.raises(TypeError, match="weight has dtype float64 but input has dtype float32"):
        F.linear_fwd(x, np.ones((4, 768), np.float64))
    with pytest.raises(TypeError, match="inplace must be a bool, got int"):
        F.relu_fwd(x.copy(), inplace=1)
    np.testing.assert_array_equal(F.relu_fwd(x, inplace=np.bool_(False))[0], np.maximum(x, 0))


def test_fast_paths_follow_the_backend_in_force(x):
    """The fast path runs the backend in force (reference here), not always the cpu one."""
    w = np.ones(768, np.float32)
    b = np.zeros(768, np.float32)
    W = np.eye(768, dtype=np.float32)
    with fastnn.use_backend("reference"):
        assert F.layer_norm_fwd(x, (768,), w, b)[1][0] is backend("reference")
        assert F.linear_fwd(x, W, b)[1][0] is backend("reference")
        assert F.gelu_fwd(x)[1][0] is backend("reference")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_module_modes_agree(dtype):
    """Eval / no_grad run the inference kernel (nothing kept), training keeps one cache:
    the same output bits in every mode."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 3, 40)).astype(dtype)
    m = nn.LayerNorm(40, dtype=np.dtype(dtype).name)
    m.weight.data[:] = rng.standard_normal(40)
    y_train = m(x)
    assert len(m._ctx) == 1
    with fastnn.no_grad():
        y_ng = m(x)
    m.eval()
    y_eval = m(x)
    assert len(m._ctx) == 0
    np.testing.assert_array_equal(y_ng, y_train)
    np.testing.assert_array_equal(y_eval, y_train)


def test_layer_norm_module_eval_uses_inference_kernel(monkeypatch):
    seen = []
    be = fastnn._backend.current()
    real = be.layer_norm_infer
    monkeypatch.setattr(be, "layer_norm_infer", lambda *a: seen.append(1) or real(*a))
    m = nn.LayerNorm(16).eval()
    m(np.ones((2, 16), np.float32))
    assert seen == [1]


def test_activation_module_arguments():
    """The per-class argument getter passes each module's fields to its op, in order."""
    x = np.linspace(-4, 4, 64, dtype=np.float32).reshape(8, 8)
    cases = [(nn.GELU(approximate="tanh"), F.gelu(x, approximate="tanh")),
             (nn.Softplus(beta=2.0, threshold=3.0), F.softplus(x, beta=2.0, threshold=3.0)),
             (nn.LeakyReLU(0.2), F.leaky_relu(x, 0.2)),
             (nn.ELU(alpha=0.5), F.elu(x, alpha=0.5)),
             (nn.CELU(alpha=0.5), F.celu(x, alpha=0.5)),
             (nn.Sigmoid(), F.sigmoid(x))]
    for m, want in cases:
        np.testing.assert_array_equal(m(x.copy()), want)
    assert nn.GELU()._args() == ("none",)
    assert nn.Softplus(beta=2.0, threshold=3.0)._args() == (2.0, 3.0)
    assert nn.Sigmoid()._args() == ()


def _env(variant):
    env = dict(os.environ, FASTNN_VARIANT=variant)
    root = os.path.dirname(os.path.dirname(fastnn.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.parametrize("argv", [["-m", "fastnn", "--version"], ["-m", "fastnn", "info"],
                                  ["-m", "fastnn.cli", "--version"]])
def test_bad_variant_command_one_line(argv):
    r = subprocess.run([sys.executable] + argv, env=_env("avx1024"), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [
        "fastnn: FASTNN_VARIANT='avx1024' is not a kernel variant; expected one of avx512, "
        "avx2, base (or unset: the best this CPU runs)"]


def test_bad_variant_console_script_one_line(tmp_path):
    """The installed `fastnn` script (``from fastnn.cli import main``) too."""
    script = tmp_path / "fastnn"
    script.write_text("import sys\nfrom fastnn.cli import main\nsys.exit(main())\n")
    r = subprocess.run([sys.executable, str(script), "--version"], env=_env("avx1024"),
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("fastnn: FASTNN_VARIANT='avx1024' is not a kernel variant")
    assert len(r.stderr.strip().splitlines()) == 1


def test_bad_variant_library_import_still_raises():
    """A program importing fastnn gets the exception (it may catch it), not an exit."""
    code = ("try:\n    import fastnn\nexcept RuntimeError as e:\n"
            "    print('caught', type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=_env("avx1024"), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("caught VariantError FASTNN_VARIANT='avx1024'"), r.stdout


def test_single_threaded_blas_writes_only_what_it_must(monkeypatch):
    """Around every large GEMM: a BLAS library already at one thread is not set (nor
    restored); one at n is set to 1 and back to n; a count set inside the region
    (set_blas_threads) is applied when the region ends."""
    from fastnn import _threads
    counts = [1, 3]
    calls = []

    def lib(i):
        def setf(n):
            calls.append((i, n))
            counts[i] = n
        return setf, (lambda: counts[i])
    monkeypatch.setattr(_threads, "_handles", [[lib(0), lib(1)]])
    with _threads.single_threaded_blas():
        assert counts == [1, 1]
        with _threads.single_threaded_blas():       # nested: nothing more
            pass
        assert counts == [1, 1]
    assert counts == [1, 3]
    assert calls == [(1, 1), (1, 3)]
    calls.clear()
    with _threads.single_threaded_blas():
        _threads.set_blas_threads(2)
        assert counts == [1, 1]
    assert counts == [2, 2] and calls == [(1, 1), (0, 2), (1, 2)]


def test_latency_bench_family_does_the_same_work():
    """`fastnn bench --only latency`: three (8, 768) module-forward rows; fastnn, the
    reference and torch compute the same thing (the modules share no weights, so Linear
    is checked for shape only)."""
    from fastnn.bench import cli as bench_cli
    from fastnn.bench import latency
    assert "latency" in bench_cli.families()
    cases = latency.cases()
    assert [c.op.split()[0] for c in cases] == ["LayerNorm", "GELU", "Linear"]
    for c in cases:
        assert c.family == "latency" and c.shape == "8x768" and c.tokens == 1
        fns = c.make()
        y = fns["fastnn"]()
        assert y.shape == (8, 768) and y.dtype == np.float32
        np.testing.assert_allclose(fns["reference"](), y, rtol=1e-4, atol=1e-5)
        if fns["torch"] is not None and not c.op.startswith("Linear"):
            np.testing.assert_allclose(fns["torch"]().numpy(), y, rtol=1e-4, atol=1e-5)
    assert cases[2].flops == 2.0 * 8 * 768 * 768


def test_activation_module_call_skips_module_dispatch(monkeypatch, x):
    """An activation module's call goes straight to its forward (Module.__call__'s
    *args/**kwargs packing is ~0.3 us of a ~2 us call), with the same results and caches;
    one that was given a submodule takes the general call again."""
    from fastnn.nn.module import Module
    want = nn.GELU()(x)
    m_train = nn.SiLU()
    y_train = m_train(x)
    dx_want = m_train.backward(np.ones_like(x))

    def boom(self, *a, **k):
        raise AssertionError("Module.__call__ ran")
    monkeypatch.setattr(Module, "__call__", boom)
    np.testing.assert_array_equal(nn.GELU()(x), want)
    np.testing.assert_array_equal(nn.GELU().eval()(x), want)
    m = nn.SiLU()
    np.testing.assert_array_equal(m(x), y_train)
    np.testing.assert_array_equal(m.backward(np.ones_like(x)), dx_want)
    g = nn.GELU()
    g.inner = nn.Tanh()
    with pytest.raises(AssertionError, match="Module.__call__ ran"):
        g(x)


def test_layer_norm_module_call_skips_module_dispatch(monkeypatch, x):
    """LayerNorm, a leaf, is called like the activations: straight to forward, same
    results and caches (training and eval); with a submodule, the general call."""
    from fastnn.nn.module import Module
    m = nn.LayerNorm(x.shape[-1])
    want = m(x)
    dx_want = m.backward(np.ones_like(x))

    def boom(self, *a, **k):
        raise AssertionError("Module.__call__ ran")
    monkeypatch.setattr(Module, "__call__", boom)
    np.testing.assert_array_equal(m(x), want)
    np.testing.assert_array_equal(m.backward(np.ones_like(x)), dx_want)
    np.testing.assert_array_equal(m.eval()(x), want)
    m.inner = nn.Tanh()
    with pytest.raises(AssertionError, match="Module.__call__ ran"):
        m(x)
