"""The kernels' checked data pointers (csrc/fnn_span.pxi).

Every family hands arrays to its C kernels through _data / _data_at / _typed: in the
FASTNN_DEBUG build they check the array's dtype, C-contiguity and that the kernel's extent
[off, off + n) lies inside it; in the release build they are the bare PyArray_DATA.  The
check itself is compiled in both builds, so its logic is tested here in the normal build
(``_span_check_py``); ``_kernel_pointer_py`` takes a pointer exactly as the kernels do and
must raise for a bad extent in the debug build only."""
import numpy as np
import pytest

import fastnn.cpu

F32 = np.dtype(np.float32).num
F64 = np.dtype(np.float64).num
I64 = np.dtype(np.int64).num
ANY = -1


def _families():
    mods = [m for m in fastnn.cpu.compiled_modules() if hasattr(m, "_span_check_py")]
    assert mods, "no compiled family exposes the pointer check"
    return mods


FAMILIES = ["activation", "attention", "batchnorm", "conv", "dense", "dropout", "embedding",
            "groupnorm", "loss", "norm", "optim", "pool", "rmsnorm", "softmax", "stdnorm"]


def test_every_family_with_kernels_takes_checked_pointers():
    names = {m.__name__.rsplit(".", 1)[-1] for m in _families()}
    assert set(FAMILIES) <= names, sorted(set(FAMILIES) - names)


@pytest.mark.parametrize("mod", _families(), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_check_accepts_what_a_kernel_may_read(mod):
    a = np.zeros(10, np.float32)
    mod._span_check_py(a, 0, 10, F32)
    mod._span_check_py(a, 3, 7, F32)
    mod._span_check_py(a, 10, 0, F32)            # an empty extent at the end
    mod._span_check_py(a.reshape(2, 5), 0, 10, F32)
    mod._span_check_py(np.zeros(4), 0, 4, F64)
    mod._span_check_py(np.zeros(4, np.int32), 0, 4, ANY)
    mod._span_check_py(np.zeros(0, np.float32), 0, 0, F32)
    # int64 under either of its type numbers (long / long long)
    mod._span_check_py(np.zeros(3, np.dtype("q")), 0, 3, I64)
    mod._span_check_py(np.zeros(3, np.int64), 0, 3, I64)


@pytest.mark.parametrize("mod", _families(), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_check_rejects_a_bad_span(mod):
    a = np.zeros(10, np.float32)
    with pytest.raises(IndexError, match=r"elements \[0, 11\) of an array of 10"):
        mod._span_check_py(a, 0, 11, F32)
    with pytest.raises(IndexError, match=r"\[5, 11\)"):
        mod._span_check_py(a, 5, 6, F32)
    with pytest.raises(IndexError):
        mod._span_check_py(a, -1, 2, F32)
    with pytest.raises(IndexError):
        mod._span_check_py(a, 0, -1, F32)
    with pytest.raises(TypeError, match="dtype float64, the kernel reads float32"):
        mod._span_check_py(np.zeros(10), 0, 10, F32)
    with pytest.raises(TypeError, match="int64"):
        mod._span_check_py(np.zeros(3, np.int32), 0, 3, I64)
    with pytest.raises(ValueError, match="not C-contiguous"):
        mod._span_check_py(np.zeros(20, np.float32)[::2], 0, 10, F32)
    with pytest.raises(ValueError, match="not C-contiguous"):
        mod._span_check_py(np.zeros((4, 5), np.float32).T, 0, 20, F32)


def test_kernel_pointers_are_checked_in_the_debug_build_only():
    for mod in _families():
        a = np.zeros(10, np.float32)
        debug = mod._kernel_pointer_py(a, 0, 10, F32)
        if debug:
            with pytest.raises(IndexError):
                mod._kernel_pointer_py(a, 2, 9, F32)
            with pytest.raises(TypeError):
                mod._kernel_pointer_py(a, 0, 10, F64)
        else:   # release: the bare pointer, nothing checked (the small-call latency path)
            assert mod._kernel_pointer_py(a, 2, 9, F32) is False
            assert mod._kernel_pointer_py(a, 0, 10, F64) is False


def test_no_kernel_call_site_takes_a_raw_pointer():
    """A family's sources hand buffers to kernels only through fnn_span.pxi: a bare
    ``PyArray_DATA`` in a .pyx is a pointer the debug build cannot check.  (attention's
    fused-QKV test compares the three buffers' addresses; it hands none of them on.)"""
    import pathlib
    csrc = pathlib.Path(__file__).resolve().parents[1] / "csrc"
    if not csrc.is_dir():
        pytest.skip("an installed copy without the csrc/ sources")
    allowed = {"attention.pyx": 3}
    found = {}
    for src in sorted(csrc.glob("*.pyx")):
        n = src.read_text().count("PyArray_DATA(")
        if n != allowed.get(src.name, 0):
            found[src.name] = n
    assert not found, f"raw PyArray_DATA kernel pointers (use _data / _data_at): {found}"
