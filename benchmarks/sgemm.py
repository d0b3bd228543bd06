"""fastnn's own float32 GEMM (csrc/fnn_sgemm.h, the avx512 build) against OpenBLAS and MKL
on one core, on the GEMM shapes of fastnn's training benchmarks.

    python benchmarks/sgemm.py            # the table below, 3 alternating rounds
    python benchmarks/sgemm.py --rounds 5

Each row is one single-threaded GEMM  C[M, N] = op(A) op(B)  as the kernels issue it (a
block of a blocked product: M is one thread's rows), timed as CPU time (process time:
what a busy neighbour steals from the wall clock does not count), best of several calls,
in alternating rounds: fastnn's kernel (through the dense module's GEMM dispatcher), the
same dispatcher routed to NumPy's OpenBLAS (``_use_own_sgemm(False)``, what
FASTNN_SGEMM=blas gives), and torch's matmul (MKL in the CPU wheels) on one thread.
GFLOP/s = 2 M N K / time.  Without the avx512 build both fastnn columns are OpenBLAS.
"""
import argparse
import importlib
import time

import numpy as np

SHAPES = [  # (M, N, K, trans_a, trans_b, where)
    (512, 3072, 768, False, True, "linear 4096x768->3072 fwd, one of 8 row blocks"),
    (512, 768, 3072, False, False, "its d_input block"),
    (512, 768, 4096, True, False, "its d_weight block"),
    (512, 1024, 256, False, True, "LSTM T64 B32 256: input GEMM, one 512-row chunk"),
    (512, 256, 2048, True, False, "LSTM: d_weight over the sequence, one chunk"),
    (512, 384, 128, False, False, "GPT demo: qkv, one of 2 row blocks"),
    (512, 128, 512, False, False, "GPT demo: MLP out projection"),
    (384, 128, 1024, True, False, "GPT demo: qkv d_weight"),
]


def _cpu_best(fn, reps):
    best = float("inf")
    fn()
    for _ in range(reps):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args(argv)
    import fastnn
    from fastnn.cpu import load_order
    from threadpoolctl import threadpool_limits
    variant = load_order()[0]
    dense = importlib.import_module(f"fastnn._cpu.{variant}.dense")
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    with threadpool_limits(1):
        fastnn.set_num_threads(1)
        for (M, N, K, ta, tb, where) in SHAPES:
            a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
            b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
            c = np.empty((M, N), np.float32)
            flop = 2.0 * M * N * K
            best = {"fastnn": 0.0, "openblas": 0.0, "torch": 0.0}
            for _ in range(args.rounds):
                for name in ("fastnn", "openblas"):
                    dense._use_own_sgemm(name == "fastnn")
                    t = _cpu_best(lambda: dense._gemm_hook(ta, tb, 1.0, a, b, 0.0, c), args.reps)
                    best[name] = max(best[name], flop / t / 1e9)
                if torch is not None:
                    xa, xb = torch.from_numpy(a), torch.from_numpy(b)
                    opa, opb = (xa.T if ta else xa), (xb.T if tb else xb)
                    t = _cpu_best(lambda: torch.matmul(opa, opb), args.reps)
                    best["torch"] = max(best["torch"], flop / t / 1e9)
            dense._use_own_sgemm(dense._own_sgemm_default())
            rows.append((M, N, K, ta, tb, where, best))
    print(f"variant {variant}; one thread; GFLOP/s (CPU time, best of {args.rounds} rounds)")
    print("| M x N x K | op | where | fastnn | OpenBLAS | torch (MKL) |")
    print("|---|---|---|---:|---:|---:|")
    for (M, N, K, ta, tb, where, best) in rows:
        op = ("A^T" if ta else "A") + " " + ("B^T" if tb else "B")
        tt = f"{best['torch']:.0f}" if torch is not None else "-"
        print(f"| {M} x {N} x {K} | {op} | {where} | {best['fastnn']:.0f} | "
              f"{best['openblas']:.0f} | {tt} |")


if __name__ == "__main__":
    main()
