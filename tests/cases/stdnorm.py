"""std_layer_norm op cases, and module cases for the transformer blocks (nn/blocks.py)."""
import numpy as np

from fastnn import nn
from harness import ModuleCase
from reliability_registry import op


def _sln(shape, affine=True, bias=True, eps=1e-6, const_row=False):
    def make(rng, dt):
        D = shape[-1]
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
        if const_row:
            x.reshape(-1, D)[0] = 1.25
        a = (1 + 0.3 * rng.standard_normal(D)).astype(dt) if affine else None
        b = rng.standard_normal(D).astype(dt) if bias else None
        return (x, a, b, eps), {}
    return make


sln = op("std_layer_norm")
CASES = [
    sln.case("std_layer_norm_2d", _sln((5, 9))),
    sln.case("std_layer_norm_3d_eps", _sln((2, 3, 16), eps=1e-2)),
    sln.case("std_layer_norm_no_affine", _sln((4, 7), affine=False, bias=False)),
    sln.case("std_layer_norm_bias_only", _sln((3, 6), affine=False)),
    # a constant row: std 0, gradient r * (g - mean(g)) (torch autograd gives NaN there)
    sln.case("std_layer_norm_const_row", _sln((3, 5), const_row=True), torch_fn=None,
             gradcheck=False),
]


def _x(shape):
    return lambda rng, dt: (rng.standard_normal(shape).astype(dt),)


def _seeded(ctor):
    def build(dt):
        m = ctor()
        return m.double() if np.dtype(dt) == np.float64 else m
    return build


MODULE_CASES = [
    ModuleCase("conv1d_gpt2", _seeded(lambda: nn.Conv1D(6, 5)), _x((2, 3, 5))),
    ModuleCase("feedforward_gelu_tanh", _seeded(lambda: nn.FeedForward(6)), _x((2, 4, 6))),
    ModuleCase("feedforward_dropout",
               _seeded(lambda: nn.FeedForward(5, 7, dropout=0.3)), _x((3, 5))),
    ModuleCase("feedforward_relu_dropout",
               _seeded(lambda: nn.FeedForward(5, 7, dropout=0.3, activation="relu")), _x((3, 5))),
    ModuleCase("residual_feedforward", _seeded(lambda: nn.Residual(nn.FeedForward(4, 8))),
               _x((2, 3, 4))),
    ModuleCase("std_layer_norm_module", _seeded(lambda: nn.StdLayerNorm(6)), _x((4, 6))),
]
