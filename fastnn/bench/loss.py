"""Loss family benchmarks: cross-entropy forward + backward on LM-head-sized logits; the
elementwise losses (BCE with logits, MSE) forward + backward on 8M elements.

Bytes are the minimum memory traffic: the backward's second read of the forward's inputs
counts only past the last-level cache (``reread_traffic``)."""
import numpy as np

from .core import BenchCase, reread_traffic, torch_or_none


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
    # minimum traffic: forward reads the logits, backward reads them again (what the
    # last-level cache kept of them aside) and writes d_logits
    return BenchCase("loss", "cross_entropy fwd+bwd", f"{N}x{C}", make,
                     bytes=4.0 * N * C * 2 + reread_traffic(4.0 * N * C),
                     working_set=4.0 * N * C * 2, max_reps=50)


def _elementwise(name, torch_name, n, target="normal"):
    """F.<name> forward ("mean") + backward vs torch's on ``n`` float32 elements."""
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal(n).astype(np.float32).reshape(-1, 1024)
        y = (rng.random(n) if target == "prob" else rng.standard_normal(n)).astype(np.float32)
        y = y.reshape(x.shape)
        fwd, bwd = getattr(F, name + "_fwd"), getattr(F, name + "_bwd")
        kind = {"mse_loss": "mse", "binary_cross_entropy_with_logits": "bce_logits"}[name]
        ref = backend("reference")

        def fast():
            loss, ctx = fwd(x, y)
            return bwd(ctx, 1.0)

        def reference():
            loss, s = ref.elementwise_loss(kind, x, y, None, None, 0.0, x.size)
            return ref.elementwise_loss_backward(np.asarray(1.0, np.float32), s)
        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            ty = torch.tensor(y)
            tfun = getattr(torch.nn.functional, torch_name)

            def tfn():
                tx.grad = None
                tfun(tx, ty).backward()
            fns["torch"] = tfn
        return fns
    # minimum traffic: forward reads x and y, backward reads them again (what the
    # last-level cache kept of them aside) and writes d_input
    return BenchCase("loss", f"{name} fwd+bwd", f"{n // (1 << 20)}M", make,
                     bytes=4.0 * n * 3 + reread_traffic(4.0 * n * 2), working_set=4.0 * n * 3,
                     max_reps=30)


def cases():
    n = 8 << 20
    return [_ce(8192, 4096),
            _elementwise("binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits", n,
                         "prob"),
            _elementwise("mse_loss", "mse_loss", n)]
