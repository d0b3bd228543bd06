"""``fastnn bench``: fastnn's compiled kernels vs the NumPy reference (and PyTorch)."""
from .core import BenchCase, copy_bandwidth, sgemm_rate, time_fn, time_interleaved, torch_or_none  # noqa: F401
