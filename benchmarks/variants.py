"""Activation modules, fastnn's kernel variants against PyTorch, same run.

    python benchmarks/variants.py [--variants avx2,avx512] [--rounds 3] [--threads 2]
    python benchmarks/variants.py --cpu-time       # one thread, CPU time (a loaded machine)
    python benchmarks/variants.py --only SiLU,Sigmoid,latency   # some rows only

Each variant runs in its own subprocess (FASTNN_VARIANT is read at import); every
subprocess times fastnn and torch interleaved, ``--rounds`` times, and prints the median
and spread of the ratio fastnn time / torch time.  Rows: every activation through its nn
module (training mode) forward+backward and forward alone on 4M float32 elements
(4096 x 1024), then nn-module forward latency on an (8, 768) input (LayerNorm, Linear,
GELU).  Times are best-of within a round.

``--cpu-time``: one thread for both libraries and the calling thread's CPU time
(time.thread_time) instead of wall time -- on a machine shared with other jobs the
wall-clock numbers mostly measure the scheduler, while the CPU time a call needs does not
depend on how often it is preempted.  Per-element costs then compare the instruction sets
(memory-bound rows still feel the cache pressure of the other jobs).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ACTS = ["ReLU", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "GELU(tanh)", "SiLU", "Softplus",
        "Sigmoid", "Tanh", "Mish", "Hardswish"]


CLOCK = [time.perf_counter]
MIN_TIME = [0.15]


def _best(fn, reps_max=40):
    clock, min_time = CLOCK[0], MIN_TIME[0]
    fn()
    best, total, reps = float("inf"), 0.0, 0
    while reps < reps_max and (total < min_time or reps < 3):
        t0 = clock()
        fn()
        dt = clock() - t0
        best, total, reps = min(best, dt), total + dt, reps + 1
    return best


def _module(nn, name):
    if name == "GELU(tanh)":
        return nn.GELU(approximate="tanh")
    return getattr(nn, name)()


def child(rounds, threads, cpu_time=False, only=None):
    import numpy as np
    import torch

    import fastnn
    import fastnn.nn as fnn
    if cpu_time:
        threads = 1
        CLOCK[0] = time.thread_time
        MIN_TIME[0] = 0.06
    fastnn.set_num_threads(threads)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4096, 1024)) * 3).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    rows = {}
    for name in ACTS:
        if only and name not in only:
            continue
        if not hasattr(fnn, name.split("(")[0]) or not hasattr(torch.nn, name.split("(")[0]):
            continue
        fm, tm = _module(fnn, name), _module(torch.nn, name)
        fm.train(), tm.train()
        tx, tdy = torch.tensor(x, requires_grad=True), torch.tensor(dy)

        def f_fb():
            fm(x)
            fm.backward(dy)

        def f_f():
            with fastnn.no_grad():
                fm(x)

        def t_fb():
            tx.grad = None
            tm(tx).backward(tdy)

        def t_f():
            with torch.no_grad():
                tm(tx)
        for kind, f, t in (("fwd+bwd", f_fb, t_fb), ("fwd", f_f, t_f)):
            rs = []
            for _ in range(rounds):
                a, b = _best(f), _best(t)
                rs.append((a, b))
            rows[f"{name} {kind}"] = rs
    if only and "latency" not in only:
        return _report(rows)
    xs = rng.standard_normal((8, 768)).astype(np.float32)
    txs = torch.tensor(xs)
    for name, fm, tm in (("LayerNorm", fnn.LayerNorm(768), torch.nn.LayerNorm(768)),
                         ("Linear", fnn.Linear(768, 768), torch.nn.Linear(768, 768)),
                         ("GELU", fnn.GELU(), torch.nn.GELU())):
        def f():
            for _ in range(100):
                fm(xs)

        def t():
            for _ in range(100):
                tm(txs)
        rs = []
        for _ in range(rounds):
            with torch.no_grad():
                rs.append((_best(f) / 100, _best(t) / 100))
        rows[f"{name} (8,768) latency"] = rs
    _report(rows)


def _report(rows):
    import fastnn
    variant = sorted(set(fastnn._backend.backend("cpu").variant.values()))
    print(json.dumps({"variant": variant, "rows": rows}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="avx2,avx512")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread, CPU time of the calling thread (for a loaded machine)")
    ap.add_argument("--only", default="",
                    help="comma-separated activation names (as in ACTS) and/or 'latency'")
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a.rounds, a.threads, a.cpu_time, [s for s in a.only.split(",") if s])
    res = {}
    for v in a.variants.split(","):
        env = dict(os.environ, FASTNN_VARIANT=v, PYTHONPATH=os.pathsep.join(
            p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(a.rounds),
                              "--threads", str(a.threads), "--only", a.only]
                             + (["--cpu-time"] if a.cpu_time else []),
                             env=env, capture_output=True, text=True, check=True)
        res[v] = json.loads(out.stdout.strip().splitlines()[-1])
    names = list(next(iter(res.values()))["rows"])
    hdr = "| row | " + " | ".join(f"{v}: fastnn ms | {v}: torch ms | {v}: ratio (median, spread)"
                                   for v in res) + " |"
    print(hdr)
    print("|---" * (1 + 3 * len(res)) + "|")
    for n in names:
        cells = []
        for v in res:
            rs = res[v]["rows"][n]
            ratios = sorted(a_ / b_ for a_, b_ in rs)
            med = ratios[len(ratios) // 2]
            fa = sorted(a_ for a_, _ in rs)[len(rs) // 2]
            tb = sorted(b_ for _, b_ in rs)[len(rs) // 2]
            unit, k = ("us", 1e6) if "latency" in n else ("ms", 1e3)
            cells.append(f"{fa * k:.3g} {unit} | {tb * k:.3g} {unit} | {med:.2f}x "
                         f"({ratios[0]:.2f}-{ratios[-1]:.2f})")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
