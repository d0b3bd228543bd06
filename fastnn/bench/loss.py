"""Loss family benchmarks: cross-entropy forward + backward on LM-head-sized logits."""
import numpy as np

from .core import BenchCase, torch_or_none


def _ce(N, C):
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C)).astype(np.float32)
        t = rng.integers(0, C, N)
        ref = backend("reference")

        def fast():
            loss, ctx = F.cross_entropy_fwd(x, t)
            return F.cross_entropy_bwd(ctx, 1.0)

        def reference():
            loss, s = ref.cross_entropy(x, t, None, -100, "mean", 0.0)
            return ref.cross_entropy_backward(np.asarray(1.0, np.float32), s)
        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tt = torch.tensor(t)

            def tfn():
                tx.grad = None
                torch.nn.functional.cross_entropy(tx, tt).backward()
            fns["torch"] = tfn
        return fns
    # minimum traffic: forward reads the logits, backward reads them and writes d_logits
    return BenchCase("loss", "cross_entropy fwd+bwd", f"{N}x{C}", make, bytes=4.0 * N * C * 3,
                     max_reps=50)


def cases():
    return [_ce(8192, 4096)]
