"""``@kernel``, ``@func``, ``@func_grad`` and the ``Kernel`` object.

Parsing is lazy: the first access to ``arg_names``/``arg_types``/``arg_access`` or the first
``module(device)`` builds the IR (and warns about costly adjoints); ``module(device)``
compiles (or loads from the disk cache) and memoizes per device.
"""
from __future__ import annotations

import hashlib
import inspect
import threading
import weakref

from .. import build
from .. import types as T
from ..cuda.preload import register_capture_preloader
from ..device import get_cuda_device_count
from . import emit as E
from . import typeutil as U
from .adjoint import plan as _plan_loops
from .frontend import Builder, KernelError, Lit, Var, _default_type
from .ir import Assign, walk

_lock = threading.RLock()
_KEYS: dict = {}


def _sanitize(s: str) -> str:
    return "".join(ch if ch.isalnum() and ch.isascii() else "_" for ch in s)


def _short_hash(*parts) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:10]


def _annotations(pyfunc, what):
    """Resolve parameter annotations (string annotations are evaluated in the function's scope)."""
    sig = inspect.signature(pyfunc)
    ns = dict(pyfunc.__globals__)
    if pyfunc.__closure__:
        for n, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
            try:
                ns[n] = cell.cell_contents
            except ValueError:
                pass
    out = []
    for name, p in sig.parameters.items():
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, ns)  # noqa: S307  annotations are the user's own code
            except Exception as e:
                raise KernelError(f"{_where(pyfunc)}: {what} '{pyfunc.__name__}': cannot evaluate the annotation "
                                  f"of '{name}' ({ann!r}): {e}") from None
        out.append((name, ann))
    ret = sig.return_annotation
    if isinstance(ret, str):
        ret = eval(ret, ns)  # noqa: S307
    return out, ret


def _where(pyfunc):
    return f"{pyfunc.__code__.co_filename}:{pyfunc.__code__.co_firstlineno}"


def _resolve_type(pyfunc, what, name, ann, allow_generic=False):
    if ann is inspect.Parameter.empty or ann is None:
        if allow_generic:
            return None
        raise KernelError(f"{_where(pyfunc)}: {what} '{pyfunc.__name__}': parameter '{name}' needs a type "
                          f"annotation (e.g. {name}: float or {name}: tg.array(dtype=float))")
    import typing
    if ann is typing.Any and allow_generic:
        return None
    try:
        return T.type_of(ann, arg=name)
    except (TypeError, ValueError) as e:
        raise KernelError(f"{_where(pyfunc)}: {what} '{pyfunc.__name__}': parameter '{name}': {e}") from None


def _param_access(fn):
    access = {id(p): [False, False] for p in fn.params}
    for s in walk(fn.body):
        if not isinstance(s, Assign):
            continue
        for pos in s.op.reads:
            if id(s.args[pos]) in access:
                access[id(s.args[pos])][0] = True
        for pos in s.op.writes:
            if id(s.args[pos]) in access:
                access[id(s.args[pos])][1] = True
        callee = s.op.callee
        if callee is not None:
            for i, a in enumerate(s.args):
                if id(a) in access and i < len(callee.param_access):
                    r, w = callee.param_access[i]
                    access[id(a)][0] |= r
                    access[id(a)][1] |= w
    return [tuple(access[id(p)]) if U.is_array(p.type) else (False, False) for p in fn.params]


def _plan(fn, name):
    def new_var(t, kind, label):
        v = Var(f"{'s_' if kind == 'snap' else 't'}{_sanitize(label)}_{len(fn.vars)}_x", t,
                "temp" if kind == "temp" else kind, label)
        fn.vars.append(v)
        return v
    _plan_loops(fn, new_var, name)


class Kernel:
    """A compiled-on-demand kernel. See the module docstring for the lifecycle."""

    def __init__(self, func, enable_backward=True, key=None):
        self.func = func
        self.enable_backward = bool(enable_backward)
        base = key or f"{func.__module__}.{func.__qualname__}".replace(".<locals>", "")
        with _lock:
            n = _KEYS.get(base, 0)
            _KEYS[base] = n + 1
        self.key = base if n == 0 else f"{base}_{n}"
        self.symbol = f"tgk_{_sanitize(func.__name__)}_{_short_hash(self.key)}"
        self.__name__ = func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self._ir = None
        self._arg_names = None
        self._arg_types = None
        self._arg_access = None
        self._source = None
        self._modules: dict = {}
        self._by_id: dict = {}

    def __repr__(self):
        return f"<tapegrad kernel {self.key}>"

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"kernel '{self.key}' cannot be called directly; use tg.launch({self.__name__}, dim=..., "
                           "inputs=[...])")

    # --------------------------------------------------------------- lazy parse
    def _parse(self):
        with _lock:
            if self._ir is not None:
                return
            params, _ = _annotations(self.func, "kernel")
            types = [_resolve_type(self.func, "kernel", n, a) for n, a in params]
            ir = Builder(self.func, "kernel", self.key, types).build()
            if self.enable_backward:
                _plan(ir, self.key)
            ir.param_access = _param_access(ir)
            self._arg_names = [n for n, _ in params]
            self._arg_types = types
            self._arg_access = ir.param_access
            self._ir = ir

    @property
    def arg_names(self) -> list:
        self._parse()
        return self._arg_names

    @property
    def arg_types(self) -> list:
        self._parse()
        return self._arg_types

    @property
    def arg_access(self) -> list:
        """Per argument ``(reads, writes)``: whether the forward loads from / stores or atomically
        updates that array (``(False, False)`` for non-array arguments)."""
        self._parse()
        return self._arg_access

    @property
    def ir(self):
        self._parse()
        return self._ir

    # --------------------------------------------------------------- codegen
    def cpp_parts(self, seen=None):
        """The generated C++ parts (structs, functions, this kernel) for one translation unit."""
        self._parse()
        seen = set() if seen is None else seen
        fns = _callee_order(self._ir)
        parts = []
        for st in E.structs_used([self._ir] + fns):
            if ("struct", st.name) not in seen:
                seen.add(("struct", st.name))
                parts.append(E.emit_struct(st))
        for f in fns:
            if ("func", f.name) not in seen:
                seen.add(("func", f.name))
                parts.append(E.emit_func(f, getattr(f, "grad_ir", None)))
        parts.append(E.emit_kernel(self._ir, self.symbol, self.enable_backward))
        return parts

    def source(self) -> str:
        """The complete C++ translation unit of this kernel (both targets)."""
        if self._source is None:
            self._source = E.module_source(self.cpp_parts())
        return self._source

    def module(self, device):
        """Compile (or load from cache) for ``device``; memoized per device.

        Returns:
            An object with ``launch(bounds, argv, adjoint, stream, block_dim, max_blocks)``.
        Raises:
            KernelError: the kernel does not type-check.
            tapegrad.CompileError: the C++ compiler / NVRTC failed.
        """
        hit = self._by_id.get(id(device))
        if hit is not None and hit[0] is device:
            return hit[1]
        alias = getattr(device, "alias", None) or str(device)
        m = self._modules.get(alias)
        if m is None:
            with _lock:
                m = self._modules.get(alias)
                if m is None:
                    m = load_kernels([self], device)[0]
        self._by_id[id(device)] = (device, m)   # keeps device alive: its id cannot be reused
        return m

    def memoize_module(self, device, module) -> None:
        """Remember the loaded ``module`` for ``device`` (``load_kernels`` calls it)."""
        self._modules[getattr(device, "alias", None) or str(device)] = module
        _LOADED.add(self)


def _module_name(kernels):
    k = kernels[0]
    base = k.symbol if len(kernels) == 1 else f"tgm_{len(kernels)}_{k.symbol}"
    return base[:80]


def load_kernels(kernels, device):
    """Compile ``kernels`` together into one binary for ``device`` (or load it from the cache)
    and return one module object per kernel (also memoized on each kernel).

    Raises:
        CompileError: compilation failed.
    """
    kernels = list(kernels)
    seen: set = set()
    parts = []
    for k in kernels:
        parts += k.cpp_parts(seen)
    source = E.module_source(parts)
    name = _module_name(kernels)
    if not getattr(device, "is_cuda", False):
        lib = build.load_cpu_library(build.build_cpu(source, name, kernels))
        mods = [build.CpuModule(lib, k) for k in kernels]
    else:
        image, _ = build.build_cuda(source, name, int(device.arch), kernels)
        handle = build.load_cuda_image(image, int(device.ordinal))
        mods = [build.CudaModule(handle, k, int(device.ordinal)) for k in kernels]
    for k, m in zip(kernels, mods):
        k.memoize_module(device, m)
    return mods


_LOADED: "weakref.WeakSet" = weakref.WeakSet()   # kernels loaded for some device


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
        found += [k for k in list(_LOADED) if id(k) not in ids]
    for k in found:
        try:
            k.module(device)
        except Exception:  # a kernel that does not build fails at its own launch, with its own error
            pass


def _callee_order(fn):
    order, seen = [], set()

    def visit(f):
        for c in f.callees:
            if c.name not in seen:
                seen.add(c.name)
                visit(c)
                g = getattr(c, "grad_ir", None)
                if g is not None:
                    visit(g)
                order.append(c)
    visit(fn)
    return order


# ------------------------------------------------------------------------------ functions

class _Overload:
    def __init__(self, pyfunc, index):
        self.pyfunc = pyfunc
        self.index = index
        self.grad = None
        self.specs: dict = {}
        self._params = None
        self._building = set()

    def params(self):
        if self._params is None:
            params, ret = _annotations(self.pyfunc, "function")
            types = [_resolve_type(self.pyfunc, "function", n, a, allow_generic=True) for n, a in params]
            rt = None
            if ret not in (inspect.Signature.empty, None):
                rt = _resolve_type(self.pyfunc, "function", "return", ret)
            self._params = ([n for n, _ in params], types, rt)
        return self._params


class _Spec:
    def __init__(self, ir, has_adjoint=True):
        self.ir = ir
        self.has_adjoint = has_adjoint


class Func:
    """A ``@tg.func``: a typed helper callable from kernels (and in Python scope)."""

    _registry: dict = {}

    def __init__(self, pyfunc):
        self.name = pyfunc.__name__
        self.key = f"{pyfunc.__module__}.{pyfunc.__qualname__}".replace(".<locals>", "")
        self.overloads = [_Overload(pyfunc, 0)]
        self.__name__ = pyfunc.__name__
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc

    def __repr__(self):
        return f"<tapegrad func {self.key}>"

    def __call__(self, *args):
        """Python-scope call: runs the first overload's Python body."""
        return self.overloads[0].pyfunc(*args)

    def add_overload(self, pyfunc):
        self.overloads.append(_Overload(pyfunc, len(self.overloads)))

    def resolve_call(self, builder, values, node):
        """Pick the overload and specialization for a call from ``builder``; returns (spec, arg types)."""
        for ov in self.overloads:
            names, types, rt = ov.params()
            if len(names) != len(values):
                continue
            actual = []
            for v, t in zip(values, types):
                if isinstance(v, Lit):
                    if v.type is not None:
                        vt = v.type
                    elif t is None:
                        vt = _default_type(v.value)
                    elif U.is_scalar(t) and not (isinstance(v.value, float) and t.kind != "float"
                                                 and not float(v.value).is_integer()):
                        vt = t
                    else:
                        vt = None
                    if vt is None or (t is not None and vt is not t):
                        break
                    actual.append(vt)
                elif isinstance(v, Var):
                    if t is not None and not (v.type is t or (U.is_array(t) and v.type == t)):
                        break
                    actual.append(v.type)
                else:
                    break
            else:
                return self._specialize(ov, tuple(actual), rt, builder, node), actual
        got = ", ".join(U.type_name(v.type) if isinstance(v, Var) else
                        (U.type_name(v.type) if isinstance(v, Lit) and v.type else
                         type(getattr(v, "value", v)).__name__) for v in values)
        cands = "; ".join(_signature_text(self.name, ov) for ov in self.overloads)
        builder.error(f"no overload of {self.name}() accepts ({got}); candidates: {cands}", node)

    def _specialize(self, ov, types, rt, builder, node):
        spec = ov.specs.get(types)
        if spec is not None:
            return spec
        if types in ov._building:
            builder.error(f"recursive call of {self.name}() is not supported", node)
        ov._building.add(types)
        try:
            name = f"tgf_{_sanitize(self.name)}_{_short_hash(self.key, ov.index, *types)}"
            ir = Builder(ov.pyfunc, "func", name, list(types), ret_type=rt).build()
            ir.name = name
            _plan(ir, self.name)
            ir.param_access = _param_access(ir)
            ir.grad_ir = None
            if ov.grad is not None:
                gtypes = list(types) + ([ir.ret_type] if ir.ret_type is not None else [])
                g = Builder(ov.grad, "grad", name + "_grad", gtypes, ret_type=ir.ret_type).build()
                g.name = name + "_grad"
                ir.grad_ir = g
                ir.callees.extend(c for c in g.callees if c not in ir.callees)
            spec = _Spec(ir)
            ov.specs[types] = spec
        finally:
            ov._building.discard(types)
        return spec


def _signature_text(name, ov):
    names, types, _ = ov.params()
    ps = ", ".join(f"{n}: {U.type_name(t) if t is not None else 'Any'}" for n, t in zip(names, types))
    return f"{name}({ps})"


def kernel(f=None, *, enable_backward=True, key=None, module=None):
    """Decorator turning a Python function into a ``Kernel``.

    Args:
        f: the function (when used as ``@kernel``).
        enable_backward: generate the adjoint (``False``: forward only, faster to compile).
        key: override the kernel's unique key.
        module: accepted for Warp compatibility; ignored.
    Returns:
        A ``Kernel`` (or a decorator when called with keyword arguments only).
    """
    def wrap(fn):
        return Kernel(fn, enable_backward=enable_backward, key=key)
    return wrap(f) if f is not None else wrap


def func(f=None, *, module=None):
    """Decorator for kernel helper functions. A second ``@func`` with the same name in the
    same scope adds an overload (selected by argument types); unannotated parameters are
    generic (one specialization per argument type).

    Returns:
        A ``Func`` callable from kernels and from Python.
    """
    def wrap(fn):
        key = (fn.__module__, fn.__qualname__)
        existing = Func._registry.get(key)
        if existing is not None and _distinct_signature(existing, fn):
            existing.add_overload(fn)
            return existing
        obj = Func(fn)
        Func._registry[key] = obj
        return obj
    return wrap(f) if f is not None else wrap


def _distinct_signature(existing, fn):
    try:
        new = [a for _, a in _annotations(fn, "function")[0]]
    except KernelError:
        return False
    for ov in existing.overloads:
        old = [a for _, a in _annotations(ov.pyfunc, "function")[0]]
        if old == new:
            return False
    return True


def func_grad(f):
    """Decorator supplying the adjoint of ``@func`` ``f``: the decorated function takes ``f``'s
    parameters plus ``adj_ret`` (when ``f`` returns a value) and accumulates into
    ``tg.adjoint[param] += ...``.

    Raises:
        TypeError: ``f`` is not a ``@tg.func``.
    """
    if not isinstance(f, Func):
        raise TypeError(f"func_grad expects a @tg.func, got {f!r}")

    def wrap(g):
        try:
            want = [a for _, a in _annotations(g, "custom adjoint")[0]]
        except KernelError:
            want = None
        target = f.overloads[0]
        for ov in f.overloads:
            have = [a for _, a in _annotations(ov.pyfunc, "function")[0]]
            if want is not None and want[:len(have)] == have:
                target = ov
                break
        target.grad = g
        target.specs.clear()
        return g
    return wrap


register_capture_preloader(preload_for_capture)
