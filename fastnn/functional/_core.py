"""The functional shell's shared pieces.

Every differentiable op has three public forms in its family file:

    op(...)            -> out                    (inference, like torch.nn.functional)
    op_fwd(...)        -> (out, ctx)             (forward that keeps what backward needs)
    op_bwd(ctx, d_out) -> grads                  (gradients w.r.t. the differentiable inputs)

``ctx`` is a tuple ``(backend, saved, out_shape, out_dtype)``: the kernel's own saved
state plus what is needed to validate the incoming gradient.  Modules hold ctx
between their forward and backward; tests drive op_fwd/op_bwd directly.
"""
from .._validate import grad_like


def make_ctx(be, saved, out):
    return (be, saved, out.shape, out.dtype)


def grad_in(ctx, dy, name="grad_output"):
    """(backend, saved, validated d_out) for a backward call."""
    be, saved, shape, dtype = ctx
    return be, saved, grad_like(dy, shape, dtype, name)
