"""fastnn.nn.utils: gradient clipping (torch.nn.utils' rules) and parameter helpers."""
import math

import numpy as np

from .._backend import placed
from .._validate import positive_float, real
from .module import Parameter

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "parameters_to_vector"]


def _params(parameters):
    if isinstance(parameters, Parameter):
        return [parameters]
    out = []
    for p in parameters:
        if not isinstance(p, Parameter):
            raise TypeError(f"expected fastnn Parameters, got {type(p).__name__}")
        out.append(p)
    return out


def _host(g):
    return placed(g).to_host(g)


def _norm_of(g, norm_type):
    """One gradient's norm, accumulated in float64 (float32 grads are not summed in float32)."""
    g = _host(g).reshape(-1)
    if g.size == 0:
        return 0.0
    if norm_type == math.inf:
        return float(np.max(np.abs(g)))
    if norm_type == -math.inf:
        return float(np.min(np.abs(g)))
    if norm_type == 2.0:
        if g.dtype == np.float64:
            return math.sqrt(float(np.dot(g, g)))
        # chunked so a float32 gradient never needs a float64 copy of its full size
        s = 0.0
        for i in range(0, g.size, 1 << 20):
            c = g[i:i + (1 << 20)].astype(np.float64)
            s += float(np.dot(c, c))
        return math.sqrt(s)
    if norm_type == 0:
        return float(np.count_nonzero(g))
    a = np.abs(g.astype(np.float64))
    return float(np.sum(a ** norm_type) ** (1.0 / norm_type))


def _check_norm_type(norm_type):
    if isinstance(norm_type, str) and norm_type == "inf":
        return math.inf
    return real(norm_type, "norm_type", what="a real number or 'inf'")


def get_total_norm(grads, norm_type=2.0, error_if_nonfinite=False):
    """The norm of the norms of ``grads`` (as if all were concatenated into one vector)."""
    norm_type = _check_norm_type(norm_type)
    norms = [_norm_of(g, norm_type) for g in grads if g is not None]
    if not norms:
        return 0.0
    n = np.asarray(norms, dtype=np.float64)
    if norm_type == math.inf:
        total = float(n.max())
    elif norm_type == -math.inf:
        total = float(n.min())
    elif norm_type == 0:
        total = float(n.sum())
    else:
        total = float(np.sum(n ** norm_type) ** (1.0 / norm_type))
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` "
                           f"is non-finite, so it cannot be clipped. To disable this error and "
                           f"scale the gradients by the non-finite norm anyway, set "
                           f"`error_if_nonfinite=False`")
    return total


def _scale_grad(p, coef):
    placed(p.grad).scale_(p.grad, coef)   # in place; inf * 0 -> nan, as torch gives


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scale the gradients of ``parameters`` in place so that their global norm (all
    gradients seen as one vector) is at most ``max_norm``; returns the norm before
    clipping (a float).  torch's rule: coef = max_norm / (total + 1e-6), clamped to 1.
    Parameters without a gradient are ignored."""
    params = _params(parameters)
    max_norm = positive_float(max_norm, "max_norm", allow_zero=True)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    coef = min(max_norm / (total + 1e-6), 1.0) if total == total else float("nan")
    if coef != 1.0:
        for p in params:
            if p.grad is not None:
                _scale_grad(p, coef)
    return total


def clip_grad_value_(parameters, clip_value):
    """Clamp every gradient element of ``parameters`` to [-clip_value, clip_value] in place."""
    params = _params(parameters)
    clip_value = positive_float(clip_value, "clip_value", allow_zero=True)
    for p in params:
        g = p.grad
        if g is None:
            continue
        placed(g).clamp_(g, -clip_value, clip_value)


def parameters_to_vector(parameters):
    """All parameter values as one flat host array (in ``parameters`` order)."""
    return np.concatenate([_host(p.data).reshape(-1) for p in _params(parameters)])
