"""cuda kernels, one module per op family (each lists its kernels in OPS)."""
