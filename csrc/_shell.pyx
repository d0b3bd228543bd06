# Fast argument checks for the functional shell's hot path.
#
# Checking dtype, C-contiguity, alignment and byte order of three arrays from Python
# costs about a microsecond; here it is a few flag tests.  Ops call this first and
# take their full (Python) validation path only when it says no -- so every error
# message still comes from one place.
cimport numpy as cnp

cnp.import_array()

cdef int _kind(object a) noexcept:
    if type(a) is not cnp.ndarray:
        return 0
    cdef cnp.ndarray arr = <cnp.ndarray>a
    cdef int flags = cnp.PyArray_FLAGS(arr)
    cdef int t = cnp.PyArray_TYPE(arr)
    if (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) == 0 or (flags & cnp.NPY_ARRAY_ALIGNED) == 0:
        return 0
    if not cnp.PyArray_ISNOTSWAPPED(arr):
        return 0
    if t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE:
        return t
    return 0


def host_floats(a, b=None, c=None):
    """Type number of ``a`` if a (and b, c unless None) are C-contiguous, aligned, native
    float32/float64 NumPy arrays of one dtype; 0 otherwise."""
    cdef int t = _kind(a)
    if t == 0:
        return 0
    if b is not None and _kind(b) != t:
        return 0
    if c is not None and _kind(c) != t:
        return 0
    return t
