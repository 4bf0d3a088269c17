"""Per-device choice of where CUDA memory comes from.

The default is CuPy's memory pool. Other allocators (stream-ordered pools, PyTorch's caching
allocator) plug in through the same two-method interface: ``alloc(device, nbytes) -> owner``.
"""
from __future__ import annotations

from ..device import get_device

__all__ = ["CupyPoolAllocator", "current_allocator", "set_allocator"]


class CupyPoolAllocator:
    """Device memory from CuPy's default memory pool (``cupy.cuda.alloc``)."""

    name = "cupy"

    def alloc(self, device, nbytes: int):
        import cupy
        with cupy.cuda.Device(device.ordinal):
            return cupy.cuda.alloc(nbytes)


_default = CupyPoolAllocator()
_per_device: dict = {}


def current_allocator(device=None):
    return _per_device.get(get_device(device).alias, _default)


def set_allocator(allocator, device=None) -> None:
    """Set the allocator new CUDA arrays of ``device`` are taken from (None: CuPy's pool)."""
    dev = get_device(device)
    if not dev.is_cuda:
        raise RuntimeError(f"set_allocator: device {dev} is not a CUDA device")
    if allocator is None:
        _per_device.pop(dev.alias, None)
    else:
        if not callable(getattr(allocator, "alloc", None)):
            raise TypeError(f"set_allocator: expected an object with alloc(device, nbytes), got {type(allocator).__name__}")
        _per_device[dev.alias] = allocator
