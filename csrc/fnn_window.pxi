# Window arithmetic shared by the conv and pool families (included by conv.pyx, pool.pyx).


cdef inline void _ow_range(Py_ssize_t off, Py_ssize_t sw, Py_ssize_t W, Py_ssize_t OW,
                           Py_ssize_t* o0, Py_ssize_t* o1) noexcept nogil:
    """Outputs ow in [o0, o1) read input column ow*sw + off inside [0, W)."""
    cdef Py_ssize_t a = 0, b
    if off < 0:
        a = (-off + sw - 1) // sw
    if W - 1 - off < 0:
        b = 0
    else:
        b = (W - 1 - off) // sw + 1
    if b > OW:
        b = OW
    if a > b:
        a = b
    o0[0] = a
    o1[0] = b
