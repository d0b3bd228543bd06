"""fastnn bench's memory ceilings: each memory-bound row is measured against a copy of its
own working-set size (a 16 MB input sits in a 32 MB L3; DRAM bandwidth is the wrong
ceiling for it), the best of memcpy / ufunc copies on 1 and n threads and fastnn's own
threaded copies (ordinary and non-temporal stores)."""
import os

import numpy as np
import pytest

from fastnn.bench import cli as bench_cli
from fastnn.bench import core


def test_stream_copy_copies():
    from fastnn.cpu import compiled_modules
    act = next(m for m in compiled_modules() if m.__name__.endswith(".activation"))
    a = np.arange(100003, dtype=np.float32)
    b = np.zeros_like(a)
    assert act._stream_copy(a, b) is b and np.array_equal(a, b)
    with pytest.raises(ValueError, match="differ in size"):
        act._stream_copy(a, b[:-1])


def test_update_in_place_adds():
    from fastnn.cpu import compiled_modules
    act = next(m for m in compiled_modules() if m.__name__.endswith(".activation"))
    g = np.arange(100003, dtype=np.float32)
    outs = [np.full_like(g, float(k)) for k in range(3)]
    res = act._update_in_place(*outs, g)
    for k in range(3):
        assert res[k] is outs[k] and np.array_equal(outs[k], g + k)
    with pytest.raises(ValueError, match="differ in size"):
        act._update_in_place(outs[0], outs[1][:-1], outs[2], g)


def test_copy_bandwidth_measures_both_kinds_of_copy():
    for how in ("memcpy", "ufunc", "kernel", "stream", "inplace", "update"):
        for threads in (1, 2):
            assert core.copy_bandwidth(1 << 20, min_time=0.0, threads=threads, how=how) > 0


def test_ceiling_is_taken_at_the_rows_size(monkeypatch):
    calls = []

    def fake(nbytes, min_time, threads, how):
        calls.append((nbytes, threads, how))
        # cache-resident sizes copy faster; ufunc copies win in cache, memcpy past it
        fast = 100.0 if nbytes <= 32 << 20 else 20.0
        return fast * (1.1 if (how == "ufunc") == (nbytes <= 32 << 20) else 1.0) * threads ** 0.5

    monkeypatch.setattr(core, "copy_bandwidth", fake)
    ceil = core.Ceilings(threads=2)
    assert ceil.size_class(3 << 20) == 3 << 20 and ceil.size_class((16 << 20) + 5) == 16 << 20
    assert ceil.size_class(10) == 1 << 16
    small = ceil.copy_at(16 << 20)
    assert small == pytest.approx(110.0 * 2 ** 0.5)
    assert {(t, h) for _, t, h in calls} == {(1, "memcpy"), (2, "memcpy"), (1, "ufunc"), (2, "ufunc"),
                                             (2, "kernel"), (2, "stream")}
    # an in-place row (an optimizer step) also gets an in-place update as a candidate
    calls.clear()
    assert ceil.copy_at(16 << 20, inplace=True) >= small
    assert {h for _, _, h in calls} == {"memcpy", "ufunc", "kernel", "stream", "inplace",
                                        "update"}
    n = len(calls)
    assert ceil.copy_at((16 << 20) + 100) == small and len(calls) == n      # cached per size
    # a refresh measures again and keeps the best rate seen
    monkeypatch.setattr(core, "copy_bandwidth", lambda *a: 1.0)
    assert ceil.copy_at(16 << 20, refresh=True) == small
    monkeypatch.setattr(core, "copy_bandwidth", lambda *a: 500.0)
    assert ceil.copy_at(16 << 20, refresh=True) == 500.0
    monkeypatch.setattr(core, "copy_bandwidth", fake)
    assert ceil.copy_at(256 << 20) == pytest.approx(22.0 * 2 ** 0.5)

    # a row moving 80 MB of traffic over a 32 MB working set: 40 GB/s achieved is 26% of the
    # in-cache copy, not 129% of a DRAM copy
    case = core.BenchCase("x", "op", "s", make=None, bytes=80e6, working_set=32 << 20)
    s = bench_cli._fmt_rate(case, 80e6 / 40e9, ceil, 31.0)
    assert "26% of copy at 32 MiB" in s and "129% DRAM copy" in s
    # without working_set the traffic is the size
    case = core.BenchCase("x", "op", "s", make=None, bytes=float(16 << 20))
    s = bench_cli._fmt_rate(case, (16 << 20) / 40e9, ceil, 31.0)
    assert "of copy at 16 MiB" in s


def test_sgemm_ceiling_is_the_best_size(monkeypatch):
    """The sgemm ceiling is the best rate over square products of several sizes, cache-sized
    ones among them by default: a 1024 x 768 -> 768 linear layer read 104% of 2048^3's
    rate on a Xeon whose L3 holds 1024^3's operands, and 101% of the best of 2048^3 and
    1024^3 on a Zen 5 whose shared 32 MiB L3 holds its own (768^3's size)."""
    import inspect
    from fastnn.bench import core
    assert min(inspect.signature(core.sgemm_rate).parameters["sizes"].default) <= 768
    # every call takes 1 s: the rate is 2 n^3 / 1e9, best at the larger size
    monkeypatch.setattr(core, "time_fn", lambda *a, **k: 1.0)
    assert core.sgemm_rate(sizes=(32, 64), min_time=0.0) == 2.0 * 64 ** 3 / 1e9
    assert core.sgemm_rate(sizes=(64, 32), min_time=0.0) == 2.0 * 64 ** 3 / 1e9


def test_gemm_ceiling_is_the_best_sgemm_rate_seen(monkeypatch):
    """A compute-bound row is measured against the best sgemm rate of the run (measured
    again after each such row), never against one measurement a busy moment pulled down:
    a row at 103% of one early sgemm measurement was the symptom."""
    from fastnn.bench import core
    rates = iter([100.0, 90.0, 160.0, 120.0])
    monkeypatch.setattr(core, "sgemm_rate", lambda *a, **k: next(rates))
    ceil = core.Ceilings(threads=2)
    assert ceil.gemm() == 100.0 and ceil.gemm() == 100.0          # measured once until refresh
    assert ceil.gemm(refresh=True) == 100.0                         # 90 is not better
    assert ceil.gemm(refresh=True) == 160.0
    assert ceil.gemm(refresh=True) == 160.0                         # 120 is not better
    case = core.BenchCase("x", "op", "s", make=None, flops=80e9)
    assert "80.0 GFLOP/s ( 50% sgemm)" in bench_cli._fmt_rate(case, 1.0, ceil, 31.0)
    row = dict(family="f", op="o", shape="s", fastnn_ms=1.0, reference_ms=None, torch_ms=None,
               speedup_vs_reference=None, time_ratio_vs_torch=None, gbps=None, gflops=80.0,
               ceiling_gflops=160.0)
    res = dict(processor="p", nproc=2, threads=2, torch=None, date="d", copy_gbps=25.0,
               sgemm_gflops=100.0, rows=[row])
    assert "80.0 GFLOP/s (50% sgemm)" in bench_cli.markdown(res)


def test_markdown_uses_the_rows_ceiling():
    row = dict(family="f", op="o", shape="s", fastnn_ms=1.0, reference_ms=None, torch_ms=None,
               speedup_vs_reference=None, time_ratio_vs_torch=None, gbps=50.0, gflops=None,
               ceiling_gbps=100.0)
    res = dict(processor="p", nproc=2, threads=2, torch=None, date="d", copy_gbps=25.0,
               sgemm_gflops=1.0, rows=[row])
    md = bench_cli.markdown(res)
    assert "50% of copy at its size; 200% DRAM" in md
    assert np.isfinite(row["gbps"])


def test_ceiling_past_the_cache_is_the_dram_size(monkeypatch):
    """A row whose bytes run to gigabytes (token generation streams the weights once per
    token) is compared with a DRAM-size copy, never a copy of its own total size."""
    from fastnn.bench import core
    sizes = []
    monkeypatch.setattr(core, "copy_bandwidth",
                        lambda n, *a, **k: sizes.append(n) or 10.0)
    ceil = core.Ceilings(threads=2)
    assert ceil.copy_at(60e9) == 10.0
    assert max(sizes) == core.Ceilings.DRAM_SIZE
    assert ceil.size_class(1 << 20) == 1 << 20


def test_generation_rows_declare_the_weights_as_working_set():
    from fastnn.bench import generate
    for case in generate.cases():
        assert case.working_set is not None and case.working_set < case.bytes


def test_a_row_above_its_ceiling_remeasures_it_then_says_so(monkeypatch):
    """A ceiling is a lower bound: a row timed in a quieter moment than its ceiling is
    compared with a ceiling measured again (up to 4 times); one still above it is flagged
    in the JSON and in a line of the report, never printed silently above 100%."""
    import io
    import time

    def make():
        return {"fastnn": lambda: time.sleep(0.001), "reference": None, "torch": None}
    case = core.BenchCase("x", "op", "s", make, flops=1e9)       # ~1000 GFLOP/s achieved
    monkeypatch.setattr(bench_cli, "collect", lambda only: [case])
    monkeypatch.setattr(bench_cli, "torch_or_none", lambda: None)
    monkeypatch.setattr(core, "copy_bandwidth", lambda *a: 10.0)
    for rates, flagged, n_calls in (([100.0] * 10, True, 5), ([100.0, 100.0, 5e3], False, 3)):
        calls = []

        def fake(*a, _r=iter(rates), **k):
            calls.append(1)
            return next(_r)
        monkeypatch.setattr(core, "sgemm_rate", fake)
        out = io.StringIO()
        res = bench_cli.run(only=["x"], threads=1, quick=True, out=out)
        assert len(calls) == n_calls                  # once at the start, then per try
        assert res["rows"][0]["above_ceiling"] is flagged
        assert ("above 100% of a ceiling" in out.getvalue()) is flagged


def test_implementations_are_timed_in_interleaved_rounds(monkeypatch):
    """fastnn and the libraries it is compared with are timed round after round (the order
    reversed each round), not one after the other: a slow spell of a shared machine then
    falls on every side.  Each side's time is its best call; None entries are skipped."""
    import io
    order = []
    clock = [0.0]
    # "a": 1 s a call except its 3rd (0.5 s: under the round's 1 s budget, so that round
    # calls it again); "b": a 0.1 s warm-up (not timed), then 3 s, 2 s, 3 s
    durations = {"a": iter([1.0, 1.0, 0.5, 1.0, 1.0]), "b": iter([0.1, 3.0, 2.0, 3.0])}

    def fn(name):
        def call():
            order.append(name)
            clock[0] += next(durations[name])
        return call
    monkeypatch.setattr(core.time, "perf_counter", lambda: clock[0])
    per_round = {}
    best = core.time_interleaved({"a": fn("a"), "b": fn("b"), "c": None}, min_time=3.0,
                                 max_reps=100, rounds=3, warmup=1, per_round=per_round)
    assert best == {"a": 0.5, "b": 2.0}
    assert per_round == {"a": pytest.approx([1.0, 0.5, 1.0]), "b": pytest.approx([3.0, 2.0, 3.0])}
    # warm-up (a, b), then rounds a b | b a a | a b (1 s budget per side and round)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "a", "b"]

    # the bench runs fastnn and torch through it (the reference, seconds a call, apart)
    seen = []
    monkeypatch.undo()

    def spy(fns, *a, **k):
        seen.append(sorted(fns))
        return {k: 1e-3 for k in fns}
    monkeypatch.setattr(bench_cli, "time_interleaved", spy)
    case = core.BenchCase("x", "op", "s", lambda: {"fastnn": lambda: None, "reference": None,
                                                   "torch": lambda: None,
                                                   "onnxruntime": lambda: None}, bytes=1e6)
    monkeypatch.setattr(bench_cli, "collect", lambda only: [case])
    monkeypatch.setattr(core, "copy_bandwidth", lambda *a, **k: 1e9)
    res = bench_cli.run(only=["x"], threads=1, quick=True, out=io.StringIO())
    assert seen == [["fastnn", "onnxruntime", "torch"]]
    row = res["rows"][0]
    assert row["time_ratio_vs_torch"] == 1.0 and row["time_ratio_vs"] == {"onnxruntime": 1.0}


def test_loss_rows_count_the_reread_past_the_cache(monkeypatch):
    """A forward + backward loss row reads its inputs twice; what the last-level cache can
    keep between the passes is not counted as memory traffic, so the row cannot beat its
    copy ceiling by cache hits (mse_loss showed 106-124% of it)."""
    from fastnn.bench import core, loss
    n = 8 << 20
    monkeypatch.setattr(core, "last_level_cache_bytes", lambda: 32 << 20)
    rows = {c.op: c for c in loss.cases()}
    mse = rows["mse_loss fwd+bwd"]
    assert mse.bytes == 4.0 * n * 3 + 4.0 * n * 2 - (32 << 20)
    assert mse.working_set == 4.0 * n * 3
    monkeypatch.setattr(core, "last_level_cache_bytes", lambda: 1 << 30)   # all cached
    assert {c.op: c for c in loss.cases()}["mse_loss fwd+bwd"].bytes == 4.0 * n * 3
    ce = {c.op: c for c in loss.cases()}["cross_entropy fwd+bwd"]
    assert ce.bytes == 4.0 * 8192 * 4096 * 2 and ce.working_set == ce.bytes


def test_activation_rows_count_the_saved_reread_past_the_cache(monkeypatch):
    """An activation's backward reads the array its forward kept (x, y or rrelu's slopes),
    which the forward just touched: like a loss row, only what a last-level cache cannot
    keep counts as memory traffic (prelu fwd+bwd showed 104% of its copy ceiling counting
    it all).  Rows with a bit mask and forward rows are unchanged."""
    from fastnn.bench import activation, core
    n = activation.N
    monkeypatch.setattr(core, "last_level_cache_bytes", lambda: 32 << 20)
    rows = {c.op: c for c in activation.cases()}
    assert rows["prelu fwd+bwd"].bytes == 4.0 * n * 4
    assert rows["rrelu fwd+bwd"].bytes == 4.0 * n * 5
    assert rows["hardswish fwd"].bytes == 4.0 * n * 2
    assert rows["relu fwd+bwd"].bytes == 4.0 * n * 4 + n / 8.0 * 2
    monkeypatch.setattr(core, "last_level_cache_bytes", lambda: 0)          # unknown
    rows = {c.op: c for c in activation.cases()}
    assert rows["prelu fwd+bwd"].bytes == 4.0 * n * 5
    monkeypatch.setattr(core, "last_level_cache_bytes", lambda: 4 << 20)    # a small L3
    assert {c.op: c for c in activation.cases()}["sigmoid fwd+bwd"].bytes == \
        4.0 * n * 4 + 4.0 * n - (4 << 20)


def test_last_level_cache_size_is_read():
    """On Linux the size comes from sysfs; anywhere it is a size or 0 (unknown)."""
    import sys
    from fastnn.bench import core
    n = core.last_level_cache_bytes()
    assert n >= 0
    if sys.platform.startswith("linux") and os.path.isdir("/sys/devices/system/cpu/cpu0/cache"):
        assert n >= 256 << 10


def test_rows_show_the_ratio_round_by_round(monkeypatch):
    """Each row's fastnn/torch time ratio, besides the one of the two bests, is shown as the
    lowest and highest ratio of the times taken in the same interleaved round: what the
    machine's load does to it (a 1.16x in a loaded full run read 0.96x in quick reruns)."""
    import io
    from fastnn.bench import cli as bench_cli, core
    calls = {"fastnn": iter([1.0, 1.0, 3.0, 2.0]), "torch": iter([1.0, 2.0, 2.0, 2.0])}
    clock = [0.0]

    def fn(name):
        def call():
            clock[0] += next(calls[name])
        return call
    case = core.BenchCase("x", "op", "s", lambda: {"fastnn": fn("fastnn"), "reference": None,
                                                   "torch": fn("torch")}, bytes=1e6,
                          min_time=1e-9, max_reps=3)
    monkeypatch.setattr(bench_cli, "collect", lambda only: [case])
    monkeypatch.setattr(core, "copy_bandwidth", lambda *a, **k: 1e9)
    monkeypatch.setattr(core, "sgemm_rate", lambda *a, **k: 1.0)
    monkeypatch.setattr(core.time, "perf_counter", lambda: clock[0])
    out = io.StringIO()
    res = bench_cli.run(only=["x"], threads=1, quick=True, out=out)
    row = res["rows"][0]
    # warm-up 1.0 / 1.0, then rounds: fastnn 1.0 torch 2.0 | torch 2.0 fastnn 3.0 | fastnn 2.0 torch 2.0
    assert row["time_ratio_vs_torch_by_round"] == pytest.approx([0.5, 1.5, 1.0])
    assert row["time_ratio_vs_torch"] == pytest.approx(0.5)
    assert "0.50-1.50" in out.getvalue()
    assert "| 0.50x | 0.50-1.50 |" in bench_cli.markdown(res)
    assert bench_cli._fmt_span(None) == "-"
