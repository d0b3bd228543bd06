"""Activation family benchmarks: 4M float32 elements, each activation's forward alone and
its forward + backward.

Bytes counted are the minimum traffic: forward reads x and writes y; backward reads
d_out and one saved array and writes d_input (rrelu's training forward also writes
its slopes, prelu's backward is the same as the others plus a few weights).  The saved
array (x, y or rrelu's slopes) was just touched by the forward, so the backward's read
of it counts only past the last-level cache (``reread_traffic``: prelu fwd+bwd showed
104% of its copy ceiling counting it all, 16 MiB arrays under a 32 MiB L3).  relu,
leaky_relu, hardtanh, relu6 and hardsigmoid save a bit mask instead of an array: their
forward also writes N / 8 bytes, their backward reads d_out and the mask (the forward
alone still writes its mask: F's ``_fwd`` form, as the nn module's training forward)."""
import numpy as np

from .core import BenchCase, reread_traffic, torch_or_none

N = 4 * 1024 * 1024

# name -> (F forward args, reference kernel args, torch callable on a tensor)
_OPS = {
    "relu": ((), (), lambda t, x: t.relu(x)),
    "leaky_relu": ((0.01,), (0.01,), lambda t, x: t.nn.functional.leaky_relu(x, 0.01)),
    "elu": ((1.0,), (1.0, 1.0, 1.0), lambda t, x: t.nn.functional.elu(x)),
    "selu": ((), None, lambda t, x: t.nn.functional.selu(x)),
    "celu": ((1.0,), (1.0, 1.0, 1.0), lambda t, x: t.nn.functional.celu(x)),
    "gelu": (("none",), ("none",), lambda t, x: t.nn.functional.gelu(x)),
    "gelu_tanh": (("tanh",), ("tanh",), lambda t, x: t.nn.functional.gelu(x, approximate="tanh")),
    "silu": ((), (), lambda t, x: t.nn.functional.silu(x)),
    "softplus": ((1.0, 20.0), (1.0, 20.0), lambda t, x: t.nn.functional.softplus(x)),
    "sigmoid": ((), (), lambda t, x: t.sigmoid(x)),
    "tanh": ((), (), lambda t, x: t.tanh(x)),
    "rrelu": ((1 / 8, 1 / 3, True), None, lambda t, x: t.nn.functional.rrelu(x, training=True)),
    "prelu": (None, None, None),
    "softmin": ((-1,), None, lambda t, x: t.nn.functional.softmin(x, -1)),
    "hardtanh": ((), (-1.0, 1.0), lambda t, x: t.nn.functional.hardtanh(x)),
    "relu6": ((), (0.0, 6.0), lambda t, x: t.nn.functional.relu6(x)),
    "hardsigmoid": ((), (), lambda t, x: t.nn.functional.hardsigmoid(x)),
    "hardswish": ((), (), lambda t, x: t.nn.functional.hardswish(x)),
    "mish": ((), (), lambda t, x: t.nn.functional.mish(x)),
}

# ops whose compiled forward keeps one bit per element for the backward
_MASKED = ("relu", "leaky_relu", "hardtanh", "relu6", "hardsigmoid")

_F_NAME = {"gelu_tanh": "gelu", "celu": "celu", "selu": "selu"}
_REF_NAME = {"gelu_tanh": "gelu", "celu": "elu", "selu": "elu", "relu6": "hardtanh"}


def _case(name, backward):
    f_args, ref_args, torch_fn = _OPS[name]

    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        shape = (N // 1024, 1024)
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        dy = rng.standard_normal(shape).astype(np.float32)
        ref = backend("reference")
        fname = _F_NAME.get(name, name)
        if name == "prelu":
            x = x.reshape(64, 64, -1)
            dy = dy.reshape(x.shape)
            w = np.full(64, 0.25, np.float32)
            args = (w,)
        else:
            args = f_args
        fwd, bwd = getattr(F, fname + "_fwd"), getattr(F, fname + "_bwd")

        if backward:
            def fast():
                y, ctx = fwd(x, *args)
                return bwd(ctx, dy)
        else:
            def fast():
                return fwd(x, *args)[0]

        # the reference runs its own kernels (no validation shell), the same work
        def reference():
            with_ref = _ref_call(ref, name, x, args, ref_args)
            y, saved = with_ref()
            if backward:
                return _ref_backward(ref, name)(dy, saved)
            return y
        fns = {"fastnn": fast, "reference": reference, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=backward)
            tdy = torch.tensor(dy)
            if name == "prelu":
                tw = torch.tensor(w, requires_grad=backward)
                tf = lambda t_: torch.nn.functional.prelu(t_, tw)  # noqa: E731
            else:
                tf = lambda t_: torch_fn(torch, t_)  # noqa: E731
            if backward:
                def t():
                    tx.grad = None
                    if name == "prelu":
                        tw.grad = None
                    tf(tx).backward(tdy)
            else:
                def t():
                    with torch.no_grad():
                        return tf(tx)
            fns["torch"] = t
        return fns
    nbytes = (4.0 * N * 4 + reread_traffic(4.0 * N) if backward else 4.0 * N * 2) + (
        4.0 * N if name == "rrelu" else 0.0)
    # the largest working set of one pass: forward x, y (rrelu: + its slopes); backward
    # d_out, the saved array, d_input -- each pass is its own kernel call
    ws = 4.0 * N * (3 if backward or name == "rrelu" else 2)
    if name in _MASKED:
        # the saved state is a bit mask (N / 8 bytes), written by the forward and read by
        # the backward instead of a saved 4N-byte array (csrc/activation.pyx)
        nbytes = 4.0 * N * (4 if backward else 2) + N / 8.0 * (2 if backward else 1)
        ws = 4.0 * N * 2 + N / 8.0
    return BenchCase("activation", f"{name} " + ("fwd+bwd" if backward else "fwd"), "4M (4096x1024)",
                     make, bytes=nbytes, min_time=0.2, max_reps=50, working_set=ws)


def _ref_call(ref, name, x, args, ref_args):
    from fastnn.functional.activation import SELU_ALPHA, SELU_SCALE
    if name == "selu":
        return lambda: ref.elu(x, SELU_ALPHA, SELU_SCALE, 1.0, None)
    if name == "celu":
        return lambda: ref.elu(x, 1.0, 1.0, 1.0, None)
    if name == "rrelu":
        return lambda: ref.rrelu(x, 1 / 8, 1 / 3, True, 0, 0, None)
    if name == "prelu":
        return lambda: ref.prelu(x, args[0])
    if name == "softmin":
        return lambda: ref.softmax(ref.neg(x, None), 1)
    kname = _REF_NAME.get(name, name)
    return lambda: getattr(ref, kname)(x, *ref_args, None)


def _ref_backward(ref, name):
    if name == "softmin":
        return lambda dy, saved: ref.neg(ref.softmax_backward(dy, saved), None)
    return getattr(ref, _REF_NAME.get(name, name) + "_backward")


def cases():
    """Each activation's training forward alone (the ``_fwd`` form, which keeps what its
    backward needs; torch's forward runs under no_grad) and its forward+backward."""
    out = []
    for name in ("relu", "leaky_relu", "prelu", "rrelu", "elu", "selu", "celu", "gelu",
                 "gelu_tanh", "silu", "softplus", "sigmoid", "tanh", "softmin", "hardtanh",
                 "relu6", "hardsigmoid", "hardswish", "mish"):
        out += [_case(name, False), _case(name, True)]
    return out
