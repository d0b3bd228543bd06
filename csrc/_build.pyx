# How this variant was compiled, for `fastnn info` and `fastnn --version`: whether the
# kernels are multi-threaded is a build-time fact (-fopenmp defines _OPENMP), so it is
# read from the C preprocessor here rather than guessed at run time.
cdef extern from *:
    """
    #ifdef _OPENMP
    #define FNN_OPENMP_VERSION _OPENMP
    #else
    #define FNN_OPENMP_VERSION 0
    #endif
    """
    int FNN_OPENMP_VERSION

# 0 for a serial build, else the OpenMP version date (e.g. 201511 for OpenMP 4.5)
OPENMP = FNN_OPENMP_VERSION
