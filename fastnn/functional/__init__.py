"""fastnn.functional (import as F): stateless ops shaped like torch.nn.functional.

``F.op(...)`` is inference; ``F.op_fwd(...) -> (out, ctx)`` and ``F.op_bwd(ctx, d_out)``
are the differentiable pair the modules (and tests) use.
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
