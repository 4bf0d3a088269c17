"""Values the frontend manipulates besides IR temps: literals, Python objects, tuples; the
``KernelError`` type; operator tables and small formatting helpers."""
from __future__ import annotations

import ast
import builtins as _pybuiltins
import math

import numpy as np

from .. import types as T
from . import builtins as B
from . import typeutil as U
from .ir import Var


from ..errors import KernelError  # noqa: E402,F401  (every error class lives in tapegrad.errors)


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


_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "mul", ast.BitAnd: "bit_and", ast.BitOr: "bit_or",
           ast.BitXor: "bit_xor", ast.LShift: "lshift", ast.RShift: "rshift"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PYFOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: math.fmod(a, b),
           "pow": lambda a, b: a ** b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
           "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
           "ge": lambda a, b: a >= b, "neg": lambda a: -a, "pos": lambda a: +a, "logical_not": lambda a: not a}
_COMPONENTS = {"x": 0, "y": 1, "z": 2, "w": 3}
# Python builtins and math functions that map onto kernel builtins
_PY_ALIASES = {_pybuiltins.abs: "abs", _pybuiltins.min: "min", _pybuiltins.max: "max", _pybuiltins.pow: "pow",
               _pybuiltins.round: "round", _pybuiltins.len: "len", _pybuiltins.print: "print"}
for _n in ("sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "exp", "log", "log2",
           "log10", "sqrt", "floor", "ceil", "trunc", "pow", "cbrt"):
    if hasattr(math, _n):
        _PY_ALIASES[getattr(math, _n)] = _n
_PY_ALIASES[math.fabs] = "abs"


class _TypeArg(B.TypeRef):
    """A type as an IR argument: rendered as nothing (rules see it; C++ gets no argument)."""

    def __init__(self, t):
        super().__init__(t)
        self.type = self
        self.name = ""
        self.kind = "typearg"


def _print_format(v):
    t = v.type
    if U.is_float(t):
        return "%g", ["double({})"]
    if U.is_bool(t):
        return "%d", ["int({})"]
    if U.is_int(t):
        return ("%llu" if t.kind == "uint" else "%lld"), ["(long long)({})"]
    if U.is_vec(t) and U.is_float(t.scalar):
        return "[" + " ".join(["%g"] * t.length_) + "]", [f"double({{}}.c[{k}])" for k in range(t.length_)]
    if U.is_mat(t) and U.is_float(t.scalar):
        rows = ["[" + " ".join(["%g"] * t.cols) + "]" for _ in range(t.rows)]
        return "[" + " ".join(rows) + "]", [f"double({{}}.data[{i}][{j}])" for i in range(t.rows) for j in range(t.cols)]
    return None, None


def _c_string(s):
    """Escape ``s`` for a C string literal."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}" for b in ch.encode("utf-8")))
    return "".join(out)


def _default_type(value):
    if isinstance(value, (bool, np.bool_)):
        return T.bool_
    if isinstance(value, (int, np.integer)):
        if -(1 << 31) <= int(value) < (1 << 31):
            return T.int32
        return T.int64
    return T.float32


def _describe(v):
    if isinstance(v, PyObj):
        o = v.obj
        return f"'{getattr(o, '__name__', None) or getattr(o, 'name', None) or type(o).__name__}'"
    if isinstance(v, Var):
        return f"a {U.type_name(v.type)} value"
    if isinstance(v, Lit):
        return f"constant {v.value!r}"
    if isinstance(v, TupleVal):
        return "a tuple"
    if isinstance(v, ShapeOf):
        return "a shape"
    return repr(v)


def _hint(name, types):
    scal = [t for t in types if U.is_scalar(t)]
    if len({id(t) for t in scal}) > 1:
        return " — operands have different types; cast one, e.g. tg.float64(x)"
    return ""


def _hashable(o):
    try:
        hash(o)
        return True
    except TypeError:
        return False
