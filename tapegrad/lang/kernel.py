"""``@kernel`` and the ``Kernel`` object: lowering on first use, C++ parts, loading per device.

Parsing is lazy: the first access to ``arg_names``/``arg_types``/``arg_access`` or the first
``module(device)`` lowers the function (``lower.lower``; warns about costly adjoints);
``module(device)`` compiles (or loads from the disk cache) and memoizes per device.
"""
from __future__ import annotations

import hashlib
import inspect
import itertools
import re
import threading
import time
import typing
import weakref

from .. import abi, build, buildlog, modules
from ..config import add_mode_listener, config
from ..cuda.preload import register_capture_preloader
from ..device import get_cuda_device_count, get_device
from ..errors import KERNEL_RETURN_MESSAGE, KernelError, WarpCodegenError, WarpCodegenTypeError
from ..types import type_of
from . import debug, depends, direct, emit
from .elementwise import vector_plan
from .generic import concrete_type, infer_type, is_generic_type
from .ir import c_identifier
from .kernel_args import KernelArg, KernelArgs
from .lower import Target, lower
from .options import (
    add_options_listener,
    build_inputs,
    check_cpu_grain,
    check_deterministic,
    check_kernel_options,
    check_launch_bounds,
    forget_module,
    get_module,
    kernel_module_name,
    register_module_hasher,
    register_module_loader,
    resolve_options,
)
from .options import deterministic as module_deterministic
from .options import module_options as options_of_module
from .ptr_arrays import adjoint_refusal
from .signature import annotations, capture_source, resolve_type, short_hash, source_of, where
from .typeutil import is_struct, type_name

# Lowering and code generation run under one lock: they are pure Python (the GIL admits one
# thread anyway) and share the frontend's tables (``@func`` specializations and their recursion
# guard, tuple structs), so no build of another kernel waits for a C++ compile behind it.
# Compiling and loading take only the kernel's own ``build_lock``.
_lock = threading.RLock()
_KEYS: dict = {}    # key base -> suffixes held by live kernels (a dead kernel's key is reused)
_SERIAL = itertools.count()


def _take_key(base: str) -> str:
    """A key unique among live kernels: ``base``, else ``base_1``, ``base_2``... (the smallest
    free). A kernel re-created after its predecessor died gets the same key, hence the same
    symbol, source and disk-cache entry, instead of compiling ``base_<n>`` for every new n."""
    with _lock:
        used = _KEYS.setdefault(base, set())
        n = 0
        while n in used:
            n += 1
        used.add(n)
    return base if n == 0 else f"{base}_{n}"


def _free_key(base: str, key: str) -> None:
    # a weakref.finalize callback (may run inside a gc pass on any thread): set.discard
    # needs no lock
    n = 0 if key == base else int(key[len(base) + 1:])
    _KEYS.get(base, set()).discard(n)


class Kernel:
    """A compiled-on-demand kernel. See the module docstring for the lifecycle."""

    def __init__(self, func, enable_backward=None, key=None, arg_types=None, *, module=None, options=None,
                 _module_name=None):
        """Args:
            func: the Python function.
            enable_backward: generate the adjoint; None: ``options["enable_backward"]``, else
                the module's ``enable_backward`` option.
            key: the kernel's unique key (default: module and qualified name).
            arg_types: a specialization's concrete parameter types.
            module: Warp's ``module=``: None (the function's Python module), ``"unique"``, a
                module name or a ``Module``; names the options table entry the kernel reads.
            options: the kernel's own options (Warp's ``Kernel(options=...)``: module option
                names, ``launch_bounds``...), kept in ``kernel.options``.
        Raises:
            TypeError, ValueError: bad ``options`` or ``module``.
        """
        self.func = func
        # the file's text now: lowering (lazy) parses this, not what the file holds by then
        capture_source(func)
        self.options = check_kernel_options(options, "Kernel")
        if _module_name is None:
            _module_name = kernel_module_name(func, module, who="Kernel")
            if module == "unique":
                weakref.finalize(self, forget_module, _module_name)
        self.module_name = _module_name
        if enable_backward is None:
            enable_backward = self.options.get("enable_backward")
        if enable_backward is None:
            enable_backward = options_of_module(self.module_name)["enable_backward"]
        self._forced = None if arg_types is None else tuple(arg_types)   # a specialization's types
        self._params = None         # (names, annotated types) with None / array(Any) for generic ones
        self._specs: dict = {}      # argument types -> specialized Kernel (generic kernels)
        self.enable_backward = bool(enable_backward)
        base = key or f"{func.__module__}.{func.__qualname__}".replace(".<locals>", "")
        self.key = _take_key(base)
        self.key_base = base        # the key before _take_key's suffix: a redefinition replaces its kernel
        self.serial = next(_SERIAL)   # creation order (the newest kernel of a key base is the module's)
        weakref.finalize(self, _free_key, base, self.key)
        self.symbol = f"tgk_{c_identifier(func.__name__)}_{short_hash(self.key)}"
        self.__name__ = func.__name__
        self.__qualname__ = getattr(func, "__qualname__", func.__name__)
        self.__module__ = func.__module__   # as functools.update_wrapper: wp.get_module(k.__module__)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self._ir = None
        self._wide_ir = None        # the wide variant's IR (int64 tid()), lowered on first wide launch
        self._arg_names = None
        self._arg_types = None
        self._facts = None          # direct.Facts: from the IR, or from the direct cache's manifest
        self._record = None         # depends.Record of the default lowering (written to the manifest)
        self._manifest = None       # direct.Manifest found in the cache (False: looked, none)
        self._source = None
        self._modules: dict = {}    # device alias (default build) or (alias, Variant) -> loaded module
        self._by_id: dict = {}      # id(device) -> (device, module of the launches <= 2^31 - 1 threads)
        self.launch_plan = None   # what tapegrad.launch computes once per kernel (its LaunchPlan)
        # Warp's module object, shared by the kernels of the module (its load loads them all);
        # module_for(device) loads this kernel alone
        self.module = get_module(self.module_name)
        # Held while this kernel compiles and loads (module_for) and while its launch plan is
        # built: threads making its first launch together build it once, and other kernels'
        # builds never wait for it. Everything it guards is published fully built (assigned once).
        # Re-entrant: building the plan may load the module and the other way round.
        self.build_lock = threading.RLock()
        with _lock:   # a WeakSet add racing a snapshot (list(_ALL)) would break the iteration
            _ALL.add(self)
            if arg_types is None:
                _register_qualname(self, func, base)

    def __repr__(self):
        return f"<tapegrad kernel {self.key}>"

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"kernel '{self.key}' cannot be called directly; use tg.launch({self.__name__}, dim=..., "
                           "inputs=[...])")

    # --------------------------------------------------------------- lazy parse
    def _resolve_params(self):
        if self._params is None:
            params, ret = annotations(self.func, "kernel")
            if ret not in (inspect.Signature.empty, None, type(None)):
                raise WarpCodegenTypeError(f"{where(self.func)}: kernel '{self.key}': {KERNEL_RETURN_MESSAGE}")
            names = [n for n, _ in params]
            if self._forced is not None:
                types = list(self._forced)
            else:   # typing.Any and array(dtype=Any) make the kernel generic; a missing annotation is an error
                types = [None if a is typing.Any else resolve_type(self.func, "kernel", n, a) for n, a in params]
            self._params = (names, types)
        return self._params

    def parameters(self) -> tuple:
        """``(names, annotations)`` of the parameters, without parsing the body; a generic
        parameter's annotation is None (``Any``) or an array of ``typing.Any``."""
        names, types = self._resolve_params()
        return list(names), list(types)

    @property
    def overloads(self) -> dict:
        """The specializations made so far (Warp's ``kernel.overloads``): argument types -> kernel."""
        return dict(self._specs)

    def adjoint_refusal(self) -> str | None:
        """Why this kernel's adjoint (and tangent) would not be exact, so that every adjoint launch
        raises it: it builds floating-point arrays from addresses (``tg.array(ptr=...)`` in the
        kernel, whose memory no launch or tape sees). None when the adjoint is exact (or the
        kernel has none: ``enable_backward=False``)."""
        if not self.enable_backward or self.is_generic():
            return None
        return adjoint_refusal(self)

    def is_generic(self) -> bool:
        """Whether parameters are ``typing.Any`` (or arrays of ``Any``): launches specialize it."""
        return any(is_generic_type(t) for t in self._resolve_params()[1])

    def specialize(self, types) -> "Kernel":
        """The kernel for concrete parameter ``types`` (cached: one kernel, symbol and binary each).

        Raises:
            TypeError: wrong number of types, or a type a generic parameter cannot take.
        """
        return self._specialized(tuple(type_of(t) for t in types))

    def _specialized(self, types):
        names, params = self._resolve_params()
        k = self._specs.get(types)
        if k is not None:
            return k
        if len(types) != len(params):
            raise TypeError(f"kernel '{self.key}' takes {len(params)} arguments ({', '.join(names)}), "
                            f"got {len(types)} types")
        for n, p, t in zip(names, params, types):
            if not is_generic_type(p) and t != p:
                raise TypeError(f"kernel '{self.key}' parameter '{n}' is {type_name(p)}, got {type_name(t)}")
        with _lock:
            k = self._specs.get(types)
            if k is None:
                label = ", ".join(type_name(t) for t in types)
                k = self._specs[types] = Kernel(self.func, self.enable_backward, key=f"{self.key}[{label}]",
                                                arg_types=types, options=self.options,
                                                _module_name=self.module_name)
        return k

    def specialize_for(self, args) -> "Kernel":
        """The specialization a launch with ``args`` runs (types read from the arguments).

        Raises:
            TypeError: wrong argument count, or an argument whose type cannot be read.
        """
        names, params = self._resolve_params()
        if len(args) != len(params):
            raise TypeError(f"launch: kernel '{self.key}' takes {len(params)} arguments ({', '.join(names)}), "
                            f"got {len(args)}")
        types = tuple(infer_type(p, a, f"kernel '{self.key}' argument {i} ('{names[i]}')")
                      if is_generic_type(p) else p for i, (p, a) in enumerate(zip(params, args)))
        return self._specialized(types)

    def _parse(self):
        if self._ir is not None:    # published last, after the argument tables
            return
        with _lock:
            if self._ir is not None:
                return
            names, types = self._resolve_params()
            if self.is_generic():
                raise KernelError(f"{where(self.func)}: kernel '{self.key}' is generic (typing.Any parameters): "
                                  f"launch it (each argument type combination compiles once) or take a "
                                  f"specialization with tg.overload({self.__name__}, [types...])")
            with depends.recording() as record:
                ir = lower(Target(self.func, "kernel", self.key, tuple(types), label=self.key,
                                  backward=self.enable_backward))
            self._record = record()
            plan = vector_plan(ir)
            facts = direct.Facts(tuple(ir.param_access), ir.tid_ndim, plan.lanes if plan is not None else 1)
            self._arg_names = names
            self._arg_types = types
            if self._facts is None:
                self._facts = facts
            self._ir = ir

    def _concrete_params(self):
        names, types = self._resolve_params()
        if self._arg_types is None:
            if self.is_generic():
                self._parse()   # raises the generic kernel's error
            self._arg_names, self._arg_types = names, types
        return self._arg_names, self._arg_types

    @property
    def is_lowered(self) -> bool:
        """Whether the body has been lowered in this process (a kernel loaded through the
        direct cache is not, until something needs its IR)."""
        return self._ir is not None

    @property
    def arg_names(self) -> list:
        return self._concrete_params()[0]

    @property
    def arg_types(self) -> list:
        """The parameter types (read from the annotations; the body is lowered only when needed).

        Raises:
            KernelError: the kernel is generic (launches specialize it), or an annotation is
                not a kernel type.
        """
        return self._concrete_params()[1]

    def facts(self) -> direct.Facts:
        """What launches need from the lowered body (``direct.Facts``): from the IR, or in a
        fresh process from the direct cache's manifest without lowering (``lang/direct.py``).

        Raises:
            KernelError: the kernel does not type-check.
        """
        f = self._facts
        if f is None:
            with self.build_lock:
                f = self._facts
                if f is None:
                    m = self._cached_manifest()
                    if m is not None:
                        f = self._facts = m.facts
                    else:
                        self._parse()
                        f = self._facts
        return f

    def _cached_manifest(self):
        """The verified direct-cache manifest of this kernel's default build, looked up once."""
        m = self._manifest
        if m is None:
            m = False
            if self._ir is None and not self.is_generic() and self.mode() != "debug":
                m = direct.lookup(self) or False
                if m:
                    direct.replay_warnings(m)
            self._manifest = m
        return m or None

    @property
    def arg_access(self) -> list:
        """Per argument ``(reads, writes)``: whether the forward loads from / stores or atomically
        updates that array (``(False, False)`` for non-array arguments)."""
        return list(self.facts().access)

    @property
    def ir(self):
        self._parse()
        return self._ir

    @property
    def tid_ndim(self) -> int:
        """How many indices the body unpacks ``tg.tid()`` into (``i, j = tg.tid()``: 2; 0: no tid())."""
        return self.facts().tid_ndim

    @property
    def adj(self) -> KernelArgs:
        """What Warp code reads of Warp's ``kernel.adj`` (``lang.kernel_args``): ``adj.args``
        (``label``, ``type``), ``adj.kernel_dim``, ``adj.source`` and ``adj.get_references()``."""
        return KernelArgs(tuple(KernelArg(n, t) for n, t in zip(self.arg_names, self.arg_types)),
                          max(self.tid_ndim, 1), source_of(self.func)[0], self._references)

    def _references(self) -> tuple:
        self._parse()
        if self._record is None:   # lowered before recording existed: no lookups known
            return {}, {}, {}
        return depends.references(self.func, self._record)

    @property
    def vector_lanes(self) -> int:
        """Launch threads one CUDA thread runs in the elementwise forward entry (16-byte loads
        and stores, ``lang/elementwise.py``); 1 when the kernel is not elementwise. The CUDA
        launch sizes its grid by it."""
        return self.facts().lanes

    # --------------------------------------------------------------- codegen
    def wide_ir(self):
        """The IR of the kernel's wide variant (``tid()``, ``len()``, ``a.shape[k]`` int64; int32
        operands next to them promoted), lowered on first use.

        Raises:
            KernelError: the body does not type-check with a 64-bit ``tid()`` (e.g. it stores a
                tid()-derived value into an int32 array); the message says so and names the line.
        """
        self._parse()
        with _lock:
            if self._wide_ir is None:
                names, types = self._resolve_params()
                try:
                    self._wide_ir = lower(Target(self.func, "kernel", self.key, tuple(types), label=self.key,
                                                 backward=self.enable_backward, wide=True))
                except KernelError as e:
                    raise KernelError(f"kernel '{self.key}' cannot run over 2^31 - 1 threads: in such launches "
                                      f"tid() is an int64 (int32 operands next to it widen; storing or assigning "
                                      f"it to an int32 needs an explicit tg.int32(...)): {e}") from None
        return self._wide_ir

    @property
    def entry_point_abi(self) -> str:
        """How the kernel's CUDA entry takes its arguments (``abi.ENTRY_POINT_ABIS``): ``"warp"``
        (``tg.launch``) or ``"external_constant_params"`` (an outside launcher; see ``kernel``)."""
        return self.options.get("entry_point_abi", "warp")

    def get_mangled_name(self) -> str:
        """The kernel's name in generated code (Warp's ``kernel.get_mangled_name()``): with the
        module option ``strip_hash`` its key (a C identifier: other characters become ``_``),
        else its symbol (the key's name and a hash of it). An ``external_constant_params``
        kernel's CUDA entry has this name."""
        if options_of_module(self.module_name)["strip_hash"]:
            return c_identifier(self.key)
        return self.symbol

    def external_entry(self):
        """The ``emit.ExternalEntry`` of an ``external_constant_params`` kernel (None for the
        ``"warp"`` ABI), after checking the kernel fits that ABI.

        Raises:
            WarpCodegenTypeError: the kernel does not take exactly one struct argument.
            WarpCodegenError: the body calls ``tid()`` (the outside launcher's grid has no bounds
                tapegrad knows), or the kernel was built with its adjoint.
        """
        if self.entry_point_abi != "external_constant_params":
            return None
        who = f"Kernel '{self.key}' with entry_point_abi='external_constant_params'"
        names, types = self._concrete_params()
        if len(types) != 1 or not is_struct(types[0]):
            got = ", ".join(f"{n}: {type_name(t)}" for n, t in zip(names, types)) or "no argument"
            raise WarpCodegenTypeError(f"{who} must take exactly one Warp struct argument (the launcher's "
                                       f"params), got ({got})")
        if self.enable_backward:
            raise WarpCodegenError(f"{who} does not support backward code generation; set enable_backward=False.")
        self._parse()
        if self._ir.tid_ndim:
            raise WarpCodegenError(f"{who} cannot use wp.tid(); the external entry point has no launch bounds "
                                   f"(the outside launcher picks the grid)")
        return emit.ExternalEntry(abi.external_entry_name(self.get_mangled_name()))

    def builds_on(self, device) -> bool:
        """Whether the kernel has a build for ``device``: an ``external_constant_params`` kernel
        is CUDA-only (``force_load``/``load_module`` skip it on the CPU; loading it there raises)."""
        return self.entry_point_abi == "warp" or bool(getattr(device, "is_cuda", False))

    def check_launchable(self, who: str = "launch") -> None:
        """Raise unless ``tg.launch`` can run the kernel (its entry point ABI is ``"warp"``).

        Raises:
            RuntimeError: an ``external_constant_params`` kernel (launched from outside tapegrad).
        """
        if self.entry_point_abi != "warp":
            raise RuntimeError(f"{who}: Kernel '{self.key}' uses entry_point_abi='{self.entry_point_abi}' and cannot "
                               f"be launched with wp.launch(); load it (kernel.module_for(cuda_device)) and launch "
                               f"its entry '{self.get_mangled_name()}' from the external runtime")

    def cpp_parts(self, seen=None, variant=emit.DEFAULT, sites=None):
        """The generated C++ parts (structs, functions, this kernel) for one translation unit;
        ``seen`` (a set) skips parts another kernel of the same unit already contributed;
        ``variant``: which build (``emit.Variant``), ``sites``: a debug build's ``emit.DebugSites``.

        Raises:
            KernelError: the kernel does not type-check, or does not fit its entry point ABI
                (``external_entry``).
        """
        self._parse()
        external = self.external_entry()
        with _lock:   # emission reads IR shared with other kernels (their @func specializations)
            ir = self.wide_ir() if variant.wide else self._ir
            return emit.kernel_parts(ir, self.symbol, self.enable_backward, set() if seen is None else seen,
                                     variant, sites, external, self.cpu_grain())

    def cpu_grain(self):
        """The kernel's ``cpu_grain`` option (None: the default), checked again here: Warp code
        writes ``kernel.options`` items directly, and a grain of 0 divided by zero in the
        emitted CPU loop (the process died of SIGFPE).

        Raises:
            ValueError: ``kernel.options["cpu_grain"]`` is not None or an int in [1, 2**24].
        """
        grain = self.options.get("cpu_grain")
        check_cpu_grain(grain, f"kernel '{self.key}' options")
        return grain

    def mode(self) -> str:
        """The build mode of this kernel's next loads: its Python module's ``"mode"`` option
        (``tg.set_module_options``), else ``tg.config.mode``."""
        opt = options_of_module(self.module_name)["mode"]
        return opt if opt is not None else config.mode

    def deterministic(self) -> bool:
        """Whether the kernel's launches must be run-to-run reproducible: its own
        ``options["deterministic"]`` when set, else its module's (``RUN_TO_RUN``; see
        ``DeterministicMode``). Such a kernel loads the ``serial`` build on the CPU.

        Raises:
            ValueError: an option value tapegrad does not support (``GPU_TO_GPU``).
        """
        if self.options.get("deterministic") is not None:
            return check_deterministic(self.options["deterministic"], f"kernel '{self.key}' options['deterministic']")
        return module_deterministic(self.module_name)

    def build_inputs(self):
        """The ``options.BuildInputs`` of the kernel's module (its ``extra_build_options``)."""
        return build_inputs(self.module_name)

    def build_key(self) -> str:
        """What a build depends on besides the function and its types: the module's build
        inputs (``BuildInputs.digest``) and an external entry's name (``strip_hash``); the
        direct cache's manifest key holds it."""
        ext = self.get_mangled_name() if self.entry_point_abi != "warp" else ""
        grain = self.cpu_grain()   # the CPU loop's schedule is emitted with it
        return f"{self.build_inputs().digest}:{self.entry_point_abi}:{ext}" + (f":g{grain}" if grain else "")

    def source(self) -> str:
        """The complete C++ translation unit of this kernel (both targets), with its module's
        ``extra_build_options`` preambles."""
        key = self.build_key()
        got = self._source
        if got is None or got[0] != key:
            got = self._source = (key, emit.module_source(self.cpp_parts(), self.build_inputs().unit_text()))
        return got[1]

    def module_for(self, device, wide=False):
        """Compile (or load from cache) for ``device``; memoized per device (the launch path
        calls it; ``kernel.module.load(device)`` loads every kernel of the module). The build
        follows ``mode()`` (a debug build checks every array access), ``deterministic()`` and
        ``wide`` (the variant with a 64-bit ``tid()``, for launches of more than 2^31 - 1 threads);
        each variant is compiled on first use and cached on its own.

        Returns:
            An object with ``launch(bounds, argv, adjoint, stream, block_dim, max_blocks)`` (a
            debug build's raises ``tapegrad.KernelIndexError`` after a launch that indexed out of range).
        Raises:
            KernelError: the kernel does not type-check (for ``wide``: with a 64-bit ``tid()``).
            tapegrad.CompileError: the C++ compiler / NVRTC failed.
        """
        if not wide:
            hit = self._by_id.get(id(device))
            if hit is not None and hit[0] is device:
                return hit[1]
        serial = self.deterministic()
        if serial and getattr(device, "is_cuda", False):
            raise RuntimeError(f"kernel '{self.key}': deterministic=DeterministicMode.RUN_TO_RUN is honoured on the "
                               f"CPU only (its launches run serially there); tapegrad has no ordered-reduction build "
                               f"for CUDA, so it cannot promise reproducible atomics on {device}")
        variant = emit.Variant(bool(wide), self.mode() == "debug", serial)
        key = _module_key(device, variant, self.build_inputs())
        m = self._modules.get(key)
        if m is None:
            with self.build_lock:   # this kernel only: others compile in parallel
                m = self._modules.get(key)
                if m is None and variant == emit.DEFAULT and self._ir is None:
                    m = self._load_direct(device)
                if m is None:
                    m = load_kernels([self], device, variant)[0]
        if not wide:
            self._by_id[id(device)] = (device, m)   # keeps device alive: its id cannot be reused
        return m

    def _load_direct(self, device):
        """The default build's module from the binary the direct-cache manifest names, or None
        (no manifest, or its binary is missing or damaged: the caller lowers and builds)."""
        m = self._cached_manifest()
        if m is None:
            return None
        name = _module_name([self])
        t0 = time.perf_counter()
        if getattr(device, "is_cuda", False):
            image = build.find_cuda(m.source_digest, name, int(device.arch))
            if image is None:
                return None
            mod = modules.CudaModule(build.load_cuda_image(image, device), self, device, m.facts.lanes)
        else:
            lib = build.find_cpu(m.source_digest, name)
            if lib is None:
                return None
            mod = modules.CpuModule(lib, self)
        buildlog.loaded(name, device, time.perf_counter() - t0, False, [self])
        self.memoize_module(device, mod)
        return mod

    def remember_build(self, source: str) -> None:
        """Write the direct-cache manifest after this kernel's default build from ``source``
        (``load_kernels`` calls it), so a fresh process loads the binary without lowering."""
        if self._record is not None and self._record.reason is None and not self._manifest:
            extra = {name: rule(self, self._ir) for name, rule in list(direct.FACT_RULES.items())}
            digest = build.source_digest(source)
            if direct.store(self, self._record, digest, self._facts, extra):
                self._manifest = direct.Manifest(digest, self._facts, self._record.warnings, extra)

    def fact(self, name: str):
        """A registered IR fact (``direct.register_fact``): from the direct cache's manifest when
        the kernel was loaded through it or is not lowered yet, else computed from the IR
        (lowering it if needed).

        Raises:
            KeyError: no fact ``name`` is registered.
        """
        rule = direct.FACT_RULES[name]
        # not lowered yet: the manifest (a jax_kernel/paddle_op of a cached kernel reads its
        # facts before any module load, and must not lower just for them)
        m = self._cached_manifest() if self._ir is None else self._manifest
        if m and m.extra is not None and name in m.extra:
            return m.extra[name]
        return rule(self, self.ir)

    def memoize_module(self, device, module, variant=emit.DEFAULT) -> None:
        """Remember the loaded ``module`` of ``variant`` for ``device`` (``load_kernels`` calls it)."""
        self._modules[_module_key(device, variant, self.build_inputs())] = module
        with _lock:
            _LOADED.add(self)


def module_kernels(name: str) -> list:
    """The kernels of module ``name`` as Warp's module holds them: per kernel key the newest
    live definition (a redefinition replaces its kernel), sorted by key; a generic kernel
    stands for the specializations made so far."""
    with _lock:
        every = list(_ALL)
    newest: dict = {}
    for k in every:
        if k.module_name != name or k._forced is not None:
            continue
        cur = newest.get(k.key_base)
        if cur is None or k.serial > cur.serial:
            newest[k.key_base] = k
    return [newest[base] for base in sorted(newest)]


def _load_module(name: str, device, block_dim) -> dict:
    """``Module.load``: every kernel of module ``name`` (specializations for generic ones)
    loaded for ``device``, by key."""
    check_block_dim(block_dim, "Module.load")
    device = get_device(device)
    out = {}
    for k in module_kernels(name):
        try:
            generic = k.is_generic()
        except KernelError:    # an invalid signature: loading the module raises it, as a launch would
            generic = False
        for one in (sorted(k._specs.values(), key=lambda s: s.key) if generic else [k]):
            out[one.key] = one.module_for(device)
    return out


register_module_loader(_load_module)


# a statement's Python location comment (emit's "// @file:line"): not part of what code computes
_LOCATION = re.compile(r"^[ \t]*// @.*\n", re.M)


def module_hash(name: str) -> bytes:
    """The content hash of module ``name`` (Warp's ``Module.hash_module()``): a sha256 over its
    resolved options (``options.resolve_options``: build inputs included) and, per kernel key
    (the newest live kernel of each: a redefinition replaces its kernel, as in Warp's module),
    the generated unit of the kernel (of each specialization made so far for a generic one)
    without its source-location comments and with its symbol masked. So a struct or kernel
    redefined with the same content hashes the same, and any change of the code, the types
    (a struct field's type) or the build options changes it. A kernel that does not lower
    contributes its captured Python source instead.

    Returns:
        32 bytes.
    Raises:
        ValueError: as ``options.build_inputs``.
    """
    h = hashlib.sha256()
    h.update(repr(sorted((key, repr(v)) for key, v in resolve_options(name).items())).encode())
    for k in module_kernels(name):
        h.update(f"\0kernel {k.key_base}\0".encode())
        try:
            ks = sorted(k._specs.values(), key=lambda s: s.key) if k.is_generic() else [k]
            for one in ks:
                h.update(_LOCATION.sub("", one.source()).replace(one.symbol, "KERNEL").encode())
        except KernelError:
            h.update(str(depends.source_fingerprint(k.func) or k.key).encode())
    return h.digest()


register_module_hasher(module_hash)


def check_block_dim(block_dim, who: str) -> None:
    """None or a positive int (not a bool), or a clear error naming ``who``."""
    if block_dim is None:
        return
    if isinstance(block_dim, bool) or not isinstance(block_dim, int):
        raise TypeError(f"{who}(block_dim=...): expected None or a positive int, got {type(block_dim).__name__}")
    if block_dim <= 0:
        raise ValueError(f"{who}(block_dim=...): expected a positive int, got {block_dim}")


def all_kernels() -> list:
    """Every live kernel that can be compiled as it is (generic kernels only through their
    specializations; kernels whose signature is invalid are left out), in no particular order
    (``force_load`` loads them)."""
    with _lock:
        every = list(_ALL)
    out = []
    for k in every:
        try:
            if not k.is_generic():
                out.append(k)
        except KernelError:   # an invalid signature: its own launch says so; force_load skips it
            continue
    return out


def overload(kernel, arg_types=None):
    """Warp's ``wp.overload``: the specialization of a generic kernel for concrete types.

    Forms: ``overload(k, [types...])``, ``overload(k, {"name": type})`` (the named generic
    parameters), or ``@overload`` on a body-less function named like a generic kernel of its
    module whose annotations give the types.

    Returns:
        The specialized ``Kernel`` (launch it, pass it to bridges); the decorator form returns
        the generic kernel itself, as Warp's does (its launches then find the specialization).
    Raises:
        TypeError: not a generic kernel, or types that do not fit its parameters.
    """
    decorated = not isinstance(kernel, Kernel)
    if decorated:
        fn = kernel
        if not callable(fn) or not hasattr(fn, "__code__"):
            raise TypeError(f"overload: expected a generic @tg.kernel (or a function named like one), got {fn!r}")
        anns, ret = annotations(fn, "kernel overload")
        if ret not in (inspect.Signature.empty, None, type(None)):
            raise TypeError("Return annotations are not allowed on @wp.overload stubs; omit the return annotation "
                            "or use `-> None`.")
        kernel = _kernel_named_like(fn)
        arg_types = {n: a for n, a in anns}
    names, params = kernel._resolve_params()
    if arg_types is None:
        raise TypeError("overload(kernel, arg_types): arg_types is required (a list or a dict of types)")
    if isinstance(arg_types, dict):
        unknown = [n for n in arg_types if n not in names]
        if unknown:
            raise TypeError(f"overload: kernel '{kernel.key}' has no parameter '{unknown[0]}'")
        given = [arg_types.get(n) for n in names]
    else:
        given = list(arg_types)
        if len(given) != len(names):
            raise TypeError(f"overload: kernel '{kernel.key}' takes {len(names)} arguments, got {len(given)} types")
    types = []
    for n, p, g in zip(names, params, given):
        if g is None or g is typing.Any:
            if is_generic_type(p):
                raise TypeError(f"overload: generic parameter '{n}' of kernel '{kernel.key}' needs a type")
            types.append(p)
        else:
            types.append(concrete_type(p, g, f"overload: parameter '{n}'"))
    spec = kernel.specialize(types)
    return kernel if decorated else spec


# (module, qualname) of a kernel's function -> [(weakref of the function, key base, weakref of
# the kernel)]: what the decorator form of ``overload`` looks a stub up by (a nested kernel is
# not in its module's globals; a custom-named one is not under its function's name)
_BY_QUALNAME: dict = {}


def _register_qualname(k, func, base) -> None:
    entries = _BY_QUALNAME.setdefault((func.__module__, func.__qualname__), [])
    module_level = "<locals>" not in func.__qualname__
    # a module-level kernel is held, as Warp's module holds it: a stub defined under its name
    # (rebinding the name) still finds it; the latest of a key replaces the earlier one
    entries[:] = [e for e in entries if (e[0]() is not None or e[2]() is not None)
                  and not (module_level and e[1] == base)]
    try:
        entries.append((weakref.ref(func), base, (lambda: k) if module_level else weakref.ref(k)))
    except TypeError:   # a callable that cannot be weakly referenced: found through globals only
        pass


def _kernel_named_like(fn) -> "Kernel":
    """The generic kernel an ``@overload`` stub names: the live kernel made from a function of
    the same module and qualified name (or, failing that, a kernel named like it in the stub's
    globals).

    Raises:
        RuntimeError: several kernels of different keys were made from that function (Warp's
            "Ambiguous kernel lookup"). TypeError: no such kernel.
    """
    qual = fn.__qualname__
    with _lock:
        entries = list(_BY_QUALNAME.get((fn.__module__, qual), ()))
    # kernels registered under several custom keys from one function (a factory): the stub
    # cannot say which one it means, even if some have been collected since
    bases = sorted({base for f, base, k in entries if k() is not None or f() is not None})
    if len(bases) > 1:
        names = ", ".join(repr(b) for b in bases)
        raise RuntimeError(f"Ambiguous kernel lookup for '{qual}': it matches several custom-named kernels ({names}). "
                           f"Pass the kernel object to wp.overload() instead of using the decorator form.")
    live = [k() for _, _, k in reversed(entries) if k() is not None]
    target = live[0] if live else getattr(fn, "__globals__", {}).get(getattr(fn, "__name__", None))
    if not isinstance(target, Kernel):
        raise TypeError(f"overload: expected a generic @tg.kernel (or a function named like one), got {fn!r}")
    return target


def _module_name(kernels):
    k = kernels[0]
    base = k.symbol if len(kernels) == 1 else f"tgm_{len(kernels)}_{k.symbol}"
    return base[:80]


def _module_key(device, variant, inputs):
    alias = getattr(device, "alias", None) or str(device)
    if not inputs.is_empty():   # changed extra_build_options: another build
        return (alias, variant, inputs)
    return alias if variant == emit.DEFAULT else (alias, variant)


def load_kernels(kernels, device, variant=emit.DEFAULT):
    """Compile ``kernels`` together into one binary for ``device`` (or load it from the cache)
    and return one module object per kernel (also memoized on each kernel).

    Args:
        variant: which build (``emit.Variant``: wide, debug); the default build by default.
    Raises:
        KernelError: a kernel does not type-check. CompileError: compilation failed.
    """
    kernels = list(kernels)
    if not getattr(device, "is_cuda", False):
        for k in kernels:
            if k.entry_point_abi == "external_constant_params":
                raise WarpCodegenError(f"Kernel '{k.key}' uses entry_point_abi='external_constant_params', which is "
                                       f"not supported by the CPU backend (its one entry point is a CUDA kernel)")
    inputs = kernels[0].build_inputs()
    for k in kernels[1:]:
        if k.build_inputs() != inputs:
            raise ValueError(f"load_kernels: kernels '{kernels[0].key}' and '{k.key}' have different "
                             f"extra_build_options and cannot share a translation unit")
    cuda = getattr(device, "is_cuda", False)
    seen: set = set()
    sites = emit.DebugSites() if variant.debug else None
    parts = []
    for k in kernels:
        parts += k.cpp_parts(seen, variant, sites)
    source = emit.module_source(parts, inputs.unit_text())
    name = _module_name(kernels) + variant.suffix
    if not cuda:
        with buildlog.module_load(name, device, kernels):   # one 'tapegrad' log line: compiled or cached
            # verified; a damaged cache entry is rebuilt
            lib = build.load_cpu(source, name, kernels, include_dirs=inputs.cpu_include_dirs)
        lines = modules.slice_lines(source)   # where a zero slice step is, for its error
        mods = [modules.CpuModule(lib, k, lines) for k in kernels]
        if sites is not None:
            mods = [debug.CheckedModule(m, k, device, tuple(sites.sites), lib=lib) for m, k in zip(mods, kernels)]
    else:
        with buildlog.module_load(name, device, kernels):
            handle = build.load_cuda(source, name, device, kernels, include_dirs=inputs.cuda_include_dirs)
        # only the default build has the elementwise (vector) forward entry
        mods = [modules.CudaModule(handle, k, device, k.vector_lanes if variant == emit.DEFAULT else 1)
                for k in kernels]
        if sites is not None:
            mods = [debug.CheckedModule(m, k, device, tuple(sites.sites), cuda_module=handle)
                    for m, k in zip(mods, kernels)]
    for k, m in zip(kernels, mods):
        k.memoize_module(device, m, variant)
    if len(kernels) == 1 and variant == emit.DEFAULT:
        kernels[0].remember_build(source)
    return mods


def forget_variant_choices() -> None:
    """Drop every kernel's per-device shortcut to its loaded module, so the next launch picks
    the build of the current mode (called when ``tg.config.mode`` or a module's "mode" option
    changes; the loaded modules stay cached), and the CPU modules built with extra_build_options:
    the next launch looks their binary up again, so a header an include folder holds, edited
    since, selects a rebuilt binary (``build.headers_library_path``) once the options are
    applied again, as an edited dependency does."""
    with _lock:
        every = list(_ALL)
    for k in every:
        k._by_id.clear()
        # CPU builds only: CUDA's (NVRTC) do not record their headers, and a CUDA load inside
        # a stream capture would fail
        for key in [key for key in list(k._modules) if isinstance(key, tuple) and len(key) == 3
                    and str(key[0]).startswith("cpu")]:
            k._modules.pop(key, None)


_LOADED: "weakref.WeakSet" = weakref.WeakSet()   # kernels loaded for some device
_ALL: "weakref.WeakSet" = weakref.WeakSet()      # every kernel made


def preload_for_capture(device, scopes) -> None:
    """Compile and load, for ``device``, the kernels a CUDA graph capture is likely to launch:
    the kernels found in ``scopes`` (the namespaces where the capture begins) and, with several
    GPUs, every kernel already loaded for another device. Registered with
    ``tapegrad.cuda.preload.register_capture_preloader``.
    """
    found, ids = [], set()
    for scope in scopes:
        for v in list(scope.values()):
            if isinstance(v, Kernel) and id(v) not in ids:
                ids.add(id(v))
                found.append(v)
    if get_cuda_device_count() >= 2:
        with _lock:
            loaded = list(_LOADED)
        found += [k for k in loaded if id(k) not in ids]
    for k in found:
        try:
            k.module_for(device)
        except Exception:  # a kernel that does not build fails at its own launch, with its own error
            pass


def kernel(f=None, *, enable_backward=None, key=None, module=None, module_options=None, name=None,
           launch_bounds=None, cuda_max_registers=None, enable_cuda_smem_spilling=None, cluster_dim=None,
           entry_point_abi=None, grid_stride=None, cpu_grain=None):
    """Decorator turning a Python function into a ``Kernel``.

    Args:
        f: the function (when used as ``@kernel``).
        enable_backward: generate the adjoint (``False``: forward only, faster to compile);
            None: the ``enable_backward`` option of the kernel's module (``tg.set_module_options``,
            set before the kernel is defined), True by default.
        key, name: override the kernel's unique key (``name``: Warp's spelling; a C++ identifier).
        module: None (the function's Python module), ``"unique"`` (a module of its own whose
            options start from the defaults), a module name or a ``Module``.
        module_options: options of the ``"unique"`` module (a dict of module option names).
        launch_bounds, cuda_max_registers, enable_cuda_smem_spilling, cluster_dim, grid_stride:
            Warp's CUDA build and launch hints, checked and kept in ``kernel.options``; tapegrad's
            builds do not use them (the results do not depend on them).
        cpu_grain: CPU forward launches (tapegrad's, not Warp's): the fewest grid threads one
            OpenMP chunk holds (default 1024, for threads that each do little work). A launch
            of fewer than ``4 * cpu_grain`` threads runs on the calling thread; a larger one asks
            for at most one thread per chunk. A kernel whose threads each do much work (a loop,
            a run of elements) wants a smaller grain, so that fewer threads already spread
            over the cores. It changes only the schedule, never the results of a kernel whose
            threads are independent.
        entry_point_abi: ``"warp"`` (the default: ``tg.launch``); ``"external_constant_params"``:
            a CUDA-only kernel for an outside launcher (OptiX, a driver-API ``cuLaunchKernel``).
            Its entry is ``extern "C" __global__ void <kernel.get_mangled_name()>()`` reading its
            one struct argument from the module's ``__constant__`` bytes ``params`` (sized and
            aligned as the struct: fill them with ``cuModuleGetGlobal`` and a copy of the
            struct's ctypes bytes). It needs ``enable_backward=False``, exactly one struct
            argument and no ``tid()``; ``tg.launch`` and CPU loads refuse it.
    Returns:
        A ``Kernel`` (or a decorator when called with keyword arguments only).
    Raises:
        TypeError, ValueError: a bad ``name``, ``module``, ``module_options``, hint or
            ``entry_point_abi`` (``"external_constant_params"`` without ``enable_backward=False``).
    """
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"kernel(name=...): name must be a str, got {type(name).__name__}")
        if not name.isidentifier() or not name.isascii():
            raise ValueError(f"kernel(name=...): name must be a non-empty valid C++ identifier matching "
                             f"[A-Za-z_][A-Za-z0-9_]*, got {name!r}")
    check_launch_bounds(launch_bounds, "kernel(launch_bounds=...)")
    check_cpu_grain(cpu_grain, "kernel(cpu_grain=...)")
    if entry_point_abi not in (None, "warp", "external_constant_params"):
        raise ValueError(f"kernel(entry_point_abi=...): entry_point_abi must be 'warp' or 'external_constant_params', "
                         f"got {entry_point_abi!r}")
    if entry_point_abi == "external_constant_params" and enable_backward is not False:
        raise ValueError("kernel(entry_point_abi='external_constant_params') requires enable_backward=False")
    if cuda_max_registers is not None and launch_bounds is not None:
        raise ValueError("kernel: cuda_max_registers and launch_bounds cannot be specified together")
    options = {} if enable_backward is None else {"enable_backward": bool(enable_backward)}
    for key_, v, ok in (("launch_bounds", launch_bounds, True),
                        ("cuda_max_registers", cuda_max_registers,
                         isinstance(cuda_max_registers, int) and not isinstance(cuda_max_registers, bool)
                         and cuda_max_registers > 0),
                        ("enable_cuda_smem_spilling", enable_cuda_smem_spilling,
                         isinstance(enable_cuda_smem_spilling, bool)),
                        ("cluster_dim", cluster_dim, _positive_ints(cluster_dim)),
                        ("grid_stride", grid_stride, isinstance(grid_stride, bool))):
        if v is None:
            continue
        if not ok:
            raise ValueError(f"kernel({key_}=...): got {v!r}")
        options[key_] = v
    if entry_point_abi not in (None, "warp"):
        options["entry_point_abi"] = entry_point_abi
    if cpu_grain is not None:
        options["cpu_grain"] = cpu_grain
    if module_options is not None and not isinstance(module_options, dict):
        raise TypeError(f"kernel(module_options=...): expected a dict, got {type(module_options).__name__}")

    def wrap(fn):
        mname = kernel_module_name(fn, module, module_options, who="kernel")
        k = Kernel(fn, key=key or name, options=options, _module_name=mname)
        if module == "unique":
            weakref.finalize(k, forget_module, mname)
        return k
    return wrap(f) if f is not None else wrap


def _positive_ints(v) -> bool:
    items = v if isinstance(v, tuple) else (v,)
    return 1 <= len(items) <= 3 and all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in items)


register_capture_preloader(preload_for_capture)
add_mode_listener(forget_variant_choices)
add_options_listener(forget_variant_choices)
