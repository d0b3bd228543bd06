"""Transformer building blocks: GPT-2 Conv1D and FeedForward, Residual, StdLayerNorm.

Conv1D is GPT-2's dense layer with the weight stored transposed, (nx, nf): y = x W + b.
It runs on the linear kernels; on the host it passes W^T as a view, which the cpu kernels
read in its (in, out) layout (no copy of the weight and its gradient per call: those
transposes were 2.5-4 ms of a 70 ms single-thread GPT demo train step).
"""
import numpy as np

from .. import functional as F
from .._backend import placed
from .._validate import int_arg, positive_float
from . import init
from .dropout import Dropout
from .module import Module, Parameter, grad_flags

__all__ = ["Conv1D", "FeedForward", "Residual", "StdLayerNorm"]


def _transposed(a):
    """a.T as a fresh C-contiguous array, where ``a`` is (host or device)."""
    return placed(a).transpose2d(a)


def _add(a, b):
    """a + b as a fresh array, on the host or (either operand there) the device."""
    return placed(a, b).add(a, b)


class Conv1D(Module):
    """GPT-2's Conv1D(nf, nx): y = x @ weight + bias, weight (nx, nf) ~ N(0, 0.02^2), bias 0."""

    def __init__(self, nf, nx, dtype=None):
        super().__init__()
        self.nf = int_arg(nf, "nf", 0)
        self.nx = int_arg(nx, "nx", 0)
        dt = dtype or "float32"
        self.weight = Parameter(init.zeros((self.nx, self.nf), dt))
        self.bias = Parameter(init.zeros((self.nf,), dt))
        self.reset_parameters()

    def reset_parameters(self):
        """GPT-2's init, drawn again, in place: weight N(0, 0.02^2), bias 0."""
        init.normal_(self.weight, 0.0, 0.02)
        init.zeros_(self.bias)

    def forward(self, x):
        y, ctx = F.linear_fwd(x, self._linear_weight(), self.bias.data)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, dwt, db = F.linear_bwd(self._take(), dy, **self._grad_flags())
        self._accumulate(dwt, db)
        return dx

    def _linear_weight(self):
        """The (out, in) weight linear takes: on the host a view, weight.T (the kernels read
        the (in, out) layout as it is, no copy per call); on a device a transposed copy."""
        w = self.weight.data
        return w.T if type(w) is np.ndarray else _transposed(w)

    def _grad_flags(self):
        """linear_bwd's weight_grad / bias_grad: no gradient made for a frozen parameter."""
        return grad_flags(self.weight, self.bias)

    def _accumulate(self, dwt, db):
        """Add a linear backward's (out, in) d_weight (None: frozen) and d_bias to the
        gradients."""
        if dwt is not None:
            dw = dwt.T if type(dwt) is np.ndarray else None
            # the cpu kernels return d_weight in the weight's layout (dwt.T is C-contiguous)
            self.weight.accumulate_grad(dw if dw is not None and dw.flags.c_contiguous
                                        else _transposed(dwt))
        self.bias.accumulate_grad(db)

    def _plain(self):
        """Whether a container may run this layer's product itself (fused with its
        neighbours): a Conv1D as defined here, with no backward hooks to be handed its
        gradients and no forward hooks to see its call."""
        return type(self) is Conv1D and not self._backward_hooks and self._fhooks is None

    def extra_repr(self):
        return f"nf={self.nf}, nx={self.nx}"


_ACTIVATIONS = {
    "gelu_tanh": (lambda h: F.gelu_fwd(h, "tanh"), F.gelu_bwd),
    "gelu": (lambda h: F.gelu_fwd(h, "none"), F.gelu_bwd),
    "relu": (lambda h: F.relu_fwd(h), lambda ctx, d: F.relu_bwd(ctx, d)),
}
_FUSED = ("gelu_tanh", "gelu")   # activations F.linear_act_fwd runs in c_fc's product


def _identity_dropout(d):
    """Whether dropout module ``d`` passes its input through (p = 0 or eval mode) and has
    no hooks: a residual sum may then move before it."""
    return (type(d) is Dropout and (d.p == 0 or not d.training)
            and not d._backward_hooks and d._fhooks is None)


class _Fused:
    """A container's cache when it ran its sublayers' products itself: the F ctxs, and
    whether its output dropout ran (else a residual sum went into the last product)."""
    __slots__ = ("ctxs", "dropout")

    def __init__(self, ctxs, dropout):
        self.ctxs = ctxs
        self.dropout = dropout


def add_residual(y, residual):
    """residual + y for a sublayer that was asked for its residual sum but made none."""
    return y if residual is None else _add(residual, y)


class FeedForward(Module):
    """GPT-2's MLP: dropout(c_proj(act(c_fc(x)))), c_fc Conv1D(d_ff, d_model), c_proj
    Conv1D(d_model, d_ff), d_ff = 4 * d_model by default.  activation: "gelu_tanh"
    (GPT-2), "gelu" (erf) or "relu" (the ReLU "fully connected" block)."""

    def __init__(self, d_model, d_ff=None, dropout=0.0, activation="gelu_tanh", dtype=None):
        super().__init__()
        self.d_model = int_arg(d_model, "d_model", 1)
        self.d_ff = 4 * self.d_model if d_ff is None else int_arg(d_ff, "d_ff", 1)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.c_fc = Conv1D(self.d_ff, self.d_model, dtype)
        self.c_proj = Conv1D(self.d_model, self.d_ff, dtype)
        self.dropout = Dropout(dropout)

    def forward(self, x, *, residual=None):
        """dropout(c_proj(act(c_fc(x)))), plus ``residual`` when given (a transformer
        block's residual connection: then made inside c_proj's product when the dropout
        passes its input through).  With GELU activations and plain Conv1D sublayers the
        activation runs inside c_fc's product and its backward inside c_proj's
        (F.linear_act_fwd, F.linear_bwd(act=)): the same values, fewer passes."""
        if self.activation in _FUSED and self.c_fc._plain() and self.c_proj._plain():
            h, cfc = F.linear_act_fwd(x, self.c_fc._linear_weight(), self.c_fc.bias.data,
                                      self.activation)
            into = residual is not None and _identity_dropout(self.dropout)
            y, cproj = F.linear_fwd(h, self.c_proj._linear_weight(), self.c_proj.bias.data,
                                    residual=residual if into else None)
            self._keep(_Fused((cfc, cproj), not into))
            return y if into else add_residual(self.dropout(y), residual)
        act_fwd, _ = _ACTIVATIONS[self.activation]
        h, act_ctx = act_fwd(self.c_fc(x))
        self._keep(act_ctx)
        return add_residual(self.dropout(self.c_proj(h)), residual)

    def backward(self, dy):
        ctx = self._take()
        if type(ctx) is _Fused:
            cfc, cproj = ctx.ctxs
            if ctx.dropout:
                dy = self.dropout.backward(dy)
            du, dw, db = F.linear_bwd(cproj, dy, act=cfc, **self.c_proj._grad_flags())
            self.c_proj._accumulate(dw, db)
            dx, dw, db = F.linear_act_bwd(cfc, du, pre_activation=True,
                                          **self.c_fc._grad_flags())
            self.c_fc._accumulate(dw, db)
            return dx
        _, act_bwd = _ACTIVATIONS[self.activation]
        dh = self.c_proj.backward(self.dropout.backward(dy))
        return self.c_fc.backward(act_bwd(ctx, dh))

    def extra_repr(self):
        return f"d_model={self.d_model}, d_ff={self.d_ff}, activation={self.activation!r}"


class Residual(Module):
    """y = x + module(x); backward: dx = dy + module.backward(dy)."""

    def __init__(self, module):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"Residual wraps a Module, got {type(module).__name__}")
        self.module = module

    def forward(self, x):
        fx = self.module(x)
        if tuple(fx.shape) != tuple(x.shape):
            raise ValueError(f"Residual: the wrapped module must keep the input's shape "
                             f"{tuple(x.shape)}, got {tuple(fx.shape)}")
        self._keep(True)
        return _add(x, fx)

    def backward(self, dy):
        self._take()
        return _add(dy, self.module.backward(dy))


class StdLayerNorm(Module):
    """The Annotated Transformer's LayerNorm: a * (x - mean) / (std + eps) + b over the last
    dimension, unbiased std; parameters ``a`` (ones) and ``b`` (zeros)."""

    def __init__(self, features, eps=1e-6, dtype=None):
        super().__init__()
        self.features = int_arg(features, "features", 1)
        self.eps = positive_float(eps, "eps", allow_zero=True)
        dt = dtype or "float32"
        self.a = Parameter(init.ones((self.features,), dt))
        self.b = Parameter(init.zeros((self.features,), dt))

    def reset_parameters(self):
        init.ones_(self.a)
        init.zeros_(self.b)

    def forward(self, x):
        y, ctx = F.std_layer_norm_fwd(x, self.a.data, self.b.data, self.eps)
        self._keep(ctx)
        return y

    def backward(self, dy):
        dx, da, db = F.std_layer_norm_bwd(self._take(), dy)
        self.a.accumulate_grad(da)
        self.b.accumulate_grad(db)
        return dx

    def extra_repr(self):
        return f"features={self.features}, eps={self.eps}"
