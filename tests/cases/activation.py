import numpy as np

import fastnn.nn as nn
import fastnn.functional as F
from harness import ModuleCase, OpCase


def _x(shape=(5, 13), scale=3.0, *extra):
    """Inputs away from the kink at 0 (central differences there would straddle it)."""
    def make(rng, dt):
        x = rng.standard_normal(shape) * scale
        x = np.where(np.abs(x) < 1e-3, 0.5, x)
        return (x.astype(dt),) + tuple(extra), {}
    return make


def _tf(name, **fixed):
    """torch.nn.functional.<name>(x, *rest, **fixed)."""
    def fn(torch, *args, **kw):
        return getattr(torch.nn.functional, name)(*args, **fixed, **kw)
    return fn


def _prelu_inputs(shape, c):
    def make(rng, dt):
        x = rng.standard_normal(shape) * 2
        x = np.where(np.abs(x) < 1e-3, 0.5, x)
        w = 0.25 + 0.3 * rng.standard_normal(c)
        return (x.astype(dt), w.astype(dt)), {}
    return make


CASES = [
    OpCase("relu", F.relu_fwd, F.relu_bwd, _x(), (0,), _tf("relu")),
    OpCase("relu_3d", F.relu_fwd, F.relu_bwd, _x((2, 3, 7)), (0,), _tf("relu")),
    OpCase("leaky_relu", F.leaky_relu_fwd, F.leaky_relu_bwd, _x(), (0,), _tf("leaky_relu")),
    OpCase("leaky_relu_0.001", F.leaky_relu_fwd, F.leaky_relu_bwd, _x((4, 9), 3.0, 0.001), (0,),
           _tf("leaky_relu")),
    OpCase("leaky_relu_negative_slope", F.leaky_relu_fwd, F.leaky_relu_bwd, _x((4, 9), 3.0, -0.3),
           (0,), _tf("leaky_relu")),
    OpCase("leaky_relu_zero_slope", F.leaky_relu_fwd, F.leaky_relu_bwd, _x((4, 9), 3.0, 0.0), (0,),
           _tf("leaky_relu")),
    OpCase("prelu_one", F.prelu_fwd, F.prelu_bwd, _prelu_inputs((3, 4, 5), 1), (0, 1), _tf("prelu")),
    OpCase("prelu_channels", F.prelu_fwd, F.prelu_bwd, _prelu_inputs((2, 3, 4, 5), 3), (0, 1),
           _tf("prelu")),
    OpCase("prelu_2d", F.prelu_fwd, F.prelu_bwd, _prelu_inputs((6, 4), 4), (0, 1), _tf("prelu")),
    OpCase("prelu_1d", F.prelu_fwd, F.prelu_bwd, _prelu_inputs((7,), 1), (0, 1), _tf("prelu")),
    OpCase("rrelu_eval", F.rrelu_fwd, F.rrelu_bwd, _x((4, 9), 3.0, 0.1, 0.3, False), (0,),
           _tf("rrelu")),
    OpCase("rrelu_train", F.rrelu_fwd, F.rrelu_bwd, _x((5, 11), 3.0, 0.1, 0.3, True), (0,),
           random=True),
    OpCase("rrelu_train_defaults", F.rrelu_fwd, F.rrelu_bwd, _x((3, 37), 3.0, 1 / 8, 1 / 3, True),
           (0,), random=True),
    OpCase("elu", F.elu_fwd, F.elu_bwd, _x(), (0,), _tf("elu")),
    OpCase("elu_alpha_0.5", F.elu_fwd, F.elu_bwd, _x((4, 9), 3.0, 0.5), (0,), _tf("elu")),
    OpCase("elu_negative_alpha", F.elu_fwd, F.elu_bwd, _x((4, 9), 3.0, -0.7), (0,), _tf("elu")),
    OpCase("selu", F.selu_fwd, F.selu_bwd, _x(), (0,), _tf("selu")),
    OpCase("celu", F.celu_fwd, F.celu_bwd, _x(), (0,), _tf("celu")),
    OpCase("celu_alpha_2", F.celu_fwd, F.celu_bwd, _x((4, 9), 3.0, 2.0), (0,), _tf("celu")),
    OpCase("celu_negative_alpha", F.celu_fwd, F.celu_bwd, _x((4, 9), 3.0, -1.5), (0,), _tf("celu")),
    OpCase("gelu_exact", F.gelu_fwd, F.gelu_bwd, _x((5, 13), 3.0, "none"), (0,),
           lambda torch, x, a: torch.nn.functional.gelu(x, approximate=a)),
    OpCase("gelu_tanh", F.gelu_fwd, F.gelu_bwd, _x((5, 13), 3.0, "tanh"), (0,),
           lambda torch, x, a: torch.nn.functional.gelu(x, approximate=a)),
    OpCase("silu", F.silu_fwd, F.silu_bwd, _x(), (0,), _tf("silu")),
    OpCase("softplus", F.softplus_fwd, F.softplus_bwd, _x((5, 13), 8.0), (0,), _tf("softplus")),
    OpCase("softplus_beta_threshold", F.softplus_fwd, F.softplus_bwd, _x((5, 13), 3.0, 2.0, 1.5),
           (0,), _tf("softplus")),
    OpCase("softplus_negative_beta", F.softplus_fwd, F.softplus_bwd, _x((4, 9), 3.0, -0.5, 1.0),
           (0,), _tf("softplus")),
    OpCase("sigmoid", F.sigmoid_fwd, F.sigmoid_bwd, _x((5, 13), 4.0), (0,),
           lambda torch, x: torch.sigmoid(x)),
    OpCase("tanh", F.tanh_fwd, F.tanh_bwd, _x((5, 13), 2.0), (0,), lambda torch, x: torch.tanh(x)),
]

for shape, dim in [((4, 10), -1), ((3, 5, 4), 1), ((6,), 0), ((2, 3, 4), 0)]:
    tag = "x".join(map(str, shape)) + f"_d{dim}"
    CASES.append(OpCase(f"softmin_{tag}", F.softmin_fwd, F.softmin_bwd, _x(shape, 3.0, dim), (0,),
                        lambda torch, x, d: torch.nn.functional.softmin(x, d)))


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
]
