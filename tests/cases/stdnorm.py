"""std_layer_norm op cases, and module cases for the transformer blocks (nn/blocks.py)."""
from fastnn import nn
from harness import ModuleCase, in_dtype
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


MODULE_CASES = [
    ModuleCase("conv1d_gpt2", in_dtype(lambda: nn.Conv1D(6, 5)), _x((2, 3, 5))),
    ModuleCase("feedforward_gelu_tanh", in_dtype(lambda: nn.FeedForward(6)), _x((2, 4, 6))),
    ModuleCase("feedforward_dropout",
               in_dtype(lambda: nn.FeedForward(5, 7, dropout=0.3)), _x((3, 5))),
    ModuleCase("feedforward_relu_dropout",
               in_dtype(lambda: nn.FeedForward(5, 7, dropout=0.3, activation="relu")), _x((3, 5))),
    ModuleCase("residual_feedforward", in_dtype(lambda: nn.Residual(nn.FeedForward(4, 8))),
               _x((2, 3, 4))),
    ModuleCase("std_layer_norm_module", in_dtype(lambda: nn.StdLayerNorm(6)), _x((4, 6))),
]
