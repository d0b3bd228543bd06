"""fastnn.nn: modules with explicit forward and backward, shaped like torch.nn.

``__all__`` is the modules, ``init`` and ``utils`` (as torch.nn); the files that define
the modules (fastnn.nn.conv, ...) stay importable but are not names of this namespace."""
from . import init  # noqa: F401
from .activation import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .blocks import *  # noqa: F401,F403
from .batchnorm import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .dense import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .embedding import *  # noqa: F401,F403
from .flatten import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .module import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from . import utils  # noqa: F401,E402


def _public(namespace):
    import types
    names = ["init", "utils"]
    for name, value in list(namespace.items()):
        if isinstance(value, types.ModuleType):
            if not name.startswith("__") and name not in ("init", "utils"):
                del namespace[name]
        elif not name.startswith("_"):
            names.append(name)
    return sorted(names)


__all__ = _public(globals())
