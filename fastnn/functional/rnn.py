"""Recurrent family: whole-sequence RNN (tanh / relu), GRU and LSTM stacks, and their cells.

Sequence ops take torch's flat weight list (per layer, per direction:
``w_ih, w_hh[, b_ih, b_hh]``, as ``torch.lstm`` / ``nn.LSTM._flat_weights``) and run
every layer and direction in one backend call:

    (out, h_n), ctx = rnn_fwd(x, hx, weights, nonlinearity, num_layers, dropout, training,
                              bidirectional, batch_first)
    d_input, d_hx, d_weights = rnn_bwd(ctx, d_output, d_h_n=None)
    (out, h_n, c_n), ctx = lstm_fwd(x, (h0, c0) or None, weights, ...)
    d_input, (dh0, dc0) or None, d_weights = lstm_bwd(ctx, d_output, d_h_n=None, d_c_n=None)

x is (T, B, input_size), (B, T, input_size) with batch_first, or (T, input_size)
unbatched; hx is (num_layers * num_directions, B, hidden_size) (2-D when unbatched) or
None (zeros, and then d_hx is None).  The cells (``lstm_cell_fwd(x, hx, w_ih, w_hh,
b_ih, b_hh)`` ...) are one time step of a one-layer network and run on the same kernels.
"""
from .._backend import dispatch
from .._random import next_offset
from .._validate import float_array, grad_like, int_arg, probability, same_dtype

__all__ = ["rnn", "rnn_fwd", "rnn_bwd", "gru", "gru_fwd", "gru_bwd", "lstm", "lstm_fwd", "lstm_bwd",
           "rnn_cell", "rnn_cell_fwd", "rnn_cell_bwd", "gru_cell", "gru_cell_fwd", "gru_cell_bwd",
           "lstm_cell", "lstm_cell_fwd", "lstm_cell_bwd"]

_GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def check_nonlinearity(nonlinearity):
    if not isinstance(nonlinearity, str):
        raise TypeError(f"nonlinearity must be 'tanh' or 'relu', got {type(nonlinearity).__name__}")
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"unknown nonlinearity {nonlinearity!r}; expected 'tanh' or 'relu'")
    return nonlinearity


def check_dropout(p):
    """The inter-layer dropout: [0, 1) (torch allows 1, but the kernels scale by 1 / (1 - p))."""
    return probability(p, "dropout", allow_one=False)


def _reshape(a, shape):
    return None if a is None else a.reshape(shape)


def _state(h, name, shape, x, unbatched):
    """Validate one initial state (h_0 or c_0) and return it batched (3-D)."""
    h = float_array(h, name)
    same_dtype(x, h, name)
    want = shape[::2] if unbatched else shape
    if tuple(h.shape) != tuple(want):
        raise ValueError(f"{name} must have shape (num_layers * num_directions, batch, hidden_size) = "
                         f"{tuple(want)} for this input, got {tuple(h.shape)}")
    return _reshape(h, shape) if unbatched else h


def _check_seq(kind, x, hx, weights, num_layers, dropout, bidirectional, batch_first):
    G = _GATES[kind]
    x = float_array(x, "input")
    L = int_arg(num_layers, "num_layers", 1)
    D = 2 if bidirectional else 1
    p = check_dropout(dropout)
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise TypeError(f"weights must be a list of arrays (torch's flat weight order), "
                        f"got {type(weights).__name__}")
    weights = list(weights)
    if len(weights) not in (2 * L * D, 4 * L * D):
        raise ValueError(f"weights must hold {2 * L * D} arrays (w_ih, w_hh per layer and direction) "
                         f"or {4 * L * D} (with b_ih, b_hh) for num_layers={L}, "
                         f"bidirectional={bool(bidirectional)}; got {len(weights)}")
    nw = len(weights) // (L * D)
    weights = [float_array(w, f"weights[{i}]") for i, w in enumerate(weights)]
    for i, w in enumerate(weights):
        same_dtype(x, w, f"weights[{i}]")
    w_hh = weights[1]
    if w_hh.ndim != 2 or w_hh.shape[1] < 1 or w_hh.shape[0] != G * w_hh.shape[1]:
        raise ValueError(f"weights[1] (weight_hh_l0) must have shape ({G} * hidden_size, hidden_size), "
                         f"got {tuple(w_hh.shape)}")
    H = w_hh.shape[1]
    if weights[0].ndim != 2:
        raise ValueError(f"weights[0] (weight_ih_l0) must be 2-D ({G} * hidden_size, input_size), "
                         f"got shape {tuple(weights[0].shape)}")
    I = weights[0].shape[1]
    for k in range(L):
        for d in range(D):
            base = (k * D + d) * nw
            sfx = f"l{k}" + ("_reverse" if d else "")
            want = [((G * H, I if k == 0 else D * H), "weight_ih_" + sfx), ((G * H, H), "weight_hh_" + sfx)]
            if nw == 4:
                want += [((G * H,), "bias_ih_" + sfx), ((G * H,), "bias_hh_" + sfx)]
            for j, (shape, name) in enumerate(want):
                if tuple(weights[base + j].shape) != shape:
                    raise ValueError(f"weights[{base + j}] ({name}) must have shape {shape}, "
                                     f"got {tuple(weights[base + j].shape)}")
    if x.ndim not in (2, 3):
        raise ValueError(f"input must be 3-D ({'batch, seq_len' if batch_first else 'seq_len, batch'}, "
                         f"input_size) or 2-D (seq_len, input_size) unbatched, got shape {tuple(x.shape)}")
    if tuple(x.shape)[-1] != I:
        raise ValueError(f"input.shape[-1] must equal input_size = {I}, got input of shape {tuple(x.shape)}")
    unbatched = x.ndim == 2
    if unbatched:
        T, B = x.shape[0], 1
        x = x.reshape(T, 1, I)
        bf = False
    else:
        bf = bool(batch_first)
        T, B = (x.shape[1], x.shape[0]) if bf else (x.shape[0], x.shape[1])
    if T == 0:
        raise ValueError(f"the sequence length must be > 0, got input of shape "
                         f"{(T, I) if unbatched else tuple(x.shape)}")
    states = ()
    if hx is not None:
        sshape = (L * D, B, H)
        if kind == "lstm":
            if not isinstance(hx, (tuple, list)):
                raise TypeError(f"LSTM hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
            if len(hx) != 2:
                raise ValueError(f"LSTM hx must be a tuple (h_0, c_0) of two arrays, got {len(hx)} items")
            states = (_state(hx[0], "h_0", sshape, x, unbatched), _state(hx[1], "c_0", sshape, x, unbatched))
        else:
            if isinstance(hx, (tuple, list)):
                raise TypeError(f"{kind.upper()} hx must be one array h_0 of shape {sshape}, got a "
                                f"{type(hx).__name__} (only LSTM takes (h_0, c_0))")
            states = (_state(hx, "h_0", sshape, x, unbatched),)
    return x, states, tuple(weights), L, D, H, p, bf, unbatched


def _seq_fwd(kind, x, hx, weights, num_layers, dropout, training, bidirectional, batch_first,
             nonlinearity="tanh"):
    x, states, weights, L, D, H, p, bf, unbatched = _check_seq(
        kind, x, hx, weights, num_layers, dropout, bidirectional, batch_first)
    train = bool(training)
    seed, offset = next_offset() if (train and p > 0 and L > 1) else (0, 0)
    be = dispatch(x, *states, *weights)
    common = (L, D == 2, bf, p, train, seed, offset)
    if kind == "lstm":
        h0, c0 = states if states else (None, None)
        (y, h_n, c_n), saved = be.lstm(x, h0, c0, weights, *common)
        outs = (y, h_n, c_n)
    else:
        h0 = states[0] if states else None
        if kind == "rnn":
            (y, h_n), saved = be.rnn(x, h0, weights, nonlinearity, *common)
        else:
            (y, h_n), saved = be.gru(x, h0, weights, *common)
        outs = (y, h_n)
    if unbatched:
        outs = (_reshape(outs[0], (outs[0].shape[0], outs[0].shape[2])),) + \
            tuple(_reshape(o, (o.shape[0], o.shape[2])) for o in outs[1:])
    ctx = (be, saved, kind, tuple(o.shape for o in outs), y.dtype, unbatched, bool(states),
           tuple(states[0].shape) if states else None)
    return outs, ctx


def _seq_bwd(ctx, grads, weight_grad):
    be, saved, kind, shapes, dtype, unbatched, has_hx, hshape = ctx
    weight_grad = bool(weight_grad)
    names = ("grad_output", "grad_h_n", "grad_c_n")
    gs = []
    for g, shape, name in zip(grads, shapes, names):
        if g is not None:
            g = grad_like(g, shape, dtype, name)
            if unbatched:
                g = g.reshape(shape[0], 1, shape[1])
        gs.append(g)
    if kind == "lstm":
        dx, dh0, dc0, dw = be.lstm_backward(gs[0], gs[1], gs[2], saved, weight_grad)
    else:
        dx, dh0, dw = (be.rnn_backward if kind == "rnn" else be.gru_backward)(
            gs[0], gs[1], saved, weight_grad)
        dc0 = None
    if unbatched:
        dx = dx.reshape(dx.shape[0], dx.shape[2])
        dh0 = _reshape(dh0, (dh0.shape[0], dh0.shape[2])) if dh0 is not None else None
        dc0 = _reshape(dc0, (dc0.shape[0], dc0.shape[2])) if dc0 is not None else None
    if not has_hx:
        dhx = None
    elif kind == "lstm":
        dhx = (dh0, dc0)
    else:
        dhx = dh0
    return dx, dhx, tuple(dw)


# ------------------------------------------------------------------ sequences
def rnn_fwd(x, hx, weights, nonlinearity="tanh", num_layers=1, dropout=0.0, training=False,
            bidirectional=False, batch_first=False):
    """Elman RNN, h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) -> ((out, h_n), ctx)."""
    nonlinearity = check_nonlinearity(nonlinearity)
    return _seq_fwd("rnn", x, hx, weights, num_layers, dropout, training, bidirectional,
                    batch_first, nonlinearity)


def rnn_bwd(ctx, d_output, d_h_n=None, *, weight_grad=True):
    """-> (d_input, d_h_0 or None, d_weights).  ``weight_grad`` False (frozen weights):
    d_weights is all None and the weight-gradient products are not made."""
    return _seq_bwd(ctx, (d_output, d_h_n), weight_grad)


def rnn(x, hx, weights, nonlinearity="tanh", num_layers=1, dropout=0.0, training=False,
        bidirectional=False, batch_first=False):
    """(output, h_n) of a stacked Elman RNN (torch.rnn_tanh / torch.rnn_relu)."""
    return rnn_fwd(x, hx, weights, nonlinearity, num_layers, dropout, training, bidirectional,
                   batch_first)[0]


def gru_fwd(x, hx, weights, num_layers=1, dropout=0.0, training=False, bidirectional=False,
            batch_first=False):
    """GRU (gates r, z, n; r multiplies W_hn h + b_hn) -> ((out, h_n), ctx)."""
    return _seq_fwd("gru", x, hx, weights, num_layers, dropout, training, bidirectional, batch_first)


def gru_bwd(ctx, d_output, d_h_n=None, *, weight_grad=True):
    """-> (d_input, d_h_0 or None, d_weights); ``weight_grad`` as rnn_bwd's."""
    return _seq_bwd(ctx, (d_output, d_h_n), weight_grad)


def gru(x, hx, weights, num_layers=1, dropout=0.0, training=False, bidirectional=False,
        batch_first=False):
    """(output, h_n) of a stacked GRU (torch.gru)."""
    return gru_fwd(x, hx, weights, num_layers, dropout, training, bidirectional, batch_first)[0]


def lstm_fwd(x, hx, weights, num_layers=1, dropout=0.0, training=False, bidirectional=False,
             batch_first=False):
    """LSTM (gates i, f, g, o) -> ((out, h_n, c_n), ctx); hx = (h_0, c_0) or None."""
    return _seq_fwd("lstm", x, hx, weights, num_layers, dropout, training, bidirectional, batch_first)


def lstm_bwd(ctx, d_output, d_h_n=None, d_c_n=None, *, weight_grad=True):
    """-> (d_input, (d_h_0, d_c_0) or None, d_weights); ``weight_grad`` as rnn_bwd's."""
    return _seq_bwd(ctx, (d_output, d_h_n, d_c_n), weight_grad)


def lstm(x, hx, weights, num_layers=1, dropout=0.0, training=False, bidirectional=False,
         batch_first=False):
    """(output, h_n, c_n) of a stacked LSTM (torch.lstm)."""
    return lstm_fwd(x, hx, weights, num_layers, dropout, training, bidirectional, batch_first)[0]


# ------------------------------------------------------------------ cells
def _check_cell(kind, x, hx, w_ih, w_hh, b_ih, b_hh):
    G = _GATES[kind]
    x = float_array(x, "input")
    w_ih = float_array(w_ih, "w_ih")
    w_hh = float_array(w_hh, "w_hh")
    same_dtype(x, w_ih, "w_ih")
    same_dtype(x, w_hh, "w_hh")
    if w_hh.ndim != 2 or w_hh.shape[1] < 1 or w_hh.shape[0] != G * w_hh.shape[1]:
        raise ValueError(f"w_hh must have shape ({G} * hidden_size, hidden_size), got {tuple(w_hh.shape)}")
    H = w_hh.shape[1]
    if w_ih.ndim != 2 or w_ih.shape[0] != G * H:
        raise ValueError(f"w_ih must have shape ({G * H}, input_size), got {tuple(w_ih.shape)}")
    I = w_ih.shape[1]
    if (b_ih is None) != (b_hh is None):
        raise ValueError("b_ih and b_hh must both be given or both be None")
    weights = [w_ih, w_hh]
    if b_ih is not None:
        for b, name in ((b_ih, "b_ih"), (b_hh, "b_hh")):
            b = float_array(b, name)
            same_dtype(x, b, name)
            if tuple(b.shape) != (G * H,):
                raise ValueError(f"{name} must have shape ({G * H},), got {tuple(b.shape)}")
            weights.append(b)
    if x.ndim not in (1, 2) or tuple(x.shape)[-1] != I:
        raise ValueError(f"input must have shape (batch, input_size) or (input_size,) with "
                         f"input_size = {I}, got {tuple(x.shape)}")
    unbatched = x.ndim == 1
    B = 1 if unbatched else x.shape[0]
    x3 = x.reshape(1, B, I)
    states = ()
    if hx is not None:
        want = (H,) if unbatched else (B, H)

        def one(h, name):
            h = float_array(h, name)
            same_dtype(x, h, name)
            if tuple(h.shape) != want:
                raise ValueError(f"{name} must have shape {want} for an input of shape "
                                 f"{tuple(x.shape)}, got {tuple(h.shape)}")
            return h.reshape(1, B, H)

        if kind == "lstm":
            if not isinstance(hx, (tuple, list)):
                raise TypeError(f"LSTMCell hx must be a tuple (h, c), got {type(hx).__name__}")
            if len(hx) != 2:
                raise ValueError(f"LSTMCell hx must be a tuple (h, c) of two arrays, got {len(hx)} items")
            states = (one(hx[0], "h"), one(hx[1], "c"))
        else:
            if isinstance(hx, (tuple, list)):
                raise TypeError(f"{kind.upper()} cell hx must be one array of shape {want}, "
                                f"got a {type(hx).__name__}")
            states = (one(hx, "hx"),)
    return x3, states, tuple(weights), B, H, unbatched


def _cell_fwd(kind, x, hx, w_ih, w_hh, b_ih, b_hh, nonlinearity="tanh"):
    x3, states, weights, B, H, unbatched = _check_cell(kind, x, hx, w_ih, w_hh, b_ih, b_hh)
    be = dispatch(x3, *states, *weights)
    common = (1, False, False, 0.0, False, 0, 0)
    shape = (H,) if unbatched else (B, H)
    if kind == "lstm":
        h0, c0 = states if states else (None, None)
        (_, h_n, c_n), saved = be.lstm(x3, h0, c0, weights, *common)
        out = (h_n.reshape(shape), c_n.reshape(shape))
    else:
        h0 = states[0] if states else None
        if kind == "rnn":
            (_, h_n), saved = be.rnn(x3, h0, weights, nonlinearity, *common)
        else:
            (_, h_n), saved = be.gru(x3, h0, weights, *common)
        out = h_n.reshape(shape)
    ctx = (be, saved, kind, shape, h_n.dtype, bool(states), len(weights), x3.shape)
    return out, ctx


def _cell_bwd(ctx, d_h, d_c, weight_grad):
    be, saved, kind, shape, dtype, has_hx, nw, xshape = ctx
    weight_grad = bool(weight_grad)
    B, H = xshape[1], shape[-1]
    gs = []
    for g, name in ((d_h, "grad_h"), (d_c, "grad_c")):
        if g is not None:
            g = grad_like(g, shape, dtype, name).reshape(1, B, H)
        gs.append(g)
    if kind == "lstm":
        dx, dh0, dc0, dw = be.lstm_backward(None, gs[0], gs[1], saved, weight_grad)
    else:
        dx, dh0, dw = (be.rnn_backward if kind == "rnn" else be.gru_backward)(
            None, gs[0], saved, weight_grad)
        dc0 = None
    xs = (xshape[2],) if len(shape) == 1 else (B, xshape[2])
    dx = dx.reshape(xs)
    if not has_hx:
        dhx = None
    elif kind == "lstm":
        dhx = (dh0.reshape(shape), dc0.reshape(shape))
    else:
        dhx = dh0.reshape(shape)
    dw = tuple(dw) + (None, None) * (nw == 2)
    return (dx, dhx) + dw


def rnn_cell_fwd(x, hx, w_ih, w_hh, b_ih=None, b_hh=None, nonlinearity="tanh"):
    """One Elman RNN step h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh) -> (h', ctx)."""
    nonlinearity = check_nonlinearity(nonlinearity)
    return _cell_fwd("rnn", x, hx, w_ih, w_hh, b_ih, b_hh, nonlinearity)


def rnn_cell_bwd(ctx, d_h, *, weight_grad=True):
    """-> (d_input, d_hx or None, d_w_ih, d_w_hh, d_b_ih or None, d_b_hh or None).
    ``weight_grad`` False (frozen weights): the four weight gradients are None, not made."""
    return _cell_bwd(ctx, d_h, None, weight_grad)


def rnn_cell(x, hx, w_ih, w_hh, b_ih=None, b_hh=None, nonlinearity="tanh"):
    return rnn_cell_fwd(x, hx, w_ih, w_hh, b_ih, b_hh, nonlinearity)[0]


def gru_cell_fwd(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step -> (h', ctx)."""
    return _cell_fwd("gru", x, hx, w_ih, w_hh, b_ih, b_hh)


def gru_cell_bwd(ctx, d_h, *, weight_grad=True):
    """-> (d_input, d_hx or None, d_w_ih, d_w_hh, d_b_ih or None, d_b_hh or None);
    ``weight_grad`` as rnn_cell_bwd's."""
    return _cell_bwd(ctx, d_h, None, weight_grad)


def gru_cell(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return gru_cell_fwd(x, hx, w_ih, w_hh, b_ih, b_hh)[0]


def lstm_cell_fwd(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step; hx = (h, c) or None -> ((h', c'), ctx)."""
    return _cell_fwd("lstm", x, hx, w_ih, w_hh, b_ih, b_hh)


def lstm_cell_bwd(ctx, d_h, d_c=None, *, weight_grad=True):
    """-> (d_input, (d_h, d_c) or None, d_w_ih, d_w_hh, d_b_ih or None, d_b_hh or None);
    ``weight_grad`` as rnn_cell_bwd's."""
    return _cell_bwd(ctx, d_h, d_c, weight_grad)


def lstm_cell(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    return lstm_cell_fwd(x, hx, w_ih, w_hh, b_ih, b_hh)[0]
