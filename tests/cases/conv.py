import numpy as np

from reliability_registry import op


def _conv(xs, ws, bias=True, stride=1, padding=0, dilation=1, groups=1):
    def make(rng, dt):
        x = rng.standard_normal(xs).astype(dt)
        w = (rng.standard_normal(ws) * 0.5).astype(dt)
        b = rng.standard_normal(ws[0]).astype(dt) if bias else None
        return (x, w, b, stride, padding, dilation, groups), {}
    return make


def _case(name, *a, **k):
    return op("conv2d").case(name, _conv(*a, **k))


CASES = [
    _case("conv2d_3x3_pad1", (2, 3, 5, 6), (4, 3, 3, 3), padding=1),
    _case("conv2d_stride_pad_pair", (1, 2, 7, 6), (3, 2, 3, 2), False, stride=(2, 1), padding=(1, 0)),
    _case("conv2d_dilation", (2, 2, 7, 7), (2, 2, 3, 3), dilation=2, padding=2),
    _case("conv2d_dilation_stride", (1, 2, 9, 8), (3, 2, 2, 3), stride=(2, 3), dilation=(3, 2),
          padding=(1, 2)),
    _case("conv2d_groups", (1, 4, 5, 5), (6, 2, 3, 3), groups=2, padding=1),
    _case("conv2d_depthwise", (2, 3, 6, 6), (3, 1, 3, 3), groups=3, padding=1),
    _case("conv2d_depthwise_mult_stride", (1, 2, 5, 6), (4, 1, 3, 2), groups=2, stride=2, padding=1),
    _case("conv2d_depthwise_dilation_nobias", (2, 2, 6, 5), (2, 1, 2, 2), False, groups=2,
          dilation=2, padding=(2, 1)),
    # depthwise fast paths: 3x3 stride 1 with 2 outputs per channel (d_input accumulates),
    # 3x3 stride 2, dilated 3x3, a 5x5 (generic taps), asymmetric / oversized padding, and
    # rows wider than one d_weight block (256 columns)
    _case("conv2d_depthwise_3x3_mult2", (2, 2, 5, 7), (4, 1, 3, 3), groups=2, padding=1),
    _case("conv2d_depthwise_3x3_s2", (1, 3, 7, 8), (3, 1, 3, 3), groups=3, stride=2, padding=1),
    _case("conv2d_depthwise_3x3_dil2", (1, 2, 7, 6), (2, 1, 3, 3), groups=2, dilation=2,
          padding=(1, 3)),
    _case("conv2d_depthwise_5x5_same_even", (1, 2, 6, 5), (2, 1, 4, 5), groups=2, padding="same"),
    _case("conv2d_depthwise_big_padding", (1, 2, 3, 2), (2, 1, 3, 3), False, groups=2, padding=4),
    _case("conv2d_depthwise_wide", (1, 2, 3, 300), (2, 1, 3, 3), groups=2, padding=(0, 1)),
    # the direct 3x3 stride-1 kernel (float32 with AVX2: >= 4 input channels, output
    # channels a multiple of 4): padding 0/1/2 and asymmetric, one-column outputs
    # (several row tiles per image: tests/test_conv.py, too slow for the cuda simulator)
    _case("conv2d_3x3_direct", (2, 8, 6, 7), (16, 8, 3, 3), padding=1),
    _case("conv2d_3x3_direct_valid_narrow", (1, 4, 5, 3), (4, 4, 3, 3), False),
    _case("conv2d_3x3_direct_pad2", (1, 4, 4, 5), (12, 4, 3, 3), padding=2),
    _case("conv2d_3x3_direct_pad_pair", (2, 5, 5, 6), (4, 5, 3, 3), padding=(0, 1)),
    _case("conv2d_1x1", (2, 4, 3, 3), (5, 4, 1, 1)),
    _case("conv2d_1x1_stride2", (1, 3, 5, 5), (2, 3, 1, 1), stride=2),
    _case("conv2d_1x1_groups", (1, 4, 2, 3), (6, 2, 1, 1), groups=2),
    _case("conv2d_same_even", (1, 2, 5, 6), (3, 2, 4, 2), padding="same", dilation=(1, 2)),
    _case("conv2d_valid", (1, 2, 4, 5), (2, 2, 3, 3), padding="valid"),
    _case("conv2d_big_padding", (1, 1, 2, 3), (2, 1, 2, 2), padding=3),
]

def _case1d(name, *a, **k):
    return op("conv1d").case(name, _conv(*a, **k))


def _tconv(xs, ws, bias=True, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    def make(rng, dt):
        x = rng.standard_normal(xs).astype(dt)
        w = (rng.standard_normal(ws) * 0.5).astype(dt)
        b = rng.standard_normal(ws[1] * groups).astype(dt) if bias else None
        return (x, w, b, stride, padding, output_padding, groups, dilation), {}
    return make


def _tcase(name, *a, **k):
    return op("conv_transpose2d").case(name, _tconv(*a, **k))


CASES += [
    _case1d("conv1d_k3_pad1", (2, 3, 9), (4, 3, 3), padding=1),
    _case1d("conv1d_stride_dilation", (2, 2, 11), (3, 2, 3), False, stride=2, dilation=2, padding=1),
    _case1d("conv1d_groups_same", (1, 4, 8), (6, 2, 4), groups=2, padding="same"),
    _case1d("conv1d_depthwise_valid", (2, 3, 7), (3, 1, 3), groups=3, padding="valid"),
    _case1d("conv1d_unbatched", (3, 7), (2, 3, 2), stride=(2,)),
    _case1d("conv1d_k1", (2, 4, 5), (3, 4, 1)),
    _tcase("conv_transpose2d_k4_s2_p1", (2, 3, 4, 5), (3, 2, 4, 4), stride=2, padding=1),
    _tcase("conv_transpose2d_k3_s1", (1, 2, 4, 4), (2, 3, 3, 3), padding=1),
    _tcase("conv_transpose2d_outpad", (1, 2, 3, 4), (2, 2, 3, 2), False, stride=(2, 3),
           padding=(1, 0), output_padding=(1, 2)),
    _tcase("conv_transpose2d_groups_dil", (2, 4, 3, 3), (4, 1, 2, 3), stride=2, groups=2,
           dilation=(2, 1)),
    _tcase("conv_transpose2d_depthwise", (1, 3, 4, 3), (3, 1, 3, 3), stride=2, padding=1, groups=3),
    _tcase("conv_transpose2d_1x1", (2, 3, 3, 2), (3, 4, 1, 1)),
]
# output_padding >= stride (allowed when dilation is larger): the shell zero-extends x on
# the host (the cuda backend refuses this geometry with a ValueError)
_edge = _tcase("conv_transpose2d_outpad_ge_stride", (1, 2, 3, 3), (2, 2, 2, 2), stride=1,
               dilation=3, output_padding=(2, 1))
_edge.backends = ("cpu",)
CASES.append(_edge)


def _x(shape):
    def make(rng, dt):
        return (rng.standard_normal(shape).astype(dt),)
    return make


def _build(ctor):
    def build(dt):
        return ctor().to(np.dtype(dt))
    return build


from fastnn import nn  # noqa: E402
from harness import ModuleCase  # noqa: E402

# cpu only until the cuda backend has these kernels (see CUDA_PENDING)
MODULE_CASES = [
    ModuleCase("Conv1d_module", _build(lambda: nn.Conv1d(3, 4, 3, padding="same")),
               lambda rng, dt: (rng.standard_normal((2, 3, 7)).astype(dt),)),
    ModuleCase("ConvTranspose2d_module",
               _build(lambda: nn.ConvTranspose2d(3, 2, 4, stride=2, padding=1)), _x((2, 3, 3, 4))),
    ModuleCase("Conv2d_module", _build(lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1)),
               _x((2, 3, 5, 6)), backends=("cpu",)),
    ModuleCase("DepthwiseSeparableConv2d_module",
               _build(lambda: nn.DepthwiseSeparableConv2d(3, 5, 3, padding="same")), _x((2, 3, 4, 5)),
               backends=("cpu",)),
    ModuleCase("conv_pool_bn_stack",
               _build(lambda: nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4),
                                            nn.MaxPool2d(2), nn.Conv2d(4, 3, 1, bias=False),
                                            nn.AvgPool2d(2))),
               _x((2, 2, 4, 4)), backends=("cpu",)),
]
