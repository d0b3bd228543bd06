"""Adam and AdamW (torch.optim's rules, bias correction as torch, optional amsgrad)."""
from .._validate import real
from .optimizer import Optimizer, check_nonneg

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """torch.optim.Adam: L2 ``weight_decay`` is added to the gradient.

    m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""

    _kernel = "adam_step"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, maximize=False):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group):
        super()._check_group(group)
        group["eps"] = check_nonneg(group["eps"], "epsilon value")
        group["weight_decay"] = check_nonneg(group["weight_decay"], "weight_decay value")
        betas = group["betas"]
        try:
            b1, b2 = betas
        except (TypeError, ValueError):
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}") from None
        for i, b in enumerate((b1, b2)):
            b = real(b, f"beta parameter at index {i}")
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b} (must be in [0, 1))")
        group["betas"] = (float(b1), float(b2))
        group["amsgrad"] = bool(group["amsgrad"])
        group["maximize"] = bool(group["maximize"])

    def _update(self, p, param, grad, group, state):
        exp_avg = self._state_array(state, "exp_avg", param)
        exp_avg_sq = self._state_array(state, "exp_avg_sq", param)
        vmax = self._state_array(state, "max_exp_avg_sq", param) if group["amsgrad"] else None
        step = state.get("step", 0.0) + 1.0
        state["step"] = step
        beta1, beta2 = group["betas"]
        be = self._backend(param, grad, exp_avg, exp_avg_sq, vmax)
        getattr(be, self._kernel)(param, grad, exp_avg, exp_avg_sq, vmax, group["lr"], beta1,
                                  beta2, group["eps"], group["weight_decay"], step,
                                  group["maximize"])


class AdamW(Adam):
    """torch.optim.AdamW: decoupled decay ``p *= 1 - lr * weight_decay`` (default 0.01),
    then the Adam update."""

    _kernel = "adamw_step"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
