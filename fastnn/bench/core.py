"""Benchmark core: cases, timing, the machine's ceilings.

A family contributes ``fastnn/bench/<family>.py`` with ``cases()`` returning a list of
``BenchCase``.  ``make()`` builds inputs once and returns zero-argument callables keyed
by implementation: ``"fastnn"`` (the cpu backend), ``"reference"`` (the NumPy twin;
None where it would take too long), ``"torch"`` (PyTorch CPU; None when torch is not
installed -- use ``torch_or_none()``).  Every callable runs the same work (e.g. forward
+ backward).  ``bytes``/``flops`` give the work's minimum memory traffic / arithmetic,
so the report shows achieved GB/s or GFLOP/s next to the measured ceilings.  A memory-
bound row's ceiling is the copy rate at its working-set size (``Ceilings``): a 16 MB input
sits in a 32 MB L3 and must not be compared with DRAM bandwidth alone.
"""
import dataclasses
import os
import time
from typing import Callable, Optional

import numpy as np


@dataclasses.dataclass
class BenchCase:
    family: str
    op: str
    shape: str
    make: Callable[[], dict]
    bytes: Optional[float] = None
    flops: Optional[float] = None
    min_time: float = 0.25      # seconds of repeated runs per implementation
    max_reps: int = 200
    # bytes of the distinct arrays the work touches (its ceiling is a copy of this size);
    # None: ``bytes`` (every array touched once)
    working_set: Optional[float] = None
    # the row updates its arrays in place (its ceiling includes an in-place update)
    inplace: bool = False


def last_level_cache_bytes():
    """The CPU's last-level cache in bytes, 0 where unknown: Linux's sysfs cache entries of
    cpu0 (the largest level's data or unified cache).  Not glibc's sysconf: on a Zen 3
    VM it reported 256 MiB for a 32 MiB L3."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = (0, 0)
    try:
        entries = os.listdir(base)
    except OSError:
        return 0
    for e in entries:
        if not e.startswith("index"):
            continue
        try:
            with open(os.path.join(base, e, "level")) as f:
                level = int(f.read())
            with open(os.path.join(base, e, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, e, "size")) as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1].upper(), 1)
        try:
            n = int(size[:-1] if mult > 1 else size) * mult
        except ValueError:
            continue
        best = max(best, (level, n))
    return best[1]


def reread_traffic(reread_bytes):
    """Bytes of a re-read that must come from memory: a backward that reads again what its
    forward just read can find up to a last-level cache of it still cached, so a
    forward + backward row's minimum traffic counts only the rest (a row counting it all
    showed 106-124% of the copy ceiling: mse_loss, 8M floats, 32 MiB L3)."""
    return max(0.0, float(reread_bytes) - last_level_cache_bytes())


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _best_call(fn, min_time, max_reps, min_reps):
    """Best time (seconds) of repeated calls: at least ``min_reps`` calls and ``min_time``
    seconds in total, at most ``max_reps`` calls."""
    best = float("inf")
    total = 0.0
    reps = 0
    while reps < max_reps and (total < min_time or reps < min_reps):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        total += dt
        reps += 1
    return best


def time_fn(fn, min_time=0.25, max_reps=200, warmup=1):
    """Best-of time (seconds) over repeated calls, at least ``min_time`` in total."""
    for _ in range(warmup):
        fn()
    return _best_call(fn, min_time, max_reps, 3)


def time_interleaved(fns, min_time=0.25, max_reps=200, rounds=3, warmup=1, per_round=None):
    """Best-of time (seconds) of each callable in ``fns`` (name -> callable; None values
    are left out), taken in ``rounds`` interleaved rounds: a round times every callable in
    turn for ``min_time / rounds`` seconds (at least one call each), and the order is
    reversed from one round to the next.  On a shared machine a slow spell then falls on
    every side of a comparison instead of on whichever one was being timed, and each
    side's best comes from the quieter moments of the same run.  Each callable is called
    at most ``max_reps`` times (plus ``warmup``), at least ``rounds`` times.

    ``per_round``: a dict to fill with each callable's best time in each round (name ->
    list, one entry a round).  Two callables' times from one round were taken moments
    apart (``min_time / rounds`` seconds each), so their ratio round by round shows how
    far a ratio of the overall bests moves with the machine's load."""
    names = [k for k, f in fns.items() if f is not None]
    for k in names:
        for _ in range(warmup):
            fns[k]()
    best = dict.fromkeys(names, float("inf"))
    cap = max(1, max_reps // rounds)
    for r in range(rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            t = _best_call(fns[k], min_time / rounds, cap, 1)
            best[k] = min(best[k], t)
            if per_round is not None:
                per_round.setdefault(k, []).append(t)
    return best


def copy_bandwidth(nbytes=256 << 20, min_time=0.3, threads=1, how="memcpy"):
    """Copy bandwidth, GB/s counting read + write, with a working set (source +
    destination) of ``nbytes``: 256 MiB is far past the last-level cache (the DRAM
    ceiling); a row's own size gives the ceiling that row can reach (its inputs may sit
    in L2/L3).  ``how``: "memcpy" (np.copyto: glibc streams large copies past the cache
    with non-temporal stores), "ufunc" (np.positive into the destination: ordinary
    stores, which keep a cache-sized destination in cache) -- ``threads`` Python threads
    copy one part each (NumPy releases the GIL; one copy runs on one core) -- or
    "kernel" (fastnn's own ``neg``: a copy with a sign flip on ``threads`` OpenMP
    threads, the kernels' threading without a Python thread pool's start-up), or
    "stream" (the same threading with non-temporal stores, as the kernels that stream a
    large output write it: no read-for-ownership of the destination), or "inplace" (neg
    into its own input: an optimizer's in-place update moves its bytes this way), or
    "update" (three arrays += a fourth on the same threads: an optimizer step's mix of
    streams -- AdamW updates a parameter and its two moments in place and reads the
    gradient -- four quarters of ``nbytes``, seven moved)."""
    n = max(nbytes // 8, 1024)
    if how == "update":      # four arrays of a quarter each, not two halves
        a, b = np.ones(n // 2, dtype=np.float32), None
    else:
        a = np.ones(n, dtype=np.float32)
        b = np.empty_like(a)
    op = np.copyto if how == "memcpy" else (lambda dst, src: np.positive(src, out=dst))
    ex = None
    if how in ("kernel", "stream", "inplace", "update"):
        import fastnn
        from fastnn._backend import backend
        if how == "kernel":
            fn = backend("cpu").neg
        elif how == "inplace":       # a[:] = -a: every line read and written back, no RFO
            neg = backend("cpu").neg
            fn = lambda a, b: neg(a, a)  # noqa: E731
        else:
            from fastnn.cpu import compiled_modules
            act = next(m for m in compiled_modules() if m.__name__.endswith(".activation"))
            if how == "stream":
                fn = act._stream_copy
            else:
                outs = [a] + [np.ones_like(a) for _ in range(2)]
                grad = np.ones_like(a)
                fn = lambda a, b: act._update_in_place(*outs, grad)  # noqa: E731
        before = fastnn.get_num_threads()
        fastnn.set_num_threads(threads)
        try:
            t = time_fn(lambda: fn(a, b), min_time=min_time, max_reps=200)
        finally:
            fastnn.set_num_threads(before)
        return (7 if how == "update" else 2) * a.nbytes / t / 1e9
    if threads <= 1:
        fn = lambda: op(b, a)  # noqa: E731
    else:
        import concurrent.futures as cf
        ex = cf.ThreadPoolExecutor(threads)
        bounds = [n * t // threads for t in range(threads + 1)]
        parts = [(b[bounds[t]:bounds[t + 1]], a[bounds[t]:bounds[t + 1]]) for t in range(threads)]

        def fn():
            list(ex.map(lambda p: op(p[0], p[1]), parts))
    try:
        t = time_fn(fn, min_time=min_time, max_reps=200)
    finally:
        if ex is not None:
            ex.shutdown()
    return 2 * a.nbytes / t / 1e9


class Ceilings:
    """Copy-bandwidth ceilings by working-set size: a memory-bound row is measured against
    a copy of its own working-set size, so an input that fits in cache is not compared
    with DRAM bandwidth.  Every measurement is a lower bound of what the machine can copy
    at that size, so the ceiling is the best one seen in the run; ``refresh`` measures
    again (the runner does so right after each row, so a row timed in a quiet moment is
    not compared with a ceiling measured in a busy one)."""

    def __init__(self, threads=1, min_time=0.2):
        self.threads = threads
        self.min_time = min_time
        self._cache = {}
        self._gemm = 0.0

    def gemm(self, refresh=False):
        """The best sgemm rate (GFLOP/s, all threads, 2048^3, 1024^3, 768^3) seen in the run: like a
        copy, each measurement is a lower bound of the machine's rate, so a compute-bound
        row is measured against the best one, taken again right after each such row."""
        if refresh or not self._gemm:
            self._gemm = max(self._gemm, sgemm_rate())
        return self._gemm

    #: past the last-level cache every size copies at DRAM speed: larger working sets are
    #: measured at this size (a generation row streams gigabytes of weights in all)
    DRAM_SIZE = 256 << 20

    def size_class(self, nbytes):
        """The size a ceiling is measured at: ``nbytes`` rounded to 64 KiB (at least 64 KiB),
        at most ``DRAM_SIZE``."""
        return min(max(int(round(nbytes / 65536.0)), 1) * 65536, self.DRAM_SIZE)

    def copy_at(self, nbytes, refresh=False, inplace=False):
        """The best copy rate (GB/s, read + write) at ``nbytes``: memcpy (streaming
        stores) and a ufunc copy (cached stores), on one thread and on ``threads``
        threads (thread start-up dominates small copies), and fastnn's neg kernel and
        non-temporal-store copy on ``threads`` OpenMP threads -- the fastest counts, so a
        kernel using either kind of store or the kernels' threading is measured against
        the better.  ``inplace``: for a row that updates its arrays in place (an optimizer
        step), an in-place update joins the candidates -- it pays no read-for-ownership,
        and in cache it runs 2-4x faster than any copy into a second array, so it is no
        ceiling for a kernel that writes a new output -- and so does an in-place update
        with an optimizer step's mix of streams (three arrays updated, a fourth read):
        with more streams in flight, and more reads than writes, it moves bytes faster
        than a one-array update, and AdamW's step did beat that one."""
        k = self.size_class(nbytes)
        key = (k, True) if inplace else k
        if refresh or key not in self._cache:
            rates = [copy_bandwidth(k, self.min_time, t, how)
                     for how in ("memcpy", "ufunc")
                     for t in sorted({1, self.threads})]
            try:
                rates.append(copy_bandwidth(k, self.min_time, self.threads, "kernel"))
                rates.append(copy_bandwidth(k, self.min_time, self.threads, "stream"))
                if inplace:
                    rates.append(copy_bandwidth(k, self.min_time, self.threads, "inplace"))
                    rates.append(copy_bandwidth(k, self.min_time, self.threads, "update"))
            except ImportError:      # the compiled kernels are not built
                pass
            if inplace:          # an in-place row may also run at a copy's rate
                rates.append(self.copy_at(nbytes))
            self._cache[key] = max(rates + [self._cache.get(key, 0.0)])
        return self._cache[key]


def sgemm_rate(sizes=(2048, 1024, 768), min_time=0.3):
    """Machine float32 GEMM rate, GFLOP/s, all threads: the best over square products of
    each size in ``sizes`` of BLAS's (NumPy's matmul) and fastnn's own (its linear op,
    x @ w.T: the own float32 GEMM of the avx512 build, BLAS elsewhere), so no
    compute-bound row can beat its ceiling by using the faster of the two.  1024^3's
    operands (12 MiB) stay in a large cache where 2048^3's (48 MiB) may not: on a 2-core
    Xeon with a 480 MiB L3 it ran 386-398 GFLOP/s against 333-366, and a 1024 x 768 ->
    768 linear layer read 104% of the 2048^3 rate.  768^3's (7 MiB, the size of that
    layer's) for the same reason on a Zen 5 with a 32 MiB L3 shared with other tenants:
    the layer read 101% of the best of 2048^3 and 1024^3."""
    best = 0.0
    for n in sizes:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        c = np.empty((n, n), np.float32)
        t = time_fn(lambda: np.matmul(a, b, out=c), min_time=min_time, max_reps=50)
        try:
            from fastnn.functional import linear
            t = min(t, time_fn(lambda: linear(a, b), min_time=min_time, max_reps=50))
        except ImportError:      # the compiled kernels are not built
            pass
        best = max(best, 2.0 * n ** 3 / t / 1e9)
    return best
