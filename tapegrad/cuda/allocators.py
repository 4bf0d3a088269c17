"""Per-device choice of where CUDA memory comes from.

Three allocators ship with tapegrad, selected per device with ``tg.set_allocator(name, device)``
or for a block of code with ``tg.ScopedAllocator(name, device)``:

``"cupy"`` (default)
    CuPy's memory pool (``cupy.cuda.alloc``): fast, cached, not stream ordered.
``"async"``
    CUDA's stream-ordered allocator (``cudaMallocAsync`` / ``cudaFreeAsync`` on the device's
    current stream). Inside a CUDA graph capture an allocation becomes a memory node of the
    graph, and a free becomes a free node.
``"torch"``
    PyTorch's CUDA caching allocator (``torch.cuda.caching_allocator_alloc`` on tapegrad's
    current stream, released with ``caching_allocator_delete``): tapegrad memory then shows up
    in ``torch.cuda.memory_allocated()`` and is recycled by torch's cache (R13). It lives in the
    torch bridge (``tapegrad.bridges.torch_memory``), which registers it here
    (``register_allocator``) the first time the name is asked for: this module imports no
    framework.

Any object with ``alloc(device, nbytes) -> owner`` (the owner has an int ``ptr`` and frees the
memory when it dies) is accepted too.

Whatever the setting, an allocation made while the device's current stream is being captured
into a CUDA graph is taken from a capture-safe allocator: the stream-ordered pool for captures
tapegrad began (so the memory belongs to the graph and is freed correctly after the graph is
destroyed), and, when the capture is another framework's, the allocator its bridge registered
for it (``register_capture_owner``: PyTorch's for ``torch.cuda.graph``, whose private graph
pool then owns the memory). CuPy's pool and a plain ``cudaMalloc`` are not legal in
a capture.

Nothing here imports CuPy or torch until memory is actually allocated.
"""
from __future__ import annotations

import importlib
import threading

from .. import frameworks
from ..device import get_device
from . import captures

__all__ = ["CupyPoolAllocator", "AsyncPoolAllocator", "GraphMemory",
           "current_allocator", "get_allocator", "set_allocator", "ScopedAllocator",
           "resolve_allocator", "allocator_for_stream", "register_allocator", "register_capture_owner"]

_MAX_U64 = (1 << 64) - 1
_ERR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation


# --------------------------------------------------------------------------- allocators

class CupyPoolAllocator:
    """Device memory from CuPy's current allocator (its default memory pool)."""

    name = "cupy"
    capture_safe = False
    takes_stream = True      # alloc(device, nbytes, stream=...)

    def alloc(self, device, nbytes: int, stream=None):
        import cupy
        with device.context_guard():
            return cupy.cuda.alloc(nbytes)

    def __repr__(self):
        return "CupyPoolAllocator()"


class AsyncPoolAllocator:
    """Stream-ordered device memory: ``cudaMallocAsync`` / ``cudaFreeAsync`` on a stream.

    Memory is allocated on the device's current stream (or ``stream``) and freed on the same
    stream when its owner dies, so it may be reused by later work on that stream without a
    device synchronisation. Work on *other* streams that uses the memory must be ordered
    before the owner dies (as with any stream-ordered allocator).

    Args:
        release_threshold: bytes the device's memory pool keeps cached instead of returning
            them to the driver at each synchronisation (set once per device, on first use
            outside a capture). Default: keep everything, as PyTorch's async backend does.
            None leaves the pool's setting alone.
    """

    name = "async"
    capture_safe = True
    takes_stream = True

    def __init__(self, release_threshold: int | None = _MAX_U64):
        if release_threshold is not None and (not isinstance(release_threshold, int) or release_threshold < 0):
            raise ValueError(f"AsyncPoolAllocator: release_threshold must be None or an int >= 0, got "
                             f"{release_threshold!r}")
        self.release_threshold = release_threshold
        self._configured: set = set()
        self._configure_lock = threading.Lock()

    def alloc(self, device, nbytes: int, stream=None):
        return _async_alloc(self, device, int(nbytes), stream if stream is not None else device.stream)

    def _configure(self, device, rt):
        if self.release_threshold is None or device.ordinal in self._configured:
            return
        with self._configure_lock:   # first allocations from several threads: configure once,
            if device.ordinal in self._configured:   # and none allocates before it is done
                return
            try:
                pool = rt.deviceGetMemPool(device.ordinal)
                rt.memPoolSetAttribute(pool, rt.cudaMemPoolAttrReleaseThreshold, self.release_threshold)
            except Exception:  # an old driver/CuPy without mempool attributes: keep the default
                pass
            self._configured.add(device.ordinal)

    def __repr__(self):
        return f"AsyncPoolAllocator(release_threshold={self.release_threshold})"


# ------------------------------------------------------------------- stream-ordered memory

def _runtime():
    import cupy
    return cupy, cupy.cuda.runtime


def stream_is_capturing(handle: int) -> bool:
    """True when the stream is being captured (or its capture was invalidated)."""
    cupy, rt = _runtime()
    try:
        return bool(rt.streamIsCapturing(int(handle)))
    except Exception:
        # CuPy raises RuntimeError for an invalidated capture, CUDARuntimeError for an implicit
        # capture dependency (legacy stream while others capture): treat both as capturing
        return True


def _is_capturing(device, handle: int) -> bool:
    """Whether work on ``handle`` is recorded into a graph right now (tapegrad's or anyone's)."""
    if captures.capture_for(device, handle) is not None:
        return True
    return stream_is_capturing(handle)


class _AsyncBlock:
    """Owner of one ``cudaMallocAsync`` allocation; frees it stream-ordered when it dies."""

    __slots__ = ("ptr", "nbytes", "device", "stream", "graph_memory", "__weakref__")

    def __init__(self, ptr, nbytes, device, stream, graph_memory):
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.stream = stream          # tapegrad Stream (kept alive so the free has a valid stream)
        self.graph_memory = graph_memory

    def __int__(self):
        return self.ptr

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if not ptr:
            return
        try:
            if self.graph_memory is not None:
                self.graph_memory.release(ptr)
            else:
                _free_outside_capture(self.device, ptr, self.stream)
        except Exception:  # never raise from a finalizer (interpreter shutdown, dead context)
            pass

    def __repr__(self):
        where = "graph" if self.graph_memory is not None else "stream-ordered"
        return f"<{where} allocation 0x{self.ptr:x} ({self.nbytes} bytes) on {self.device}>"


_deferred: list = []          # (device, ptr, stream): frees waiting for a capture to end
_deferred_lock = threading.Lock()


def _raw_free_async(device, ptr, stream):
    cupy, rt = _runtime()
    with device.context_guard():
        rt.freeAsync(int(ptr), int(stream.cuda_stream))


def _free_outside_capture(device, ptr, stream):
    """cudaFreeAsync on ``stream`` — unless the stream is capturing right now, in which case the
    free would be recorded into that graph (illegal for memory the graph did not allocate), so
    it is deferred until the capture ends."""
    if _is_capturing(device, stream.cuda_stream):
        with _deferred_lock:
            _deferred.append((device, ptr, stream))
        return
    _raw_free_async(device, ptr, stream)


def flush_deferred_frees() -> None:
    """Issue the frees that waited for a capture to end (called at capture end and launches)."""
    if not _deferred:
        return
    with _deferred_lock:
        items, _deferred[:] = list(_deferred), []
    keep = []
    for device, ptr, stream in items:
        try:
            if _is_capturing(device, stream.cuda_stream):
                keep.append((device, ptr, stream))
            else:
                _raw_free_async(device, ptr, stream)
        except Exception:
            pass
    if keep:
        with _deferred_lock:
            _deferred.extend(keep)


class GraphMemory:
    """Bookkeeping of the stream-ordered allocations one capture made.

    CUDA rules (graph memory nodes): an allocation made during a capture belongs to the graph;
    freed during the same capture it becomes a free node; otherwise it *escapes*: each launch
    of the graph (instantiated with auto-free-on-launch) frees the previous launch's instance
    and allocates it again at the same address, and after a launch it stays valid until freed
    with ``cudaFreeAsync`` — also after the graph is destroyed. Before any launch the address is
    not backed at all.

    So: an escaped allocation whose owner (the tapegrad array) is alive is left alone; when
    the owner dies, the instance the last launch made is freed on that launch's stream; and
    after every later launch the re-made instances of dead owners are freed right away.

    ``free_in_capture(ptr, stream)`` / ``free_outside(ptr, stream)`` issue the actual
    ``cudaFreeAsync`` (a free node, resp. a free outside any capture, deferred while the stream
    captures); both are injectable for tests.

    Allocate on the capture's own stream: an allocation on a stream forked from the capture is
    recorded into the graph too, but tapegrad can only treat it as foreign memory.
    """

    def __init__(self, device, capture_stream, foreign=False, free_in_capture=None, free_outside=None):
        self.device = device
        self.capture_stream = capture_stream
        self.foreign = foreign            # the graph belongs to another framework
        self.capturing = True
        self.failed = False
        self.launched = False
        self.live: dict = {}              # ptr -> nbytes: allocated in the capture, not freed in it
        self.dead: set = set()            # escaped allocations whose owner died
        self.outstanding: set = set()     # instances made by the last launch, not freed yet
        self.last_stream = None
        self._lock = threading.RLock()
        self._free_in_capture = free_in_capture or (lambda ptr, s: _raw_free_async(device, ptr, s))
        self._free_outside = free_outside or (lambda ptr, s: _free_outside_capture(device, ptr, s))

    @property
    def escaped_bytes(self) -> int:
        return sum(n for p, n in self.live.items() if p not in self.dead)

    def track(self, ptr: int, nbytes: int) -> None:
        with self._lock:
            self.live[ptr] = nbytes

    def release(self, ptr: int) -> None:
        """The owner of ``ptr`` died."""
        with self._lock:
            if ptr not in self.live:
                return
            if self.foreign:
                # someone else's graph: free on its capture stream — a free node while that
                # capture lasts, a plain stream-ordered free once it ended (best effort: the
                # foreign graph must have been launched for the address to be backed)
                del self.live[ptr]
                self._free_in_capture(ptr, self.capture_stream)
                return
            if self.capturing:               # a free node inside the graph
                del self.live[ptr]
                self._free_in_capture(ptr, self.capture_stream)
                return
            if self.failed:                  # the capture was discarded: nothing was ever allocated
                del self.live[ptr]
                return
            self.dead.add(ptr)
            if ptr in self.outstanding:
                self.outstanding.discard(ptr)
                self._free_outside(ptr, self.last_stream)

    def end_capture(self, ok: bool) -> None:
        with self._lock:
            self.capturing = False
            self.failed = not ok

    def after_launch(self, stream) -> None:
        """The graph was just launched on ``stream``: every escaped allocation exists again."""
        with self._lock:
            self.launched = True
            self.last_stream = stream
            for ptr in self.dead:            # nobody owns these: free them behind the launch
                self._free_outside(ptr, stream)
            self.outstanding = set(self.live) - self.dead


def _async_alloc(allocator, device, nbytes, stream):
    cupy, rt = _runtime()
    handle = int(stream.cuda_stream)
    state = captures.capture_for(device, handle)
    capturing = state is not None or stream_is_capturing(handle)
    flush_deferred_frees()
    nbytes = max(int(nbytes), 1)
    with device.context_guard():
        if not capturing:
            allocator._configure(device, rt)
        try:
            ptr = rt.mallocAsync(nbytes, handle)
        except rt.CUDARuntimeError as e:
            if capturing or getattr(e, "status", None) != _ERR_MEMORY_ALLOCATION:
                raise
            # out of memory: let pending frees on the stream complete, drop CuPy's cache, retry
            stream.synchronize()
            try:
                cupy.get_default_memory_pool().free_all_blocks()
            except Exception:
                pass
            try:
                ptr = rt.mallocAsync(nbytes, handle)
            except rt.CUDARuntimeError:
                raise MemoryError(f"out of memory allocating {nbytes} bytes on {device} "
                                  "(stream-ordered allocator)") from None
    memory = None
    if state is not None:
        memory = state.memory
    elif capturing:
        # a capture nobody told tapegrad about: the allocation belongs to that foreign graph
        memory = _foreign_memory(device, stream)
    if memory is not None:
        memory.track(ptr, nbytes)
    return _AsyncBlock(int(ptr), nbytes, device, stream, memory)


_foreign: dict = {}


def _foreign_memory(device, stream):
    """Bookkeeping for allocations made in a capture tapegrad did not begin (one per stream)."""
    key = (device.alias, int(stream.cuda_stream))
    m = _foreign.get(key)
    if m is None:
        with _lock:   # two threads allocating in one foreign capture must share its bookkeeping
            m = _foreign.get(key)
            if m is None:
                m = _foreign[key] = GraphMemory(device, stream, foreign=True)
    return m


# ------------------------------------------------------------------------ the setting

_default = CupyPoolAllocator()
_async = AsyncPoolAllocator()
_per_device: dict = {}
_lock = threading.Lock()

_NAMES = {
    "cupy": _default, "default": _default, "pool": _default,
    "async": _async, "mempool": _async, "stream_ordered": _async, "cuda_async": _async,
}
_VALID = ("'cupy' (CuPy's pool, the default), 'async' (stream-ordered cudaMallocAsync), 'torch' (PyTorch's "
          "caching allocator)")


def resolve_allocator(allocator):
    """The allocator object for a name, None (the default), or an allocator object.

    Raises:
        ValueError: an unknown name.
        TypeError: anything else that has no ``alloc(device, nbytes)`` method.
    """
    if allocator is None:
        return _default
    if isinstance(allocator, str):
        key = allocator.strip().lower()
        a = _NAMES.get(key)
        module = frameworks.allocator_module(key) if a is None else None
        if module is not None:
            importlib.import_module(module)   # the bridge's allocator module registers the name
            a = _NAMES.get(key)
        if a is None:
            raise ValueError(f"set_allocator: unknown allocator {allocator!r}; expected one of {_VALID}, "
                             "None, or an object with alloc(device, nbytes)")
        return a
    if isinstance(allocator, type):
        raise TypeError(f"set_allocator: expected an allocator instance or name, got the class "
                        f"{allocator.__name__} (call it: {allocator.__name__}())")
    if not callable(getattr(allocator, "alloc", None)):
        raise TypeError(f"set_allocator: expected a name ({_VALID}), None, or an object with "
                        f"alloc(device, nbytes), got {type(allocator).__name__}")
    return allocator


def _cuda_device(device, what):
    dev = get_device(device)
    if not dev.is_cuda:
        raise RuntimeError(f"{what}: device {dev} is not a CUDA device (allocators choose where CUDA "
                           "memory comes from; CPU arrays always use host memory)")
    return dev


def current_allocator(device=None):
    """The allocator new CUDA arrays of ``device`` are taken from (outside captures)."""
    return _per_device.get(get_device(device).alias, _default)


get_allocator = current_allocator


def set_allocator(allocator, device=None) -> None:
    """Choose where new CUDA arrays of ``device`` take their memory from.

    Args:
        allocator: ``"cupy"`` (default), ``"async"``, ``"torch"``, None (back to the default),
            or an object with ``alloc(device, nbytes) -> owner`` (``owner.ptr`` is the address;
            the memory is freed when the owner dies).
        device: a CUDA device (default: the current device).
    Raises:
        ValueError: unknown allocator name.
        TypeError: an object without ``alloc``.
        RuntimeError: ``device`` is not a CUDA device, or the allocator cannot serve it (e.g.
            ``"torch"`` without a CUDA-enabled PyTorch).
    """
    a = resolve_allocator(allocator)
    dev = _cuda_device(device, "set_allocator")
    check = getattr(a, "check", None)
    if callable(check):
        check(dev)
    with _lock:
        if a is _default:
            _per_device.pop(dev.alias, None)
        else:
            _per_device[dev.alias] = a


class ScopedAllocator:
    """``with tg.ScopedAllocator("torch", device="cuda:0"):`` — the allocator inside the block.

    Args: as ``set_allocator``. The previous setting of the device is restored on exit.
    """

    def __init__(self, allocator, device=None):
        self.allocator = resolve_allocator(allocator)
        self.device = device

    def __enter__(self):
        dev = _cuda_device(self.device, "ScopedAllocator")
        self._dev = dev
        with _lock:
            self._saved = _per_device.get(dev.alias)
        set_allocator(self.allocator, dev)
        return self.allocator

    def __exit__(self, *exc):
        with _lock:
            if self._saved is None:
                _per_device.pop(self._dev.alias, None)
            else:
                _per_device[self._dev.alias] = self._saved
        return False


# --------------------------------------------------------------------------- selection

_CAPTURE_OWNERS: list = []   # probe(device, handle) -> allocator or None (registered by bridges)


def register_allocator(names, allocator) -> None:
    """Make ``allocator`` selectable by each of ``names`` (lower case) in ``set_allocator``.

    A bridge registers its framework's allocator here (``tapegrad.bridges.torch_memory``:
    ``"torch"``); names listed in ``tapegrad.frameworks`` import their bridge module on first
    use, which registers them.
    """
    for n in names:
        _NAMES[n.strip().lower()] = allocator


def register_capture_owner(probe) -> None:
    """Add ``probe(device, handle) -> allocator or None``: asked when an allocation is made on a
    stream another framework is capturing; the first allocator returned serves it (the
    framework's graph pool)."""
    if probe not in _CAPTURE_OWNERS:
        _CAPTURE_OWNERS.append(probe)


def allocator_for_stream(device, stream):
    """The allocator an allocation on ``stream`` of ``device`` must use right now."""
    chosen = _per_device.get(device.alias, _default)
    handle = int(stream.cuda_stream)
    state = captures.capture_for(device, handle)
    if state is None and not stream_is_capturing(handle):
        return chosen
    if getattr(chosen, "capture_safe", False):
        return chosen
    if state is not None and not state.external:
        return _async                      # tapegrad's own capture: graph-owned memory
    for probe in _CAPTURE_OWNERS:          # e.g. torch.cuda.graph: its private graph pool
        owner = probe(device, handle)
        if owner is not None:
            return owner
    return _async


def alloc(device, nbytes: int, stream=None):
    """Allocate ``nbytes`` on ``device`` for work on ``stream`` (default: its current stream)."""
    stream = stream if stream is not None else device.stream
    a = allocator_for_stream(device, stream)
    if getattr(a, "takes_stream", False):
        return a.alloc(device, nbytes, stream=stream)
    return a.alloc(device, nbytes)
