"""The reference backend: plain NumPy, readable, the test oracle.

Each family module computes in float64 (whatever the input dtype) and returns the
input's dtype, so float32 results of the compiled backends are checked against an
answer more precise than either.  Signatures match the compiled backends exactly.
"""
from .._backend import Backend, collect_ops


def make_backend():
    import fastnn.reference as pkg
    return Backend("reference", collect_ops(pkg))
