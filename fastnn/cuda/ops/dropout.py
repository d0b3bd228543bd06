"""Dropout family on the GPU: inverted dropout with the CPU's Philox mask.

Element i of a call (seed, offset) is kept when k_i = r_i >> 8 (its 24-bit Philox
uniform) satisfies k_i >= ceil(p * 2^24): the exact integer test of the reference and
csrc/dropout.pyx, so masks are bit-identical across backends.  One thread handles one
Philox block (4 consecutive elements); backward regenerates the mask from (seed, offset).
"""
import math

import numpy as np

from .. import _kit
from .._kit import THREADS, U8, gid, gsz, int32, kernel, philox4x32

OPS = ("dropout", "dropout_backward")


@_kit.per_dtype
def _kernels(dt):
    zero = dt.type(0)
    U64 = np.uint64

    @kernel
    def mask_mul(x, y, n, thr, scale, off_lo, off_hi, k0, k1):
        for b in range(gid(), int32((n + 3) >> 2), gsz()):
            r0, r1, r2, r3 = philox4x32(U64(b), off_lo, off_hi, k0, k1)
            i = 4 * b
            y[i] = x[i] * (scale if (r0 >> U8) >= thr else zero)
            if i + 1 < n:
                y[i + 1] = x[i + 1] * (scale if (r1 >> U8) >= thr else zero)
            if i + 2 < n:
                y[i + 2] = x[i + 2] * (scale if (r2 >> U8) >= thr else zero)
            if i + 3 < n:
                y[i + 3] = x[i + 3] * (scale if (r3 >> U8) >= thr else zero)

    return _kit.named(mask_mul=mask_mul)


def _run(x, p, seed, offset):
    x = _kit.dev(x)
    dt = _kit.dtype_of(x)
    y = _kit.empty_like(x)
    n = _kit.numel(_kit.shape_of(x))
    if n:
        thr = np.uint64(math.ceil(p * 16777216.0))   # p * 2^24 is exact in double
        scale = dt.type(0.0 if p >= 1.0 else 1.0 / (1.0 - p))
        _kernels(dt).mask_mul[_kit.blocks_for(_kit.cdiv(n, 4)), THREADS](
            _kit.flat(x), _kit.flat(y), n, thr, scale, *_kit.philox_args(seed, offset))
    return y


def dropout(x, p, seed, offset):
    return _run(x, p, seed, offset), (p, seed, offset)


def dropout_backward(dy, saved):
    p, seed, offset = saved
    return _run(dy, p, seed, offset)
