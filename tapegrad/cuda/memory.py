"""CUDA device memory, pinned host memory and copies, through CuPy.

Allocations return an *owner* object with an integer ``ptr``; the memory lives as long as the
owner does. Which pool device memory comes from is a per-device allocator setting (see
``tapegrad.cuda.allocators``); the default is CuPy's memory pool.
"""
from __future__ import annotations

__all__ = ["alloc", "alloc_pinned", "memcpy", "memset"]

_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction inferred from unified addressing


def alloc(device, nbytes: int):
    """Allocate ``nbytes`` on a CUDA device from its current allocator; returns the owner."""
    from .allocators import current_allocator
    return current_allocator(device).alloc(device, max(int(nbytes), 1))


def alloc_pinned(nbytes: int):
    """Allocate page-locked host memory; returns CuPy's PinnedMemoryPointer (owner, ``.ptr``)."""
    import cupy
    return cupy.cuda.alloc_pinned_memory(max(int(nbytes), 1))


def memcpy(dst: int, src: int, nbytes: int, stream: int = 0) -> None:
    """Asynchronous copy of ``nbytes`` between any host/device pointers on ``stream``."""
    if nbytes <= 0:
        return
    import cupy
    cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, _MEMCPY_DEFAULT, stream)


def memset(dst: int, value: int, nbytes: int, stream: int = 0) -> None:
    if nbytes <= 0:
        return
    import cupy
    cupy.cuda.runtime.memsetAsync(dst, value, nbytes, stream)
