"""Checks that need a real CUDA GPU (marked ``gpu``: skipped unless FASTNN_REAL_GPU=1, see
tests/conftest.py).  No GPU was available while this backend was written, so these have
not run yet; benchmarks/gpu.py is the full real-device run (suite, timings, GPT step)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fastnn
import fastnn.functional as F

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_backend_is_a_real_gpu():
    from fastnn.cuda import _runtime
    assert "cuda" in fastnn.available_backends()
    assert not _runtime.SIM, "FASTNN_REAL_GPU=1 must run without NUMBA_ENABLE_CUDASIM"


def test_benchmark_script_quick_run(tmp_path):
    """benchmarks/gpu.py --quick: the whole op suite against the reference on the device,
    no float64 instructions in float32 kernels, timings and the GPT step all run."""
    out = tmp_path / "gpu.json"
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--quick",
                        "--json", str(out)], env=env, capture_output=True, text=True,
                       timeout=1800, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    import json
    res = json.loads(out.read_text())
    assert res["suite"]["failed"] == []
    assert res["float32_kernels_with_f64_ptx"] == []


def test_torch_cuda_tensors_are_used_without_copies():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    x = torch.randn(4, 8, device="cuda")
    w = torch.randn(3, 8, device="cuda")
    y = F.linear(x, w)
    assert type(y) is not np.ndarray
    np.testing.assert_allclose(fastnn.to_numpy(y), (x @ w.T).cpu().numpy(), rtol=1e-4, atol=1e-5)
    # a strided torch view is made contiguous on the device
    xt = torch.randn(8, 4, device="cuda").T
    np.testing.assert_allclose(fastnn.to_numpy(F.gelu(xt)),
                               torch.nn.functional.gelu(xt).cpu().numpy(), rtol=1e-5, atol=1e-6)


def test_cupy_arrays_and_cublas_path():
    cp = pytest.importorskip("cupy")
    from fastnn.cuda import _gemm
    assert _gemm.backend_name().startswith("cublas")
    a = cp.random.standard_normal((33, 17), dtype=cp.float32)
    b = cp.random.standard_normal((5, 17), dtype=cp.float32)
    bias = cp.random.standard_normal(5, dtype=cp.float32)
    y = F.linear(a, b, bias)
    np.testing.assert_allclose(fastnn.to_numpy(y), cp.asnumpy(a @ b.T + bias), rtol=1e-4, atol=1e-5)


def test_dlpack_cuda_tensor_through_cupy():
    cp = pytest.importorskip("cupy")
    a = cp.arange(6, dtype=cp.float32).reshape(2, 3)

    class DLPackOnly:   # hides __cuda_array_interface__, keeps DLPack
        def __dlpack__(self, stream=None):
            return a.__dlpack__(stream=stream) if stream is not None else a.__dlpack__()

        def __dlpack_device__(self):
            return a.__dlpack_device__()

    d = fastnn.to_device(DLPackOnly())
    np.testing.assert_array_equal(fastnn.to_numpy(d), np.arange(6, dtype=np.float32).reshape(2, 3))
