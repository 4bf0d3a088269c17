"""CUDA device memory, pinned host memory and copies, through CuPy.

Allocations return an *owner* object with an integer ``ptr``; the memory lives as long as the
owner does. Which pool device memory comes from is a per-device allocator setting (see
``tapegrad.cuda.allocators``); the default is CuPy's memory pool. While the device's current
stream is being captured into a CUDA graph, allocations come from a capture-safe allocator
(stream-ordered, owned by the graph) whatever the setting.

Copies and fills are stream-ordered (``cudaMemcpyAsync`` / ``cudaMemsetAsync``), so device to
device copies and fills are captured into graphs; copies from pageable host memory are not
capturable.
"""
from __future__ import annotations

__all__ = ["alloc", "alloc_pinned", "memcpy", "memset"]

_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction inferred from unified addressing


def alloc(device, nbytes: int, stream=None):
    """Allocate ``nbytes`` on a CUDA device; returns the owner (``owner.ptr`` is the address).

    The memory comes from the device's allocator setting, or from a capture-safe allocator
    when ``stream`` (default: the device's current stream) is being captured.
    """
    from . import allocators
    return allocators.alloc(device, max(int(nbytes), 1), stream)


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
    """Asynchronous byte fill of ``nbytes`` at ``dst`` on ``stream``."""
    if nbytes <= 0:
        return
    import cupy
    cupy.cuda.runtime.memsetAsync(dst, value, nbytes, stream)
