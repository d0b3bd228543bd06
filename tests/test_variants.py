"""The compiled kernels' instruction-set variants (base, avx2, avx512): which one is picked,
FASTNN_VARIANT, and that every variant this machine can run equals the reference.

The variant in use is picked once per process (fastnn.cpu.load_order), so the other
variants are checked in subprocesses with FASTNN_VARIANT set; tests/test_math.py checks the
vector math of every runnable variant in this process (the modules import side by side).
"""
import os
import platform
import subprocess
import sys

import pytest

import fastnn
from fastnn import cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_AVX2 = {"AVX2": True, "FMA3": True}
_AVX512 = dict(_AVX2, AVX512F=True, AVX512CD=True, AVX512BW=True, AVX512DQ=True, AVX512VL=True)


def _runnable_built():
    return [v for v in cpu.cpu_variants() if cpu._built(v)]


def test_variant_order_follows_the_cpu_features():
    assert cpu.cpu_variants({}) == ["base"]
    assert cpu.cpu_variants(_AVX2) == ["avx2", "base"]
    assert cpu.cpu_variants(_AVX512) == ["avx512", "avx2", "base"]
    # x86-64-v4 needs all five AVX-512 subsets: one missing (e.g. an OS that does not save
    # the ZMM state makes NumPy report none of them) keeps the avx2 kernels
    for missing in ("AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL"):
        assert cpu.cpu_variants(dict(_AVX512, **{missing: False})) == ["avx2", "base"]
    assert cpu.cpu_variants({"AVX512F": True, "AVX512BW": True}) == ["base"]


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="/proc/cpuinfo flags: Linux on x86-64 only")
def test_avx512_detection_agrees_with_the_kernel():
    """Linux lists the avx512* flags only where it enables the ZMM/opmask state (XCR0 bits
    5-7); NumPy's table (what cpu_variants reads) checks XCR0 itself.  They must agree."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    linux = all(f in flags for f in ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"))
    linux = linux and "avx2" in flags and "fma" in flags
    assert ("avx512" in cpu.cpu_variants()) == linux


def test_loaded_variant_is_the_best_runnable_one():
    if os.environ.get("FASTNN_VARIANT"):
        pytest.skip("FASTNN_VARIANT forces the variant in this run")
    be = fastnn._backend.backend("cpu")
    assert set(be.variant.values()) == {_runnable_built()[0]}


@pytest.mark.parametrize("value, match", [
    ("avx1024", "is not a kernel variant"),
    ("sse9", "expected one of avx512, avx2, base"),
])
def test_forced_variant_unknown(monkeypatch, value, match):
    monkeypatch.setenv("FASTNN_VARIANT", value)
    with pytest.raises(cpu.VariantError, match=match):
        cpu.load_order()


def test_forced_variant_the_cpu_cannot_run(monkeypatch):
    monkeypatch.setenv("FASTNN_VARIANT", "avx512")
    monkeypatch.setattr(cpu, "_cpu_features", lambda: dict(_AVX2))
    with pytest.raises(cpu.VariantError, match="this CPU cannot run it .*AVX-512.*it runs: avx2, base"):
        cpu.load_order()


def test_forced_variant_not_built(monkeypatch):
    monkeypatch.setenv("FASTNN_VARIANT", "avx2")
    monkeypatch.setattr(cpu, "_cpu_features", lambda: dict(_AVX512))
    monkeypatch.setattr(cpu, "_built", lambda v: v == "base")
    with pytest.raises(cpu.VariantError, match="not built in this installation .*built: base"):
        cpu.load_order()


def test_forced_variant_loads_it_and_those_below(monkeypatch):
    monkeypatch.setattr(cpu, "_cpu_features", lambda: dict(_AVX512))
    monkeypatch.setattr(cpu, "_built", lambda v: True)
    monkeypatch.setenv("FASTNN_VARIANT", "avx2")
    assert cpu.load_order() == ["avx2", "base"]
    monkeypatch.setenv("FASTNN_VARIANT", " AVX512 ")
    assert cpu.load_order() == ["avx512", "avx2", "base"]
    monkeypatch.setenv("FASTNN_VARIANT", "")
    assert cpu.load_order() == ["avx512", "avx2", "base"]


def _env(variant):
    env = dict(os.environ, FASTNN_VARIANT=variant)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(fastnn.__file__)),
                                                     env.get("PYTHONPATH")) if p)
    return env


def test_bad_forced_variant_fails_at_import_with_the_reason():
    r = subprocess.run([sys.executable, "-c", "import fastnn"], env=_env("avx1024"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "FASTNN_VARIANT='avx1024' is not a kernel variant" in r.stderr


@pytest.mark.parametrize("variant", _runnable_built())
def test_forced_variant_is_reported(variant):
    """FASTNN_VARIANT=v loads v for every family, and `fastnn --version` / `fastnn info`
    name it (info prints variant_line)."""
    code = ("import fastnn, fastnn.cli as c; be = fastnn._backend.backend('cpu'); "
            "print(sorted(set(be.variant.values()))); print(c.version_line()); "
            "print(c.variant_line(c.build_info()))")
    r = subprocess.run([sys.executable, "-c", code], env=_env(variant), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == repr([variant])
    assert f"(variant {variant})" in lines[1]
    assert f"kernel variant: {variant} (forced by FASTNN_VARIANT)" in r.stdout


def _other_variants():
    """Runnable, built variants other than the one this process loads (the main suite
    already runs the harness under that one)."""
    try:
        loaded = cpu.load_order()[0]
    except cpu.VariantError:
        loaded = None
    return [v for v in _runnable_built() if v != loaded]


@pytest.mark.parametrize("variant", _other_variants())
def test_variant_equals_the_reference(variant):
    """The op harness (every compiled op against the reference, forward and backward, float32
    and float64, non-contiguous inputs) and the module cases, on the cpu backend, with this
    variant forced.  The variant this process loaded runs them in the main suite."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           os.path.join(ROOT, "tests", "test_ops.py"), "-k",
           "(test_op_matches_reference or test_module_matches_reference) and cpu"]
    r = subprocess.run(cmd, env=_env(variant), capture_output=True, text=True, timeout=1200,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout


def test_info_and_bench_header_name_the_variant(monkeypatch):
    import io

    from fastnn import cli
    buf = io.StringIO()
    cli.info(None, out=buf)
    loaded = sorted(set(fastnn._backend.backend("cpu").variant.values()))
    assert f"kernel variant: {'+'.join(loaded)}" in buf.getvalue()
    assert f"this CPU runs {', '.join(cpu.cpu_variants())}" in buf.getvalue()
