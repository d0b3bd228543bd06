import numpy as np

from reliability_registry import op


def _x(shape, *rest):
    def make(rng, dt):
        # a permutation keeps every value distinct (no ties: central differences stay valid)
        x = (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1 - 3).astype(dt)
        return (x,) + rest, {}
    return make


def _max(name, shape, k, s=None, p=0, d=1, ceil=False):
    return op("max_pool2d").case(name, _x(shape, k, s, p, d, ceil))


def _avg(name, shape, k, s=None, p=0, ceil=False, cip=True, div=None):
    return op("avg_pool2d").case(name, _x(shape, k, s, p, ceil, cip, div))


CASES = [
    _max("max_pool2d_2x2", (2, 3, 6, 6), 2),
    _max("max_pool2d_3x3_s2_p1", (1, 2, 7, 5), 3, 2, 1),
    _max("max_pool2d_overlap", (1, 2, 6, 6), 3, 1, 1),
    _max("max_pool2d_dilation_ceil", (1, 2, 8, 7), (3, 2), 2, 1, (2, 1), True),
    _max("max_pool2d_ceil_last_window", (1, 1, 6, 6), 3, 2, 1, 1, True),
    _max("max_pool2d_rect", (2, 1, 5, 7), (2, 3), (1, 2), (1, 0)),
    _avg("avg_pool2d_2x2", (2, 3, 6, 6), 2),
    _avg("avg_pool2d_3x3_s2_p1", (1, 2, 7, 5), 3, 2, 1),
    _avg("avg_pool2d_exclude_pad", (1, 2, 7, 5), 3, 2, 1, False, False),
    _avg("avg_pool2d_ceil", (1, 2, 8, 7), 3, 2, 1, True),
    _avg("avg_pool2d_ceil_exclude", (1, 2, 8, 7), (3, 2), 2, 1, True, False),
    _avg("avg_pool2d_divisor", (1, 2, 6, 7), (2, 3), (2, 2), (1, 1), False, True, 5),
    _avg("avg_pool2d_overlap", (1, 2, 5, 6), 3, 1, 1),
    # the separable kernels' other column cases: stride 1 with a wide window, stride 3,
    # and stride 1 with ceil_mode windows past the padding
    _avg("avg_pool2d_wide_s1", (1, 2, 6, 9), (2, 4), 1, (1, 2)),
    _avg("avg_pool2d_s3_exclude", (2, 1, 8, 10), 4, 3, 2, False, False),
    _avg("avg_pool2d_k3_s1_ceil", (1, 2, 5, 5), 3, (2, 1), 1, True),
]


def _adaptive(name, shape, out, kind):
    return op(f"adaptive_{kind}_pool2d").case(name, _x(shape, out))


CASES += [
    _adaptive("adaptive_avg_pool2d_1", (2, 3, 5, 4), 1, "avg"),
    _adaptive("adaptive_avg_pool2d_overlap", (1, 2, 7, 5), (3, 2), "avg"),
    _adaptive("adaptive_avg_pool2d_none", (2, 2, 4, 6), (None, 4), "avg"),
    _adaptive("adaptive_avg_pool2d_upsample", (1, 2, 3, 2), (5, 4), "avg"),
    _adaptive("adaptive_avg_pool2d_3d_input", (2, 6, 5), (2, 3), "avg"),
    _adaptive("adaptive_max_pool2d_1", (2, 3, 5, 4), 1, "max"),
    _adaptive("adaptive_max_pool2d_overlap", (1, 2, 7, 5), (3, 2), "max"),
    _adaptive("adaptive_max_pool2d_none", (2, 2, 4, 6), (2, None), "max"),
    _adaptive("adaptive_max_pool2d_upsample", (1, 2, 3, 2), (5, 4), "max"),
    _adaptive("adaptive_max_pool2d_3d_input", (2, 6, 5), (4, 3), "max"),
    op("max_pool1d").case("max_pool1d_k3_s2_p1", _x((2, 3, 9), 3, 2, 1, 1, False)),
    op("max_pool1d").case("max_pool1d_dilation_ceil", _x((1, 2, 10), 2, 3, 1, 2, True)),
    op("max_pool1d").case("max_pool1d_unbatched", _x((3, 8), 2, None, 0, 1, False)),
    op("avg_pool1d").case("avg_pool1d_k3_s2_p1", _x((2, 3, 9), 3, 2, 1, False, True)),
    op("avg_pool1d").case("avg_pool1d_exclude_ceil", _x((1, 2, 10), 4, 3, 2, True, False)),
    op("avg_pool1d").case("avg_pool1d_unbatched", _x((3, 8), 2, None, 0, False, True)),
]
