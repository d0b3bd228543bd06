"""Kernel toolkit of the cuda backend: launch geometry, block reductions, device arrays.

Design notes
- Launch geometry is one set of constants.  Under numba's CUDA simulator every CUDA
  thread is a Python thread and blocks run one after another, so there blocks are one
  warp wide and grids are capped at two blocks; kernels use grid-stride loops, so the
  same code is correct for any grid.  On a GPU: 256-thread blocks.
- Block reductions (``block_sum``, ``block_max``) are THE place where warp shuffles
  live.  The simulator has no shuffles: there the same device functions go through
  shared memory (thread 0 reduces the block's values in order).  Callers pass a shared
  buffer of ``SBUF`` elements and call them from every thread of the block
  (uniform control flow; the functions synchronise the block).
- Kernels are built per dtype by factories (``functools.lru_cache`` on the dtype) that
  close over typed constants (``T(0.5)`` with ``T = np.float32``): a bare float literal
  would silently promote float32 arithmetic to float64.  Index math is integer-only and
  never mixed into float expressions.
- Indices are 32-bit.  Every integer argument of a launch is passed as int32 and every
  device array must hold fewer than 2**31 elements (``_Kernel`` checks both at launch and
  refuses larger sizes with a ValueError): grid-stride loops run on ``gid()``/``gsz()``
  (int32, so numba's range counts in 32 bits) and index splits go through ``dm(a, b)``,
  an unsigned 32-bit divide.  numba types every integer expression as int64 and a signed
  int64 ``//`` or ``%`` is a 64-bit division in the PTX (dozens of instructions, or a
  runtime test and a 32-bit fallback); an unsigned divide of 32-bit operands is one
  ``div.u32``.  Products of indices (flat offsets) stay int64 in numba: no overflow.
- Parameter-gradient reductions (``colsum``) sum fixed chunks of rows into a partial
  buffer and reduce the partials in order: deterministic, no atomics.
"""
import functools
import sys
import types

import numpy as np

from ._runtime import SIM, as_device, cuda, int32, numba_type, uint32

if SIM:
    THREADS = 32         # elementwise block size
    ROW_THREADS = 32     # threads per row in row-wise (block per row) kernels
    MAX_BLOCKS = 2       # grid cap: grid-stride loops do the rest
    TILE = 4             # GEMM tile edge
    CHUNK = 4            # rows per partial sum in column reductions
else:
    THREADS = 256
    ROW_THREADS = 256
    MAX_BLOCKS = 1 << 16
    TILE = 16
    CHUNK = 128
_SIM_SWITCH = 5e-5       # GIL switch interval while a simulated kernel runs
SBUF = ROW_THREADS + 1   # shared scratch of the block reductions (one slot per thread + 1)

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def cdiv(a, b):
    return -(-a // b)


def blocks_for(n, threads=THREADS):
    """Blocks for ``n`` grid-stride work items (at least 1)."""
    return max(1, min(cdiv(n, threads), MAX_BLOCKS))


def row_blocks(rows):
    """Blocks for a block-per-row kernel over ``rows`` rows (grid-stride over rows)."""
    return max(1, min(rows, MAX_BLOCKS if SIM else (1 << 20)))


# ------------------------------------------------------------------ kernel registry
KERNELS = set()     # names of every kernel built so far ("family.kernel[dtype]")
LAUNCHED = set()    # names of the kernels launched at least once (tests check coverage)
FACTORIES = []      # every per-dtype kernel factory (tests build them all)
_building = [None]  # the dtype a factory is building kernels for


INDEX_LIMIT = 1 << 31   # indices are int32 (see the design notes)


def _index_args(name, args):
    """The launch arguments with every integer as int32; a ValueError for a size that
    32-bit indices cannot address (a device array of 2**31 elements or more, or an
    integer argument outside int32)."""
    out = list(args)
    for k, a in enumerate(args):
        if isinstance(a, (bool, np.bool_)):
            continue
        if isinstance(a, (int, np.signedinteger)) and type(a) is not np.int32:
            if not -INDEX_LIMIT <= a < INDEX_LIMIT:
                raise ValueError(f"{name}: integer argument {k} = {a} is outside the 32-bit "
                                 f"index range of the cuda kernels (|value| < 2**31)")
            out[k] = np.int32(a)
        elif hasattr(a, "copy_to_host") and a.size >= INDEX_LIMIT:
            raise ValueError(f"{name}: a device array of {a.size} elements (shape "
                             f"{tuple(a.shape)}); the cuda kernels index with 32-bit "
                             f"integers and take at most 2**31 - 1 elements per array")
    return out


class _Kernel:
    """A cuda.jit kernel that records its launches (``kernel[grid, block](*args)``) and
    passes its integer arguments as int32 (``_index_args``)."""

    __slots__ = ("jitted", "name")

    def __init__(self, fn):
        self.jitted = cuda.jit(fn)
        mod = fn.__module__.rsplit(".", 1)[-1]
        tag = f"[{_building[0]}]" if _building[0] is not None else ""
        self.name = f"{mod}.{fn.__name__}{tag}"
        KERNELS.add(self.name)
        _ALL.append(self)

    def __getitem__(self, config):
        launcher = self.jitted[config]
        name = self.name

        if SIM:
            def launch(*args):
                args = _index_args(name, args)
                LAUNCHED.add(name)
                # The simulator's scheduler busy-polls its block threads; with the default
                # 5 ms GIL switch interval every __syncthreads costs milliseconds.
                old = sys.getswitchinterval()
                sys.setswitchinterval(_SIM_SWITCH)
                try:
                    return launcher(*args)
                finally:
                    sys.setswitchinterval(old)
        else:
            def launch(*args):
                args = _index_args(name, args)
                LAUNCHED.add(name)
                return launcher(*args)
        return launch


_ALL = []


def all_kernels():
    """Every kernel object built so far."""
    return list(_ALL)


def kernel(fn):
    """Decorator: a launch-recording ``cuda.jit`` kernel."""
    return _Kernel(fn)


def named(**kernels):
    """What a kernel factory returns: its kernels by name (``_kernels(dt).fwd``), never
    by tuple position."""
    return types.SimpleNamespace(**kernels)


def per_dtype(factory):
    """Cache a kernel factory ``factory(dtype)`` per NumPy dtype; the kernels it builds
    are registered under their dtype."""
    cache = {}

    @functools.wraps(factory)
    def get(dtype):
        dt = np.dtype(dtype)
        k = cache.get(dt)
        if k is None:
            prev = _building[0]
            _building[0] = dt
            try:
                k = cache[dt] = factory(dt)
            finally:
                _building[0] = prev
        return k
    FACTORIES.append(get)
    return get


# ------------------------------------------------------------------ 32-bit indices
@cuda.jit(device=True, inline=True)
def gid():
    """This thread's index in the grid, int32 (``range(gid(), n, gsz())`` with an int32
    ``n`` counts in 32 bits)."""
    return int32(cuda.grid(1))


@cuda.jit(device=True, inline=True)
def gsz():
    """The grid's thread count, int32."""
    return int32(cuda.gridsize(1))


@cuda.jit(device=True, inline=True)
def dm(a, b):
    """(a // b, a % b) of non-negative int32 indices as one unsigned 32-bit divide."""
    q = uint32(a) // uint32(b)
    return int32(q), int32(a - int32(q) * b)


# ------------------------------------------------------------------ block reductions
if SIM:
    @cuda.jit(device=True)
    def block_sum(v, sbuf):
        """Sum of ``v`` over the block (every thread gets it).  Simulator: shared memory."""
        t = cuda.threadIdx.x
        sbuf[t] = v
        cuda.syncthreads()
        if t == 0:
            s = sbuf[0]
            for i in range(1, cuda.blockDim.x):
                s += sbuf[i]
            sbuf[SBUF - 1] = s
        cuda.syncthreads()
        r = sbuf[SBUF - 1]
        cuda.syncthreads()
        return r

    @cuda.jit(device=True)
    def block_max(v, sbuf):
        t = cuda.threadIdx.x
        sbuf[t] = v
        cuda.syncthreads()
        if t == 0:
            s = sbuf[0]
            for i in range(1, cuda.blockDim.x):
                if sbuf[i] > s:
                    s = sbuf[i]
            sbuf[SBUF - 1] = s
        cuda.syncthreads()
        r = sbuf[SBUF - 1]
        cuda.syncthreads()
        return r
else:  # pragma: no cover - needs a GPU
    @cuda.jit(device=True, inline=True)
    def _warp_sum(v):
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, 16)
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, 8)
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, 4)
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, 2)
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, 1)
        return v

    @cuda.jit(device=True, inline=True)
    def _warp_max(v):
        v = max(v, cuda.shfl_down_sync(0xFFFFFFFF, v, 16))
        v = max(v, cuda.shfl_down_sync(0xFFFFFFFF, v, 8))
        v = max(v, cuda.shfl_down_sync(0xFFFFFFFF, v, 4))
        v = max(v, cuda.shfl_down_sync(0xFFFFFFFF, v, 2))
        v = max(v, cuda.shfl_down_sync(0xFFFFFFFF, v, 1))
        return v

    @cuda.jit(device=True)
    def block_sum(v, sbuf):
        """Sum of ``v`` over the block (every thread gets it): warp shuffles, then the
        per-warp sums in order by thread 0."""
        t = cuda.threadIdx.x
        v = _warp_sum(v)
        if (t & 31) == 0:
            sbuf[t >> 5] = v
        cuda.syncthreads()
        if t == 0:
            s = sbuf[0]
            for i in range(1, (cuda.blockDim.x + 31) >> 5):
                s += sbuf[i]
            sbuf[SBUF - 1] = s
        cuda.syncthreads()
        r = sbuf[SBUF - 1]
        cuda.syncthreads()
        return r

    @cuda.jit(device=True)
    def block_max(v, sbuf):
        t = cuda.threadIdx.x
        v = _warp_max(v)
        if (t & 31) == 0:
            sbuf[t >> 5] = v
        cuda.syncthreads()
        if t == 0:
            s = sbuf[0]
            for i in range(1, (cuda.blockDim.x + 31) >> 5):
                s = max(s, sbuf[i])
            sbuf[SBUF - 1] = s
        cuda.syncthreads()
        r = sbuf[SBUF - 1]
        cuda.syncthreads()
        return r


@per_dtype
def welford(dt):
    """Device functions ``.step`` and ``.combine`` of the block statistics of the norm kernels:
    ``cnt, mu, m2 = step(v, cnt, mu, m2)`` is one thread's Welford update (start from
    ``0, T(0), T(0)``); ``mean, ss = combine(cnt, mu, m2, n, sbuf)`` merges every thread's
    (count, mean, M2) exactly with Chan's formula through two block sums: the mean of the
    block's ``n`` values and their sum of squared deviations (no cancellation at any n).
    Every thread of the block calls ``combine`` (it synchronises)."""
    T = dt.type

    @cuda.jit(device=True)
    def step(v, cnt, mu, m2):
        cnt += 1
        d = v - mu
        mu += d / T(cnt)
        m2 += d * (v - mu)
        return cnt, mu, m2

    @cuda.jit(device=True)
    def combine(cnt, mu, m2, n, sbuf):
        fc = T(cnt)
        mean = block_sum(fc * mu, sbuf) / T(n)
        dm = mu - mean
        return mean, block_sum(m2 + fc * dm * dm, sbuf)

    return named(step=step, combine=combine)


# ------------------------------------------------------------------ device arrays
def dtype_of(a):
    return np.dtype(a.dtype)


def shape_of(a):
    return tuple(a.shape)


def empty(shape, dtype):
    return cuda.device_array(tuple(int(s) for s in shape), dtype=np.dtype(dtype))


def empty_like(a):
    return empty(shape_of(a), dtype_of(a))


def numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def flat(a):
    """1-D view of a C-contiguous device array."""
    return a.reshape(numel(shape_of(a)))


def reshape(a, shape):
    shape = tuple(int(s) for s in shape)
    return a if shape_of(a) == shape else a.reshape(shape)


def dev(a):
    """``a`` as a C-contiguous numba device array: NumPy arrays are copied to the device
    once; device arrays (numba, CuPy, torch via __cuda_array_interface__) are viewed, and
    copied on the device only when they are not C-contiguous."""
    if a is None:
        return None
    if type(a) is np.ndarray:
        return cuda.to_device(np.asarray(a, order="C"))  # keeps 0-d shapes
    d = as_device(a)
    if not d.is_c_contiguous():
        d = contiguous(d)
    return d


@kernel
def _fill(x, v, n):
    for i in range(gid(), n, gsz()):
        x[i] = v


@kernel
def _add_into(dst, src, n):
    for i in range(gid(), n, gsz()):
        dst[i] += src[i]


@kernel
def _copy1(src, dst, n):
    for i in range(gid(), n, gsz()):
        dst[i] = src[i]


@kernel
def _copy2(src, dst, n):
    d1 = int32(src.shape[1])
    for i in range(gid(), n, gsz()):
        r, c = dm(i, d1)
        dst[i] = src[r, c]


@kernel
def _copy3(src, dst, n):
    d1 = int32(src.shape[1])
    d2 = int32(src.shape[2])
    for i in range(gid(), n, gsz()):
        r, c2 = dm(i, d2)
        c0, c1 = dm(r, d1)
        dst[i] = src[c0, c1, c2]


@kernel
def _copy4(src, dst, n):
    d1 = int32(src.shape[1])
    d2 = int32(src.shape[2])
    d3 = int32(src.shape[3])
    for i in range(gid(), n, gsz()):
        r, c3 = dm(i, d3)
        r2, c2 = dm(r, d2)
        c0, c1 = dm(r2, d1)
        dst[i] = src[c0, c1, c2, c3]


_COPY = {1: _copy1, 2: _copy2, 3: _copy3, 4: _copy4}


def contiguous(a):
    """A C-contiguous device copy of a strided device array (up to 4-D)."""
    shape = shape_of(a)
    n = numel(shape)
    out = empty(shape, dtype_of(a))
    if n == 0:
        return out
    k = _COPY.get(len(shape))
    if k is None:
        raise ValueError(f"non-contiguous device arrays of {len(shape)} dimensions are not "
                         f"supported; make the array contiguous first")
    k[blocks_for(n), THREADS](a, flat(out), n)
    return out


def device_pointer(a):
    """Start address of a device array's data (the simulator: the host buffer's)."""
    ai = getattr(a, "__cuda_array_interface__", None)
    if ai is not None:
        return ai["data"][0]
    return a._ary.__array_interface__["data"][0]   # simulator's FakeCUDAArray


def same_memory(a, b):
    return device_pointer(a) == device_pointer(b)


def inplace_target(a, name, host):
    """A device array an op updates in place (running statistics, optimizer state).  A
    NumPy array (the cuda backend chosen for host arrays) is copied to the device and
    remembered in ``host`` for ``copy_back``; a strided device array is an error."""
    if a is None:
        return None
    if type(a) is np.ndarray:
        d = dev(a)
        host.append((d, a))
        return d
    d = as_device(a)
    if not d.is_c_contiguous():
        raise ValueError(f"{name} must be a C-contiguous device array to be updated in place, "
                         f"got strides {tuple(d.strides)} for shape {tuple(d.shape)}")
    return d


def copy_back(host):
    """Copy in-place results back into the host arrays ``inplace_target`` recorded."""
    for d, a in host:
        d.copy_to_host(a)


def fill(a, value):
    n = numel(shape_of(a))
    if n:
        _fill[blocks_for(n), THREADS](flat(a), dtype_of(a).type(value), n)
    return a


def zeros(shape, dtype):
    return fill(empty(shape, dtype), 0)


def accumulate(dst, src):
    """dst += src (same shape and dtype; both C-contiguous device arrays)."""
    if shape_of(dst) != shape_of(src):
        raise ValueError(f"accumulate: shapes differ: {shape_of(dst)} vs {shape_of(src)}")
    if dtype_of(dst) != dtype_of(src):
        raise TypeError(f"accumulate: dtypes differ: {dtype_of(dst)} vs {dtype_of(src)}")
    n = numel(shape_of(dst))
    if n:
        _add_into[blocks_for(n), THREADS](flat(dst), flat(src), n)


@kernel
def _transpose2(src, dst, n, C):
    # dst (C, R) = src (R, C).T; threads walk dst in order (coalesced writes)
    R, _ = dm(n, C)
    for e in range(gid(), n, gsz()):
        j, i = dm(e, R)
        dst[j, i] = src[i, j]


def transpose2d(a):
    """A fresh C-contiguous device array a.T of a 2-D device array."""
    a = dev(a)
    R, C = shape_of(a)
    out = empty((C, R), dtype_of(a))
    n = R * C
    if n:
        _transpose2[blocks_for(n), THREADS](a, out, n, C)
    return out


@kernel
def _swap12(src, dst, n, B, C):
    # dst (A, C, B) = src (A, B, C) with the last two axes swapped; threads walk dst
    for e in range(gid(), n, gsz()):
        r, b = dm(e, B)
        a, c = dm(r, C)
        dst[a, c, b] = src[a, b, c]


def swap_last_two(a3):
    """A fresh C-contiguous (A, C, B) device array from a 3-D (A, B, C) device array."""
    a3 = dev(a3)
    A, B, C = shape_of(a3)
    out = empty((A, C, B), dtype_of(a3))
    n = A * B * C
    if n:
        _swap12[blocks_for(n), THREADS](a3, out, n, B, C)
    return out


def copy(a):
    out = empty_like(a)
    n = numel(shape_of(a))
    if n:
        _copy1[blocks_for(n), THREADS](flat(a), flat(out), n)
    return out


# ------------------------------------------------------------------ column sums
@kernel
def _colsum_partial(x, part, R, C, chunk):
    # block row y = one chunk of rows; columns grid-stride along x (coalesced)
    ch = cuda.blockIdx.y
    r0 = ch * chunk
    r1 = min(r0 + chunk, R)
    for c in range(gid(), C, gsz()):
        s = x[r0, c]
        for r in range(r0 + 1, r1):
            s += x[r, c]
        part[ch, c] = s


@kernel
def _reduce_partials(part, out, K, C):
    for c in range(gid(), C, gsz()):
        s = part[0, c]
        for k in range(1, K):
            s += part[k, c]
        out[c] = s


def chunking(rows):
    """(rows per chunk, number of chunks) for a partial-sum pass over ``rows`` rows."""
    chunk = max(CHUNK, cdiv(rows, 65535))   # the chunk count is a grid y dimension
    return chunk, max(1, cdiv(rows, chunk))


def reduce_partials(part, out):
    """out[c] = sum_k part[k, c], in order of k."""
    K, C = shape_of(part)
    if C:
        _reduce_partials[blocks_for(C), THREADS](part, out, K, C)
    return out


def colsum(x2):
    """Column sums of a 2-D device array, deterministic (fixed row chunks, ordered)."""
    R, C = shape_of(x2)
    dt = dtype_of(x2)
    out = empty((C,), dt)
    if C == 0:
        return out
    if R == 0:
        return fill(out, 0)
    chunk, K = chunking(R)
    part = empty((K, C), dt)
    _colsum_partial[(blocks_for(C), K), THREADS](x2, part, R, C, chunk)
    return reduce_partials(part, out)


@per_dtype
def _rowsum_kernel(dt):
    NT = numba_type(dt)
    zero = dt.type(0)

    @kernel
    def rowsum_k(x, out, R, C):
        sbuf = cuda.shared.array(SBUF, NT)
        t = cuda.threadIdx.x
        for r in range(cuda.blockIdx.x, R, cuda.gridDim.x):
            s = zero
            for c in range(t, C, cuda.blockDim.x):
                s += x[r, c]
            s = block_sum(s, sbuf)
            if t == 0:
                out[r] = s
    return rowsum_k


def rowsum(x2):
    """Row sums of a 2-D device array (one block per row, deterministic)."""
    R, C = shape_of(x2)
    dt = dtype_of(x2)
    out = empty((R,), dt)
    if R:
        _rowsum_kernel(dt)[row_blocks(R), ROW_THREADS](x2, out, R, C)
    return out


def shared_type(dtype):
    return numba_type(dtype)


def scalars(dt):
    """``(NT, T, zero, one)`` a per-dtype kernel factory closes over: the numba type of
    its shared buffers, the scalar type and its typed 0 and 1."""
    T = np.dtype(dt).type
    return shared_type(dt), T, T(0), T(1)


# ------------------------------------------------------------------ Philox4x32-10
# The same generator and layout as fastnn/_random.py and csrc/fnn_philox.h: key = seed
# halves, counter = (block lo, block hi, offset lo, offset hi), block = i // 4, lane =
# i % 4.  All arithmetic is on uint64 holding 32-bit values with uint64 constants (numba
# types uint64 mixed with int64 as float64, so no plain int literal may enter).
_U64 = np.uint64
_M32 = _U64(0xFFFFFFFF)
_S32 = _U64(32)
_PM0 = _U64(0xD2511F53)
_PM1 = _U64(0xCD9E8D57)
_PW0 = _U64(0x9E3779B9)
_PW1 = _U64(0xBB67AE85)
U8 = _U64(8)


@cuda.jit(device=True)
def philox4x32(block, off_lo, off_hi, k0, k1):
    """Four uint32 outputs (as uint64) of Philox4x32-10 for counter block ``block``."""
    c0 = block & _M32
    c1 = block >> _S32
    c2 = off_lo
    c3 = off_hi
    for _ in range(10):
        p0 = _PM0 * c0
        p1 = _PM1 * c2
        n0 = (p1 >> _S32) ^ c1 ^ k0
        n2 = (p0 >> _S32) ^ c3 ^ k1
        c1 = p1 & _M32
        c3 = p0 & _M32
        c0 = n0
        c2 = n2
        k0 = (k0 + _PW0) & _M32
        k1 = (k1 + _PW1) & _M32
    return c0, c1, c2, c3


def philox_args(seed, offset):
    """(off_lo, off_hi, k0, k1) kernel arguments of a call (seed, offset), as uint64."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    offset = int(offset) & 0xFFFFFFFFFFFFFFFF
    return (_U64(offset & 0xFFFFFFFF), _U64(offset >> 32),
            _U64(seed & 0xFFFFFFFF), _U64(seed >> 32))
