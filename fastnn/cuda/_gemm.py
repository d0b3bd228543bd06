"""GEMM for the cuda backend: C = op(A) @ op(B) (+ bias per column), row-major.

cuBLAS through CuPy where CuPy imports and sees a GPU: the numba device arrays are
viewed by CuPy through __cuda_array_interface__ (zero copy) and cupy.matmul writes
straight into the numba-allocated output.  Elsewhere (no CuPy, or the simulator, where
CuPy cannot work) a shared-memory tiled numba kernel keeps the backend complete: one
thread per output element, TILE x TILE tiles of op(A) and op(B) staged in shared
memory; accumulation in the input dtype (as cuBLAS does).
"""
from . import _kit
from ._kit import kernel, TILE, cdiv, cuda, dtype_of, shape_of
from ._runtime import SIM

__all__ = ["gemm", "backend_name"]

_cupy_state = []


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

    @kernel
    def gemm_tiled(A, B, C, bias, M, N, K, ta, tb, has_bias):
        sa = cuda.shared.array((TILE, TILE), NT)
        sb = cuda.shared.array((TILE, TILE), NT)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        acc = zero
        for k0 in range(0, K, TILE):
            ka = k0 + tx
            if row < M and ka < K:
                if ta:
                    sa[ty, tx] = A[ka, row]
                else:
                    sa[ty, tx] = A[row, ka]
            else:
                sa[ty, tx] = zero
            kb = k0 + ty
            if kb < K and col < N:
                if tb:
                    sb[ty, tx] = B[col, kb]
                else:
                    sb[ty, tx] = B[kb, col]
            else:
                sb[ty, tx] = zero
            cuda.syncthreads()
            for kk in range(TILE):
                acc += sa[ty, kk] * sb[kk, tx]
            cuda.syncthreads()
        if row < M and col < N:
            if has_bias:
                acc += bias[col]
            C[row, col] = acc

    @kernel
    def add_bias(C, bias, n, N):
        for i in range(cuda.grid(1), n, cuda.gridsize(1)):
            C[i] += bias[i % N]

    return gemm_tiled, add_bias


def gemm(a, b, ta=False, tb=False, bias=None):
    """A fresh (M, N) device array op(a) @ op(b) (+ bias).  a, b: 2-D C-contiguous device
    arrays of one dtype; op(x) = x.T when the flag is set; bias (N,) or None."""
    dt = dtype_of(a)
    sa, sb = shape_of(a), shape_of(b)
    M, K = (sa[1], sa[0]) if ta else sa
    K2, N = (sb[1], sb[0]) if tb else sb
    if K != K2:
        raise ValueError(f"gemm: inner dimensions differ ({K} vs {K2})")
    out = _kit.empty((M, N), dt)
    if M == 0 or N == 0:
        return out
    tiled, add_bias = _kernels(dt)
    cp = _cupy()
    if cp is not None and K > 0:  # pragma: no cover - needs CuPy and a GPU
        ca = cp.asarray(a)
        cb = cp.asarray(b)
        cp.matmul(ca.T if ta else ca, cb.T if tb else cb, out=cp.asarray(out))
        if bias is not None:
            n = M * N
            add_bias[_kit.blocks_for(n), _kit.THREADS](_kit.flat(out), bias, n, N)
        return out
    has_bias = bias is not None
    grid = (cdiv(N, TILE), cdiv(M, TILE))
    tiled[grid, (TILE, TILE)](a, b, out, bias if has_bias else _kit.empty((1,), dt), M, N, K,
                              int(ta), int(tb), has_bias)
    return out

