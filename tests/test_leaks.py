"""No leaks: resident memory stays flat over 10,000 forward+backward calls of every op
family (small shapes, so the whole file runs in well under a minute), and over
10,000 rejected calls (error paths must free what they allocated too).

RSS comes from /proc/self/statm (Linux); elsewhere the test is skipped with that reason.
A leak of one small array per call (>= ~200 bytes) grows RSS by >= 2 MB over 10,000
calls, above the allowed slack.
"""
import ctypes
import gc
import os

import numpy as np
import pytest

import fastnn
from harness import as_tuple
from reliability_registry import FUZZ, MODULES, RngDraw

CALLS = 10_000
WARMUP = 500
SLACK_MB = 2.0

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                reason="RSS is read from /proc/self/statm (Linux only)")


def _trim():
    """Collect garbage and hand free heap pages back to the OS (glibc), so RSS tracks live
    memory: otherwise a leak can hide in pages that earlier tests freed."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


def rss_mb():
    _trim()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _families():
    fams = {}
    for op in FUZZ:
        fams.setdefault(op.family or op.name, []).append(op)
    return sorted(fams.items())


FAMILIES = _families()


def _growth(step, calls=CALLS):
    for _ in range(WARMUP):
        step()
    before = rss_mb()
    for _ in range(calls):
        step()
    return rss_mb() - before


@pytest.mark.parametrize("family", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_rss_flat_over_10000_calls(family):
    name, ops = family
    prepared = []
    for op in ops:
        args, kwargs = op.draw(RngDraw(1), np.float32)
        out, _ = op.fwd(*args, **kwargs)
        g = tuple(np.ones(np.shape(o), np.asarray(o).dtype) for o in as_tuple(out))
        prepared.append((op, args, kwargs, g if isinstance(out, tuple) else g[0]))
    state = {"i": 0}

    def step():
        op, args, kwargs, g = prepared[state["i"] % len(prepared)]
        state["i"] += 1
        out, ctx = op.fwd(*args, **kwargs)
        if op.bwd is not None:
            op.bwd(ctx, g)

    grown = _growth(step)
    assert grown < SLACK_MB, f"{name}: RSS grew {grown:.1f} MB over {CALLS} forward+backward calls"


def test_rss_flat_modules():
    mods = []
    for spec in MODULES:
        m = spec.build(np.float32)
        x = list(spec.make(np.random.default_rng(0), np.float32))
        out = m(*x)
        g = spec.grads(np.random.default_rng(0), out) if spec.grads else tuple(
            np.ones(np.shape(o), np.asarray(o).dtype) for o in as_tuple(out))
        mods.append((m, x, g))
    state = {"i": 0}

    def step():
        m, x, g = mods[state["i"] % len(mods)]
        state["i"] += 1
        m(*x)
        m.backward(*g)
        m.zero_grad()

    grown = _growth(step)
    assert grown < SLACK_MB, f"modules: RSS grew {grown:.1f} MB over {CALLS} forward+backward calls"


def test_rss_flat_on_error_paths():
    bad = []
    for op in FUZZ:
        args, kwargs = op.draw(RngDraw(2), np.float32)
        a = list(args)
        a[0] = np.asarray(a[0]).astype(np.int64)
        bad.append((op, a, kwargs))
    state = {"i": 0}

    def step():
        op, a, kwargs = bad[state["i"] % len(bad)]
        state["i"] += 1
        try:
            op.fwd(*a, **kwargs)
        except (TypeError, ValueError, IndexError):
            pass

    grown = _growth(step)
    assert grown < SLACK_MB, f"error paths: RSS grew {grown:.1f} MB over {CALLS} rejected calls"


def test_leak_check_detects_a_leak():
    """The measurement can fail: keeping 400 bytes per call is seen."""
    kept = []
    grown = _growth(lambda: kept.append(np.ones(50)))
    assert grown >= SLACK_MB, grown
