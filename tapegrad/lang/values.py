"""Values the frontend manipulates besides IR temps: literals, Python objects, tuples; the
``KernelError`` type (from ``tapegrad.errors``); operator tables and small message helpers."""
from __future__ import annotations

import ast
import builtins as python_builtins
import math
import weakref

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
    """A Python object a name resolved to (module, builtin, type, function...); ``chain``: the
    names it was looked up by (``("tg", "sin")``), None when it was computed (``depends``)."""

    __slots__ = ("obj", "chain")

    def __init__(self, obj, chain=None):
        self.obj = obj
        self.chain = chain


class TupleVal:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class SliceVal:
    """One ``start:stop:step`` component of a subscript; each part a value or None (not given)."""

    __slots__ = ("start", "stop", "step")

    def __init__(self, start, stop, step):
        self.start = start
        self.stop = stop
        self.step = step


class ShapeOf:
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array


class _AdjointMarker:
    """``tg.adjoint[x]`` inside a ``@func_grad`` body names the adjoint of parameter ``x``."""

    def __getitem__(self, item):
        raise RuntimeError("tapegrad.adjoint[...] is only meaningful inside a @func_grad function")


adjoint = _AdjointMarker()


def static(expr):
    """Warp's ``wp.static(expr)``: in a kernel, ``expr`` evaluated when the kernel compiles.

    Inside a kernel or ``@func``, the expression must give a compile-time value (a number, a
    type, a ``@tg.func``, a ``tg.constant`` value, an item of a module-level dict or tuple...):
    ``tg.static(len(v))`` is the constant length of a vector argument ``v``. In Python scope it
    returns its argument.

    Args:
        expr: the value.
    Returns:
        ``expr``.
    """
    return expr


_CONSTANTS: dict = {}   # id -> weak reference of each vector/matrix value constant() returned


def _value_of(self):
    """The constant as a Python number (Warp's scalar values' ``.value``)."""
    return self.item()


_VALUED: dict = {}   # NumPy scalar type -> its subclass with ``.value``


def _valued_scalar_class(np_type: type) -> type:
    """A subclass of the NumPy scalar type ``np_type`` adding Warp's ``.value`` (its instances
    are still that NumPy type for arithmetic, ``isinstance`` and kernels)."""
    cls = _VALUED.get(np_type)
    if cls is None:
        cls = _VALUED[np_type] = type(np_type.__name__, (np_type,), {"value": property(_value_of),
                                                                     "__module__": "tapegrad"})
    return cls


def constant(x):
    """Declare a compile-time constant kernels may read (Warp's ``wp.constant``).

    Kernels capture module-level numbers as they are; a vector or matrix value must go through
    ``constant`` (a plain NumPy array read in a kernel is refused: its later changes would be
    ignored). The value is captured when the kernel first compiles.

    Args:
        x: a number (bool, int, float, NumPy scalar) or a vector/matrix value (``tg.vec3(...)``,
            a 1-D or 2-D NumPy array); a list or tuple is refused, as Warp refuses it.
    Returns:
        ``x`` for a Python number or bool; a NumPy number (``tg.float16(1.25)``) as the same
        NumPy type with Warp's ``.value`` (the Python number) added; for a vector/matrix a
        read-only copy (changing it raises instead of being silently ignored by compiled kernels).
    Raises:
        TypeError: any other object (as Warp's ``wp.constant``).
    """
    if isinstance(x, (bool, int, float, np.bool_)):   # (NumPy's bool type cannot be subclassed)
        return x
    if isinstance(x, np.number):   # tg.float16(1.25): a NumPy scalar, with Warp's .value
        return _valued_scalar_class(type(x))(x)
    if isinstance(x, (list, tuple)):   # Warp's refusal: a vector needs its type (tg.vec3(...))
        raise TypeError(f"tg.constant(x): a vector or matrix constant is a value of its type (tg.vec3(...), "
                        f"tg.types.matrix(...)(...)) or a NumPy array; Invalid constant type: {type(x)}")
    if isinstance(x, np.ndarray):
        try:
            a = np.array(x, subok=True)   # a host value (tg.quat(...)) keeps its type
        except ValueError as e:   # ragged nesting
            raise TypeError(f"tg.constant(x): expected a number, vector or matrix value, got {type(x).__name__} "
                            f"({e})") from None
        if a.ndim == 0 and a.dtype.kind in "biuf":   # np.array(2.0): a number
            return a[()]
        if a.ndim in (1, 2) and a.size and a.dtype.kind in "iuf":
            a.setflags(write=False)
            _CONSTANTS[id(a)] = weakref.ref(a, lambda _r, k=id(a): _CONSTANTS.pop(k, None))
            return a
        raise TypeError(f"tg.constant(x): expected a number, or a vector/matrix value (a non-empty 1-D or 2-D array "
                        f"of numbers), got a {a.ndim}-D {type(x).__name__} of {a.dtype}")
    raise TypeError(f"tg.constant(x): expected a number, or a vector/matrix value, got {type(x).__name__}")


def is_constant(obj) -> bool:
    """Whether ``obj`` is a vector/matrix value ``constant`` returned."""
    r = _CONSTANTS.get(id(obj))
    return r is not None and r() is obj


BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "mul", ast.BitAnd: "bit_and", ast.BitOr: "bit_or",
           ast.BitXor: "bit_xor", ast.LShift: "lshift", ast.RShift: "rshift"}
CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
def _c_mod(a, b):
    """``a % b`` of constants with C's sign (of ``a``), as kernels compute it: an int for two
    ints (``v[1 % 3]`` is the component 1; math.fmod made it 1.0, refused as an index)."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("integer modulo by zero")
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return math.fmod(a, b)


PYFOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: _c_mod(a, b),
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
            other = next(t for t in scal if t is not wide)
            return (f" — integer operands of different types (Warp refuses them too); cast one, "
                    f"e.g. tg.{wide.name}(x) or tg.{other.name}(x)")
        return " — operands have different types; cast one, e.g. tg.float64(x)"
    return ""


def hashable(o):
    try:
        hash(o)
        return True
    except TypeError:
        return False
