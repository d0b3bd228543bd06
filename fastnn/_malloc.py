"""Keep freed large buffers in the process (glibc malloc), so layer outputs reuse memory.

glibc serves each allocation above its mmap threshold (128 KiB, adapting up to 32 MiB)
with a fresh mmap and gives it back on free, so a layer that returns a 25 MiB array
page-faults every page of it on every call.  Measured on the 2-core benchmark machine: a
(8192, 768) layer_norm forward + backward spent over half its time in those faults
(5.2 ms with the settings below, 9.5-37 ms without), and allocating + filling a 24 MiB
array took 2.7 ms instead of 7.7 ms.  fastnn therefore raises the mmap threshold to
128 MiB and the trim threshold to 256 MiB at import: freed buffers up to that size stay
in the heap for the next call, as a caching allocator would keep them.  The cost is
resident memory: up to 256 MiB of freed memory may stay with the process.

Opt out with FASTNN_MALLOC_TUNE=0, or by setting glibc's own MALLOC_MMAP_THRESHOLD_ /
MALLOC_TRIM_THRESHOLD_ (or GLIBC_TUNABLES), which win.  Not glibc (musl, macOS,
Windows): nothing is changed.
"""
import ctypes
import os
import sys

MMAP_THRESHOLD = 128 << 20
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

state = {"tuned": False, "reason": "not applied"}


def tune():
    """Apply the thresholds once; returns True when they are in effect."""
    if state["tuned"]:
        return True
    env = os.environ
    if env.get("FASTNN_MALLOC_TUNE", "1") == "0":
        state["reason"] = "FASTNN_MALLOC_TUNE=0"
        return False
    if any(k in env for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                              "GLIBC_TUNABLES")):
        state["reason"] = "the user's glibc malloc settings"
        return False
    if not sys.platform.startswith("linux"):
        state["reason"] = "not Linux"
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only (musl has mallopt with other meanings)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        state["reason"] = "not glibc"
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    state["tuned"] = ok
    state["reason"] = "applied" if ok else "mallopt refused"
    return ok
