"""Dropout family: dropout (inverted scaling, counter-based masks)."""
import numbers

from .. import _random
from .._backend import dispatch
from .._validate import float_array
from ._core import grad_in, make_ctx

__all__ = ["dropout", "dropout_fwd", "dropout_bwd", "check_dropout_p"]


def check_dropout_p(p, name="p"):
    """``p`` as a float in [0, 1]; TypeError / ValueError otherwise."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"dropout probability {name} must be a real number, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability {name} has to be between 0 and 1, but got {p}")
    return p


def dropout_fwd(x, p=0.5, training=True):
    """Inverted dropout -> (y, ctx).  Zeroes each element with probability ``p`` and scales
    the rest by 1/(1-p); identity (the input itself, as torch) when not ``training``, and
    also when ``p == 0`` (no mask to apply: no kernel pass, no random draw).
    The mask comes from Philox keyed by ``fastnn.manual_seed``, the call counter and the
    element index: the same on every backend and at any thread count."""
    p = check_dropout_p(p)
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
