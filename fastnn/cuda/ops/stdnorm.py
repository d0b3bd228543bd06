"""StdNorm family on the GPU: the Annotated Transformer's layer norm
a * (x - mean) / (std + eps) + b with the unbiased std, over the last D elements.

The kernels live with layer_norm's (ops/norm.py, ``std_fwd`` / ``std_bwd``): one block
per row, per-thread Welford combined with Chan's formula; backward dx with two block
sums (a row with std == 0 takes the subgradient 0, as the reference), and the parameter
gradients through layer_norm's chunked pass with rstd = 1 / (std + eps).
"""
from .. import _kit
from .._kit import ROW_THREADS
from .norm import _kernels, _norm_backward

OPS = ("std_layer_norm", "std_layer_norm_backward")


def std_layer_norm(x, a, b, D, eps):
    x, a, b = _kit.dev(x), _kit.dev(a), _kit.dev(b)
    dt = _kit.dtype_of(x)
    shape = _kit.shape_of(x)
    n = _kit.numel(shape)
    R = n // D if D else 0
    y = _kit.empty(shape, dt)
    mean = _kit.empty((R,), dt)
    std = _kit.empty((R,), dt)
    rinv = _kit.empty((R,), dt)
    if n:
        dummy = _kit.empty((1,), dt)
        _kernels(dt).std_fwd[_kit.row_blocks(R), ROW_THREADS](
            _kit.reshape(x, (R, D)), dummy if a is None else _kit.flat(a),
            dummy if b is None else _kit.flat(b), _kit.reshape(y, (R, D)), mean, std, rinv,
            R, D, dt.type(eps), a is not None, b is not None)
    return y, (x, a, b is not None, mean, std, rinv, D)


def std_layer_norm_backward(dy, saved):
    x, a, has_b, mean, std, rinv, D = saved
    return _norm_backward(dy, x, a, has_b, mean, rinv, D, std)
