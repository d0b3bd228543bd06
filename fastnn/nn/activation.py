"""Activation modules (torch.nn names, constructor arguments and defaults)."""
import operator

from .. import functional as F
from .._validate import bool_arg, int_arg, real
from ..functional.activation import _elu_check_inplace, _hardtanh_args, _leaky_args
from ..functional.activation import gelu_fwd as _gelu_fwd
from . import init
from .module import Module, Parameter

__all__ = ["ReLU", "LeakyReLU", "PReLU", "RReLU", "ELU", "SELU", "CELU", "GELU", "SiLU",
           "Softplus", "Sigmoid", "Tanh", "Softmax", "Softmin", "LogSoftmax", "Hardtanh",
           "ReLU6", "Hardsigmoid", "Hardswish", "Mish"]


def _arg_getter(fields):
    """``self._args()`` for a class whose forward op takes ``fields`` after x: the
    attributes as a tuple (operator.attrgetter: no generator per call)."""
    if not fields:
        return _no_args
    get = operator.attrgetter(*fields)
    if len(fields) == 1:
        return lambda self: (get(self),)
    return lambda self: get(self)      # a function, so that it binds as a method


def _no_args(self):
    return ()


class _Elementwise(Module):
    """An activation with no parameters: forward/backward through an F op pair.

    ``_fields`` names the attributes that follow x in the forward op's arguments, in
    order; the repr shows them as name=value (``inplace`` only when True, last)."""

    _fwd = None
    _bwd = None
    _fields = ()

    def __init_subclass__(cls, op=None, **kwargs):
        # class X(_Elementwise, op="x"): forward/backward through F.x_fwd / F.x_bwd
        super().__init_subclass__(**kwargs)
        if op is not None:
            cls._fwd = staticmethod(getattr(F, op + "_fwd"))
            cls._bwd = staticmethod(getattr(F, op + "_bwd"))
        if "_args" not in cls.__dict__:
            cls._args = _arg_getter(cls._fields)

    def _args(self):
        return ()

    def extra_repr(self):
        parts = [f"{name}={getattr(self, name)}" for name in self._fields if name != "inplace"]
        if "inplace" in self._fields and self.inplace:
            parts.append("inplace=True")
        return ", ".join(parts)

    def __call__(self, x):
        # Module.__call__ on a leaf only calls forward, through *args/**kwargs packing that
        # costs ~0.3 us a call (the small-call latency, issue #16); one given submodules
        # (or forward hooks) takes the general call, which records what they keep
        if self._modules or self._fhooks is not None:
            return Module.__call__(self, x)
        return self.forward(x)

    def forward(self, x):
        y, ctx = self._fwd(x, *self._args())
        self._keep(ctx)
        return y

    def backward(self, dy):
        return type(self)._bwd(self._take(), dy)


class _Inplace(_Elementwise):
    _fields = ("inplace",)

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = bool_arg(inplace, "inplace")


class ReLU(_Inplace, op="relu"):
    pass


class LeakyReLU(_Inplace, op="leaky_relu"):
    _fields = ("negative_slope", "inplace")

    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__(inplace)
        self.negative_slope = _leaky_args(negative_slope, self.inplace)[0]


class PReLU(Module):
    """x for x > 0, weight * x otherwise; ``weight`` (num_parameters,) is learnable and is
    broadcast along dim 1 of the input (one value, or one per channel)."""

    def __init__(self, num_parameters=1, init=0.25, dtype=None):
        super().__init__()
        self.num_parameters = int_arg(num_parameters, "num_parameters", minimum=1)
        self.init = real(init, "init", finite=True)
        self.weight = Parameter(_full((self.num_parameters,), self.init, dtype or "float32"))

    def reset_parameters(self):
        """Every slope back to ``init`` (in place)."""
        init.constant_(self.weight, self.init)

    def forward(self, x):
        y, ctx = F.prelu_fwd(x, self.weight.data)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dw = F.prelu_bwd(self._take(), dy)
        self.weight.accumulate_grad(dw)
        return dx

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


def _full(shape, value, dtype):
    a = init.ones(shape, dtype)
    a *= value
    return a


class RReLU(_Inplace, op="rrelu"):
    """Training: slopes ~ U(lower, upper) per element (fastnn.manual_seed); eval: the
    fixed slope (lower + upper) / 2."""

    _fields = ("lower", "upper", "inplace")    # the repr's (forward also passes training)

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__(inplace)
        self.lower = real(lower, "lower", finite=True)
        self.upper = real(upper, "upper", finite=True)
        if self.lower > self.upper:
            raise ValueError(f"RReLU: lower ({self.lower}) must be <= upper ({self.upper})")

    def forward(self, x):
        y, ctx = F.rrelu_fwd(x, self.lower, self.upper, self.training, self.inplace)
        self._keep(ctx)
        return y


class ELU(_Inplace, op="elu"):
    _fields = ("alpha", "inplace")

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__(inplace)
        self.alpha = real(alpha, "alpha", finite=True)
        _elu_check_inplace(self.alpha, 1.0, 1.0, self.inplace)


class SELU(_Inplace, op="selu"):
    pass


class CELU(ELU, op="celu"):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__(alpha, inplace)
        if self.alpha == 0:
            raise ValueError("CELU: alpha must not be 0 (the formula divides by alpha)")


class GELU(_Elementwise, op="gelu"):
    _fields = ("approximate",)

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    # The small-call latency path (issue #16): forward written out for the one op it runs
    # (no _args tuple, no star-call; _Elementwise.__call__ goes straight to it).
    def forward(self, x):
        y, ctx = _gelu_fwd(x, self.approximate)
        if self.training:
            self._keep(ctx)
        return y

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class SiLU(_Inplace, op="silu"):
    pass


class Softplus(_Elementwise, op="softplus"):
    _fields = ("beta", "threshold")

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta = real(beta, "beta", finite=True)
        self.threshold = real(threshold, "threshold", finite=True)
        if self.beta == 0:
            raise ValueError("Softplus: beta must not be 0")
        if self.threshold < 0:
            raise ValueError(f"Softplus: threshold must be >= 0, got {self.threshold}")


class Sigmoid(_Elementwise, op="sigmoid"):
    pass


class Tanh(_Elementwise, op="tanh"):
    pass


class Hardtanh(_Inplace, op="hardtanh"):
    """torch.nn.Hardtanh: min(max(x, min_val), max_val)."""

    _fields = ("min_val", "max_val", "inplace")

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__(inplace)
        self.min_val, self.max_val = _hardtanh_args(min_val, max_val)


class ReLU6(_Inplace, op="relu6"):
    """torch.nn.ReLU6: min(max(x, 0), 6)."""


class Hardsigmoid(_Inplace, op="hardsigmoid"):
    """torch.nn.Hardsigmoid: relu6(x + 3) / 6."""


class Hardswish(_Inplace, op="hardswish"):
    """torch.nn.Hardswish: x relu6(x + 3) / 6."""


class Mish(_Inplace, op="mish"):
    """torch.nn.Mish: x tanh(softplus(x))."""


class Softmax(_Elementwise, op="softmax"):
    _fields = ("dim",)

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim


class Softmin(Softmax, op="softmin"):
    pass


class LogSoftmax(Softmax, op="log_softmax"):
    pass
