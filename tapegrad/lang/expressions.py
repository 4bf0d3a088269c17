"""Expression lowering for the frontend (``Builder`` mixes this in): names, attributes,
subscripts, operators, calls of builtins / functions / types, casts and constructors."""
from __future__ import annotations

import ast
import builtins as python_builtins

import numpy as np

from ..array import array as array_class
from ..errors import WarpCodegenAttributeError, WarpCodegenError, WarpCodegenKeyError, WarpCodegenValueError
from ..types import (
    MAX_DIMS,
    ArrayType,
    MatrixType,
    ScalarType,
    TransformType,
    VectorType,
    bool_,
    float32,
    float64,
    int32,
    int64,
    matrix,
    quaternion,
    resolve_dtype,
    transformation,
    type_of,
    uint32,
    uint64,
    vector,
)
from . import depends
from .builtins import REGISTRY, Builtin, op_call, op_field, op_shape, op_tid, op_view
from .builtins_atomic import ATOMIC_VALUES, Where
from .builtins_linalg import OUT_PARAMS as LINALG_OUT_PARAMS
from .builtins_random import DRAWS
from .builtins_warp import cast as bit_cast
from .indexed import indexed_dims, indexed_type, is_indexed, op_index_map, op_indexed_shape
from .ir import Const, If, Op, Print, Read, Var, Write
from .ptr_arrays import op_array_from_ptr, op_array_ptr
from .slices import SliceError, literal_bound, slice_spec
from .structs import StructInit, field_accepts, is_tuple_struct
from .typeutil import (
    is_array,
    is_composite,
    is_float,
    is_int,
    is_printable,
    is_scalar,
    is_struct,
    is_vec,
    scalar_of,
    type_name,
    type_of_value,
)
from .values import (
    BINOPS,
    CMPOPS,
    COMPONENTS,
    PY_ALIASES,
    Lit,
    PyObj,
    ShapeOf,
    SliceVal,
    TupleVal,
    TypeArg,
    adjoint,
    default_type,
    describe,
    hashable,
    is_constant,
    static,
)

# Warp's parameter names of builtins callable with keywords (wp.pow(x=2.0, y=4.0))
BUILTIN_PARAMS = {"pow": ("x", "y"), "atan2": ("y", "x"), "transform_compose": ("position", "rotation", "scale"),
                  "lerp": ("a", "b", "t"), "clamp": ("x", "low", "high"), "min": ("a", "b"), "max": ("a", "b")}
# builtins writing their results into local variables: name -> (inputs, the builtin of each result)
OUT_PARAMS = {"quat_to_axis_angle": (1, ("quat_to_axis_angle_axis", "quat_to_axis_angle_angle")), **LINALG_OUT_PARAMS}
# builtins updating their first argument (a local variable): name -> the builtin of the new value
MUTATING = {"transform_set_translation": "transform_with_translation",
            "transform_set_rotation": "transform_with_rotation"}
# builtins returning a tuple: name -> the builtin of each item (all taking the call's arguments)
TUPLE_RESULTS = {"transform_decompose": ("transform_decompose_position", "transform_decompose_rotation",
                                         "transform_decompose_scale")}

# Objects a kernel can call besides builtins and types, by class: ``@tg.func`` (``funcs.Func``)
# registers here, since it sits above the frontend (specializing a function builds its IR).
# ``resolve(obj, builder, values, node, kwargs) -> (FunctionIR, has_adjoint, argument types, values)``.
CALLABLES: dict = {}


def register_callable(cls, resolve) -> None:
    """Let kernels call instances of ``cls``: ``resolve(obj, builder, values, node, kwargs)``
    picks the specialization and returns ``(FunctionIR, has_adjoint, argument types, argument
    values)`` (the values bound to the parameters, keywords and defaults included)."""
    CALLABLES[cls] = resolve


# Objects whose calls a module above the frontend lowers itself (``funcs``' ``tg.grad``), by
# the object or its class: ``handler(builder, obj, node) -> value``.
CALL_HANDLERS: dict = {}


def register_call_handler(key, handler) -> None:
    """Lower calls of ``key`` (an object, or a class for its instances) with
    ``handler(builder, obj, node)``, which returns the call's value."""
    CALL_HANDLERS[key] = handler


def _call_handler(obj):
    h = CALL_HANDLERS.get(obj) if hashable(obj) else None
    if h is None:
        for cls in type(obj).__mro__:
            h = CALL_HANDLERS.get(cls)
            if h is not None:
                break
    return h


_SCALAR_CALLS = {"float": float, "int": int, "bool": bool}


def is_function_object(obj) -> bool:
    """Whether a compile-time object is something kernels call (a builtin, a ``@func``, a
    ``tg.grad(...)`` result...), as opposed to a type, a module or a value."""
    return isinstance(obj, Builtin) or _resolver(obj) is not None or \
        (_call_handler(obj) is not None and not isinstance(obj, type))


def _resolver(obj):
    for cls in type(obj).__mro__:
        r = CALLABLES.get(cls)
        if r is not None:
            return r
    return None


# what to write instead of expressions kernels do not have
EXPRESSION_HINTS = {
    "List": ": kernels have no lists; use a vector (tg.vector(a, b, c)) or a tuple",
    "ListComp": ": kernels have no lists; write a loop, or a vector of the values",
    "Dict": ": kernels have no dicts; use a @tg.struct",
    "DictComp": ": kernels have no dicts; use a @tg.struct",
    "Set": ": kernels have no sets",
    "SetComp": ": kernels have no sets",
    "GeneratorExp": ": write a loop",
    "Lambda": ": define the function at module level with @tg.func",
    "JoinedStr": ": f-strings are not supported; use print(x, \"text\") or tg.printf(\"%f\\n\", x)",
    "Starred": ": pass the arguments one by one",
    "NamedExpr": ": assign on its own line first",
    "Await": ": kernels are not coroutines",
    "Yield": ": kernels are not generators",
    "Slice": ": slices are not supported in kernels; index element by element",
}


class ExprMixin:
    """Expression methods of ``frontend.Builder``."""

    def expr(self, node):
        memo = getattr(self, "memo", None)
        if memo is not None and id(node) in memo:
            return memo[id(node)][1]
        self_node = self.node
        self.node = node if isinstance(node, ast.expr) else self_node
        method = getattr(self, "e_" + type(node).__name__, None)
        if method is None:
            kind = type(node).__name__
            # Warp's class for constructs kernels lack (a RuntimeError, and still a KernelError)
            self.error(f"unsupported expression `{kind}`{EXPRESSION_HINTS.get(kind, '')}", node, WarpCodegenError)
        try:
            value = method(node)
        finally:
            self.node = self_node
        if memo is not None:
            memo[id(node)] = (node, value)     # the node is kept: its id stays its own
        return value

    def e_Constant(self, node):
        v = node.value
        if isinstance(v, (bool, int, float)):
            return Lit(v)
        if isinstance(v, str):
            return PyObj(v)
        self.error(f"unsupported constant {v!r}", node)

    def e_Name(self, node):
        name = node.id
        if name in self.scope:
            if self.paths.may_be_unbound(name):
                self.unbound_error(name, node)
            v = self.scope[name]
            if isinstance(v, Var) and v.kind == "local":
                out = self.new_var(v.type)
                self.emit(Read(out, v, self.loc(node)))
                return out
            return v
        if name in self.closure:
            return self.wrap_global(self.closure[name], name, node, chain=(name,))
        if name in self.globals:
            return self.wrap_global(self.globals[name], name, node, chain=(name,))
        if hasattr(python_builtins, name):
            obj = getattr(python_builtins, name)
            depends.note_value(self.pyfunc, (name,), obj)
            return PyObj(obj, (name,))
        self.error(f"name '{name}' is not defined (Referencing undefined symbol: {name})", node, WarpCodegenKeyError)

    def unbound_error(self, name, node):
        v = self.scope[name]
        first = self.paths.first.get(name)
        init = f"{type_name(v.type)}(0)" if isinstance(v, Var) and is_scalar(v.type) else "..."
        self.error(f"local variable '{name}' may be read before it is assigned: it is assigned (line {first}) on "
                   f"some paths to here but not all (in one branch of an `if`, or in a loop that may run zero "
                   f"times; Python would raise UnboundLocalError); assign it on every path, e.g. `{name} = {init}` "
                   f"before the `if` or loop", node)

    def wrap_global(self, obj, name, node, captured=True, chain=None):
        """A module-level / closure value (``captured``) or a compile-time call's result as a
        kernel value: numbers and ``tg.constant`` values become constants; arrays and lists
        are refused (their contents would be baked in at the first compile, later changes ignored).
        ``chain``: the names ``obj`` was looked up by (recorded for the direct cache, ``depends``)."""
        if captured:
            depends.note_value(self.pyfunc, chain, obj)
        if isinstance(obj, (bool, int, float)) and not isinstance(obj, np.generic):
            return Lit(obj)
        if captured and _mutable_capture(obj):
            kind = "NumPy array" if isinstance(obj, np.ndarray) else type(obj).__name__
            head = "" if isinstance(obj, (np.ndarray, list, tuple)) else \
                f"Invalid external reference type: {type(obj)}: "   # Warp's words for a captured array
            self.error(f"{head}'{name}' is a module-level (or closure) {kind}: kernels capture only numbers and "
                       f"tg.constant(...) values, since an array read here would be baked into the compiled "
                       f"kernel and later changes to it ignored; pass it as an array argument "
                       f"(x: tg.array(dtype=...), launched with tg.array({name})), or, for a fixed small "
                       f"vector/matrix, declare `{name} = tg.constant(...)`", node)
        t = type_of_value(obj)
        if t is not None:
            return Lit(obj, t)
        return PyObj(obj, chain)

    def e_Attribute(self, node):
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, PyObj):
            if _is_type(base.obj):
                found = self.type_attribute(base.obj, attr)
                if found is not None:
                    return found
            try:
                obj = getattr(base.obj, attr)
            except AttributeError:
                if attr in _SCALAR_CALLS and getattr(base.obj, "tid", None) is REGISTRY["tid"]:
                    return PyObj(_SCALAR_CALLS[attr])   # wp.float(x), wp.int(x): Python's casts, as Warp's
                if node is self.callee:   # wp.missing_func(...): Warp's words
                    self.error(f"Could not find function {ast.unparse(node)} ({describe(base)} has no attribute "
                               f"'{attr}')", node, WarpCodegenAttributeError)
                self.error(f"`{attr}` is not an attribute of '{_describe_object(base.obj)}'", node,
                           WarpCodegenAttributeError)
            return self.wrap_global(obj, attr, node, chain=None if base.chain is None else base.chain + (attr,))
        if isinstance(base, Var):
            t = base.type
            if is_indexed(t) and attr in ("shape", "ndim", "dtype"):   # Warp's indexedarray in a kernel
                if attr == "shape":
                    return ShapeOf(base)
                return Lit(indexed_dims(t), int32) if attr == "ndim" else PyObj(t.indexed[0])
            if is_array(t):
                if attr == "shape":
                    return ShapeOf(base)
                if attr == "ptr":     # Warp's: the address of the first element (a uint64)
                    return self.call_op(op_array_ptr(), [base], node)
                found = self.type_attribute(t, attr)
                if found is not None:
                    return found
                self.error(f"arrays have no attribute '{attr}' in kernels (only .shape, .dtype, .ndim, .ptr)", node)
            if isinstance(t, TransformType) and attr in ("p", "q"):     # Warp's transform.p / .q
                part = "transform_get_translation" if attr == "p" else "transform_get_rotation"
                return self.builtin_args(part, [base], node)
            if is_vec(t) and attr in COMPONENTS and COMPONENTS[attr] < t.length_:
                return self.builtin_args("extract", [base, self.materialize(Lit(COMPONENTS[attr]), int32)], node)
            if is_struct(t):
                fields = dict(t.fields)
                if attr not in fields:
                    self.error(f"struct {t.name} has no field '{attr}': `{attr}` is not an attribute of "
                               f"'{ast.unparse(node.value)}' ({_struct_repr(t)})", node, WarpCodegenAttributeError,
                               last=True)
                return self.call_op(op_field(t, attr), [base], node)
            found = self.type_attribute(t, attr)
            if found is not None:
                return found
        if isinstance(base, Lit) and base.type is not None and is_vec(base.type) and attr in COMPONENTS:
            return Lit(np.asarray(base.value).reshape(-1)[COMPONENTS[attr]], base.type.scalar)
        self.error(f"{describe(base)} has no attribute '{attr}'", node, WarpCodegenAttributeError)

    def indices(self, sl):
        """The components of a subscript: values, and ``SliceVal`` for ``start:stop:step`` parts."""
        if isinstance(sl, ast.Tuple):
            return [self.subscript_part(e) for e in sl.elts]
        return [self.subscript_part(sl)]

    def subscript_part(self, e):
        if not isinstance(e, ast.Slice):
            return self.expr(e)
        parts = [None if p is None else self.expr(p) for p in (e.lower, e.upper, e.step)]
        step = parts[2]
        if isinstance(step, Lit) and not isinstance(step.value, bool) and isinstance(step.value, (int, np.integer)) \
                and int(step.value) == 0:
            self.error("Slice step cannot be zero", e, WarpCodegenValueError)
        return SliceVal(*parts)

    def array_view(self, base, idx, node):
        """``a[i]`` of a 2-D array, ``a[i:j, k]``...: a sub-array sharing ``a``'s memory (``op_view``)."""
        nd = base.type.ndim
        if len(idx) > nd:
            self.error(f"Incorrect number of indices specified for array indexing: the array has {nd} dimension(s), "
                       f"{len(idx)} index(es) were given", node, WarpCodegenError)
        pattern, args = [], [base]
        for v in idx:
            if not isinstance(v, SliceVal):
                pattern.append("i")
                args += self.index_vars([v], node)
                continue
            given = 0
            for bit, part in ((1, v.start), (2, v.stop)):
                if part is not None:
                    given |= bit
                    args += self.index_vars([part], node)
            if v.step is not None:
                args += self.index_vars([v.step], node)
            pattern.append((given, v.step is not None))
        return self.call_op(op_view(base.type, pattern), args, node)

    def index_vars(self, idx, node):
        out = []
        for v in idx:
            if isinstance(v, Lit):
                if not isinstance(v.value, (int, np.integer)) or isinstance(v.value, bool):
                    self.error(f"index {v.value!r} is not an integer", node)
                out.append(self.materialize(v, v.type or int32))
            else:
                v = self.materialize(v)
                if not is_int(v.type):
                    self.error(f"index must be an integer, got {type_name(v.type)}", node)
                out.append(v)
        return out

    def e_Subscript(self, node):
        if self.is_adjoint_marker(node.value):
            self.error("tg.adjoint[x] can only be accumulated into: tg.adjoint[x] += ...", node)
        base = self.expr(node.value)
        idx = self.indices(node.slice)
        if isinstance(base, ShapeOf):
            if len(idx) != 1 or not isinstance(idx[0], Lit):
                self.error("a.shape must be indexed with one constant", node)
            k = int(idx[0].value)
            if not 0 <= k < MAX_DIMS:
                self.error(f"shape index {k} out of range (arrays have at most {MAX_DIMS} dimensions)", node)
            t = base.array.type
            if k >= (indexed_dims(t) if is_indexed(t) else t.ndim):
                return Lit(0, int32)      # Warp's shape has MAX_DIMS entries, 0 past ndim
            if is_indexed(t):
                return self.e_Subscript_shape(base.array, k, node)
            return self.call_op(op_shape(k, self.wide), [base.array], node)
        if isinstance(base, PyObj) and not isinstance(base.obj, type) and hasattr(base.obj, "__getitem__") \
                and len(idx) == 1 and isinstance(idx[0], (Lit, PyObj)):
            # an item of a module-level dict / tuple, looked up when the kernel compiles
            key = idx[0].value if isinstance(idx[0], Lit) else idx[0].obj
            try:
                item = base.obj[key]
            except Exception as e:
                self.error(f"{describe(base)}[{key!r}] failed when the kernel compiled: {e!r}", node)
            return self.wrap_global(item, "", node, captured=False)
        if isinstance(base, TupleVal):
            if len(idx) != 1 or not isinstance(idx[0], Lit):
                self.error("tuples must be indexed with a constant", node)
            return base.items[int(idx[0].value)]
        if isinstance(base, Var) and is_indexed(base.type):
            if len(idx) < indexed_dims(base.type) and not any(isinstance(v, SliceVal) for v in idx):
                return self.indexed_view(base, idx, node)
            base, idx = self.unindex(base, idx, node)
        if isinstance(base, Var) and is_array(base.type):
            if len(idx) != base.type.ndim or any(isinstance(v, SliceVal) for v in idx):
                return self.array_view(base, idx, node)
            return self.builtin_args("load", [base] + self.index_vars(idx, node), node)
        if any(isinstance(v, SliceVal) for v in idx):
            return self.slice_value(base, idx, node)
        if isinstance(base, Var) and is_composite(base.type):
            idx = self.component_indices(base.type, idx, node)
            return self.builtin_args("extract", [base] + self.index_vars(idx, node), node)
        if isinstance(base, Lit) and base.type is not None and is_composite(base.type):
            idx = self.component_indices(base.type, idx, node)
            return self.builtin_args("extract", [self.materialize(base)] + self.index_vars(idx, node), node)
        self.error(f"{describe(base)} cannot be indexed", node)

    def slice_value(self, base, idx, node):
        """``v[1:3]``, ``m[0, :]``, ``m[:2, 1:]``: constant slices of a vector/matrix value."""
        if isinstance(base, Lit) and base.type is not None and is_composite(base.type):
            base = self.materialize(base)
        if not (isinstance(base, Var) and is_composite(base.type)):
            self.error(f"{describe(base)} cannot be sliced", node)
        return self.builtin_args("extract_slice", [base, TypeArg(self.slice_spec(base.type, idx, node))], node)

    def slice_spec(self, t, idx, node):
        """The ``SliceSpec`` of the constant subscript ``idx`` (values and ``SliceVal``) of type ``t``."""
        parts = []
        for v in idx:
            if isinstance(v, SliceVal):
                bounds = []
                for b in (v.start, v.stop, v.step):
                    k = None if b is None else literal_bound(b)
                    if b is not None and k is None:
                        self.error(f"slices of a {type_name(t)} need constant bounds (got {describe(b)})", node)
                    bounds.append(k)
                parts.append(tuple(bounds))
            else:
                k = literal_bound(v)
                if k is None:
                    self.error(f"an index next to a slice of a {type_name(t)} must be a constant (got {describe(v)})",
                               node)
                parts.append(k)
        try:
            return slice_spec(t, parts)
        except SliceError as e:
            self.error(str(e), node, WarpCodegenValueError)

    def component_indices(self, t, idx, node):
        """Constant component indices of a vector/matrix ``t`` checked against its shape and
        normalized (``-1`` is the last, as in Python); other indices pass through."""
        dims = (t.length_,) if is_vec(t) else (t.rows, t.cols)
        out = []
        for k, v in enumerate(idx):
            if isinstance(v, Lit) and k < len(dims) and isinstance(v.value, (int, np.integer)) \
                    and not isinstance(v.value, (bool, np.bool_)):
                n, i = dims[k], int(v.value)
                if not -n <= i < n:
                    what = "component" if is_vec(t) else ("row" if k == 0 else "column")
                    self.error(f"{what} index {i} is out of range for a {type_name(t)} (valid: 0..{n - 1}, or "
                               f"-{n}..-1 from the end)", node)
                v = Lit(i % n, v.type)
            out.append(v)
        return out

    def builtin_args(self, name, args, node):
        try:
            op = REGISTRY[name].resolve([a.type for a in args])
        except TypeError as e:
            widened = self.widen(name, args, node)
            if widened is None:
                self.error(str(e), node)
            op, args = widened
        return self.call_op(op, args, node)

    def e_BinOp(self, node):
        name = BINOPS.get(type(node.op))
        if name is None:
            self.error(f"unsupported operator {type(node.op).__name__}", node)
        a, b = self.expr(node.left), self.expr(node.right)
        if name == "pow" and isinstance(b, Lit) and b.type is None and isinstance(a, Var) and is_float(a.type):
            b = Lit(float(b.value))
        return self.builtin(name, [a, b], node)

    def e_UnaryOp(self, node):
        v = self.expr(node.operand)
        name = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "logical_not", ast.Invert: "invert"}[type(node.op)]
        if isinstance(v, Lit) and name == "neg" and v.type is not None and is_composite(v.type):
            return Lit(-np.asarray(v.value), v.type)
        return self.builtin(name, [v], node)

    def e_BoolOp(self, node):
        name = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
        vals = [self.expr(v) for v in node.values]
        if all(isinstance(v, Lit) for v in vals):
            res = all(v.value for v in vals) if name == "logical_and" else any(v.value for v in vals)
            return Lit(bool(res), bool_)
        acc = vals[0]
        for v in vals[1:]:
            acc = self.builtin_args(name, [self.materialize(acc), self.materialize(v)], node)
        return acc

    def e_Compare(self, node):
        left = self.expr(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            name = CMPOPS.get(type(op))
            if name is None:
                self.error(f"unsupported comparison {type(op).__name__}", node)
            right = self.expr(comp)
            c = self.builtin(name, [left, right], node)
            result = c if result is None else self.builtin("logical_and", [result, c], node)
            left = right
        return result

    def e_IfExp(self, node):
        cond = self.expr(node.test)
        if isinstance(cond, Lit):
            return self.expr(node.body if cond.value else node.orelse)
        cond = self.materialize(cond)
        self.dynamic += 1
        try:
            with self.sub_block() as body:
                a = self.expr(node.body)
            with self.sub_block() as orelse:
                b = self.expr(node.orelse)
        finally:
            self.dynamic -= 1
        plain = all(isinstance(s, Const) for s in body.stmts + orelse.stmts)
        if plain or not all(isinstance(v, (Var, Lit)) for v in (a, b)) or \
                any(isinstance(v, Var) and is_array(v.type) for v in (a, b)):
            # nothing to skip (constants, names): a select; compile-time values keep where()'s rules
            self.block.extend(body.stmts + orelse.stmts)
            vals = self.adapt([a, b])
            return self.builtin_args("where", [cond] + vals, node)
        # Python evaluates only the taken branch: its loads, calls and atomics run only there
        anchor = next((v.type for v in (a, b) if isinstance(v, Var) and v.type is not bool_),
                      next((v.type for v in (a, b) if isinstance(v, Var)), None))
        out = None
        for blk, v in ((body, a), (orelse, b)):
            with self.sub_block() as tail:
                v = self.materialize(v, anchor) if isinstance(v, Lit) else v
                if out is None:
                    out = self.new_var(v.type, "local", "ifexp")
                elif v.type is not out.type:
                    self.error(f"the two values of `a if c else b` must have one type, got {type_name(out.type)} "
                               f"and {type_name(v.type)}", node)
                self.emit(Write(out, v, self.loc(node)))
            blk.stmts.extend(tail.stmts)
        self.emit(If(cond, body.stmts, orelse.stmts, self.loc(node)))
        value = self.new_var(out.type)
        self.emit(Read(value, out, self.loc(node)))
        return value

    def e_Tuple(self, node):
        return TupleVal([self.expr(e) for e in node.elts])

    callee = None    # the ast node of the function a call being lowered names (its messages differ)

    def e_Call(self, node):
        outer, self.callee = self.callee, node.func
        try:
            fn = self.expr(node.func)
        finally:
            self.callee = outer
        if not isinstance(fn, PyObj):
            self.error(f"{describe(fn)} is not callable", node)
        obj = fn.obj
        kwargs = {k.arg: k.value for k in node.keywords}
        handler = _call_handler(obj) if CALL_HANDLERS else None
        if handler is not None:
            return handler(self, obj, node)
        if obj is bit_cast:
            return self.bit_cast(node, kwargs)
        if obj is type:     # type(x): x's type, a compile-time value (type(a)(b) casts, type(a).dtype...)
            if len(node.args) != 1 or kwargs:
                self.error(f"type() operator expects exactly one argument, got {len(node.args) + len(kwargs)}", node,
                           WarpCodegenError)
            return PyObj(self.type_of_operand(self.expr(node.args[0]), node))
        if obj in PY_ALIASES.keys() if hashable(obj) else False:
            obj = REGISTRY[PY_ALIASES[obj]]
        if isinstance(obj, Builtin):
            return self.call_builtin(obj, node, kwargs)
        if obj is static:
            return self.static_value(node, kwargs)
        if obj is vector or obj is matrix:
            return self.composite_value(obj, node)
        if obj is array_class:
            return self.array_from_ptr(node, kwargs)
        if obj is quaternion or obj is transformation:
            return self.float_composite_value(obj, node)
        resolve = _resolver(obj)
        if resolve is not None:
            return self.call_func(obj, resolve, [self.expr(a) for a in node.args], node,
                                  {k: self.expr(v) for k, v in kwargs.items()})
        args = [self.expr(a) for a in node.args]
        if obj in (float, int, bool) or isinstance(obj, ScalarType):
            target = resolve_dtype(obj)
            if len(args) != 1:
                self.error(f"{type_name(target)}() takes exactly one argument", node)
            return self.cast(target, args[0], node, weak=obj in (float, int, bool))
        if isinstance(obj, (VectorType, MatrixType)):
            return self.construct(obj, args, node, kwargs)
        st = getattr(obj, "_tg_struct", None) if isinstance(obj, type) else obj if is_struct(obj) else None
        if st is not None:
            return self.new_struct(st, args, {k: self.expr(v) for k, v in kwargs.items()}, node)
        if all(isinstance(a, Lit) for a in args) and callable(obj) and not kwargs:
            try:
                values = [a.value for a in args]
                result = obj(*values)
                depends.note_call(self.pyfunc, fn.chain, values, result)
                return self.wrap_global(result, "", node, captured=False)
            except Exception as e:
                self.error(f"compile-time call of {getattr(obj, '__name__', obj)!r} failed: {e}", node)
        self.error(f"{describe(fn)} cannot be called inside a kernel", node)

    def call_builtin(self, b, node, kwargs):
        name = b.name
        if name == "tid":
            if self.kind != "kernel":
                self.error("tg.tid() can only be used in kernels", node)
            n = self.tid_arity(node)
            items = [self.call_op(op_tid(k, n, self.wide), [], node) for k in range(n)]
            return items[0] if n == 1 else TupleVal(items)
        if name == "print":
            return self.print_(node)
        if name == "printf":
            return self.printf(node)
        if name == "curlnoise":
            return self.noise_call(name, node, kwargs)
        if name == "expect_near":
            return self.expect_near(node, kwargs)
        if name in ("quat_identity", "transform_identity") and set(kwargs) == {"dtype"} and not node.args:
            return self.typed_identity(name, kwargs["dtype"], node)
        if name == "identity":
            return self.identity_value(node, kwargs)
        if kwargs and name in BUILTIN_PARAMS:   # Warp's parameter names: pow(x=2.0, y=4.0)
            node, kwargs = self.positional_call(name, node, kwargs), {}
        if kwargs:
            self.error(f"{name}() takes no keyword arguments", node)
        if name in DRAWS:
            return self.random_draw(name, node)
        if name in OUT_PARAMS:
            return self.out_param_call(name, node)
        if name in MUTATING:
            return self.mutating_call(name, node)
        if name in TUPLE_RESULTS:
            args = [self.materialize(self.expr(a)) for a in node.args]
            return TupleVal([self.builtin_args(part, args, node) for part in TUPLE_RESULTS[name]])
        if name in ("noise", "pnoise"):
            return self.noise_call(name, node, {})
        args = [self.expr(a) for a in node.args]
        if name in ATOMIC_VALUES:
            nv = ATOMIC_VALUES[name]
            if args and isinstance(args[0], Var) and is_indexed(args[0].type):   # through the index arrays
                data, idx = self.unindex(args[0], args[1:len(args) - nv], node)
                args = [data] + list(idx) + args[len(args) - nv:]
            if not args or not (isinstance(args[0], Var) and is_array(args[0].type)):
                self.error(f"{name}() expects an array as first argument", node)
            arr = args[0]
            if len(args) != arr.type.ndim + 1 + nv:
                what = "a value" if nv == 1 else "a compare value and a value"
                self.error(f"{name}() on a {arr.type.ndim}-D array takes {arr.type.ndim} index(es) and {what}, "
                           f"got {len(args) - 1} argument(s) after the array", node)
            idx = self.index_vars(args[1:len(args) - nv], node)
            vals = [self.materialize(v, arr.type.dtype) if isinstance(v, Lit) else self.materialize(v)
                    for v in args[len(args) - nv:]]
            return self.builtin_args(name, [arr] + idx + vals, node)
        if name == "lower_bound" and args and isinstance(args[0], Var) and is_array(args[0].type):
            # literal bounds are int32, a literal value takes the array's dtype
            kinds = [None] + [int32] * (len(args) - 2) + [args[0].type.dtype]
            return self.builtin_args(name, [self.materialize(v, k) if isinstance(v, Lit) and k is not None
                                            else self.materialize(v) for v, k in zip(args, kinds)], node)
        if name in ("expect_eq", "expect_neq"):
            if len(args) != 2:
                self.error(f"{name}() takes two arguments", node)
            typed = [a.type for a in args if isinstance(a, Var) or (isinstance(a, Lit) and a.type is not None)]
            if len(typed) == 2 and typed[0] is not typed[1] and is_composite(typed[0]) and is_composite(typed[1]):
                self.error("Can't test equality for objects with different types", node, WarpCodegenError, last=True)
            self.side_effects = True
            return self.builtin_args(name, self.adapt(args) + [TypeArg(Where(str(self.loc(node))))], node)
        if name == "len":
            if len(args) != 1:
                self.error("len() takes one argument", node)
            if isinstance(args[0], TupleVal):
                return Lit(len(args[0].items))
            a = args[0]
            if isinstance(a, Var) and is_composite(a.type):
                return Lit(a.type.length_ if is_vec(a.type) else a.type.rows, int32)
            a = self.materialize(a)
            if is_indexed(a.type):
                return self.e_Subscript_shape(a, 0, node)
            if self.wide and is_array(a.type):     # the wide variant's arrays may pass 2^31 - 1
                return self.call_op(op_shape(0, True), [a], node)
            return self.builtin_args("len", [a], node)
        if name == "round" and len(args) == 1 and isinstance(args[0], Var) and is_float(args[0].type):
            return self.builtin("round", args, node)
        return self.builtin(name, args, node)

    def bit_cast(self, node, kwargs):
        """``tg.cast(a, dtype)``: ``a``'s bits as a ``dtype`` value of the same size."""
        given = dict(zip(("a", "dtype"), node.args))
        given.update(kwargs)
        if set(given) != {"a", "dtype"} or len(node.args) + len(kwargs) != 2:
            self.error("cast() takes a value and a dtype: cast(a, dtype)", node)
        v = self.materialize(self.expr(given["a"]))
        d = self.expr(given["dtype"])
        try:
            t = type_of(d.obj) if isinstance(d, PyObj) else None
        except TypeError:
            t = None
        if t is None or is_array(t) or is_array(v.type):
            self.error("cast(a, dtype): a must be a value and dtype a scalar, vector, matrix or struct type", node)
        if t.size != v.type.size:
            self.error(f"cast(a, dtype): a {type_name(v.type)} ({v.type.size} bytes) cannot be reinterpreted as a "
                       f"{type_name(t)} ({t.size} bytes)", node)
        return self.call_op(Op("bit_cast", lambda a, t=t: f"tg::wx_bit_cast<{t.cname}>({a[0]})", t), [v], node)

    def positional_call(self, name, node, kwargs):
        """``node`` with its keyword arguments put in the places Warp's signature of builtin
        ``name`` gives them (``BUILTIN_PARAMS``)."""
        params = BUILTIN_PARAMS[name]
        args = list(node.args)
        if len(args) > len(params):
            self.error(f"{name}() takes {len(params)} arguments ({', '.join(params)}), got {len(args)}", node)
        slots = dict(zip(params, args))
        for k, v in kwargs.items():
            if k not in params:
                self.error(f"{name}() got an unexpected keyword argument '{k}' (it takes {', '.join(params)})", node)
            if k in slots:
                self.error(f"{name}() got multiple values for argument '{k}'", node)
            slots[k] = v
        missing = [p for p in params if p not in slots]
        if missing:
            self.error(f"{name}() missing argument '{missing[0]}'", node)
        return ast.copy_location(ast.Call(func=node.func, args=[slots[p] for p in params], keywords=[]), node)
    def static_value(self, node, kwargs):
        """``tg.static(expr)``: the expression's compile-time value (an error if it has none)."""
        if kwargs or len(node.args) != 1:
            self.error("static() takes one expression", node)
        v = self.expr(node.args[0])
        if isinstance(v, (Lit, PyObj)):
            return v
        self.error(f"static(): `{ast.unparse(node.args[0])}` is not known when the kernel compiles "
                   f"({describe(v)})", node)

    def out_param_call(self, name, node):
        """Warp's builtins that write results into local variables (``quat_to_axis_angle(q,
        axis, angle)``): one builtin per result (``OUT_PARAMS``), each written to its variable.
        Called with the inputs only, they return the results as a tuple, as Warp's do."""
        n_in, parts = OUT_PARAMS[name]
        if len(node.args) not in (n_in, n_in + len(parts)):
            self.error(f"{name}() takes {n_in} input(s) and {len(parts)} output variable(s), got "
                       f"{len(node.args)} argument(s)", node)
        ins = [self.materialize(self.expr(a)) for a in node.args[:n_in]]
        if REGISTRY[parts[0]].match([v.type for v in ins])[0] is None:   # name the call, not its parts
            self.error(f"{name}() does not accept ({', '.join(type_name(v.type) for v in ins)})", node)
        if len(node.args) == n_in:       # Warp's tuple form: axis, angle = quat_to_axis_angle(q)
            return TupleVal([self.builtin_args(part, ins, node) for part in parts])
        for part, target in zip(parts, node.args[n_in:]):
            value = self.builtin_args(part, ins, node)
            local = self.scope.get(target.id) if isinstance(target, ast.Name) else None
            if not (isinstance(local, Var) and local.kind == "local"):
                self.error(f"{name}(): output argument {ast.unparse(target)!r} must be a local variable declared "
                           f"before the call (e.g. axis = tg.vec3(); angle = float(0.0))", node)
            if local.type is not value.type:
                self.error(f"{name}(): output variable '{target.id}' is {type_name(local.type)}, expected "
                           f"{type_name(value.type)}", node)
            self.emit(Write(local, value, self.loc(node)))
        return None

    def mutating_call(self, name, node):
        """``transform_set_translation(t, p)``: ``t = <MUTATING[name]>(t, p)`` on the local ``t``."""
        target = node.args[0] if node.args else None
        local = self.scope.get(target.id) if isinstance(target, ast.Name) else None
        if not (isinstance(local, Var) and local.kind == "local"):
            what = ast.unparse(target) if target is not None else "nothing"
            self.error(f"{name}(): the first argument must be a local variable to update, got {what!r}", node)
        args = [self.materialize(self.expr(a)) for a in node.args]
        value = self.builtin_args(MUTATING[name], args, node)
        self.emit(Write(local, value, self.loc(node)))
        return None

    def random_state(self, name, node):
        """The state argument of a random builtin (an uint32; a literal becomes one)."""
        if not node.args:
            self.error(f"{name}() needs a random state first: state = tg.rand_init(seed)", node)
        v = self.expr(node.args[0])
        v = self.materialize(v, uint32) if isinstance(v, Lit) else self.materialize(v)
        if v.type is not uint32:
            self.error(f"{name}(): the state must be a uint32 from tg.rand_init(seed[, offset]), got "
                       f"{type_name(v.type)}", node)
        return v

    def random_draw(self, name, node):
        """``randf(state, ...)``: the value drawn; ``state`` (a variable) is advanced in place."""
        state = self.random_state(name, node)
        lit = DRAWS[name][0]
        extras = [self.expr(a) for a in node.args[1:]]
        extras = [self.materialize(v, lit) if isinstance(v, Lit) and lit is not None else self.materialize(v)
                  for v in extras]
        # randf(state, lo, hi) is (hi - lo) * randf(state) + lo, the runtime's own formula, in
        # differentiable ops: its gradient reaches lo and hi (a draw alone is a constant; as one
        # builtin without an adjoint, the gradient through lo and hi was a silent 0)
        ranged = name == "randf" and len(extras) == 2 and all(v.type is float32 for v in extras)
        out = self.builtin_args(name, [state] + ([] if ranged else extras), node)
        new_state = self.builtin_args("rand_state", [out], node)
        value = self.builtin_args("rand_value", [out], node)
        if ranged:
            lo, hi = extras
            value = self.builtin_args("add", [self.builtin_args("mul", [self.builtin_args("sub", [hi, lo], node),
                                                                       value], node), lo], node)
        target = node.args[0]
        local = self.scope.get(target.id) if isinstance(target, ast.Name) else None
        if isinstance(local, Var) and local.kind == "local":
            self.emit(Write(local, new_state, self.loc(node)))
        return value

    def noise_call(self, name, node, kwargs):
        """``noise``/``pnoise``/``curlnoise``: literals typed as Warp's signatures (float32 points,
        int32 periods; curlnoise's octaves=1, lacunarity=2.0, gain=0.5 defaults)."""
        state = self.random_state(name, node)
        vals = [self.expr(a) for a in node.args[1:]]
        kinds = [float32] + [int32] * (len(vals) - 1)
        if name == "curlnoise":
            opts = ["octaves", "lacunarity", "gain"]
            bad = [k for k in kwargs if k not in opts]
            if bad:
                self.error(f"curlnoise() has no keyword '{bad[0]}' (it takes {', '.join(opts)})", node)
            given = dict(zip(opts, vals[1:]))
            for k, v in kwargs.items():
                given[k] = self.expr(v)
            defaults = {"octaves": Lit(1), "lacunarity": Lit(2.0), "gain": Lit(0.5)}
            vals = vals[:1] + [given.get(k, defaults[k]) for k in opts]
            point = vals[0].type if isinstance(vals[0], Var) else None
            f = float64 if point is not None and getattr(point, "scalar", point) is float64 else float32
            kinds = [float32, uint32, f, f]     # lacunarity and gain take the point's float type
        vals = [self.materialize(v, k) if isinstance(v, Lit) else self.materialize(v) for v, k in zip(vals, kinds)]
        return self.builtin_args(name, [state] + vals, node)

    def tid_arity(self, node):
        n = self.assign_targets or 1
        self.tid_ndim = max(self.tid_ndim, n)
        return n

    def cast(self, target, v, node, weak=False):
        if isinstance(v, Lit) and weak and v.type is None:
            return Lit(float(v.value) if target.kind == "float" else int(v.value) if target.kind != "bool"
                       else bool(v.value))    # float(3) of a Python constant stays a weak literal
        if isinstance(v, Lit):
            if v.type is None or is_scalar(v.type):
                try:
                    return Lit(target(v.value).item() if target.kind != "float" else float(target(v.value)), target)
                except (OverflowError, ValueError) as e:
                    self.error(f"cannot convert {v.value!r} to {type_name(target)}: {e}", node)
        v = self.materialize(v)
        if v.type is target:
            return v
        if not is_scalar(v.type):
            self.error(f"cannot cast {type_name(v.type)} to {type_name(target)}", node)
        return self.builtin_args("cast", [TypeArg(target)] + [v], node)

    def construct(self, t, args, node, kwargs):
        if kwargs and isinstance(t, TransformType) and set(kwargs) <= {"p", "q"} and len(args) + len(kwargs) <= 2:
            # Warp's tg.transform(p=..., q=...): p defaults to zero, q to the identity rotation
            given = dict(zip(("p", "q"), args))
            if set(given) & set(kwargs):
                self.error(f"{type_name(t)}(): '{sorted(set(given) & set(kwargs))[0]}' given twice", node)
            given.update({k: self.expr(v) for k, v in kwargs.items()})
            v3, qt = vector(3, t.scalar), quaternion(t.scalar)
            p = given.get("p", Lit(v3(0.0, 0.0, 0.0), v3))
            q = given.get("q", Lit(qt(0.0, 0.0, 0.0, 1.0), qt))
            return self.construct(t, [p, q], node, {})
        if kwargs:
            self.error(f"{type_name(t)}() takes no keyword arguments", node)
        if isinstance(t, TransformType) and len(args) not in (0, 1, 7):
            parts = len(args) == 2 and all(isinstance(a, (Var, Lit)) and a.type is not None and is_composite(a.type)
                                           for a in args)
            if not parts:   # Warp's words: 2 scalars (or 3...) are no transform
                self.error(f"incompatible number of values given ({len(args)}) when constructing a transform; "
                           f"expected 0, 1, or 7", node, WarpCodegenError, last=True)
        if isinstance(t, TransformType) and len(args) == 1:
            src = args[0].type if isinstance(args[0], (Var, Lit)) else None
            if isinstance(src, TransformType) and src.scalar is not t.scalar:
                # Warp refuses it (vectors, quaternions and matrices convert; a transform does not)
                self.error(f"copy constructing a transform requires matching source and target dtypes, got "
                           f"`{type_name(src.scalar)}` and `{type_name(t.scalar)}`", node, WarpCodegenError,
                           last=True)
        if all(isinstance(a, Lit) for a in args) and args:
            try:
                return Lit(t(*[a.value for a in args]), t)
            except (ValueError, TypeError) as e:
                self.error(f"{type_name(t)}(...): {e}", node)
        vals = self.adapt(args, anchor=t.scalar)
        bad = [v.type for v in vals if is_scalar(v.type) and v.type is not t.scalar]
        if bad and len(vals) != 1:
            self.error(f"{type_name(t)}(...) takes {type_name(t.scalar)} components, got {type_name(bad[0])}; "
                       f"cast it, e.g. tg.{type_name(t.scalar)}(x)", node)
        return self.builtin_args("construct", [TypeArg(t)] + vals, node)

    def unindex(self, base, idx, node):
        """``a[i, j]`` of an indexed array ``a`` as ``a.data[map(a.index0, i), map(a.index1, j)]``:
        the data array and the mapped indices (``lang/indexed.py``)."""
        t = base.type
        nd = indexed_dims(t)
        if len(idx) != nd or any(isinstance(v, SliceVal) for v in idx):
            self.error(f"an indexed array of {nd} dimension(s) takes {nd} integer index(es) here (or fewer, for a "
                       f"view), got {len(idx)}{' with a slice' if any(isinstance(v, SliceVal) for v in idx) else ''}",
                       node)
        data = self.call_op(op_field(t, "data"), [base], node)
        mapped = []
        for d, i in enumerate(self.index_vars(idx, node)):
            ix = self.call_op(op_field(t, f"index{d}"), [base], node)
            mapped.append(self.call_op(op_index_map(i.type), [ix, i], node))
        return data, mapped

    def indexed_view(self, base, idx, node):
        """``a[i]`` of a 2-D (or larger) indexed array: an indexed array of the remaining
        dimensions, over the data viewed at the mapped indices (Warp's)."""
        t = base.type
        dtype, nd = t.indexed
        k = len(idx)
        data = self.call_op(op_field(t, "data"), [base], node)
        mapped = []
        for d, i in enumerate(self.index_vars(idx, node)):
            ix = self.call_op(op_field(t, f"index{d}"), [base], node)
            mapped.append(self.call_op(op_index_map(i.type), [ix, i], node))
        view = self.array_view(data, mapped, node)
        rest = {f"index{d - k}": self.call_op(op_field(t, f"index{d}"), [base], node) for d in range(k, nd)}
        return self.new_struct(indexed_type(dtype, nd - k), [], {"data": view, **rest}, node)

    def e_Subscript_shape(self, base, k, node):
        """``a.shape[k]`` of an indexed array value ``base``."""
        t = base.type
        return self.call_op(op_indexed_shape(k), [self.call_op(op_field(t, "data"), [base], node),
                                                  self.call_op(op_field(t, f"index{k}"), [base], node)], node)

    def array_from_ptr(self, node, kwargs):
        """Warp's ``tg.array(ptr=p, shape=(n0, ...), dtype=T)`` inside a kernel: a contiguous array
        over address ``p`` (any integer), with no gradient (``lang/ptr_arrays.py``: a kernel that
        builds a floating-point one has no adjoint)."""
        if node.args:
            self.error("tg.array() in a kernel takes keywords only: tg.array(ptr=..., shape=..., dtype=...)", node)
        missing = [k for k in ("ptr", "shape", "dtype") if k not in kwargs]
        unknown = [k for k in kwargs if k not in ("ptr", "shape", "dtype")]
        if missing or unknown:
            self.error(f"tg.array() in a kernel takes ptr=, shape= and dtype= (an array over an address), "
                       f"{'missing ' + ', '.join(missing) if missing else 'got ' + unknown[0] + '='}", node)
        d = self.expr(kwargs["dtype"])
        try:
            dtype = type_of(d.obj, arg="tg.array(dtype=...)", allow_array=False) if isinstance(d, PyObj) else None
        except TypeError as e:
            self.error(str(e), node)
        if dtype is None or isinstance(dtype, ArrayType):
            self.error(f"tg.array(dtype=...) in a kernel must be a type (float, tg.vec3, a struct...), got "
                       f"{describe(d)}", node)
        shape = self.expr(kwargs["shape"])
        extents = shape.items if isinstance(shape, TupleVal) else [shape]
        if not 1 <= len(extents) <= MAX_DIMS:
            self.error(f"tg.array(shape=...) in a kernel needs 1 to {MAX_DIMS} extents, got {len(extents)}", node)
        ext = []
        for e in extents:
            v = self.materialize(e, int64) if isinstance(e, Lit) else self.materialize(e)
            if not is_int(v.type):
                self.error(f"tg.array(shape=...): extents must be integers, got {type_name(v.type)}", node)
            ext.append(v if v.type is int64 else self.cast(int64, v, node))
        p = self.expr(kwargs["ptr"])
        p = self.materialize(p, uint64) if isinstance(p, Lit) else self.materialize(p)
        if not is_int(p.type):
            self.error(f"tg.array(ptr=...) in a kernel must be an integer address (a uint64, a.ptr), got "
                       f"{type_name(p.type)}", node)
        if p.type not in (uint64, int64):    # an address needs 64 bits (Warp takes a uint64 only)
            self.error(f"tg.array(ptr=...) in a kernel must be a 64-bit integer address (a uint64, a.ptr), got "
                       f"{type_name(p.type)}, which cannot hold one", node)
        if p.type is not uint64:
            p = self.cast(uint64, p, node)
        return self.call_op(op_array_from_ptr(dtype, len(ext)), [p] + ext, node)

    def type_of_operand(self, v, node):
        """The tapegrad type of an expression's value (``type(x)`` in a kernel)."""
        if isinstance(v, Var):
            return v.type
        if isinstance(v, Lit):
            return v.type if v.type is not None else default_type(v.value)
        if isinstance(v, PyObj):
            return type(v.obj)
        self.error(f"type() of {describe(v)} is not supported", node)

    def type_attribute(self, t, attr):
        """Warp's type attributes in kernels: ``T.dtype`` (the scalar type of a value type, an
        array type's element type), ``T.length`` (the number of components); None otherwise."""
        if is_scalar(t) or is_composite(t):
            if attr == "dtype":
                return PyObj(scalar_of(t))
            if attr == "length":
                return Lit(1 if is_scalar(t) else t.length, int32)
        if is_array(t) and attr in ("dtype", "ndim"):
            return PyObj(t.dtype) if attr == "dtype" else Lit(t.ndim, int32)
        return None

    def composite_value(self, obj, node):
        """``tg.vector(*components, length=n, dtype=T)`` / ``tg.matrix(*values, shape=(r, c), dtype=T)``
        inside a kernel: a value (Warp's in-kernel ``vector``/``matrix``), zero when no values are given."""
        what = "vector" if obj is vector else "matrix"
        size_kw = "length" if obj is vector else "shape"
        unknown = [k.arg for k in node.keywords if k.arg not in (size_kw, "dtype")]
        if unknown:
            self.error(f"tg.{what}() in a kernel takes the values and {size_kw}=, dtype= keywords, got "
                       f"{unknown[0]}=", node)
        kw = {k.arg: self.expr(k.value) for k in node.keywords}
        args = [self.expr(a) for a in node.args]
        dtype = None
        if "dtype" in kw:
            d = kw["dtype"]
            try:
                dtype = resolve_dtype(d.obj if isinstance(d, PyObj) else None)
            except TypeError:
                dtype = None
            if not is_scalar(dtype):
                self.error(f"tg.{what}(dtype=...) must be a scalar type such as float or tg.float64", node)
        if dtype is None:
            typed = [a.type for a in args if isinstance(a, Var) or (isinstance(a, Lit) and a.type is not None)]
            dtype = next((t for t in typed if is_scalar(t)), float32)
        size = kw.get(size_kw)
        if size is not None:
            if isinstance(size, TupleVal) and all(isinstance(x, Lit) for x in size.items):
                size = tuple(int(x.value) for x in size.items)
            elif isinstance(size, Lit):
                size = int(size.value)
            else:
                self.error(f"tg.{what}({size_kw}=...) must be a constant", node)
        if obj is vector:
            n = size if size is not None else len(args)
            if not isinstance(n, int) or n < 1:
                self.error("tg.vector() needs components or a constant length=", node)
            t = vector(n, dtype)
        else:
            if size is None:
                self.error("tg.matrix() in a kernel needs shape=(rows, cols)", node)
            t = matrix(size, dtype)
        return self.construct(t, args, node, {})

    def expect_near(self, node, kwargs):
        """Warp's ``expect_near(a, b, tolerance=1e-6)``: prints both values (and the line) when a
        component differs by more than the tolerance; never aborts."""
        if set(kwargs) - {"tolerance"}:
            self.error("expect_near() takes a, b and tolerance=", node)
        args = [self.expr(a) for a in node.args] + ([self.expr(kwargs["tolerance"])] if kwargs else [])
        if len(args) == 2:
            args.append(Lit(1e-6, None))
        if len(args) != 3:
            self.error("expect_near() takes two values and a tolerance", node)
        a, b = self.adapt(args[:2])
        s = a.type.scalar if is_composite(a.type) else a.type
        tol = self.materialize(args[2], s) if isinstance(args[2], Lit) else self.materialize(args[2])
        self.side_effects = True
        return self.builtin_args("expect_near", [a, b, tol, TypeArg(Where(str(self.loc(node))))], node)

    def identity_value(self, node, kwargs):
        """Warp's ``identity(n, dtype)``: the identity matrix, a constant (``n`` and ``dtype`` are
        compile-time values)."""
        unknown = [k for k in kwargs if k not in ("n", "dtype")]
        if unknown or len(node.args) + len(kwargs) > 2:
            self.error("identity() takes n and dtype", node)
        given = dict(zip(("n", "dtype"), node.args))
        given.update(kwargs)
        if "n" not in given:
            self.error("identity() needs n, the size of the matrix", node)
        n = self.expr(given["n"])
        if not isinstance(n, Lit) or not isinstance(n.value, (int, np.integer)) or isinstance(n.value, bool) \
                or int(n.value) < 1:
            self.error("identity(n=...) must be a positive integer constant", node)
        d = self.expr(given["dtype"]) if "dtype" in given else PyObj(float32)
        try:
            dtype = resolve_dtype(d.obj if isinstance(d, PyObj) else None)
        except TypeError:
            dtype = None
        if not is_scalar(dtype):
            self.error("identity(dtype=...) must be a scalar type such as float or tg.float64", node)
        t = matrix((int(n.value), int(n.value)), dtype)
        return Lit(t(np.eye(int(n.value))), t)

    def typed_identity(self, name, dtype_node, node):
        """Warp's ``quat_identity(dtype=T)`` / ``transform_identity(dtype=T)``: the identity of that
        float type, a constant."""
        d = self.expr(dtype_node)
        try:
            dtype = resolve_dtype(d.obj if isinstance(d, PyObj) else None)
        except TypeError:
            dtype = None
        if not is_scalar(dtype) or not is_float(dtype):
            self.error(f"{name}(dtype=...) must be a float type such as float or tg.float64", node)
        t = quaternion(dtype) if name == "quat_identity" else transformation(dtype)
        comps = [0.0, 0.0, 0.0, 1.0] if name == "quat_identity" else [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        return self.construct(t, [Lit(c, dtype) for c in comps], node, {})

    def float_composite_value(self, obj, node):
        """``tg.types.quaternion(*values, dtype=T)`` / ``transformation(...)`` inside a kernel (Warp's
        spelling): components, or one value converted to ``T`` (the first typed argument's float type
        when no dtype is given)."""
        what = obj.__name__
        if obj is transformation and {k.arg for k in node.keywords} & {"p", "q"}:
            # Warp's transformation(p=..., q=..., dtype=...): the parts by keyword
            kw = {k.arg: k.value for k in node.keywords}
            unknown = [k for k in kw if k not in ("p", "q", "dtype")]
            if unknown:
                self.error(f"transformation() in a kernel takes p=, q= and dtype=, got {unknown[0]}=", node)
            args = [self.expr(a) for a in node.args]
            parts = {k: self.expr(v) for k, v in kw.items() if k != "dtype"}
            dtype = float32
            if "dtype" in kw:
                d = self.expr(kw["dtype"])
                dtype = resolve_dtype(d.obj) if isinstance(d, PyObj) else None
            else:
                typed = [v.type for v in list(parts.values()) + args if isinstance(v, Var)]
                dtype = next((scalar_of(t) for t in typed if is_float(scalar_of(t))), float32)
            if not is_scalar(dtype) or not is_float(dtype):
                self.error("transformation(dtype=...) must be a float type such as float or tg.float64", node)
            given = dict(zip(("p", "q"), args))
            if set(given) & set(parts) or len(args) > 2:
                self.error("transformation(): p and q are given once each", node)
            given.update(parts)
            v3, qt = vector(3, dtype), quaternion(dtype)
            p = given.get("p", Lit(v3(0.0, 0.0, 0.0), v3))
            q = given.get("q", Lit(qt(0.0, 0.0, 0.0, 1.0), qt))
            return self.construct(transformation(dtype), [p, q], node, {})
        unknown = [k.arg for k in node.keywords if k.arg != "dtype"]
        if unknown:
            self.error(f"{what}() in a kernel takes the values and a dtype= keyword, got {unknown[0]}=", node)
        args = [self.expr(a) for a in node.args]
        dtype = None
        for k in node.keywords:
            d = self.expr(k.value)
            try:
                dtype = resolve_dtype(d.obj if isinstance(d, PyObj) else None)
            except TypeError:
                dtype = None
            if not is_scalar(dtype) or not is_float(dtype):
                self.error(f"{what}(dtype=...) must be a float type such as float or tg.float64", node)
        if dtype is None:
            typed = [a.type for a in args if isinstance(a, Var) or (isinstance(a, Lit) and a.type is not None)]
            dtype = next((scalar_of(t) for t in typed if is_float(scalar_of(t))), float32)
        return self.construct(obj(dtype), args, node, {})

    def new_struct(self, st, args, kwargs, node):
        """``S(...)``: positional values fill the fields in order, keywords name them; the rest are zero."""
        fields = dict(st.fields)
        order = [n for n, _ in st.fields]
        if len(args) > len(order):
            self.error(f"struct {st.name} has {len(order)} field(s), got {len(args)} positional values", node)
        given = dict(zip(order, args))
        for k, v in kwargs.items():
            if k not in fields:
                self.error(f"struct {st.name} has no field '{k}' (fields: {', '.join(order) or 'none'})", node)
            if k in given:
                self.error(f"struct {st.name}: field '{k}' given twice", node)
            given[k] = v
        names, vals = [], []
        for n, v in given.items():
            v = self.field_value(st, n, v, node)
            names.append(n)
            vals.append(v)
        return self.builtin_args("struct_new", [TypeArg(StructInit(st, tuple(names)))] + vals, node)

    def field_value(self, st, name, v, node):
        """``v`` as a value of struct ``st``'s field ``name`` (literals take the field's type)."""
        ft = dict(st.fields)[name]
        if isinstance(v, Lit) and not is_array(ft) and not is_struct(ft):
            v = self.materialize(v, ft if is_scalar(ft) else ft.scalar) if v.type is None or is_scalar(ft) \
                else self.materialize(v)
            if is_composite(ft) and v.type is not ft and is_scalar(v.type):
                v = self.builtin_args("construct", [TypeArg(ft), v], node)
        else:
            v = self.materialize(v)
        if not field_accepts(ft, v.type):
            self.error(f"field '{name}' of struct {st.name} is a {type_name(ft)}, got {type_name(v.type)}", node)
        return v

    def print_(self, node):
        items = []
        for a in node.args:
            v = self.expr(a)
            if isinstance(v, PyObj) and isinstance(v.obj, str):
                items.append(v.obj)
                continue
            v = self.materialize(v)
            if not is_printable(v.type):
                self.error(f"cannot print a {type_name(v.type)}", node)
            items.append(v)
        self.side_effects = True
        self.emit(Print(items, None, self.loc(node)))

    def printf(self, node):
        if not node.args or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
            self.error("printf() needs a constant format string", node)
        items = []
        for a in node.args[1:]:
            v = self.materialize(self.expr(a))
            if not is_scalar(v.type):
                self.error(f"printf() cannot format a {type_name(v.type)}; use print()", node)
            items.append(v)
        self.side_effects = True
        self.emit(Print(items, node.args[0].value, self.loc(node)))

    def call_func(self, f, resolve, values, node, kwargs=None):
        fir, has_adj, types, values = resolve(f, self, values, node, kwargs or {})
        args = [self.materialize(v, t) if isinstance(v, Lit) else self.materialize(v) for v, t in zip(values, types)]
        if fir not in self.callees:
            self.callees.append(fir)
        for c in fir.callees:
            if c not in self.callees:
                self.callees.insert(0, c)
        if fir.side_effects:
            self.side_effects = True
        out = self.call_op(op_call(fir, f.name, has_adj), args, node)
        if out is not None and is_tuple_struct(out.type):   # x, y = f(...)
            return TupleVal([self.call_op(op_field(out.type, n), [out], node) for n, _ in out.type.fields])
        return out

    def type_from_annotation(self, node):
        ann = self.expr(node)
        if isinstance(ann, PyObj):
            try:
                return type_of(ann.obj)
            except TypeError as e:
                self.error(str(e), node)
        self.error(f"`{ast.unparse(node)}` is not a type", node)

    def is_adjoint_marker(self, node):
        try:
            v = self._peek(node)
        except Exception:
            return False
        return v is adjoint

    def _peek(self, node):
        if isinstance(node, ast.Name):
            if node.id in self.scope:
                return None
            v = self.closure.get(node.id, self.globals.get(node.id))
            chain = (node.id,)
        elif isinstance(node, ast.Attribute):
            base = self._peek(node.value)
            v = getattr(base, node.attr, None) if base is not None else None
            chain = None
            if v is adjoint:   # only a found marker changes how the expression lowers
                chain = _chain_of(node)
        else:
            return None
        if v is adjoint:
            depends.note_value(self.pyfunc, chain, v)
        return v


def _is_type(obj) -> bool:
    """Whether ``obj`` is a tapegrad type object (scalar, vector, matrix, struct, array type)."""
    return is_scalar(obj) or is_composite(obj) or is_struct(obj) or is_array(obj)


def _describe_object(obj) -> str:
    if isinstance(obj, type(python_builtins)):
        return obj.__name__
    return repr(obj)


def _struct_repr(st) -> str:
    """A struct type as Warp's messages name it: ``module.Name`` of its Python class."""
    cls = getattr(st, "cls", None)
    if cls is not None:
        return f"{cls.__module__}.{cls.__qualname__}"
    return st.name


def _chain_of(node):
    """``a.b.c`` as ``("a", "b", "c")``; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        base = _chain_of(node.value)
        return None if base is None else base + (node.attr,)
    return None


def _mutable_capture(obj) -> bool:
    """Whether a captured object is array-like data a kernel must not bake in: a NumPy array
    (unless ``tg.constant`` made it), a tapegrad array or framework tensor, a list, or a tuple of
    numbers."""
    if isinstance(obj, np.ndarray):
        return not is_constant(obj)
    if isinstance(obj, list):
        return True
    if not isinstance(obj, type) and (hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__")):
        return True   # a tapegrad array, a tensor: its elements would be read once, when the kernel compiles
    return isinstance(obj, tuple) and bool(obj) and all(isinstance(x, (int, float, np.number)) for x in obj)
