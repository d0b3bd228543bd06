import numpy as np


def f64(a):
    """float64 working copy (None passes through)."""
    return None if a is None else np.asarray(a, dtype=np.float64)


def cast(a, like):
    """Result ``a`` in the dtype of ``like``."""
    return None if a is None else np.asarray(a, dtype=like.dtype)
