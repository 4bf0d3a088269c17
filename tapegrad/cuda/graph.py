"""CUDA graph capture: ``ScopedCapture``, ``capture_begin`` / ``capture_end``, ``capture_launch``.

Capturing records the work issued to a stream (kernel launches, async copies and fills,
stream-ordered allocations and frees) into a CUDA graph instead of running it; replaying the
graph runs all of it with one host call. The API and semantics follow NVIDIA Warp::

    with tg.ScopedCapture() as capture:          # captures the device's current stream
        tg.launch(step, dim=n, inputs=[x, v])
    for _ in range(1000):
        tg.capture_launch(capture.graph)

Differences from Warp, all on the safe side: captures run in thread-local mode by default (an
unrelated thread's CUDA calls cannot invalidate them); ``ScopedCapture(stream=s)`` makes ``s``
current inside the block, so the work is recorded where it is captured; memory allocated
inside a capture belongs to the graph and is freed correctly after the graph is destroyed;
``external=True`` joins a capture begun by another framework (``torch.cuda.graph``, XLA).

On the CPU (``device="cpu"``, or a CPU current device) the same calls record the block's CPU
launches and memory operations instead of running them, and ``capture_launch`` replays them
(``tapegrad.cpu_capture``; Warp 1.19 does the same), so capture code runs on either device.

Nothing here imports CuPy before a CUDA device is actually used.
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
import threading

from .. import cpu_capture
from ..device import ScopedDevice, get_device, is_cuda_available
from . import allocators, captures
from .preload import preload
from .stream import ScopedStream, Stream

__all__ = ["Graph", "ScopedCapture", "capture_begin", "capture_end", "capture_launch",
           "is_capturing", "capture_retain", "relaxed_capture_mode", "graph_memory_in_use", "graph_memory_trim",
           "CAPTURE_MODE_GLOBAL", "CAPTURE_MODE_THREAD_LOCAL", "CAPTURE_MODE_RELAXED"]

# cudaStreamCaptureMode
CAPTURE_MODE_GLOBAL = 0
CAPTURE_MODE_THREAD_LOCAL = 1
CAPTURE_MODE_RELAXED = 2
_MODES = {"global": 0, "thread_local": 1, "threadlocal": 1, "thread-local": 1, "relaxed": 2}

_AUTO_FREE_ON_LAUNCH = 1          # CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0


# ---------------------------------------------------------------------------- helpers

def _cupy():
    import cupy
    return cupy


def _resolve(device, stream, what):
    """(device, stream) a capture call works on; clear errors for the CPU and bad types."""
    if stream is not None:
        if not isinstance(stream, Stream):
            raise TypeError(f"{what}: stream must be a tapegrad Stream (tg.Stream, tg.stream_from_torch(...)), "
                            f"got {type(stream).__name__}")
        if device is not None and get_device(device) is not stream.device:
            raise RuntimeError(f"{what}: the stream is on {stream.device}, but device={get_device(device)} was given")
        return stream.device, stream
    dev = get_device(device)
    if not dev.is_cuda:
        # (the hint only when the device was implicit: an explicit "cpu" must not import CuPy)
        hint = "" if device is not None or is_cuda_available() else " (no CUDA device is available on this machine)"
        raise RuntimeError(f"{what}: CUDA graph capture needs a CUDA device, got device {dev}{hint}; "
                           "graphs are a CUDA concept — CPU launches run immediately and cannot be captured")
    return dev, dev.stream


def _cpu_target(device, stream):
    """The CPU device when a capture call names the CPU (no stream given), else None."""
    if stream is not None:
        return None
    dev = get_device(device)
    return dev if dev.is_cpu else None


def _parse_mode(mode):
    if isinstance(mode, bool) or mode is None:
        raise TypeError(f"capture_mode: expected 'thread_local', 'global', 'relaxed' or 0/1/2, got {mode!r}")
    if isinstance(mode, str):
        m = _MODES.get(mode.strip().lower())
        if m is None:
            raise ValueError(f"capture_mode: expected 'thread_local', 'global' or 'relaxed', got {mode!r}")
        return m
    try:
        m = int(mode)
    except (TypeError, ValueError):
        raise TypeError(f"capture_mode: expected 'thread_local', 'global', 'relaxed' or 0/1/2, got {mode!r}") from None
    if m not in (0, 1, 2):
        raise ValueError(f"capture_mode: expected 0 (global), 1 (thread local) or 2 (relaxed), got {m}")
    return m


def _query_capturing(handle) -> bool:
    return allocators.stream_is_capturing(handle)


def is_capturing(device=None, stream=None) -> bool:
    """Whether the stream (default: the device's current stream) is being captured right now.

    False for the CPU. Counts captures begun by other frameworks too.
    """
    if stream is None:
        dev = get_device(device)
        if not dev.is_cuda:
            return cpu_capture.capturing()
        stream = dev.stream
    elif not isinstance(stream, Stream):
        raise TypeError(f"is_capturing: stream must be a tapegrad Stream, got {type(stream).__name__}")
    handle = stream.cuda_stream
    if captures.capture_for(stream.device, handle) is not None:
        return True
    if handle:    # a created stream names its context itself (a tape's save asks at every in-place step)
        return _query_capturing(handle)
    with stream.device.context_guard():    # the legacy stream is the current device's
        return _query_capturing(handle)


def capture_retain(obj, device=None, stream=None) -> None:
    """Keep ``obj`` alive for as long as the graph being captured on the stream lives.

    For objects the graph's nodes point into (a kernel's module, a buffer only the graph
    uses). A no-op when no tapegrad capture is active on the stream.
    """
    if stream is None:
        dev = get_device(device)
        if not dev.is_cuda:
            return
        stream = dev.stream
    s = captures.capture_for(stream.device, stream.cuda_stream)
    if s is not None and not s.external:
        s.retained.append(obj)


def _caller_scopes():
    """The namespaces visible where the capture is begun: the locals and the module globals of
    the first frame outside this module (what ``force_module_load`` searches for kernels)."""
    try:
        f = sys._getframe(1)
    except ValueError:
        return ()
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    if f is None:
        return ()
    return (f.f_locals, f.f_globals)


def _preload_modules(device) -> None:
    """Load, for ``device``, what the capture will likely launch before it begins: every
    preloader registered in ``tapegrad.cuda.preload`` (the kernel layer's loads the kernels
    visible where the capture is begun and, with several GPUs, every kernel already loaded for
    another device).

    A kernel that is not found this way and is first launched inside the capture is compiled
    on the host (NVRTC never touches the stream) and loaded at that launch, before its launch
    is recorded.
    """
    preload(device, _caller_scopes())


def _driver():
    """ctypes handle on the CUDA driver (libcuda), or None."""
    lib = getattr(_driver, "lib", 0)
    if lib != 0:
        return lib
    lib = None
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is not None:
        try:
            c = ctypes
            lib.cuGraphInstantiateWithFlags.argtypes = [c.POINTER(c.c_void_p), c.c_void_p, c.c_ulonglong]
            lib.cuGraphInstantiateWithFlags.restype = c.c_int
            lib.cuGetErrorName.argtypes = [c.c_int, c.POINTER(c.c_char_p)]
            lib.cuGetErrorName.restype = c.c_int
            lib.cuDeviceGet.argtypes = [c.POINTER(c.c_int), c.c_int]
            lib.cuDeviceGet.restype = c.c_int
            lib.cuDeviceGetGraphMemAttribute.argtypes = [c.c_int, c.c_int, c.c_void_p]
            lib.cuDeviceGetGraphMemAttribute.restype = c.c_int
            lib.cuDeviceGraphMemTrim.argtypes = [c.c_int]
            lib.cuDeviceGraphMemTrim.restype = c.c_int
            lib.cuThreadExchangeStreamCaptureMode.argtypes = [c.POINTER(c.c_int)]
            lib.cuThreadExchangeStreamCaptureMode.restype = c.c_int
        except AttributeError:  # a driver too old for graph memory nodes
            lib = None
    _driver.lib = lib
    return lib


@contextlib.contextmanager
def relaxed_capture_mode():
    """Let this thread make calls a capture normally forbids (``cudaFree(0)`` to create a
    context, a module load on an old driver) for the duration of the block.

    ``cuThreadExchangeStreamCaptureMode``: meant for library code that must do such a call
    while the caller may be capturing (e.g. the first load of a kernel). A no-op without a
    driver library.
    """
    lib = _driver()
    mode = ctypes.c_int(CAPTURE_MODE_RELAXED)
    swapped = lib is not None and lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)) == 0
    try:
        yield
    finally:
        if swapped:
            lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))   # puts the previous mode back


def _driver_error(lib, code) -> str:
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return f"{name.value.decode()} ({code})"
    except Exception:
        pass
    return f"CUresult {code}"


def _instantiate(graph_handle: int) -> int:
    """cudaGraphExec_t of a captured graph, with auto-free-on-launch (so a graph whose
    allocations outlive a launch can be launched again)."""
    lib = _driver()
    if lib is not None:
        exe = ctypes.c_void_p()
        err = lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), ctypes.c_void_p(graph_handle),
                                              _AUTO_FREE_ON_LAUNCH)
        if err != 0:
            raise RuntimeError(f"cuGraphInstantiateWithFlags failed: {_driver_error(lib, err)}")
        return int(exe.value or 0)
    return int(_cupy().cuda.runtime.graphInstantiate(graph_handle))


def _cu_device(lib, ordinal):
    d = ctypes.c_int()
    err = lib.cuDeviceGet(ctypes.byref(d), int(ordinal))
    if err != 0:
        raise RuntimeError(f"cuDeviceGet({ordinal}) failed: {_driver_error(lib, err)}")
    return d.value


def graph_memory_in_use(device=None) -> int:
    """Bytes of graph-owned memory currently allocated on a CUDA device (all graphs)."""
    dev = get_device(device)
    if not dev.is_cuda:
        return 0
    lib = _driver()
    if lib is None:
        raise RuntimeError("graph_memory_in_use: the CUDA driver library could not be loaded")
    with dev.context_guard():
        value = ctypes.c_uint64(0)
        err = lib.cuDeviceGetGraphMemAttribute(_cu_device(lib, dev.ordinal), _GRAPH_MEM_ATTR_USED_MEM_CURRENT,
                                               ctypes.byref(value))
    if err != 0:
        raise RuntimeError(f"cuDeviceGetGraphMemAttribute failed: {_driver_error(lib, err)}")
    return int(value.value)


def graph_memory_trim(device=None) -> None:
    """Give the physical memory graphs hold but do not use back to the driver."""
    dev = get_device(device)
    if not dev.is_cuda:
        return
    lib = _driver()
    if lib is None:
        return
    with dev.context_guard():
        lib.cuDeviceGraphMemTrim(_cu_device(lib, dev.ordinal))


# ------------------------------------------------------------------------------- Graph

class Graph:
    """An instantiated CUDA graph, made by ``capture_end`` / ``ScopedCapture``.

    Launch it with ``tg.capture_launch(graph, stream=None)`` (or ``graph.launch``). It is
    destroyed when the object dies (or with ``destroy()``); memory the graph allocated that is
    still held by live arrays stays valid until those arrays die.

    Attributes:
        device: the CUDA device it was captured on.
        graph: the ``cudaGraph_t`` handle (int). graph_exec: the ``cudaGraphExec_t`` (int).
        stream: the stream it was captured on.
    """

    def __init__(self, device, graph_exec: int, graph: int = 0, stream=None, memory=None, retained=()):
        self.device = device
        self.graph_exec = int(graph_exec)
        self.graph = int(graph or 0)
        self.stream = stream
        self._memory = memory
        self._retained = list(retained)
        self.launches = 0

    @property
    def allocates(self) -> bool:
        """True when the graph allocates memory that outlives a launch."""
        return bool(self._memory is not None and self._memory.live)

    def launch(self, stream=None) -> None:
        """Run the graph on ``stream`` (default: the device's current stream)."""
        if not self.graph_exec:
            raise RuntimeError("capture_launch: this graph was destroyed")
        st = self.device.stream if stream is None else stream
        if not isinstance(st, Stream):
            raise TypeError(f"capture_launch: stream must be a tapegrad Stream, got {type(st).__name__}")
        if st.device is not self.device:
            raise RuntimeError(f"capture_launch: the graph was captured on {self.device}, "
                               f"but the stream is on {st.device}")
        cp = _cupy()
        handle = int(st.cuda_stream)
        mem = self._memory
        with self.device.context_guard():
            if mem is not None and mem.live and (captures.capture_for(self.device, handle) is not None
                                                 or _query_capturing(handle)):
                raise RuntimeError("capture_launch: a graph that allocates memory cannot be launched inside "
                                   "another capture (CUDA does not allow graphs with memory nodes as child "
                                   "graphs); allocate its arrays before capturing it")
            cp.cuda.runtime.graphLaunch(self.graph_exec, handle)
            self.launches += 1
            if mem is not None and mem.live:
                mem.after_launch(st)
        allocators.flush_deferred_frees()

    def upload(self, stream=None) -> None:
        """Upload the graph to the device ahead of its first launch (optional)."""
        if not self.graph_exec:
            raise RuntimeError("Graph.upload: this graph was destroyed")
        st = self.device.stream if stream is None else stream
        cp = _cupy()
        with self.device.context_guard():
            cp.cuda.runtime.graphUpload(self.graph_exec, int(st.cuda_stream))

    def debug_dot_print(self, path: str, verbose: bool = True) -> None:
        """Write the graph's structure in GraphViz format (``cudaGraphDebugDotPrint``)."""
        if not self.graph:
            raise RuntimeError("Graph.debug_dot_print: this graph was destroyed")
        cp = _cupy()
        cp.cuda.runtime.graphDebugDotPrint(self.graph, str(path), 1 if verbose else 0)

    def destroy(self) -> None:
        """Destroy the executable graph now (in-flight launches complete first)."""
        exe, g = self.graph_exec, self.graph
        self.graph_exec = self.graph = 0
        if not (exe or g):
            return
        try:
            cp = _cupy()
            with self.device.context_guard():
                if exe:
                    cp.cuda.runtime.graphExecDestroy(exe)
                if g:
                    cp.cuda.runtime.graphDestroy(g)
        except Exception:  # interpreter shutdown / context already gone
            pass
        self._retained = []

    def __del__(self):
        if captures is None:   # interpreter shutdown: module globals are gone, and so is the context
            return
        if captures.any_active():
            # a graph dropped while any capture is active (e.g. `with ScopedCapture() as capture`
            # rebinding the name of a previous capture): destroying it now frees its memory
            # inside the capture and invalidates it, so destroy it when the capture ends
            _deferred_graphs.append((self.device, self.graph_exec, self.graph, self._retained))
            self.graph_exec = self.graph = 0
            return
        self.destroy()

    def __repr__(self):
        state = "destroyed" if not self.graph_exec else f"exec=0x{self.graph_exec:x}"
        return f"Graph({self.device}, {state}, launches={self.launches})"


# ------------------------------------------------------------------- begin / end / launch

def _install_cupy_allocator(state):
    """While capturing, CuPy operations tapegrad runs on the capture stream (strided copies,
    gradient accumulation) allocate their temporaries capture-safely too (thread-local)."""
    cp = _cupy()
    previous = cp.cuda.get_allocator()
    device = state.device

    def malloc(size):
        try:
            same = (cp.cuda.get_current_stream().ptr == state.handle
                    and cp.cuda.runtime.getDevice() == device.ordinal)
        except Exception:
            same = False
        if not same:
            return previous(size)
        owner = allocators.alloc(device, max(int(size), 1), state.stream)
        mem = cp.cuda.UnownedMemory(int(owner.ptr), max(int(size), 1), owner, device.ordinal)
        return cp.cuda.MemoryPointer(mem, 0)

    scope = cp.cuda.using_allocator(malloc)
    scope.__enter__()
    state.cupy_alloc_scope = scope


def _remove_cupy_allocator(state):
    scope, state.cupy_alloc_scope = state.cupy_alloc_scope, None
    if scope is not None:
        try:
            scope.__exit__(None, None, None)
        except Exception:
            pass


def capture_begin(device=None, stream=None, force_module_load=True, external=False,
                  capture_mode="thread_local") -> None:
    """Begin capturing the work issued to a stream into a CUDA graph.

    Args:
        device: the CUDA device whose current stream is captured (default: current device).
        stream: a tapegrad Stream to capture instead (its device is used).
        force_module_load: first compile and load, for the device, the kernels visible where
            the capture is begun (and, with several GPUs, those loaded on another device);
            None is treated as True. Not done for ``external=True`` (the foreign capture is
            already running).
        external: join a capture another framework has already begun on the stream
            (``torch.cuda.graph``, XLA command buffers); ``capture_end`` then returns None and
            leaves the foreign capture running.
        capture_mode: ``"thread_local"`` (default; other threads' CUDA calls cannot
            invalidate the capture), ``"global"`` or ``"relaxed"`` (cudaStreamCaptureMode).
    On the CPU, CPU launches and memory operations of this thread are recorded from here on
    instead of run (``capture_end`` returns the ``CpuGraph``).

    Raises:
        RuntimeError: the stream (or this thread's CPU) is already capturing (``external=False``)
            or is not capturing (``external=True``; always on the CPU); the legacy default
            stream; CUDA refused.
        TypeError/ValueError: bad ``stream`` / ``capture_mode``.
    """
    cpu = _cpu_target(device, stream)
    if cpu is not None:
        _parse_mode(capture_mode)
        if external:
            raise RuntimeError("capture_begin(external=True): there is no foreign capture to join on the CPU "
                               "(external captures are CUDA stream captures of another framework)")
        if force_module_load or force_module_load is None:
            _preload_modules(cpu)
        cpu_capture.begin()
        return
    dev, st = _resolve(device, stream, "capture_begin")
    mode = _parse_mode(capture_mode)
    handle = int(st.cuda_stream)
    cp = _cupy()
    rt = cp.cuda.runtime
    with dev.context_guard():
        ours = captures.capture_for(dev, handle)
        if external:
            if ours is None and not _query_capturing(handle):
                raise RuntimeError(f"capture_begin(external=True): external capture reported, but stream "
                                   f"0x{handle:x} on {dev} is not capturing (begin the other framework's "
                                   "capture first, and make its stream current with tg.ScopedStream)")
            memory = ours.memory if ours is not None else allocators.GraphMemory(dev, st, foreign=True)
        else:
            if handle in (0, 1):
                raise RuntimeError("capture_begin: the legacy default stream cannot be captured; "
                                   "use tapegrad's default stream (device.stream) or a tg.Stream()")
            if ours is not None or _query_capturing(handle):
                raise RuntimeError(f"capture_begin: graph capture already in progress on stream 0x{handle:x} "
                                   f"of {dev} (use external=True to join a capture another framework began)")
            if force_module_load or force_module_load is None:
                _preload_modules(dev)
            try:
                rt.streamBeginCapture(handle, mode)
            except rt.CUDARuntimeError as e:
                raise RuntimeError(f"capture_begin: cudaStreamBeginCapture failed on stream 0x{handle:x} "
                                   f"of {dev}: {e}") from None
            memory = allocators.GraphMemory(dev, st)
    state = captures.CaptureState(dev, st, bool(external), mode, memory)
    captures.push(state)
    try:
        _install_cupy_allocator(state)
    except Exception:  # an old CuPy without using_allocator: tapegrad's own allocations are still safe
        state.cupy_alloc_scope = None


def capture_end(device=None, stream=None):
    """End the capture begun by ``capture_begin`` on the stream and return its ``Graph``.

    Returns None for an ``external=True`` capture (the foreign framework owns the graph).

    Raises:
        RuntimeError: no capture is active on the stream; the capture was invalidated (an
            illegal call happened during it: a synchronisation, a host copy, ``cudaMalloc``,
            a launch that needed a module load on a driver older than CUDA 12.3...).
    """
    cpu = _cpu_target(device, stream)
    if cpu is not None:
        return cpu_capture.end(cpu)
    dev, st = _resolve(device, stream, "capture_end")
    handle = int(st.cuda_stream)
    top = captures.peek(dev, handle)
    if top is None:
        raise RuntimeError(f"capture_end: graph capture is not active on stream 0x{handle:x} of {dev} "
                           "(capture_begin was not called for this stream, or it already ended)")
    if not top.external and top.mode != CAPTURE_MODE_RELAXED and top.thread != threading.get_ident():
        raise RuntimeError("capture_end: the capture was begun on another thread; end it on that thread "
                           "(or begin it with capture_mode='relaxed')")
    state = captures.pop(dev, handle)
    _remove_cupy_allocator(state)
    if state.external:
        return None
    cp = _cupy()
    rt = cp.cuda.runtime
    graph_handle = 0
    try:
        with dev.context_guard():
            try:
                graph_handle = int(rt.streamEndCapture(handle))
            except Exception as e:
                state.memory.end_capture(ok=False)
                raise RuntimeError(
                    f"CUDA graph capture failed on {dev}: {e}. Something not capturable ran during the "
                    "capture: a synchronisation (numpy(), synchronize(), a host copy), a blocking "
                    "allocation, work on the legacy default stream, a stream forked from the capture "
                    "and not joined back, or a first kernel load on a driver older than CUDA 12.3 "
                    "(launch each kernel once before capturing).") from None
            try:
                exe = _instantiate(graph_handle)
            except Exception as e:
                state.memory.end_capture(ok=False)
                try:
                    rt.graphDestroy(graph_handle)
                except Exception:
                    pass
                raise RuntimeError(f"CUDA graph capture failed on {dev}: the graph could not be instantiated: "
                                   f"{e}") from None
        state.memory.end_capture(ok=True)
        return Graph(dev, exe, graph_handle, st, state.memory, state.retained)
    finally:
        allocators.flush_deferred_frees()
        _flush_deferred_graphs()


_deferred_graphs: list = []   # (device, exec, graph, retained) dropped during a capture


def _flush_deferred_graphs() -> None:
    """Destroy graphs whose destruction was put off until no capture is active."""
    if captures.any_active() or not _deferred_graphs:
        return
    items, _deferred_graphs[:] = list(_deferred_graphs), []
    for dev, exe, g, retained in items:
        Graph(dev, exe, g, retained=retained).destroy()


def capture_launch(graph, stream=None) -> None:
    """Launch a captured graph on ``stream`` (default: its device's current stream).

    Raises:
        TypeError: ``graph`` is not a Graph (e.g. None from an external capture), or a bad stream.
        RuntimeError: the stream is on another device than the graph; the graph was destroyed.
    """
    if isinstance(graph, cpu_capture.CpuGraph):
        graph.launch(stream)
        return
    if not isinstance(graph, Graph):
        if graph is None:
            raise TypeError("capture_launch: graph is None — an external capture (ScopedCapture(external=True)) "
                            "produces no graph (the framework that began it replays it), or the capture "
                            "did not complete")
        raise TypeError(f"capture_launch: expected a tapegrad Graph (ScopedCapture(...).graph), got "
                        f"{type(graph).__name__}")
    graph.launch(stream)


class ScopedCapture:
    """``with tg.ScopedCapture() as capture:`` records the block's work into ``capture.graph``
    (a CUDA ``Graph``; on the CPU a ``CpuGraph`` of the block's CPU launches and copies).

    Args:
        device: CUDA device whose current stream is captured (default: current device).
        stream: capture this tapegrad Stream instead; it is made current inside the block.
        force_module_load: compile and load the kernels visible here before capturing (see ``capture_begin``).
        external: join a capture begun by another framework on the (current) stream;
            ``capture.graph`` is then None.
        capture_mode: ``"thread_local"`` (default), ``"global"`` or ``"relaxed"``.
    Raises:
        RuntimeError: as ``capture_begin`` / ``capture_end``. If the block raises, the capture
            is ended and discarded and the block's exception propagates.
    """

    def __init__(self, device=None, stream=None, force_module_load=True, external=False,
                 capture_mode="thread_local"):
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"ScopedCapture: stream must be a tapegrad Stream, got {type(stream).__name__}")
        _parse_mode(capture_mode)
        self.device = device
        self.stream = stream
        self.force_module_load = force_module_load
        self.external = bool(external)
        self.capture_mode = capture_mode
        self.graph = None
        self.active = False
        self._scopes = []

    def __enter__(self):
        cpu = _cpu_target(self.device, self.stream)
        if cpu is not None:
            capture_begin(cpu, None, self.force_module_load, self.external, self.capture_mode)
            self._dev, self._stream, self._scopes = cpu, None, []
            self.graph = None
            self.active = True
            return self
        dev, st = _resolve(self.device, self.stream, "ScopedCapture")
        scopes = []
        try:
            if self.stream is not None and dev.stream is not st:
                # the stream is made current before capturing, so the wait on the previous
                # stream (sync_enter) is not part of the graph; a foreign capture cannot wait
                # on outside work, hence no sync when joining one
                s = ScopedStream(st, sync_enter=not self.external)
                s.__enter__()
                scopes.append(s)
            elif self.device is not None:
                s = ScopedDevice(dev)
                s.__enter__()
                scopes.append(s)
            capture_begin(dev, st, self.force_module_load, self.external, self.capture_mode)
        except BaseException:
            for s in reversed(scopes):
                s.__exit__(None, None, None)
            raise
        self._dev, self._stream, self._scopes = dev, st, scopes
        self.graph = None
        self.active = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.active:
            return False
        self.active = False
        try:
            g = capture_end(self._dev, self._stream)
            if exc_type is None:
                self.graph = g
            elif g is not None:
                g.destroy()
        except Exception:
            if exc_type is None:
                raise
            # the block already failed; a capture error is a consequence: keep the original
        finally:
            for s in reversed(self._scopes):
                s.__exit__(None, None, None)
            self._scopes = []
        return False
