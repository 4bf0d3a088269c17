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

import numpy as np

from ..errors import KernelError
from ..types import bool_, float32, int32
from . import depends
from .builtins import REGISTRY, Builtin, op_field
from .emit import literal
from .expressions import register_call_handler, register_callable
from .generic import generic_accepts, infer_type, is_generic_annotation
from .ir import FunctionIR, Loc, Op, Var, c_identifier
from .lower import Target, lower
from .signature import annotations, capture_source, resolve_type, short_hash, where
from .structs import is_tuple_struct, tuple_struct
from .typeutil import is_array, is_composite, is_scalar, is_struct, type_name, type_of_value
from .values import Lit, PyObj, TupleVal, default_type


class _Overload:
    def __init__(self, pyfunc, index):
        self.pyfunc = pyfunc
        self.index = index
        self.grad = None
        self.replay = None          # @func_replay body: what the adjoint's forward replay runs instead
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
            elif ret not in (inspect.Signature.empty, None, tuple, typing.Any) and not is_generic_annotation(ret):
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
        self._users: dict = {}      # signature text -> FuncOverload (user_overloads)
        self.__name__ = pyfunc.__name__
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc

    def __repr__(self):
        return f"<tapegrad func {self.key}>"

    def __call__(self, *args, **kwargs):
        """Python-scope call: runs the Python body of the overload whose annotations accept the
        arguments' types (as a kernel would pick it; defaults and keywords bind as in Python).

        Raises:
            RuntimeError: no overload accepts the arguments (Warp's message).
        """
        best = None
        for ov in self.overloads:
            bound = _bind(ov.pyfunc, args, kwargs)
            if bound is None:
                continue
            names, types, _ = ov.params()
            got = _python_accepts(types, bound)
            if got is None:
                continue
            actual, adapted = got
            rank = (any(_generic(t) for t in types), adapted, ov.index)
            if best is None or rank < best[0]:
                best = (rank, ov, bound, actual)
        if best is None:
            raise RuntimeError(f"Error calling function '{self.name}', no overload found for arguments {args}")
        _, ov, bound, actual = best
        if any(_generic(t) for t in ov.params()[1]) and all(t is not None for t in actual):
            self._user_overload(ov, tuple(actual))   # Warp specializes a generic function per call types
        return ov.pyfunc(*bound)

    @property
    def user_overloads(self) -> dict:
        """Warp's ``Function.user_overloads``: the concrete signatures this function has, its
        concrete overloads and the specializations of its generic ones made so far (by kernels
        or by Python-scope calls), as ``signature -> FuncOverload``."""
        for ov in self.overloads:
            names, types, _ = ov.params()
            if not any(_generic(t) for t in types):
                self._user_overload(ov, tuple(types))
            for key in list(ov.specs):
                self._user_overload(ov, key)
        return dict(self._users)

    def _user_overload(self, ov, types):
        key = ", ".join(type_name(t) for t in types)
        if key not in self._users:
            self._users[key] = FuncOverload(self.name, tuple(ov.params()[0]), types)
        return self._users[key]

    def add_overload(self, pyfunc):
        self.overloads.append(_Overload(pyfunc, len(self.overloads)))

    def resolve_call(self, builder, values, node, kwargs=None):
        """Pick the overload and specialization for a call from ``builder``; ``kwargs``: keyword
        arguments (name -> value), bound with the overload's defaults as in Python.

        Returns:
            ``(FunctionIR, has_adjoint, argument types, argument values)``
            (``expressions.register_callable``'s protocol).
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
            bound = _bind(ov.pyfunc, values, kwargs or {})
            if bound is None:
                continue
            bound = [v if k < len(values) or k >= len(bound) or names[k] in (kwargs or {})
                     else builder.wrap_global(v, names[k], node, captured=False) for k, v in enumerate(bound)]
            actual, adapted = _accepts(types, bound)
            if actual is None:
                continue
            rank = (any(_generic(t) for t in types), adapted, ov.index)
            if best is None or rank < best[0]:
                best = (rank, ov, actual, rt, bound)
        if best is not None:
            _, ov, actual, rt, bound = best
            spec = self._specialize(ov, tuple(actual), rt, builder, node)
            return spec.ir, spec.has_adjoint, actual, bound
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
                    # the adjoint may call the function itself (its forward): it finds this IR
                    ov.specs[types] = _Spec(ir)
                    rt = ir.ret_type   # a tuple's adjoint comes as one parameter per member
                    gtypes = types + (tuple(ft for _, ft in rt.fields) if is_tuple_struct(rt) else
                                      (rt,) if rt is not None else ())
                    ir.grad_ir = lower(Target(ov.grad, "grad", name + "_grad", gtypes, ret_type=ir.ret_type,
                                              label=getattr(ov.grad, "__name__", self.name)))
                    ir.callees.extend(c for c in ir.grad_ir.callees if c not in ir.callees and c is not ir)
                if ov.replay is not None:
                    ir.replay_ir = lower(Target(ov.replay, "func", name + "_replay", types, ret_type=ir.ret_type,
                                                label=getattr(ov.replay, "__name__", self.name)))
                    ir.callees.extend(c for c in ir.replay_ir.callees if c not in ir.callees and c is not ir)
            spec = _Spec(ir, record=record())
            ov.specs[types] = spec
        except BaseException:
            ov.specs.pop(types, None)   # no provisional specialization outlives a failed build
            raise
        finally:
            ov._building.discard(types)
        return spec


@dataclass(frozen=True)
class FuncOverload:
    """One concrete signature of a ``@func`` (an entry of ``Func.user_overloads``)."""

    name: str
    params: tuple
    types: tuple

    def __repr__(self):
        ps = ", ".join(f"{n}: {type_name(t)}" for n, t in zip(self.params, self.types))
        return f"<Function {self.name}({ps})>"


def _bind(pyfunc, args, kwargs):
    """The arguments of a call of ``pyfunc`` as a positional list, its defaults filled in, or
    None when they do not bind to its parameters."""
    try:
        ba = inspect.signature(pyfunc).bind(*args, **kwargs)
    except TypeError:
        return None
    ba.apply_defaults()
    return list(ba.arguments.values())


def _python_type(v):
    """The type a Python-scope argument has for overload resolution (Warp's: a Python float is
    a float32, an int an int32), or None when it has no kernel type."""
    if isinstance(v, np.generic):    # before float: np.float64 is a float
        return type_of_value(v)
    if isinstance(v, bool):
        return bool_
    if isinstance(v, int):
        return int32
    if isinstance(v, float):
        return float32
    st = getattr(type(v), "_tg_struct", None)
    if st is not None:
        return st
    if hasattr(v, "_tg_annotation"):
        try:
            return infer_type(None, v, "argument")
        except TypeError:
            return None
    return type_of_value(v)


def _python_accepts(types, values):
    """``(argument types, adapted)`` when parameters annotated ``types`` accept Python-scope
    ``values`` (``adapted``: how many Python ints stand for another numeric type), else None."""
    actual, adapted = [], 0
    for v, t in zip(values, types):
        vt = _python_type(v)
        if t is None:
            actual.append(vt)
            continue
        if is_generic_annotation(t):
            if vt is None or not generic_accepts(t, vt):
                return None
            actual.append(vt)
            continue
        if vt is t or vt == t:
            actual.append(t)
            continue
        if is_array(t) and t.dtype is typing.Any and is_array(vt) and vt.ndim == t.ndim:
            actual.append(vt)
            continue
        if isinstance(v, int) and not isinstance(v, bool) and is_scalar(t) and t is not bool_:
            adapted += 1    # an int literal stands for any number, as in kernels
            actual.append(t)
            continue
        return None
    return actual, adapted


def _accepts(types, values):
    """``(argument types, number of literals adapted)`` when parameters annotated ``types``
    accept ``values``, else ``(None, 0)``."""
    actual, adapted = [], 0
    for v, t in zip(values, types):
        if isinstance(v, Lit):
            if is_generic_annotation(t):
                vt = v.type or default_type(v.value)
                if not generic_accepts(t, vt):
                    return None, 0
                actual.append(vt)
                continue
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
            if is_generic_annotation(t):
                if not generic_accepts(t, v.type):
                    return None, 0
            elif t is not None and not (v.type is t or (is_array(t) and v.type == t)
                                      or (is_array(t) and t.dtype is typing.Any and is_array(v.type)
                                          and v.type.ndim == t.ndim)):
                return None, 0
            actual.append(v.type)
        else:
            return None, 0
    return actual, adapted


def _generic(t) -> bool:
    """Whether a parameter annotation accepts several types (``Any``, an array of ``Any``,
    Warp's ``Int``/``Float``/``Scalar`` or a vector/matrix of one)."""
    return t is None or (is_array(t) and t.dtype is typing.Any) or is_generic_annotation(t)


def _signature_text(name, ov):
    names, types, _ = ov.params()
    ps = ", ".join(f"{n}: {type_name(t) if t is not None else 'Any'}" for n, t in zip(names, types))
    return f"{name}({ps})"


_P = typing.ParamSpec("_P")
_R = typing.TypeVar("_R")


# Signatures for static type checkers (Pyright, mypy): a decorated function keeps its own.
@typing.overload
def func(f: typing.Callable[_P, _R], *, module=None) -> typing.Callable[_P, _R]: ...


@typing.overload
def func(f: None = None, *, module=None) -> typing.Callable[[typing.Callable[_P, _R]], typing.Callable[_P, _R]]: ...


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



def func_replay(f):
    """Decorator supplying the replay of ``@func`` ``f`` (Warp's ``wp.func_replay``): what the
    adjoint pass runs instead of ``f``'s forward when it recomputes the forward values. For a
    function with side effects that must not happen twice (an ``atomic_add`` handing out
    slots), the replay reads what the forward recorded instead. Same parameters and result as
    ``f``.

    Raises:
        TypeError: ``f`` is not a ``@tg.func``.
    """
    if not isinstance(f, Func):
        raise TypeError(f"func_replay expects a @tg.func, got {f!r}")

    def wrap(g):
        capture_source(g)
        try:
            want = [a for _, a in annotations(g, "replay function")[0]]
        except KernelError:
            want = None
        target = f.overloads[0]
        for ov in f.overloads:
            if want is not None and [a for _, a in annotations(ov.pyfunc, "function")[0]] == want:
                target = ov
                break
        target.replay = g
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
        fps = [_generic_fingerprint(t) if is_generic_annotation(t) else
               depends.type_fingerprint(t) if t is not None else "any" for t in types]
        fps.append(depends.type_fingerprint(rt) if rt is not None else "-")
        if any(p is None for p in fps):
            return None
        src = depends.source_fingerprint(ov.pyfunc)
        grad = depends.source_fingerprint(ov.grad) if ov.grad is not None else "-"
        replay = depends.source_fingerprint(ov.replay) if ov.replay is not None else "-"
        if src is None or grad is None or replay is None:
            return None
        parts += [src, grad, replay, *names, *fps]
    return "func:" + depends.digest(*parts)


def _generic_fingerprint(t) -> str:
    """``Int``/``Float``/``Scalar`` (or a vector/matrix of one) as a fingerprint part."""
    if isinstance(t, typing.TypeVar):
        return f"generic:{t.__name__}"
    return f"generic:{type(t).__name__}{t.inner_shape}:{t.scalar.__name__}"


def _scopes(f: Func):
    return [p for ov in f.overloads for p in (ov.pyfunc, ov.grad, ov.replay) if p is not None]


class GradOf:
    """``tg.grad(f)``: called inside a kernel or ``@func`` with ``f``'s arguments, the gradient of
    ``f``'s (scalar float) result with respect to each argument: one value for one argument, a
    tuple for several (as Warp's ``wp.grad``). Forward-only: no gradient flows through it in the
    adjoint of the code that calls it; inside a ``@func_grad`` it is ordinary code."""

    is_grad_of = True   # what the frontend's rebinding check looks for

    def __init__(self, f):
        self.func = f

    def __repr__(self):
        return f"<tapegrad grad of {getattr(self.func, 'name', self.func)!r}>"

    def __call__(self, *args):
        raise RuntimeError("tapegrad.grad(f)(...) can only be called inside a kernel or @func")


def grad(f) -> GradOf:
    """The gradient of a ``@func`` or a differentiable builtin, to call inside kernels and
    functions: ``tg.grad(square)(x)`` is ``2 * x``; ``dy, dx = tg.grad(tg.atan2)(y, x)``.

    Args:
        f: a ``@tg.func`` or a builtin (``tg.sin``, ``tg.atan2``...) returning a float scalar.
    Returns:
        A ``GradOf`` callable inside kernels (``GradOf`` documents what it returns).
    Raises:
        TypeError: ``f`` is not a tapegrad function.
    """
    if isinstance(f, (Func, Builtin)):
        return GradOf(f)
    raise TypeError(f"grad() expects a Warp function, got {type(f)}")


def _lower_grad(builder, _obj, node):
    """``tg.grad(f)`` in a kernel: a compile-time ``GradOf``."""
    if len(node.args) != 1 or node.keywords:
        builder.error("grad() takes one function", node)
    f = builder.expr(node.args[0])
    if not isinstance(f, PyObj) or not isinstance(f.obj, (Func, Builtin)):
        builder.error("grad() expects a @tg.func or a builtin", node)
    return PyObj(GradOf(f.obj))


def _lower_grad_call(builder, g, node):
    """``tg.grad(f)(args...)``: one op that runs ``f``'s adjoint with a unit seed on zeroed
    adjoints of the arguments and returns them (a tuple for several arguments)."""
    if node.keywords:
        builder.error("grad(f)(...) takes positional arguments", node)
    f = g.func
    values = [builder.expr(a) for a in node.args]
    if isinstance(f, Func):
        fir, has_adj, types, values = f.resolve_call(builder, values, node, {})
        args = [builder.materialize(v, t) if not isinstance(v, Var) else v for v, t in zip(values, types)]
        if not has_adj or fir.side_effects:
            builder.error(f"grad({f.name}): the function has {'side effects' if has_adj else 'no adjoint'}; "
                          f"grad() differentiates functions of values only", node)
        if fir not in builder.callees:
            builder.callees.append(fir)
        for c in fir.callees:
            if c not in builder.callees:
                builder.callees.insert(0, c)
        ret, name = fir.ret_type, f.name

        def adjoint(a, aa, seed, fn=fir.name):
            return f"{fn}_adj({', '.join(list(a) + list(aa) + [seed])});"
    else:
        args = builder.adapt(values)
        try:
            op = REGISTRY[f.name].resolve([a.type for a in args])
        except TypeError as e:
            builder.error(str(e), node)
        if op.adj is None:
            builder.error(f"grad({f.name}): {f.name}() is not differentiable", node)
        ret, name, adjoint = op.ret, f.name, op.adj
    if not (is_scalar(ret) and ret.kind == "float"):
        builder.error(f"grad({name}): the function must return a float scalar, got "
                      f"{type_name(ret) if ret is not None else 'nothing'}", node)
    for a in args:
        if not (is_scalar(a.type) or is_composite(a.type) or is_struct(a.type)):
            builder.error(f"grad({name}): cannot differentiate with respect to a {type_name(a.type)}", node)
    types = [a.type for a in args]
    out = types[0] if len(types) == 1 else tuple_struct(types)
    # typed (double(1.0)), so that forward mode's dual twin is a dual too: a template adjoint
    # such as tg::adj_sin(T, T&, T) cannot deduce T from a dual argument and a plain 1.0
    seed = f"{ret.cname}({literal(1.0, ret)})"

    def fwd(a):
        gs = [f"tg_g{k}" for k in range(len(a))]
        decls = " ".join(f"{t.cname} {n}{{}};" for t, n in zip(types, gs))
        result = gs[0] if len(gs) == 1 else f"{out.cname}{{{', '.join(gs)}}}"
        return f"([&]() {{ {decls} {adjoint(a, gs, seed)} return {result}; }}())"

    value = builder.call_op(Op("grad", fwd, out), args, node)   # check.py's "grad" rule
    if len(types) == 1:
        return value
    return TupleVal([builder.call_op(op_field(out, n), [value], node) for n, _ in out.fields])


class NativeFunc:
    """A ``@tg.func_native``: a function whose body is C++ (Warp's native snippets)."""

    def __init__(self, pyfunc, snippet, adj_snippet, replay_snippet):
        self.name = pyfunc.__name__
        self.key = f"{pyfunc.__module__}.{pyfunc.__qualname__}".replace(".<locals>", "")
        self.pyfunc = pyfunc
        self.snippet, self.adj_snippet, self.replay_snippet = snippet, adj_snippet, replay_snippet
        self.__name__ = pyfunc.__name__
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc
        self._ir = None

    def __repr__(self):
        return f"<tapegrad native func {self.key}>"

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"tapegrad native function '{self.name}' (C++) can only be called inside a kernel or "
                           f"@func")

    def ir(self) -> FunctionIR:
        """The function's IR: its signature, with the C++ bodies to emit (``FunctionIR.native``).

        Raises:
            KernelError: a parameter without a kernel type annotation, or a name C++ cannot use.
        """
        if self._ir is None:
            params, ret = annotations(self.pyfunc, "native function")
            vs = []
            for n, a in params:
                if c_identifier(n) != n or n.startswith("adj_"):
                    raise KernelError(f"{where(self.pyfunc)}: native function '{self.name}': parameter '{n}' "
                                      f"cannot be a C++ name of the snippet")
                vs.append(Var(n, resolve_type(self.pyfunc, "native function", n, a), "param", n))
            rt = None if ret in (inspect.Signature.empty, None, type(None)) else \
                resolve_type(self.pyfunc, "native function", "return", ret)
            name = f"tgn_{c_identifier(self.name)}_{short_hash(self.key, self.snippet, self.adj_snippet or '')}"
            code = self.pyfunc.__code__
            self._ir = FunctionIR(name, "func", vs, [], ret_type=rt,
                                  loc=Loc(code.co_filename, code.co_firstlineno, self.name),
                                  side_effects=any(is_array(v.type) for v in vs),
                                  native=(self.snippet, self.adj_snippet, self.replay_snippet))
        return self._ir

    def resolve_call(self, builder, values, node, kwargs=None):
        """The call's ``(FunctionIR, has_adjoint, argument types, argument values)``
        (``expressions.register_callable``'s protocol).

        Raises:
            KernelError: the arguments do not fit the annotations.
        """
        fir = self.ir()
        bound = _bind(self.pyfunc, values, kwargs or {})
        actual = _accepts([p.type for p in fir.params], bound)[0] if bound is not None else None
        if actual is None:
            got = ", ".join(type_name(v.type) if isinstance(v, (Var, Lit)) and v.type is not None else
                            type(getattr(v, "value", v)).__name__ for v in values)
            builder.error(f"native function {self.name}() does not accept ({got})", node)
        return fir, self.adj_snippet is not None, actual, bound


def func_native(snippet: str, adj_snippet: str | None = None, replay_snippet: str | None = None):
    """Decorator defining a kernel function by its C++ body (Warp's ``wp.func_native``): the
    decorated stub gives the signature (annotated parameters and result), ``snippet`` the body
    (``return a + 2.0f;``), ``adj_snippet`` the adjoint's (it adds into ``adj_<param>`` from
    ``adj_ret``). The snippets are compiled as tapegrad's C++ (its ``tg::`` runtime, not Warp's
    ``wp::``), for the CPU and CUDA alike.

    Args:
        snippet: the C++ body. adj_snippet: the adjoint's body (None: not differentiable).
        replay_snippet: the body the adjoint pass replays instead of ``snippet`` (functions
            taking arrays, which may write them).
    Returns:
        A decorator making a ``NativeFunc``.
    """
    if not isinstance(snippet, str):
        raise TypeError(f"func_native(snippet): expected the C++ body as a str, got {type(snippet).__name__}")

    def wrap(fn):
        return NativeFunc(fn, snippet, adj_snippet, replay_snippet)
    return wrap


def _native_fingerprint(f: NativeFunc):
    try:
        fir = f.ir()
    except KernelError:
        return None
    fps = [depends.type_fingerprint(p.type) for p in fir.params] + [
        depends.type_fingerprint(fir.ret_type) if fir.ret_type is not None else "-"]
    if any(x is None for x in fps):
        return None
    return "native:" + depends.digest(f.key, f.snippet, f.adj_snippet or "-", f.replay_snippet or "-", *fps)


register_callable(Func, Func.resolve_call)
register_callable(NativeFunc, NativeFunc.resolve_call)
depends.register_fingerprint(NativeFunc, _native_fingerprint, lambda f: [f.pyfunc])
register_call_handler(grad, _lower_grad)
register_call_handler(GradOf, _lower_grad_call)
depends.register_fingerprint(Func, _fingerprint, _scopes)
