"""Devices: ``"cpu"`` always, ``"cuda:N"`` when CuPy sees a GPU.

Nothing CUDA is imported until a CUDA device is asked for, so a CPU-only machine needs
only numpy and a C++ compiler.

The ``stream`` properties import ``tapegrad.cuda.stream`` on first use: the one permitted lazy
import of the package (a stream belongs to a device, a device hands out its current stream,
and ``cuda.stream`` imports this module), documented in docs/architecture.md. Neither module
imports CuPy before a CUDA device is used.
"""
from __future__ import annotations

import threading

__all__ = ["Device", "get_device", "set_device", "ScopedDevice", "get_cuda_device_count",
           "is_cuda_available", "is_cpu_available", "get_cuda_devices", "synchronize",
           "synchronize_device", "get_preferred_device"]

_CUDA_DEV_ATTR_SM_COUNT = 16   # cudaDevAttrMultiProcessorCount


class Device:
    """A compute device. Compare with ``==`` or by ``alias`` ("cpu", "cuda:0").

    CUDA devices carry a current stream (``device.stream``), swapped by ``ScopedStream``.
    """

    # the field ``stream`` returns whenever it is set (the native launch helper reads it directly)
    STREAM_FIELD = "_stream"

    def __init__(self, alias: str, ordinal: int):
        self.alias = alias
        self.ordinal = ordinal
        self._stream = None
        self._null_stream = None
        self._arch = None
        self._name = None

    # -- identity ---------------------------------------------------------------------------
    @property
    def is_cpu(self) -> bool:
        return self.ordinal < 0

    @property
    def is_cuda(self) -> bool:
        return self.ordinal >= 0

    def __str__(self):
        return self.alias

    def __repr__(self):
        return f"Device({self.alias!r})"

    def __eq__(self, other):
        if isinstance(other, Device):
            return self is other
        if isinstance(other, str):
            try:
                return get_device(other) is self
            except (ValueError, RuntimeError):
                return False
        return NotImplemented

    def __hash__(self):
        return hash(self.alias)

    # -- CUDA properties --------------------------------------------------------------------
    def _require_cuda(self, what):
        if not self.is_cuda:
            raise RuntimeError(f"{what}: device {self.alias} is not a CUDA device")

    @property
    def arch(self) -> int:
        """Compute capability as an int (e.g. 90 for sm_90)."""
        self._require_cuda("Device.arch")
        if self._arch is None:
            import cupy
            cc = cupy.cuda.Device(self.ordinal).compute_capability
            self._arch = int(cc)
        return self._arch

    @property
    def sm_count(self) -> int:
        """Number of streaming multiprocessors (CUDA only; 0 when the driver does not say)."""
        self._require_cuda("Device.sm_count")
        n = self.__dict__.get("_sm_count")
        if n is None:
            import cupy
            try:   # one attribute query (Device.attributes asks the driver for all ~130: 2 ms)
                n = int(cupy.cuda.runtime.deviceGetAttribute(_CUDA_DEV_ATTR_SM_COUNT, self.ordinal))
            except Exception:
                n = int(cupy.cuda.Device(self.ordinal).attributes.get("MultiProcessorCount", 0))
            self._sm_count = n
        return n

    @property
    def name(self) -> str:
        if self.is_cpu:
            import platform
            return platform.processor() or "cpu"
        if self._name is None:
            import cupy
            props = cupy.cuda.runtime.getDeviceProperties(self.ordinal)
            self._name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return self._name

    @property
    def stream(self):
        """The device's current stream (CUDA only)."""
        s = self._stream   # only ever set on CUDA devices: the common case skips the check
        if s is not None:
            return s
        self._require_cuda("Device.stream")
        if self._stream is None:
            from .cuda.stream import Stream
            # tapegrad's default stream is a blocking stream of its own, as in Warp, so
            # foreign work on the legacy default stream orders with it.
            self._stream = Stream(self)
        return self._stream

    @stream.setter
    def stream(self, s):
        self._require_cuda("Device.stream")
        from .cuda.stream import Stream
        if not isinstance(s, Stream):
            raise TypeError(f"Device.stream: expected a tapegrad Stream, got {type(s).__name__}")
        if s.device is not self:
            raise ValueError(f"Device.stream: stream belongs to {s.device}, not {self}")
        self._stream = s

    @property
    def null_stream(self):
        """The legacy default stream (handle 0) of this device."""
        self._require_cuda("Device.null_stream")
        if self._null_stream is None:
            from .cuda.stream import Stream
            self._null_stream = Stream(self, cuda_stream=0)
        return self._null_stream

    @property
    def has_stream(self) -> bool:
        return self.is_cuda

    def synchronize(self):
        synchronize_device(self)

    def context_guard(self):
        """A context manager making this CUDA device current for CuPy calls (no-op on CPU)."""
        if self.is_cpu:
            import contextlib
            return contextlib.nullcontext()
        import cupy
        return cupy.cuda.Device(self.ordinal)


_cpu = Device("cpu", -1)
_BY_ALIAS = {"cpu": _cpu}   # exact strings already resolved (the hot path of every call)
_cuda: list | None = None
_lock = threading.Lock()
_state = threading.local()


def get_cuda_device_count() -> int:
    """Number of CUDA devices CuPy can see (0 when CuPy or a driver is missing)."""
    return len(get_cuda_devices())


def get_cuda_devices() -> list:
    global _cuda
    if _cuda is None:
        with _lock:
            if _cuda is None:
                n = 0
                try:
                    import cupy
                    n = cupy.cuda.runtime.getDeviceCount()
                except Exception:  # no cupy, no driver, or no device: CPU only
                    n = 0
                _cuda = [Device(f"cuda:{i}", i) for i in range(n)]
    return _cuda


def is_cuda_available() -> bool:
    return get_cuda_device_count() > 0


def is_cpu_available() -> bool:
    return True


def get_preferred_device() -> Device:
    devs = get_cuda_devices()
    return devs[0] if devs else _cpu


def get_device(ident=None) -> Device:
    """Resolve a device: None (current), a Device, "cpu", "cuda", "cuda:N", or an int ordinal.

    Raises:
        ValueError: the name is malformed.
        RuntimeError: a CUDA device was asked for and does not exist here.
    """
    if ident is None:
        cur = getattr(_state, "device", None)
        return cur if cur is not None else get_preferred_device()
    if isinstance(ident, Device):
        return ident
    if ident.__class__ is str:
        d = _BY_ALIAS.get(ident)
        if d is not None:
            return d
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = f"cuda:{ident}"
    if not isinstance(ident, str):
        alias = getattr(ident, "alias", None)  # duck-typed foreign Device objects
        if isinstance(alias, str):
            return get_device(alias)
        raise TypeError(f"device: expected None, a Device, a str like 'cpu'/'cuda:0' or an int, got "
                        f"{type(ident).__name__}")
    s = ident.strip().lower()
    if s == "cpu":
        return _cpu
    if s == "cuda" or s.startswith("cuda:"):
        devs = get_cuda_devices()
        if not devs:
            raise RuntimeError(f"device {ident!r}: no CUDA device is available on this machine "
                               "(install cupy-cuda12x/cupy-cuda13x and a driver, or use 'cpu')")
        if s == "cuda":
            cur = getattr(_state, "device", None)
            if cur is not None and cur.is_cuda:
                return cur
            import cupy
            return devs[cupy.cuda.runtime.getDevice()]
        try:
            idx = int(s[5:])
        except ValueError:
            raise ValueError(f"device {ident!r}: expected 'cuda:N' with an integer N") from None
        if not 0 <= idx < len(devs):
            raise RuntimeError(f"device {ident!r}: only {len(devs)} CUDA device(s) exist")
        _BY_ALIAS[ident] = devs[idx]
        return devs[idx]
    raise ValueError(f"device {ident!r}: expected 'cpu', 'cuda' or 'cuda:N'")


def set_device(ident) -> None:
    """Make ``ident`` the default device of this thread."""
    d = get_device(ident)
    _state.device = d
    if d.is_cuda:
        import cupy
        cupy.cuda.runtime.setDevice(d.ordinal)


class ScopedDevice:
    """``with ScopedDevice("cuda:1"):`` makes a device the default inside the block."""

    def __init__(self, device):
        self.device = get_device(device)

    def __enter__(self):
        self._saved = getattr(_state, "device", None)
        _state.device = self.device
        self._guard = self.device.context_guard()
        self._guard.__enter__()
        return self.device

    def __exit__(self, *exc):
        self._guard.__exit__(*exc)
        _state.device = self._saved
        return False


def synchronize() -> None:
    """Wait for all work on every CUDA device (no-op without CUDA)."""
    for d in get_cuda_devices():
        synchronize_device(d)


def synchronize_device(device=None) -> None:
    """Wait for all work on one device (no-op on the CPU)."""
    d = get_device(device)
    if d.is_cuda:
        import cupy
        with d.context_guard():
            cupy.cuda.runtime.deviceSynchronize()
