"""Warp's math constants (``wp.pi``, ``wp.e``, ``wp.inf``, ``wp.nan``, ``wp.tau``...).

Plain Python floats: usable on the host and, as module globals, inside kernels (the kernel
language turns a float global into a literal).
"""
from __future__ import annotations

import math

__all__ = ["pi", "e", "inf", "nan", "tau", "half_pi", "phi", "ln2", "ln10", "log2e", "log10e",
           "PI", "E", "INF", "NAN", "TAU", "HALF_PI", "PHI", "LN2", "LN10", "LOG2E", "LOG10E"]

pi = PI = math.pi
e = E = math.e
inf = INF = math.inf
nan = NAN = math.nan
tau = TAU = math.tau
half_pi = HALF_PI = math.pi / 2
phi = PHI = (1.0 + math.sqrt(5.0)) / 2.0
ln2 = LN2 = math.log(2.0)
ln10 = LN10 = math.log(10.0)
log2e = LOG2E = math.log2(math.e)
log10e = LOG10E = math.log10(math.e)
