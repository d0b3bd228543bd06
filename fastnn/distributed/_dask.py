"""Batch inference over Dask: ``predict_dask(model, x, batch_size)``.

The model is snapshotted once (a deep copy in eval mode: no caches kept, dropout off) and
enters the graph as ONE piece of data that every block's task depends on:

* with a ``dask.distributed`` Client active, ``client.scatter(..., broadcast=True)`` sends
  it straight to each worker once (the graph then holds only a reference to it);
* otherwise it is one ``dask.delayed`` key: the threaded scheduler shares the object
  itself, and a cluster that gets the graph later still fetches it once per worker.

Each block runs ``model(rows)`` in slices of ``batch_size`` rows.  A task sets fastnn's
thread count to its share of the cores, so that worker threads times kernel threads never
exceed the machine: cores // (worker threads on this host) under distributed,
cores // (threads of the pool) under the threaded scheduler, every core under the
synchronous one.  The previous thread count is restored when the last such task ends.
"""
import copy
import os
import sys
import threading
import uuid
from contextlib import contextmanager

import numpy as np

from .._validate import int_arg
from ..nn.module import Module

__all__ = ["predict_dask"]


def _dask_array():
    try:
        import dask.array as da
    except ImportError as e:
        raise ImportError(f"predict_dask needs dask ({e}): pip install 'dask[array]' (and "
                          f"'distributed' to run on a cluster)") from e
    return da


def predict_dask(model, x, batch_size, threads=None):
    """``model`` applied to every row block of the dask array ``x``; returns a dask array.

    ``x``: rows are samples (chunked along axis 0 only; other axes are merged into one
    chunk).  The result has x's row chunks and the model's per-row output shape and dtype
    (found by running the model on one row of zeros now, which also catches a model/input
    mismatch before any compute).  ``batch_size``: rows per model call inside a block.
    ``threads``: fastnn threads per task (default: cores // concurrent tasks on the host).
    The model must return one array (not a tuple).  Nothing runs until ``.compute()``."""
    da = _dask_array()
    if not isinstance(model, Module):
        raise TypeError(f"model must be a fastnn Module, got {type(model).__name__}")
    if not isinstance(x, da.Array):
        raise TypeError(f"x must be a dask array (dask.array.from_array(...)), got "
                        f"{type(x).__name__}")
    if x.ndim < 1:
        raise ValueError("x must have at least one axis (rows are samples)")
    batch_size = int_arg(batch_size, "batch_size", 1)
    if threads is not None:
        threads = int_arg(threads, "threads", 1)
    if any(len(c) > 1 for c in x.chunks[1:]):
        x = x.rechunk({i: -1 for i in range(1, x.ndim)})

    m = copy.deepcopy(model).eval()          # a snapshot: later changes to `model` don't leak in
    probe = m(np.zeros((1,) + tuple(x.shape[1:]), dtype=x.dtype))
    if not isinstance(probe, np.ndarray) or probe.ndim < 1 or probe.shape[0] != 1:
        raise TypeError(f"predict_dask: the model must map (n, ...) rows to one (n, ...) "
                        f"array, got {type(probe).__name__} "
                        f"{getattr(probe, 'shape', '')} for one row")
    tail, out_dtype = tuple(probe.shape[1:]), probe.dtype

    token = uuid.uuid4().hex
    client = _active_client()
    if client is not None:
        ref = client.scatter(m, broadcast=True, hash=False)
        workers = client.scheduler_info()["workers"]
        per_host = {}
        for w in workers.values():
            per_host[w["host"]] = per_host.get(w["host"], 0) + int(w["nthreads"])
        host_threads = {addr: per_host[w["host"]] for addr, w in workers.items()}
    else:
        from dask import delayed
        ref = delayed(m, name=f"fastnn-model-{token}")   # named: no hashing of the weights
        host_threads = None

    out_ndim = 1 + len(tail)
    return da.map_blocks(
        _predict_block, x, ref, batch_size, threads, host_threads, tail, out_dtype,
        name=f"fastnn-predict-{token}", dtype=out_dtype,
        chunks=(x.chunks[0],) + tuple((d,) for d in tail),
        drop_axis=list(range(1, x.ndim)) if x.ndim > 1 else None,
        new_axis=list(range(1, out_ndim)) if out_ndim > 1 else None,
        meta=np.empty((0,) * out_ndim, dtype=out_dtype))


def _active_client():
    """The current dask.distributed Client, if the user made one (never imports distributed)."""
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_client
        return get_client()
    except (ImportError, ValueError):
        return None


def _predict_block(block, model, batch_size, threads, host_threads, tail, out_dtype):
    n = block.shape[0]
    if n == 0:
        return np.empty((0,) + tail, dtype=out_dtype)
    with _kernel_threads(threads or _share(host_threads)):
        outs = [model(block[i:i + batch_size]) for i in range(0, n, batch_size)]
    return outs[0] if len(outs) == 1 else np.concatenate(outs)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _share(host_threads):
    """Kernel threads for this task: its part of the cores."""
    cores = _cores()
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker
            w = get_worker()
        except (ImportError, ValueError):
            w = None
        if w is not None:
            total = (host_threads or {}).get(w.address, w.state.nthreads)
            return max(1, cores // max(1, total))
    if threading.current_thread() is threading.main_thread():
        return cores                          # the synchronous scheduler: tasks run one by one
    import dask
    from dask.system import CPU_COUNT
    pool = dask.config.get("num_workers", None) or CPU_COUNT
    return max(1, cores // max(1, int(pool)))


_threads_lock = threading.Lock()
_threads_state = {"users": 0, "saved": None}


@contextmanager
def _kernel_threads(n):
    """fastnn's (process-wide) thread count set to ``n`` while any predict task runs; the
    first task in sets it, the last one out restores what was there."""
    from .. import _backend
    st = _threads_state
    with _threads_lock:
        if st["users"] == 0:
            st["saved"] = _backend._num_threads[0]
            if _backend.get_num_threads() != n:
                _backend.set_num_threads(n)
        st["users"] += 1
    try:
        yield
    finally:
        with _threads_lock:
            st["users"] -= 1
            if st["users"] == 0:
                saved = st["saved"]
                if saved is None:
                    _backend.set_num_threads(_backend.default_num_threads())
                    _backend._num_threads[0] = None
                elif saved != _backend.get_num_threads():
                    _backend.set_num_threads(saved)
