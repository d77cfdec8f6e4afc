"""The replay engine: the Numba kernels, their plain-Python oracle, the grids and the arrival processes."""
