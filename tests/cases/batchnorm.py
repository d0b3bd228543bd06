import numpy as np

from reliability_registry import op


def _bn(shape, training, affine=True, bias=True, eps=1e-5):
    def make(rng, dt):
        C = shape[1]
        x = (rng.standard_normal(shape) * 2 + 0.7).astype(dt)
        rm = rv = None
        if not training:
            rm = rng.standard_normal(C).astype(dt)
            rv = rng.uniform(0.5, 2.0, C).astype(dt)
        w = (1 + 0.3 * rng.standard_normal(C)).astype(dt) if affine else None
        b = rng.standard_normal(C).astype(dt) if (affine and bias) else None
        return (x, rm, rv, w, b, training, 0.1, eps), {}
    return make


def _case(name, *a, **k):
    return op("batch_norm").case(name, _bn(*a, **k))


CASES = [
    _case("batch_norm_train_2d", (6, 3), True),
    _case("batch_norm_train_3d", (3, 2, 5), True),
    _case("batch_norm_train_4d", (2, 3, 4, 5), True),
    # planes of >= 64 elements are units of their own (S = 90: a tail of 2 past the
    # 8-lane steps; the AVX-512 float sums take it masked)
    _case("batch_norm_train_planes", (2, 3, 9, 10), True),
    _case("batch_norm_train_no_affine", (2, 3, 3, 4), True, False),
    _case("batch_norm_train_no_bias", (4, 2, 3), True, True, False, 1e-3),
    _case("batch_norm_eval_4d", (2, 3, 3, 3), False),
    _case("batch_norm_eval_2d_no_affine", (5, 4), False, False),
]


from fastnn import nn  # noqa: E402
from harness import ModuleCase  # noqa: E402


def _x(shape):
    def make(rng, dt):
        return ((rng.standard_normal(shape) * 1.5 + 0.3).astype(dt),)
    return make


# cpu only until the cuda backend has these kernels (see CUDA_PENDING)
MODULE_CASES = [
    ModuleCase("BatchNorm1d_2d", lambda dt: nn.BatchNorm1d(3).to(np.dtype(dt)), _x((5, 3)),
               backends=("cpu",)),
    ModuleCase("BatchNorm1d_3d", lambda dt: nn.BatchNorm1d(2, momentum=None).to(np.dtype(dt)),
               _x((3, 2, 4)), backends=("cpu",)),
    ModuleCase("BatchNorm2d_no_affine", lambda dt: nn.BatchNorm2d(3, affine=False).to(np.dtype(dt)),
               _x((2, 3, 2, 3)), backends=("cpu",)),
]
