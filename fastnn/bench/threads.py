"""Two Python threads vs one: the compiled kernels release the GIL.

``python -m fastnn.bench.threads`` runs a large forward+backward of several op
families 2*R times in one thread, then R times in each of two threads at once, with
fastnn.set_num_threads(1) so each call uses one core: the speedup is what running the
kernels outside the GIL buys (ideal 2.0 on two free cores; a kernel that held the
GIL would give ~1.0).  It is not a fastnn-vs-reference comparison, so ``cases()``
contributes nothing to ``fastnn bench``.
"""
import argparse
import threading
import time

import numpy as np


def cases():
    return []


def _workloads(rng):
    import fastnn.functional as F
    f32 = np.float32
    x = rng.standard_normal((1024, 1024)).astype(f32)
    w = rng.standard_normal((1024, 1024)).astype(f32) * 0.03
    b = np.zeros(1024, f32)
    ln_w = np.ones(2048, f32)
    g = rng.standard_normal((1024, 1024)).astype(f32)
    big = rng.standard_normal((2048, 2048)).astype(f32)
    gbig = rng.standard_normal((2048, 2048)).astype(f32)

    def linear():
        y, ctx = F.linear_fwd(x, w, b)
        F.linear_bwd(ctx, g)

    def layer_norm():
        y, ctx = F.layer_norm_fwd(big, 2048, ln_w, None)
        F.layer_norm_bwd(ctx, gbig)

    def softmax():
        y, ctx = F.softmax_fwd(big, -1)
        F.softmax_bwd(ctx, gbig)

    def gelu():
        y, ctx = F.gelu_fwd(big, "tanh")
        F.gelu_bwd(ctx, gbig)

    return {"linear 1024x1024x1024": linear, "layer_norm 2048x2048": layer_norm,
            "softmax 2048x2048": softmax, "gelu 2048x2048": gelu}


def _time(fn, reps, threads):
    def work():
        for _ in range(reps):
            fn()
    ts = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def measure(reps=4, rounds=2, only=None):
    """{name: (serial seconds, two-thread seconds, speedup)}, best of ``rounds``."""
    import fastnn
    old = fastnn.get_num_threads()
    fastnn.set_num_threads(1)
    try:
        out = {}
        for name, fn in _workloads(np.random.default_rng(0)).items():
            if only and only not in name:
                continue
            fn()
            serial = min(_time(fn, 2 * reps, 1) for _ in range(rounds))
            two = min(_time(fn, reps, 2) for _ in range(rounds))
            out[name] = (serial, two, serial / two)
        return out
    finally:
        fastnn.set_num_threads(old)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", default=None)
    a = p.parse_args(argv)
    print(f"{'op (fwd+bwd, float32)':28s} {'1 thread x2R':>13s} {'2 threads xR':>13s} {'speedup':>8s}")
    for name, (s, t, r) in measure(a.reps, a.rounds, a.only).items():
        print(f"{name:28s} {s * 1e3:11.1f}ms {t * 1e3:11.1f}ms {r:7.2f}x")


if __name__ == "__main__":
    main()
