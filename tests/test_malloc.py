"""fastnn keeps freed large buffers in the heap (glibc), with an opt-out."""
import os
import subprocess
import sys

import pytest

PROBE = r"""
import resource, numpy as np, fastnn
from fastnn import _malloc
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
x = np.ones((4096, 1024), np.float32)
fastnn.functional.softmax(x, dim=-1)          # first call maps the memory
f0 = faults()
for _ in range(5):
    fastnn.functional.softmax(x, dim=-1)      # 16 MiB out each call
print(_malloc.state["tuned"], _malloc.state["reason"], faults() - f0)
"""


def _run(extra_env):
    env = dict(os.environ)
    for k in ("FASTNN_MALLOC_TUNE", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
              "GLIBC_TUNABLES"):
        env.pop(k, None)
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0] == "True", " ".join(out[1:-1]), int(out[-1])


glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")


@glibc
def test_outputs_reuse_memory_without_page_faults():
    tuned, reason, faults = _run({})
    assert tuned and reason == "applied"
    # five 16 MiB outputs: hundreds of page faults (thousands without
    # transparent huge pages) without the tuning, ~0 with it
    assert faults < 50


@glibc
def test_opt_out_and_user_settings_win():
    tuned, reason, faults = _run({"FASTNN_MALLOC_TUNE": "0"})
    assert not tuned and reason == "FASTNN_MALLOC_TUNE=0"
    tuned, reason, _ = _run({"MALLOC_TRIM_THRESHOLD_": "1000000"})
    assert not tuned and "user" in reason
