"""Recurrent family: whole-stack rnn / gru / lstm ops, the cells, and the modules.

The op cases pass the initial states and every weight as separate positional arrays, so
the harness makes each of them non-contiguous, gradient-checks each, and compares each
gradient with torch.lstm / torch.gru / torch.rnn_* (torch's flat-weight functions): each
case gives ``Op.case`` its own fwd / bwd / torch_fn adapters for that flat layout around the
op's F pair (tests/reliability_registry.py: rnn, gru, lstm, *_cell).
"""
import numpy as np

import fastnn.functional as F
import fastnn.nn as nn
from harness import ModuleCase, random_like
from reliability_registry import op

_G = {"rnn": 1, "gru": 3, "lstm": 4}


def _seq(kind, name, T, B, I, H, L=1, bi=False, bias=True, bf=False, hx=True, nonlin="tanh",
         unbatched=False, dropout=0.0, training=False):
    G = _G[kind]
    D = 2 if bi else 1
    ns = (2 if kind == "lstm" else 1) if hx else 0
    nw = L * D * (4 if bias else 2)

    def make(rng, dt):
        x = rng.standard_normal((T, I) if unbatched else ((B, T, I) if bf else (T, B, I)))
        sshape = (L * D, H) if unbatched else (L * D, B, H)
        states = [0.7 * rng.standard_normal(sshape) for _ in range(ns)]
        ws = []
        for k in range(L):
            for _ in range(D):
                ws.append(0.6 * rng.standard_normal((G * H, I if k == 0 else D * H)))
                ws.append(0.6 * rng.standard_normal((G * H, H)))
                if bias:
                    ws += [0.5 * rng.standard_normal(G * H), 0.5 * rng.standard_normal(G * H)]
        return tuple(a.astype(dt) for a in [x] + states + ws), {}

    def hx_of(states):
        if not states:
            return None
        return tuple(states) if kind == "lstm" else states[0]

    def fwd(x, *rest):
        opts = dict(num_layers=L, dropout=dropout, training=training, bidirectional=bi, batch_first=bf)
        hxv, w = hx_of(rest[:ns]), rest[ns:]
        if kind == "lstm":
            return F.lstm_fwd(x, hxv, w, **opts)
        if kind == "gru":
            return F.gru_fwd(x, hxv, w, **opts)
        return F.rnn_fwd(x, hxv, w, nonlin, **opts)

    def bwd(ctx, d):
        dx, dhx, dw = {"lstm": F.lstm_bwd, "gru": F.gru_bwd, "rnn": F.rnn_bwd}[kind](ctx, *d)
        dh = () if ns == 0 else ((dhx,) if ns == 1 else tuple(dhx))
        return (dx,) + dh + tuple(dw)

    def torch_fn(torch, x, *rest):
        states, w = list(rest[:ns]), list(rest[ns:])
        shape = (L * D, B, H)
        if unbatched:
            x = x.unsqueeze(1)
            states = [s.unsqueeze(1) for s in states]
        if not states:
            states = [torch.zeros(shape, dtype=x.dtype) for _ in range(2 if kind == "lstm" else 1)]
        args = (bias, L, dropout, training, bi, bf and not unbatched)
        if kind == "lstm":
            outs = torch.lstm(x, tuple(states), w, *args)
        elif kind == "gru":
            outs = torch.gru(x, states[0], w, *args)
        else:
            outs = getattr(torch, "rnn_" + nonlin)(x, states[0], w, *args)
        return tuple(o.squeeze(1) for o in outs) if unbatched else tuple(outs)

    return op(kind).case(name, make, fwd=fwd, bwd=bwd, grad_of=tuple(range(1 + ns + nw)),
                         torch_fn=None if (dropout and training) else torch_fn,
                         random=bool(dropout and training), rtol32=5e-4, atol32=5e-5)


def _cell(kind, name, B, I, H, bias=True, hx=True, nonlin="tanh", unbatched=False):
    G = _G[kind]
    ns = (2 if kind == "lstm" else 1) if hx else 0

    def make(rng, dt):
        x = rng.standard_normal((I,) if unbatched else (B, I))
        states = [0.7 * rng.standard_normal((H,) if unbatched else (B, H)) for _ in range(ns)]
        ws = [0.6 * rng.standard_normal((G * H, I)), 0.6 * rng.standard_normal((G * H, H))]
        ws += [0.5 * rng.standard_normal(G * H), 0.5 * rng.standard_normal(G * H)] if bias else [None, None]
        return tuple(None if a is None else a.astype(dt) for a in [x] + states + ws), {}

    def fwd(x, *rest):
        states, w = rest[:ns], rest[ns:]
        hxv = None if not states else (tuple(states) if kind == "lstm" else states[0])
        if kind == "lstm":
            return F.lstm_cell_fwd(x, hxv, *w)
        if kind == "gru":
            return F.gru_cell_fwd(x, hxv, *w)
        return F.rnn_cell_fwd(x, hxv, *w, nonlinearity=nonlin)

    def bwd(ctx, d):
        if kind == "lstm":
            dx, dhx, *dw = F.lstm_cell_bwd(ctx, *d)
        else:
            dx, dhx, *dw = (F.gru_cell_bwd if kind == "gru" else F.rnn_cell_bwd)(ctx, d)
        dh = () if ns == 0 else ((dhx,) if ns == 1 else tuple(dhx))
        return (dx,) + dh + tuple(dw)

    def torch_fn(torch, x, *rest):
        states, w = list(rest[:ns]), list(rest[ns:])
        if not states:
            shape = (H,) if unbatched else (B, H)
            states = [torch.zeros(shape, dtype=x.dtype) for _ in range(2 if kind == "lstm" else 1)]
        if unbatched:  # torch's cell functions take batches; nn.*Cell unsqueezes
            x = x.unsqueeze(0)
            states = [s.unsqueeze(0) for s in states]
        if kind == "lstm":
            out = tuple(torch.lstm_cell(x, tuple(states), *w))
        elif kind == "gru":
            out = torch.gru_cell(x, states[0], *w)
        else:
            out = getattr(torch, f"rnn_{nonlin}_cell")(x, states[0], *w)
        if unbatched:
            return tuple(o.squeeze(0) for o in out) if kind == "lstm" else out.squeeze(0)
        return out

    return op(kind + "_cell").case(name, make, fwd=fwd, bwd=bwd, grad_of=tuple(range(1 + ns + 4)),
                                   torch_fn=torch_fn, rtol32=5e-4, atol32=5e-5)


CASES = [
    _seq("lstm", "lstm_1layer", 4, 3, 5, 6),
    _seq("lstm", "lstm_2layer_bidir", 3, 2, 4, 5, L=2, bi=True),
    _seq("lstm", "lstm_batch_first_nohx", 3, 2, 4, 5, bf=True, hx=False, L=2),
    _seq("lstm", "lstm_nobias_bidir_bf", 3, 2, 3, 4, bi=True, bias=False, bf=True),
    _seq("lstm", "lstm_unbatched", 4, 1, 3, 4, unbatched=True, bi=True),
    _seq("lstm", "lstm_dropout_train", 3, 2, 4, 5, L=3, bi=True, dropout=0.4, training=True),
    _seq("gru", "gru_1layer", 4, 3, 5, 6),
    _seq("gru", "gru_2layer_bidir", 3, 2, 4, 5, L=2, bi=True),
    _seq("gru", "gru_batch_first_nohx", 3, 2, 4, 5, bf=True, hx=False),
    _seq("gru", "gru_nobias_bidir", 3, 2, 3, 4, bi=True, bias=False, L=2),
    _seq("gru", "gru_unbatched", 4, 1, 3, 4, unbatched=True),
    _seq("gru", "gru_dropout_train", 3, 2, 4, 5, L=2, dropout=0.5, training=True, bf=True),
    _seq("rnn", "rnn_tanh_1layer", 5, 3, 4, 6),
    _seq("rnn", "rnn_tanh_2layer_bidir_bf", 3, 2, 4, 5, L=2, bi=True, bf=True),
    _seq("rnn", "rnn_relu_2layer", 4, 3, 4, 5, L=2, nonlin="relu"),
    _seq("rnn", "rnn_relu_bidir_nohx_nobias", 3, 2, 3, 4, bi=True, hx=False, bias=False, nonlin="relu"),
    _seq("rnn", "rnn_tanh_unbatched", 4, 1, 3, 4, unbatched=True, L=2),
    _seq("rnn", "rnn_tanh_dropout_train", 3, 2, 4, 5, L=2, dropout=0.3, training=True, bi=True),
    _seq("lstm", "lstm_dropout_eval", 3, 2, 4, 5, L=2, dropout=0.4, training=False),
    _cell("lstm", "lstm_cell", 3, 4, 5),
    _cell("lstm", "lstm_cell_nohx_nobias", 3, 4, 5, bias=False, hx=False),
    _cell("lstm", "lstm_cell_unbatched", 1, 4, 3, unbatched=True),
    _cell("gru", "gru_cell", 3, 4, 5),
    _cell("gru", "gru_cell_nohx", 2, 3, 4, hx=False),
    _cell("rnn", "rnn_tanh_cell", 3, 4, 5),
    _cell("rnn", "rnn_relu_cell_unbatched", 1, 4, 5, nonlin="relu", unbatched=True),
    _cell("rnn", "rnn_relu_cell_nobias", 3, 4, 5, nonlin="relu", bias=False),
]


# ------------------------------------------------------------------ modules
def _build(cls, *args, **kw):
    return lambda dt: cls(*args, dtype=dt, **kw)


def _inputs(shape, states=()):
    def make(rng, dt):
        x = rng.standard_normal(shape).astype(dt)
        st = [(0.5 * rng.standard_normal(s)).astype(dt) for s in states]
        if len(st) == 2:
            return (x, tuple(st))
        return (x,) + tuple(st)
    return make


def _d_lstm(rng, out):
    """(d_output, d_h_n, d_c_n) for an LSTM's (output, (h_n, c_n))."""
    return random_like(rng, (out[0], out[1][0], out[1][1]))


_CPU = ("cpu",)  # the cuda backend has no recurrent kernels yet (tests/test_backends.py)

MODULE_CASES = [
    ModuleCase("LSTM_2layer_bidir_dropout_bf", _build(nn.LSTM, 4, 5, 2, batch_first=True, dropout=0.3,
                                                      bidirectional=True),
               _inputs((2, 3, 4)), _CPU, d_out=_d_lstm),
    ModuleCase("LSTM_hx", _build(nn.LSTM, 3, 4, 2), _inputs((3, 2, 3), [(2, 2, 4), (2, 2, 4)]), _CPU,
               d_out=_d_lstm),
    ModuleCase("GRU_2layer_bidir_hx", _build(nn.GRU, 4, 5, 2, bidirectional=True),
               _inputs((3, 2, 4), [(4, 2, 5)]), _CPU),
    ModuleCase("GRU_dropout_bf", _build(nn.GRU, 3, 4, 3, batch_first=True, dropout=0.5),
               _inputs((2, 4, 3)), _CPU),
    ModuleCase("RNN_relu_bidir_hx_bf", _build(nn.RNN, 3, 4, 2, "relu", batch_first=True, bidirectional=True),
               _inputs((2, 3, 3), [(4, 2, 4)]), _CPU),
    ModuleCase("RNN_tanh_nobias_dropout", _build(nn.RNN, 3, 5, 2, bias=False, dropout=0.2),
               _inputs((4, 2, 3)), _CPU),
    ModuleCase("LSTMCell_hx", _build(nn.LSTMCell, 4, 5), _inputs((3, 4), [(3, 5), (3, 5)]), _CPU),
    ModuleCase("LSTMCell", _build(nn.LSTMCell, 4, 5, bias=False), _inputs((3, 4)), _CPU),
    ModuleCase("GRUCell_hx", _build(nn.GRUCell, 4, 5), _inputs((3, 4), [(3, 5)]), _CPU),
    ModuleCase("RNNCell_relu", _build(nn.RNNCell, 4, 5, nonlinearity="relu"), _inputs((3, 4)), _CPU),
]
