"""CPU graph capture: while a capture is open on this thread, CPU launches and memory
operations are recorded instead of run; ``CpuGraph.launch()`` replays them in order.

Warp 1.19 captures on the CPU this way, so code written for ``ScopedCapture`` runs on either
device. ``tapegrad.cuda.graph`` (``capture_begin``/``capture_end``/``ScopedCapture``/
``capture_launch``) dispatches here for a CPU device; ``launch`` and ``memory_ops`` ask
``capturing()`` before running work on the CPU. What runs at once inside a capture, as in
Warp: allocations (new arrays are zero-filled at once), host reads (``numpy()``), Python code.

This module imports nothing from tapegrad (it sits beside ``device``).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable

__all__ = ["CpuGraph", "capturing", "record", "begin", "end", "discard", "open_count", "OPEN_COUNT_CELL"]

_tls = threading.local()
_lock = threading.Lock()
open_count = 0   # CPU captures open on any thread: the launch hot path reads only this when 0
# the same count where the native launch helper reads it with one load (written with open_count)
OPEN_COUNT_CELL = ctypes.c_long(0)


class CpuGraph:
    """The recorded CPU work of a capture; ``tg.capture_launch(graph)`` (or ``launch()``) runs it.

    Attributes:
        device: the CPU device. ops: the recorded callables, in order. launches: replays so far.
    """

    def __init__(self, device, ops, keep):
        self.device = device
        self.ops = tuple(ops)
        self._keep = tuple(keep)     # the arguments the recorded work points into stay alive
        self.launches = 0

    def launch(self, stream=None) -> None:
        """Run the recorded work (recorded again, as one step, inside another CPU capture).

        Raises:
            TypeError: a ``stream`` (CPU graphs run on the host; there are no CPU streams).
        """
        if stream is not None:
            raise TypeError(f"capture_launch: a CPU graph takes no stream, got {type(stream).__name__}")
        if capturing():
            record(self.launch, (self,))
            return
        for op in self.ops:
            op()
        self.launches += 1

    def destroy(self) -> None:
        """Drop the recorded work (the graph can no longer be launched)."""
        self.ops = ()
        self._keep = ()

    def __repr__(self):
        return f"CpuGraph({len(self.ops)} ops, launches={self.launches})"


def capturing() -> bool:
    """Whether a CPU capture is open on this thread."""
    return bool(getattr(_tls, "stack", None))


def record(op: Callable[[], None], keep=()) -> None:
    """Append ``op`` to the innermost open CPU capture; ``keep``: objects it needs alive."""
    ops, kept = _tls.stack[-1]
    ops.append(op)
    kept.extend(keep)


def begin() -> None:
    """Open a CPU capture on this thread.

    Raises:
        RuntimeError: a CPU capture is already open on this thread (as on a CUDA stream).
    """
    global open_count
    if capturing():
        raise RuntimeError("capture_begin: graph capture already in progress on the CPU of this thread")
    _tls.stack = [([], [])]
    with _lock:
        open_count += 1
        OPEN_COUNT_CELL.value = open_count


def end(device) -> CpuGraph:
    """Close this thread's CPU capture and return its graph.

    Raises:
        RuntimeError: no CPU capture is open on this thread.
    """
    if not capturing():
        raise RuntimeError("capture_end: graph capture is not active on the CPU of this thread "
                           "(capture_begin was not called for it, or it already ended)")
    ops, kept = _pop()
    return CpuGraph(device, ops, kept)


def _pop():
    global open_count
    with _lock:
        open_count -= 1
        OPEN_COUNT_CELL.value = open_count
    return _tls.stack.pop()


def discard() -> None:
    """Close this thread's CPU capture, dropping what it recorded (a block that raised)."""
    if capturing():
        _pop()
