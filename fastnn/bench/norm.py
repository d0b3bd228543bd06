"""Norm family benchmarks: layer_norm forward, forward + backward, and call latency."""
import numpy as np

from .core import BenchCase, torch_or_none


def _ln(rows, d, backward):
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal((rows, d)).astype(np.float32)
        w = np.ones(d, np.float32)
        b = np.zeros(d, np.float32)
        dy = rng.standard_normal((rows, d)).astype(np.float32)
        ref = backend("reference")
        if backward:
            def fast():
                y, ctx = F.layer_norm_fwd(x, (d,), w, b)
                return F.layer_norm_bwd(ctx, dy)

            def reference():
                y, s = ref.layer_norm(x, w, b, d, 1e-5)
                return ref.layer_norm_backward(dy, s)
        else:
            def fast():
                return F.layer_norm(x, (d,), w, b)

            def reference():
                return ref.layer_norm(x, w, b, d, 1e-5)
        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=backward)
            tw = torch.tensor(w, requires_grad=backward)
            tb = torch.tensor(b, requires_grad=backward)
            tdy = torch.tensor(dy)
            if backward:
                def t():
                    tx.grad = tw.grad = tb.grad = None
                    torch.nn.functional.layer_norm(tx, (d,), tw, tb).backward(tdy)
            else:
                def t():
                    with torch.no_grad():
                        return torch.nn.functional.layer_norm(tx, (d,), tw, tb)
            fns["torch"] = t
        return fns
    # minimum traffic: fwd reads x, writes y; bwd reads x, dy, writes dx (+ params, tiny)
    nbytes = 4.0 * rows * d * (5 if backward else 2)
    return BenchCase("norm", "layer_norm " + ("fwd+bwd" if backward else "fwd"), f"{rows}x{d}",
                     make, bytes=nbytes, max_reps=20000 if rows <= 64 else 200)


def cases():
    return [_ln(8192, 768, False), _ln(8192, 768, True), _ln(8, 768, False)]
