"""Recurrent family benchmarks: LSTM / GRU / RNN forward + backward (BPTT) over a sequence.

Each implementation runs the same work: the module's forward over the whole sequence,
then backward of a fixed gradient of the output into the input and every parameter.
The reference (per-step NumPy in float64) is left out: it is an oracle, and at these
shapes it takes seconds per call.
"""
import numpy as np

from .core import BenchCase, torch_or_none

_G = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _case(kind, T, B, N, layers=1, bidirectional=False):
    D = 2 if bidirectional else 1

    def make():
        import fastnn
        import fastnn.nn as nn
        fastnn.manual_seed(0)
        m = getattr(nn, kind)(N, N, num_layers=layers, bidirectional=bidirectional)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((T, B, N)).astype(np.float32)
        dy = rng.standard_normal((T, B, D * N)).astype(np.float32)

        def fast():
            # as torch's side below: gradients set to None first (no accumulation)
            m.zero_grad()
            with fastnn.use_backend("cpu"):
                m(x)
                return m.backward(dy)

        fns = {"fastnn": fast, "reference": None, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tm = getattr(torch.nn, kind)(N, N, num_layers=layers, bidirectional=bidirectional)
            with torch.no_grad():
                for name, p in tm.named_parameters():
                    p.copy_(torch.from_numpy(getattr(m, name).data))
            tx = torch.tensor(x, requires_grad=True)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = None
                tm.zero_grad()
                y, _ = tm(tx)
                y.backward(tdy)
            fns["torch"] = t
        return fns

    G = _G[kind]
    # GEMM work: forward x W_ih^T and h W_hh^T; backward dX, dW_ih, dh, dW_hh (2 flops / MAC)
    flops = 0.0
    for k in range(layers):
        n_in = N if k == 0 else D * N
        flops += D * 2.0 * T * B * G * N * (n_in + N) * 3
    name = f"{kind} fwd+bwd" + (f" {layers}-layer" if layers > 1 else "") + (" bidir" if bidirectional else "")
    return BenchCase("rnn", name, f"T{T} B{B} {N}->{N}", make, flops=flops, min_time=1.0, max_reps=20)


def cases():
    return [_case("LSTM", 64, 32, 256), _case("GRU", 64, 32, 256), _case("RNN", 128, 64, 128),
            _case("LSTM", 64, 32, 256, layers=2, bidirectional=True)]
