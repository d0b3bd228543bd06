"""GroupNorm and RMSNorm benchmarks (issue 19's targets): forward + backward vs PyTorch in
the same run, GB/s against the machine's copy bandwidth (both are memory-bound)."""
import numpy as np

from .core import BenchCase, torch_or_none


def _pair(fast, reference, torch_fn):
    return {"fastnn": fast, "reference": reference, "torch": torch_fn}


def _gn(N, C, H, W, G):
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = (1 + 0.1 * rng.standard_normal(C)).astype(np.float32)
        b = (0.1 * rng.standard_normal(C)).astype(np.float32)
        dy = rng.standard_normal(x.shape).astype(np.float32)
        ref = backend("reference")

        def fast():
            y, ctx = F.group_norm_fwd(x, G, w, b)
            return F.group_norm_bwd(ctx, dy)

        def reference():
            y, s = ref.group_norm(x, w, b, G, 1e-5)
            return ref.group_norm_backward(dy, s)
        t = None
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tw = torch.tensor(w, requires_grad=True)
            tb = torch.tensor(b, requires_grad=True)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = tw.grad = tb.grad = None
                torch.nn.functional.group_norm(tx, G, tw, tb).backward(tdy)
        return _pair(fast, reference, t)
    # minimum traffic: fwd reads x, writes y; bwd reads x, dy, writes dx
    return BenchCase("norm", "group_norm fwd+bwd", f"{N}x{C}x{H}x{W} g{G}", make,
                     bytes=4.0 * N * C * H * W * 5, max_reps=50)


def _rms(rows, d):
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal((rows, d)).astype(np.float32)
        w = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        dy = rng.standard_normal(x.shape).astype(np.float32)
        ref = backend("reference")

        def fast():
            y, ctx = F.rms_norm_fwd(x, (d,), w, 1e-6)
            return F.rms_norm_bwd(ctx, dy)

        def reference():
            y, s = ref.rms_norm(x, w, d, 1e-6)
            return ref.rms_norm_backward(dy, s)
        t = None
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tw = torch.tensor(w, requires_grad=True)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = tw.grad = None
                torch.nn.functional.rms_norm(tx, (d,), tw, 1e-6).backward(tdy)
        return _pair(fast, reference, t)
    return BenchCase("norm", "rms_norm fwd+bwd", f"{rows}x{d}", make,
                     bytes=4.0 * rows * d * 5, max_reps=50)


def cases():
    return [_gn(16, 64, 56, 56, 32), _rms(8192, 768)]
