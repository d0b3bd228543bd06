"""fastnn.functional (import as F): stateless ops shaped like torch.nn.functional.

``F.op(...)`` is inference; ``F.op_fwd(...) -> (out, ctx)`` and ``F.op_bwd(ctx, d_out)``
are the differentiable pair the modules (and tests) use.

``__all__`` (what ``from fastnn.functional import *`` gives) is the torch-shaped API
only.  Also reachable as attributes, but not star-exported: the ``_fwd`` / ``_bwd``
pairs, and fastnn's own ops that torch.nn.functional does not have (``std_layer_norm``,
``add_layer_norm``, the whole-sequence ``rnn`` / ``gru`` / ``lstm`` and their cells,
``multi_head_attention_fwd`` / ``_bwd``, ``attention_mask``, ``varlen_attention``, and
``linear_act_fwd`` / ``_bwd``: a linear layer with its GELU fused, for training).
Argument checks live in fastnn._validate; the family modules (fastnn.functional.conv, ...)
stay importable but are not names of this namespace.
"""
from .activation import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .batchnorm import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .dense import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .embedding import *  # noqa: F401,F403
from .groupnorm import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .rmsnorm import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .stdnorm import *  # noqa: F401,F403

__all__ = [
    # API.md
    "linear", "embedding", "sinusoidal_positional_encoding", "layer_norm", "batch_norm",
    "dropout", "relu", "leaky_relu", "prelu", "rrelu", "elu", "selu", "celu", "gelu", "silu",
    "softplus", "sigmoid", "tanh", "softmax", "softmin", "log_softmax",
    "scaled_dot_product_attention", "conv2d", "max_pool2d", "avg_pool2d", "cross_entropy",
    # torch.nn.functional names added since (issue #19's layers)
    "conv1d", "conv_transpose2d", "max_pool1d", "avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_max_pool2d", "group_norm", "rms_norm", "nll_loss", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "kl_div", "hardtanh", "relu6", "hardsigmoid", "hardswish", "mish",
]


def _drop_module_names(namespace):
    # importing a submodule binds its name here (F.conv, F.loss, ...); where a function of
    # the same name was star-imported over it (F.dropout, F.softmax, F.rnn) it stays
    import types
    for name, value in list(namespace.items()):
        if isinstance(value, types.ModuleType) and not name.startswith("__"):
            del namespace[name]


_drop_module_names(globals())
