"""Recurrent modules: RNN, GRU, LSTM (stacked, bidirectional) and RNNCell, GRUCell, LSTMCell.

Parameters, their names, shapes, order and initialisation are torch's: per layer k and
direction (suffix ``_reverse`` for the backward one) ``weight_ih_l{k}`` (G*H, in),
``weight_hh_l{k}`` (G*H, H), ``bias_ih_l{k}``, ``bias_hh_l{k}`` (G*H,), all drawn from
U(-1/sqrt(H), 1/sqrt(H)), G = 1 (RNN), 3 (GRU: r, z, n), 4 (LSTM: i, f, g, o).
A whole stack runs in one functional call (one backend op), so the module holds no
kernel code and never builds arrays itself (it works unchanged on device arrays).
"""
import math
import warnings

from .. import functional as F
from .._validate import bool_arg, int_arg
from ..functional.rnn import check_dropout, check_nonlinearity
from . import init
from .module import Module, Parameter

__all__ = ["RNNBase", "RNN", "GRU", "LSTM", "RNNCellBase", "RNNCell", "GRUCell", "LSTMCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "GRU": 3, "LSTM": 4}


class RNNBase(Module):
    """The stacked recurrent network shared by RNN, GRU and LSTM."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, dtype=None):
        super().__init__()
        if mode not in _GATES:
            raise ValueError(f"unknown recurrent mode {mode!r}; expected one of {sorted(_GATES)}")
        self.mode = mode
        self.input_size = int_arg(input_size, "input_size", 0)
        self.hidden_size = int_arg(hidden_size, "hidden_size", 1)
        self.num_layers = int_arg(num_layers, "num_layers", 1)
        self.bias = bool_arg(bias, "bias", allow_int=True)
        self.batch_first = bool_arg(batch_first, "batch_first", allow_int=True)
        self.dropout = check_dropout(dropout)
        self.bidirectional = bool_arg(bidirectional, "bidirectional", allow_int=True)
        if self.dropout > 0 and self.num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero "
                          f"dropout expects num_layers greater than 1, but got dropout={self.dropout} "
                          f"and num_layers={self.num_layers}", UserWarning, stacklevel=3)
        G, H = _GATES[mode], self.hidden_size
        D = 2 if self.bidirectional else 1
        dt = dtype or "float32"
        names = []
        for k in range(self.num_layers):
            n_in = self.input_size if k == 0 else D * H
            for d in range(D):
                sfx = f"_l{k}" + ("_reverse" if d else "")
                shapes = [("weight_ih" + sfx, (G * H, n_in)), ("weight_hh" + sfx, (G * H, H))]
                if self.bias:
                    shapes += [("bias_ih" + sfx, (G * H,)), ("bias_hh" + sfx, (G * H,))]
                for name, shape in shapes:
                    setattr(self, name, Parameter(init.zeros(shape, dt)))
                    names.append(name)
        object.__setattr__(self, "_flat_weights_names", tuple(names))
        self.reset_parameters()

    def reset_parameters(self):
        """torch's init: every parameter ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for name in self._flat_weights_names:
            p = getattr(self, name)
            init.uniform_(p, -stdv, stdv)

    @property
    def _flat_weights(self):
        return [getattr(self, n).data for n in self._flat_weights_names]

    @property
    def all_weights(self):
        """Parameters grouped per layer and direction, as torch's ``all_weights``."""
        nw = 4 if self.bias else 2
        ps = [getattr(self, n) for n in self._flat_weights_names]
        return [ps[i:i + nw] for i in range(0, len(ps), nw)]

    def _run(self, x, hx):
        common = dict(num_layers=self.num_layers, dropout=self.dropout, training=self.training,
                      bidirectional=self.bidirectional, batch_first=self.batch_first)
        if self.mode == "LSTM":
            return F.lstm_fwd(x, hx, self._flat_weights, **common)
        if self.mode == "GRU":
            return F.gru_fwd(x, hx, self._flat_weights, **common)
        return F.rnn_fwd(x, hx, self._flat_weights, "tanh" if self.mode == "RNN_TANH" else "relu", **common)

    def forward(self, x, hx=None):
        """-> (output, h_n); LSTM: (output, (h_n, c_n)).  hx as torch (LSTM: (h_0, c_0))."""
        outs, ctx = self._run(x, hx)
        self._keep(ctx)
        if self.mode == "LSTM":
            return outs[0], (outs[1], outs[2])
        return outs

    def _accumulate(self, d_weights):
        for name, g in zip(self._flat_weights_names, d_weights):
            getattr(self, name).accumulate_grad(g)

    def _weight_grad(self):
        """False when every weight is frozen: the backward then makes no weight gradient
        (one trainable parameter: all are made, the frozen ones dropped)."""
        return any(getattr(self, name).requires_grad for name in self._flat_weights_names)

    def backward(self, d_output, d_h_n=None):
        """-> d_input, or (d_input, d_h_0) when forward was given hx.  Accumulates every
        parameter gradient.  d_output or d_h_n may be None (no gradient)."""
        ctx = self._take()
        fn = F.gru_bwd if self.mode == "GRU" else F.rnn_bwd
        dx, dhx, dw = fn(ctx, d_output, d_h_n, weight_grad=self._weight_grad())
        self._accumulate(dw)
        return dx if dhx is None else (dx, dhx)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh / relu(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, dtype=None):
        nl = check_nonlinearity(nonlinearity)
        super().__init__("RNN_TANH" if nl == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional, dtype)
        self.nonlinearity = nl

    def extra_repr(self):
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class GRU(RNNBase):
    """GRU: r, z = sigmoid(...), n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1-z) n + z h."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype)


class LSTM(RNNBase):
    """LSTM: i, f, o = sigmoid(...), g = tanh(...), c' = f c + i g, h' = o tanh(c')."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype)

    def backward(self, d_output, d_h_n=None, d_c_n=None):
        """-> d_input, or (d_input, (d_h_0, d_c_0)) when forward was given hx."""
        dx, dhx, dw = F.lstm_bwd(self._take(), d_output, d_h_n, d_c_n,
                                 weight_grad=self._weight_grad())
        self._accumulate(dw)
        return dx if dhx is None else (dx, dhx)


# ------------------------------------------------------------------ cells
class RNNCellBase(Module):
    def __init__(self, kind, input_size, hidden_size, bias=True, dtype=None):
        super().__init__()
        self.input_size = int_arg(input_size, "input_size", 0)
        self.hidden_size = int_arg(hidden_size, "hidden_size", 1)
        self.bias = bool_arg(bias, "bias", allow_int=True)
        G, H = {"rnn": 1, "gru": 3, "lstm": 4}[kind], self.hidden_size
        object.__setattr__(self, "_kind", kind)
        dt = dtype or "float32"
        self.weight_ih = Parameter(init.zeros((G * H, self.input_size), dt))
        self.weight_hh = Parameter(init.zeros((G * H, H), dt))
        if self.bias:
            self.bias_ih = Parameter(init.zeros((G * H,), dt))
            self.bias_hh = Parameter(init.zeros((G * H,), dt))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        """torch's init: every parameter ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)),
        written in place."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def _args(self):
        b_ih, b_hh = self.bias_ih, self.bias_hh
        return (self.weight_ih.data, self.weight_hh.data,
                None if b_ih is None else b_ih.data, None if b_hh is None else b_hh.data)

    def _accumulate(self, grads):
        for p, g in zip((self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh), grads):
            if p is not None:
                p.accumulate_grad(g)

    def _weight_grad(self):
        """False when every parameter is frozen: the backward then makes none of their
        gradients."""
        return any(p is not None and p.requires_grad
                   for p in (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh))

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        return s + ("" if self.bias else ", bias=False")


class RNNCell(RNNCellBase):
    """One Elman RNN step: h' = tanh / relu(x W_ih^T + b_ih + h W_hh^T + b_hh)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", dtype=None):
        nl = check_nonlinearity(nonlinearity)
        super().__init__("rnn", input_size, hidden_size, bias, dtype)
        self.nonlinearity = nl

    def forward(self, x, hx=None):
        h, ctx = F.rnn_cell_fwd(x, hx, *self._args(), nonlinearity=self.nonlinearity)
        self._keep(ctx)
        return h

    def backward(self, d_h):
        """-> d_input, or (d_input, d_hx) when forward was given hx."""
        dx, dhx, *grads = F.rnn_cell_bwd(self._take(), d_h, weight_grad=self._weight_grad())
        self._accumulate(grads)
        return dx if dhx is None else (dx, dhx)


class GRUCell(RNNCellBase):
    """One GRU step."""

    def __init__(self, input_size, hidden_size, bias=True, dtype=None):
        super().__init__("gru", input_size, hidden_size, bias, dtype)

    def forward(self, x, hx=None):
        h, ctx = F.gru_cell_fwd(x, hx, *self._args())
        self._keep(ctx)
        return h

    def backward(self, d_h):
        """-> d_input, or (d_input, d_hx) when forward was given hx."""
        dx, dhx, *grads = F.gru_cell_bwd(self._take(), d_h, weight_grad=self._weight_grad())
        self._accumulate(grads)
        return dx if dhx is None else (dx, dhx)


class LSTMCell(RNNCellBase):
    """One LSTM step: forward(x, (h, c)) -> (h', c')."""

    def __init__(self, input_size, hidden_size, bias=True, dtype=None):
        super().__init__("lstm", input_size, hidden_size, bias, dtype)

    def forward(self, x, hx=None):
        hc, ctx = F.lstm_cell_fwd(x, hx, *self._args())
        self._keep(ctx)
        return hc

    def backward(self, d_h, d_c=None):
        """-> d_input, or (d_input, (d_h, d_c)) when forward was given hx."""
        dx, dhx, *grads = F.lstm_cell_bwd(self._take(), d_h, d_c,
                                          weight_grad=self._weight_grad())
        self._accumulate(grads)
        return dx if dhx is None else (dx, dhx)
