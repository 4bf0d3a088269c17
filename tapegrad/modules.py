"""Loaded kernel binaries: the objects ``Kernel.module_for(device)`` returns and ``launch`` calls.

``CpuModule`` calls a kernel's exported C entry point; ``CudaModule`` launches its CUDA entry
through the driver. Built and loaded by ``tapegrad.build``; this module only launches.

A CPU library's runtime-error slot (``ErrorSlot``: a zero slice step met at run time) is read
after every CPU launch, whichever path made it (``CpuModule.launch``, the native helper, a
recorded ``tg.Launch``, a tangent launch): ``ErrorSlot.check`` is the one owner of the error.
"""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

from . import abi
from .errors import KernelRuntimeError

__all__ = ["CpuModule", "CudaModule", "ErrorSlot", "FastEntry", "SLICE_LINE_ARG", "no_adjoint", "slice_lines"]

# runtime/array.h's error codes (TG_ERR_*)
ERR_SLICE_STEP_ZERO = 1
# the last argument of a generated slice whose step may be 0 at run time (lang/builtins.op_view
# appends it; slice_lines finds those slices by it)
SLICE_LINE_ARG = ", __LINE__"
_LINE_MARK = SLICE_LINE_ARG + ")"


def slice_lines(source: str) -> dict:
    """The Python ``file:line`` of each line of the C++ unit ``source`` holding a slice whose
    step is a run-time value (by C++ line number, from the nearest ``// @file:line`` marker above)."""
    out: dict = {}
    if _LINE_MARK not in source:
        return out
    where = ""
    for n, text in enumerate(source.splitlines(), 1):
        t = text.strip()
        if t.startswith("// @"):
            where = t[4:]
        elif _LINE_MARK in t:
            out[n] = where
    return out


class ErrorSlot:
    """A loaded CPU library's runtime-error slot (``runtime/array.h``: ``tg_error_slot()``, two
    int32: the error code, 0 when none, and the C++ line of the first error since the last check).

    Shared by every kernel of the library (and every thread launching them): two threads
    launching kernels of one library at once may see each other's error.

    Args:
        lib: the loaded ``ctypes`` library. key: the kernel's key (messages).
        lines: a zero-argument callable giving ``slice_lines`` of the library's unit, called
            when an error is raised (None: the location is not known).
    Attributes:
        flag: the slot as a ctypes ``c_int32 * 2`` (``flag[0]``: the code; one load per launch).
        address: the slot's address (the native helper reads the code there).
    """

    __slots__ = ("flag", "address", "key", "_lines")

    def __init__(self, lib, key, lines=None):
        get = lib.tg_error_slot
        get.restype = ctypes.c_void_p
        get.argtypes = []
        self.address = get()
        self.flag = (ctypes.c_int32 * 2).from_address(self.address)
        self.key = key
        self._lines = lines

    def check(self, phase="forward") -> None:
        """Raise for the error the library recorded since the last check, and clear it.

        Args:
            phase: the launch's entry: "forward", "backward", "tangent", "tangent of the adjoint".
        Raises:
            KernelRuntimeError: a zero slice step; names the kernel, the entry and the Python line.
        """
        code, line = self.flag[0], self.flag[1]
        if not code:
            return
        self.flag[0] = self.flag[1] = 0
        where = ""
        if self._lines is not None:
            try:
                where = self._lines().get(line, "")
            except Exception:   # the unit could not be regenerated: the message goes without it
                where = ""
        at = f" at {where}" if where else ""
        what = "slice step cannot be zero" if code == ERR_SLICE_STEP_ZERO else f"runtime error {code}"
        phase_text = "" if phase == "forward" else f" ({phase} launch)"
        raise KernelRuntimeError(
            f"kernel '{self.key}'{phase_text}: {what}{at} (a slice a[i:j:s] with s == 0 at run time; the launch "
            f"ran with that slice empty)", self.key, where, phase)


def _unit_lines(kernel, lines):
    """``ErrorSlot``'s ``lines``: ``lines`` (``slice_lines`` of the unit) when the loader has
    them, else those of the kernel's own unit (which a library loaded through the direct cache
    was built from), made on demand."""
    if lines is not None:
        return lambda: lines
    ref = weakref.ref(kernel)

    def regenerate():
        k = ref()
        return slice_lines(k.source()) if k is not None else {}
    return regenerate


@dataclass(frozen=True)
class FastEntry:
    """What the native launch helper (``tapegrad.launch.fastlaunch``) calls for a loaded kernel.

    Attributes:
        cuda: whether the entries are CUDA functions (launched with ``cuLaunchKernel``) or
            CPU entry points ``void(const launch_t*, void**)``.
        forward, backward: the addresses (CPU) or ``CUfunction`` handles (CUDA) of the forward
            and adjoint entries; ``backward`` None for a kernel built with ``enable_backward=False``.
        error_flag: CPU: the address of the library's error code (``ErrorSlot``), which the
            helper reads after each launch (0 on CUDA).
        threads_cap: CUDA: the default grid cap in threads (0: none). ordinal: the CUDA device
            ordinal (-1 on the CPU). lanes: CUDA forward launches: launch threads per CUDA
            thread (an elementwise entry; adjoints always run one per thread).
    """

    cuda: bool
    forward: int | None
    backward: int | None
    threads_cap: int = 0
    ordinal: int = -1
    lanes: int = 1
    error_flag: int = 0


def no_adjoint(kernel) -> str | None:
    """Why a module of ``kernel`` loads no adjoint entry point (the error an adjoint launch
    raises), or None when it has one: built with ``enable_backward=False``, or an adjoint the
    kernel refuses as inexact (``Kernel.adjoint_refusal``: arrays built from addresses)."""
    if not kernel.enable_backward:
        return f"kernel '{kernel.key}' was built with enable_backward=False"
    refuse = getattr(kernel, "adjoint_refusal", None)
    return refuse() if refuse is not None else None


class CpuModule:
    """A loaded CPU kernel: ``launch`` calls the exported entry point with OpenMP inside, then
    checks the library's error slot (``errors``, an ``ErrorSlot``).

    Args:
        lib: the loaded library. kernel: its ``Kernel``. lines: ``slice_lines`` of the unit
            ``lib`` was built from (None: of the kernel's own unit, made again if an error needs them).
    """

    __slots__ = ("_fwd", "_bwd", "_no_adjoint", "key", "lib", "errors")

    def __init__(self, lib, kernel, lines=None):
        self.lib = lib
        self.key = kernel.key
        self._fwd = getattr(lib, abi.entry_name(kernel.symbol, "cpu", "forward"))
        self._fwd.restype = None
        self._bwd = None
        self._no_adjoint = no_adjoint(kernel)
        if self._no_adjoint is None:
            self._bwd = getattr(lib, abi.entry_name(kernel.symbol, "cpu", "backward"))
            self._bwd.restype = None
        self.errors = ErrorSlot(lib, kernel.key, _unit_lines(kernel, lines))

    def launch(self, bounds, argv, adjoint=False, stream=0, block_dim=256, max_blocks=0):
        """Run the forward (or adjoint) over ``bounds``; ``argv`` is the packed ``void*`` array.

        Raises:
            RuntimeError: an adjoint launch of a kernel without one.
            KernelRuntimeError: the launch met a zero slice step (it ran to its end).
        """
        if adjoint:
            if self._bwd is None:
                raise RuntimeError(self._no_adjoint)
            self._bwd(ctypes.byref(bounds), argv)
        else:
            self._fwd(ctypes.byref(bounds), argv)
        if self.errors.flag[0]:
            self.errors.check("backward" if adjoint else "forward")

    def fast_entry(self) -> FastEntry:
        """What the native launch helper (``tapegrad.launch.fastlaunch``) calls: the addresses of the
        forward and backward entry points, and of the error code it reads after each launch."""
        bwd = ctypes.cast(self._bwd, ctypes.c_void_p).value if self._bwd is not None else None
        return FastEntry(False, ctypes.cast(self._fwd, ctypes.c_void_p).value, bwd, error_flag=self.errors.address)


class CudaModule:
    """A loaded CUDA kernel; ``launch`` prepends the bounds and calls ``cuLaunchKernel``."""

    def __init__(self, module_handle, kernel, device, lanes=1):
        from cupy.cuda import driver, runtime
        self._driver, self._runtime = driver, runtime
        self.key = kernel.key
        self.ordinal = device.ordinal
        self._module = module_handle
        # an entry for an outside launcher (entry_point_abi "external_constant_params"): only
        # loaded here, never launched by tapegrad (the kernel's own name, no adjoint)
        self.external = getattr(kernel, "entry_point_abi", "warp") != "warp"
        fwd = (abi.external_entry_name(kernel.get_mangled_name()) if self.external
               else abi.entry_name(kernel.symbol, "cuda", "forward"))
        with device.context_guard():
            self._fwd = driver.moduleGetFunction(module_handle, fwd)
            self._no_adjoint = no_adjoint(kernel)
            self._bwd = (driver.moduleGetFunction(module_handle, abi.entry_name(kernel.symbol, "cuda", "backward"))
                         if self._no_adjoint is None and not self.external else None)
        self.entry = fwd
        self._nargs = len(kernel.arg_types)
        self._params = {}
        # the default grid cap (max_blocks=0) and the elementwise forward's lanes: abi.grid_blocks
        self._threads_cap = abi.threads_cap(device.sm_count)
        # an elementwise forward entry runs `lanes` launch threads per CUDA thread (16-byte loads,
        # lang/elementwise.py)
        self.lanes = max(1, int(lanes))

    @property
    def handle(self) -> int:
        """The ``CUmodule`` handle (for an outside launcher: ``cuModuleGetGlobal``,
        ``cuModuleGetFunction``)."""
        return int(self._module)

    @property
    def function(self) -> int:
        """The ``CUfunction`` handle of the forward entry (named ``entry``)."""
        return int(self._fwd)

    def fast_entry(self) -> FastEntry:
        """What the native launch helper (``tapegrad.launch.fastlaunch``) launches: the forward and
        backward CUfunction handles, the default grid cap, the ordinal and the forward's lanes;
        it computes the grid as ``launch`` does and calls ``cuLaunchKernel`` itself."""
        return FastEntry(True, int(self._fwd), int(self._bwd) if self._bwd is not None else None,
                         self._threads_cap, self.ordinal, self.lanes)

    def launch(self, bounds, argv, adjoint=False, stream=0, block_dim=256, max_blocks=0):
        """Launch on ``stream`` (a CUDA stream handle) with ``block_dim`` threads per block."""
        if self.external:
            raise RuntimeError(f"kernel '{self.key}': its entry '{self.entry}' (entry_point_abi "
                               f"'external_constant_params') is launched by an outside runtime, not by tapegrad")
        f = self._bwd if adjoint else self._fwd
        if f is None:
            raise RuntimeError(self._no_adjoint)
        size = bounds.size
        if size <= 0:
            return
        n = len(argv)
        params = (ctypes.c_void_p * (n + 1))()
        params[0] = ctypes.addressof(bounds)
        ctypes.memmove(ctypes.addressof(params) + ctypes.sizeof(ctypes.c_void_p), argv,
                       n * ctypes.sizeof(ctypes.c_void_p))
        block_dim = int(block_dim) or abi.DEFAULT_BLOCK_DIM
        blocks = abi.grid_blocks(size, block_dim, 1 if adjoint else self.lanes, int(max_blocks or 0),
                                 self._threads_cap)
        rt = self._runtime
        prev = rt.getDevice()
        if prev != self.ordinal:
            rt.setDevice(self.ordinal)
        try:
            self._driver.launchKernel(f, blocks, 1, 1, block_dim, 1, 1, 0, int(stream or 0),
                                      ctypes.addressof(params), 0)
        finally:
            if prev != self.ordinal:
                rt.setDevice(prev)
