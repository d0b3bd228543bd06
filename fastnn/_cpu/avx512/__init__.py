"""x86-64-v4 build of the kernels (AVX-512F/BW/DQ/VL, 512-bit vectors), chosen at import where
the CPU has them and the OS saves the ZMM/opmask registers (fastnn.cpu.cpu_variants)."""
