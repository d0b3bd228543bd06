# Included once by every compiled family module: its thread count and the rule for
# how many threads a piece of work is worth.  fastnn.set_num_threads sets every module.

cdef int _num_threads = 1


def _set_num_threads(int n):
    global _num_threads
    _num_threads = n if n > 0 else 1


def _get_num_threads():
    return _num_threads


cdef inline int _threads_for(Py_ssize_t work, Py_ssize_t grain) noexcept nogil:
    """Threads worth waking for ``work`` units when a thread should get >= ``grain``.

    Small calls stay on the calling thread: waking a team costs microseconds."""
    cdef Py_ssize_t t
    if _num_threads <= 1 or work < 2 * grain:
        return 1
    t = work // grain
    return <int>(t if t < _num_threads else _num_threads)
