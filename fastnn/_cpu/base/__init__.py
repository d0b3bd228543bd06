"""x86-64 baseline build of the kernels (runs on any CPU of the architecture)."""
