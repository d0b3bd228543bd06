"""fastnn's cuda backend on a real GPU: correctness of every op, timings against torch CUDA,
and the GPT training step.

    FASTNN_REAL_GPU=1 python benchmarks/gpu.py             # everything
    FASTNN_REAL_GPU=1 python benchmarks/gpu.py --quick     # small sizes, fewer repetitions
    python benchmarks/gpu.py --smoke                       # tiny sizes under numba's CUDA
                                                           # simulator (checks the script only)
    ... --json results.json                                # also write the numbers

1. Suite: every OpCase and ModuleCase of tests/cases on the cuda backend against the NumPy
   reference (float32 and float64, forward and backward), and the float32 kernels checked
   for float64 instructions in their PTX (no silent promotion).
2. Ops (float32, forward + backward, inputs and outputs on the device): fastnn ms, torch CUDA
   ms and their ratio; memory-bound ops also as GB/s and % of the measured device copy
   bandwidth, GEMM-bound ops as TFLOP/s.  torch tensors are passed to fastnn directly
   (zero copy through __cuda_array_interface__).
3. GPT training step (forward, cross-entropy, backward, AdamW): the training benchmark's
   config (fastnn/bench/train.py) and a 12-layer d=768 one, tokens/s for fastnn and torch.

Timings are best-of-N wall times around a device synchronize.  Under the simulator the
numbers mean nothing; --smoke only proves the script runs.
"""
import argparse
import json
import os
import platform
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))


def _parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, fewer repetitions")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes under numba's CUDA simulator (no GPU needed)")
    ap.add_argument("--skip-suite", action="store_true", help="timings only")
    ap.add_argument("--skip-gpt", action="store_true", help="no GPT training step")
    ap.add_argument("--json", help="write the results to this file")
    return ap.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.smoke:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np  # noqa: E402

import fastnn  # noqa: E402
import fastnn.functional as F  # noqa: E402


# ------------------------------------------------------------------ helpers
def _cuda():
    from fastnn.cuda import _runtime
    return _runtime.cuda


def sync():
    _cuda().synchronize()


def timeit(fn, reps=20, warmup=2):
    """Best-of wall time (s) of fn() with the device synchronised around each call."""
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def device_name():
    try:
        dev = _cuda().get_current_device()
        name = dev.name
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return "numba CUDA simulator" if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else "?"


def copy_bandwidth(nbytes):
    """Device-to-device copy bandwidth, GB/s counting read + write."""
    cuda = _cuda()
    a = cuda.device_array(nbytes // 4, np.float32)
    b = cuda.device_array(nbytes // 4, np.float32)
    t = timeit(lambda: b.copy_to_device(a), reps=10)
    return 2 * nbytes / t / 1e9


# ------------------------------------------------------------------ 1. the op suite
def run_suite():
    """Every op / module case on cuda vs the reference; returns (passed, failed, skipped)."""
    from cases import all_cases, all_module_cases
    from harness import DTYPES, as_tuple, assert_close, random_like, run_case, tol
    from test_ops import _run_module
    passed, failed, skipped = [], [], []
    for case in all_cases():
        if "cuda" not in case.backends:
            skipped.append(case.name)
            continue
        for dt in DTYPES:
            tag = f"{case.name}[{np.dtype(dt).name}]"
            try:
                args, kwargs = case.make(np.random.default_rng(0), dt)
                args = list(args)
                ref, _ = run_case(case, "reference", args, kwargs, None)
                d = random_like(np.random.default_rng(7), ref) if case.bwd is not None else None
                ref, rg = run_case(case, "reference", args, kwargs, d)
                out, g = run_case(case, "cuda", args, kwargs, d)
                t = tol(case, dt)
                for a, b in zip(as_tuple(out), as_tuple(ref)):
                    assert_close(a, b, tag, **t)
                if g is not None:
                    for a, b in zip(as_tuple(g), as_tuple(rg)):
                        assert_close(a, b, tag, **t)
                passed.append(tag)
            except BaseException as e:  # noqa: BLE001 - report and go on
                if type(e).__name__ == "Skipped":
                    skipped.append(tag)
                else:
                    failed.append(f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    for case in all_module_cases():
        if "cuda" not in case.backends:
            skipped.append(case.name)
            continue
        for dt in DTYPES:
            tag = f"{case.name}[{np.dtype(dt).name}]"
            try:
                inputs = list(case.make(np.random.default_rng(0), dt))
                ro, _, _ = _run_module(case, "reference", dt, inputs, None)
                d = case.d_out(np.random.default_rng(9), ro) if case.d_out else \
                    random_like(np.random.default_rng(9), ro)
                ro, rdx, rpg = _run_module(case, "reference", dt, inputs, d)
                o, dx, pg = _run_module(case, "cuda", dt, inputs, d)
                t = tol(case, dt)
                flat = lambda v: [z for y in as_tuple(v) for z in (as_tuple(y) if isinstance(y, (tuple, list)) else (y,))]  # noqa: E731
                for a, b in zip(flat(o), flat(ro)):
                    assert_close(a, b, tag, **t)
                for a, b in zip(as_tuple(dx), as_tuple(rdx)):
                    assert_close(a, b, tag, **t)
                for n in rpg:
                    assert_close(pg[n], rpg[n], f"{tag} grad {n}", **t)
                passed.append(tag)
            except BaseException as e:  # noqa: BLE001
                if type(e).__name__ == "Skipped":
                    skipped.append(tag)
                else:
                    failed.append(f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return passed, failed, skipped


def ptx_float64_check():
    """float32 kernels whose PTX holds float64 instructions (silent promotion): should be
    none.  Only kernels compiled by now (the suite ran them all) are inspected."""
    from fastnn.cuda import _kit
    bad = []
    for k in _kit.all_kernels():
        if not k.name.endswith("[float32]"):
            continue
        try:
            asm = k.jitted.inspect_asm()
        except Exception:  # noqa: BLE001 - nothing compiled for this kernel
            continue
        for sig, ptx in (asm.items() if isinstance(asm, dict) else [(None, asm)]):
            if ".f64" in ptx:
                bad.append(f"{k.name} {sig}")
    return bad


# ------------------------------------------------------------------ 2. op timings
def _dev(a):
    return fastnn.to_device(a)


def op_benchmarks(quick, smoke, peak_gbs):
    torch = torch_cuda()
    rng = np.random.default_rng(0)
    rows = []
    if smoke:
        R, D, V = 8, 16, 10
        lin = (8, 16, 12)
        conv = (2, 3, 6, 6, 4)
        att = (1, 2, 8, 8)
    elif quick:
        R, D, V = 4096, 768, 8192
        lin = (4096, 768, 3072)
        conv = (16, 64, 32, 32, 64)
        att = (4, 12, 256, 64)
    else:
        R, D, V = 16384, 1024, 50304
        lin = (8192, 1024, 4096)
        conv = (32, 64, 56, 56, 64)
        att = (8, 12, 1024, 64)
    reps = 1 if smoke else (10 if quick else 30)
    warm = 0 if smoke else 2
    f32 = np.float32

    def record(op, shape, fn_fastnn, fn_torch, nbytes=None, flops=None):
        t = timeit(fn_fastnn, reps=reps, warmup=warm)
        tt = timeit(fn_torch, reps=reps, warmup=warm) if fn_torch is not None else None
        row = dict(op=op, shape=shape, fastnn_ms=t * 1e3, torch_ms=None if tt is None else tt * 1e3,
                   torch_over_fastnn=None if tt is None else tt / t)
        if nbytes:
            row["GB/s"] = nbytes / t / 1e9
            row["%peak"] = 100 * row["GB/s"] / peak_gbs if peak_gbs else None
        if flops:
            row["TFLOP/s"] = flops / t / 1e12
        rows.append(row)
        print(_fmt_row(row), flush=True)

    # layer_norm fwd+bwd
    x = _dev(rng.standard_normal((R, D)).astype(f32))
    w = _dev(np.ones(D, f32))
    b = _dev(np.zeros(D, f32))
    dy = _dev(rng.standard_normal((R, D)).astype(f32))

    def ln():
        y, ctx = F.layer_norm_fwd(x, D, w, b)
        F.layer_norm_bwd(ctx, dy)

    tln = None
    if torch is not None:
        tx = torch.randn(R, D, device="cuda", requires_grad=True)
        tw = torch.ones(D, device="cuda", requires_grad=True)
        tb = torch.zeros(D, device="cuda", requires_grad=True)
        tdy = torch.randn(R, D, device="cuda")

        def tln():
            torch.nn.functional.layer_norm(tx, (D,), tw, tb).backward(tdy)
    record("layer_norm f+b", f"({R}, {D})", ln, tln, nbytes=5 * R * D * 4)

    # softmax fwd+bwd (last dim)
    def sm():
        y, ctx = F.softmax_fwd(x, -1)
        F.softmax_bwd(ctx, dy)

    tsm = None
    if torch is not None:
        def tsm():
            torch.softmax(tx, -1).backward(tdy)
    record("softmax f+b", f"({R}, {D})", sm, tsm, nbytes=5 * R * D * 4)

    # gelu (tanh) fwd+bwd
    def ge():
        y, ctx = F.gelu_fwd(x, "tanh")
        F.gelu_bwd(ctx, dy)

    tge = None
    if torch is not None:
        def tge():
            torch.nn.functional.gelu(tx, approximate="tanh").backward(tdy)
    record("gelu(tanh) f+b", f"({R}, {D})", ge, tge, nbytes=5 * R * D * 4)

    # cross-entropy fwd+bwd on (R, V) logits
    if hasattr(F, "cross_entropy_fwd"):
        Rc = max(R // 4, 4)
        logits = _dev(rng.standard_normal((Rc, V)).astype(f32))
        tgt = rng.integers(0, V, Rc)

        def ce():
            loss, ctx = F.cross_entropy_fwd(logits, tgt)
            F.cross_entropy_bwd(ctx, 1.0)

        tce = None
        if torch is not None:
            tl = torch.randn(Rc, V, device="cuda", requires_grad=True)
            tt = torch.tensor(tgt, device="cuda")

            def tce():
                torch.nn.functional.cross_entropy(tl, tt).backward()
        record("cross_entropy f+b", f"({Rc}, {V})", ce, tce, nbytes=3 * Rc * V * 4)

    # linear fwd+bwd (3 GEMMs)
    M, K, N = lin
    lx = _dev(rng.standard_normal((M, K)).astype(f32))
    lw = _dev((rng.standard_normal((N, K)) * 0.02).astype(f32))
    lb = _dev(np.zeros(N, f32))
    ldy = _dev(rng.standard_normal((M, N)).astype(f32))

    def li():
        y, ctx = F.linear_fwd(lx, lw, lb)
        F.linear_bwd(ctx, ldy)

    tli = None
    if torch is not None:
        tlx = torch.randn(M, K, device="cuda", requires_grad=True)
        tlw = torch.randn(N, K, device="cuda", requires_grad=True)
        tlb = torch.zeros(N, device="cuda", requires_grad=True)
        tldy = torch.randn(M, N, device="cuda")

        def tli():
            torch.nn.functional.linear(tlx, tlw, tlb).backward(tldy)
    record("linear f+b", f"x({M}, {K}) W({N}, {K})", li, tli, flops=6 * M * N * K)

    # conv2d 3x3 fwd+bwd
    Nb, C, H, W_, O = conv
    cx = _dev(rng.standard_normal((Nb, C, H, W_)).astype(f32))
    cw = _dev((rng.standard_normal((O, C, 3, 3)) * 0.1).astype(f32))
    cdy = _dev(rng.standard_normal((Nb, O, H, W_)).astype(f32))

    def cv():
        y, ctx = F.conv2d_fwd(cx, cw, None, 1, 1)
        F.conv2d_bwd(ctx, cdy)

    tcv = None
    if torch is not None:
        tcx = torch.randn(Nb, C, H, W_, device="cuda", requires_grad=True)
        tcw = torch.randn(O, C, 3, 3, device="cuda", requires_grad=True)
        tcdy = torch.randn(Nb, O, H, W_, device="cuda")

        def tcv():
            torch.nn.functional.conv2d(tcx, tcw, None, 1, 1).backward(tcdy)
    record("conv2d 3x3 f+b", f"x{conv[:4]} O={O}", cv, tcv, flops=6 * Nb * O * H * W_ * C * 9)

    # attention fwd+bwd, causal
    B_, Hh, L, E = att
    q, k, v = (_dev(rng.standard_normal((B_ * Hh, L, E)).astype(f32)) for _ in range(3))
    ady = _dev(rng.standard_normal((B_ * Hh, L, E)).astype(f32))

    def at():
        o, ctx = F.scaled_dot_product_attention_fwd(q, k, v, is_causal=True)
        F.scaled_dot_product_attention_bwd(ctx, ady)

    tat = None
    if torch is not None:
        tq, tk, tv = (torch.randn(B_ * Hh, L, E, device="cuda", requires_grad=True) for _ in range(3))
        tady = torch.randn(B_ * Hh, L, E, device="cuda")

        def tat():
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(tady)
    record("sdpa causal f+b", f"(BH={B_ * Hh}, L={L}, E={E})", at, tat,
           flops=4 * 2 * B_ * Hh * L * L * E * 1.5)

    # torch tensors straight into fastnn (zero copy) give the same result
    if torch is not None:
        t_in = torch.randn(64, D, device="cuda")
        y = F.layer_norm(t_in, D)
        ref = torch.nn.functional.layer_norm(t_in, (D,)).cpu().numpy()
        np.testing.assert_allclose(fastnn.to_numpy(y), ref, rtol=1e-4, atol=1e-5)
        print("torch CUDA tensor input (zero copy): layer_norm matches torch", flush=True)
    return rows


def _fmt_row(r):
    s = f"{r['op']:<20} {r['shape']:<34} fastnn {r['fastnn_ms']:9.3f} ms"
    if r.get("torch_ms") is not None:
        s += f"   torch {r['torch_ms']:9.3f} ms   torch/fastnn {r['torch_over_fastnn']:.2f}"
    if "GB/s" in r:
        s += f"   {r['GB/s']:.0f} GB/s"
        if r.get("%peak") is not None:
            s += f" ({r['%peak']:.0f}% of copy)"
    if "TFLOP/s" in r:
        s += f"   {r['TFLOP/s']:.2f} TFLOP/s"
    return s


# ------------------------------------------------------------------ 3. GPT training step
def gpt_step(config, batch, steps):
    """tokens/s of fastnn (cuda) and torch CUDA for forward + cross-entropy + backward + AdamW."""
    from fastnn import nn, optim
    from fastnn.models import GPT
    fastnn.manual_seed(0)
    model = GPT(**config)
    sd = {k: np.array(v) for k, v in model.state_dict().items()}
    model.to("cuda")
    opt = optim.AdamW(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    V, T = config["vocab_size"], config["block_size"]
    rng = np.random.default_rng(0)
    x = rng.integers(0, V, (batch, T))
    y = rng.integers(0, V, (batch, T))
    losses = []

    def step():
        model.zero_grad()
        with fastnn.use_backend("cuda"):
            logits = model(x)
            losses.append(crit(logits.reshape(batch * T, V), y.reshape(-1)))
            model.backward(crit.backward().reshape(logits.shape))
            opt.step()

    t = timeit(step, reps=steps, warmup=1)
    res = dict(config=config, batch=batch, fastnn_tokens_per_s=batch * T / t,
               fastnn_step_ms=t * 1e3)
    torch = torch_cuda()
    if torch is not None:
        from fastnn.bench.train import torch_gpt
        tm = torch_gpt(torch, **config).cuda()
        tm.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
        topt = torch.optim.AdamW(tm.parameters(), lr=1e-3)
        tx = torch.tensor(x, device="cuda")
        ty = torch.tensor(y, device="cuda")
        tlosses = []

        def tstep():
            topt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(tm(tx).view(-1, V), ty.view(-1))
            loss.backward()
            topt.step()
            tlosses.append(loss)

        tt = timeit(tstep, reps=steps, warmup=1)
        res.update(torch_tokens_per_s=batch * T / tt, torch_step_ms=tt * 1e3,
                   torch_over_fastnn=tt / t,
                   first_loss_fastnn=float(np.asarray(fastnn.to_numpy(losses[0]))),
                   first_loss_torch=float(tlosses[0]))
    print(f"GPT {config} B={batch}: fastnn {res['fastnn_tokens_per_s']:.0f} tok/s"
          + (f", torch {res['torch_tokens_per_s']:.0f} tok/s (torch/fastnn time "
             f"{res['torch_over_fastnn']:.2f})" if "torch_tokens_per_s" in res else ""), flush=True)
    return res


# ------------------------------------------------------------------ main
def main(args):
    smoke = args.smoke
    if not smoke and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        sys.exit("benchmarks/gpu.py measures a real GPU: unset NUMBA_ENABLE_CUDASIM (or use --smoke)")
    if "cuda" not in fastnn.available_backends():
        sys.exit("no usable CUDA device (numba-cuda sees none); --smoke runs under the simulator")
    from fastnn.cuda import _gemm
    results = dict(device=device_name(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   gemm=_gemm.backend_name(), python=platform.python_version(),
                   numpy=np.__version__, simulator=smoke)
    torch = torch_cuda()
    results["torch"] = None if torch is None else torch.__version__

    def save():
        """Write what is measured so far: a run stopped by a time limit (a lent device's
        budget) still leaves every finished section in the file."""
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(results, f, indent=1, default=str)
            os.replace(tmp, args.json)
    save()
    print(f"device: {results['device']}   GEMM: {results['gemm']}   torch CUDA: {results['torch']}",
          flush=True)
    if not args.skip_suite:
        t0 = time.perf_counter()
        passed, failed, skipped = run_suite()
        results["suite"] = dict(passed=len(passed), failed=failed, skipped=skipped,
                                seconds=time.perf_counter() - t0)
        print(f"suite: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped", flush=True)
        for f in failed:
            print("  FAIL", f)
        if not smoke:
            bad = ptx_float64_check()
            results["float32_kernels_with_f64_ptx"] = bad
            print(f"float32 kernels with f64 instructions in their PTX: {bad or 'none'}", flush=True)
        save()
    peak = None if smoke else copy_bandwidth(1 << 30 if not args.quick else 1 << 28)
    results["copy_GBps"] = peak
    if peak:
        print(f"device copy bandwidth: {peak:.0f} GB/s", flush=True)
    try:
        results["ops"] = op_benchmarks(args.quick, smoke, peak)
    except Exception:  # noqa: BLE001
        results["ops_error"] = traceback.format_exc()
        print(results["ops_error"])
    save()
    if not args.skip_gpt:
        from fastnn.bench.train import BATCH, CONFIG
        configs = [(dict(CONFIG), BATCH)]
        if smoke:
            configs = [(dict(vocab_size=11, block_size=8, n_layer=1, n_head=2, d_model=8), 2)]
        elif not args.quick:
            configs.append((dict(vocab_size=50304, block_size=1024, n_layer=12, n_head=12,
                                 d_model=768), 8))
        results["gpt"] = []
        for cfg, batch in configs:
            try:
                results["gpt"].append(gpt_step(cfg, batch, 2 if smoke else 5))
            except Exception:  # noqa: BLE001
                results["gpt"].append(dict(config=cfg, error=traceback.format_exc()))
                print(results["gpt"][-1]["error"])
            save()
    results["complete"] = True
    save()
    failed = results.get("suite", {}).get("failed", [])
    errors = [g for g in results.get("gpt", []) if "error" in g] + \
        ([1] if "ops_error" in results else [])
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
