"""CUDA runtime pieces, all through CuPy, imported only when a CUDA device is used."""
