"""Compiled kernels (built from csrc/): one subpackage per instruction-set variant."""
