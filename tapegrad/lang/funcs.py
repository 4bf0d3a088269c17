"""``@func`` and ``@func_grad``: typed helpers kernels call, their overloads and specializations.

A ``Func`` holds overloads (one per ``@func`` of the same name in one scope); a call from a
kernel picks the first overload whose annotations accept the argument types and lowers one
specialization per tuple of argument types (generic parameters take the argument's type).
Kernels find ``Func`` through ``expressions.register_callable`` (this module sits above the
frontend: specializing builds IR).
"""
from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass

from ..errors import KernelError
from . import depends
from .expressions import register_callable
from .ir import FunctionIR, Var, c_identifier
from .lower import Target, lower
from .signature import annotations, capture_source, resolve_type, short_hash, where
from .structs import tuple_struct
from .typeutil import is_array, is_scalar, type_name
from .values import Lit, default_type


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
            params, ret = annotations(self.pyfunc, "function")
            types = [resolve_type(self.pyfunc, "function", n, a, allow_generic=True) for n, a in params]
            rt = None
            if typing.get_origin(ret) is tuple:     # -> tuple[float, int]: a generated struct
                members = typing.get_args(ret)
                if not members or Ellipsis in members:
                    raise KernelError(f"{where(self.pyfunc)}: function '{self.pyfunc.__name__}': a tuple return "
                                      f"annotation must list its types, e.g. tuple[float, float]")
                try:
                    rt = tuple_struct([resolve_type(self.pyfunc, "function", "return", m) for m in members])
                except TypeError as e:
                    raise KernelError(f"{where(self.pyfunc)}: function '{self.pyfunc.__name__}': {e}") from None
            elif ret not in (inspect.Signature.empty, None, tuple, typing.Any):
                rt = resolve_type(self.pyfunc, "function", "return", ret)
            self._params = ([n for n, _ in params], types, rt)
        return self._params


@dataclass(frozen=True)
class _Spec:
    """One specialization of an overload: its IR and whether kernels may differentiate it."""

    ir: FunctionIR
    has_adjoint: bool = True
    record: depends.Record = depends.Record()   # what lowering it read (replayed when reused)


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
        """Pick the overload and specialization for a call from ``builder``.

        Returns:
            ``(FunctionIR, has_adjoint, argument types)`` (``expressions.register_callable``'s protocol).
        Raises:
            KernelError: no overload accepts the arguments, or the call is recursive.
        """
        # Among the overloads that accept the arguments the best wins, as in Warp: concrete
        # annotations before generic ones (a generic overload is the fallback, not a shadow),
        # then the fewest literals adapted to another type than their own (pick(1) takes the
        # int32 overload over the float one), then the first declared.
        best = None
        for ov in self.overloads:
            names, types, rt = ov.params()
            if len(names) != len(values):
                continue
            actual, adapted = _accepts(types, values)
            if actual is None:
                continue
            rank = (any(_generic(t) for t in types), adapted, ov.index)
            if best is None or rank < best[0]:
                best = (rank, ov, actual, rt)
        if best is not None:
            _, ov, actual, rt = best
            spec = self._specialize(ov, tuple(actual), rt, builder, node)
            return spec.ir, spec.has_adjoint, actual
        got = ", ".join(type_name(v.type) if isinstance(v, Var) else
                        (type_name(v.type) if isinstance(v, Lit) and v.type else
                         type(getattr(v, "value", v)).__name__) for v in values)
        cands = "; ".join(_signature_text(self.name, ov) for ov in self.overloads)
        builder.error(f"no overload of {self.name}() accepts ({got}); candidates: {cands}", node)

    def _specialize(self, ov, types, rt, builder, node):
        spec = ov.specs.get(types)
        if spec is not None:
            depends.replay(spec.record)
            return spec
        if types in ov._building:
            builder.error(f"recursive call of {self.name}() is not supported", node)
        ov._building.add(types)
        try:
            name = f"tgf_{c_identifier(self.name)}_{short_hash(self.key, ov.index, *types)}"
            with depends.recording() as record:
                ir = lower(Target(ov.pyfunc, "func", name, types, ret_type=rt, label=self.name))
                if ov.grad is not None:
                    gtypes = types + ((ir.ret_type,) if ir.ret_type is not None else ())
                    ir.grad_ir = lower(Target(ov.grad, "grad", name + "_grad", gtypes, ret_type=ir.ret_type,
                                              label=getattr(ov.grad, "__name__", self.name)))
                    ir.callees.extend(c for c in ir.grad_ir.callees if c not in ir.callees)
            spec = _Spec(ir, record=record())
            ov.specs[types] = spec
        finally:
            ov._building.discard(types)
        return spec


def _accepts(types, values):
    """``(argument types, number of literals adapted)`` when parameters annotated ``types``
    accept ``values``, else ``(None, 0)``."""
    actual, adapted = [], 0
    for v, t in zip(values, types):
        if isinstance(v, Lit):
            if v.type is not None:
                vt = v.type
            elif t is None:
                vt = default_type(v.value)
            elif is_scalar(t) and not (isinstance(v.value, float) and t.kind != "float"
                                         and not float(v.value).is_integer()):
                vt = t
                adapted += vt is not default_type(v.value)
            else:
                vt = None
            if vt is None or (t is not None and vt is not t):
                return None, 0
            actual.append(vt)
        elif isinstance(v, Var):
            if t is not None and not (v.type is t or (is_array(t) and v.type == t)
                                      or (is_array(t) and t.dtype is typing.Any and is_array(v.type)
                                          and v.type.ndim == t.ndim)):
                return None, 0
            actual.append(v.type)
        else:
            return None, 0
    return actual, adapted


def _generic(t) -> bool:
    """Whether a parameter annotation accepts several types (``Any``, an array of ``Any``)."""
    return t is None or (is_array(t) and t.dtype is typing.Any)


def _signature_text(name, ov):
    names, types, _ = ov.params()
    ps = ", ".join(f"{n}: {type_name(t) if t is not None else 'Any'}" for n, t in zip(names, types))
    return f"{name}({ps})"


def func(f=None, *, module=None):
    """Decorator for kernel helper functions. A second ``@func`` with the same name in the
    same scope adds an overload (selected by argument types); unannotated parameters are
    generic (one specialization per argument type).

    Returns:
        A ``Func`` callable from kernels and from Python.
    """
    def wrap(fn):
        capture_source(fn)   # lowering is lazy: it parses the file's text as it is now
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
        new = [a for _, a in annotations(fn, "function")[0]]
    except KernelError:
        return False
    for ov in existing.overloads:
        old = [a for _, a in annotations(ov.pyfunc, "function")[0]]
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
        capture_source(g)
        try:
            want = [a for _, a in annotations(g, "custom adjoint")[0]]
        except KernelError:
            want = None
        target = f.overloads[0]
        for ov in f.overloads:
            have = [a for _, a in annotations(ov.pyfunc, "function")[0]]
            if want is not None and want[:len(have)] == have:
                target = ov
                break
        target.grad = g
        target.specs.clear()
        return g
    return wrap



def _fingerprint(f: Func):
    """Every overload's (and custom adjoint's) identity, source and parameter types: what
    specializing ``f`` for a call reads besides the lookups in its body (``depends``)."""
    parts = [f.key]
    for ov in f.overloads:
        try:
            names, types, rt = ov.params()
        except KernelError:
            return None
        fps = [depends.type_fingerprint(t) if t is not None else "any" for t in types]
        fps.append(depends.type_fingerprint(rt) if rt is not None else "-")
        if any(p is None for p in fps):
            return None
        src = depends.source_fingerprint(ov.pyfunc)
        grad = depends.source_fingerprint(ov.grad) if ov.grad is not None else "-"
        if src is None or grad is None:
            return None
        parts += [src, grad, *names, *fps]
    return "func:" + depends.digest(*parts)


def _scopes(f: Func):
    return [p for ov in f.overloads for p in (ov.pyfunc, ov.grad) if p is not None]


register_callable(Func, Func.resolve_call)
depends.register_fingerprint(Func, _fingerprint, _scopes)
