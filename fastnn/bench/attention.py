"""Attention family benchmarks: causal SDPA forward and forward + backward, the multi-head
attention layer forward + backward, and peak memory of SDPA at T = 2048."""
import tracemalloc

import numpy as np

from .core import BenchCase, torch_or_none


def _sdpa(shape, backward):
    B, H, T, E = shape

    def make():
        import fastnn.functional as F
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        dy = rng.standard_normal(shape).astype(np.float32)
        if backward:
            def fast():
                o, ctx = F.scaled_dot_product_attention_fwd(q, k, v, is_causal=True)
                return F.scaled_dot_product_attention_bwd(ctx, dy)
        else:
            def fast():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        fns = {"fastnn": fast, "reference": None, "torch": None}   # reference: O(T^2) float64
        torch = torch_or_none()
        if torch is not None:
            tq, tk, tv = (torch.tensor(a, requires_grad=backward) for a in (q, k, v))
            tdy = torch.tensor(dy)
            sdpa = torch.nn.functional.scaled_dot_product_attention
            if backward:
                def t():
                    tq.grad = tk.grad = tv.grad = None
                    sdpa(tq, tk, tv, is_causal=True).backward(tdy)
            else:
                def t():
                    with torch.no_grad():
                        return sdpa(tq, tk, tv, is_causal=True)
            fns["torch"] = t
        return fns
    # useful flops (causal: half the tiles): 2 GEMMs forward, 4 more backward
    gemms = 6 if backward else 2
    flops = gemms * 2.0 * B * H * T * T * E / 2
    return BenchCase("attention", "sdpa causal " + ("fwd+bwd" if backward else "fwd"),
                     "x".join(map(str, shape)), make, flops=flops, min_time=0.5, max_reps=20)


def _mha(B, T, E, H):
    def make():
        import fastnn
        import fastnn.nn as nn
        rng = np.random.default_rng(0)
        fastnn.manual_seed(0)
        m = nn.MultiheadAttention(E, H, batch_first=True)
        x = rng.standard_normal((B, T, E)).astype(np.float32)
        dy = rng.standard_normal((B, T, E)).astype(np.float32)

        def fast():
            m.zero_grad()
            m(x, x, x)
            dq, dk, dv = m.backward(dy)
            return dq + dk + dv          # torch accumulates the three into x.grad

        fns = {"fastnn": fast, "reference": None, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tm = torch.nn.MultiheadAttention(E, H, batch_first=True)
            tx = torch.tensor(x, requires_grad=True)
            tdy = torch.tensor(dy)

            def t():
                tm.zero_grad()
                tx.grad = None
                tm(tx, tx, tx, need_weights=False)[0].backward(tdy)
            fns["torch"] = t
        return fns
    proj = 2.0 * B * T * E * E * 4 * 3            # 4 projections, forward + 2 backward GEMMs
    attn = 2.0 * B * T * T * E * 6                # 2 forward + 4 backward GEMMs
    return BenchCase("attention", "MultiheadAttention fwd+bwd", f"B{B} T{T} E{E} H{H}", make,
                     flops=proj + attn, min_time=0.5, max_reps=20)


def sdpa_peak_memory(shape=(1, 4, 2048, 64)):
    """Peak bytes NumPy allocates during one causal SDPA forward + backward (tracemalloc;
    the kernels' tile buffers are O(tile) per thread and not counted), and the bytes of
    q, k, v, out and the three gradients for comparison."""
    import fastnn.functional as F
    rng = np.random.default_rng(0)
    q, k, v, dy = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    tracemalloc.start()
    try:
        o, ctx = F.scaled_dot_product_attention_fwd(q, k, v, is_causal=True)
        F.scaled_dot_product_attention_bwd(ctx, dy)
        del o, ctx
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, 4 * q.nbytes


def _sdpa_memory(shape):
    B, H, T, E = shape
    case = BenchCase("attention", "sdpa causal fwd+bwd, peak memory", "x".join(map(str, shape)),
                     None, flops=6 * 2.0 * B * H * T * T * E / 2, min_time=0.5, max_reps=10)
    inner = _sdpa(shape, True).make

    def make():
        peak, io = sdpa_peak_memory(shape)
        score = B * H * T * T * 4
        case.shape = (f"{'x'.join(map(str, shape))} peak {peak / 2**20:.0f}MiB "
                      f"(TxT {score / 2**20:.0f}MiB)")
        return inner()
    case.make = make
    return case


def cases():
    return [_sdpa((8, 12, 512, 64), False), _sdpa((8, 12, 512, 64), True),
            _mha(8, 256, 384, 6), _sdpa_memory((1, 4, 2048, 64))]
