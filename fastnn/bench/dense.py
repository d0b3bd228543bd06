"""Dense family benchmarks: linear forward + backward (GEMM-bound), the same with a frozen
weight and bias (fine-tuning: torch's requires_grad False, no d_weight product), and the
forward of a few rows (a small batch of tokens: bound by streaming the weight once)."""
import numpy as np

from .core import BenchCase, torch_or_none


def _operands(rows, n_in, n_out):
    """(rng, x, weight, bias) of a linear benchmark, seeded."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    w = (rng.standard_normal((n_out, n_in)) * 0.02).astype(np.float32)
    return rng, x, w, np.zeros(n_out, np.float32)


def _linear(rows, n_in, n_out, frozen=False):
    """fwd+bwd of a linear layer; ``frozen``: its weight and bias take no gradient (both
    sides skip the d_weight GEMM and the bias sum; d_input is still made)."""
    flags = {"weight_grad": False, "bias_grad": False} if frozen else {}

    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng, x, w, b = _operands(rows, n_in, n_out)
        dy = rng.standard_normal((rows, n_out)).astype(np.float32)
        ref = backend("reference")

        def fast():
            y, ctx = F.linear_fwd(x, w, b)
            return F.linear_bwd(ctx, dy, **flags)

        def reference():
            y, s = ref.linear(x, w, b)
            return ref.linear_backward(dy, s, **flags)

        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tl = torch.nn.Linear(n_in, n_out).requires_grad_(not frozen)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = None
                tl.zero_grad(set_to_none=True)
                tl(tx).backward(tdy)
            fns["torch"] = t
        return fns
    op = "linear fwd+bwd, frozen weight" if frozen else "linear fwd+bwd"
    return BenchCase("dense", op, f"{rows}x{n_in}->{n_out}", make,
                     flops=(2 if frozen else 3) * 2.0 * rows * n_in * n_out)


def _few_rows(rows, n_in, n_out):
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        _, x, w, b = _operands(rows, n_in, n_out)
        ref = backend("reference")
        fns = {"fastnn": lambda: F.linear(x, w, b), "reference": lambda: ref.linear(x, w, b),
               "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tl = torch.nn.Linear(n_in, n_out)
            tx = torch.tensor(x)

            def t():
                with torch.no_grad():
                    tl(tx)
            fns["torch"] = t
        return fns
    # bound by the weight's stream (each weight element once for all rows): bytes, not flops
    return BenchCase("dense", "linear fwd, few rows", f"{rows}x{n_in}->{n_out}", make,
                     bytes=4.0 * (n_in * n_out + rows * (n_in + n_out) + n_out))


def cases():
    # the frozen layer twice: the wide one, and a 1024-token 768 -> 768 projection whose
    # d_input is only two row blocks (the size that once ran on one thread)
    return [_linear(4096, 768, 3072), _linear(4096, 768, 3072, frozen=True),
            _linear(1024, 768, 768, frozen=True), _few_rows(8, 768, 3072)]
