"""x86-64-v3 build of the kernels (AVX2 + FMA), chosen at import where the CPU has them."""
