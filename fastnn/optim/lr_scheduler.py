"""Learning-rate schedules with torch.optim.lr_scheduler's semantics.

A scheduler records ``initial_lr`` in each parameter group, sets the lr for step 0 on
construction, and ``step()`` (called after ``optimizer.step()``) moves to the next
value.  ``StepLR`` and ``CosineAnnealingLR`` use torch's recursive (chainable) update
formulas so their values equal torch's to the last bit (as do the other schedules here:
the tests compare each with torch's); ``step(epoch)`` uses the closed form, as torch does.
State dicts hold numbers, strings and lists only, so ``fastnn.save`` writes them.  ``get_cosine_schedule_with_warmup`` is the linear-warmup
+ cosine-decay LambdaLR used to train transformers.
"""
import bisect
import math

from .._validate import is_int, is_real
from .optimizer import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "CosineAnnealingLR", "LinearLR", "ExponentialLR",
           "SequentialLR", "OneCycleLR", "ReduceLROnPlateau", "get_cosine_schedule_with_warmup",
           "MultiStepLR", "MultiplicativeLR", "ConstantLR", "PolynomialLR",
           "CosineAnnealingWarmRestarts", "CyclicLR", "ChainedScheduler"]


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not a fastnn Optimizer")
        if not is_int(last_epoch) \
                or last_epoch < -1:
            raise ValueError(f"last_epoch must be an int >= -1, got {last_epoch!r}")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   f"when resuming a scheduler with last_epoch >= 0")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = int(last_epoch)
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def get_last_lr(self):
        return list(self._last_lr)

    def step(self, epoch=None):
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = int(epoch)
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        """Everything but the optimizer (LambdaLR leaves out its functions, as torch does)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state_dict):
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "lr_lambdas"})


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch) (one function, or one per parameter group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != len(optimizer.param_groups):
                raise ValueError(f"Expected {len(optimizer.param_groups)} lr_lambdas, but got "
                                 f"{len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            if not callable(lr_lambda):
                raise TypeError(f"lr_lambda must be callable, got {type(lr_lambda).__name__}")
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` steps."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        if not is_int(step_size) \
                or step_size < 1:
            raise ValueError(f"step_size must be a positive int, got {step_size!r}")
        self.step_size = int(step_size)
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma for g in groups]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (initial_lr - eta_min) (1 + cos(pi t / T_max)) / 2 (torch's recursive form)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if not is_real(T_max) or not T_max > 0:
            raise ValueError(f"T_max must be > 0, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = float(eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        t, T, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and t > 0:
            return [lo + (base - lo) * (1 + math.cos(t * math.pi / T)) / 2
                    for base in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [g["lr"] + (base - lo) * (1 - math.cos(math.pi / T)) / 2
                    for base, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (g["lr"] - lo) + lo for g in groups]

    def _get_closed_form_lr(self):
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps,
                                    num_cycles=0.5, min_lr_ratio=0.0, last_epoch=-1):
    """Linear warmup from 0 to the lr over ``num_warmup_steps``, then cosine decay to
    ``min_lr_ratio * lr`` at ``num_training_steps``, and there after (transformers'
    schedule of the same name up to num_training_steps when min_lr_ratio=0).  Returns a
    LambdaLR."""
    for v, name in ((num_warmup_steps, "num_warmup_steps"),
                    (num_training_steps, "num_training_steps")):
        if not is_int(v) or v < 0:
            raise ValueError(f"{name} must be an int >= 0, got {v!r}")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio!r}")

    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        progress = min(progress, 1.0)   # stay at the minimum after the last step
        cos = max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))
        return min_lr_ratio + (1.0 - min_lr_ratio) * cos

    return LambdaLR(optimizer, lr_lambda, last_epoch)


def _real(v, name):
    if not is_real(v) or v != v:
        raise TypeError(f"{name} must be a real number, got {v!r}")
    return float(v)


def _positive_int(v, name, minimum=1):
    if not is_int(v) or v < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {v!r}")
    return int(v)


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` steps
    (torch's recursive form; closed form for ``step(epoch)``)."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        start_factor = _real(start_factor, "start_factor")
        end_factor = _real(end_factor, "end_factor")
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(f"start_factor must be in (0, 1], got {start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError(f"end_factor must be in [0, 1], got {end_factor}")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = _positive_int(total_iters, "total_iters", 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return [g["lr"] for g in groups]
        d = self.end_factor - self.start_factor
        return [g["lr"] * (1.0 + d / (self.total_iters * self.start_factor
                                      + (self.last_epoch - 1) * d)) for g in groups]

    def _get_closed_form_lr(self):
        return [base * (self.start_factor + (self.end_factor - self.start_factor)
                        * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every step."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = _real(gamma, "gamma")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma for g in groups]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


def _set_lrs(sched, values):
    for group, lr in zip(sched.optimizer.param_groups, values):
        group["lr"] = lr
    sched._last_lr = [g["lr"] for g in sched.optimizer.param_groups]


class SequentialLR(LRScheduler):
    """Run ``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` (restarted at its
    epoch 0), ... (torch's semantics: the later schedulers' construction steps are undone)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not a fastnn Optimizer")
        schedulers = list(schedulers)
        milestones = list(milestones)
        if not schedulers:
            raise ValueError("SequentialLR expects at least one scheduler, got none")
        for i, sch in enumerate(schedulers):
            if not isinstance(sch, LRScheduler):
                raise TypeError(f"schedulers[{i}] must be an LRScheduler, got {type(sch).__name__}")
            if isinstance(sch, ReduceLROnPlateau):
                raise ValueError(f"SequentialLR does not support ReduceLROnPlateau (schedulers[{i}]): "
                                 f"its step needs a metric")
            if sch.optimizer is not optimizer:
                raise ValueError(f"schedulers[{i}] belongs to another optimizer; SequentialLR "
                                 f"expects all schedulers to belong to the same optimizer")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"milestones must hold one entry fewer than schedulers, got "
                             f"{len(milestones)} milestones for {len(schedulers)} schedulers")
        for m in milestones:
            _positive_int(m, "milestones", 0)
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for sch in schedulers:   # undo the step each made on construction
            sch.last_epoch -= 1
        first = schedulers[bisect.bisect_right(milestones, 0)]
        first._step_count = 0
        first._is_initial = True
        try:
            first.step()
        finally:
            first._is_initial = False
        self._last_lr = first.get_last_lr()

    def step(self):
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        sch = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            # restart at epoch 0 without counting a step (torch's _update_lr(0))
            sch.last_epoch = 0
            closed = getattr(sch, "_get_closed_form_lr", None)
            _set_lrs(sch, closed() if closed is not None else sch.get_lr())
        else:
            sch.step()
        self._last_lr = sch.get_last_lr()

    def state_dict(self):
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        for sch, sd in zip(self._schedulers, subs):
            sch.load_state_dict(sd)


def _per_group(name, optimizer, value):
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"expected {len(optimizer.param_groups)} values for {name}, got "
                             f"{len(value)}")
        return [_real(v, name) for v in value]
    return [_real(value, name)] * len(optimizer.param_groups)


def _set_momentum(group, mom, use_beta1):
    """A group's momentum (SGD, RMSprop) or beta1 (Adam, AdamW) set to mom."""
    if use_beta1:
        group["betas"] = (mom, *group["betas"][1:])
    else:
        group["momentum"] = mom


def _momentum_cycle(sched, optimizer, cycle_momentum, base_momentum, max_momentum, last_epoch):
    """OneCycleLR's and CyclicLR's momentum set-up, torch's: sets sched.cycle_momentum (and
    use_beta1); with it on, returns the per-group (base, max) momentum lists and, on a
    fresh start, gives each group max_momentum, base_momentum and the max as its momentum."""
    sched.cycle_momentum = bool(cycle_momentum)
    if not sched.cycle_momentum:
        return None
    if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
        raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                         "option enabled")
    sched.use_beta1 = "betas" in optimizer.defaults
    max_ms = _per_group("max_momentum", optimizer, max_momentum)
    base_ms = _per_group("base_momentum", optimizer, base_momentum)
    if last_epoch == -1:
        for m, b, group in zip(max_ms, base_ms, optimizer.param_groups):
            _set_momentum(group, m, sched.use_beta1)
            group["max_momentum"] = m
            group["base_momentum"] = b
    return base_ms, max_ms


class OneCycleLR(LRScheduler):
    """The 1cycle policy (torch.optim.lr_scheduler.OneCycleLR): lr from max_lr/div_factor up
    to max_lr over pct_start of ``total_steps``, then down to initial_lr/final_div_factor
    ("cos" or "linear" annealing; ``three_phase`` goes back to initial_lr first).  With
    ``cycle_momentum`` the momentum (SGD, RMSprop) or beta1 (Adam, AdamW) moves inversely
    between max_momentum and base_momentum."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not a fastnn Optimizer")
        self.optimizer = optimizer
        if total_steps is not None:
            self.total_steps = _positive_int(total_steps, "total_steps")
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = (_positive_int(epochs, "epochs")
                                * _positive_int(steps_per_epoch, "steps_per_epoch"))
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if not is_real(pct_start) \
                or not 0 <= pct_start <= 1:
            raise ValueError(f"pct_start must be a float between 0 and 1, got {pct_start!r}")
        pct_start = float(pct_start)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', got "
                             f"{anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        T = self.total_steps
        if three_phase:
            self._schedule_phases = [
                dict(end_step=float(pct_start * T) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=float(2 * pct_start * T) - 2, start_lr="max_lr",
                     end_lr="initial_lr", start_momentum="base_momentum",
                     end_momentum="max_momentum"),
                dict(end_step=T - 1, start_lr="initial_lr", end_lr="min_lr",
                     start_momentum="max_momentum", end_momentum="max_momentum")]
        else:
            self._schedule_phases = [
                dict(end_step=float(pct_start * T) - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=T - 1, start_lr="max_lr", end_lr="min_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum")]
        div_factor = _real(div_factor, "div_factor")
        final_div_factor = _real(final_div_factor, "final_div_factor")
        max_lrs = _per_group("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for m, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = m / div_factor
                group["max_lr"] = m
                group["min_lr"] = group["initial_lr"] / final_div_factor
        _momentum_cycle(self, optimizer, cycle_momentum, base_momentum, max_momentum,
                        last_epoch)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise ValueError(f"Tried to step {step_num} times. The specified number of total "
                             f"steps is {self.total_steps}")
        lrs = []
        phases = self._schedule_phases
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == len(phases) - 1:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lr = self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(group[phase["start_momentum"]],
                                           group[phase["end_momentum"]], pct)
                    break
                start_step = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                _set_momentum(group, mom, self.use_beta1)
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` once the metric passed to ``step(metric)`` has not improved
    (by ``threshold``, relative or absolute) for more than ``patience`` steps; then wait
    ``cooldown`` steps; never below ``min_lr``; changes smaller than ``eps`` are skipped."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not a fastnn Optimizer")
        self.factor = _real(factor, "factor")
        if self.factor >= 1.0:
            raise ValueError(f"factor must be < 1.0, got {factor}")
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = _per_group("min_lr", optimizer, min_lr)
        else:
            self.default_min_lr = _real(min_lr, "min_lr")
            self.min_lrs = [self.default_min_lr] * len(optimizer.param_groups)
        self.patience = _positive_int(patience, "patience", 0)
        self.cooldown = _positive_int(cooldown, "cooldown", 0)
        self.eps = _real(eps, "eps")
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        self.mode, self.threshold_mode = mode, threshold_mode
        self.threshold = _real(threshold, "threshold")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.last_epoch = 0
        self._step_count = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]
        self._reset()

    def _reset(self):
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def _is_better(self, a, best):
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def step(self, metrics, epoch=None):
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0   # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _reduce_lr(self):
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"the optimizer has {len(groups)} parameter groups but "
                                   f"min_lr has {len(self.min_lrs)} entries")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, group in enumerate(groups):
            old = float(group["lr"])
            new = max(old * self.factor, self.min_lrs[i])
            if old - new > self.eps:
                group["lr"] = new


# ---------------------------------------------------------------- more of torch's schedules
def _lambdas(optimizer, lr_lambda):
    if isinstance(lr_lambda, (list, tuple)):
        if len(lr_lambda) != len(optimizer.param_groups):
            raise ValueError(f"Expected {len(optimizer.param_groups)} lr_lambdas, but got "
                             f"{len(lr_lambda)}")
        fns = list(lr_lambda)
    else:
        fns = [lr_lambda] * len(optimizer.param_groups)
    for f in fns:
        if not callable(f):
            raise TypeError(f"lr_lambda must be callable, got {type(f).__name__}")
    return fns


class MultiplicativeLR(LRScheduler):
    """Multiply the lr by ``lr_lambda(epoch)`` at every step (one function, or one per
    parameter group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not a fastnn Optimizer")
        self.lr_lambdas = _lambdas(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [g["lr"] for g in groups]
        return [g["lr"] * f(self.last_epoch) for f, g in zip(self.lr_lambdas, groups)]


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each epoch in ``milestones`` (by gamma^n where a
    milestone is listed n times).  ``milestones`` is kept as a sorted list of ints, so the
    state dict saves with ``fastnn.save``."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        ms = list(milestones)
        for m in ms:
            _positive_int(m, "milestones", 0)
        self.milestones = sorted(int(m) for m in ms)
        self.gamma = _real(gamma, "gamma")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        n = self.milestones.count(self.last_epoch)
        if n == 0:
            return [g["lr"] for g in groups]
        return [g["lr"] * self.gamma ** n for g in groups]

    def _get_closed_form_lr(self):
        k = bisect.bisect_right(self.milestones, self.last_epoch)
        return [base * self.gamma ** k for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr * ``factor`` until epoch ``total_iters``, then the lr itself."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        factor = _real(factor, "factor")
        if factor > 1.0 or factor < 0:
            raise ValueError(f"factor must be in [0, 1], got {factor}")
        self.factor = factor
        self.total_iters = _positive_int(total_iters, "total_iters", 0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in groups]
        if self.last_epoch != self.total_iters:
            return [g["lr"] for g in groups]
        return [g["lr"] * (1.0 / self.factor) for g in groups]

    def _get_closed_form_lr(self):
        on = self.last_epoch >= self.total_iters
        return [base * (self.factor + on * (1 - self.factor)) for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = initial_lr (1 - t / total_iters)^power up to ``total_iters``, then unchanged
    (torch's recursive form; closed form for ``step(epoch)``)."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        self.total_iters = _positive_int(total_iters, "total_iters")
        self.power = _real(power, "power")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        t, T = self.last_epoch, self.total_iters
        if self._is_initial or t > T:
            return [g["lr"] for g in groups]
        decay = ((1.0 - t / T) / (1.0 - (t - 1) / T)) ** self.power
        return [g["lr"] * decay for g in groups]

    def _get_closed_form_lr(self):
        T = self.total_iters
        return [base * (1.0 - min(T, self.last_epoch) / T) ** self.power
                for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from each group's initial lr to ``eta_min`` over T_i steps, then a
    restart, T_i growing by ``T_mult`` (SGDR).  ``step(epoch)`` takes fractional epochs
    (``epoch + i / iters`` within an epoch), as torch's."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        self.T_0 = _positive_int(T_0, "T_0")
        self.T_i = self.T_0
        self.T_mult = _positive_int(T_mult, "T_mult")
        self.eta_min = _real(eta_min, "eta_min")
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

    def step(self, epoch=None):
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            epoch = _real(epoch, "epoch")
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        _set_lrs(self, self.get_lr())


class CyclicLR(LRScheduler):
    """The cyclical learning rate policy (torch.optim.lr_scheduler.CyclicLR): the lr runs
    between ``base_lr`` and ``max_lr`` in cycles of step_size_up + step_size_down steps,
    scaled per cycle ("triangular", "triangular2", "exp_range" or ``scale_fn``); with
    ``cycle_momentum`` the momentum (SGD, RMSprop) or beta1 (Adam, AdamW) moves inversely
    between ``max_momentum`` and ``base_momentum``.  Step it after every batch.  A custom
    ``scale_fn`` is not part of the state dict (give it again when loading)."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None,
                 mode="triangular", gamma=1.0, scale_fn=None, scale_mode="cycle",
                 cycle_momentum=True, base_momentum=0.8, max_momentum=0.9, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not a fastnn Optimizer")
        self.optimizer = optimizer
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(_positive_int(step_size_up, "step_size_up"))
        down = up if step_size_down is None else float(_positive_int(step_size_down,
                                                                     "step_size_down"))
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"mode must be 'triangular', 'triangular2' or 'exp_range' (or "
                             f"give scale_fn), got {mode!r}")
        if scale_fn is not None and not callable(scale_fn):
            raise TypeError(f"scale_fn must be callable, got {type(scale_fn).__name__}")
        if scale_mode not in ("cycle", "iterations"):
            raise ValueError(f"scale_mode must be 'cycle' or 'iterations', got {scale_mode!r}")
        self.mode = mode
        self.gamma = _real(gamma, "gamma")
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else (
            "iterations" if mode == "exp_range" else "cycle")
        moms = _momentum_cycle(self, optimizer, cycle_momentum, base_momentum, max_momentum,
                               last_epoch)
        if self.cycle_momentum:
            self.base_momentums, self.max_momentums = moms
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        s = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * scale_factor * s
               for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, b, m in zip(self.optimizer.param_groups, self.base_momentums,
                                   self.max_momentums):
                _set_momentum(group, m - (m - b) * scale_factor * s, self.use_beta1)
        return lrs

    def state_dict(self):
        sd = super().state_dict()
        sd.pop("_scale_fn_custom", None)
        return sd

    def load_state_dict(self, state_dict):
        self.__dict__.update({k: v for k, v in state_dict.items()
                              if k not in ("lr_lambdas", "_scale_fn_custom")})


class ChainedScheduler(LRScheduler):
    """Step every scheduler in ``schedulers`` at each step (their effects multiply, as in
    torch's ChainedScheduler)."""

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("ChainedScheduler expects at least one scheduler to be chained, "
                             "got none")
        optimizer = optimizer or schedulers[0].optimizer
        for i, sch in enumerate(schedulers):
            if not isinstance(sch, LRScheduler):
                raise TypeError(f"schedulers[{i}] must be an LRScheduler, got "
                                f"{type(sch).__name__}")
            if isinstance(sch, ReduceLROnPlateau):
                raise ValueError(f"ChainedScheduler does not support ReduceLROnPlateau "
                                 f"(schedulers[{i}]): its step needs a metric")
            if sch.optimizer is not optimizer:
                raise ValueError(f"schedulers[{i}] belongs to another optimizer; "
                                 f"ChainedScheduler expects all schedulers to belong to the "
                                 f"same optimizer")
        self._schedulers = schedulers
        self.optimizer = optimizer
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def step(self):
        for sch in self._schedulers:
            sch.step()
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    state_dict = SequentialLR.state_dict
    load_state_dict = SequentialLR.load_state_dict
