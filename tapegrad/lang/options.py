"""Module options (Warp's ``set_module_options`` / ``get_module_options``): one table, keyed by
the Python module name kernels are defined in.

The kernel decorator reads ``enable_backward`` from it when the decorator is not given one;
kernel loads read ``mode`` (``"release"``/``"debug"``; None: ``tg.config.mode``), and a change
of it takes effect at the module's next launch (the other build is compiled or loaded then); the
other options are stored and returned for code that reads them back (tapegrad's compiler
flags do not depend on them). ``tapegrad.runtime`` exposes the public functions.
"""
from __future__ import annotations

import enum
import itertools
import os
import threading

from ..config import check_mode

__all__ = ["DEFAULTS", "module_options", "update_module_options", "add_options_listener", "DeterministicMode",
           "ModuleBuildOptions", "Module", "get_module", "kernel_module_name", "forget_module",
           "check_kernel_options", "KERNEL_OPTIONS"]


class DeterministicMode(enum.IntEnum):
    """Warp's ``deterministic`` module option values. tapegrad's CPU kernels run in launch
    order; only ``NOT_GUARANTEED`` (and None) are accepted: tapegrad has no reproducible-order
    reduction mode for CUDA atomics, so asking for one raises instead of being ignored."""

    NOT_GUARANTEED = 0
    RUN_TO_RUN = 1
    GPU_TO_GPU = 2


class ModuleBuildOptions:
    """Warp's extra build options of a module (``set_module_options({"extra_build_options":
    ...})``): include directories, preambles, hashed dependency files.

    tapegrad compiles every kernel from its own generated source; an empty instance is accepted
    and a non-empty one makes ``set_module_options`` raise (tapegrad would otherwise build
    without the preamble or include folders asked for).

    Args:
        extra_cuda_include_dirs, extra_cpu_include_dirs: absolute paths of existing folders.
        extra_cuda_preamble, extra_cpu_preamble: C++ source (str).
        extra_build_dependencies: absolute paths of existing files.
    Raises:
        TypeError: a preamble is not a str, or a path list is not a sequence of paths.
        ValueError: a path is relative or does not exist.
    """

    def __init__(self, *, extra_cuda_include_dirs=None, extra_cpu_include_dirs=None, extra_cuda_preamble: str = "",
                 extra_cpu_preamble: str = "", extra_build_dependencies=None):
        for name, v in (("extra_cuda_preamble", extra_cuda_preamble), ("extra_cpu_preamble", extra_cpu_preamble)):
            if not isinstance(v, str):
                raise TypeError(f"ModuleBuildOptions({name}=...): expected a str, got {type(v).__name__}")
        self.extra_cuda_include_dirs = _paths(extra_cuda_include_dirs, "extra_cuda_include_dirs", os.path.isdir)
        self.extra_cpu_include_dirs = _paths(extra_cpu_include_dirs, "extra_cpu_include_dirs", os.path.isdir)
        self.extra_cuda_preamble = extra_cuda_preamble
        self.extra_cpu_preamble = extra_cpu_preamble
        self.extra_build_dependencies = _paths(extra_build_dependencies, "extra_build_dependencies", os.path.isfile)

    def is_empty(self) -> bool:
        """Whether the instance asks for nothing (no folders, preambles or dependencies)."""
        return not (self.extra_cuda_include_dirs or self.extra_cpu_include_dirs or self.extra_cuda_preamble
                    or self.extra_cpu_preamble or self.extra_build_dependencies)

    def merged(self, *others: "ModuleBuildOptions") -> "ModuleBuildOptions":
        """A new instance joining this one's and ``others``' entries (lists concatenated,
        preambles joined by newlines), neither input modified."""
        every = (self,) + others
        return ModuleBuildOptions(
            extra_cuda_include_dirs=[d for o in every for d in o.extra_cuda_include_dirs],
            extra_cpu_include_dirs=[d for o in every for d in o.extra_cpu_include_dirs],
            extra_cuda_preamble="\n".join(o.extra_cuda_preamble for o in every if o.extra_cuda_preamble),
            extra_cpu_preamble="\n".join(o.extra_cpu_preamble for o in every if o.extra_cpu_preamble),
            extra_build_dependencies=[d for o in every for d in o.extra_build_dependencies])

    def __repr__(self):
        return (f"ModuleBuildOptions(extra_cuda_include_dirs={self.extra_cuda_include_dirs!r}, "
                f"extra_cpu_include_dirs={self.extra_cpu_include_dirs!r}, extra_cuda_preamble="
                f"{self.extra_cuda_preamble!r}, extra_cpu_preamble={self.extra_cpu_preamble!r}, "
                f"extra_build_dependencies={self.extra_build_dependencies!r})")


def _paths(values, name: str, exists) -> list:
    if values is None:
        return []
    if isinstance(values, (str, bytes)):
        raise TypeError(f"ModuleBuildOptions({name}=...): expected a sequence of paths, got a single "
                        f"{type(values).__name__}")
    out = []
    for v in values:
        p = os.fspath(v)
        if not os.path.isabs(p) or not exists(p):
            raise ValueError(f"ModuleBuildOptions({name}=...): expected absolute paths of existing entries, "
                             f"got {p!r}")
        out.append(p)
    return out

# Warp 1.19's option names and defaults (``wp.get_module_options()``)
DEFAULTS = {
    "max_unroll": 16, "enable_backward": True, "enable_mathdx_gemm": None, "enable_mathdx_solver": None,
    "enable_mathdx_fft": None, "fast_math": False, "fuse_fp": True, "lineinfo": False, "cuda_output": None,
    "mode": None, "optimization_level": None, "cpu_compiler_flags": None, "block_dim": 256,
    "compile_time_trace": False, "strip_hash": False, "extra_build_options": None, "deterministic": None,
    "deterministic_max_records": 0, "default_grid_stride": None,
}
_BOOLS = ("enable_backward", "fast_math", "fuse_fp", "lineinfo", "compile_time_trace", "strip_hash")

_lock = threading.Lock()
_TABLE: dict = {}   # module name -> its options (a full copy of DEFAULTS, updated)
_LISTENERS: list = []   # callables run after options change (the kernel loader's cached choices)


def add_options_listener(fn) -> None:
    """Call ``fn()`` after every ``update_module_options``."""
    _LISTENERS.append(fn)


def module_options(name: str) -> dict:
    """A copy of the options of the Python module ``name`` (the defaults when never set)."""
    with _lock:
        return dict(_TABLE.get(name, DEFAULTS))


def update_module_options(name: str, options: dict, who: str = "set_module_options") -> None:
    """Merge ``options`` into module ``name``'s options.

    Raises:
        TypeError: ``options`` is not a dict, or a boolean option is not a bool, or
            ``block_dim``/``max_unroll`` is not an int.
        ValueError: an option name Warp does not have; a non-positive ``block_dim``; a ``mode``
            other than None, "release" or "debug".
    """
    _check_options(options, DEFAULTS, who)
    with _lock:
        _TABLE.setdefault(name, dict(DEFAULTS)).update(options)
    for fn in list(_LISTENERS):
        fn()


def _check_options(options, known, who: str) -> None:
    if not isinstance(options, dict):
        raise TypeError(f"{who}(options): expected a dict like {{'enable_backward': False}}, "
                        f"got {type(options).__name__}")
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        raise ValueError(f"{who}(options): unknown option(s) {unknown}; expected some of {sorted(known)}")
    for k, v in options.items():
        if k in _BOOLS and not isinstance(v, bool):
            raise TypeError(f"{who}(options): '{k}' expects a bool, got {v!r}")
        if k in ("block_dim", "max_unroll") and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{who}(options): '{k}' expects an int, got {v!r}")
        if k == "block_dim" and v <= 0:
            raise ValueError(f"{who}(options): 'block_dim' expects a positive int, got {v}")
        if k == "mode" and v is not None:
            check_mode(v, f"{who}(options): 'mode'")
        if k == "deterministic" and v not in (None, False, DeterministicMode.NOT_GUARANTEED):
            raise ValueError(f"{who}(options): 'deterministic' {v!r} is not supported: tapegrad has no "
                             f"reproducible-order mode for atomic accumulation (None or "
                             f"DeterministicMode.NOT_GUARANTEED only)")
        if k == "extra_build_options" and v is not None:
            if not isinstance(v, ModuleBuildOptions):
                raise TypeError(f"{who}(options): 'extra_build_options' expects None or a ModuleBuildOptions, "
                                f"got {type(v).__name__}")
            if not v.is_empty():
                raise ValueError(f"{who}(options): 'extra_build_options' with include folders, preambles or "
                                 f"dependencies is not supported: tapegrad compiles only its own generated "
                                 f"source")
        if k == "launch_bounds":
            check_launch_bounds(v, who)


# Options a single kernel takes (``@kernel(...)``, ``Kernel(options=...)``) besides the module ones
KERNEL_OPTIONS = {"launch_bounds": None, "entry_point_abi": "warp", "cuda_max_registers": None,
                  "enable_cuda_smem_spilling": False, "grid_stride": None, "cluster_dim": None}


def check_launch_bounds(v, who: str) -> None:
    """None, a positive int or a tuple of one or two positive ints (Warp's ``launch_bounds``).

    Raises:
        TypeError/ValueError: anything else.
    """
    if v is None:
        return
    items = v if isinstance(v, tuple) else (v,)
    if not 1 <= len(items) <= 2 or any(isinstance(i, bool) or not isinstance(i, int) or i <= 0 for i in items):
        raise ValueError(f"{who}: 'launch_bounds' expects a positive int or a tuple (max_threads, "
                         f"min_blocks), got {v!r}")


def check_kernel_options(options, who: str = "Kernel") -> dict:
    """A copy of a kernel's own ``options`` dict, checked (module option names and
    ``launch_bounds``...; None: empty).

    Raises:
        TypeError, ValueError: as ``update_module_options``.
    """
    if options is None:
        return {}
    _check_options(options, {**DEFAULTS, **KERNEL_OPTIONS}, who)
    return dict(options)


_UNIQUE = itertools.count(1)


def kernel_module_name(func, module, module_options=None, who: str = "kernel") -> str:
    """The options-table name of the module a kernel joins (Warp's ``module=`` argument).

    Args:
        func: the kernel's Python function.
        module: None (its Python module), ``"unique"`` (a module of its own, options starting
            from the defaults), a module name, or a ``Module``/``kernel.module``.
        module_options: options of a ``"unique"`` module (a dict).
    Raises:
        ValueError: ``module_options`` without ``module="unique"``, or an unknown option.
        TypeError: a bad ``module`` or ``module_options``.
    """
    if module_options is not None and module != "unique":
        raise ValueError(f"{who} '{func.__name__}': module_options requires module=\"unique\"; use "
                         f"set_module_options() for a shared module")
    if module is None:
        return func.__module__
    if module == "unique":
        name = f"{func.__module__}.{func.__qualname__}#unique{next(_UNIQUE)}"
        with _lock:
            _TABLE[name] = dict(DEFAULTS)
        if module_options:
            update_module_options(name, module_options, who=f"{who} '{func.__name__}' module_options")
        return name
    if isinstance(module, str):
        return module
    name = getattr(module, "name", None)
    if isinstance(name, str):
        return name
    raise TypeError(f"{who} '{func.__name__}': module= expects None, \"unique\", a module name or a module "
                    f"object, got {type(module).__name__}")


def forget_module(name: str) -> None:
    """Drop a ``"unique"`` module's options (its kernel died)."""
    with _lock:
        _TABLE.pop(name, None)


class ModuleOptions(dict):
    """A snapshot of a module's options whose item assignment and ``update`` write through to
    the table (``kernel.module.options["mode"] = "debug"`` as in Warp), checked like
    ``set_module_options``."""

    def __init__(self, name: str):
        super().__init__(module_options(name))
        self._name = name

    def __setitem__(self, key, value):
        update_module_options(self._name, {key: value}, who="module.options")
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        new = dict(*args, **kwargs)
        update_module_options(self._name, new, who="module.options")
        super().update(new)


class Module:
    """A module of kernels by name (Warp's ``wp.get_module(name)``): its ``name`` and
    ``options`` (``ModuleOptions``: assignment sets the option)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    @property
    def options(self) -> ModuleOptions:
        return ModuleOptions(self.name)

    def __eq__(self, other):
        return isinstance(other, Module) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"<tapegrad module {self.name!r}>"


def get_module(name: str) -> Module:
    """The module named ``name`` (a Python module's name, as kernels record it).

    Raises:
        TypeError: ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"get_module(name): expected a str, got {type(name).__name__}")
    return Module(name)
