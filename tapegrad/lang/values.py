"""Values the frontend manipulates besides IR temps: literals, Python objects, tuples; the
``KernelError`` type (from ``tapegrad.errors``); operator tables and small message helpers."""
from __future__ import annotations

import ast
import builtins as python_builtins
import math

import numpy as np

from ..errors import KernelError  # noqa: F401  (re-exported: the language's users import it from here)
from ..types import bool_, float32, int32, int64
from .builtins import TypeRef
from .ir import Var
from .typeutil import is_scalar, type_name


class Lit:
    """A compile-time constant; ``type`` None means a weak Python literal that adapts."""

    __slots__ = ("value", "type")

    def __init__(self, value, type_=None):
        self.value = value
        self.type = type_


class PyObj:
    """A Python object a name resolved to (module, builtin, type, function...)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


class TupleVal:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class ShapeOf:
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array


class _AdjointMarker:
    """``tg.adjoint[x]`` inside a ``@func_grad`` body names the adjoint of parameter ``x``."""

    def __getitem__(self, item):
        raise RuntimeError("tapegrad.adjoint[...] is only meaningful inside a @func_grad function")


adjoint = _AdjointMarker()


def constant(x):
    """Mark a module-level value as a compile-time constant (returns ``x``; as in Warp)."""
    return x


BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "mul", ast.BitAnd: "bit_and", ast.BitOr: "bit_or",
           ast.BitXor: "bit_xor", ast.LShift: "lshift", ast.RShift: "rshift"}
CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
PYFOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: math.fmod(a, b),
           "pow": lambda a, b: a ** b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
           "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
           "ge": lambda a, b: a >= b, "neg": lambda a: -a, "pos": lambda a: +a, "logical_not": lambda a: not a}
COMPONENTS = {"x": 0, "y": 1, "z": 2, "w": 3}
# Python builtins and math functions that map onto kernel builtins
PY_ALIASES = {python_builtins.abs: "abs", python_builtins.min: "min", python_builtins.max: "max",
              python_builtins.pow: "pow", python_builtins.round: "round", python_builtins.len: "len",
              python_builtins.print: "print"}
for _n in ("sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "exp", "log", "log2",
           "log10", "sqrt", "floor", "ceil", "trunc", "pow", "cbrt"):
    if hasattr(math, _n):
        PY_ALIASES[getattr(math, _n)] = _n
PY_ALIASES[math.fabs] = "abs"


class TypeArg(TypeRef):
    """A type as an IR argument: rendered as nothing (rules see it; C++ gets no argument)."""

    def __init__(self, t):
        super().__init__(t)
        self.type = self
        self.name = ""
        self.kind = "typearg"


def default_type(value):
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        if -(1 << 31) <= int(value) < (1 << 31):
            return int32
        return int64
    return float32


def describe(v):
    if isinstance(v, PyObj):
        o = v.obj
        return f"'{getattr(o, '__name__', None) or getattr(o, 'name', None) or type(o).__name__}'"
    if isinstance(v, Var):
        return f"a {type_name(v.type)} value"
    if isinstance(v, Lit):
        return f"constant {v.value!r}"
    if isinstance(v, TupleVal):
        return "a tuple"
    if isinstance(v, ShapeOf):
        return "a shape"
    return repr(v)


def hint(name, types):
    scal = [t for t in types if is_scalar(t)]
    if len({id(t) for t in scal}) > 1:
        if all(t.kind in ("int", "uint") for t in scal):
            wide = max(scal, key=lambda t: t.bits)
            return (f" — integer operands of different types (Warp refuses them too); cast one, "
                    f"e.g. tg.{wide.name}(i)")
        return " — operands have different types; cast one, e.g. tg.float64(x)"
    return ""


def hashable(o):
    try:
        hash(o)
        return True
    except TypeError:
        return False
