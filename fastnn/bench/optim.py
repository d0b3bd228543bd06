"""Optimizer benchmarks: one AdamW step over 10M float32 parameters (memory bound).

fastnn does the update in one fused pass per parameter; the torch row is torch's best
CPU AdamW: ``fused=True`` where this torch has the fused CPU kernel (else foreach).
The work is the same: 10M elements, read param/grad/exp_avg/exp_avg_sq, write three.
"""
import numpy as np

from .core import BenchCase, torch_or_none

# a transformer-like mix of shapes, 10M parameters in all
_SHAPES = [(1024, 1024)] * 8 + [(4096, 256)] * 1 + [(1024,)] * 64 + [(10_000_000 - 8 * 1024 * 1024 - 4096 * 256 - 64 * 1024,)]


def _torch_adamw(torch, params, lr):
    for kind in ("fused", "foreach"):
        try:
            opt = torch.optim.AdamW(params, lr=lr, **{kind: True})
            opt.step()   # fused CPU support is checked at the first step
            return opt, kind
        except (RuntimeError, TypeError, ValueError):
            continue
    return torch.optim.AdamW(params, lr=lr), "single-tensor"


def _adamw(shapes, label):
    n = sum(int(np.prod(s)) for s in shapes)

    def make():
        from fastnn import optim
        from fastnn import use_backend
        from fastnn.nn import Parameter
        rng = np.random.default_rng(0)
        data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        grads = [rng.standard_normal(s).astype(np.float32) * 1e-3 for s in shapes]
        params = [Parameter(d) for d in data]
        for p, g in zip(params, grads):
            p.grad = g
        opt = optim.AdamW(params, lr=1e-4)
        fns = {"fastnn": opt.step}
        opt_ref = optim.AdamW(params, lr=1e-4)

        def reference():
            with use_backend("reference"):
                opt_ref.step()
        fns["reference"] = reference
        torch = torch_or_none()
        fns["torch"] = None
        if torch is not None:
            tparams = [torch.tensor(d, requires_grad=True) for d in data]
            for tp, g in zip(tparams, grads):
                tp.grad = torch.tensor(g)
            topt, _ = _torch_adamw(torch, tparams, 1e-4)
            fns["torch"] = topt.step
        return fns

    return BenchCase("optim", "AdamW step", label, make, bytes=n * 4 * 7.0, inplace=True,
                     working_set=n * 4 * 4,
                     min_time=0.5, max_reps=20)


def cases():
    return [_adamw(_SHAPES, "10M params (73 tensors)")]
