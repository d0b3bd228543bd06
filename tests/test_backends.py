"""Backend selection, the op tables, threads, seeds."""
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
# the padding-free inference kernels (issue "Real pretrained models") run on cpu/reference;
# their GPU versions are pending
CUDA_PENDING |= {"varlen_attention", "add_layer_norm_infer", "linear_act_infer"}
# the few-row GEMM of KV-cache decoding (GPT.generate decodes on the host)
CUDA_PENDING |= {"skinny_linear"}
# the packed-weight inference GEMM (small-M register tiles on pre-packed panels)
CUDA_PENDING |= {"pack_linear_weight", "packed_linear_infer"}


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
