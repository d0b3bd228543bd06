"""GEMM for the cuda backend: C = op(A) @ op(B) (+ bias per column), row-major.

cuBLAS through CuPy where CuPy imports and sees a GPU: the numba device arrays are
viewed by CuPy through __cuda_array_interface__ (zero copy) and cupy.matmul writes
straight into the numba-allocated output.  Elsewhere (no CuPy, or the simulator, where
CuPy cannot work) a shared-memory tiled numba kernel keeps the backend complete: one
thread per output element, TILE x TILE tiles of op(A) and op(B) staged in shared
memory; accumulation in the input dtype (as cuBLAS does).  Products of at most SMALL
multiply-adds (an RNN step on a small batch) take an untiled kernel instead.

The epilogue adds the bias and applies an activation (``ACT``: none, relu, gelu (erf),
gelu_tanh) to the accumulator before the one store of each output (the inference
``linear_act_infer``); after cuBLAS the same epilogue is one elementwise pass.
"""
import math

from . import _kit
from ._kit import TILE, cdiv, cuda, dm, dtype_of, gid, gsz, int32, kernel, shape_of
from ._runtime import SIM

__all__ = ["gemm", "gemm_batched", "backend_name", "ACT"]

#: activation codes of the GEMM epilogue
ACT = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3}

_cupy_state = []
SMALL = 512   # M*N*K at or below which the untiled kernel runs (no CuPy)


def _cupy():
    """The cupy module when cuBLAS is usable through it, else None (decided once)."""
    if not _cupy_state:
        cp = None
        if not SIM:
            try:  # pragma: no cover - needs CuPy and a GPU
                import cupy
                if cupy.cuda.runtime.getDeviceCount() > 0:
                    cp = cupy
            except Exception:
                cp = None
        _cupy_state.append(cp)
    return _cupy_state[0]


def backend_name():
    return "cublas (cupy)" if _cupy() is not None else "numba tiled"


@_kit.per_dtype
def _kernels(dt):
    T = dt.type
    NT = _kit.shared_type(dt)
    zero = T(0)
    half = T(0.5)
    one = T(1)
    k0 = T(math.sqrt(2.0 / math.pi))
    k1 = T(0.044715)
    inv_sqrt2 = T(1 / math.sqrt(2.0))

    @cuda.jit(device=True)
    def epilogue(acc, bias, col, has_bias, act):
        # acc + bias[col], then the activation (ACT codes)
        if has_bias:
            acc += bias[col]
        if act == 1:
            acc = zero if acc < zero else acc
        elif act == 2:
            acc = half * acc * (one + math.erf(acc * inv_sqrt2))
        elif act == 3:
            acc = half * acc * (one + math.tanh(k0 * (acc + k1 * acc * acc * acc)))
        return acc

    @kernel
    def gemm_tiled(A, B, C, bias, M, N, K, ta, tb, has_bias, a_batched, b_batched, Z, act):
        # C[z] = op(A[z or 0]) @ op(B[z or 0]) (+ bias).  Blocks loop over the output tiles
        # (z, tile row, tile col) grid-stride: one tile per block on a GPU, a few blocks
        # doing all the tiles under the simulator.
        sa = cuda.shared.array((TILE, TILE), NT)
        sb = cuda.shared.array((TILE, TILE), NT)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tiles_n, _ = dm(N + TILE - 1, TILE)
        tiles_m, _ = dm(M + TILE - 1, TILE)
        for tile in range(cuda.blockIdx.x, int32(Z * tiles_m * tiles_n), cuda.gridDim.x):
            r, tn = dm(tile, tiles_n)
            z, tm = dm(r, tiles_m)
            za = z if a_batched else 0
            zb = z if b_batched else 0
            row = tm * TILE + ty
            col = tn * TILE + tx
            acc = zero
            for k0 in range(0, K, TILE):
                ka = k0 + tx
                if row < M and ka < K:
                    if ta:
                        sa[ty, tx] = A[za, ka, row]
                    else:
                        sa[ty, tx] = A[za, row, ka]
                else:
                    sa[ty, tx] = zero
                kb = k0 + ty
                if kb < K and col < N:
                    if tb:
                        sb[ty, tx] = B[zb, col, kb]
                    else:
                        sb[ty, tx] = B[zb, kb, col]
                else:
                    sb[ty, tx] = zero
                cuda.syncthreads()
                for kk in range(TILE):
                    acc += sa[ty, kk] * sb[kk, tx]
                cuda.syncthreads()
            if row < M and col < N:
                C[z, row, col] = epilogue(acc, bias, col, has_bias, act)

    @kernel
    def gemm_small(A, B, C, bias, M, N, K, ta, tb, has_bias, a_batched, b_batched, Z, act):
        # tiny products (an RNN step, a 1-row linear): one thread per output element, no
        # shared-memory staging -- the tiles would be mostly padding
        for e in range(gid(), int32(Z * M * N), gsz()):
            r, col = dm(e, N)
            z, row = dm(r, M)
            za = z if a_batched else 0
            zb = z if b_batched else 0
            acc = zero
            for k in range(K):
                a = A[za, k, row] if ta else A[za, row, k]
                b = B[zb, col, k] if tb else B[zb, k, col]
                acc += a * b
            C[z, row, col] = epilogue(acc, bias, col, has_bias, act)

    @kernel
    def bias_act(C, bias, n, N, has_bias, act):
        # the epilogue as its own pass (after cuBLAS)
        for i in range(gid(), n, gsz()):
            C[i] = epilogue(C[i], bias, dm(i, N)[1], has_bias, act)

    return _kit.named(gemm_tiled=gemm_tiled, bias_act=bias_act, gemm_small=gemm_small)


def _dims(shape, t):
    return (shape[-1], shape[-2]) if t else (shape[-2], shape[-1])


def gemm_batched(a, b, ta=False, tb=False, bias=None, act="none"):
    """A fresh (Z, M, N) device array with C[z] = act(op(a[z]) @ op(b[z]) (+ bias)).
    a (Za, ., .) and b (Zb, ., .) are 3-D C-contiguous device arrays of one dtype; a batch
    of 1 is broadcast; op(x) = x.T (of the last two axes) when the flag is set; ``act`` one
    of ``ACT``'s names."""
    code = ACT[act]
    dt = dtype_of(a)
    sa, sb = shape_of(a), shape_of(b)
    za, zb = sa[0], sb[0]
    Z = max(za, zb)
    if za not in (1, Z) or zb not in (1, Z):
        raise ValueError(f"gemm: batch sizes {za} and {zb} do not broadcast")
    M, K = _dims(sa, ta)
    K2, N = _dims(sb, tb)
    if K != K2:
        raise ValueError(f"gemm: inner dimensions differ ({K} vs {K2})")
    out = _kit.empty((Z, M, N), dt)
    if Z == 0 or M == 0 or N == 0:
        return out
    ks = _kernels(dt)
    has_bias = bias is not None
    bias_arg = bias if has_bias else _kit.empty((1,), dt)
    cp = _cupy()
    if cp is not None and K > 0:  # pragma: no cover - needs CuPy and a GPU
        ca = cp.asarray(a)
        cb = cp.asarray(b)
        ca = ca.swapaxes(1, 2) if ta else ca
        cb = cb.swapaxes(1, 2) if tb else cb
        co = cp.asarray(out)
        if Z == 1:
            cp.matmul(ca[0], cb[0], out=co[0])
        else:
            cp.matmul(ca, cb, out=co)
        if has_bias or code:
            n = Z * M * N
            ks.bias_act[_kit.blocks_for(n), _kit.THREADS](_kit.flat(out), bias_arg, n, N,
                                                         has_bias, code)
        return out
    # Under the simulator GEMMs take the thread-per-output kernel (a tiled block is 256
    # Python threads; speed there means nothing).  The tiled kernel, which a real GPU
    # runs, is checked under the simulator by tests/test_cuda.py's tiled-GEMM test (its
    # sporadic wrong tiles were the simulator's unlocked shared-array creation, fixed
    # in _runtime).
    if (_kit.SIM and not SIM_TILED[0]) or M * N * K <= SMALL:
        n = Z * M * N
        ks.gemm_small[_kit.blocks_for(n), _kit.THREADS](a, b, out, bias_arg, M, N, K, int(ta),
                                                        int(tb), has_bias, za > 1, zb > 1, Z,
                                                        code)
        return out
    tiles = Z * cdiv(M, TILE) * cdiv(N, TILE)
    grid = max(1, min(tiles, _kit.MAX_BLOCKS))
    ks.gemm_tiled[grid, (TILE, TILE)](a, b, out, bias_arg, M, N, K,
                                      int(ta), int(tb), has_bias, za > 1, zb > 1, Z, code)
    return out


SIM_TILED = [False]   # tests set it to launch the tiled kernel under the simulator


def gemm(a, b, ta=False, tb=False, bias=None, act="none"):
    """A fresh (M, N) device array act(op(a) @ op(b) (+ bias)).  a, b: 2-D C-contiguous
    device arrays of one dtype; op(x) = x.T when the flag is set; bias (N,) or None."""
    sa, sb = shape_of(a), shape_of(b)
    out = gemm_batched(_kit.reshape(a, (1,) + sa), _kit.reshape(b, (1,) + sb), ta, tb, bias,
                       act)
    return _kit.reshape(out, shape_of(out)[1:])
