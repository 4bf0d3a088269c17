"""PyTorch's CUDA caching allocator as a tapegrad allocator (``tg.set_allocator("torch")``).

Registered with ``tapegrad.cuda.allocators`` when imported: as the ``"torch"``/``"pytorch"``
allocator names (``tapegrad.frameworks`` lists this module for them, so asking for the name
imports it), and as the owner of allocations made while PyTorch captures a CUDA graph
(``torch.cuda.graph``: its private pool). Imports torch only when memory is allocated or the
setting is checked, so choosing the name does not load torch.
"""
from __future__ import annotations

import sys

from tapegrad.cuda.allocators import register_allocator, register_capture_owner

__all__ = ["TorchAllocator", "TorchBlock", "TORCH_ALLOCATOR", "torch_capture_owner"]


class TorchAllocator:
    """Device memory from PyTorch's CUDA caching allocator (R13).

    Allocated with ``torch.cuda.caching_allocator_alloc(nbytes, device, stream)`` on tapegrad's
    current stream of the device and released with ``torch.cuda.caching_allocator_delete``
    when the owning array dies; it counts in ``torch.cuda.memory_allocated()``.
    """

    name = "torch"
    capture_safe = False
    takes_stream = True

    def alloc(self, device, nbytes: int, stream=None):
        import torch
        handle = (stream if stream is not None else device.stream).cuda_stream
        ptr = torch.cuda.caching_allocator_alloc(int(nbytes), device.ordinal, int(handle))
        return TorchBlock(int(ptr), int(nbytes), device, torch.cuda.caching_allocator_delete)

    def check(self, device):
        """Raise a clear error if PyTorch cannot allocate on ``device``."""
        try:
            import torch
        except ImportError:
            raise RuntimeError("set_allocator('torch'): PyTorch is not installed") from None
        if not torch.cuda.is_available():
            raise RuntimeError("set_allocator('torch'): this PyTorch build has no CUDA support or sees no GPU")
        if device.ordinal >= torch.cuda.device_count():
            raise RuntimeError(f"set_allocator('torch'): PyTorch does not see {device} "
                               f"(it sees {torch.cuda.device_count()} CUDA device(s))")

    def __repr__(self):
        return "TorchAllocator()"


class TorchBlock:
    """Owner of memory from torch's caching allocator; gives it back when it dies."""

    __slots__ = ("ptr", "nbytes", "device", "_delete", "__weakref__")

    def __init__(self, ptr, nbytes, device, delete):
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self._delete = delete

    def __int__(self):
        return self.ptr

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if ptr:
            try:
                self._delete(ptr)
            except Exception:  # interpreter shutdown: torch may already be gone
                pass

    def __repr__(self):
        return f"<torch caching-allocator block 0x{self.ptr:x} ({self.nbytes} bytes) on {self.device}>"




def torch_capture_owner(device, handle):
    """The torch allocator when ``handle`` is (by best guess) being captured by PyTorch
    (``torch.cuda.graph``), whose caching allocator then serves it from the graph's private
    pool; else None. Never imports torch: if nobody imported it, torch is not capturing."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        capturing = int(torch.cuda.current_stream(device.ordinal).cuda_stream) == int(handle)
    except Exception:  # noqa: BLE001  a torch without CUDA, or at shutdown: not torch's capture
        return None
    return TORCH_ALLOCATOR if capturing else None


TORCH_ALLOCATOR = TorchAllocator()
register_allocator(("torch", "pytorch"), TORCH_ALLOCATOR)
register_capture_owner(torch_capture_owner)
