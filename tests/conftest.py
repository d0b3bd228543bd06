"""Test configuration.

The cuda backend runs under numba's CUDA simulator unless FASTNN_REAL_GPU=1 (a machine
with a GPU).  The simulator must be chosen before numba is first imported, so it is
set here, before anything imports fastnn.cuda.
"""
import os

if os.environ.get("FASTNN_REAL_GPU", "") in ("", "0"):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

try:
    from hypothesis import settings

    settings.register_profile("fastnn", deadline=None, max_examples=25, derandomize=True)
    settings.load_profile("fastnn")
except ImportError:  # pragma: no cover
    pass


def pytest_collection_modifyitems(config, items):
    if os.environ.get("FASTNN_REAL_GPU", "") in ("", "0"):
        skip = pytest.mark.skip(reason="needs a real CUDA GPU (set FASTNN_REAL_GPU=1 on a GPU machine)")
        for item in items:
            # the marker itself, not item.keywords: keywords also hold the names of the
            # directories above the test file (a checkout in a folder named "gpu")
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
