"""Embedding family benchmarks: GPT-2's token table, forward + backward."""
import numpy as np

from .core import BenchCase, torch_or_none


def _emb(num, dim, B, T):
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        w = rng.standard_normal((num, dim)).astype(np.float32)
        idx = rng.integers(0, num, (B, T))
        dy = rng.standard_normal((B, T, dim)).astype(np.float32)
        ref = backend("reference")
        idx64 = np.ascontiguousarray(idx, np.int64)

        # each run produces a fresh dense d_weight, as torch does with weight.grad = None
        def fast():
            y, ctx = F.embedding_fwd(idx, w)
            return F.embedding_bwd(ctx, dy)

        def reference():
            y, s = ref.embedding(idx64, w, None)
            return ref.embedding_backward(dy, s)
        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tw = torch.tensor(w, requires_grad=True)
            ti = torch.tensor(idx)
            tdy = torch.tensor(dy)

            def t():
                tw.grad = None
                torch.nn.functional.embedding(ti, tw).backward(tdy)
            fns["torch"] = t
        return fns
    # minimum traffic: gather reads+writes B*T rows; backward reads dy, writes the used rows
    # and hands out a zeroed (num, dim) table
    rows = B * T
    nbytes = 4.0 * dim * (4 * rows + num)
    return BenchCase("embedding", "embedding fwd+bwd", f"{num}x{dim} table, {B}x{T} idx", make,
                     bytes=nbytes, max_reps=50)


def cases():
    return [_emb(50257, 768, 8, 512)]
