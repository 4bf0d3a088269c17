"""Struct values inside kernels and functions: construction, field updates, tuple returns.

Two builtins register into the table: ``struct_new`` (``S()``, ``S(a=x, v=y)``: unnamed fields
zero) and ``struct_set`` (``s.a = x`` gives a new struct value that the frontend writes back to
``s``, so struct locals stay plain SSA values and their adjoints accumulate field by field).
A ``@func`` returning a tuple returns a generated struct (``tuple_struct``) whose fields the call
site unpacks; the C++ of both lives in ``emit.emit_struct`` (``tg::setf_<field>`` setters).
"""
from dataclasses import dataclass

from ..types import ArrayType, StructType, float32, float64, struct, vec3, vec3d
from .builtins import NO, Builtin, Sample, TypeRef
from .signature import short_hash
from .typeutil import float_based, is_array, is_struct

__all__ = ["StructInit", "FieldName", "tuple_struct", "is_tuple_struct", "field_accepts"]


@dataclass(frozen=True)
class StructInit:
    """The struct type and the fields (in argument order) a ``struct_new`` sets."""

    st: StructType
    names: tuple


@dataclass(frozen=True)
class FieldName:
    """The field a ``struct_set`` replaces."""

    name: str


def field_accepts(ft, t) -> bool:
    """Whether a value of type ``t`` can be stored in a field of type ``ft``."""
    return t is ft or (is_array(ft) and t == ft)


def _new_rule(ts):
    if not ts or not isinstance(ts[0], TypeRef) or not isinstance(ts[0].t, StructInit):
        return NO
    init = ts[0].t
    fields = dict(init.st.fields)
    if len(init.names) != len(ts) - 1:
        return NO
    for n, t in zip(init.names, ts[1:]):
        if n not in fields or not field_accepts(fields[n], t):
            return NO
    return init.st


def _new_fwd(ts, r):
    names = ts[0].t.names

    def render(a):
        text = f"{r.cname}{{}}"
        for n, v in zip(names, a[1:]):
            text = f"tg::setf_{n}({text}, {v})"
        return text
    return render


def _new_adj(ts, r):
    names = ts[0].t.names
    fields = dict(r.fields)
    picks = [(k, n) for k, n in enumerate(names) if float_based(fields[n]) and not is_array(fields[n])]
    if not picks:
        return None
    return lambda a, aa, g: " ".join(f"tg::accum({aa[1 + k]}, {g}.{n});" for k, n in picks)


def _set_rule(ts):
    if len(ts) == 3 and is_struct(ts[0]) and isinstance(ts[1], TypeRef) and isinstance(ts[1].t, FieldName):
        ft = dict(ts[0].fields).get(ts[1].t.name)
        if ft is not None and field_accepts(ft, ts[2]):
            return ts[0]
    return NO


def _set_fwd(ts, r):
    n = ts[1].t.name
    return lambda a: f"tg::setf_{n}({a[0]}, {a[2]})"


def _set_adj(ts, r):
    n = ts[1].t.name
    ft = dict(r.fields)[n]
    if float_based(ft) and not is_array(ft):
        return lambda a, aa, g: (f"tg::accum({aa[2]}, {g}.{n}); "
                                 f"{{ {r.cname} tg_s = {g}; tg::zero(tg_s.{n}); tg::accum({aa[0]}, tg_s); }}")
    return lambda a, aa, g: f"tg::accum({aa[0]}, {g});"


@struct
class SamplePair:
    """A struct the finite-difference samples of ``struct_new``/``struct_set`` build (float32)."""

    a: float32
    v: vec3


@struct
class SamplePaird:
    """``SamplePair`` in float64."""

    a: float64
    v: vec3d


_M = "tg.lang.structs.SamplePair{d}"
Builtin("struct_new", None, "struct construction: S(), S(a=x, v=y) (unnamed fields are zero)", export=False).add(
    _new_rule, _new_fwd, _new_adj, linear=range(1, 65),
    samples=[Sample(("S:any", "V3:any"), "S", f"s = {_M}(a={{0}}, v={{1}})\n    out[i] = s.a * s.v[1]"),
             Sample(("S:any",), "S", f"s = {_M}({{0}})\n    out[i] = s.a * s.a")])
Builtin("struct_set", None, "struct field update: s.a = x, s.v[0] = x, s.inner.a = x", export=False).add(
    _set_rule, _set_fwd, _set_adj, linear=(0, 2),
    samples=[Sample(("S:any", "V3:any"), "S",
                    f"s = {_M}()\n    s.a = {{0}}\n    s.v = {{1}} * {{0}}\n    s.v[2] = {{0}}\n"
                    "    out[i] = s.a + s.v[0] * s.v[2]")])


_TUPLES: dict = {}


def tuple_struct(types) -> StructType:
    """The struct (fields ``f0``, ``f1``...) a ``@func`` returning a tuple of ``types`` returns.

    Raises:
        TypeError: a member is an array (functions return values, not arrays).
    """
    types = tuple(types)
    st = _TUPLES.get(types)
    if st is None:
        for t in types:
            if isinstance(t, ArrayType):
                raise TypeError("a function cannot return an array inside a tuple")
        name = f"tg_tuple_{short_hash(*[t.cname for t in types])}"
        cls = type(name, (), {"__annotations__": {f"f{k}": t for k, t in enumerate(types)}, "__module__": __name__})
        st = _TUPLES[types] = struct(cls)._tg_struct
    return st


def is_tuple_struct(t) -> bool:
    """Whether ``t`` is a struct ``tuple_struct`` made."""
    return is_struct(t) and t.name.startswith("tg_tuple_") and _TUPLES.get(tuple(ft for _, ft in t.fields)) is t

