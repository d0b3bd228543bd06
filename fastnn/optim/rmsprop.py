"""RMSprop and Adagrad (torch.optim's single-tensor rules, the same state names)."""
import numpy as np

from .optimizer import Optimizer, check_nonneg

__all__ = ["RMSprop", "Adagrad"]


class RMSprop(Optimizer):
    """torch.optim.RMSprop: ``g = grad (+ weight_decay p)``;
    ``square_avg = alpha square_avg + (1 - alpha) g^2``; centered: ``grad_avg =
    lerp(grad_avg, g, 1 - alpha)`` and ``avg = sqrt(square_avg - grad_avg^2) + eps``, else
    ``avg = sqrt(square_avg) + eps``; with momentum ``buf = momentum buf + g / avg``,
    ``p -= lr buf``, else ``p -= lr g / avg``.  State: step, square_avg, momentum_buffer
    (momentum > 0), grad_avg (centered)."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, *, maximize=False):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group):
        super()._check_group(group)
        group["alpha"] = check_nonneg(group["alpha"], "alpha value")
        group["eps"] = check_nonneg(group["eps"], "epsilon value")
        group["weight_decay"] = check_nonneg(group["weight_decay"], "weight_decay value")
        group["momentum"] = check_nonneg(group["momentum"], "momentum value")
        group["centered"] = bool(group["centered"])
        group["maximize"] = bool(group["maximize"])

    def _update(self, p, param, grad, group, state):
        state["step"] = state.get("step", 0.0) + 1.0
        square_avg = self._state_array(state, "square_avg", param)
        buf = self._state_array(state, "momentum_buffer", param) if group["momentum"] > 0 else None
        grad_avg = self._state_array(state, "grad_avg", param) if group["centered"] else None
        be = self._backend(param, grad, square_avg, grad_avg, buf)
        be.rmsprop_step(param, grad, square_avg, grad_avg, buf, group["lr"], group["alpha"],
                        group["eps"], group["weight_decay"], group["momentum"],
                        group["maximize"])


class Adagrad(Optimizer):
    """torch.optim.Adagrad: ``g = grad (+ weight_decay p)``; ``clr = lr / (1 + (step - 1)
    lr_decay)``; ``sum += g^2``; ``p -= clr g / (sqrt(sum) + eps)``.  State (created for every
    parameter at construction, as torch): step, sum (= initial_accumulator_value)."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, *, maximize=False):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps,
                        maximize=maximize)
        super().__init__(params, defaults)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self._init_state(p, group)

    def _init_state(self, p, group):
        if p in self.state:
            return
        like = np.asarray(p.data) if type(p.data) is np.ndarray else p.data
        init = group["initial_accumulator_value"]
        if type(like) is np.ndarray:
            s = np.full(like.shape, init, dtype=like.dtype)
        else:   # a device parameter: the state is made there on the first step
            s = np.full(tuple(like.shape), init, dtype=np.dtype(like.dtype))
        self.state[p] = {"step": 0.0, "sum": s}

    def _check_group(self, group):
        super()._check_group(group)
        group["lr_decay"] = check_nonneg(group["lr_decay"], "lr_decay value")
        group["weight_decay"] = check_nonneg(group["weight_decay"], "weight_decay value")
        group["initial_accumulator_value"] = check_nonneg(group["initial_accumulator_value"],
                                                          "initial_accumulator_value")
        group["eps"] = check_nonneg(group["eps"], "epsilon value")
        group["maximize"] = bool(group["maximize"])

    def _update(self, p, param, grad, group, state):
        step = state.get("step", 0.0) + 1.0
        state["step"] = step
        if "sum" not in state:
            self._init_state(p, group)
            state = self.state[p]
            state["step"] = step
        ssum = self._state_array(state, "sum", param)
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        be = self._backend(param, grad, ssum)
        be.adagrad_step(param, grad, ssum, clr, group["eps"], group["weight_decay"],
                        group["maximize"])
