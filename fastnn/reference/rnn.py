"""Recurrent family, reference: multi-layer, (bi)directional RNN (tanh / relu), GRU and
LSTM, forward and backpropagation through time, in float64.

One op per network kind, covering the whole stack (layers, directions, dropout between
layers, batch_first), so that a module never has to build arrays itself:

    rnn(x, h0, weights, nonlinearity, num_layers, bidirectional, batch_first, dropout,
        train, seed, offset) -> ((out, h_n), saved)
    gru(x, h0, weights, num_layers, ...)              -> ((out, h_n), saved)
    lstm(x, h0, c0, weights, num_layers, ...)         -> ((out, h_n, c_n), saved)
    rnn_backward(d_out, d_h_n, saved, weight_grad=True)        -> (dx, dh0, d_weights)
    gru_backward(d_out, d_h_n, saved, weight_grad=True)        -> (dx, dh0, d_weights)
    lstm_backward(d_out, d_h_n, d_c_n, saved, weight_grad=True) -> (dx, dh0, dc0, d_weights)

x is (T, B, I), or (B, T, I) when batch_first; h0 / c0 are (L*D, B, H) or None (zeros;
then dh0 / dc0 are None).  ``weights`` is torch's flat list: for each layer, for each
direction, (w_ih, w_hh[, b_ih, b_hh]); w_ih (G*H, I_layer), w_hh (G*H, H), gates in
torch's order (LSTM i, f, g, o; GRU r, z, n).  d_weights is the same list of gradients.
d_out / d_h_n / d_c_n may be None (zero).  ``weight_grad`` False (frozen weights): d_weights
is all None.

Dropout (train and dropout > 0, between layers, not after the last) keeps an element
when its Philox uniform u >= p and scales it by 1/(1-p).  The uniforms of one call
(seed, offset) are numbered over the time-major (T, B, D*H) output of each layer
boundary k = 0..L-2, starting at k * N4 (N4 = T*B*D*H rounded up to a multiple of 4).
"""
import numpy as np

from .._random import philox_uniform
from ._util import cast, f64

OPS = ("rnn", "rnn_backward", "gru", "gru_backward", "lstm", "lstm_backward")

_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "gru": 3, "lstm": 4}


def _sigmoid(v):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-v))


def dropout_masks(n_boundaries, shape, p, seed, offset):
    """The (scaled) keep masks of the layer boundaries, float64, (n_boundaries, *shape)."""
    n = int(np.prod(shape))
    n4 = (n + 3) // 4 * 4
    u = philox_uniform(n_boundaries * n4, seed, offset).reshape(n_boundaries, n4)[:, :n]
    return (u >= p).reshape((n_boundaries,) + tuple(shape)) * (1.0 / (1.0 - p))


def _forward(mode, x, h0, c0, weights, L, bidirectional, batch_first, p, train, seed, offset):
    G = _GATES[mode]
    D = 2 if bidirectional else 1
    nw = len(weights) // (L * D)
    H = weights[1].shape[1]
    xs = f64(x)
    if batch_first:
        xs = xs.transpose(1, 0, 2)
    T, B = xs.shape[0], xs.shape[1]
    use_drop = bool(train) and p > 0 and L > 1
    masks = dropout_masks(L - 1, (T, B, D * H), p, seed, offset) if use_drop else None
    h_n = np.zeros((L * D, B, H))
    c_n = np.zeros((L * D, B, H))
    layers = []
    inp = xs
    out = None
    for k in range(L):
        out = np.empty((T, B, D * H))
        dirs = []
        for d in range(D):
            w = weights[(k * D + d) * nw:(k * D + d + 1) * nw]
            w_ih, w_hh = f64(w[0]), f64(w[1])
            b_ih = f64(w[2]) if nw == 4 else np.zeros(G * H)
            b_hh = f64(w[3]) if nw == 4 else np.zeros(G * H)
            hp = f64(h0[k * D + d]) if h0 is not None else np.zeros((B, H))
            cp = f64(c0[k * D + d]) if c0 is not None else np.zeros((B, H))
            acts = np.zeros((T, B, G * H))
            aux = np.zeros((T, B, H))      # LSTM: c_t; GRU: W_hn h_{t-1} + b_hn
            for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
                xp = inp[t] @ w_ih.T + b_ih
                hh = hp @ w_hh.T + b_hh
                if mode == "rnn_tanh":
                    h = np.tanh(xp + hh)
                elif mode == "rnn_relu":
                    h = np.maximum(xp + hh, 0.0)
                elif mode == "gru":
                    r = _sigmoid(xp[:, :H] + hh[:, :H])
                    z = _sigmoid(xp[:, H:2 * H] + hh[:, H:2 * H])
                    hn = hh[:, 2 * H:]
                    n = np.tanh(xp[:, 2 * H:] + r * hn)
                    h = (1.0 - z) * n + z * hp
                    acts[t] = np.concatenate([r, z, n], axis=1)
                    aux[t] = hn
                else:
                    a = xp + hh
                    i = _sigmoid(a[:, :H])
                    f = _sigmoid(a[:, H:2 * H])
                    g = np.tanh(a[:, 2 * H:3 * H])
                    o = _sigmoid(a[:, 3 * H:])
                    c = f * cp + i * g
                    h = o * np.tanh(c)
                    acts[t] = np.concatenate([i, f, g, o], axis=1)
                    aux[t] = c
                    cp = c
                out[t, :, d * H:(d + 1) * H] = h
                hp = h
            h_n[k * D + d] = hp
            c_n[k * D + d] = cp
            dirs.append((acts, aux))
        layers.append((inp, out, dirs))
        if k < L - 1:
            inp = out * masks[k] if use_drop else out
    y = out.transpose(1, 0, 2) if batch_first else out
    saved = (mode, x, h0, c0, weights, L, D, batch_first, masks, layers)
    return cast(np.ascontiguousarray(y), x), cast(h_n, x), cast(c_n, x), saved


def _backward(d_out, d_h_n, d_c_n, saved, weight_grad=True):
    mode, x, h0, c0, weights, L, D, batch_first, masks, layers = saved
    G = _GATES[mode]
    nw = len(weights) // (L * D)
    H = weights[1].shape[1]
    T, B = layers[0][0].shape[0], layers[0][0].shape[1]
    if d_out is None:
        dy = np.zeros((T, B, D * H))
    else:
        dy = f64(d_out)
        if batch_first:
            dy = dy.transpose(1, 0, 2)
    dweights = [None] * len(weights)
    dh0 = np.zeros((L * D, B, H))
    dc0 = np.zeros((L * D, B, H))
    dinp = None
    for k in range(L - 1, -1, -1):
        inp, out, dirs = layers[k]
        dinp = np.zeros(inp.shape)
        for d in range(D):
            base = (k * D + d) * nw
            w_ih, w_hh = f64(weights[base]), f64(weights[base + 1])
            acts, aux = dirs[d]
            dh = f64(d_h_n[k * D + d]) if d_h_n is not None else np.zeros((B, H))
            dc = f64(d_c_n[k * D + d]) if d_c_n is not None else np.zeros((B, H))
            dw_ih = np.zeros(w_ih.shape)
            dw_hh = np.zeros(w_hh.shape)
            db_ih = np.zeros(G * H)
            db_hh = np.zeros(G * H)
            for t in (range(T - 1, -1, -1) if d == 0 else range(T)):
                tp = t - 1 if d == 0 else t + 1
                if 0 <= tp < T:
                    hp = out[tp, :, d * H:(d + 1) * H]
                    cp = aux[tp]
                else:
                    hp = f64(h0[k * D + d]) if h0 is not None else np.zeros((B, H))
                    cp = f64(c0[k * D + d]) if c0 is not None else np.zeros((B, H))
                dht = dy[t, :, d * H:(d + 1) * H] + dh
                direct = 0.0
                if mode in ("rnn_tanh", "rnn_relu"):
                    h = out[t, :, d * H:(d + 1) * H]
                    gx = dht * (1.0 - h * h) if mode == "rnn_tanh" else dht * (h > 0)
                    gh = gx
                elif mode == "gru":
                    r, z, n = acts[t, :, :H], acts[t, :, H:2 * H], acts[t, :, 2 * H:]
                    hn = aux[t]
                    dan = dht * (1.0 - z) * (1.0 - n * n)
                    dar = dan * hn * r * (1.0 - r)
                    daz = dht * (hp - n) * z * (1.0 - z)
                    gx = np.concatenate([dar, daz, dan], axis=1)
                    gh = np.concatenate([dar, daz, dan * r], axis=1)
                    direct = dht * z
                else:
                    i, f = acts[t, :, :H], acts[t, :, H:2 * H]
                    g, o = acts[t, :, 2 * H:3 * H], acts[t, :, 3 * H:]
                    tc = np.tanh(aux[t])
                    dct = dc + dht * o * (1.0 - tc * tc)
                    gx = np.concatenate([dct * g * i * (1.0 - i), dct * cp * f * (1.0 - f),
                                         dct * i * (1.0 - g * g), dht * tc * o * (1.0 - o)], axis=1)
                    gh = gx
                    dc = dct * f
                dinp[t] += gx @ w_ih
                dw_ih += gx.T @ inp[t]
                db_ih += gx.sum(axis=0)
                dw_hh += gh.T @ hp
                db_hh += gh.sum(axis=0)
                dh = gh @ w_hh + direct
            dh0[k * D + d] = dh
            dc0[k * D + d] = dc
            if not weight_grad:      # frozen: the oracle made them anyway, and drops them
                continue
            dweights[base] = cast(dw_ih, x)
            dweights[base + 1] = cast(dw_hh, x)
            if nw == 4:
                dweights[base + 2] = cast(db_ih, x)
                dweights[base + 3] = cast(db_hh, x)
        if k > 0:
            dy = dinp * masks[k - 1] if masks is not None else dinp
    dx = dinp.transpose(1, 0, 2) if batch_first else dinp
    dx = cast(np.ascontiguousarray(dx), x)
    return (dx, cast(dh0, x) if h0 is not None else None,
            cast(dc0, x) if c0 is not None else None, tuple(dweights))


def stack_ops(forward, backward):
    """The six public ops over a backend's whole-stack pair (the cuda backend builds its
    ops here too): ``forward(mode, x, h0, c0, weights, num_layers, bidirectional,
    batch_first, dropout, train, seed, offset) -> (y, h_n, c_n, saved)`` with mode
    "rnn_tanh" / "rnn_relu" / "gru" / "lstm", and ``backward(d_out, d_h_n, d_c_n, saved,
    weight_grad) -> (dx, dh0, dc0, d_weights)`` (``weight_grad`` False: the weights are
    frozen, d_weights is a tuple of None and their products are not made).  The ops report
    the pair's module as their own."""

    def rnn(x, h0, weights, nonlinearity, num_layers, bidirectional, batch_first, dropout,
            train, seed, offset):
        y, h_n, _, saved = forward("rnn_" + nonlinearity, x, h0, None, weights, num_layers,
                                   bidirectional, batch_first, dropout, train, seed, offset)
        return (y, h_n), saved

    def rnn_backward(d_out, d_h_n, saved, weight_grad=True):
        dx, dh0, _, dw = backward(d_out, d_h_n, None, saved, weight_grad)
        return dx, dh0, dw

    def gru(x, h0, weights, num_layers, bidirectional, batch_first, dropout, train, seed,
            offset):
        y, h_n, _, saved = forward("gru", x, h0, None, weights, num_layers, bidirectional,
                                   batch_first, dropout, train, seed, offset)
        return (y, h_n), saved

    def gru_backward(d_out, d_h_n, saved, weight_grad=True):
        return rnn_backward(d_out, d_h_n, saved, weight_grad)

    def lstm(x, h0, c0, weights, num_layers, bidirectional, batch_first, dropout, train, seed,
             offset):
        y, h_n, c_n, saved = forward("lstm", x, h0, c0, weights, num_layers, bidirectional,
                                     batch_first, dropout, train, seed, offset)
        return (y, h_n, c_n), saved

    def lstm_backward(d_out, d_h_n, d_c_n, saved, weight_grad=True):
        return backward(d_out, d_h_n, d_c_n, saved, weight_grad)

    ops = (rnn, rnn_backward, gru, gru_backward, lstm, lstm_backward)
    for fn in ops:
        fn.__module__ = forward.__module__
        fn.__qualname__ = fn.__name__
    return ops


rnn, rnn_backward, gru, gru_backward, lstm, lstm_backward = stack_ops(_forward, _backward)
