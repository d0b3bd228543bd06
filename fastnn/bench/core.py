"""Benchmark core: cases, timing, the machine's ceilings.

A family contributes ``fastnn/bench/<family>.py`` with ``cases()`` returning a list of
``BenchCase``.  ``make()`` builds inputs once and returns zero-argument callables keyed
by implementation: ``"fastnn"`` (the cpu backend), ``"reference"`` (the NumPy twin;
None where it would take too long), ``"torch"`` (PyTorch CPU; None when torch is not
installed -- use ``torch_or_none()``).  Every callable runs the same work (e.g. forward
+ backward).  ``bytes``/``flops`` give the work's minimum memory traffic / arithmetic,
so the report shows achieved GB/s or GFLOP/s next to the measured ceilings.
"""
import dataclasses
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


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_threads(n):
    torch = torch_or_none()
    if torch is not None:
        torch.set_num_threads(n)


def time_fn(fn, min_time=0.25, max_reps=200, warmup=1):
    """Best-of time (seconds) over repeated calls, at least ``min_time`` in total."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    total = 0.0
    reps = 0
    while reps < max_reps and (total < min_time or reps < 3):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        total += dt
        reps += 1
    return best


def copy_bandwidth(nbytes=256 << 20, min_time=0.3):
    """Machine copy bandwidth, GB/s, counting read + write (np.copyto of 256 MiB, all threads)."""
    n = nbytes // 8
    a = np.ones(n, dtype=np.float64)
    b = np.empty_like(a)
    t = time_fn(lambda: np.copyto(b, a), min_time=min_time, max_reps=50)
    return 2 * a.nbytes / t / 1e9


def sgemm_rate(n=2048, min_time=0.3):
    """Machine float32 GEMM rate, GFLOP/s (BLAS, all threads)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.empty((n, n), np.float32)
    t = time_fn(lambda: np.matmul(a, b, out=c), min_time=min_time, max_reps=50)
    return 2.0 * n ** 3 / t / 1e9
