"""CUDA streams and events (through CuPy), and the per-device current stream.

A tapegrad stream either owns a CuPy stream or wraps a foreign handle (``cuda_stream=``),
keeping whatever object owns that handle alive through ``owner=``.
"""
from __future__ import annotations

from ..device import get_device

__all__ = ["Stream", "Event", "ScopedStream", "get_stream", "set_stream", "wait_stream",
           "wait_event", "record_event", "synchronize_stream", "synchronize_event"]

_CUDA_STREAM_NON_BLOCKING = 0x1


def _cupy():
    import cupy
    return cupy


class Stream:
    """A CUDA stream on one device.

    Args:
        device: the CUDA device (default: current).
        priority: stream priority for owned streams (lower is higher priority).
        blocking: owned streams are blocking (synchronise with the legacy default stream)
            unless ``blocking=False``.
        cuda_stream: wrap an existing ``cudaStream_t`` handle (int) instead of creating one.
        owner: any object that must stay alive while this stream is used (a torch stream...).
        blocking_known: for ``cuda_stream``: take ``blocking`` as the handle's flag instead of
            asking the driver (which a capture of the stream refuses, invalidating it).
    Raises:
        RuntimeError: ``device`` is not a CUDA device.
    """

    def __init__(self, device=None, priority: int = 0, blocking: bool = True, cuda_stream=None, owner=None,
                 blocking_known: bool = False):
        dev = get_device(device)
        if not dev.is_cuda:
            raise RuntimeError(f"Stream: device {dev} is not a CUDA device")
        cp = _cupy()
        self.device = dev
        self._owner = owner
        with dev.context_guard():
            if cuda_stream is None:
                self._cp = cp.cuda.Stream(non_blocking=not blocking, priority=priority)
                self.owned = True
            else:
                if not isinstance(cuda_stream, int):
                    raise TypeError(f"Stream(cuda_stream=...): expected an int handle, got "
                                    f"{type(cuda_stream).__name__}")
                self._cp = external_stream(cuda_stream, dev.ordinal)
                self.owned = False
        self.cuda_stream = int(self._cp.ptr)
        # known now, outside any capture: cudaStreamGetFlags is refused while a stream is being
        # captured (cudaErrorStreamCaptureUnsupported, and it invalidates the capture), and the
        # launch path asks a current stream whether it is blocking
        self._blocking = blocking if self.owned or blocking_known else None
        if self._blocking is None:
            try:
                self._blocking = self._query_blocking()
            except Exception:   # e.g. wrapped during a capture: asked again on first use
                self._blocking = None

    @property
    def cupy_stream(self):
        """The CuPy stream object (a context manager making this stream current for CuPy)."""
        return self._cp

    @property
    def is_blocking(self) -> bool:
        """False for streams created non-blocking (they do not sync with the legacy default stream)."""
        b = self._blocking
        if b is None:
            b = self._blocking = self._query_blocking()
        return b

    def _query_blocking(self) -> bool:
        if self.cuda_stream in (0, 1, 2):
            return True
        cp = _cupy()
        with self.device.context_guard():
            flags = cp.cuda.runtime.streamGetFlags(self.cuda_stream) if hasattr(cp.cuda.runtime, "streamGetFlags") \
                else _stream_get_flags(self.cuda_stream)
        return not (flags & _CUDA_STREAM_NON_BLOCKING)

    @property
    def priority(self) -> int:
        cp = _cupy()
        return int(cp.cuda.runtime.streamGetPriority(self.cuda_stream))

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new one when None) on this stream and return it."""
        event = event or Event(self.device)
        event._cp.record(self._cp)
        return event

    def wait_event(self, event: "Event") -> None:
        """Make future work on this stream wait for ``event`` (no host block)."""
        if not isinstance(event, Event):
            raise TypeError(f"wait_event: expected a tapegrad Event, got {type(event).__name__}")
        self._cp.wait_event(event._cp)

    def wait_stream(self, other: "Stream", event: "Event | None" = None) -> None:
        """Make future work on this stream wait for the work submitted so far to ``other``."""
        if not isinstance(other, Stream):
            raise TypeError(f"wait_stream: expected a tapegrad Stream, got {type(other).__name__}")
        self.wait_event(other.record_event(event))

    def synchronize(self) -> None:
        self._cp.synchronize()

    def __eq__(self, other):
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream and other.device is self.device

    def __hash__(self):
        return hash((self.device.alias, self.cuda_stream))

    def __repr__(self):
        return f"Stream({self.device}, handle=0x{self.cuda_stream:x}, {'owned' if self.owned else 'external'})"


def external_stream(handle: int, device_id: int):
    """A CuPy stream object for a foreign handle (CuPy 14 deprecates ExternalStream in favour
    of a protocol object tapegrad has no use for; the wrapper is still the right tool)."""
    import warnings
    cp = _cupy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cp.cuda.ExternalStream(handle, device_id)


def _stream_get_flags(handle: int) -> int:
    """cudaStreamGetFlags through the CUDA runtime CuPy loaded (older CuPy lacks a wrapper)."""
    import ctypes
    import ctypes.util
    cp = _cupy()
    lib = None
    for name in ("libcudart.so", f"libcudart.so.{cp.cuda.runtime.runtimeGetVersion() // 1000}",
                 ctypes.util.find_library("cudart")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise RuntimeError("Stream.is_blocking: cannot load the CUDA runtime to query stream flags")
    flags = ctypes.c_uint(0)
    err = lib.cudaStreamGetFlags(ctypes.c_void_p(handle), ctypes.byref(flags))
    if err != 0:
        raise RuntimeError(f"cudaStreamGetFlags failed with error {err}")
    return flags.value


class Event:
    """A CUDA event.

    Args:
        device: CUDA device (default: current).
        enable_timing: allow ``elapsed_time`` between two events.
    """

    def __init__(self, device=None, enable_timing: bool = False, interprocess: bool = False):
        dev = get_device(device)
        if not dev.is_cuda:
            raise RuntimeError(f"Event: device {dev} is not a CUDA device")
        cp = _cupy()
        self.device = dev
        with dev.context_guard():
            self._cp = cp.cuda.Event(block=False, disable_timing=not enable_timing, interprocess=interprocess)
        self.cuda_event = int(self._cp.ptr)

    def synchronize(self) -> None:
        self._cp.synchronize()

    @property
    def is_complete(self) -> bool:
        return bool(self._cp.done)

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds between this event and ``end``."""
        return _cupy().cuda.get_elapsed_time(self._cp, end._cp)


def get_stream(device=None) -> Stream:
    """The current stream of a CUDA device.

    Raises:
        RuntimeError: ``device`` is the CPU.
    """
    return get_device(device).stream


def set_stream(stream: Stream, device=None) -> None:
    """Make ``stream`` its device's current stream."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream: expected a tapegrad Stream, got {type(stream).__name__}")
    dev = stream.device if device is None else get_device(device)
    dev.stream = stream


def wait_stream(other: Stream, event: Event | None = None) -> None:
    """Make the current stream of ``other``'s device wait for ``other``."""
    get_stream(other.device).wait_stream(other, event)


def wait_event(event: Event) -> None:
    get_stream(event.device).wait_event(event)


def record_event(event: Event | None = None, device=None) -> Event:
    return get_stream(device if device is not None else (event.device if event else None)).record_event(event)


def synchronize_stream(stream=None) -> None:
    (stream if isinstance(stream, Stream) else get_stream(stream)).synchronize()


def synchronize_event(event: Event) -> None:
    event.synchronize()


class ScopedStream:
    """``with ScopedStream(s):`` makes ``s`` current on its device (and its device current).

    Args:
        stream: a tapegrad Stream, or None for a no-op scope.
        sync_enter: make ``stream`` wait for the previous current stream on entry.
        sync_exit: make the previous stream wait for ``stream`` on exit.
    """

    def __init__(self, stream: Stream | None, sync_enter: bool = True, sync_exit: bool = False):
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"ScopedStream: expected a tapegrad Stream or None, got {type(stream).__name__}")
        self.stream = stream
        self.sync_enter = sync_enter
        self.sync_exit = sync_exit

    def __enter__(self):
        if self.stream is None:
            return None
        from ..device import ScopedDevice
        dev = self.stream.device
        self._dev_scope = ScopedDevice(dev)
        self._dev_scope.__enter__()
        self._saved = dev.stream
        if self.sync_enter and self._saved is not self.stream:
            self.stream.wait_stream(self._saved)
        dev.stream = self.stream
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        dev = self.stream.device
        dev.stream = self._saved
        if self.sync_exit and self._saved is not self.stream:
            self._saved.wait_stream(self.stream)
        self._dev_scope.__exit__(*exc)
        return False
