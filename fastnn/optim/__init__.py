"""fastnn.optim: optimizers with torch.optim's update rules and learning-rate schedules.

Every optimizer step is ONE fused kernel call per parameter (``sgd_step``, ``adam_step``,
``adamw_step``, ``rmsprop_step``, ``adagrad_step``, ``nadam_step``, ``radam_step``,
``adamax_step`` in the ``optim`` kernel family: compiled
in csrc/optim.pyx, NumPy twins in fastnn/reference/optim.py); Adam and AdamW with
``foreach`` None (the default) or True make one call per parameter group and dtype
instead (``adam_step_foreach`` / ``adamw_step_foreach``: the same bits, one parallel
region for a model's many small tensors).  Unlike the other families, these kernels
update the parameter and its state arrays IN PLACE and return None.
"""
from . import lr_scheduler  # noqa: F401
from .adam import Adam, Adamax, AdamW, NAdam, RAdam
from .optimizer import Optimizer
from .rmsprop import Adagrad, RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "NAdam", "RAdam", "Adamax", "RMSprop",
           "Adagrad", "lr_scheduler"]
