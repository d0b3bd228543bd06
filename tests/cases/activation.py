import numpy as np

import fastnn.nn as nn
from harness import ModuleCase
from reliability_registry import op


def _x(shape=(5, 13), scale=3.0, *extra):
    """Inputs away from the kink at 0 (central differences there would straddle it)."""
    def make(rng, dt):
        x = rng.standard_normal(shape) * scale
        x = np.where(np.abs(x) < 1e-3, 0.5, x)
        return (x.astype(dt),) + tuple(extra), {}
    return make


def _xoff(shape, scale, kinks, *extra):
    """_x with the inputs kept 0.05 away from each of ``kinks``."""
    def make(rng, dt):
        x = rng.standard_normal(shape) * scale
        for k in kinks:
            x = np.where(np.abs(x - k) < 0.05, k + 0.25, x)
        return (x.astype(dt),) + tuple(extra), {}
    return make


def _prelu_inputs(shape, c):
    def make(rng, dt):
        x = rng.standard_normal(shape) * 2
        x = np.where(np.abs(x) < 1e-3, 0.5, x)
        w = 0.25 + 0.3 * rng.standard_normal(c)
        return (x.astype(dt), w.astype(dt)), {}
    return make


CASES = [
    op("relu").case("relu", _x()),
    op("relu").case("relu_3d", _x((2, 3, 7))),
    op("leaky_relu").case("leaky_relu", _x()),
    op("leaky_relu").case("leaky_relu_0.001", _x((4, 9), 3.0, 0.001)),
    op("leaky_relu").case("leaky_relu_negative_slope", _x((4, 9), 3.0, -0.3)),
    op("leaky_relu").case("leaky_relu_zero_slope", _x((4, 9), 3.0, 0.0)),
    op("prelu").case("prelu_one", _prelu_inputs((3, 4, 5), 1)),
    op("prelu").case("prelu_channels", _prelu_inputs((2, 3, 4, 5), 3)),
    op("prelu").case("prelu_2d", _prelu_inputs((6, 4), 4)),
    op("prelu").case("prelu_1d", _prelu_inputs((7,), 1)),
    op("rrelu").case("rrelu_eval", _x((4, 9), 3.0, 0.1, 0.3, False), random=False),
    op("rrelu").case("rrelu_train", _x((5, 11), 3.0, 0.1, 0.3, True), torch_fn=None),
    op("rrelu").case("rrelu_train_defaults", _x((3, 37), 3.0, 1 / 8, 1 / 3, True), torch_fn=None),
    op("elu").case("elu", _x()),
    op("elu").case("elu_alpha_0.5", _x((4, 9), 3.0, 0.5)),
    op("elu").case("elu_negative_alpha", _x((4, 9), 3.0, -0.7)),
    op("selu").case("selu", _x()),
    op("celu").case("celu", _x()),
    op("celu").case("celu_alpha_2", _x((4, 9), 3.0, 2.0)),
    op("celu").case("celu_negative_alpha", _x((4, 9), 3.0, -1.5)),
    op("gelu").case("gelu_exact", _x((5, 13), 3.0, "none")),
    op("gelu").case("gelu_tanh", _x((5, 13), 3.0, "tanh")),
    op("silu").case("silu", _x()),
    op("softplus").case("softplus", _x((5, 13), 8.0)),
    op("softplus").case("softplus_beta_threshold", _x((5, 13), 3.0, 2.0, 1.5)),
    op("softplus").case("softplus_negative_beta", _x((4, 9), 3.0, -0.5, 1.0)),
    op("sigmoid").case("sigmoid", _x((5, 13), 4.0)),
    op("tanh").case("tanh", _x((5, 13), 2.0)),
    # the hard activations' kinks at +-1, 0, 6, +-3 are avoided by central differences
    # only by chance: inputs kept off them
    op("hardtanh").case("hardtanh", _xoff((5, 13), 2.0, (-1.0, 1.0))),
    op("hardtanh").case("hardtanh_range", _xoff((4, 9), 3.0, (-2.5, 0.5), -2.5, 0.5)),
    op("relu6").case("relu6", _xoff((5, 13), 5.0, (0.0, 6.0))),
    op("hardsigmoid").case("hardsigmoid", _xoff((5, 13), 3.0, (-3.0, 3.0))),
    op("hardswish").case("hardswish", _xoff((5, 13), 3.0, (-3.0, 3.0))),
    op("mish").case("mish", _x((5, 13), 4.0)),
]

for shape, dim in [((4, 10), -1), ((3, 5, 4), 1), ((6,), 0), ((2, 3, 4), 0)]:
    tag = "x".join(map(str, shape)) + f"_d{dim}"
    CASES.append(op("softmin").case(f"softmin_{tag}", _x(shape, 3.0, dim)))


def _module(cls, *args, **kw):
    def build(dt):
        return cls(*args, **kw).to(np.dtype(dt))
    return build


def _inputs(shape, scale=2.0):
    def make(rng, dt):
        x = rng.standard_normal(shape) * scale
        return (np.where(np.abs(x) < 1e-3, 0.5, x).astype(dt),)
    return make


_BACKENDS = ("cpu", "cuda")

MODULE_CASES = [
    ModuleCase("PReLU_single", _module(nn.PReLU), _inputs((4, 3, 5)), _BACKENDS),
    ModuleCase("PReLU_channels", _module(nn.PReLU, 3, 0.1), _inputs((2, 3, 4, 2)), _BACKENDS),
    ModuleCase("RReLU_train", _module(nn.RReLU, 0.1, 0.4), _inputs((3, 17)), _BACKENDS),
    ModuleCase("Sequential_activations",
               lambda dt: nn.Sequential(nn.LeakyReLU(0.001), nn.ELU(), nn.GELU("tanh"), nn.SiLU(),
                                        nn.Softplus(), nn.Tanh(), nn.Sigmoid(), nn.Softmin(-1)
                                        ).to(np.dtype(dt)),
               _inputs((3, 8)), _BACKENDS),
    ModuleCase("Sequential_hard_activations",
               lambda dt: nn.Sequential(nn.Mish(), nn.Hardswish(), nn.Hardtanh(-0.4, 0.9),
                                        nn.ReLU6(), nn.Hardsigmoid()).to(np.dtype(dt)),
               _inputs((3, 8)), _BACKENDS),
]
