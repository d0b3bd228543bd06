"""Random state: parameter init and counter-based random numbers.

Parameter init draws from one NumPy ``Generator`` reseeded by ``manual_seed``.

Dropout masks and RReLU slopes come from Philox4x32-10 (Salmon et al., SC'11), a
counter-based generator: the random number of element ``i`` in a call is a pure
function of (seed, call offset, i).  So every backend and every thread count gives
the same mask for the same seed.  Layout, shared with csrc/fnn_philox.h and the cuda
kernels:

    key     = (seed & 0xffffffff, seed >> 32)
    counter = (block & 0xffffffff, block >> 32, offset & 0xffffffff, offset >> 32)
    block   = i // 4, lane = i % 4 picks one of the four 32-bit outputs
    uniform = (r >> 8) * 2**-24, in [0, 1), exact in float32 and float64

Each random op call takes a fresh ``offset`` (``next_offset()``), so successive calls differ.
"""
import threading

import numpy as np

from ._validate import is_int

__all__ = ["manual_seed", "initial_seed", "generator", "next_offset", "philox_uniform"]

_lock = threading.Lock()
_seed = [0x5EED]
_offset = [0]
_gen = [np.random.default_rng(0x5EED)]


def manual_seed(seed):
    """Seed parameter init, dropout and rrelu (all backends)."""
    if not is_int(seed):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    with _lock:
        _seed[0] = seed
        _offset[0] = 0
        _gen[0] = np.random.default_rng(seed)


def initial_seed():
    return _seed[0]


def generator():
    """The NumPy Generator used for parameter initialisation."""
    return _gen[0]


def next_offset():
    """(seed, offset) for one random op call; advances the call counter."""
    with _lock:
        off = _offset[0]
        _offset[0] = off + 1
        return _seed[0], off


_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint32(0x9E3779B9)
_W1 = np.uint32(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint32 arrays (broadcast); returns four uint32 arrays."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in (c0, c1, c2, c3))
    k0 = np.uint32(k0)
    k1 = np.uint32(k1)
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = _M0 * c0.astype(np.uint64)
            p1 = _M1 * c2.astype(np.uint64)
            hi0 = (p0 >> np.uint64(32)).astype(np.uint32)
            lo0 = (p0 & _MASK32).astype(np.uint32)
            hi1 = (p1 >> np.uint64(32)).astype(np.uint32)
            lo1 = (p1 & _MASK32).astype(np.uint32)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            k0 = np.uint32(k0 + _W0)
            k1 = np.uint32(k1 + _W1)
    return c0, c1, c2, c3


def philox_uniform(n, seed, offset, dtype=np.float64):
    """``n`` uniforms in [0, 1) for elements 0..n-1 of a call (seed, offset)."""
    i = np.arange(n, dtype=np.uint64)
    block = i >> np.uint64(2)
    lane = (i & np.uint64(3)).astype(np.intp)
    out = philox4x32(block & _MASK32, block >> np.uint64(32),
                     np.uint32(offset & 0xFFFFFFFF), np.uint32((offset >> 32) & 0xFFFFFFFF),
                     seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)
    r = np.choose(lane, out) if n else np.zeros(0, np.uint32)
    return ((r >> np.uint32(8)).astype(dtype)) * dtype(2.0 ** -24)
