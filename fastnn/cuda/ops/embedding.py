"""Embedding family on the GPU: row gather forward, deterministic scatter-add backward.

Forward: one thread per output element gathers weight[idx[i], c].
Backward: the rows hit are grouped by a stable sort of the indices (done on the host from
one small copy of the int indices -- the functional shell already copies them there for
its range check), then one thread per (distinct row, column) sums its rows of dy in index
order: deterministic (no float atomics), O(n * dim) work, coalesced along the columns.
"""
import numpy as np

from .. import _kit
from .._kit import THREADS, dm, gid, gsz, kernel

OPS = ("embedding", "embedding_backward")


@_kit.per_dtype
def _kernels(dt):
    zero = dt.type(0)

    @kernel
    def gather(idx, w, out, total, dim):
        for e in range(gid(), total, gsz()):
            i = dm(e, dim)[0]
            c = e - i * dim
            out[i, c] = w[idx[i], c]

    @kernel
    def scatter_rows(dy, order, starts, rows, dw, total, dim, pad):
        # distinct row u = rows[u] collects dy[order[k]] for k in starts[u]..starts[u+1]
        for e in range(gid(), total, gsz()):
            u = dm(e, dim)[0]
            c = e - u * dim
            s = zero
            for k in range(starts[u], starts[u + 1]):
                s += dy[order[k], c]
            r = rows[u]
            dw[r, c] = zero if r == pad else s

    return _kit.named(gather=gather, scatter_rows=scatter_rows)


def embedding(idx, weight, padding_idx):
    idx, w = _kit.dev(idx), _kit.dev(weight)
    dt = _kit.dtype_of(w)
    num, dim = _kit.shape_of(w)
    ishape = _kit.shape_of(idx)
    n = _kit.numel(ishape)
    out = _kit.empty((n, dim), dt)
    if n * dim:
        _kernels(dt).gather[_kit.blocks_for(n * dim), THREADS](_kit.flat(idx), w, out, n * dim, dim)
    return _kit.reshape(out, ishape + (dim,)), (idx, num, padding_idx)


def embedding_backward(dy, saved):
    idx, num, padding_idx = saved
    dy = _kit.dev(dy)
    dt = _kit.dtype_of(dy)
    dshape = _kit.shape_of(dy)
    dim = dshape[-1] if dshape else 0
    n = _kit.numel(_kit.shape_of(idx))
    dw = _kit.zeros((num, dim), dt)
    if n == 0 or dim == 0:
        return dw
    host = np.asarray(_kit.flat(idx).copy_to_host(), dtype=np.int64)
    order = np.argsort(host, kind="stable")
    sorted_idx = host[order]
    rows, starts = np.unique(sorted_idx, return_index=True)
    starts = np.append(starts, n).astype(np.int64)
    total = len(rows) * dim
    _kernels(dt).scatter_rows[_kit.blocks_for(total), THREADS](
        _kit.reshape(dy, (n, dim)), _kit.dev(order.astype(np.int64)), _kit.dev(starts),
        _kit.dev(rows.astype(np.int64)), dw, total, dim, -1 if padding_idx is None else padding_idx)
    return dw
