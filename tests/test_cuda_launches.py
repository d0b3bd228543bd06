"""Every kernel of the cuda backend is compiled and launched, for float32 and float64.

Every family is imported and built first (tests/cuda_launch_all.py), so the test checks
the same full set of kernels whether it runs alone or after the rest of the suite (in a
full run most kernels were already launched by the shared harness and only the rest are
run here).
"""
import os
import sys

import pytest

import fastnn

if "cuda" not in fastnn.available_backends():  # pragma: no cover - numba-cuda not installed
    pytest.skip("the cuda backend (numba-cuda or its simulator) is not available here",
                allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_launch_all import launch_every_kernel  # noqa: E402


def test_every_kernel_is_compiled_and_launched():
    missing = launch_every_kernel()
    assert not missing, f"kernels never launched: {missing}"

