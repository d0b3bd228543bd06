# Checked data pointers: how a family module hands an ndarray's buffer to a C kernel.
# Included by every family that passes arrays to kernels as raw pointers (after
# `cimport numpy as cnp`).
#
# A kernel reads or writes elements [off, off + n) of an array's buffer, as one C type.
# _data / _data_at return that pointer.  In the FASTNN_DEBUG build (setup.py defines
# FASTNN_DEBUG=1 there) they first check that the array has the dtype the kernel reads,
# is C-contiguous (or, for _data_strided, that its strided extent fits) and that the
# extent fits in the array, and raise a clear TypeError / ValueError / IndexError
# otherwise -- Cython's boundscheck cannot see through a raw pointer, so this is what
# the debug build's bounds checks mean for the kernels.  In the release build
# (FASTNN_DEBUG=0) the check is a constant-false branch the C compiler removes: the
# pointer is the bare PyArray_DATA (no memoryview acquisition, no Python call; the
# small-call latency path stays as it was).

from cython cimport floating

cdef extern from *:
    """
    #ifndef FASTNN_DEBUG
    #define FASTNN_DEBUG 0
    #endif
    """
    const int FASTNN_DEBUG

# the kernel's element types
cdef enum:
    F32 = cnp.NPY_FLOAT32
    F64 = cnp.NPY_FLOAT64
    I64 = cnp.NPY_INT64
    I32 = cnp.NPY_INT32
    U8 = cnp.NPY_UINT8
    ANY_TYPE = -1

# Py_ssize_t arrays (the same type number as I64 on 64-bit platforms: not in the enum)
cdef int INTP = cnp.NPY_INTP

_SPAN_TYPES = {<int>F32: "float32", <int>F64: "float64", <int>I64: "int64", <int>I32: "int32",
               <int>U8: "uint8"}


cdef int _span_check(cnp.ndarray a, Py_ssize_t off, Py_ssize_t n, int typenum,
                     bint strided) except -1:
    """Raise unless ``a`` holds elements [off, off + n) of C type ``typenum`` for a kernel:
    the dtype matches (ANY_TYPE: any), the array is C-contiguous (strided: any strides,
    n counts every element, the whole strided extent must lie in the buffer) and the
    extent lies inside it.  Compiled in both builds (_span_check_py tests it); the kernels'
    pointers run it in the FASTNN_DEBUG build only."""
    cdef Py_ssize_t size = cnp.PyArray_SIZE(a)
    cdef bint type_ok = typenum == ANY_TYPE or cnp.PyArray_TYPE(a) == typenum
    if not type_ok and (typenum == I64 or typenum == INTP):
        # int64 has two type numbers where long and long long are both 64 bits
        type_ok = (cnp.PyArray_ISINTEGER(a) and cnp.PyArray_ISSIGNED(a)
                   and cnp.PyArray_ITEMSIZE(a) == (8 if typenum == I64 else <Py_ssize_t>sizeof(Py_ssize_t)))
    if not type_ok:
        raise TypeError(f"fastnn kernel pointer: array of dtype {a.dtype}, the kernel reads "
                        f"{_SPAN_TYPES.get(typenum, typenum)}")
    if strided:
        if off != 0 or n != size:
            raise IndexError(f"fastnn kernel pointer: a strided array is read whole "
                             f"({size} elements), not [{off}, {off + n})")
        return 0
    if not cnp.PyArray_IS_C_CONTIGUOUS(a):
        raise ValueError(f"fastnn kernel pointer: array of shape {(<object>a).shape} with "
                         f"strides {(<object>a).strides} is not C-contiguous")
    if off < 0 or n < 0 or off > size - n:
        raise IndexError(f"fastnn kernel pointer: elements [{off}, {off + n}) of an array of "
                         f"{size} (shape {(<object>a).shape})")
    return 0


cdef inline void* _data(cnp.ndarray a, Py_ssize_t n, int typenum) except? NULL:
    """PyArray_DATA(a) for a kernel that uses its first ``n`` elements as ``typenum``."""
    if FASTNN_DEBUG:
        _span_check(a, 0, n, typenum, False)
    return cnp.PyArray_DATA(a)


cdef inline void* _data_at(cnp.ndarray a, Py_ssize_t off, Py_ssize_t n,
                           int typenum) except? NULL:
    """&a[off] (flat, C order) for a kernel that uses elements [off, off + n)."""
    if FASTNN_DEBUG:
        _span_check(a, off, n, typenum, False)
    return <char*>cnp.PyArray_DATA(a) + off * cnp.PyArray_ITEMSIZE(a)


cdef inline void* _data_strided(cnp.ndarray a, int typenum) except? NULL:
    """PyArray_DATA(a) for a kernel that walks ``a`` by its own strides (the caller has
    checked the layout); the debug build checks the dtype."""
    if FASTNN_DEBUG:
        _span_check(a, 0, cnp.PyArray_SIZE(a), typenum, True)
    return cnp.PyArray_DATA(a)


cdef inline floating* _typed(cnp.ndarray a, Py_ssize_t n, floating tag) except? NULL:
    """_data as floating* (``tag`` picks float or double: _typed(a, n, z) in a body over a
    fused ``real z``)."""
    return <floating*>_data(a, n, F32 if floating is float else F64)


cdef inline void* _data_or_null(object a, Py_ssize_t n, int typenum) except? NULL:
    """_data, or NULL for None (an optional bias or output)."""
    return NULL if a is None else _data(<cnp.ndarray>a, n, typenum)


def _span_check_py(cnp.ndarray a, Py_ssize_t off, Py_ssize_t n, int typenum):
    """Test hook: the debug build's pointer check on (a, [off, off + n), typenum), in any
    build (typenum -1: any dtype)."""
    _span_check(a, off, n, typenum, False)


def _kernel_pointer_py(cnp.ndarray a, Py_ssize_t off, Py_ssize_t n, int typenum):
    """Test hook: take a kernel pointer exactly as the kernels do (_data_at): it raises for
    a bad span in the FASTNN_DEBUG build only.  Returns the build's FASTNN_DEBUG flag."""
    _data_at(a, off, n, typenum)
    return bool(FASTNN_DEBUG)
