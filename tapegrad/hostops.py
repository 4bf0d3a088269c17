"""Small host-side helpers compiled once (like kernels) to batch work that would otherwise cost
one ctypes call per buffer: zeroing many gradient buffers in ``Tape.zero()``."""
from __future__ import annotations

import ctypes

__all__ = ["ZeroPlan"]

_SOURCE = r"""
#include <cstddef>
#include <cstring>
extern "C" __attribute__((visibility("default"))) void tg_zero_many(void* const* ptrs, const size_t* sizes, size_t n) {
    for (size_t i = 0; i < n; ++i) std::memset(ptrs[i], 0, sizes[i]);
}
"""
_fn = None


def _load():
    global _fn
    if _fn is None:
        try:
            from .compile import build_cpu
            lib = ctypes.CDLL(build_cpu(_SOURCE, "tg_hostops"))
            f = lib.tg_zero_many
            f.restype = None
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            _fn = f
        except Exception:  # no compiler: fall back to one memset per buffer
            _fn = False
    return _fn


class ZeroPlan:
    """Host buffers ``[(ptr, nbytes), ...]`` zeroed by one native call per ``run()``."""

    def __init__(self, regions):
        n = len(regions)
        self._regions = regions
        self._ptrs = (ctypes.c_void_p * n)(*[p for p, _ in regions])
        self._sizes = (ctypes.c_size_t * n)(*[s for _, s in regions])
        self._n = n

    def run(self):
        if not self._n:
            return
        fn = _load()
        if fn:
            fn(self._ptrs, self._sizes, self._n)
        else:
            for p, s in self._regions:
                ctypes.memset(p, 0, s)
