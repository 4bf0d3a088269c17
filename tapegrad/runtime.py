"""The runtime functions Warp code calls around its kernels: ``init``, ``get_devices``,
``clear_kernel_cache``, module options, ``load_module`` / ``force_load`` and ``ScopedTimer``.

tapegrad needs no explicit initialisation (devices are found and kernels compiled on first
use), so these are thin, validated spellings of what already happens lazily; they exist so
that code written as ``import warp as wp`` runs unchanged with ``import tapegrad as wp``.
"""
from __future__ import annotations

import builtins
import os
import sys
import threading
import time
import types as pytypes

from . import build, recording
from .device import Device, get_cuda_devices, get_device, synchronize
from .errors import KernelError
from .lang.kernel import Kernel, all_kernels, check_block_dim, module_kernels
from .lang.options import (  # noqa: F401  re-exported: Warp's names for module options
    DeterministicMode,
    Module,
    ModuleBuildOptions,
    get_module,
    module_options,
    update_module_options,
)

__all__ = ["init", "is_initialized", "get_devices", "get_cuda_device", "is_device_available",
           "clear_kernel_cache", "set_module_options", "get_module_options", "load_module", "force_load",
           "ScopedTimer", "DeterministicMode", "ModuleBuildOptions", "Module", "get_module"]

_init_lock = threading.Lock()
_initialized = False


def init() -> None:
    """Find the devices once (Warp's ``wp.init()``); later calls return at once. Optional:
    every tapegrad function initialises what it needs on first use."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            get_cuda_devices()
            _initialized = True


def is_initialized() -> bool:
    """Whether ``init()`` has run."""
    return _initialized


def get_devices() -> list:
    """Every device: the CPU first, then each CUDA device in ordinal order."""
    return [get_device("cpu"), *get_cuda_devices()]


def get_cuda_device(ordinal: int | None = None) -> Device:
    """The CUDA device ``ordinal`` (None: the current CUDA device).

    Raises:
        TypeError: ``ordinal`` is not an int. RuntimeError: no such CUDA device.
    """
    if ordinal is None:
        return get_device("cuda")
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        raise TypeError(f"get_cuda_device(ordinal): expected None or an int, got {type(ordinal).__name__}")
    return get_device(f"cuda:{ordinal}")


def is_device_available(device) -> bool:
    """Whether ``device`` (a Device or a name) exists on this machine."""
    if isinstance(device, Device):
        return any(device is d for d in get_devices())
    try:
        get_device(device)
    except (RuntimeError, ValueError):
        return False
    return True


def clear_kernel_cache() -> None:
    """Delete the compiled kernels in the disk cache (``$TAPEGRAD_CACHE``, default
    ``~/.cache/tapegrad``). Kernels already loaded in this process stay usable; later
    processes recompile."""
    d = build.cache_dir()
    for name in os.listdir(d):
        path = os.path.join(d, name)
        if os.path.isfile(path) or os.path.islink(path):
            try:
                os.unlink(path)
            except FileNotFoundError:   # another process cleared it first
                pass


def _caller_module(depth: int = 2) -> str:
    try:
        return sys._getframe(depth).f_globals.get("__name__", "__main__")
    except ValueError:
        return "__main__"


def _module_name(module, who: str) -> str:
    if module is None:
        return _caller_module(3)
    if isinstance(module, str):
        return module
    if isinstance(module, pytypes.ModuleType):
        return module.__name__
    if isinstance(module, Module):
        return module.name
    raise TypeError(f"{who}(module): expected None, a module name (str), a Python module or kernel.module, "
                    f"got {type(module).__name__}")


def set_module_options(options: dict, module=None) -> None:
    """Set options for the kernels of a Python module (default: the calling module), as Warp.

    ``enable_backward`` takes effect for kernels defined after the call (a kernel's own
    ``enable_backward=`` wins); ``mode`` (``"release"``/``"debug"``, None: ``tg.config.mode``)
    at the module's kernels' next launch; the other options are stored for ``get_module_options``.

    Raises:
        TypeError: ``options`` is not a dict, a bad ``module``, or an option of the wrong type.
        ValueError: an option name Warp does not have; a ``mode`` other than those.
    """
    update_module_options(_module_name(module, "set_module_options"), options)


def get_module_options(module=None) -> dict:
    """A copy of the options of a Python module (default: the calling module)."""
    return module_options(_module_name(module, "get_module_options"))


def _devices(device, who) -> list:
    if device is None:
        return [get_device()]
    if isinstance(device, (list, tuple)):
        return [get_device(d) for d in device]
    if isinstance(device, (str, Device, int)):
        return [get_device(device)]
    raise TypeError(f"{who}(device): expected None, a device, a name or a list of them, got {type(device).__name__}")


def _check_workers(max_workers, who):
    if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)
                                    or max_workers < 0):
        raise TypeError(f"{who}(max_workers): expected None or an int >= 0, got {max_workers!r}")


def _kernels_of(module, recursive: bool) -> list:
    if isinstance(module, Module) and not recursive:   # kernel.module: the kernels it groups
        found = []
        for k in module_kernels(module.name):
            try:
                found += sorted(k._specs.values(), key=lambda s: s.key) if k.is_generic() else [k]
            except KernelError:   # an invalid signature: its own launch says so
                continue
        return found
    name = _module_name(module, "load_module")
    found, ids = [], set()
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == name or (recursive and mod_name.startswith(name + "."))):
            continue
        for v in list(vars(mod).values()):
            if isinstance(v, Kernel) and id(v) not in ids:
                ids.add(id(v))
                found.append(v)
    return found


def load_module(module=None, device=None, recursive: bool = False, block_dim=None, max_workers=None) -> None:
    """Compile and load the kernels of a module (default: the calling module) ahead of their
    first launch.

    Args:
        module: ``kernel.module``/``get_module(name)`` (the kernels it groups), a Python module or
            its name (its global kernels are loaded).
        device: a device, a name, or a list of them (default: the current device).
        recursive: also load the kernels of the submodules already imported.
        block_dim, max_workers: accepted as in Warp (block_dim does not change the code).
    Raises:
        TypeError/ValueError: bad arguments. KernelError, CompileError: a kernel fails to build.
    """
    check_block_dim(block_dim, "load_module")
    _check_workers(max_workers, "load_module")
    if module is None:
        module = _caller_module(2)
    kernels = _kernels_of(module, bool(recursive))
    for dev in _devices(device, "load_module"):
        for k in kernels:
            if k.builds_on(dev):   # a CUDA-only (external entry) kernel has no CPU build
                k.module_for(dev)


def force_load(device=None, modules=None, block_dim=None, max_workers=None) -> None:
    """Compile and load every kernel defined so far (or those of ``modules``) for ``device``
    (default: every device), so that no compile happens later, e.g. inside a graph capture.
    A CUDA-only kernel (``entry_point_abi="external_constant_params"``) is loaded on CUDA
    devices only.

    Raises:
        TypeError/ValueError: bad arguments. KernelError, CompileError: a kernel fails to build.
    """
    check_block_dim(block_dim, "force_load")
    _check_workers(max_workers, "force_load")
    devices = get_devices() if device is None else _devices(device, "force_load")
    if modules is None:
        kernels = all_kernels()
    else:
        if not isinstance(modules, (list, tuple)):
            raise TypeError(f"force_load(modules): expected None or a list of modules, got {type(modules).__name__}")
        kernels = [k for m in modules for k in _kernels_of(m, False)]
    for dev in devices:
        for k in kernels:
            if k.builds_on(dev):   # a CUDA-only (external entry) kernel has no CPU build
                k.module_for(dev)


class ScopedTimer:
    """``with tg.ScopedTimer("step"):`` measures the block's wall time, as Warp's.

    Args:
        name: printed and used as the ``dict`` key.
        active: False makes the timer do nothing.
        print: print ``"<name> took <ms> ms"`` at exit (nested timers are indented).
        detailed: profile the block with cProfile and print the statistics.
        dict: a dict of lists; the elapsed milliseconds are appended to ``dict[name]``.
        synchronize: ``tg.synchronize()`` at entry and exit, so CUDA work is timed too.
        use_nvtx, color, cuda_filter, report_func: accepted for compatibility (no NVTX ranges or
            CUDA activity reports are produced).
        skip_tape: do not open a scope on the recording tape (otherwise the block is a
            ``record_scope_begin``/``end`` scope of it).
    Attributes:
        elapsed: milliseconds of the last exit. extra_msg: appended to the printed line.
    Raises:
        TypeError: ``name`` is not a str, ``dict`` is not a dict.
    """

    _tls = threading.local()

    def __init__(self, name: str, active: bool = True, print: bool = True, detailed: bool = False,
                 dict: dict | None = None, use_nvtx: bool = False, color="rapids", synchronize: bool = False,
                 cuda_filter: int = 0, report_func=None, skip_tape: bool = False):
        if not isinstance(name, str):
            raise TypeError(f"ScopedTimer(name): expected a str, got {type(name).__name__}")
        if dict is not None and not isinstance(dict, builtins.dict):
            raise TypeError(f"ScopedTimer(dict): expected None or a dict of lists, got {type(dict).__name__}")
        self.name = name
        self.active = bool(active)
        self.print = bool(print)
        self.detailed = bool(detailed)
        self.dict = dict
        self.use_nvtx = use_nvtx
        self.color = color
        self.synchronize = bool(synchronize)
        self.cuda_filter = cuda_filter
        self.report_func = report_func
        self.skip_tape = bool(skip_tape)
        self.elapsed = 0.0
        self.extra_msg = ""
        self.timing_results = []
        self._tape = None
        if dict is not None and name not in dict:
            dict[name] = []

    def __enter__(self):
        if self.active:
            if self.synchronize:
                synchronize()
            if self.detailed:
                import cProfile
                self._profile = cProfile.Profile()
                self._profile.enable()
            if self.print:
                self._tls.indent = getattr(self._tls, "indent", -1) + 1
            self._start = time.perf_counter_ns()
        tape = recording.active_tape()
        if not self.skip_tape and tape is not None and hasattr(tape, "record_scope_begin"):
            tape.record_scope_begin(self.name)
            self._tape = tape
        return self

    def __exit__(self, exc_type, exc, tb):
        tape, self._tape = self._tape, None
        if tape is not None:
            tape.record_scope_end()
        if not self.active:
            return False
        sync_error = None
        if self.synchronize:
            try:
                synchronize()
            except Exception as e:   # never replace the block's own exception
                sync_error = e
        self.elapsed = (time.perf_counter_ns() - self._start) / 1e6
        if self.detailed:
            self._profile.disable()
            self._profile.print_stats(sort="tottime")
        if self.dict is not None:
            self.dict[self.name].append(self.elapsed)
        if self.print:
            indent = "    " * max(self._tls.indent, 0)
            msg = f"{indent}{self.name} took {self.elapsed:.2f} ms"
            builtins.print(f"{msg} {self.extra_msg}" if self.extra_msg else msg)
            self._tls.indent -= 1
        if sync_error is not None and exc_type is None:
            raise sync_error
        return False
