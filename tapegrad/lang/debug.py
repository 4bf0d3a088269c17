"""Debug builds (``tg.config.mode = "debug"``): the host side of the bounds checks.

A debug build guards every array access with ``tg::dbg_ok`` and every vector/matrix component
access by a runtime index (``v[i]``, ``m[i, j]``) with ``tg::dbg_comp`` (``runtime/debug.h``). The first
out-of-range access of a launch fills the module's error slot (which access: a site number,
the index and the array's shape) and is skipped; ``CheckedModule.launch`` reads the slot after
the launch, clears it and raises ``KernelIndexError`` naming the kernel, the array, the index
and the Python line (``emit.DebugSite`` maps the site number back to them).

On the CPU the slot is a static variable of the shared library (its address comes from the
exported ``KEY_cpu_dbg_slot()``); on CUDA it is the ``__device__`` variable ``tg_dbg_slot`` of the
module, read after synchronizing the launch stream (so debug launches are synchronous on CUDA;
during a CUDA graph capture the check is skipped: nothing ran yet).

The slot is per module, shared by every thread launching it: two threads launching the same
debug kernel at once may see each other's error. Debug builds are for finding the bug.
"""
from __future__ import annotations

import ctypes

from ..abi import DebugSlot, entry_name
from ..errors import KernelIndexError, KernelRuntimeError

__all__ = ["DebugSlot", "CheckedModule"]


class CheckedModule:
    """A debug build's loaded module: launches the wrapped module, then checks the error slot.

    Args:
        inner: the loaded module (``CpuModule``/``CudaModule``). kernel: its ``Kernel``.
        device: the device. sites: the unit's ``emit.DebugSite`` tuple.
        lib: the CPU library (CPU). cuda_module: the ``CUmodule`` handle (CUDA).
    """

    debug = True

    def __init__(self, inner, kernel, device, sites, lib=None, cuda_module=None):
        self.inner = inner
        self.key = kernel.key
        self.device = device
        self.sites = sites
        self._cuda = None
        if lib is not None:
            get = getattr(lib, entry_name(kernel.symbol, "cpu", "dbg_slot"))
            get.restype = ctypes.c_void_p
            self._slot = DebugSlot.from_address(get())
        else:
            from cupy.cuda import driver
            with device.context_guard():
                self._cuda = driver.moduleGetGlobal(cuda_module, entry_name(kernel.symbol, "cuda", "dbg_slot"))
            self._slot = DebugSlot()

    def __getattr__(self, name):   # lib, key... of the wrapped module (bridges read .lib)
        return getattr(self.inner, name)

    def launch(self, bounds, argv, adjoint=False, stream=0, block_dim=256, max_blocks=0):
        """Launch as the wrapped module does, then ``check_errors``.

        Raises:
            KernelIndexError: the launch indexed an array out of range.
            KernelRuntimeError: the launch met a zero slice step (CPU); the out-of-range accesses
                of the empty slice it made are not reported (the step is the cause).
        """
        try:
            self.inner.launch(bounds, argv, adjoint, stream, block_dim, max_blocks)
        except KernelRuntimeError:
            self._clear()
            raise
        self.check_errors(stream, adjoint)

    def check_errors(self, stream=0, adjoint=False) -> None:
        """Raise for the first out-of-range access since the last check (and clear the slot).

        Args:
            stream: the CUDA stream the launch ran on (synchronized before the slot is read).
            adjoint: whether it was the backward launch (named in the message).
        Raises:
            KernelIndexError: names the kernel, the array, the index, its shape and the line.
        """
        slot = self._read(stream)
        if slot is None or not slot.flag:
            return
        n = max(1, min(4, slot.ndim))
        index = tuple(slot.index[:n])
        shape = tuple(slot.shape[:n])
        count, k = slot.count, slot.site
        self._clear()          # (on the CPU ``slot`` is the live struct: read it first)
        site = self.sites[k] if 0 <= k < len(self.sites) else None
        if site is None:
            raise KernelIndexError(f"kernel '{self.key}' (debug mode): index {_fmt(index)} out of range for an "
                                   f"array of shape {shape}", self.key, index=index, shape=shape, count=count)
        inside = "" if site.function == self.key else f" in @func '{site.function}'"
        if site.access == "extent":
            raise KernelIndexError(
                f"kernel '{self.key}' (debug mode): len()/shape of array '{site.array}' (shape {shape}) at "
                f"{site.location}{inside} does not fit the int32 it is in a launch of at most 2^31 - 1 threads "
                f"(it would wrap); pass the size as a tg.int64 argument, or launch over more than 2^31 - 1 "
                f"threads (the wide build, where it is an int64)",
                self.key, site.function, site.array, shape, shape, site.location, site.access, count)
        more = f"; {count} out-of-range accesses in all, only the first is described" if count > 1 else ""
        phase = " (backward launch)" if adjoint else ""
        # v[i] with i past a vector's length: the array field names the vector (its type)
        what = site.array if "component" in site.access else f"array '{site.array}'"
        raise KernelIndexError(
            f"kernel '{self.key}'{phase} (debug mode): {site.access} of {what} at index {_fmt(index)} "
            f"is out of range for its shape {shape}, at {site.location}{inside} (the access was skipped{more})",
            self.key, site.function, site.array, index, shape, site.location, site.access, count)

    def _read(self, stream):
        if self._cuda is None:
            return self._slot
        from cupy.cuda import runtime

        from ..cuda.allocators import stream_is_capturing
        if stream and stream_is_capturing(stream):
            return None      # a capture only records the launch; replays are not checked
        with self.device.context_guard():
            runtime.streamSynchronize(int(stream or 0))
            runtime.memcpy(ctypes.addressof(self._slot), self._cuda, ctypes.sizeof(DebugSlot),
                           runtime.memcpyDeviceToHost)
        return self._slot

    def _clear(self):
        ctypes.memset(ctypes.addressof(self._slot), 0, ctypes.sizeof(DebugSlot))
        if self._cuda is not None:
            from cupy.cuda import runtime
            with self.device.context_guard():
                runtime.memcpy(self._cuda, ctypes.addressof(self._slot), ctypes.sizeof(DebugSlot),
                               runtime.memcpyHostToDevice)


def _fmt(index) -> str:
    return str(index[0]) if len(index) == 1 else "(" + ", ".join(map(str, index)) + ")"
