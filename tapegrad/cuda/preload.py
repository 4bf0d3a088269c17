"""What a CUDA graph capture loads before it begins: a table the kernel layer registers into.

CUDA forbids some calls a first kernel load may make (``cudaFree(0)`` to create the context;
module loading itself before CUDA 12.3) while a stream is captured, so ``capture_begin`` first
asks every registered preloader to load, for the capture device, what the capture will likely
launch. ``tapegrad.lang.kernel`` registers the kernel preloader; this module imports nothing,
so registering costs nothing at ``import tapegrad``.
"""
from __future__ import annotations

__all__ = ["register_capture_preloader", "preload"]

_PRELOADERS: list = []


def register_capture_preloader(fn) -> None:
    """Add ``fn(device, scopes)``, called before a capture begins on ``device``.

    Args:
        fn: loads what the capture may launch; ``scopes`` are the namespaces (dicts) visible
            where the capture is begun: the calling function's locals, then its module's globals.
    """
    if fn not in _PRELOADERS:
        _PRELOADERS.append(fn)


def preload(device, scopes) -> None:
    """Run every registered preloader for ``device`` (``capture_begin`` calls this)."""
    for fn in list(_PRELOADERS):
        fn(device, scopes)
