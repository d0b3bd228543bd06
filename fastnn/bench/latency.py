"""Small-call latency: one nn-module forward on an (8, 768) float32 input (issue 16).

LayerNorm(768), GELU() and Linear(768, 768) in eval mode (nothing kept for backward)
against the same torch modules under ``torch.no_grad()``; the time is one call, best of
many.  A call this small is mostly the Python shell (argument checks, dispatch, the output
allocation) for LayerNorm and GELU -- 6144 elements -- while Linear is 9.4 MFLOP of GEMM
(the row's GFLOP/s against the sgemm ceiling shows it).  The calls/s line gives the time
with more digits than the ms column.
"""
import numpy as np

from .core import BenchCase, torch_or_none

ROWS, D = 8, 768


def _module(name):
    def make():
        import fastnn
        from fastnn import nn
        rng = np.random.default_rng(0)
        x = rng.standard_normal((ROWS, D)).astype(np.float32)
        ctor = {"LayerNorm": lambda: nn.LayerNorm(D), "GELU": lambda: nn.GELU(),
                "Linear": lambda: nn.Linear(D, D)}[name]
        m = ctor().eval()

        def fast():
            return m(x)

        def reference():
            with fastnn.use_backend("reference"):
                return m(x)
        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tm = {"LayerNorm": lambda: torch.nn.LayerNorm(D), "GELU": lambda: torch.nn.GELU(),
                  "Linear": lambda: torch.nn.Linear(D, D)}[name]().eval()
            tx = torch.tensor(x)

            def t():
                with torch.no_grad():
                    return tm(tx)
            fns["torch"] = t
        return fns
    case = BenchCase("latency", f"{name} module forward (eval)", f"{ROWS}x{D}", make,
                     flops=2.0 * ROWS * D * D if name == "Linear" else None,
                     min_time=0.3, max_reps=20000 if name != "Linear" else 2000)
    case.tokens, case.unit = 1, "calls"     # the calls/s line: the latency with more digits
    return case


def cases():
    return [_module("LayerNorm"), _module("GELU"), _module("Linear")]
