"""Data-parallel GPT training on one machine: 2 MPI ranks x 1 thread vs 1 process x 2 threads.

    python benchmarks/distributed.py                      # the comparison (needs mpiexec)
    python benchmarks/distributed.py --bucket-mb 25 1 0.25 --rounds 3 --steps 30
    ... --json results.json                               # also write the numbers

The GPT training benchmark's config (fastnn/bench/train.py: vocab 65, d_model 128, 4
layers, 4 heads, block 64, batch 16 = 1,024 tokens per step, AdamW).  One process trains
on the whole batch with 2 kernel threads (and, for scale, with 1); the data-parallel run
has each of 2 ranks (1 thread each) train on 8 of the 16 rows, its gradients averaged by
DistributedDataParallel.  Reported per configuration: tokens/s (median step), and for
DDP the share of step time rank 0 spends waiting for the allreduces to finish after its
backward (communication not hidden behind backward, plus waiting for the slower rank),
the number of buckets and how many of them started during backward.  Configurations run
in alternating rounds, so a busy machine slows them alike; compare within one run.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run (default 30)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--bucket-mb", type=float, nargs="+", default=[25.0, 0.5],
                    help="DDP bucket sizes to run (default: 25 0.5)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-bucket", type=float, default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# ---------------------------------------------------------------------- one run (a rank)
def worker(args):
    import numpy as np

    import fastnn
    from fastnn import nn, optim
    from fastnn.bench.train import BATCH, CONFIG
    from fastnn.models import GPT

    fastnn.set_num_threads(args.threads)
    rank, world, ddp = 0, 1, None
    fastnn.manual_seed(0)
    model = GPT(**CONFIG)
    net = model
    if args.ddp_bucket is not None:
        from fastnn import distributed as dist
        rank, world = dist.init()
        fastnn.set_num_threads(args.threads)
        ddp = net = dist.DistributedDataParallel(model, bucket_mb=args.ddp_bucket)
        dist.broadcast_parameters(model)
    opt = optim.AdamW(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    T, V = CONFIG["block_size"], CONFIG["vocab_size"]
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    times, waits = [], []
    for i in range(args.warmup + args.steps):
        x = rng.integers(0, V, size=(BATCH, T))
        y = rng.integers(0, V, size=(BATCH, T))
        w0 = ddp.stats["wait_s"] if ddp is not None else 0.0
        t0 = time.perf_counter()
        model.zero_grad()
        logits = net(x[rows])
        crit(logits.reshape(-1, V), y[rows].reshape(-1))
        net.backward(crit.backward().reshape(logits.shape))
        opt.step()
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(dt)
            waits.append((ddp.stats["wait_s"] - w0) if ddp is not None else 0.0)
    if rank == 0:
        med = float(np.median(times))
        res = {"ranks": world, "threads": args.threads, "bucket_mb": args.ddp_bucket,
               "step_ms": med * 1e3, "best_step_ms": min(times) * 1e3,
               "tokens_per_s": BATCH * T / med, "wait_share": sum(waits) / sum(times)}
        if ddp is not None:
            res["buckets"] = len(ddp._buckets)
            res["buckets_started_in_backward"] = (ddp.stats["early"]
                                                  / max(ddp.stats["reductions"], 1))
        sys.stdout.write("RESULT " + json.dumps(res) + "\n")
        sys.stdout.flush()


# ---------------------------------------------------------------------- orchestration
def _run(cmd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main(argv=None):
    args = _parse(argv)
    if args.worker:
        return worker(args)
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("needs mpiexec on PATH (pip install mpi4py mpich)")
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(args.steps),
          "--warmup", str(args.warmup)]
    configs = [("1 rank x 2 threads", me + ["--threads", "2"]),
               ("1 rank x 1 thread (scale reference)", me + ["--threads", "1"])]
    for b in args.bucket_mb:
        configs.append((f"2 ranks x 1 thread, bucket {b:g} MB",
                        [mpiexec, "-n", "2"] + me + ["--threads", "1", "--ddp-bucket", str(b)]))
    runs = {name: [] for name, _ in configs}
    for r in range(args.rounds):
        for name, cmd in configs:
            runs[name].append(_run(cmd))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"GPT {args.steps} steps x {args.rounds} rounds, 1,024 tokens/step; "
          f"load average {load:.1f} on {os.cpu_count()} CPUs (compare rows within this run)")
    base = None
    table = []
    for name, _ in configs:
        rs = runs[name]
        best = max(rs, key=lambda r: r["tokens_per_s"])      # the least disturbed round
        if base is None:
            base = best["tokens_per_s"]
        row = dict(best, config=name, vs_one_process=best["tokens_per_s"] / base)
        table.append(row)
        extra = ""
        if "buckets" in best:
            extra = (f" | waiting on allreduce {100 * best['wait_share']:4.1f}% of step time"
                     f" | {best['buckets']} bucket(s), "
                     f"{best['buckets_started_in_backward']:.0f} started during backward")
        print(f"{name:<36} {best['tokens_per_s']:8,.0f} tokens/s ({best['step_ms']:6.1f} ms/step)"
              f" {row['vs_one_process']:5.2f}x{extra}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average": load, "runs": runs, "table": table}, f, indent=1)
    return table


if __name__ == "__main__":
    main()
