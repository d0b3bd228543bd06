"""SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD's rules)."""
from .._validate import is_real
from .optimizer import Optimizer, check_nonneg

__all__ = ["SGD"]


class SGD(Optimizer):
    """torch.optim.SGD: ``g = grad (+ weight_decay * p)``; with momentum
    ``buf = g`` on the first step, then ``buf = momentum * buf + (1 - dampening) * g``;
    ``g = g + momentum * buf`` (nesterov) or ``buf``; ``p -= lr * g``."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group):
        super()._check_group(group)
        group["momentum"] = check_nonneg(group["momentum"], "momentum value")
        group["weight_decay"] = check_nonneg(group["weight_decay"], "weight_decay value")
        d = group["dampening"]
        if not is_real(d) or d != d:
            raise TypeError(f"dampening must be a real number, got {d!r}")
        group["dampening"] = float(d)
        group["nesterov"] = bool(group["nesterov"])
        group["maximize"] = bool(group["maximize"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _update(self, p, param, grad, group, state):
        momentum = group["momentum"]
        buf = None
        first = False
        if momentum != 0:
            first = state.get("momentum_buffer") is None
            buf = self._state_array(state, "momentum_buffer", param)
        be = self._backend(param, grad, buf)
        be.sgd_step(param, grad, buf, group["lr"], momentum, group["dampening"],
                    group["weight_decay"], group["nesterov"], group["maximize"], first)
