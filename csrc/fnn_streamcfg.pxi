# The threshold from which a family writes large outputs with non-temporal stores
# (fnn_stream.h), for the families that stream (norm, softmax).  Included by their .pyx.

cdef extern from "fnn_stream.h" nogil:
    Py_ssize_t fnn_stream_min_bytes()
    Py_ssize_t fnn_stream_set_min_bytes(Py_ssize_t n)
    Py_ssize_t fnn_llc_bytes()


def _stream_min_bytes(Py_ssize_t n=-1):
    """_stream_min_bytes(n=-1) -> bytes.  This module's threshold for non-temporal stores
    of an output (16 MiB, or half the last-level cache where that is more).  n > 0 sets
    it and n == 0 restores the machine's default, returning the previous value (tests:
    both store paths on any machine).  Not an op."""
    if n < 0:
        return fnn_stream_min_bytes()
    return fnn_stream_set_min_bytes(n)


def _llc_bytes():
    """The last-level cache size (bytes) the default threshold is half of: Linux's sysfs
    entries of cpu0, else glibc's sysconf; 0 where neither says.  Not an op."""
    return fnn_llc_bytes()
