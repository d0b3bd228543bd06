import numpy as np

from reliability_registry import op


def _linear(shape_x, n_out, bias):
    def make(rng, dt):
        n_in = shape_x[-1]
        x = rng.standard_normal(shape_x).astype(dt)
        w = rng.standard_normal((n_out, n_in)).astype(dt)
        b = rng.standard_normal(n_out).astype(dt) if bias else None
        return (x, w, b), {}
    return make


linear = op("linear")
CASES = [
    linear.case("linear_2d", _linear((5, 7), 3, True)),
    linear.case("linear_3d_nobias", _linear((2, 3, 6), 4, False)),
    linear.case("linear_1d", _linear((6,), 2, True)),
    linear.case("linear_zero_rows", _linear((0, 4), 3, True), gradcheck=False),
]


def _linear_act(shape_x, n_out, bias, activation, in_out=False):
    """linear_act's arguments; ``in_out``: the weight as the transpose of an (in, out)
    array (GPT-2's Conv1D passes it so)."""
    def make(rng, dt):
        (x, w, b), _ = _linear(shape_x, n_out, bias)(rng, dt)
        if in_out:
            w = np.ascontiguousarray(w.T).T
        return (x, w, b, activation), {}
    return make


linear_act = op("linear_act")
CASES += [
    linear_act.case("linear_act_gelu_tanh", _linear_act((5, 7), 16, True, "gelu_tanh")),
    linear_act.case("linear_act_gelu_3d", _linear_act((2, 3, 6), 4, False, "gelu")),
    linear_act.case("linear_act_in_out", _linear_act((4, 5), 32, True, "gelu_tanh", True)),
    linear_act.case("linear_act_zero_rows", _linear_act((0, 4), 3, True, "gelu"), gradcheck=False),
]
