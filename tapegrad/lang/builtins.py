"""The builtin table: every kernel builtin, its type rule, forward and adjoint C++.

One ``Builtin`` per Python name (``tg.sin``, ``tg.add``, ``tg.atomic_add``...); each has
overloads with a *type rule* (argument types -> result type), a forward renderer, an adjoint
renderer (``None``: not differentiable) and, for differentiable overloads, ``samples`` that
``tests/lang/test_builtins_grad.py`` turns into finite-difference checks — a differentiable
overload without samples fails that test, so no builtin can skip it.

Renderer specs: a string names a C++ function called with the arguments (forward) or with
``args..., adjs..., adj_ret`` (adjoint); a callable ``spec(types, ret)`` returns a renderer.
Builtins are callable in Python scope where a numpy implementation makes sense.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..modules import SLICE_LINE_ARG
from ..types import bool_, int32, int64, quat
from .ir import Op
from .typeutil import (
    float_based,
    is_array,
    is_bool,
    is_composite,
    is_float,
    is_int,
    is_mat,
    is_quat,
    is_scalar,
    is_vec,
    mat,
    type_name,
    vec,
    with_scalar,
)

NO = object()           # "does not match" from a type rule
REGISTRY: dict = {}     # name -> Builtin


@dataclass(frozen=True)
class Sample:
    """A finite-difference test case: argument tokens ``"KIND:domain"`` (KIND in S, V2..V4,
    M22..M44, Q, B (bool), I (int index)), the output token and the test statement
    (``{0}``.. are the inputs, ``{d}`` is ``"d"`` for float64 type names, ``{F}`` the
    float type)."""

    args: tuple
    out: str
    stmt: str = ""
    out_init: float = 0.0


class Overload:
    def __init__(self, builtin, rule, fwd, adj=None, *, linear=(), bilinear=False, side_effect=False,
                 replay=None, samples=(), reads=(), writes=(), doc=""):
        self.builtin = builtin
        self.rule = rule
        self.fwd = fwd
        self.adj = adj
        self.linear = frozenset(linear)
        self.bilinear = bilinear
        self.side_effect = side_effect
        self.replay = replay
        self.samples = tuple(samples)
        self.reads = tuple(reads)
        self.writes = tuple(writes)
        self.doc = doc

    @property
    def differentiable(self) -> bool:
        return self.adj is not None

    def bind(self, types, ret) -> Op:
        def render(spec, is_adj):
            if spec is None:
                return None
            if isinstance(spec, str):
                if is_adj:
                    return lambda a, aa, g: f"{spec}({', '.join(list(a) + list(aa) + ([g] if g else []))});"
                return lambda a: f"{spec}({', '.join(a)})"
            return spec(types, ret)
        replay = self.replay
        if replay is not None and replay != "skip":
            replay = replay(types, ret)
        return Op(self.builtin.name, render(self.fwd, False), ret, render(self.adj, True), replay,
                  self.linear, self.bilinear, self.side_effect, self.reads, self.writes)


class Builtin:
    """A kernel builtin; calling it in Python scope runs its numpy implementation."""

    def __init__(self, name, py=None, doc="", export=True):
        self.name = name
        self.py = py
        self.__doc__ = doc
        self.export = export
        self.overloads: list = []
        REGISTRY[name] = self

    def add(self, rule, fwd, adj=None, **kw):
        self.overloads.append(Overload(self, rule, fwd, adj, **kw))
        return self

    def match(self, types):
        """Return ``(overload, result type)`` for argument ``types`` or ``(None, None)``."""
        for ov in self.overloads:
            r = ov.rule(list(types))
            if r is not NO:
                return ov, r
        return None, None

    def resolve(self, types) -> Op:
        """Bind the first overload accepting ``types``.

        Raises:
            TypeError: no overload accepts these argument types.
        """
        ov, r = self.match(types)
        if ov is None:
            got = ", ".join(type_name(t) for t in types)
            raise TypeError(f"{self.name}() does not accept ({got})")
        return ov.bind(list(types), r)

    def __call__(self, *args, **kwargs):
        if self.py is None:
            raise RuntimeError(f"tapegrad.{self.name}() can only be called inside a kernel or @func")
        return self.py(*args, **kwargs)

    def __repr__(self):
        return f"<tapegrad builtin {self.name}>"


# ----------------------------------------------------------------------------- type rules

def same(n, pred):
    def rule(ts):
        if len(ts) != n or any(t is not ts[0] for t in ts) or not pred(ts[0]):
            return NO
        return ts[0]
    return rule


def to(n, pred, result):
    """n arguments of one type accepted by pred; result(t) gives the result type."""
    def rule(ts):
        if len(ts) != n or any(t is not ts[0] for t in ts) or not pred(ts[0]):
            return NO
        r = result(ts[0])
        return NO if r is None else r
    return rule


def numeric(t):
    return is_scalar(t) and not is_bool(t)


def arith(t):
    return numeric(t) or is_composite(t)


def fscalar(t):
    return is_float(t)


def fvec(t):
    return is_vec(t) and is_float(t.scalar)


def fmat(t):
    return is_mat(t) and is_float(t.scalar)


def fsquare(t):
    return fmat(t) and t.rows == t.cols and t.rows <= 4


def call_tpl(name, tpl):
    """Renderer spec calling ``name<tpl(types, ret)>(args)``."""
    def spec(types, ret):
        targs = tpl(types, ret)
        return lambda a: f"{name}<{targs}>({', '.join(a)})"
    return spec


def infix(op):
    return lambda types, ret: (lambda a: f"({a[0]} {op} {a[1]})")


def prefix(op):
    return lambda types, ret: (lambda a: f"({op}{a[0]})")


def _np1(f):
    return lambda x: f(np.asarray(x))[()] if np.ndim(x) else f(x)


S = "S:any"
ALL_FLOAT_SAMPLES = ()

# ---------------------------------------------------------------------------- arithmetic

def _bin_composite_scalar(ts):
    if len(ts) != 2:
        return NO
    a, b = ts
    if is_composite(a) and b is a.scalar:
        return a
    if is_composite(b) and a is b.scalar:
        return b
    return NO


Builtin("add", lambda a, b: a + b, "a + b").add(
    same(2, arith), "tg::add", "tg::adj_add", linear=(0, 1),
    samples=[Sample((S, S), "S"), Sample(("V3:any", "V3:any"), "V3"), Sample(("M33:any", "M33:any"), "M33")])
Builtin("sub", lambda a, b: a - b, "a - b").add(
    same(2, arith), "tg::sub", "tg::adj_sub", linear=(0, 1),
    samples=[Sample((S, S), "S"), Sample(("V2:any", "V2:any"), "V2"), Sample(("M22:any", "M22:any"), "M22")])


def _mul_rule(ts):
    if len(ts) != 2:
        return NO
    a, b = ts
    if a is b and numeric(a):
        return a
    if is_quat(a) and is_quat(b) and a is b:
        return NO   # handled by the quaternion overload below
    r = _bin_composite_scalar(ts)
    if r is not NO:
        return r
    if is_mat(a) and is_vec(b) and a.scalar is b.scalar and a.cols == b.length_ and not is_quat(b):
        return vec(a.rows, a.scalar)
    if is_vec(a) and is_mat(b) and a.scalar is b.scalar and a.length_ == b.rows and not is_quat(a):
        return vec(b.cols, a.scalar)
    if is_mat(a) and is_mat(b) and a.scalar is b.scalar and a.cols == b.rows:
        return mat(a.rows, b.cols, a.scalar)
    return NO


Builtin("mul", lambda a, b: a @ b if np.ndim(a) and np.ndim(b) else a * b, "a * b; matrix products").add(
    _mul_rule, "tg::mul", "tg::adj_mul", bilinear=True,
    samples=[Sample((S, S), "S"), Sample(("V3:any", S), "V3"), Sample((S, "V3:any"), "V3"),
             Sample(("M33:any", "V3:any"), "V3"), Sample(("V3:any", "M33:any"), "V3"),
             Sample(("M33:any", "M33:any"), "M33"), Sample(("M22:any", S), "M22")]).add(
    lambda ts: ts[0] if len(ts) == 2 and is_quat(ts[0]) and ts[1] is ts[0] else NO,
    "tg::quat_mul", "tg::adj_quat_mul", bilinear=True, samples=[Sample(("Q:any", "Q:any"), "Q")])


def _div_rule(ts):
    if len(ts) == 2 and ts[0] is ts[1] and numeric(ts[0]):
        return ts[0]
    return _bin_composite_scalar(ts)


Builtin("div", lambda a, b: a / b, "a / b (C integer division for ints)").add(
    _div_rule, "tg::div", "tg::adj_div",
    samples=[Sample((S, "S:away"), "S"), Sample(("V3:any", "S:away"), "V3"), Sample(("S:any", "V2:away"), "V2"),
             Sample(("M22:any", "S:away"), "M22")])
Builtin("mod", lambda a, b: np.fmod(a, b), "a % b (C semantics: sign of a, as in Warp)").add(
    same(2, numeric), "tg::mod", "tg::adj_mod", samples=[Sample(("S:any", "S:away"), "S")]).add(
    same(2, is_composite), "tg::mod", "tg::adj_mod",
    samples=[Sample(("V3:any", "V3:away"), "V3"), Sample(("M22:any", "M22:away"), "M22")])
Builtin("floordiv", lambda a, b: a // b, "a // b (Python floor semantics)").add(same(2, numeric), "tg::floordiv")
Builtin("neg", lambda a: -a, "-a").add(
    same(1, arith), "tg::neg", "tg::adj_neg", linear=(0,),
    samples=[Sample((S,), "S"), Sample(("V4:any",), "V4"), Sample(("M33:any",), "M33")])
Builtin("pos", lambda a: +a, "+a").add(same(1, arith), "tg::pos", "tg::adj_pos", linear=(0,),
                                       samples=[Sample((S,), "S")])
Builtin("pow", lambda a, b: np.power(a, b), "a ** b").add(
    same(2, fscalar), "tg::pow", "tg::adj_pow", samples=[Sample(("S:pos", "S:any"), "S")])

for _name, _op, _py in (("eq", "==", np.equal), ("ne", "!=", np.not_equal), ("lt", "<", np.less),
                        ("le", "<=", np.less_equal), ("gt", ">", np.greater), ("ge", ">=", np.greater_equal)):
    Builtin(_name, _py, f"a {_op} b", export=False).add(
        to(2, lambda t: is_scalar(t), lambda t: bool_), infix(_op))
# v == w on vectors/matrices of one type: one bool, every component equal (Warp's)
REGISTRY["eq"].add(lambda ts: bool_ if len(ts) == 2 and is_composite(ts[0]) and ts[1] == ts[0] else NO,
                   lambda ts, r: (lambda a: f"tg::all_equal({a[0]}, {a[1]})"))
REGISTRY["ne"].add(lambda ts: bool_ if len(ts) == 2 and is_composite(ts[0]) and ts[1] == ts[0] else NO,
                   lambda ts, r: (lambda a: f"(!tg::all_equal({a[0]}, {a[1]}))"))
for _name, _op in (("bit_and", "&"), ("bit_or", "|"), ("bit_xor", "^"), ("lshift", "<<"), ("rshift", ">>")):
    Builtin(_name, None, f"a {_op} b on integers", export=False).add(same(2, is_int), infix(_op))
Builtin("invert", None, "~a on integers", export=False).add(same(1, is_int), prefix("~"))
Builtin("logical_and", None, "a and b", export=False).add(
    lambda ts: bool_ if len(ts) == 2 and all(is_scalar(t) for t in ts) else NO,
    lambda ts, r: (lambda a: f"(bool({a[0]}) && bool({a[1]}))"))
Builtin("logical_or", None, "a or b", export=False).add(
    lambda ts: bool_ if len(ts) == 2 and all(is_scalar(t) for t in ts) else NO,
    lambda ts, r: (lambda a: f"(bool({a[0]}) || bool({a[1]}))"))
Builtin("logical_not", None, "not a", export=False).add(
    lambda ts: bool_ if len(ts) == 1 and is_scalar(ts[0]) else NO, lambda ts, r: (lambda a: f"(!bool({a[0]}))")).add(
    lambda ts: bool_ if len(ts) == 1 and is_array(ts[0]) else NO,
    lambda ts, r: (lambda a: f"(!tg::array_nonnull({a[0]}))"))
Builtin("array_nonnull", None, "an array's truth value (if arr: ...): whether it has elements", export=False).add(
    lambda ts: bool_ if len(ts) == 1 and is_array(ts[0]) else NO,
    lambda ts, r: (lambda a: f"tg::array_nonnull({a[0]})"))

# --------------------------------------------------------------------------- scalar math

_UNARY = [  # name, domain, numpy
    ("sin", "any", np.sin), ("cos", "any", np.cos), ("tan", "unit", np.tan),
    # asin/acos clamp into [-1, 1] first, as in kernels (runtime/scalar.h) and Warp
    ("asin", "unit", lambda x: np.arcsin(np.fmin(np.fmax(x, -1.0), 1.0))),
    ("acos", "unit", lambda x: np.arccos(np.fmin(np.fmax(x, -1.0), 1.0))),
    ("atan", "any", np.arctan), ("sinh", "any", np.sinh), ("cosh", "any", np.cosh),
    ("tanh", "any", np.tanh), ("exp", "any", np.exp), ("log", "pos", np.log), ("log2", "pos", np.log2),
    ("log10", "pos", np.log10), ("sqrt", "pos", np.sqrt), ("cbrt", "pos", np.cbrt),
]
for _name, _dom, _py in _UNARY:
    Builtin(_name, _np1(_py), f"{_name}(x) of a float scalar").add(
        same(1, fscalar), f"tg::{_name}", f"tg::adj_{_name}", samples=[Sample((f"S:{_dom}",), "S")])

def _round_half_away(x):
    # C's round (kernels' tg::round, Warp's): halves away from zero; np.round rounds them to even
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)[()]


for _name, _py in (("floor", np.floor), ("ceil", np.ceil), ("round", _round_half_away), ("trunc", np.trunc)):
    Builtin(_name, _np1(_py), f"{_name}(x): piecewise constant, zero gradient").add(same(1, fscalar), f"tg::{_name}")
Builtin("sign", _np1(lambda x: np.where(x < 0, -1, 1).astype(np.asarray(x).dtype)),
        "-1 for x < 0 else 1; zero gradient").add(same(1, numeric), "tg::sign")
Builtin("abs", _np1(np.abs), "|x| (component-wise on vectors)").add(
    lambda ts: ts[0] if len(ts) == 1 and (numeric(ts[0]) or is_vec(ts[0])) else NO, "tg::abs", "tg::adj_abs",
    samples=[Sample(("S:away",), "S"), Sample(("V3:away",), "V3")])
Builtin("atan2", lambda y, x: np.arctan2(y, x), "atan2(y, x)").add(
    same(2, fscalar), "tg::atan2", "tg::adj_atan2", samples=[Sample(("S:any", "S:away"), "S")])
# min/max/clamp: C fmin/fmax (a NaN operand is ignored), as in kernels (runtime/scalar.h) and Warp
Builtin("min", lambda a, b: np.fmin(a, b), "minimum (component-wise on vectors)").add(
    lambda ts: ts[0] if len(ts) == 2 and ts[0] is ts[1] and (numeric(ts[0]) or is_vec(ts[0])) else NO,
    "tg::min", "tg::adj_min", samples=[Sample((S, S), "S"), Sample(("V3:any", "V3:any"), "V3")])
Builtin("max", lambda a, b: np.fmax(a, b), "maximum (component-wise on vectors)").add(
    lambda ts: ts[0] if len(ts) == 2 and ts[0] is ts[1] and (numeric(ts[0]) or is_vec(ts[0])) else NO,
    "tg::max", "tg::adj_max", samples=[Sample((S, S), "S"), Sample(("V2:any", "V2:any"), "V2")])
Builtin("clamp", lambda x, a, b: np.fmin(np.fmax(a, x), b), "clamp(x, lo, hi)").add(
    same(3, numeric), "tg::clamp", "tg::adj_clamp", samples=[Sample(("S:any", "S:lo", "S:hi"), "S")])


def _select_rule(ts):
    if len(ts) == 3 and is_scalar(ts[0]) and ts[1] is ts[2] and not is_array(ts[1]):
        return ts[1]
    return NO


Builtin("select", lambda c, a, b: b if c else a, "select(cond, value_if_false, value_if_true) (Warp's order)").add(
    _select_rule, lambda ts, r: (lambda a: f"tg::select<{r.cname}>(bool({a[0]}), {a[1]}, {a[2]})"),
    "tg::adj_select", linear=(1, 2),
    samples=[Sample(("B:bool", S, S), "S"), Sample(("B:bool", "V3:any", "V3:any"), "V3")])
Builtin("where", lambda c, a, b: a if c else b, "where(cond, value_if_true, value_if_false)").add(
    _select_rule, lambda ts, r: (lambda a: f"tg::where<{r.cname}>(bool({a[0]}), {a[1]}, {a[2]})"),
    "tg::adj_where", linear=(1, 2),
    samples=[Sample(("B:bool", S, S), "S"), Sample(("B:bool", "M22:any", "M22:any"), "M22")])

# ------------------------------------------------------------------------ vector / matrix

Builtin("dot", lambda a, b: np.dot(a, b), "dot product").add(
    to(2, fvec, lambda t: t.scalar), "tg::dot", "tg::adj_dot", bilinear=True,
    samples=[Sample(("V3:any", "V3:any"), "S"), Sample(("V2:any", "V2:any"), "S")])
Builtin("cross", lambda a, b: np.cross(a, b), "3-D cross product").add(
    same(2, lambda t: fvec(t) and t.length_ == 3), "tg::cross", "tg::adj_cross", bilinear=True,
    samples=[Sample(("V3:any", "V3:any"), "V3")])
Builtin("length", lambda a: np.linalg.norm(a), "Euclidean length").add(
    to(1, fvec, lambda t: t.scalar), "tg::length", "tg::adj_length", samples=[Sample(("V3:any",), "S")])
Builtin("length_sq", lambda a: np.dot(a, a), "squared length").add(
    to(1, fvec, lambda t: t.scalar), "tg::length_sq", "tg::adj_length_sq", samples=[Sample(("V4:any",), "S")])
def _normalize_py(a):
    n = np.linalg.norm(a)
    if n > 0:
        return a / n
    r = a * 0
    if is_quat(getattr(a, "tg_type", None)):
        r[3] = 1      # the zero quaternion normalizes to the identity rotation, as Warp
    return r


Builtin("normalize", _normalize_py,
        "v / length(v) (a zero vector stays zero; a zero quaternion gives the identity, as Warp)").add(
    same(1, lambda t: is_quat(t) and is_float(t.scalar)), "tg::quat_normalize", "tg::adj_quat_normalize",
    samples=[Sample(("Q:any",), "Q")]).add(
    same(1, fvec), "tg::normalize", "tg::adj_normalize", samples=[Sample(("V3:any",), "V3")])
# integer vectors (Warp's dot, cross and length_sq take any scalar type): no gradient to give
def _ivec(t):
    return is_vec(t) and is_int(t.scalar) and not is_quat(t)


REGISTRY["dot"].add(to(2, _ivec, lambda t: t.scalar), "tg::dot")
REGISTRY["cross"].add(same(2, lambda t: _ivec(t) and t.length_ == 3), "tg::cross")
REGISTRY["length_sq"].add(to(1, _ivec, lambda t: t.scalar), "tg::length_sq")

Builtin("outer", lambda a, b: np.outer(a, b), "outer product a b^T").add(
    lambda ts: mat(ts[0].length_, ts[1].length_, ts[0].scalar)
    if len(ts) == 2 and fvec(ts[0]) and fvec(ts[1]) and ts[0].scalar is ts[1].scalar else NO,
    "tg::outer", "tg::adj_outer", bilinear=True, samples=[Sample(("V3:any", "V2:any"), "M32")])
Builtin("transpose", lambda m: np.transpose(m), "matrix transpose").add(
    to(1, fmat, lambda t: mat(t.cols, t.rows, t.scalar)), "tg::transpose", "tg::adj_transpose", linear=(0,),
    samples=[Sample(("M23:any",), "M32")])
Builtin("determinant", lambda m: np.linalg.det(m), "determinant (2x2..4x4)").add(
    to(1, fsquare, lambda t: t.scalar), "tg::determinant", "tg::adj_determinant",
    samples=[Sample(("M22:any",), "S"), Sample(("M33:any",), "S"), Sample(("M44:inv",), "S")])
Builtin("inverse", lambda m: np.linalg.inv(m), "matrix inverse (2x2..4x4; zero when singular)").add(
    same(1, fsquare), "tg::inverse", "tg::adj_inverse",
    samples=[Sample(("M22:inv",), "M22"), Sample(("M33:inv",), "M33"), Sample(("M44:inv",), "M44")])
Builtin("trace", lambda m: np.trace(m), "matrix trace").add(
    to(1, fsquare, lambda t: t.scalar), "tg::trace", "tg::adj_trace", linear=(0,), samples=[Sample(("M33:any",), "S")])
Builtin("cw_mul", lambda a, b: np.multiply(a, b), "component-wise product").add(
    same(2, lambda t: is_composite(t) and is_float(t.scalar)), "tg::cw_mul", "tg::adj_cw_mul", bilinear=True,
    samples=[Sample(("V3:any", "V3:any"), "V3")])
Builtin("cw_div", lambda a, b: np.divide(a, b), "component-wise quotient").add(
    same(2, lambda t: is_composite(t) and is_float(t.scalar)), "tg::cw_div", "tg::adj_cw_div",
    samples=[Sample(("V3:any", "V3:away"), "V3")])
Builtin("quat_rotate", None, "rotate a 3-vector by a unit quaternion").add(
    lambda ts: vec(3, ts[0].scalar) if len(ts) == 2 and is_quat(ts[0]) and fvec(ts[1]) and ts[1].length_ == 3
    and ts[1].scalar is ts[0].scalar else NO, "tg::quat_rotate", "tg::adj_quat_rotate",
    samples=[Sample(("Q:any", "V3:any"), "V3")])
Builtin("quat_inverse", None, "inverse of a unit quaternion (its conjugate)").add(
    lambda ts: ts[0] if len(ts) == 1 and is_quat(ts[0]) else NO, "tg::quat_conj", "tg::adj_quat_conj", linear=(0,),
    samples=[Sample(("Q:any",), "Q")])
Builtin("quat_from_axis_angle", None, "unit quaternion rotating by angle about a unit axis").add(
    lambda ts: with_scalar(quat, ts[1]) if len(ts) == 2 and fvec(ts[0]) and ts[0].length_ == 3
    and ts[1] is ts[0].scalar else NO, "tg::quat_from_axis_angle", "tg::adj_quat_from_axis_angle",
    samples=[Sample(("V3:any", "S:any"), "Q")])
Builtin("quat_identity", None, "the identity quaternion (float32)").add(
    lambda ts: quat if not ts else NO, lambda ts, r: (lambda a: "tg::quat_identity<float>()"))

# ------------------------------------------------------- constructors, casts, components

class TypeRef:
    """A type passed to a rule as an argument (constructor target, cast target)."""

    def __init__(self, t):
        self.t = t


def _construct_rule(ts):
    if not ts or not isinstance(ts[0], TypeRef):
        return NO
    t, args = ts[0].t, ts[1:]
    if is_vec(t) or is_mat(t):
        n = t.length
        if not args:
            return t
        if all(a is t.scalar for a in args) and len(args) in (1, n):
            return t
        if len(args) == 1 and type(args[0]) is type(t) and args[0].inner_shape == t.inner_shape:
            return t     # component-wise cast from another scalar type
    return NO


def _construct_fwd(ts, r):
    t, args = ts[0].t, ts[1:]
    kind = "vec" if is_vec(t) else "mat"
    dims = f"{t.length_}" if kind == "vec" else f"{t.rows}, {t.cols}"
    if not args:
        return lambda a: f"{t.cname}()"
    if len(args) == 1 and not is_scalar(args[0]):
        return lambda a: f"tg::cast_vec<{t.cname}>({a[1]})" if kind == "vec" else \
            f"tg::make_mat<{dims}, {t.scalar.cname}>({', '.join(f'tg::flat({a[1]})[{k}]' for k in range(t.length))})"
    if len(args) == 1 and t.length > 1:
        return lambda a: f"tg::splat_{kind}<{dims}, {t.scalar.cname}>({a[1]})"
    return lambda a: f"tg::make_{kind}<{dims}, {t.scalar.cname}>({', '.join(a[1:])})"


def _construct_adj(ts, r):
    t, args = ts[0].t, ts[1:]
    if not args or not is_float(t.scalar):
        return None
    if len(args) == 1 and not is_scalar(args[0]):
        src = args[0]
        if not is_float(src.scalar):
            return None
        return lambda a, aa, g: " ".join(
            f"tg::accum(tg::flat({aa[1]})[{k}], {src.scalar.cname}(tg::flat({g})[{k}]));" for k in range(t.length))
    if len(args) == 1:
        return lambda a, aa, g: " ".join(f"tg::accum({aa[1]}, tg::flat({g})[{k}]);" for k in range(t.length))
    return lambda a, aa, g: " ".join(f"tg::accum({aa[1 + k]}, tg::flat({g})[{k}]);" for k in range(t.length))


Builtin("construct", None, "vector/matrix/quaternion constructors: tg.vec3(x, y, z), tg.mat22(...)", export=False).add(
    _construct_rule, _construct_fwd, _construct_adj, linear=range(1, 17),
    samples=[Sample((S, S, S), "V3", "out[i] = tg.vec3{d}({0}, {1}, {2})"),
             Sample((S,), "V2", "out[i] = tg.vec2{d}({0})"),
             Sample((S, S, S, S), "M22", "out[i] = tg.mat22{d}({0}, {1}, {2}, {3})"),
             Sample(("V3:any",), "V3", "out[i] = tg.vec3{d}(tg.vec3{o}({0}))"),
             Sample((S, S, S, S), "Q", "out[i] = tg.quat{d}({0}, {1}, {2}, {3})")])


def _cast_rule(ts):
    if len(ts) == 2 and isinstance(ts[0], TypeRef) and is_scalar(ts[0].t) and is_scalar(ts[1]):
        return ts[0].t
    return NO


Builtin("cast", None, "scalar casts: float(x), int(x), tg.float64(x)", export=False).add(
    _cast_rule, lambda ts, r: (lambda a: f"tg::cast<{r.cname}, {ts[1].cname}>({a[1]})"),
    lambda ts, r: (lambda a, aa, g: f"tg::adj_cast<{r.cname}, {ts[1].cname}>({a[1]}, {aa[1]}, {g});")
    if is_float(r) and is_float(ts[1]) else None,
    linear=(1,), samples=[Sample((S,), "S", "out[i] = tg.{F}(tg.{G}({0}))")])


def _extract_rule(ts):
    if len(ts) == 2 and is_vec(ts[0]) and is_int(ts[1]):
        return ts[0].scalar
    if len(ts) == 2 and is_mat(ts[0]) and is_int(ts[1]):
        return vec(ts[0].cols, ts[0].scalar)
    if len(ts) == 3 and is_mat(ts[0]) and is_int(ts[1]) and is_int(ts[2]):
        return ts[0].scalar
    return NO


Builtin("extract", None, "component access v[i], v.x, m[i, j], m[i] (a row)", export=False).add(
    _extract_rule, "tg::extract", "tg::adj_extract", linear=(0,),
    samples=[Sample(("V3:any",), "S", "out[i] = {0}[1]"), Sample(("M33:any",), "S", "out[i] = {0}[2, 0]"),
             Sample(("M33:any",), "V3", "out[i] = {0}[1]"), Sample(("V4:any",), "S", "out[i] = {0}.w")])


def _assign_rule(ts):
    if len(ts) == 3 and is_vec(ts[0]) and is_int(ts[1]) and ts[2] is ts[0].scalar:
        return ts[0]
    if len(ts) == 4 and is_mat(ts[0]) and is_int(ts[1]) and is_int(ts[2]) and ts[3] is ts[0].scalar:
        return ts[0]
    if len(ts) == 3 and is_mat(ts[0]) and is_int(ts[1]) and is_vec(ts[2]) and ts[2].length_ == ts[0].cols \
            and ts[2].scalar is ts[0].scalar:
        return ts[0]
    return NO


Builtin("assign", None, "component update of a local: v[i] = x, v.y += x, m[i, j] = x, m[i] = row", export=False).add(
    _assign_rule, "tg::assign", "tg::adj_assign", linear=(0, 2, 3),
    samples=[Sample(("V3:any", S), "V3", "v = {0}\n    v[1] = {1}\n    out[i] = v"),
             Sample(("V3:any", S), "V3", "v = {0}\n    v.z += {1}\n    out[i] = v"),
             Sample(("M22:any", S), "M22", "m = {0}\n    m[0, 1] = {1}\n    out[i] = m"),
             Sample(("M22:any", "V2:any"), "M22", "m = {0}\n    m[1] = {1}\n    out[i] = m")])

# ------------------------------------------------------------------------------- arrays

def _index_ok(ts, extra):
    if not ts or not is_array(ts[0]):
        return False
    idx = ts[1:len(ts) - extra]
    return len(idx) == ts[0].ndim and all(is_int(t) for t in idx)


def _addr(a, base, idx):
    return f"tg::addr({base}.data, {base}, {', '.join(idx)})"


def _arr_fwd(kind):
    def spec(ts, r):
        if kind == "load":
            return lambda a: f"(*{_addr(a[0], a[0], a[1:])})"
        if kind == "store":
            return lambda a: f"*{_addr(a[0], a[0], a[1:-1])} = {a[-1]};"
        if kind == "sub":
            return lambda a: f"tg::atomic_add_({_addr(a[0], a[0], a[1:-1])}, {ts[0].dtype.cname}(-{a[-1]}))"
        return lambda a: f"tg::atomic_{kind}_({_addr(a[0], a[0], a[1:-1])}, {a[-1]})"
    return spec


def _arr_adj(kind):
    def spec(ts, r):
        c = ts[0].dtype.cname
        if kind == "load":
            return lambda a, aa, g: (f"if ({aa[0]}.data && tg::nonzero({g})) "
                                     f"tg::atomic_add_({_addr(aa[0], aa[0], a[1:])}, {g});")
        if kind == "store":
            # the write consumes the array's own gradient (Warp: final write wins; an earlier
            # write it overwrote gets nothing), unless the array retains it (flags bit 1);
            # an explicit adjoint buffer other than a.grad is only read
            zero = f"{c}(0)" if is_scalar(ts[0].dtype) else f"{c}{{}}"
            return lambda a, aa, g: (f"if ({aa[0]}.data) {{ {c}* tg_g = {_addr(aa[0], aa[0], a[1:-1])}; "
                                     f"tg::accum({aa[-1]}, *tg_g); if ((void*){aa[0]}.data == (void*){a[0]}.grad "
                                     f"&& !({a[0]}.flags & 2u)) *tg_g = {zero}; }}")
        # then the returned value (the slot's content before the atomic) sends its gradient to
        # that content (issue 23; builtins_atomic.returned_value_warnings says when it is exact)
        def old(a, aa, g):
            return f" tg::adj_atomic_old({_addr(aa[0], aa[0], a[1:-1])}, {g});" if g else ""
        if kind == "add":
            return lambda a, aa, g: (f"if ({aa[0]}.data) {{ tg::accum({aa[-1]}, *{_addr(aa[0], aa[0], a[1:-1])});"
                                     f"{old(a, aa, g)} }}")
        if kind == "sub":
            return lambda a, aa, g: (f"if ({aa[0]}.data) {{ tg::accum({aa[-1]}, {c}(-*{_addr(aa[0], aa[0], a[1:-1])}));"
                                     f"{old(a, aa, g)} }}")
        # min/max: the value that the slot ended up holding takes the slot's gradient (the
        # previous content none, when the buffer is the array's own gradient, as for a store)
        return lambda a, aa, g: (f"if ({aa[0]}.data) {{ tg::adj_atomic_minmax(*{_addr(a[0], a[0], a[1:-1])}, "
                                 f"{a[-1]}, {aa[-1]}, {_addr(aa[0], aa[0], a[1:-1])}, "
                                 f"(void*){aa[0]}.data == (void*){a[0]}.grad && !({a[0]}.flags & 2u));"
                                 f"{old(a, aa, g)} }}")
    return spec


def _arr_replay(ts, r):
    return lambda a: f"(*{_addr(a[0], a[0], a[1:-1])})"


def _atomic_rule(ts):
    if _index_ok(ts, 1) and ts[-1] is ts[0].dtype and (is_scalar(ts[-1]) or is_composite(ts[-1])):
        return ts[0].dtype
    return NO


_ASAMPLE = "tg.atomic_{k}(out, i, {{0}})"
Builtin("load", None, "array element read a[i, j]", export=False).add(
    lambda ts: ts[0].dtype if _index_ok(ts, 0) else NO, _arr_fwd("load"), _arr_adj("load"), reads=(0,),
    samples=[Sample((S,), "S", "out[i] = {0}"), Sample(("V3:any",), "V3", "out[i] = {0}")])
Builtin("store", None, "array element write a[i, j] = x (a[i] += x is a read-modify-write)", export=False).add(
    lambda ts: None if _index_ok(ts, 1) and ts[-1] is ts[0].dtype else NO, _arr_fwd("store"), _arr_adj("store"),
    side_effect=True, replay="skip", writes=(0,), linear=(99,),
    samples=[Sample((S,), "S", "out[i] = {0}"), Sample(("M22:any",), "M22", "out[i] = {0}"),
             Sample((S,), "S", "out[i] += {0}", 1.0)])
for _k, _doc, _init in (("add", "atomically add; returns the old value", 0.0),
                        ("sub", "atomically subtract; returns the old value", 0.0),
                        ("min", "atomic minimum; returns the old value", 5.0),
                        ("max", "atomic maximum; returns the old value", -5.0)):
    Builtin(f"atomic_{_k}", None, f"atomic_{_k}(a, i[, j...], value): {_doc}").add(
        _atomic_rule, _arr_fwd(_k), _arr_adj(_k), side_effect=True, replay=_arr_replay, writes=(0,),
        samples=[Sample((S,), "S", _ASAMPLE.format(k=_k), _init),
                 Sample(("V3:any",), "V3", _ASAMPLE.format(k=_k), _init)])

Builtin("len", None, "len(a): the first dimension of an array", export=False).add(
    lambda ts: int32 if len(ts) == 1 and is_array(ts[0]) else NO, "tg::len")
Builtin("tid", None, "thread index: i = tg.tid(); i, j = tg.tid() in a 2-D launch ...")


def op_tid(k, n, wide=False) -> Op:
    """The Op computing output ``k`` of ``n`` of ``tid()``: an int32, as in Warp, or an int64 in
    the wide variant of a kernel (``wide``: launches of more than 2^31 - 1 threads)."""
    if wide:
        return Op("tid", lambda a: f"tg::tid64(tg_bounds, tg_tid, {k}, {n})", int64, tid=(k, n))
    return Op("tid", lambda a: f"tg::tid(tg_bounds, tg_tid, {k}, {n})", int32, tid=(k, n))


def op_shape(k, wide=False) -> Op:
    """``a.shape[k]``: an int32 (an int64 in the wide variant, whose arrays may pass 2^31 - 1)."""
    if wide:
        return Op("shape", lambda a: f"tg::shape64({a[0]}, {k})", int64)
    return Op("shape", lambda a: f"tg::shape({a[0]}, {k})", int32)


def op_copy() -> Op:
    """``out = a``: a temp copying another (loop-invariant reads hoisted by ``adjoint.plan``)."""
    return COPY


COPY = Op("copy", lambda a: a[0], None, lambda a, aa, g: f"tg::accum({aa[0]}, {g});", linear=frozenset({0}))


def op_guard() -> Op:
    """``!(flag || flag ...)`` over its flag arguments: the statements after a break/continue/return run
    only while no flag is set."""
    return Op("guard", lambda a: "!(" + " || ".join(a) + ")", bool_)


def op_range_count() -> Op:
    """The trip count of ``range(start, stop, step)`` (int64)."""
    return Op("range_count", lambda a: f"tg::range_count({a[0]}, {a[1]}, {a[2]})", int64)


def op_call(fn, label, has_adjoint=True) -> Op:
    """A call of the ``@func`` specialization ``fn`` (a ``FunctionIR``; ``label``: the function's
    Python name): ``NAME_fwd`` forward, ``NAME_rep`` in the replay when it has side effects,
    ``NAME_adj`` in the adjoint."""
    name = fn.name
    rep = f"{name}_rep" if fn.side_effects or fn.replay_ir is not None else f"{name}_fwd"
    end = "" if fn.ret_type is not None else ";"

    def fwd(a):
        return f"{name}_fwd({', '.join(a)})" + end

    def replay(a):
        return f"{rep}({', '.join(a)})" + end

    def adj(a, aa, g):
        return f"{name}_adj({', '.join(list(a) + list(aa) + ([g] if g else []))});"

    return Op(label, fwd, fn.ret_type, adj if has_adjoint else None, replay, side_effect=fn.side_effects, callee=fn)


def op_field(struct_t, name) -> Op:
    """``s.name`` on a struct value."""
    ft = dict(struct_t.fields)[name]
    if is_array(ft):
        return Op("field", lambda a: f"{a[0]}.{name}", ft,
                  array_adj=lambda a, aa: f"tg::grad_array({a[0]}.{name}, {aa[0]}.{name})", field=name)
    adj = (lambda a, aa, g: f"tg::accum({aa[0]}.{name}, {g});") if float_based(ft) else None
    return Op("field", lambda a: f"{a[0]}.{name}", ft, adj, linear=frozenset({0}), field=name)


def op_view(arr_t, pattern) -> Op:
    """A sub-array view of an array of type ``arr_t`` (``a[i]`` of a 2-D array, ``a[1:n:2, k]``).

    ``pattern`` has one entry per subscript component: ``"i"`` (an index: that dimension goes,
    one operand) or ``(given, has_step)`` (a slice: ``given`` bit 0 start, bit 1 stop; an
    operand for each part given). The result shares the array's memory; its adjoint
    descriptor is the same view of the array's adjoint descriptor.
    """
    from ..types import ArrayType
    ndim = arr_t.ndim - sum(1 for p in pattern if p == "i")

    def render(a):
        expr, d, k = a[0], 0, 1
        for p in pattern:
            if p == "i":
                expr = f"tg::view_index({expr}, {d}, {a[k]})"
                k += 1
                continue
            given, has_step = p
            parts = []
            for bit, default in ((1, "0"), (2, "0")):
                if given & bit:
                    parts.append(a[k])
                    k += 1
                else:
                    parts.append(default)
            line = ""
            if has_step:
                parts.append(a[k])
                k += 1
                # a step that may be 0 at run time: the CPU build records the C++ line, which the
                # host maps to the Python line (modules.ErrorSlot); the text stays line-free, so
                # a kernel's hash does not move with it
                line = SLICE_LINE_ARG
            else:
                parts.append("1")
            expr = f"tg::view_slice({expr}, {d}, {', '.join(parts)}, {given}{line})"
            d += 1
        return expr

    return Op("view", render, ArrayType(arr_t.dtype, ndim), array_adj=lambda a, aa: render([aa[0]] + list(a[1:])),
              view=tuple(pattern))


Builtin("print", None, "print(x): print a value (scalars, vectors, matrices)", export=False)
Builtin("printf", None, "printf(fmt, args...): C printf on CPU and CUDA")


def exported() -> dict:
    """Builtins that ``tapegrad`` exports by name (``tg.sin``, ``tg.atomic_add``...)."""
    return {n: b for n, b in REGISTRY.items() if b.export}
