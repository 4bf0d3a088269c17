"""The captures in progress: which CUDA graph capture owns work on a stream right now.

A table the capture API (``tapegrad.cuda.graph``) writes and the allocators
(``tapegrad.cuda.allocators``) read, so an allocation made during a capture comes from a
capture-safe pool. It imports nothing: both ask it, neither imports the other's internals.
"""
from __future__ import annotations

import threading

__all__ = ["CaptureState", "capture_for", "push", "pop", "peek", "any_active"]


class CaptureState:
    """One capture in progress on one stream (tapegrad's own, or a foreign one it joined).

    Attributes:
        device, stream: where it captures; handle: the stream's ``cudaStream_t``.
        external: joined a capture another framework began. mode: the cudaStreamCaptureMode.
        thread: the thread that began it. memory: the graph's ``GraphMemory``.
        retained: objects kept alive with the graph. cupy_alloc_scope: CuPy's allocator scope.
    """

    __slots__ = ("device", "stream", "handle", "external", "mode", "thread", "memory",
                 "retained", "cupy_alloc_scope")

    def __init__(self, device, stream, external, mode, memory):
        self.device = device
        self.stream = stream
        self.handle = int(stream.cuda_stream)
        self.external = external
        self.mode = mode
        self.thread = threading.get_ident()
        self.memory = memory
        self.retained: list = []
        self.cupy_alloc_scope = None


_registry: dict = {}              # (device alias, stream handle) -> [ CaptureState, ... ]
_registry_lock = threading.Lock()


def any_active() -> bool:
    """Whether any capture is in progress (on any stream)."""
    return bool(_registry)


def capture_for(device, handle):
    """The capture that owns allocations on this stream right now, or None.

    A tapegrad capture wins over any external join stacked on it; otherwise the innermost
    external join.
    """
    if not _registry:
        return None
    states = _registry.get((device.alias, int(handle)))
    if not states:
        return None
    for s in states:
        if not s.external:
            return s
    return states[-1]


def push(state) -> None:
    """Register ``state`` (``capture_begin``)."""
    with _registry_lock:
        _registry.setdefault((state.device.alias, state.handle), []).append(state)


def pop(device, handle):
    """Remove and return the innermost capture on the stream (``capture_end``), or None."""
    with _registry_lock:
        key = (device.alias, int(handle))
        states = _registry.get(key)
        if not states:
            return None
        s = states.pop()
        if not states:
            del _registry[key]
        return s


def peek(device, handle):
    """The innermost capture on the stream, or None."""
    states = _registry.get((device.alias, int(handle)))
    return states[-1] if states else None
