"""The XLA FFI handler library: built once per machine, registered with JAX once per process.

``ffi_handler.cpp`` (shipped beside this module) is compiled by tapegrad's build module
(``tapegrad.build.build_cpu``: same compiler, flags and on-disk cache as kernels) with the
running jaxlib's ``xla/ffi/api/c_api.h`` prepended, so the handler reads XLA's call frame
through the real header and a jaxlib upgrade rebuilds it. Targets (one name each, a handler
per platform: ``"cpu"`` and ``"CUDA"``):

- ``tapegrad_kernel``: a ``jax_kernel`` call (no Python per execution);
- ``tapegrad_callable`` / ``tapegrad_callable_graphable``: a ``jax_callable`` call (the second
  advertises command-buffer compatibility: graph mode JAX);
- ``tapegrad_stream_wait`` (CUDA only): XLA's stream waits for a CUDA event tapegrad recorded on
  its own stream (``stream_wait``), so a jitted program reads what tapegrad's kernels wrote
  before it was dispatched, without a host wait or a DLPack import per call.

Every call carries this process's random id (``process_id``, attribute ``tapegrad_process``):
the handler trusts the plan address or call id of a call only when the id is its own; a
program serialized by ``jax.export`` and run in another process is resolved by its stable key
instead (``entry.resolve_key``), or refused with an error naming the kernel.
"""
from __future__ import annotations

import ctypes
import os
import secrets
import threading
import weakref

from tapegrad import abi

__all__ = ["handler_library", "KERNEL_TARGET", "CALLABLE_TARGET", "CALLABLE_GRAPHABLE_TARGET", "ensure_registered",
           "set_callable_target", "set_key_resolver", "process_id", "cuda_zero", "cuda_copy", "STREAM_WAIT_TARGET",
           "StreamEvent", "stream_wait"]

KERNEL_TARGET = "tapegrad_kernel"
CALLABLE_TARGET = "tapegrad_callable"
CALLABLE_GRAPHABLE_TARGET = "tapegrad_callable_graphable"
STREAM_WAIT_TARGET = "tapegrad_stream_wait"

_lock = threading.Lock()
_lib = None
_registered = False
_callable_cb = None      # the CFUNCTYPE object handed to C: must stay alive

CALLABLE_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
# (key, key length, message buffer, its size) -> plan address, or 0 with the message written
RESOLVER_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)

# this process's id in every call it traces: random, so no other process's calls carry it
_PROCESS = int.from_bytes(secrets.token_bytes(8), "little", signed=True) or 1
_resolver_cb = None      # the RESOLVER_FN object handed to C: must stay alive


def set_key_resolver(fn) -> None:
    """Install ``fn(key address, key length, message address, message size) -> plan address``
    (0: refused, the reason written to the message), which resolves calls traced in another
    process (``entry.resolve_key``; entry installs it when imported)."""
    global _resolver_cb
    with _lock:
        _resolver_cb = RESOLVER_FN(fn)
        if _lib is not None:
            _lib.tgx_set_process(_PROCESS, _resolver_cb)


def process_id() -> int:
    """The id this process writes into its calls (``tapegrad_process``)."""
    return _PROCESS

# A private binding of PyCapsule_New: jax.ffi.pycapsule sets argtypes on the shared
# ctypes.pythonapi object, which other code in the process may rely on.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))


def _build_module():
    try:
        from tapegrad import build
    except ImportError:  # older layout
        from tapegrad import build
    return build


def handler_library():
    """The loaded handler library (built on first use, then from the cache).

    Raises:
        tapegrad.CompileError: the C++ compiler failed; RuntimeError: no XLA FFI header.
    """
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        import jax
        import jax.ffi
        header = os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")
        if not os.path.exists(header):
            raise RuntimeError(f"tapegrad.jax_kernel: this jaxlib ({jax.__version__}) ships no XLA FFI header at "
                               f"{header}; jaxlib >= 0.5 is needed")
        with open(header) as f:
            head = f.read()
        with open(os.path.join(os.path.dirname(__file__), "ffi_handler.cpp")) as f:
            body = abi.inline_header(f.read())   # the kernel ABI header, as text: the cache keys on it
        source = f"// xla/ffi/api/c_api.h of jaxlib {jax.__version__}\n{head}\n// ffi_handler.cpp\n{body}"
        build = _build_module()
        lib = build.load_cpu(source, "tapegrad_xla_ffi")   # verified; a damaged cache entry is rebuilt
        path = lib._name
        for name in ("tgx_kernel_cpu", "tgx_kernel_cuda", "tgx_callable_cpu", "tgx_callable_cuda",
                     "tgx_callable_cuda_graphable", "tgx_stream_wait_cuda"):
            getattr(lib, name).restype = ctypes.c_void_p
        lib.tgx_abi_version.restype = ctypes.c_int64
        lib.tgx_plan_blocks.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        lib.tgx_plan_blocks.restype = ctypes.c_int64
        lib.tgx_set_callable_target.argtypes = [CALLABLE_FN]
        lib.tgx_set_callable_target.restype = None
        from .plan import abi_version
        if lib.tgx_abi_version() != abi_version():
            raise RuntimeError(f"tapegrad jax bridge: the FFI handler library {path} has plan layout "
                               f"{lib.tgx_abi_version()}, bridges/jax/plan.py {abi_version()} (stale build?)")
        lib.tgx_set_process.argtypes = [ctypes.c_int64, RESOLVER_FN]
        lib.tgx_set_process.restype = None
        lib.tgx_set_process(_PROCESS, _resolver_cb or RESOLVER_FN())
        _declare_driver_ops(lib)
        _lib = lib
    return _lib


def _declare_driver_ops(lib) -> None:
    for name in ("tgx_cuda_zero", "tgx_cuda_copy", "tgx_cuda_event_create", "tgx_cuda_event_record",
                 "tgx_cuda_event_destroy"):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int32
    lib.tgx_cuda_event_create.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.tgx_cuda_event_record.argtypes = [ctypes.c_uint64, ctypes.c_void_p]
    lib.tgx_cuda_event_destroy.argtypes = [ctypes.c_uint64]
    lib.tgx_cuda_zero.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
    lib.tgx_cuda_copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
    lib.tgx_cuda_error_text.argtypes = [ctypes.c_int32]
    lib.tgx_cuda_error_text.restype = ctypes.c_char_p


def _check_cuda(r: int, what: str) -> None:
    if r:
        text = handler_library().tgx_cuda_error_text(r).decode(errors="replace")
        raise RuntimeError(f"tapegrad jax bridge: {what} on XLA's stream failed: CUDA error {r} ({text})")


def cuda_zero(ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` of device memory at ``ptr`` on ``stream`` (XLA's) through the driver
    (``cuMemsetD32Async``/``cuMemsetD8Async``): capturable, no synchronization, no allocation.

    Raises:
        RuntimeError: the driver refused (its error named).
    """
    if nbytes > 0:
        _check_cuda(handler_library().tgx_cuda_zero(ptr, nbytes, stream or None), "zeroing an output")


def cuda_copy(dst: int, src: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` of device memory from ``src`` to ``dst`` on ``stream`` through the driver
    (``cuMemcpyDtoDAsync``): capturable, no synchronization.

    Raises:
        RuntimeError: the driver refused (its error named).
    """
    if nbytes > 0:
        _check_cuda(handler_library().tgx_cuda_copy(dst, src, nbytes, stream or None), "copying an in-out array")


class StreamEvent:
    """A CUDA event (no timing) that a jitted program's ``stream_wait`` makes XLA's stream wait
    for: ``record(stream)`` on tapegrad's stream before dispatching the program. Destroyed with
    the object.

    Args:
        device: the tapegrad CUDA device (its context is current while the event is made).

    Raises:
        RuntimeError: the driver refused (its error named).
    """

    def __init__(self, device):
        lib = handler_library()
        out = ctypes.c_uint64(0)
        with device.context_guard():
            _check_cuda(lib.tgx_cuda_event_create(ctypes.byref(out)), "creating an ordering event")
        self.handle = int(out.value)
        self._destroy = weakref.finalize(self, lib.tgx_cuda_event_destroy, self.handle)
        self._record = lib.tgx_cuda_event_record

    def record(self, stream: int) -> None:
        """Record the event on CUDA stream handle ``stream`` (0: the legacy default stream).

        Raises:
            RuntimeError: the driver refused.
        """
        r = self._record(self.handle, stream or None)
        if r:
            _check_cuda(r, "recording an ordering event")


def stream_wait(event: StreamEvent):
    """Inside a function jitted for a CUDA device: a call that makes XLA's stream wait for
    ``event``'s last record. Returns a token (an int32 scalar) for ``jax.lax.optimization_barrier``
    to order the program's other work after the wait."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    ensure_registered()
    # not declared side-effecting: JAX runs effectful programs off its C++ dispatch path (~450 µs
    # a call on an H200 host); the barrier that consumes the token keeps the call in the program
    return jax.ffi.ffi_call(STREAM_WAIT_TARGET, jax.ShapeDtypeStruct((), jnp.int32))(event=np.int64(event.handle))


def _capsule(fn):
    return _capsule_new(ctypes.cast(fn, ctypes.c_void_p).value, None, None)


def ensure_registered() -> None:
    """Register tapegrad's FFI targets with JAX for the CPU and (when JAX has it) CUDA."""
    global _registered
    if _registered:
        return
    lib = handler_library()
    with _lock:
        if _registered:
            return
        import jax.ffi
        platforms = [("cpu", "cpu")]
        try:
            import jax
            if any(d.platform == "gpu" for d in jax.devices()):
                platforms.append(("CUDA", "cuda"))
        except RuntimeError:
            pass
        for xla_platform, suffix in platforms:
            jax.ffi.register_ffi_target(KERNEL_TARGET, _capsule(getattr(lib, f"tgx_kernel_{suffix}")),
                                        platform=xla_platform)
            jax.ffi.register_ffi_target(CALLABLE_TARGET, _capsule(getattr(lib, f"tgx_callable_{suffix}")),
                                        platform=xla_platform)
            graphable = "tgx_callable_cuda_graphable" if suffix == "cuda" else "tgx_callable_cpu"
            jax.ffi.register_ffi_target(CALLABLE_GRAPHABLE_TARGET, _capsule(getattr(lib, graphable)),
                                        platform=xla_platform)
            if suffix == "cuda":
                jax.ffi.register_ffi_target(STREAM_WAIT_TARGET, _capsule(lib.tgx_stream_wait_cuda),
                                            platform=xla_platform)
        _registered = True


def set_callable_target(fn) -> None:
    """Install the Python function every ``jax_callable`` execution is routed to:
    ``fn(call_id, record_address, msg_address, msg_len) -> 0 | 1`` (see ffi_handler.cpp)."""
    global _callable_cb
    cb = CALLABLE_FN(fn)
    handler_library().tgx_set_callable_target(cb)
    _callable_cb = cb


def function_address(name: str) -> int:
    """Address of an exported function of the handler library (for tests and diagnostics)."""
    return ctypes.cast(getattr(handler_library(), name), ctypes.c_void_p).value
