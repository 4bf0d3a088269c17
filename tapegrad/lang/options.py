"""Module options (Warp's ``set_module_options`` / ``get_module_options``): one table, keyed by
the Python module name kernels are defined in.

The kernel decorator reads ``enable_backward`` from it when the decorator is not given one;
kernel loads read ``mode`` (``"release"``/``"debug"``; None: ``tg.config.mode``), and a change
of it takes effect at the module's next launch (the other build is compiled or loaded then); the
``extra_build_options`` (``ModuleBuildOptions``) reach the module's builds as ``BuildInputs``;
the other options are stored and returned for code that reads them back (tapegrad's compiler
flags do not depend on them). ``tapegrad.runtime`` exposes the public functions.
"""
from __future__ import annotations

import enum
import hashlib
import itertools
import os
import threading
from dataclasses import dataclass

from ..abi import ENTRY_POINT_ABIS
from ..config import check_mode
from ..config import config as _config

__all__ = ["DEFAULTS", "module_options", "update_module_options", "add_options_listener", "DeterministicMode",
           "ModuleBuildOptions", "Module", "get_module", "kernel_module_name", "forget_module",
           "check_kernel_options", "KERNEL_OPTIONS", "BuildInputs", "build_inputs", "resolve_options",
           "register_module_hasher", "check_cpu_grain", "check_deterministic", "deterministic",
           "register_module_loader"]


class DeterministicMode(enum.IntEnum):
    """Warp's ``deterministic`` module option values.

    ``NOT_GUARANTEED`` (and None, the default): CPU launches run on OpenMP threads and CUDA
    launches on many blocks, so floating-point atomics (``atomic_add``, ``a[i] += x``, and the
    adjoints of array reads) accumulate in an order that can change from run to run.
    ``RUN_TO_RUN``: bit-identical results on repeated runs. tapegrad honours it on the CPU by
    running the module's launches (forward, adjoint and tangent) on one thread in grid order,
    so every accumulation happens in the same order; CUDA has no ordered-reduction build, so
    loading such a kernel on a CUDA device raises. ``GPU_TO_GPU`` (equal results across device
    architectures) is refused when set.
    """

    NOT_GUARANTEED = 0
    RUN_TO_RUN = 1
    GPU_TO_GPU = 2


class ModuleBuildOptions:
    """Warp's extra build options of a module (``set_module_options({"extra_build_options":
    ...})``): include directories, preambles, hashed dependency files.

    The module's kernels are compiled with them (``BuildInputs``): each preamble is inserted
    into the generated unit after tapegrad's runtime headers and before the generated code (so
    a header can use the runtime's macros and ``@func_native`` snippets can call what it
    declares), the include folders are given to the C++ compiler / NVRTC (``-I``), and the
    preambles, folders and the dependency files' contents are part of the kernel cache key.

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
        """A new instance joining this one's and ``others``' entries (paths keep their first
        occurrence, preambles joined by newlines in argument order), no input modified.

        Raises:
            TypeError: an entry of ``others`` is not a ModuleBuildOptions.
        """
        for o in others:
            if not isinstance(o, ModuleBuildOptions):
                raise TypeError(f"ModuleBuildOptions.merged(*others): expected ModuleBuildOptions, got "
                                f"{type(o).__name__}")
        every = (self,) + others
        return ModuleBuildOptions(
            extra_cuda_include_dirs=_first([d for o in every for d in o.extra_cuda_include_dirs]),
            extra_cpu_include_dirs=_first([d for o in every for d in o.extra_cpu_include_dirs]),
            extra_cuda_preamble="\n".join(o.extra_cuda_preamble for o in every if o.extra_cuda_preamble),
            extra_cpu_preamble="\n".join(o.extra_cpu_preamble for o in every if o.extra_cpu_preamble),
            extra_build_dependencies=_first([d for o in every for d in o.extra_build_dependencies]))

    def __repr__(self):
        return (f"ModuleBuildOptions(extra_cuda_include_dirs={self.extra_cuda_include_dirs!r}, "
                f"extra_cpu_include_dirs={self.extra_cpu_include_dirs!r}, extra_cuda_preamble="
                f"{self.extra_cuda_preamble!r}, extra_cpu_preamble={self.extra_cpu_preamble!r}, "
                f"extra_build_dependencies={self.extra_build_dependencies!r})")


def _first(paths) -> list:
    return list(dict.fromkeys(paths))


def _recheck_build_options(o: "ModuleBuildOptions") -> None:
    """Check an instance's attributes again when it is applied: Warp's instances are edited in
    place and applied again (an edited attribute skipped the constructor's checks and failed
    later with Python's own words, or reached the compiler as a stray string's characters).

    Raises:
        TypeError, ValueError: as the constructor.
    """
    for name in ("extra_cuda_preamble", "extra_cpu_preamble"):
        v = getattr(o, name)
        if not isinstance(v, str):
            raise TypeError(f"ModuleBuildOptions({name}=...): expected a str, got {type(v).__name__}")
    for name in ("extra_cuda_include_dirs", "extra_cpu_include_dirs", "extra_build_dependencies"):
        # absolute paths; whether they exist is asked when the options are resolved (as Warp)
        setattr(o, name, _paths(getattr(o, name), name, lambda p: True))


def _preamble(text: str) -> str:
    # the trailing newline a preamble needs in the unit: "#define A 1" and "#define A 1\n" are one
    return text + "\n" if text and not text.endswith("\n") else text


@dataclass(frozen=True)
class BuildInputs:
    """A module's ``extra_build_options`` resolved for a build: what the compilers get besides
    the generated code.

    Attributes:
        cpu_include_dirs, cuda_include_dirs: folders given with ``-I`` (tuples of paths).
        cpu_preamble, cuda_preamble: C++ text, ending with a newline when not empty.
        dependencies: ``((path, sha256 of its contents), ...)``, read when resolved.
        cuda_folders: a digest of the files the CUDA include folders hold (their paths, sizes
            and modification times, when resolved; "" without folders): NVRTC does not report
            the headers it reads (the CPU build's are recorded, ``build.headers_library_path``),
            so an edited header there changes the unit, hence the cache key.
    """

    cpu_include_dirs: tuple = ()
    cuda_include_dirs: tuple = ()
    cpu_preamble: str = ""
    cuda_preamble: str = ""
    dependencies: tuple = ()
    cuda_folders: str = ""

    def is_empty(self) -> bool:
        """Whether the build gets nothing extra (the unit is tapegrad's own code alone)."""
        return self == _NO_INPUTS

    def include_dirs(self, cuda: bool) -> tuple:
        """The include folders of the CUDA (``cuda``) or CPU build."""
        return self.cuda_include_dirs if cuda else self.cpu_include_dirs

    def unit_text(self) -> str:
        """What the generated unit holds of these inputs, between the runtime headers and the
        generated code: a comment naming the folders and the dependencies' digests (so the
        unit's digest, the cache key, changes with them) and both preambles, each under its
        target. Empty when nothing is asked for."""
        if self.is_empty():
            return ""
        lines = ["// ---- extra_build_options",
                 f"// cpu include dirs: {list(self.cpu_include_dirs)}",
                 f"// cuda include dirs: {list(self.cuda_include_dirs)}"]
        lines += [f"// dependency {p}: sha256 {h}" for p, h in self.dependencies]
        if self.cuda_folders:
            lines.append(f"// cuda include folders' files: {self.cuda_folders}")
        lines += ["#ifdef TG_CUDA", self.cuda_preamble + "#else", self.cpu_preamble + "#endif"]
        return "\n".join(lines) + "\n"

    @property
    def digest(self) -> str:
        """A short digest of the inputs ("" when empty): keys of the builds made with them."""
        if self.is_empty():
            return ""
        return hashlib.sha256(repr(self).encode()).hexdigest()[:16]


_NO_INPUTS = BuildInputs()


def _resolve_inputs(opts) -> BuildInputs:
    if opts is None:
        return _NO_INPUTS
    deps = []
    for p in opts.extra_build_dependencies:
        try:
            with open(p, "rb") as f:
                deps.append((p, hashlib.sha256(f.read()).hexdigest()))
        except OSError as e:
            raise ValueError(f"extra_build_options: the dependency {p!r} cannot be read ({e.strerror})") from None
    for d in opts.extra_cpu_include_dirs + opts.extra_cuda_include_dirs:
        if not os.path.isdir(d):
            raise ValueError(f"extra_build_options: the include folder {d!r} no longer exists")
    return BuildInputs(tuple(opts.extra_cpu_include_dirs), tuple(opts.extra_cuda_include_dirs),
                       _preamble(opts.extra_cpu_preamble), _preamble(opts.extra_cuda_preamble), tuple(deps),
                       _folders_digest(opts.extra_cuda_include_dirs))


def _folders_digest(dirs) -> str:
    """A digest of every file under ``dirs`` (path, size, modification time): a header edited
    there changes it. Stat only, no reads: a large SDK folder costs a walk, once per resolution."""
    if not dirs:
        return ""
    h = hashlib.sha256()
    for d in dirs:
        for root, subdirs, files in os.walk(d):
            subdirs.sort()
            for f in sorted(files):
                p = os.path.join(root, f)
                try:
                    st = os.stat(p)
                except OSError:   # vanished meanwhile, a dangling link
                    continue
                h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:16]


def build_inputs(name: str) -> BuildInputs:
    """The ``BuildInputs`` of module ``name``: resolved (dependency files read) on first use
    after its options last changed, then reused, so an edited dependency is seen after the
    next ``set_module_options`` of the module or in a new process (as Warp's).

    Raises:
        ValueError: a dependency cannot be read or an include folder vanished.
    """
    with _lock:
        hit = _RESOLVED.get(name)
        opts = _TABLE.get(name, DEFAULTS)["extra_build_options"]
        gen = _UPDATES.get(name, 0)
    if hit is not None:
        return hit
    bi = _resolve_inputs(opts)
    with _lock:
        # kept only if the options were not applied again while they were read
        # (set_module_options on another thread): the old inputs would outlive the change
        if _UPDATES.get(name, 0) == gen:
            _RESOLVED[name] = bi
    return bi


def resolve_options(name: str, config=None, block_dim=None) -> dict:
    """A fully resolved copy of module ``name``'s options (Warp's ``Module.resolve_options``):
    ``mode`` from ``config`` (``tg.config`` when None) where the module leaves it None,
    ``block_dim`` overridden when given, and ``extra_build_options`` replaced by its resolved
    parts: ``extra_cpu_include_dirs``, ``extra_cuda_include_dirs`` (tuples),
    ``extra_cpu_preamble``, ``extra_cuda_preamble`` (ending with a newline when not empty)
    and ``extra_build_dependencies`` (``((path, sha256), ...)``).

    Raises:
        ValueError: as ``build_inputs``; a bad ``block_dim``.
    """
    if config is None:
        config = _config
    out = module_options(name)
    if block_dim is not None:
        if isinstance(block_dim, bool) or not isinstance(block_dim, int) or block_dim <= 0:
            raise ValueError(f"resolve_options(block_dim=...): expected a positive int, got {block_dim!r}")
        out["block_dim"] = block_dim
    if out["mode"] is None:
        out["mode"] = getattr(config, "mode", "release")
    out.pop("extra_build_options")
    bi = build_inputs(name)
    out.update(extra_cpu_include_dirs=bi.cpu_include_dirs, extra_cuda_include_dirs=bi.cuda_include_dirs,
               extra_cpu_preamble=bi.cpu_preamble, extra_cuda_preamble=bi.cuda_preamble,
               extra_build_dependencies=bi.dependencies)
    return out


def _paths(values, name: str, exists) -> list:
    if values is None:
        return []
    if isinstance(values, (str, bytes)):
        raise TypeError(f"ModuleBuildOptions({name}=...): expected a sequence of paths, got a single "
                        f"{type(values).__name__}")
    try:
        values = list(values)
    except TypeError:
        raise TypeError(f"ModuleBuildOptions({name}=...): expected a sequence of paths, got "
                        f"{type(values).__name__}") from None
    out = []
    for v in values:
        if not isinstance(v, (str, bytes, os.PathLike)):
            raise TypeError(f"ModuleBuildOptions({name}=...): expected paths (str or os.PathLike), got "
                            f"{type(v).__name__} {v!r}")
        p = os.fsdecode(v)   # a bytes path as text: it reaches the compiler's -I and the unit's comment
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

# re-entrant: a unique module's kernel can die in a garbage collection that an allocation made
# under the lock triggers, and its finalizer (forget_module) takes the lock on the same thread
_lock = threading.RLock()
_TABLE: dict = {}   # module name -> its options (a full copy of DEFAULTS, updated)
_RESOLVED: dict = {}   # module name -> its BuildInputs (dropped when its options change)
_UPDATES: dict = {}    # module name -> how many times its options were applied
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
        _RESOLVED.pop(name, None)
        _UPDATES[name] = _UPDATES.get(name, 0) + 1
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
        if k == "deterministic":
            check_deterministic(v, f"{who}(options): 'deterministic'")
        if k == "extra_build_options" and v is not None:
            if not isinstance(v, ModuleBuildOptions):
                raise TypeError(f"{who}(options): 'extra_build_options' expects None or a ModuleBuildOptions, "
                                f"got {type(v).__name__}")
            _recheck_build_options(v)
        if k == "launch_bounds":
            check_launch_bounds(v, who)
        if k == "cpu_grain":
            check_cpu_grain(v, who)
        if k == "entry_point_abi" and v not in ENTRY_POINT_ABIS:
            raise ValueError(f"{who}(options): 'entry_point_abi' expects one of {list(ENTRY_POINT_ABIS)}, got {v!r}")


# Options a single kernel takes (``@kernel(...)``, ``Kernel(options=...)``) besides the module ones
KERNEL_OPTIONS = {"launch_bounds": None, "entry_point_abi": "warp", "cuda_max_registers": None,
                  "enable_cuda_smem_spilling": False, "grid_stride": None, "cluster_dim": None, "cpu_grain": None}


def check_cpu_grain(v, who: str) -> None:
    """None or a positive int (a kernel's ``cpu_grain``: the fewest grid threads of a CPU
    OpenMP chunk).

    Raises:
        ValueError: anything else.
    """
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2 ** 24):
        raise ValueError(f"{who}: 'cpu_grain' expects None or an int in [1, 2**24] (the fewest grid threads of "
                         f"an OpenMP chunk on the CPU), got {v!r}")


def check_deterministic(v, who: str) -> bool:
    """Whether the ``deterministic`` option value ``v`` asks for run-to-run reproducible
    launches (``DeterministicMode.RUN_TO_RUN``, or True); False for None, False and
    ``NOT_GUARANTEED``.

    Raises:
        ValueError: ``GPU_TO_GPU`` (tapegrad cannot promise equal results across device
            architectures) or a value that is not a ``DeterministicMode``, a bool or None.
    """
    if v is None or v is False or (isinstance(v, int) and not isinstance(v, bool) and v == 0):
        return False
    if v is True or (isinstance(v, int) and v == DeterministicMode.RUN_TO_RUN):
        return True
    if isinstance(v, int) and v == DeterministicMode.GPU_TO_GPU:
        raise ValueError(f"{who}: DeterministicMode.GPU_TO_GPU (equal results across device architectures) is not "
                         f"supported: tapegrad compiles each device's code on its own; use "
                         f"DeterministicMode.RUN_TO_RUN (bit-identical repeated runs, CPU launches only)")
    raise ValueError(f"{who}: expected None, a bool or a DeterministicMode (NOT_GUARANTEED, RUN_TO_RUN), got {v!r}")


def deterministic(name: str) -> bool:
    """Whether module ``name``'s kernels run their CPU launches serially in grid order
    (its ``deterministic`` option is ``RUN_TO_RUN``)."""
    with _lock:
        v = _TABLE.get(name, DEFAULTS)["deterministic"]
    return check_deterministic(v, f"module '{name}' option 'deterministic'")


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
    """Drop a ``"unique"`` module's options and its ``Module`` object (its kernel died)."""
    with _lock:
        _TABLE.pop(name, None)
        _RESOLVED.pop(name, None)
        _UPDATES.pop(name, None)
        _MODULES.pop(name, None)


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


_HASHER: list = []   # the module content hash (lang/kernel.py registers it: it knows the kernels)
_LOADER: list = []   # the module loader (lang/kernel.py registers it too)
_MODULES: dict = {}  # module name -> its one Module object


def register_module_hasher(fn) -> None:
    """Register ``fn(name) -> bytes``, the content hash ``Module.hash_module`` returns."""
    _HASHER[:] = [fn]


def register_module_loader(fn) -> None:
    """Register ``fn(name, device) -> dict``, what ``Module.load`` runs (it loads the module's
    kernels for the device and returns them by key)."""
    _LOADER[:] = [fn]


class Module:
    """The kernels of one module, as Warp groups them: by default every kernel and ``@func``
    of a Python module belongs to the module named after it, a ``module="unique"`` kernel to
    one of its own. There is one object per name (``wp.get_module(name)``, ``kernel.module``):
    its ``name``, ``options`` (``ModuleOptions``: assignment sets the option) and ``load``,
    which loads all of its kernels. tapegrad still compiles each kernel into a binary of its
    own, on its first launch or ``load``.
    """

    def __init__(self, name: str):
        self.name = name

    @property
    def options(self) -> ModuleOptions:
        return ModuleOptions(self.name)

    def load(self, device=None, block_dim=None) -> dict:
        """Compile (or load from the disk cache) every kernel of the module for ``device``
        (default: the current device), as Warp's ``Module.load``: the newest definition of each
        kernel, and each specialization made so far of a generic kernel.

        Args:
            device: a device or its name. block_dim: None or a positive int, accepted as in Warp
                (the compiled code does not depend on it).
        Returns:
            ``{kernel key: loaded kernel}`` (what ``kernel.module_for(device)`` returns; empty
            when the module has no kernel to build yet).
        Raises:
            TypeError/ValueError: a bad ``block_dim`` or device. KernelError, CompileError: a
                kernel of the module does not build (as its launch would raise);
                WarpCodegenError: a CUDA-only (external entry) kernel loaded on the CPU.
            RuntimeError: no kernel code is loaded in this process.
        """
        if not _LOADER:
            raise RuntimeError("Module.load: the kernel language is not loaded")
        return _LOADER[0](self.name, device, block_dim)

    def __call__(self, device=None):
        raise TypeError(f"module '{self.name}' is shared by the kernels of its module (as Warp's): call "
                        f"kernel.module_for(device) for one kernel's loaded binary, or module.load(device) for all")

    def resolve_options(self, config=None, block_dim=None) -> dict:
        """The options fully resolved (``resolve_options``: mode from ``config``, the build inputs)."""
        return resolve_options(self.name, config, block_dim)

    def hash_module(self) -> bytes:
        """The content hash of the module's kernels and options (``kernel.module_hash``): equal
        for a redefinition with the same content, different when code, types or build options
        change.

        Raises:
            RuntimeError: no kernel code is loaded in this process (nothing registered a hasher).
        """
        if not _HASHER:
            raise RuntimeError("Module.hash_module: the kernel language is not loaded")
        return _HASHER[0](self.name)

    def get_module_hash(self, block_dim=None) -> bytes:
        """Warp's spelling of ``hash_module`` (``block_dim`` does not change tapegrad's code)."""
        return self.hash_module()

    def __eq__(self, other):
        return isinstance(other, Module) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"<tapegrad module {self.name!r}>"


def get_module(name: str) -> Module:
    """The module named ``name`` (a Python module's name, as kernels record it): the same
    object on every call, and the ``kernel.module`` of its kernels.

    Raises:
        TypeError: ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"get_module(name): expected a str, got {type(name).__name__}")
    with _lock:
        m = _MODULES.get(name)
        if m is None:
            m = _MODULES[name] = Module(name)
    return m
