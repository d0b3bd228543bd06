# The OpenMP runtime of the compiled kernels, loaded at `import fastnn` (fastnn.cpu.
# load_openmp): threadpoolctl only governs the libraries loaded when a threadpool_limits
# block starts, and the families load lazily at their first call -- which may be inside
# that block.  This module is small and pulls in nothing else (no BLAS); it carries the
# runtime's thread-count entry points so fastnn.get_num_threads / set_num_threads work
# before any family is loaded.

include "fnn_runtime.pxi"
