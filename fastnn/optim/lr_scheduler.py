"""Learning-rate schedules with torch.optim.lr_scheduler's semantics.

A scheduler records ``initial_lr`` in each parameter group, sets the lr for step 0 on
construction, and ``step()`` (called after ``optimizer.step()``) moves to the next
value.  ``StepLR`` and ``CosineAnnealingLR`` use torch's recursive (chainable) update
formulas so their values equal torch's to the last bit; ``step(epoch)`` uses the
closed form, as torch does.  ``get_cosine_schedule_with_warmup`` is the linear-warmup
+ cosine-decay LambdaLR used to train transformers.
"""
import math
import numbers

from .optimizer import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "CosineAnnealingLR",
           "get_cosine_schedule_with_warmup"]


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not a fastnn Optimizer")
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, numbers.Integral) \
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
        if isinstance(step_size, bool) or not isinstance(step_size, numbers.Integral) \
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
        if isinstance(T_max, bool) or not isinstance(T_max, numbers.Real) or not T_max > 0:
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
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
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
