import numpy as np

from reliability_registry import op


def _x(shape, p, training=True):
    def make(rng, dt):
        return (rng.standard_normal(shape).astype(dt), p, training), {}
    return make


dropout = op("dropout")
# torch's masks are its own: compared where p and training fix the result (p 0, p 1, eval)
CASES = [
    dropout.case("dropout_p03", _x((6, 17), 0.3), torch_fn=None),
    dropout.case("dropout_p05_3d", _x((2, 3, 11), 0.5), torch_fn=None),
    dropout.case("dropout_p0", _x((5, 7), 0.0)),
    dropout.case("dropout_p1", _x((5, 7), 1.0)),
    dropout.case("dropout_eval", _x((4, 5), 0.5, False)),
    dropout.case("dropout_empty", _x((0, 3), 0.2), torch_fn=None, gradcheck=False),
]
