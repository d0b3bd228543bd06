"""fastnn.nn: modules with explicit forward and backward, shaped like torch.nn."""
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
