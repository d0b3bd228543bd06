"""Adam and AdamW (torch.optim's rules, bias correction as torch, optional amsgrad), and
the Adam variants NAdam, RAdam and Adamax (torch's single-tensor rules and state names)."""
import numpy as np

from .._validate import real
from .optimizer import Optimizer, check_nonneg

__all__ = ["Adam", "AdamW", "NAdam", "RAdam", "Adamax"]


def _check_betas(group):
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


def _check_adam_group(group):
    """What every Adam-family group checks: eps, weight_decay, betas, maximize."""
    group["eps"] = check_nonneg(group["eps"], "epsilon value")
    group["weight_decay"] = check_nonneg(group["weight_decay"], "weight_decay value")
    _check_betas(group)
    group["maximize"] = bool(group["maximize"])


class Adam(Optimizer):
    """torch.optim.Adam: L2 ``weight_decay`` is added to the gradient.

    m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""

    _kernel = "adam_step"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, foreach=foreach, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group):
        super()._check_group(group)
        _check_adam_group(group)
        group["amsgrad"] = bool(group["amsgrad"])
        foreach = group.setdefault("foreach", None)
        if foreach is not None and not isinstance(foreach, (bool, np.bool_)):
            raise TypeError(f"foreach must be None, True or False, got {foreach!r}")

    def _moments(self, param, group, state):
        """(exp_avg, exp_avg_sq, max_exp_avg_sq or None, step count after this update)."""
        exp_avg = self._state_array(state, "exp_avg", param)
        exp_avg_sq = self._state_array(state, "exp_avg_sq", param)
        vmax = self._state_array(state, "max_exp_avg_sq", param) if group["amsgrad"] else None
        step = state.get("step", 0.0) + 1.0
        state["step"] = step
        return exp_avg, exp_avg_sq, vmax, step

    def _update(self, p, param, grad, group, state):
        exp_avg, exp_avg_sq, vmax, step = self._moments(param, group, state)
        beta1, beta2 = group["betas"]
        be = self._backend(param, grad, exp_avg, exp_avg_sq, vmax)
        getattr(be, self._kernel)(param, grad, exp_avg, exp_avg_sq, vmax, group["lr"], beta1,
                                  beta2, group["eps"], group["weight_decay"], step,
                                  group["maximize"])

    def _step_group(self, group):
        """foreach (None or True): the group's host parameters of each dtype in ONE kernel
        call (``adam_step_foreach``: the same bits as a call per parameter, one parallel
        region for all of them); device parameters, and foreach=False, one call each."""
        if group["foreach"] is False:
            return super()._step_group(group)
        lists = {}
        for p in group["params"]:
            arrays = self._arrays(p)
            if arrays is None:
                continue
            param, grad = arrays
            state = self.state.setdefault(p, {})
            if type(param) is not np.ndarray:
                self._update(p, param, grad, group, state)
                continue
            exp_avg, exp_avg_sq, vmax, step = self._moments(param, group, state)
            li = lists.get(param.dtype)
            if li is None:
                li = lists[param.dtype] = ([], [], [], [], [], [])
            for lst, a in zip(li, (param, grad, exp_avg, exp_avg_sq, vmax, step)):
                lst.append(a)
        beta1, beta2 = group["betas"]
        for params, grads, ms, vs, vmaxes, steps in lists.values():
            be = self._backend(params[0])
            getattr(be, self._kernel + "_foreach")(
                params, grads, ms, vs, vmaxes if group["amsgrad"] else None, group["lr"],
                beta1, beta2, group["eps"], group["weight_decay"], steps, group["maximize"])


class AdamW(Adam):
    """torch.optim.AdamW: decoupled decay ``p *= 1 - lr * weight_decay`` (default 0.01),
    then the Adam update."""

    _kernel = "adamw_step"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, foreach=None, maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize)


class _AdamVariant(Optimizer):
    """What NAdam, RAdam and Adamax share: betas, eps, weight_decay, maximize; exp_avg and a
    second moment (``_second``) per parameter; the step count."""

    _second = "exp_avg_sq"

    def _check_group(self, group):
        super()._check_group(group)
        _check_adam_group(group)
        if "decoupled_weight_decay" in group:
            group["decoupled_weight_decay"] = bool(group["decoupled_weight_decay"])

    def _update(self, p, param, grad, group, state):
        exp_avg = self._state_array(state, "exp_avg", param)
        second = self._state_array(state, self._second, param)
        step = state.get("step", 0.0) + 1.0
        state["step"] = step
        be = self._backend(param, grad, exp_avg, second)
        self._run(be, param, grad, exp_avg, second, group, state, step)


class NAdam(_AdamVariant):
    """torch.optim.NAdam: Adam with Nesterov momentum, the momentum coefficient
    mu_t = beta1 (1 - 0.96^(t momentum_decay) / 2) (state ``mu_product``: their product);
    ``decoupled_weight_decay=True`` decays the parameter as AdamW (NAdamW)."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, maximize=False):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group):
        super()._check_group(group)
        group["momentum_decay"] = check_nonneg(group["momentum_decay"], "momentum_decay value")

    def _run(self, be, param, grad, exp_avg, exp_avg_sq, group, state, step):
        beta1, beta2 = group["betas"]
        md = group["momentum_decay"]
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * md)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * md)))
        # torch keeps mu_product as a float32 scalar tensor (its default scalar dtype):
        # the same rounding here, so the steps equal torch's
        mu_product = float(np.float32(np.float32(state.get("mu_product", 1.0)) * np.float32(mu)))
        state["mu_product"] = mu_product
        be.nadam_step(param, grad, exp_avg, exp_avg_sq, group["lr"], beta1, beta2,
                      group["eps"], group["weight_decay"], group["decoupled_weight_decay"],
                      mu, mu_next, mu_product, step, group["maximize"])


class RAdam(_AdamVariant):
    """torch.optim.RAdam: Adam with the variance rectification; until the approximated
    SMA length passes 5 the step is the bias-corrected momentum alone.
    ``decoupled_weight_decay=True`` decays the parameter as AdamW."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, maximize=False):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _run(self, be, param, grad, exp_avg, exp_avg_sq, group, state, step):
        beta1, beta2 = group["betas"]
        be.radam_step(param, grad, exp_avg, exp_avg_sq, group["lr"], beta1, beta2,
                      group["eps"], group["weight_decay"], group["decoupled_weight_decay"],
                      step, group["maximize"])


class Adamax(_AdamVariant):
    """torch.optim.Adamax: Adam with the infinity norm, exp_inf = max(beta2 exp_inf,
    |g| + eps), p -= lr / (1 - beta1^t) exp_avg / exp_inf."""

    _second = "exp_inf"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, *,
                 maximize=False):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize)
        super().__init__(params, defaults)

    def _run(self, be, param, grad, exp_avg, exp_inf, group, state, step):
        beta1, beta2 = group["betas"]
        be.adamax_step(param, grad, exp_avg, exp_inf, group["lr"], beta1, beta2, group["eps"],
                       group["weight_decay"], step, group["maximize"])
