"""Data-parallel training over MPI (mpi4py): init, DistributedDataParallel, broadcast, shard.

Every rank holds the whole model and runs forward and backward on its own part of each
batch; DistributedDataParallel then averages the parameter gradients over the ranks, so
the optimizer step that follows is the same on every rank and the replicas never drift.

How the averaging overlaps backward (the design PyTorch's DDP popularised):

* Parameters are packed, in reverse registration order (roughly the order backward
  finishes them), into buckets of about ``bucket_mb`` MiB, one dtype per bucket.
* Every module that holds parameters gets a backward hook
  (``Module.register_full_backward_hook``).  A parameter's gradient is final once every
  module holding it has run a backward and has no pending calls left (a module called
  twice is backpropagated twice).  When all gradients of a bucket are final it is copied
  into one flat buffer and a non-blocking ``Iallreduce`` starts, while backward goes on
  with earlier layers.
* Buckets are started strictly in bucket order, so every rank issues the same sequence
  of collectives whatever the timing; all are waited on before backward returns, and the
  sums are divided by the world size in the gradient's own dtype (float32 gradients are
  reduced in float32).  Buckets whose parameters got no backward this step (unused
  parameters) are started at the end, with zeros where a rank has no gradient; one extra
  slot per parameter counts the ranks that had one, so a parameter no rank used keeps
  ``grad = None`` (the optimizer skips it, as it would in one process).
* MPICH progresses a non-blocking collective only inside MPI calls, so each hook also
  tests the outstanding requests: that is what moves the bytes while backward computes.

Every collective here needs the same models on all ranks; a mismatch would hang or,
worse, mix unrelated arrays.  So wrapping and broadcasting first allgather a signature
(names, shapes, dtypes, bucket size) and every rank raises the same clear error.
"""
import contextlib
import os
import sys
import time
import weakref

import numpy as np

from .._validate import int_arg, positive_float
from ..nn.module import Module

__all__ = ["init", "get_comm", "launcher_world_size", "DistributedDataParallel",
           "broadcast_parameters", "shard"]

_INSTALL = "pip install 'fastnn[mpi]'"
_state = {"comm": None, "abort_hook": False}
_ABORT_RELAY_S = 0.5     # a failing rank's wait between its traceback and MPI_Abort


def _mpi():
    """mpi4py's MPI module, or an ImportError that says what to install."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(f"fastnn.distributed needs mpi4py and an MPI library ({e}); install "
                          f"them with: {_INSTALL}  (mpi4py and the mpich wheel, which "
                          f"brings mpiexec)") from e
    except (OSError, RuntimeError) as e:    # mpi4py present, its MPI library missing/broken
        raise ImportError(f"fastnn.distributed: mpi4py could not load an MPI library ({e}); "
                          f"install one with: {_INSTALL}") from e
    return MPI


def init(comm=None):
    """Start (or join) the MPI job; returns ``(rank, world_size)``.

    ``comm``: an ``mpi4py.MPI.Comm`` (``MPI.COMM_WORLD`` when None); it becomes the default
    communicator of everything in this module.  When the job has more than one rank:

    * an uncaught exception on any rank prints its traceback and aborts the whole job
      (``MPI.COMM_WORLD.Abort``), so a failing rank never leaves the others waiting in a
      collective forever;
    * unless the thread count was chosen (``fastnn.set_num_threads`` or OMP_NUM_THREADS),
      each rank gets its share of this machine's cores: cores // ranks on this machine.
    """
    MPI = _mpi()
    if comm is None:
        comm = MPI.COMM_WORLD
    elif not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py.MPI.Comm, got {type(comm).__name__}")
    _state["comm"] = comm
    if MPI.COMM_WORLD.Get_size() > 1:
        _install_abort_hook(MPI)
    if comm.Get_size() > 1:
        _share_cores(comm, MPI)
    return comm.Get_rank(), comm.Get_size()


def launcher_world_size():
    """The number of ranks an MPI launcher (mpiexec/mpirun of MPICH, Intel MPI, Open MPI)
    started, read from its environment without loading MPI; 1 when not under a launcher."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return 1


def get_comm():
    """The communicator ``init`` chose (``init()`` runs first if it has not)."""
    if _state["comm"] is None:
        init()
    return _state["comm"]


def _install_abort_hook(MPI):
    if _state["abort_hook"]:
        return
    previous = sys.excepthook

    def abort_on_exception(tp, value, tb):
        try:
            previous(tp, value, tb)
            sys.stderr.flush()
            sys.stdout.flush()
            # MPI_Abort has the launcher kill every process of the job, and what this rank
            # just wrote may still sit in the pipe to the launcher: a short wait lets it be
            # relayed (on a loaded 2-core machine only the traceback's first line arrived)
            time.sleep(_ABORT_RELAY_S)
        finally:
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = abort_on_exception
    _state["abort_hook"] = True


def _share_cores(comm, MPI):
    from .. import _backend
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)   # collective: every rank calls init
    n_local = local.Get_size()
    local.Free()
    if _backend._num_threads[0] is not None or os.environ.get("OMP_NUM_THREADS"):
        return
    try:
        mine = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        mine = os.cpu_count() or 1
    # a rank the launcher pinned to its own cores already sees only its share
    share = mine if mine < (os.cpu_count() or mine) else mine // n_local
    _backend.set_num_threads(max(1, share))


def _comm(comm):
    return get_comm() if comm is None else comm


# ---------------------------------------------------------------------- same model everywhere
def _check_same(comm, signature, what):
    """Allgather ``signature`` (a list of tuples) and raise the same ValueError on every rank
    when any rank's differs from rank 0's."""
    sigs = comm.allgather(signature)
    ref = sigs[0]
    problems = []
    for r, sig in enumerate(sigs[1:], 1):
        if sig == ref:
            continue
        a, b = dict((s[0], s[1:]) for s in ref), dict((s[0], s[1:]) for s in sig)
        only0 = [k for k in a if k not in b]
        onlyr = [k for k in b if k not in a]
        diff = [k for k in a if k in b and a[k] != b[k]]
        parts = []
        if only0:
            parts.append(f"only rank 0 has {_names(only0)}")
        if onlyr:
            parts.append(f"only rank {r} has {_names(onlyr)}")
        for k in diff[:3]:
            parts.append(f"{k!r} is {_desc(a[k])} on rank 0 but {_desc(b[k])} on rank {r}")
        if not parts:
            parts.append("the same entries in a different order")
        problems.append(f"rank {r} vs rank 0: " + "; ".join(parts))
    if problems:
        raise ValueError(f"{what}: the ranks disagree (every rank must build the same model, "
                         f"with the same parameter names, shapes and dtypes, and pass the "
                         f"same arguments):\n  " + "\n  ".join(problems))


def _names(keys):
    shown = ", ".join(repr(k) for k in keys[:5])
    return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def _desc(rest):
    return ", ".join(f"shape {v}" if isinstance(v, tuple) else str(v) for v in rest)


def _host(a):
    if type(a) is np.ndarray:
        return a
    from .. import to_numpy
    return to_numpy(a)


# ---------------------------------------------------------------------- broadcast / shard
def broadcast_parameters(model, root=0, comm=None):
    """Copy rank ``root``'s parameters and buffers (its ``state_dict``) to every rank, in
    place, so that all replicas start identical.  Collective: every rank calls it."""
    if not isinstance(model, Module):
        raise TypeError(f"model must be a fastnn Module, got {type(model).__name__}")
    comm = _comm(comm)
    root = int_arg(root, "root", 0)
    if root >= comm.Get_size():
        raise ValueError(f"root must be < the world size {comm.Get_size()}, got {root}")
    state = model.state_dict()
    _check_same(comm, [(k, tuple(v.shape), str(v.dtype)) for k, v in state.items()],
                "broadcast_parameters")
    replace = {}
    for name, arr in state.items():
        if type(arr) is np.ndarray and arr.flags.c_contiguous and arr.flags.writeable:
            comm.Bcast(arr, root=root)
        else:   # device arrays, read-only or strided buffers: through a host copy
            tmp = np.array(_host(arr), order="C")   # a copy; a 0-d buffer stays 0-d
            comm.Bcast(tmp, root=root)
            replace[name] = tmp
    if replace:
        model.load_state_dict(replace, strict=False)
    return model


def shard(n, epoch=0, seed=0, comm=None):
    """This rank's indices of a shuffled epoch of ``n`` samples (int64 array).

    Every rank draws the same permutation of ``range(n)`` from ``(seed, epoch)`` and takes
    every world-th entry from its rank on: the shards are disjoint, together cover every
    sample exactly once, and differ in length by at most one: run the same number of steps
    on every rank (e.g. ``n // world // batch``), since every step is a collective.  Pass a
    new ``epoch`` each epoch for a new order."""
    n = int_arg(n, "n", 0)
    epoch = int_arg(epoch, "epoch", 0)
    seed = int_arg(seed, "seed", 0)
    comm = _comm(comm)
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    return perm[comm.Get_rank()::comm.Get_size()]


# ---------------------------------------------------------------------- DDP
class _Bucket:
    __slots__ = ("params", "offsets", "dtype", "numel", "remaining", "buf", "req")

    def __init__(self, dtype):
        self.params, self.offsets, self.dtype, self.numel = [], [], dtype, 0
        self.remaining = 0
        self.buf = self.req = None


class DistributedDataParallel(Module):
    """``model`` replicated on every rank; ``backward`` averages its gradients over the ranks.

    ``forward`` is the wrapped model's.  ``backward(*grads)`` runs the model's backward; as
    buckets of about ``bucket_mb`` MiB of gradients become final they are summed over the
    ranks with non-blocking allreduces that overlap the rest of backward, and all of them
    are finished (and divided by the world size) before ``backward`` returns, so
    ``p.grad`` holds the average over all ranks' data when the optimizer steps.  Calling
    ``ddp.module.backward`` directly does the same (the root module's hook finishes it).

    Inside ``with ddp.no_sync():`` backward only accumulates local gradients (gradient
    accumulation); the first backward after it averages everything accumulated.

    Wrapping is collective and checks that every rank holds the same model (parameter
    names, shapes, dtypes) and the same ``bucket_mb``: a ValueError on every rank if not.

    Checkpoints: the replicas are identical, so rank 0 alone saves
    (``ddp.module.state_dict()`` and ``opt.state_dict()``); every rank loads the same file.
    ``ddp.stats``: steps reduced, buckets reduced (``early``: of them, started during
    backward rather than at its end), bytes, and seconds spent waiting for the reductions.
    """

    def __init__(self, module, bucket_mb=25, comm=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"module must be a fastnn Module, got {type(module).__name__}")
        if isinstance(module, DistributedDataParallel):
            raise TypeError("module is already wrapped in DistributedDataParallel")
        bucket_mb = positive_float(bucket_mb, "bucket_mb")
        comm = _comm(comm)
        self.module = module
        d = self.__dict__
        d["comm"] = comm
        d["_MPI"] = _mpi()
        d["bucket_mb"] = bucket_mb
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        _check_same(comm, [("bucket_mb", bucket_mb)]
                    + [(n, tuple(p.shape), str(p.dtype)) for n, p in named],
                    "DistributedDataParallel")
        d["_buckets"] = self._make_buckets([p for _, p in named], bucket_mb)
        d["_bucket_of"] = {id(p): b for b in self._buckets for p in b.params}
        # every module that holds one of the parameters, with the parameters it holds
        holders, n_holders = [], {}
        for m in module.modules():
            mine = [p for p in m._parameters.values() if p is not None and id(p) in self._bucket_of]
            if mine:
                holders.append((m, mine))
                for p in mine:
                    n_holders[id(p)] = n_holders.get(id(p), 0) + 1
        d["_n_holders"] = n_holders
        d["_holders"] = {id(m): mine for m, mine in holders}
        d["_sync"] = True
        d["stats"] = {"reductions": 0, "buckets": 0, "early": 0, "bytes": 0, "wait_s": 0.0}
        self._reset_step()
        # the hooks hold the wrapper weakly: a discarded wrapper stops reducing
        on_backward = weakref.WeakMethod(self._on_backward)

        def hook(m, grad_input, grad_output):
            f = on_backward()
            return None if f is None else f(m, grad_input, grad_output)

        hooks = [m.register_full_backward_hook(hook) for m, _ in holders]
        if id(module) not in self._holders:     # the root's hook finishes the step
            hooks.append(module.register_full_backward_hook(hook))
        d["_hooks"] = hooks

    @staticmethod
    def _make_buckets(params, bucket_mb):
        limit = bucket_mb * (1 << 20)
        buckets, open_by_dtype = [], {}
        for p in reversed(params):          # backward finishes the last layers first
            dt = np.dtype(p.dtype)
            b = open_by_dtype.get(dt)
            if b is None or (b.numel and (b.numel + p.size) * dt.itemsize > limit):
                b = open_by_dtype[dt] = _Bucket(dt)
                buckets.append(b)
            b.params.append(p)
            b.offsets.append(b.numel)
            b.numel += int(p.size)
        return buckets

    def _reset_step(self):
        d = self.__dict__
        d["_left"] = dict(self._n_holders)    # holder backwards still due, per parameter
        d["_done"] = set()                    # modules whose backward finished this step
        for b in self._buckets:
            b.remaining = len(b.params)
            b.buf = b.req = None
        d["_next"] = 0                        # the next bucket to start (they start in order)
        d["_open"] = False                    # this step started a reduction or a backward

    # -------------------------------------------------------------- forward / backward
    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def backward(self, *grads, **kwargs):
        if self._sync:
            self.__dict__["_open"] = True
        out = self.module.backward(*grads, **kwargs)
        if self._sync and self._open and self.module._pending_calls() == 0:
            self._finish()
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside this context accumulates local gradients without communicating."""
        prev = self._sync
        self.__dict__["_sync"] = False
        try:
            yield
        finally:
            self.__dict__["_sync"] = prev

    def _on_backward(self, module, grad_input, grad_output):
        if not self._sync or module._pending_calls():
            return None
        d = self.__dict__
        d["_open"] = True
        mine = self._holders.get(id(module))
        if mine is not None:
            if id(module) in self._done:
                for p in mine:
                    if self._bucket_of[id(p)].req is not None:
                        raise RuntimeError(
                            f"DistributedDataParallel: {type(module).__name__} ran backward "
                            f"again after its gradients were already being averaged in this "
                            f"step (run every forward before the backward of the step, or "
                            f"use no_sync() for all but the last backward)")
            else:
                self._done.add(id(module))
                left = self._left
                for p in mine:
                    k = id(p)
                    left[k] -= 1
                    if left[k] == 0:
                        self._bucket_of[k].remaining -= 1
                self._start_ready()
        if module is self.module:
            self._finish()
        return None

    # -------------------------------------------------------------- communication
    def _start_ready(self):
        buckets = self._buckets
        while self._next < len(buckets) and buckets[self._next].remaining == 0:
            self._start(buckets[self._next])
            self.stats["early"] += 1
        pending = [b.req for b in buckets[:self._next] if b.req is not None]
        if pending:
            # MPICH moves a non-blocking collective forward only inside MPI calls
            self._MPI.Request.Testall(pending)

    def _start(self, b):
        buf = np.empty(b.numel + len(b.params), dtype=b.dtype)
        has = buf[b.numel:]                 # 1 where this rank has a gradient
        for i, (p, off) in enumerate(zip(b.params, b.offsets)):
            g = p.grad
            n = int(p.size)
            if g is None:
                buf[off:off + n] = 0
                has[i] = 0
            else:
                buf[off:off + n] = _host(g).reshape(-1)
                has[i] = 1
        MPI = self._MPI
        b.buf = buf
        b.req = self.comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        self.__dict__["_next"] += 1

    def _finish(self):
        """Start what is left, wait for everything, write the averages into ``p.grad``."""
        if not self._open:
            return
        buckets = self._buckets
        while self._next < len(buckets):
            self._start(buckets[self._next])
        world = self.comm.Get_size()
        t0 = time.perf_counter()
        for b in buckets:
            b.req.Wait()
        wait = time.perf_counter() - t0
        nbytes = 0
        for b in buckets:
            buf = b.buf
            has = buf[b.numel:]
            np.divide(buf, buf.dtype.type(world), out=buf)
            nbytes += buf.nbytes
            for i, (p, off) in enumerate(zip(b.params, b.offsets)):
                if has[i] == 0:
                    p.grad = None
                    continue
                g = buf[off:off + int(p.size)].reshape(p.shape)
                p.grad = g if type(p.data) is np.ndarray else _to_device(g)
        st = self.stats
        st["reductions"] += 1
        st["buckets"] += len(buckets)
        st["bytes"] += nbytes
        st["wait_s"] += wait
        self._reset_step()

    def reset_stats(self):
        self.stats.update(reductions=0, buckets=0, early=0, bytes=0, wait_s=0.0)

    def remove_hooks(self):
        """Unregister the backward hooks (the model then trains as a plain local model)."""
        for h in self._hooks:
            h.remove()
        self.__dict__["_hooks"] = []

    def extra_repr(self):
        return (f"world_size={self.comm.Get_size()}, bucket_mb={self.bucket_mb:g}, "
                f"buckets={len(self._buckets)}")


def _to_device(a):
    from .. import to_device
    return to_device(a)
