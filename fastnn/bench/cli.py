"""The ``fastnn bench`` runner: discovers every family's cases, times them, prints a table.

Speed is reported as ratios within one run (the machine's own copy bandwidth and sgemm
rate are measured in the same run, and fastnn and the libraries it is compared with are
timed in interleaved rounds), because shared machines are noisy.
"""
import importlib
import json
import os
import pkgutil
import platform
import sys
import time

import numpy as np

from .core import Ceilings, time_fn, time_interleaved, torch_or_none

_NOT_FAMILIES = {"core", "cli"}


def families():
    import fastnn.bench as pkg
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                  if not m.name.startswith("_") and m.name not in _NOT_FAMILIES)


def collect(only=None):
    out = []
    for fam in families():
        mod = importlib.import_module(f"fastnn.bench.{fam}")
        for c in mod.cases():
            if only and c.family not in only and fam not in only:
                continue
            out.append(c)
    return out


def _fmt_size(nbytes):
    return f"{nbytes / (1 << 20):.0f} MiB" if nbytes >= 1 << 20 else f"{nbytes / 1024:.0f} KiB"


def _fmt_rate(case, t, ceil, dram):
    """Achieved rate and its share of the ceiling: GFLOP/s against sgemm, GB/s against a
    copy of the row's own working-set size (``ceil``: fastnn.bench.core.Ceilings) and,
    for reference, against the DRAM copy rate ``dram``."""
    if t is None:
        return ""
    if case.flops:
        r = case.flops / t / 1e9
        return f"{r:7.1f} GFLOP/s ({100 * r / ceil.gemm():3.0f}% sgemm)"
    if case.bytes:
        r = case.bytes / t / 1e9
        ws = case.working_set or case.bytes
        c = ceil.copy_at(ws, inplace=case.inplace)
        return (f"{r:7.1f} GB/s ({100 * r / c:3.0f}% of copy at {_fmt_size(ceil.size_class(ws))}"
                f"; {100 * r / dram:.0f}% DRAM copy)")
    return ""


def run(only=None, threads=None, json_path=None, plot_path=None, quick=False, out=sys.stdout,
        markdown_path=None):
    import fastnn
    if plot_path:
        _pyplot()      # no matplotlib: fail now, not after the whole run
    n = threads or fastnn.get_num_threads()
    fastnn.set_num_threads(n)
    torch = torch_or_none()
    if torch is not None:
        torch.set_num_threads(n)
    cases = collect(only)
    if not cases:
        raise SystemExit(f"no benchmark cases for {only}; families: {', '.join(families())}")
    print(f"fastnn {fastnn.__version__} bench: {len(cases)} cases, {n} threads, cpu variant "
          f"{sorted(set(fastnn._backend.backend('cpu').variant.values()))}, torch "
          f"{torch.__version__ if torch else 'not installed'}", file=out)
    print("measuring the machine's ceilings ...", file=sys.stderr, flush=True)
    ceil = Ceilings(threads=n)
    bw = ceil.copy_at(ceil.DRAM_SIZE)
    gf = ceil.gemm()
    print(f"ceilings: DRAM copy bandwidth {bw:.1f} GB/s (read+write, 256 MiB working set, "
          f"{n} threads), sgemm {gf:.1f} GFLOP/s (measured again after each compute-bound row: a row's "
          f"percentage is of the best seen so far); a memory-bound row's own ceiling is the copy "
          f"rate at its working-set size (in-cache sizes copy faster)", file=out)
    rows = []
    over_ceiling = 0
    header = (f"{'family':<10} {'op':<34} {'shape':<26} {'fastnn ms':>10} {'ref ms':>9} "
              f"{'vs ref':>7} {'torch ms':>9} {'vs torch':>8} {'by round':>10}  achieved")
    print(header, file=out)
    print("-" * len(header), file=out)
    t_start = time.perf_counter()
    for i, c in enumerate(cases):
        print(f"[{i + 1}/{len(cases)}] {c.family} {c.op} {c.shape} ...", file=sys.stderr, flush=True)
        fns = c.make()
        mt = c.min_time * (0.4 if quick else 1.0)
        # fastnn and every other implementation but the reference (seconds per call)
        # in interleaved rounds: a slow spell of a shared machine falls on both sides
        per_round = {}
        timed = time_interleaved({k: f for k, f in fns.items() if k != "reference"}, mt,
                                 c.max_reps, per_round=per_round)
        t_fast = timed.pop("fastnn")
        t_ref = None
        if fns.get("reference") is not None:
            # the reference can take seconds: one cold run, a few more only if it is quick
            t0 = time.perf_counter()
            fns["reference"]()
            t_ref = time.perf_counter() - t0
            if t_ref < 0.2 and not quick:
                t_ref = min(t_ref, time_fn(fns["reference"], min_time=0.0, max_reps=3, warmup=0))
        t_torch = timed.pop("torch", None)
        # further implementations a family compares with (e.g. "onnxruntime"), same run
        t_others = timed
        del fns
        # the row's ceiling, measured again now: under the same load as the row.  A
        # ceiling is a lower bound of what the machine can do; a row that beats it was
        # timed in a quieter moment than the ceiling, so the ceiling is measured again
        # (up to 3 more times) before the row is shown against it.
        for _ in range(4):
            if c.flops:
                over = c.flops / t_fast / 1e9 > ceil.gemm(refresh=True)
            elif c.bytes:
                over = c.bytes / t_fast / 1e9 > ceil.copy_at(c.working_set or c.bytes,
                                                             refresh=True, inplace=c.inplace)
            else:
                over = False
            if not over:
                break
        if over:
            over_ceiling += 1
        row = dict(family=c.family, op=c.op, shape=c.shape, fastnn_ms=t_fast * 1e3,
                   reference_ms=None if t_ref is None else t_ref * 1e3,
                   torch_ms=None if t_torch is None else t_torch * 1e3,
                   speedup_vs_reference=None if t_ref is None else t_ref / t_fast,
                   time_ratio_vs_torch=None if t_torch is None else t_fast / t_torch,
                   time_ratio_vs_torch_by_round=_round_ratios(per_round, "torch"),
                   gbps=None if not c.bytes else c.bytes / t_fast / 1e9,
                   ceiling_gbps=(None if not c.bytes or c.flops
                                 else ceil.copy_at(c.working_set or c.bytes, inplace=c.inplace)),
                   gflops=None if not c.flops else c.flops / t_fast / 1e9,
                   ceiling_gflops=ceil.gemm() if c.flops else None,
                   above_ceiling=bool(over))
        if t_others:
            row.update(others_ms={k: t * 1e3 for k, t in t_others.items()},
                       time_ratio_vs={k: t_fast / t for k, t in t_others.items()})
        tokens = getattr(c, "tokens", None)   # end-to-end rows: tokens per call -> tokens/s
        if tokens:
            row.update(unit=getattr(c, "unit", "tokens"), tokens_per_s=tokens / t_fast,
                       reference_tokens_per_s=None if t_ref is None else tokens / t_ref,
                       torch_tokens_per_s=None if t_torch is None else tokens / t_torch)
        rows.append(row)
        ref_s = f"{row['reference_ms']:9.2f}" if t_ref else f"{'-':>9}"
        sp_s = f"{row['speedup_vs_reference']:6.1f}x" if t_ref else f"{'-':>7}"
        to_s = f"{row['torch_ms']:9.3f}" if t_torch else f"{'-':>9}"
        tr_s = f"{row['time_ratio_vs_torch']:7.2f}x" if t_torch else f"{'-':>8}"
        print(f"{c.family:<10} {c.op:<34} {c.shape:<26} {row['fastnn_ms']:10.3f} {ref_s} {sp_s} "
              f"{to_s} {tr_s} {_fmt_span(row['time_ratio_vs_torch_by_round']):>10}  "
              f"{_fmt_rate(c, t_fast, ceil, ceil.copy_at(ceil.DRAM_SIZE))}",
              file=out, flush=True)
        if tokens:
            print(f"{'':<10} -> {_fmt_tokens(row)}", file=out, flush=True)
        if t_others:
            print(f"{'':<10} -> {_fmt_others(row)}", file=out, flush=True)
    if over_ceiling:
        print(f"{over_ceiling} row(s) above 100% of a ceiling measured 4 times under the same "
              f"load: the machine is busy (ceilings are lower bounds); rerun on an idle one",
              file=out)
    print(f"('vs ref' = reference time / fastnn time; 'vs torch' = fastnn time / torch time, "
          f"<= 1.00x means fastnn is at least as fast, from each side's best call; 'by round' = "
          f"the lowest and highest of that ratio within each of the interleaved timing rounds: "
          f"how far the machine's load moves it)  [{time.perf_counter() - t_start:.0f} s]",
          file=out)
    result = dict(version=fastnn.__version__, threads=n, machine=platform.machine(),
                  processor=_cpu_name(), nproc=os.cpu_count(),
                  copy_gbps=ceil.copy_at(ceil.DRAM_SIZE), sgemm_gflops=ceil.gemm(),
                  torch=None if torch is None else torch.__version__,
                  date=time.strftime("%Y-%m-%d"), rows=rows)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {json_path}", file=out)
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(markdown(result))
        print(f"wrote {markdown_path}", file=out)
    if plot_path:
        plot(result, plot_path)
        print(f"wrote {plot_path}", file=out)
    return result


def _round_ratios(per_round, other):
    """fastnn's time over ``other``'s, round by round (time_interleaved's per_round), or
    None where either side has no rounds."""
    mine, theirs = per_round.get("fastnn"), per_round.get(other)
    if not mine or not theirs:
        return None
    return [a / b for a, b in zip(mine, theirs)]


def _fmt_span(ratios):
    """'0.93-1.02' (the lowest and highest of a row's ratios by round), '-' for none."""
    if not ratios:
        return "-"
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def _fmt_tokens(r):
    f = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    s = (f"{r.get('unit', 'tokens')}/s: fastnn {f(r['tokens_per_s'])}, reference "
         f"{f(r['reference_tokens_per_s'])}, torch {f(r['torch_tokens_per_s'])}")
    for k, ms in (r.get("others_ms") or {}).items():
        s += f", {k} {f(r['tokens_per_s'] * r['fastnn_ms'] / ms)}"
    if r.get("torch_tokens_per_s"):
        s += f" (fastnn = {r['tokens_per_s'] / r['torch_tokens_per_s']:.2f}x torch)"
    return s


def _fmt_others(r):
    return ", ".join(f"{k} {ms:.3f} ms: fastnn/{k} time {r['time_ratio_vs'][k]:.2f}x"
                     for k, ms in r["others_ms"].items())


def markdown(result):
    """The results as a Markdown section (for BENCHMARKS.md)."""
    lines = [f"Machine: {result['processor']}, {result['nproc']} CPUs, {result['threads']} threads; "
             f"torch {result['torch']}; date {result['date']}.",
             f"Ceilings measured in the same run: DRAM copy bandwidth {result['copy_gbps']:.1f} GB/s "
             f"(read+write, 256 MiB), sgemm {result['sgemm_gflops']:.1f} GFLOP/s; each memory-bound "
             f"row's percentage is of a copy of its own working-set size (cache-resident sizes "
             f"copy faster than DRAM).", "",
             "| family | op | shape | fastnn ms | reference ms | speedup vs ref | torch ms "
             "| fastnn/torch time | by round | achieved |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        ach = ""
        if r["gflops"]:
            g = r.get("ceiling_gflops") or result["sgemm_gflops"]
            ach = f"{r['gflops']:.1f} GFLOP/s ({100 * r['gflops'] / g:.0f}% sgemm)"
        elif r["gbps"]:
            c = r.get("ceiling_gbps") or result["copy_gbps"]
            ach = (f"{r['gbps']:.1f} GB/s ({100 * r['gbps'] / c:.0f}% of copy at its size; "
                   f"{100 * r['gbps'] / result['copy_gbps']:.0f}% DRAM)")
        f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
        x = lambda v: "-" if v is None else format(v, ".2f") + "x"  # noqa: E731
        sp = "-" if r["speedup_vs_reference"] is None else format(r["speedup_vs_reference"], ".1f") + "x"
        lines.append(f"| {r['family']} | {r['op']} | {r['shape']} | {r['fastnn_ms']:.3f} | "
                     f"{f(r['reference_ms'], '.2f')} | {sp} | "
                     f"{f(r['torch_ms'], '.3f')} | {x(r['time_ratio_vs_torch'])} | "
                     f"{_fmt_span(r.get('time_ratio_vs_torch_by_round'))} | {ach} |")
    ends = [r for r in result["rows"] if r.get("tokens_per_s") or r.get("others_ms")]
    if ends:
        lines.append("")
        for r in ends:
            more = [_fmt_tokens(r)] if r.get("tokens_per_s") else []
            more += [_fmt_others(r)] if r.get("others_ms") else []
            lines.append(f"{r['op']} ({r['shape']}): {'; '.join(more)}.")
    return "\n".join(lines) + "\n"


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def plot(result, path):
    """Draw :func:`figure` into ``path`` (any image type matplotlib writes)."""
    fig = figure(result)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)


def figure(result):
    """Horizontal bars of speedups (log scale), each labelled with its value.

    One bar per measured comparison: vs the NumPy reference, and vs PyTorch where it was
    measured.  Series with no value at all (no torch installed) get no bar and no legend
    entry; a missing single value is drawn as no bar, never as a bar of 0 ("not measured")."""
    plt = _pyplot()
    rows = result["rows"]
    labels = [f"{r['family']}: {r['op']} {r['shape']}" for r in rows]
    series = [("vs NumPy reference", "tab:blue",
               [r["speedup_vs_reference"] for r in rows]),
              ("vs PyTorch CPU (> 1: fastnn faster)", "tab:orange",
               [1.0 / r["time_ratio_vs_torch"] if r["time_ratio_vs_torch"] else None
                for r in rows])]
    series = [s for s in series if any(v is not None for v in s[2])]
    n = max(len(series), 1)
    height = 0.8 / n
    y = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(11, (0.3 + 0.22 * n) * len(rows) + 1.6))
    values = [v for _, _, vals in series for v in vals if v]
    lo = min(values + [1.0]) / 1.6
    hi = max(values + [1.0]) * 3.0     # room for the value labels right of the longest bar
    for k, (name, color, vals) in enumerate(series):
        pos = y - 0.4 + height * (k + 0.5)
        have = [i for i, v in enumerate(vals) if v]
        # bars start at 0, which the log axis clips to its left edge
        ax.barh(pos[have], [vals[i] for i in have], height * 0.9, color=color, label=name)
        for i in have:
            ax.text(max(vals[i], lo) * 1.04, pos[i], _fmt_x(vals[i]), va="center", fontsize=7)
        for i in set(range(len(rows))) - set(have):
            ax.text(lo * 1.04, pos[i], "not measured", va="center", fontsize=7, color="0.4")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("speedup of fastnn (x, log scale; > 1 = fastnn faster)")
    torch_note = "" if result.get("torch") else "; PyTorch not installed"
    ax.set_title(f"fastnn {result['version']}, {result['threads']} threads, "
                 f"{result['processor']}{torch_note}", fontsize=9, loc="right")
    ax.xaxis.set_major_formatter(_ticker().FuncFormatter(lambda v, _: f"{v:g}x"))
    if series:   # above the bars, so it never hides one
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(series), fontsize=8,
                  frameon=False, borderaxespad=0.2)
    ax.grid(axis="x", which="both", color="0.9", lw=0.5)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return fig


def _fmt_x(v):
    return f"{v:.0f}x" if v >= 100 else f"{v:.1f}x" if v >= 10 else f"{v:.2f}x"


def _ticker():
    import matplotlib.ticker
    return matplotlib.ticker


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("fastnn bench --plot needs matplotlib: pip install 'fastnn[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def check_args(args, error):
    """Fail before any timing: unknown families, bad output paths, matplotlib missing."""
    from ..cli import missing, unwritable
    if args.only:
        known = set(families())
        unknown = [f for f in args.only if f not in known]
        if unknown and not collect(unknown):
            error(f"unknown benchmark family {', '.join(unknown)}; families: "
                  f"{', '.join(sorted(known))}")
    for path, what in ((args.json, "--json"), (args.markdown, "--markdown"),
                       (args.plot, "--plot")):
        msg = path and unwritable(path, what)
        if msg:
            error(msg)
    if args.plot:
        msg = missing("matplotlib", "--plot", "bench")
        if msg:
            error(msg)
        ext = os.path.splitext(args.plot)[1].lstrip(".").lower()
        kinds = _pyplot().figure().canvas.get_supported_filetypes()
        _pyplot().close("all")
        if ext not in kinds:
            error(f"--plot {args.plot}: unknown image type {ext!r}; use one of "
                  f"{', '.join(sorted(kinds))}")


def add_parser(sub):
    from ..cli import positive_int
    p = sub.add_parser("bench", help="time fastnn's kernels vs the NumPy reference and PyTorch")
    p.add_argument("--only", action="append", metavar="FAMILY",
                   help="only this family (repeatable); families: " + ", ".join(families()))
    p.add_argument("--threads", type=positive_int, default=None,
                   help="threads (default: all CPUs)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="also draw a bar chart (needs matplotlib)")
    p.add_argument("--markdown", metavar="FILE.md", help="also write the table as Markdown")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.set_defaults(func=lambda a: run(a.only, a.threads, a.json, a.plot, a.quick,
                                      markdown_path=a.markdown),
                   check=lambda a: check_args(a, p.error))
    return p
