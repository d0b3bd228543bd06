"""The `fastnn` command line: --version, help, checks before work, generate, the plot."""
import io
import os
import sys
import types

import numpy as np
import pytest

import fastnn
from fastnn import cli, demo
from fastnn.bench import cli as bench_cli

TINY = ["--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-head", "2",
        "--d-model", "16", "--warmup", "1", "--sample-chars", "5", "--eval-batches", "1",
        "--save-every", "0", "--quiet", "--threads", "1"]


def _no_work(monkeypatch):
    """Make every subcommand's real work fail the test: the checks must stop it first."""
    def boom(*a, **k):
        raise AssertionError("the command started its work despite bad arguments")
    monkeypatch.setattr(bench_cli, "run", boom)
    monkeypatch.setattr(demo, "run", boom)
    monkeypatch.setattr(demo, "generate", boom)


def _fails_at_once(argv, capsys, match):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert match in err, err


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"fastnn {fastnn.__version__}: cpu kernels ")


def test_bare_fastnn_prints_help_and_runs_nothing(monkeypatch, capsys):
    _no_work(monkeypatch)
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for sub in ("bench", "demo", "generate", "info"):
        assert f"\n    {sub} " in out, out


def test_info_reports_the_build(capsys):
    b = cli.info(None, out=io.StringIO())
    assert b["compiled"] and b["fallbacks"] == []
    assert all(v is not None for v in b["openmp"].values())


def test_info_names_what_the_gemms_run_on():
    """`fastnn info` says whether float32 GEMMs run on the own kernel (the avx512 and avx2
    builds' default) or on BLAS, and FASTNN_SGEMM=blas switches it in a fresh process."""
    import subprocess
    b = cli.build_info()
    own_build = "avx512" in b["variants"] or "avx2" in b["variants"]
    want = "own" if own_build else "numpy-openblas"
    assert b["gemm"] in (want, "scipy-blas")
    text = io.StringIO()
    cli.info(None, out=text)
    assert cli.gemm_line(b) in text.getvalue().splitlines()
    env = dict(os.environ, FASTNN_SGEMM="blas")
    r = subprocess.run([sys.executable, "-m", "fastnn", "info"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("float32 GEMM:")]
    assert line and "own" not in line[0] and "BLAS" in line[0], r.stdout


def test_a_closed_pipe_ends_the_command_quietly():
    """`fastnn info | head -1`: when the reader has gone, the command stops with status
    141 (a Unix tool's on SIGPIPE) and no traceback."""
    import subprocess
    r, w = os.pipe()
    os.close(r)                 # the reader is gone before the first write
    try:
        p = subprocess.run([sys.executable, "-m", "fastnn", "info"], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 141 and "Traceback" not in p.stderr, p.stderr
    assert "BrokenPipe" not in p.stderr, p.stderr


def test_serial_build_is_reported(monkeypatch):
    """A kernel build without OpenMP says so (the _build module's OPENMP is 0)."""
    for v in cli.build_info()["variants"]:
        monkeypatch.setitem(sys.modules, f"fastnn._cpu.{v}._build", types.SimpleNamespace(OPENMP=0))
    assert "SERIAL (built without OpenMP)" in cli.version_line()


def test_bench_plot_without_matplotlib_fails_at_once(monkeypatch, capsys, tmp_path):
    _no_work(monkeypatch)
    monkeypatch.setitem(sys.modules, "matplotlib", None)    # import matplotlib -> ImportError
    _fails_at_once(["bench", "--only", "norm", "--plot", str(tmp_path / "x.png")], capsys,
                   "--plot needs matplotlib")


@pytest.mark.parametrize("argv,match", [
    (["bench", "--only", "nosuchfamily"], "unknown benchmark family nosuchfamily"),
    (["bench", "--threads", "0"], "must be a positive integer"),
    (["bench", "--json", "/nonexistent-folder/x.json"], "does not exist"),
    (["demo", "--checkpoint", "x.pt"], "must end in .safetensors or .npz"),
    (["demo", "--checkpoint", "/nonexistent-folder/x.npz"], "does not exist"),
    (["demo", "--resume", "--checkpoint", "no-such-ckpt.npz"], "does not exist"),
    (["demo", "--text", "no-such-text.txt"], "--text no-such-text.txt does not exist"),
    (["demo", "--d-model", "30", "--n-head", "4"], "not divisible"),
    (["demo", "--steps", "-1"], "must be >= 0"),
    (["demo", "--temperature", "0"], "must be > 0"),
    (["demo", "--dropout", "1"], "in [0, 1)"),
    (["generate", "--checkpoint", "no-such-ckpt.safetensors"], "does not exist"),
    (["generate", "--checkpoint", "x.pt"], "must end in"),
    (["generate", "--top-p", "1.5"], "in (0, 1]"),
    (["generate", "--top-k", "0"], "must be a positive integer"),
    (["generate", "--length", "x"], "is not an integer"),
])
def test_subcommands_check_arguments_before_work(argv, match, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    _no_work(monkeypatch)
    _fails_at_once(argv, capsys, match)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ckpt") / "demo.npz")
    p = demo.argparse.ArgumentParser()
    demo._arguments(p)
    threads = fastnn.get_num_threads()
    try:
        demo.run(p.parse_args(TINY + ["--steps", "3", "--checkpoint", path]), out=io.StringIO())
    finally:
        fastnn.set_num_threads(threads)
    return path


def _generate(argv, capsys):
    threads = fastnn.get_num_threads()
    try:
        assert cli.main(["generate"] + argv) == 0
    finally:
        fastnn.set_num_threads(threads)
    return capsys.readouterr().out


def test_generate_samples_from_a_demo_checkpoint_without_training(checkpoint, monkeypatch, capsys):
    monkeypatch.setattr(demo, "run", None)     # training is never called
    argv = ["--checkpoint", checkpoint, "--prompt", "RO", "--length", "25", "--top-k", "5",
            "--temperature", "0.9", "--seed", "3", "--threads", "1"]
    a = _generate(argv, capsys)
    assert a.startswith("RO") and len(a) == 2 + 25 + 1        # + print's newline
    assert _generate(argv, capsys) == a                        # --seed makes it repeatable
    # greedy decoding is what the checkpoint's model itself produces
    model, data, _ = demo.load_model(checkpoint)
    ids = model.generate(data.encode("RO")[None, :], 10, top_k=1)
    greedy = _generate(["--checkpoint", checkpoint, "--prompt", "RO", "--length", "10",
                        "--top-k", "1", "--threads", "1"], capsys)
    assert greedy == "RO" + data.decode(ids[0, 2:]) + "\n"


def test_generate_rejects_bad_checkpoints_and_prompts(checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit, match="lacks"):
        cli.main(["generate", "--checkpoint", checkpoint, "--prompt", "\u00e9\u00e8"])
    other = str(tmp_path / "other.npz")
    fastnn.save({"a": np.ones(2)}, other)
    with pytest.raises(SystemExit, match="not a fastnn demo checkpoint"):
        cli.main(["generate", "--checkpoint", other])


# ---------------------------------------------------------------------- the plot
def _result(with_torch):
    rows = []
    for i, (ref, tr) in enumerate([(56.2, 0.78), (151.0, 0.9), (None, 0.01), (3.0, None)]):
        rows.append(dict(family="norm", op=f"op{i}", shape="8x768", fastnn_ms=1.0,
                         speedup_vs_reference=ref,
                         time_ratio_vs_torch=tr if with_torch else None))
    return dict(version="0", threads=2, processor="cpu", torch="2" if with_torch else None,
                rows=rows)


@pytest.mark.parametrize("with_torch", [True, False])
def test_plot_labels_every_bar_and_has_no_empty_legend_entries(with_torch, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    res = _result(with_torch)
    fig = bench_cli.figure(res)
    try:
        ax = fig.axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        bars = [p for p in ax.patches if p.get_width() > 0]
        labels = [t.get_text() for t in ax.texts]
        assert len(legend) == (2 if with_torch else 1)            # no torch: no torch entry
        values = [r["speedup_vs_reference"] for r in res["rows"] if r["speedup_vs_reference"]]
        if with_torch:
            values += [1 / r["time_ratio_vs_torch"] for r in res["rows"] if r["time_ratio_vs_torch"]]
        assert len(bars) == len(values)
        for v in values:                                          # each bar carries its value
            assert bench_cli._fmt_x(v) in labels
        assert "not measured" in labels                           # a missing value is no bar
    finally:
        plt.close(fig)
    bench_cli.plot(res, str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 1000
