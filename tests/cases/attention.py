import numpy as np

import fastnn.functional as F
from harness import ModuleCase
from reliability_registry import op


def _sdpa(qs, ks, vs, mask=None, causal=False, scale=None, p=0.0, dead_row=None):
    """q, k, v of the given shapes; mask: None, ("bool", shape) or ("float", shape)."""
    def make(rng, dt):
        q = rng.standard_normal(qs).astype(dt)
        k = rng.standard_normal(ks).astype(dt)
        v = rng.standard_normal(vs).astype(dt)
        m = None
        if mask is not None:
            kind, shape = mask
            if kind == "bool":
                m = rng.random(shape) > 0.3
                if dead_row is not None:
                    m[..., dead_row, :] = False   # a query that may attend to nothing
            else:
                m = (rng.standard_normal(shape) * 2).astype(dt)
                m[..., 0] = -np.inf
        return (q, k, v, m, p, causal, scale), {}
    return make


def _op(name, make, random=False, **kw):
    """The op is ``random`` (its large inputs use dropout); these cases only where p > 0."""
    return op("scaled_dot_product_attention").case(name, make, random=random, **kw)


def _mha(batch_first, H, L, S, N, E, Ev, causal=False, mask=False, p=0.0):
    """The multi-head core: heads interleaved in the features, batch- or sequence-first."""
    def make(rng, dt):
        def arr(T, D):
            shape = (N, T, H * D) if batch_first else (T, N, H * D)
            return rng.standard_normal(shape).astype(dt)
        q, k, v = arr(L, E), arr(S, E), arr(S, Ev)
        tab = idx = None
        if mask:
            am = rng.random((L, S)) < 0.2                 # True = not allowed (torch MHA)
            kp = np.zeros((N, S), bool)
            kp[0, -1] = True
            tab, idx = F.attention_mask(am, kp, N, H, L, S, dt)
        return (q, k, v, H, batch_first, tab, idx, p, causal), {}
    return make


CASES = [
    _op("sdpa_basic", _sdpa((2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3))),
    _op("sdpa_3d", _sdpa((3, 4, 5), (3, 4, 5), (3, 4, 2))),
    _op("sdpa_causal_L_lt_S", _sdpa((2, 3, 4), (2, 6, 4), (2, 6, 5), causal=True)),
    _op("sdpa_causal_L_gt_S", _sdpa((2, 7, 4), (2, 4, 4), (2, 4, 3), causal=True)),
    _op("sdpa_bool_mask_bcast", _sdpa((2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3),
                                      mask=("bool", (2, 1, 5, 6)))),
    _op("sdpa_bool_mask_keys", _sdpa((2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3),
                                     mask=("bool", (2, 1, 1, 6)))),
    _op("sdpa_float_mask_scale", _sdpa((2, 5, 4), (2, 6, 4), (2, 6, 3),
                                       mask=("float", (5, 6)), scale=0.7)),
    _op("sdpa_dead_row", _sdpa((2, 5, 4), (2, 6, 4), (2, 6, 3), mask=("bool", (5, 6)),
                               dead_row=2)),
    # batch broadcasting is a host-side convenience (the cuda shell requires equal batch dims)
    _op("sdpa_broadcast_batch", _sdpa((2, 1, 4, 3), (1, 3, 5, 3), (2, 3, 5, 2)),
        backends=("cpu",)),
    _op("sdpa_dropout", _sdpa((2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), p=0.3), torch_fn=None,
        random=True),
    _op("sdpa_dropout_mask", _sdpa((3, 6, 4), (3, 6, 4), (3, 6, 2),
                                          mask=("float", (3, 1, 6)), p=0.5), torch_fn=None, random=True),
    op("multi_head_attention").case("mha_core_batch_first", _mha(True, 2, 4, 5, 2, 3, 2)),
    op("multi_head_attention").case("mha_core_seq_first_mask_causal",
                                    _mha(False, 3, 5, 5, 2, 2, 3, causal=True, mask=True)),
    op("multi_head_attention").case("mha_core_seq_first_dropout",
                                    _mha(False, 2, 4, 6, 2, 3, 3, mask=True, p=0.25), random=True),
]


# ---------------------------------------------------------------- modules (cpu vs reference)
# The attention layers split / merge parameter gradients on the host (np.concatenate),
# so they run on the cpu backend here; the cuda attention kernel is tested as an op.
def _mha_module(batch_first, p, kdim=None):
    def build(dt):
        import fastnn.nn as nn
        return nn.MultiheadAttention(6, 2, dropout=p, kdim=kdim, vdim=kdim,
                                     batch_first=batch_first).to(dt)
    return build


def _mha_inputs(batch_first, kd=6):
    def make(rng, dt):
        sh = (lambda T, D: (2, T, D)) if batch_first else (lambda T, D: (T, 2, D))
        return [rng.standard_normal(sh(4, 6)).astype(dt), rng.standard_normal(sh(5, kd)).astype(dt),
                rng.standard_normal(sh(5, kd)).astype(dt)]
    return make


def _first(rng, out):
    return rng.standard_normal(out[0].shape).astype(out[0].dtype)


def _build(name, *args, **kw):
    def build(dt):
        import fastnn.nn as nn
        return getattr(nn, name)(*args, **kw).to(dt)
    return build


def _x(*shapes):
    def make(rng, dt):
        return [rng.standard_normal(s).astype(dt) for s in shapes]
    return make


MODULE_CASES = [
    ModuleCase("mha_seq_first", _mha_module(False, 0.0), _mha_inputs(False), backends=("cpu",),
               d_out=_first),
    ModuleCase("mha_batch_first_dropout_kdim", _mha_module(True, 0.3, kdim=3),
               _mha_inputs(True, 3), backends=("cpu",), d_out=_first),
    ModuleCase("causal_self_attention", _build("CausalSelfAttention", 6, 2, 0.2),
               _x((2, 5, 6)), backends=("cpu",)),
    ModuleCase("transformer_block", _build("TransformerBlock", 6, 3, 0.1), _x((2, 4, 6)),
               backends=("cpu",)),
    ModuleCase("encoder_layer_post_norm", _build("TransformerEncoderLayer", 6, 2, 8, 0.1),
               _x((4, 2, 6)), backends=("cpu",)),
    ModuleCase("encoder_layer_pre_norm_gelu",
               _build("TransformerEncoderLayer", 6, 2, 8, 0.0, "gelu", batch_first=True,
                      norm_first=True), _x((2, 4, 6)), backends=("cpu",)),
    ModuleCase("decoder_layer_post_norm", _build("TransformerDecoderLayer", 6, 2, 8, 0.1),
               _x((4, 2, 6), (5, 2, 6)), backends=("cpu",)),
    ModuleCase("decoder_layer_pre_norm",
               _build("TransformerDecoderLayer", 6, 3, 8, 0.0, "gelu", batch_first=True,
                      norm_first=True), _x((2, 4, 6), (2, 3, 6)), backends=("cpu",)),
]


def _stack(kind, n, norm, **kw):
    def build(dt):
        import fastnn.nn as nn
        layer = getattr(nn, f"Transformer{kind}Layer")(6, 2, 8, **kw)
        return getattr(nn, f"Transformer{kind}")(layer, n, norm=nn.LayerNorm(6) if norm else None).to(dt)
    return build


MODULE_CASES += [
    ModuleCase("encoder_stack_norm", _stack("Encoder", 2, True, dropout=0.1), _x((4, 2, 6)),
               backends=("cpu",)),
    ModuleCase("decoder_stack", _stack("Decoder", 2, False, dropout=0.0, batch_first=True),
               _x((2, 4, 6), (2, 3, 6)), backends=("cpu",)),
]
