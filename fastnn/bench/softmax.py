"""Softmax family benchmarks: softmax forward, forward + backward."""
import numpy as np

from .core import BenchCase, torch_or_none


def _sm(rows, n, backward, log=False):
    name = "log_softmax" if log else "softmax"

    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal((rows, n)).astype(np.float32)
        dy = rng.standard_normal((rows, n)).astype(np.float32)
        ref = backend("reference")
        fwd = getattr(F, name + "_fwd")
        bwd = getattr(F, name + "_bwd")
        rf, rb = getattr(ref, name), getattr(ref, name + "_backward")
        if backward:
            def fast():
                y, ctx = fwd(x, -1)
                return bwd(ctx, dy)

            def reference():
                y, s = rf(x, 1)
                return rb(dy, s)
        else:
            def fast():
                return fwd(x, -1)[0]

            def reference():
                return rf(x, 1)
        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tf = getattr(torch, name)
            tx = torch.tensor(x, requires_grad=backward)
            tdy = torch.tensor(dy)
            if backward:
                def t():
                    tx.grad = None
                    tf(tx, -1).backward(tdy)
            else:
                def t():
                    with torch.no_grad():
                        return tf(tx, -1)
            fns["torch"] = t
        return fns
    nbytes = 4.0 * rows * n * (5 if backward else 2)
    return BenchCase("softmax", f"{name} " + ("fwd+bwd" if backward else "fwd"), f"{rows}x{n}",
                     make, bytes=nbytes)


def cases():
    return [_sm(8192, 1024, False), _sm(8192, 1024, True), _sm(8192, 1024, True, log=True)]
