"""Dropout family: dropout (inverted scaling, counter-based masks)."""
from .. import _random
from .._backend import dispatch
from .._validate import float_array, probability
from ._core import grad_in, make_ctx

__all__ = ["dropout", "dropout_fwd", "dropout_bwd"]


def dropout_fwd(x, p=0.5, training=True):
    """Inverted dropout -> (y, ctx).  Zeroes each element with probability ``p`` and scales
    the rest by 1/(1-p); identity (the input itself, as torch) when not ``training``, and
    also when ``p == 0`` (no mask to apply: no kernel pass, no random draw).
    The mask comes from Philox keyed by ``fastnn.manual_seed``, the call counter and the
    element index: the same on every backend and at any thread count."""
    p = probability(p, "dropout probability p")
    x = float_array(x, "input")
    if not training or p == 0.0:
        return x, (None, None, x.shape, x.dtype)
    be = dispatch(x)
    seed, offset = _random.next_offset()
    y, saved = be.dropout(x, p, seed, offset)
    return y, make_ctx(be, saved, y)


def dropout_bwd(ctx, dy):
    """-> d_input (dy times the forward's mask; dy itself after an eval-mode forward)."""
    be, saved, dy = grad_in(ctx, dy)
    if be is None:
        return dy
    return be.dropout_backward(dy, saved)


def dropout(x, p=0.5, training=True):
    """torch.nn.functional.dropout: y = x * mask / (1 - p) in training, x otherwise."""
    return dropout_fwd(x, p, training)[0]
