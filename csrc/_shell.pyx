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


def norm_fast_args(x, normalized_shape, weight, bias, eps):
    """F.layer_norm's fast-path test in one call: the normalised size D when ``x``,
    ``weight``, ``bias`` pass host_floats, ``normalized_shape`` is an int or a 1-tuple
    of one equal to x's last dim, weight/bias are None or of shape (D,), and ``eps`` is
    a positive float; -1 otherwise (the caller then validates in full)."""
    cdef Py_ssize_t D
    if type(normalized_shape) is tuple:
        if len(<tuple>normalized_shape) != 1:
            return -1
        normalized_shape = (<tuple>normalized_shape)[0]
    if type(normalized_shape) is not int or type(eps) is not float or not (<double>eps > 0.0):
        return -1
    if host_floats(x, weight, bias) == 0:
        return -1
    cdef cnp.ndarray a = <cnp.ndarray>x
    D = normalized_shape
    if cnp.PyArray_NDIM(a) < 1 or cnp.PyArray_DIMS(a)[cnp.PyArray_NDIM(a) - 1] != D:
        return -1
    for p in (weight, bias):
        if p is not None and (cnp.PyArray_NDIM(<cnp.ndarray>p) != 1
                              or cnp.PyArray_DIMS(<cnp.ndarray>p)[0] != D):
            return -1
    return D
