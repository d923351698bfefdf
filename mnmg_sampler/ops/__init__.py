"""Sampling kernels: counter-based RNG, CPU kernels (numba njit), CUDA kernels (numba.cuda).

Kernels know nothing about ranks or requests: they take arrays and return arrays.
"""
