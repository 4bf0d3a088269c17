"""Python AST -> typed IR (``ir.py``), with the user's file:line on every statement and error.

The builder walks the function body once, resolving names (locals, closure cells, globals,
Python builtins), typing every expression, adapting numeric literals to the other operand's
type (B7), and lowering control flow: ``break``/``continue``/``return`` become flags plus
guards around the statements that follow them, ``for`` loops over constant ranges with a
small trip count are unrolled, other loops become ``Loop`` statements.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import typing

import numpy as np

from ..errors import KERNEL_RETURN_MESSAGE, WarpCodegenError, WarpCodegenTypeError, WarpCodegenValueError
from ..types import ScalarType, TransformType, bool_, int32, int64
from .builtins import REGISTRY, op_guard, op_range_count
from .expressions import ExprMixin, is_function_object
from .flow import Paths, meet
from .indexed import is_indexed
from .ir import AdjAccum, Assign, Const, FunctionIR, If, Loc, Loop, Op, SetFlag, Var, Write, c_identifier
from .signature import annotations, source_of
from .slices import slice_result_type
from .structs import FieldName, StructInit, is_tuple_struct, tuple_struct
from .typeutil import (
    constant_value,
    is_array,
    is_composite,
    is_float,
    is_int,
    is_mat,
    is_scalar,
    is_struct,
    is_vec,
    scalar_of,
    type_name,
)
from .values import (
    BINOPS,
    COMPONENTS,
    PYFOLD,
    KernelError,
    Lit,
    PyObj,
    ShapeOf,
    SliceVal,
    TupleVal,
    TypeArg,
    default_type,
    describe,
    hint,
)

MAX_UNROLL = 16
# what to write instead of statements kernels do not have
STATEMENT_HINTS = {
    "Assert": ": kernels cannot raise; check with tg.expect_eq(a, b) (prints on failure) or tg.printf",
    "Raise": ": kernels cannot raise; return early, or report with tg.printf",
    "Try": ": kernels have no exceptions; test the condition with `if`",
    "With": ": kernels have no context managers",
    "FunctionDef": ": define helpers at module level with @tg.func",
    "ClassDef": ": define structs at module level with @tg.struct",
    "Global": ": module-level values are read as constants; write results into arrays",
    "Nonlocal": ": closure values are read as constants; write results into arrays",
    "Delete": ": variables live until the kernel ends",
    "Import": ": import at module level",
    "ImportFrom": ": import at module level",
    "Match": ": use if / elif",
}


class Builder(ExprMixin):
    """Builds the ``FunctionIR`` of one kernel, function specialization or custom adjoint."""

    def __init__(self, pyfunc, kind, name, param_types, ret_type=None, grad_of=None, label="", wide=False):
        self.pyfunc = pyfunc
        self.wide = wide               # a kernel's wide variant: tid() is int64, int32 operands widen next to it
        self.kind = kind
        self.name = name
        self.label = label or name     # the name messages use (a function's Python name, not its symbol)
        self.src, self.file, self.first = source_of(pyfunc)
        self.src_lines = self.src.splitlines()
        self.param_types = param_types
        self.declared_ret = ret_type
        self.grad_of = grad_of
        self.grad_has_ret = ret_type is not None and kind == "grad"
        # a custom adjoint's last parameters: adj_ret, or one per member of a returned tuple
        self.n_adj_ret = (len(ret_type.fields) if is_tuple_struct(ret_type) else 1) if self.grad_has_ret else 0
        if kind == "grad":
            ret_type = None
        self.globals = pyfunc.__globals__
        self.closure = {}
        if pyfunc.__closure__:
            for n, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
                try:
                    self.closure[n] = cell.cell_contents
                except ValueError:
                    pass
        self.counter = 0
        self.vars: list = []
        self.scope: dict = {}
        self.block: list = []
        self.loops: list = []          # stack of (brk, cont) flag Vars
        self.flag_sets: dict = {}      # flag Var -> number of SetFlag emitted
        self.callees: list = []
        self.ret_var = None
        self.ret_type = ret_type
        self.ret_flag = None
        self.side_effects = False
        self.node = None
        self.assign_targets = None     # names on the left of the assignment being built (tid() arity)
        self.tid_ndim = 0              # the most indices tid() is unpacked into (launch checks len(dim))
        self.paths = Paths()           # the locals bound on the path being built (flow.py)
        self.dynamic = 0               # depth of run-time branches / loops around the statement being built
        self.memo = None               # id(node) -> (node, value) while an assignment target is built

    # ------------------------------------------------------------------ utilities
    def loc(self, node=None):
        node = node or self.node
        line = getattr(node, "lineno", 1)
        return Loc(self.file, self.first + line - 1, self.label)

    def error(self, msg, node=None, cls=KernelError, last=False):
        """Raise ``cls`` (a KernelError; Warp's ``WarpCodegen*Error`` where Warp raises one) with
        the message, the Python file:line, the construct and the source line (``last``: the
        message ends the text, after the source line, as where Warp's words end its message)."""
        node = node or self.node
        loc = self.loc(node)
        line = getattr(node, "lineno", 1)
        text = self.src_lines[line - 1].strip() if 0 < line <= len(self.src_lines) else ""
        what = {"kernel": "kernel", "func": "function", "grad": "custom adjoint"}[self.kind]
        expr = ""
        if node is not None and hasattr(node, "col_offset") and not isinstance(node, ast.stmt):
            try:
                expr = f" (in `{ast.unparse(node)}`)"
            except Exception:
                expr = ""
        if last:
            raise cls(f"{loc}: {what} '{self.label}', in `{text}`: {msg}")
        raise cls(f"{loc}: {what} '{self.label}': {msg}{expr}\n    {text}")

    def new_var(self, type_, kind="temp", label=""):
        self.counter += 1
        prefix = {"temp": "t", "local": "l_", "flag": "f_", "counter": "c", "snap": "s_"}[kind]
        safe = c_identifier(label)
        name = f"{prefix}{safe}_{self.counter}" if kind != "temp" else f"t{self.counter}"
        v = Var(name, type_, kind, label)
        self.vars.append(v)
        return v

    def emit(self, stmt):
        if getattr(stmt, "loc", None) is None:
            stmt.loc = self.loc()
        self.block.append(stmt)
        return stmt

    def set_flag(self, flag, value="true"):
        self.flag_sets[flag] = self.flag_sets.get(flag, 0) + 1
        self.emit(SetFlag(flag, value))

    def sub_block(self):
        return _SubBlock(self)

    # ------------------------------------------------------------------ values
    def materialize(self, v, type_=None):
        """Turn a value into a typed temp (literals get ``type_`` or their default type)."""
        if isinstance(v, Var):
            return v
        if isinstance(v, Lit):
            t = v.type or type_ or default_type(v.value)
            if type_ is not None and v.type is None:
                t = self.literal_type(v.value, type_)
            out = self.new_var(t)
            out.const = v.value
            try:
                value = constant_value(v.value, t)
            except (TypeError, ValueError, OverflowError) as e:
                self.error(f"cannot use constant {v.value!r} as {type_name(t)}: {e}")
            self.emit(Const(out, value))
            return out
        if isinstance(v, TupleVal):
            self.error("a tuple cannot be used as a value here")
        if isinstance(v, ShapeOf):
            self.error("a.shape must be indexed with a constant: a.shape[0]")
        self.error(f"{describe(v)} cannot be used as a value in a kernel")

    def literal_type(self, value, anchor):
        """The type a weak literal takes next to an operand of type ``anchor`` (B7)."""
        s = scalar_of(anchor) if not isinstance(anchor, ScalarType) else anchor
        if s is None:
            return default_type(value)
        if isinstance(value, bool):
            return bool_ if s is bool_ else s
        if isinstance(value, float) and s.kind != "float":
            if float(value).is_integer():
                return s
            self.error(f"float literal {value!r} used with an integer operand of type {type_name(s)}; "
                       f"cast explicitly, e.g. float(x)")
        return s

    def adapt(self, values, anchor=None):
        """Materialize ``values`` as temps, adapting weak literals to the first typed operand
        (a bool operand, e.g. a condition, anchors only when nothing else does)."""
        if anchor is None:
            cands = [v.type for v in values if (isinstance(v, Var) or (isinstance(v, Lit) and v.type is not None))
                     and (is_scalar(v.type) or is_composite(v.type))]
            anchor = next((t for t in cands if t is not bool_), cands[0] if cands else None)
        return [self.materialize(v, anchor) if isinstance(v, Lit) else self.materialize(v) for v in values]

    def call_op(self, op, args, node=None):
        out = self.new_var(op.ret) if op.ret is not None else None
        self.emit(Assign(out, op, list(args), self.loc(node)))
        if op.side_effect:
            self.side_effects = True
        return out

    def builtin(self, name, values, node=None, anchor=None):
        """Apply builtin ``name`` to values (constant folding all-literal arithmetic)."""
        if all(isinstance(v, Lit) for v in values) and name in PYFOLD and values:
            try:
                res = PYFOLD[name](*[v.value for v in values])
            except (ZeroDivisionError, OverflowError, ValueError) as e:
                self.error(f"constant expression fails: {e}", node)
            typed = next((v.type for v in values if v.type is not None), None)
            if typed is None:
                return Lit(res)
            if isinstance(res, bool):
                return Lit(res, bool_)
        args = self.adapt(values, anchor)
        try:
            op = REGISTRY[name].resolve([a.type for a in args])
        except TypeError as e:
            widened = self.widen(name, args, node)
            if widened is None:
                self.error(str(e) + hint(name, [a.type for a in args]), node)
            op, args = widened
        return self.call_op(op, args, node)

    def widen(self, name, args, node):
        """In a kernel's wide variant, ``(op, args)`` of builtin ``name`` with its int32 operands
        promoted to int64 when an int64 (a tid()-derived index) is among them and the promoted
        call resolves; None otherwise (narrow builds never promote: Warp refuses the mix)."""
        if not self.wide or not any(a.type is int64 for a in args if isinstance(a, Var)):
            return None
        if not any(a.type is int32 for a in args if isinstance(a, Var)):
            return None
        b = REGISTRY[name]
        types = [int64 if isinstance(a, Var) and a.type is int32 else a.type for a in args]
        ov, _ = b.match(types)
        if ov is None:
            return None
        args = [self.cast(int64, a, node) if isinstance(a, Var) and a.type is int32 else a for a in args]
        return b.resolve([a.type for a in args]), args

    # ------------------------------------------------------------------ entry
    def build(self) -> FunctionIR:
        tree = ast.parse(self.src)
        fdef = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if fdef is None:
            raise KernelError(f"{self.file}:{self.first}: no function definition found for '{self.label}'")
        self.node = fdef
        if isinstance(fdef, ast.AsyncFunctionDef):
            self.error("an `async def` cannot be a kernel or function: define it with plain `def`", fdef)
        argnames = [a.arg for a in fdef.args.args]
        if fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs:
            self.error("*args, **kwargs and keyword-only parameters are not supported", fdef)
        if len(argnames) != len(self.param_types):
            self.error(f"expected {len(self.param_types)} parameters, got {len(argnames)}", fdef)
        params = []
        for n, t in zip(argnames, self.param_types):
            p = Var(f"p_{n}", t, "param", n)
            params.append(p)
        self.params = params
        self.paths = Paths(argnames)
        if fdef.body and any(_has_return(s) for s in fdef.body):
            self.ret_flag = self.new_var(bool_, "flag", "ret")
        for k, p in enumerate(params):
            if self.kind == "grad" and self.grad_has_ret and k >= len(params) - self.n_adj_ret:
                self.scope[p.label] = p      # adj_ret: read directly, never reassigned
                continue
            if is_array(p.type):
                self.scope[p.label] = p
            else:
                local = self.new_var(p.type, "local", p.label)
                self.emit(Write(local, p, self.loc(fdef)))
                self.scope[p.label] = local
        body = fdef.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]   # docstring
        self.stmts(body)
        fn = FunctionIR(self.name, self.kind, params, self.block, ret_type=self.ret_type, ret_var=self.ret_var,
                        vars=self.vars, loc=Loc(self.file, self.first, self.label), side_effects=self.side_effects,
                        callees=self.callees, ret_flag=self.ret_flag, tid_ndim=self.tid_ndim,
                        adj_ret_type=self.declared_ret if self.kind == "grad" else None)
        return fn

    # ------------------------------------------------------------------ statements
    def exit_flags(self):
        flags = []
        if self.loops:
            flags += [f for f in self.loops[-1] if f is not None]
        if self.ret_flag is not None:
            flags.append(self.ret_flag)
        return flags

    def stmts(self, nodes):
        for k, node in enumerate(nodes):
            flags = self.exit_flags()
            before = sum(self.flag_sets.get(f, 0) for f in flags)
            self.node = node
            self.stmt(node)
            after = sum(self.flag_sets.get(f, 0) for f in flags)
            if after > before and k + 1 < len(nodes):
                # later statements run only if nothing above broke/continued/returned
                g = self.guard(flags)
                with self.sub_block() as body:
                    self.stmts(nodes[k + 1:])
                self.emit(If(g, body.stmts, [], self.loc(nodes[k + 1])))
                return

    def guard(self, flags):
        return self.call_op(op_guard(), list(flags))

    def stmt(self, node):
        method = getattr(self, "s_" + type(node).__name__, None)
        if method is None:
            kind = type(node).__name__
            self.error(f"unsupported statement `{kind}`{STATEMENT_HINTS.get(kind, '')}", node)
        method(node)

    def s_Pass(self, node):
        pass

    def s_Expr(self, node):
        if isinstance(node.value, ast.Constant):
            return
        self.expr(node.value)

    def s_Assign(self, node):
        tgt = node.targets[0]
        # tid()'s arity comes from the assignment target: i, j = tg.tid()
        self.assign_targets = len(tgt.elts) if isinstance(tgt, (ast.Tuple, ast.List)) and len(node.targets) == 1 \
            else None
        try:
            value = self.expr(node.value)
            for target in node.targets:
                with self.target_memo():
                    self.assign(target, value, node)
        finally:
            self.assign_targets = None

    @contextlib.contextmanager
    def target_memo(self):
        """Evaluate each expression inside an assignment's target once: ``a[f()] += x`` and
        ``s[f()].v = x`` call ``f`` once, though the target is read and then written back
        through its parts (every value stays valid: the parts are written only at the end)."""
        saved, self.memo = self.memo, {}
        try:
            yield
        finally:
            self.memo = saved

    def s_AnnAssign(self, node):
        if node.value is None:
            self.error("a declaration needs a value: x: float = 0.0", node)
        t = self.type_from_annotation(node.annotation)
        value = self.cast(t, self.expr(node.value), node)
        self.assign(node.target, value, node)

    def s_AugAssign(self, node):
        opname = BINOPS.get(type(node.op))
        if opname is None:
            self.error(f"unsupported operator {type(node.op).__name__}=", node)
        tgt = node.target
        if isinstance(tgt, ast.Subscript) and self.is_adjoint_marker(tgt.value):
            return self.adjoint_accum(tgt, node)
        if isinstance(tgt, ast.Subscript) and isinstance(tgt.value, ast.Subscript) \
                and self.is_adjoint_marker(tgt.value.value):
            return self.adjoint_array_accum(tgt, node)
        if isinstance(tgt, ast.Name):
            self.check_function_rebind(tgt.id, None, node)
        with self.target_memo():
            current = self.expr(tgt)
            rhs = self.expr(node.value)
            anchor = current.type if isinstance(current, Var) else None
            value = self.builtin(opname, [current, rhs], node, anchor=anchor)
            self.assign(tgt, value, node)

    def assign(self, target, value, node):
        if isinstance(target, ast.Name):
            return self.assign_name(target.id, value, node)
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, TupleVal):
                items = value.items
            else:
                self.error("only tuples (e.g. from tg.tid()) can be unpacked", node)
            if len(items) != len(target.elts):
                self.error(f"cannot unpack {len(items)} values into {len(target.elts)} names", node)
            for t, v in zip(target.elts, items):
                self.assign(t, v, node)
            return
        if isinstance(target, ast.Subscript):
            base = self.expr(target.value)
            idx = self.indices(target.slice)
            if isinstance(base, Var) and is_indexed(base.type):    # a store through the index arrays
                base, idx = self.unindex(base, idx, node)
            sliced = any(isinstance(v, SliceVal) for v in idx)
            if isinstance(base, Var) and is_array(base.type):
                if len(idx) > base.type.ndim:
                    self.error(f"Incorrect number of indices specified for array indexing: the array has "
                               f"{base.type.ndim} dimension(s), {len(idx)} index(es) were given", node,
                               WarpCodegenError)
                if sliced or len(idx) < base.type.ndim:
                    self.error("cannot assign to a sub-array; assign its elements (view = a[i, :]; view[j] = x)",
                               node)
                args = [base] + self.index_vars(idx, target) + [self.materialize(value, base.type.dtype)
                                                               if isinstance(value, Lit) else self.materialize(value)]
                if args[-1].type is not base.type.dtype:
                    self.error(f"cannot store {type_name(args[-1].type)} into an array of "
                               f"{type_name(base.type.dtype)}", node)
                if len(idx) != base.type.ndim:
                    self.error(f"array has {base.type.ndim} dimension(s) but {len(idx)} index(es) were given", node)
                self.builtin_args("store", args, node)
                return
            if sliced:
                return self.assign_slice(target.value, base, idx, value, node)
            return self.assign_component(target.value, base, idx, value, node)
        if isinstance(target, ast.Attribute):
            base = self.expr(target.value)
            if isinstance(base, Var) and isinstance(base.type, TransformType) and target.attr in ("p", "q") \
                    and _assignable(target.value, arrays=True):
                # t.p = v (t a local, a struct field or an array element): t = transform_with_translation(t, v),
                # as Warp's setter
                part = "transform_with_translation" if target.attr == "p" else "transform_with_rotation"
                v = self.materialize(value, base.type.scalar) if isinstance(value, Lit) else self.materialize(value)
                self.assign(target.value, self.builtin_args(part, [base, v], node), node)
                return
            if isinstance(base, Var) and is_vec(base.type) and target.attr in COMPONENTS:
                return self.assign_component(target.value, base, [Lit(COMPONENTS[target.attr])], value, node)
            if isinstance(base, Var) and is_struct(base.type):
                return self.assign_field(target, base, value, node)
            self.error(f"cannot assign to attribute '{target.attr}' here", node)
        self.error(f"cannot assign to `{ast.unparse(target)}`", node)

    def assign_component(self, base_node, base, idx, value, node):
        if not (isinstance(base, Var) and is_composite(base.type)) or not _assignable(base_node, arrays=True):
            self.error("only components of vector/matrix variables (or of their struct fields or array elements) "
                       "can be assigned", node)
        t = base.type
        idx = self.component_indices(t, idx, node)
        val = self.materialize(value, t.scalar) if isinstance(value, Lit) else self.materialize(value)
        new = self.builtin_args("assign", [base] + self.index_vars(idx, node) + [val], node)
        self.assign(base_node, new, node)

    def assign_slice(self, base_node, base, idx, value, node):
        """``v[1:3] = w``, ``m[0, :] = r``, ``t[:3] += p``: a new value written back to what ``v`` names."""
        if not (isinstance(base, Var) and is_composite(base.type)) or not _assignable(base_node, arrays=True):
            self.error("only slices of vector/matrix variables (or of their struct fields or array elements) can be "
                       "assigned", node)
        t = base.type
        spec = self.slice_spec(t, idx, node)
        want = slice_result_type(t, spec)
        val = value if not isinstance(value, Lit) else self.materialize(value, t.scalar)
        if not isinstance(val, Var):
            val = self.materialize(val)
        if val.type is not want:
            self.error(_slice_value_message(want, val.type), node, WarpCodegenValueError, last=True)
        new = self.builtin_args("assign_slice", [base, TypeArg(spec), val], node)
        self.assign(base_node, new, node)

    def assign_field(self, target, base, value, node):
        """``s.a = x`` (also ``s.inner.a = x``, ``xs[i].a = x``): a new struct value written back
        to what ``s`` names."""
        st = base.type
        if target.attr not in dict(st.fields):
            self.error(f"struct {st.name} has no field '{target.attr}'", node)
        if not _assignable(target.value, arrays=True):
            self.error(f"cannot assign a field of `{ast.unparse(target.value)}`; assign the struct to a local "
                       f"first", node)
        val = self.field_value(st, target.attr, value, node)
        new = self.builtin_args("struct_set", [base, TypeArg(FieldName(target.attr)), val], node)
        self.assign(target.value, new, node)

    def check_function_rebind(self, name, value, node):
        """A local naming a function (``f = helper``, ``g = tg.grad(f)``) cannot be rebound to
        another function or to a value (``value`` None: an augmented assignment): kernels have no
        function pointers, so Warp refuses it (WarpCodegenError)."""
        cur = self.scope.get(name)
        if not (isinstance(cur, PyObj) and is_function_object(cur.obj)) or _same_binding(cur, value):
            return
        if getattr(cur.obj, "is_grad_of", False):
            self.error(f"Cannot reassign local '{name}', which holds a gradient function from wp.grad() "
                       f"(tg.grad(...)); use another name", node, WarpCodegenError)
        other = "another function" if isinstance(value, PyObj) and is_function_object(value.obj) else \
            "a non-function value"
        self.error(f"rebinding function-valued local '{name}' to {other} is not supported (kernels have no "
                   f"function pointers); use another name", node, WarpCodegenError)

    def assign_name(self, name, value, node):
        self.paths.assigned(name, getattr(node, "lineno", 1) + self.first - 1)
        self.check_function_rebind(name, value, node)
        cur = self.scope.get(name)
        if isinstance(value, (PyObj, TupleVal, ShapeOf)) or (isinstance(value, Var) and is_array(value.type)):
            if isinstance(cur, Var) and cur.kind == "local":
                self.error(f"'{name}' is a {type_name(cur.type)} variable and cannot be rebound to {describe(value)}",
                           node)
            if self.dynamic and cur is not None and not _same_binding(cur, value):
                # such names are bound at compile time: the last binding built would win on every path
                self.error(f"'{name}' names {describe(cur)} and is rebound to {describe(value)} inside a run-time "
                           f"branch or loop; arrays and other compile-time names cannot depend on a run-time "
                           f"condition: use separate names (or select an index)", node)
            self.scope[name] = value
            return
        if isinstance(cur, Var) and cur.kind == "local":
            if isinstance(value, Lit):
                value = self.materialize(value, cur.type)
            if value.type is not cur.type:
                self.error(f"cannot assign a {type_name(value.type)} to '{name}', which is a "
                           f"{type_name(cur.type)}; cast it, e.g. {type_name(cur.type)}(...)", node)
            self.emit(Write(cur, value, self.loc(node)))
            return
        value = self.materialize(value)
        local = self.new_var(value.type, "local", name)
        self.emit(Write(local, value, self.loc(node)))
        self.scope[name] = local

    def s_If(self, node):
        cond = self.expr(node.test)
        if isinstance(cond, Lit):   # static condition: build only the taken branch
            self.stmts(node.body if cond.value else node.orelse)
            return
        cond = self.materialize(cond)
        if is_array(cond.type):     # Warp's `if arr:`: whether the array has memory
            cond = self.builtin("array_nonnull", [cond], node.test)
        entry = self.paths.snapshot()
        self.dynamic += 1
        with self.sub_block() as body:
            self.stmts(node.body)
        after_body = self.paths.snapshot()
        self.paths.restore(entry)
        with self.sub_block() as orelse:
            self.stmts(node.orelse)
        self.dynamic -= 1
        self.paths.restore(meet(after_body, self.paths.bound))
        self.emit(If(cond, body.stmts, orelse.stmts, self.loc(node)))

    def s_Break(self, node):
        if not self.loops:
            self.error("'break' outside a loop", node)
        self.set_flag(self.loops[-1][0])
        self.paths.leave("break")

    def s_Continue(self, node):
        if not self.loops:
            self.error("'continue' outside a loop", node)
        self.set_flag(self.loops[-1][1])
        self.paths.leave("continue")

    def s_Return(self, node):
        if node.value is not None:
            if self.kind == "kernel":
                self.error(KERNEL_RETURN_MESSAGE, node, WarpCodegenTypeError)
            value = self.expr(node.value)
            if isinstance(value, TupleVal):
                value = self.return_tuple(value, node)
            if self.ret_var is None:
                if self.ret_type is None:
                    self.ret_type = value.type if isinstance(value, Var) else (
                        value.type or default_type(value.value)) if isinstance(value, Lit) else None
                    if self.ret_type is None:
                        self.error(f"cannot return {describe(value)}", node)
                self.ret_var = self.new_var(self.ret_type, "local", "ret")
            v = self.materialize(value, self.ret_type) if isinstance(value, Lit) else self.materialize(value)
            if v.type is not self.ret_type:
                if self.declared_ret is not None:
                    self.error(f"The function `{self.label}` has its return type annotated as "
                               f"`{self.return_annotation_text()}` but the code returns a value of type "
                               f"`{type_name(v.type)}`.", node, WarpCodegenError)
                self.error(f"returns {type_name(v.type)} but the function returns {type_name(self.ret_type)}", node,
                           WarpCodegenError)
            self.emit(Write(self.ret_var, v, self.loc(node)))
        elif self.ret_type is not None and self.kind != "kernel":
            self.error("a function that returns a value must return one on every path", node)
        self.set_flag(self.ret_flag)
        self.paths.leave("return")

    def return_tuple(self, value, node):
        """``return a, b``: the tuple as a value of its generated struct (``structs.tuple_struct``)."""
        items = value.items
        if self.ret_type is not None:
            head = f"The function `{self.label}` has its return type annotated as"
            if not is_tuple_struct(self.ret_type):
                self.error(f"{head} `{self.return_annotation_text()}` but the code returns {len(items)} values.", node,
                           WarpCodegenError)
            if len(self.ret_type.fields) != len(items):
                self.error(f"{head} a tuple of {len(self.ret_type.fields)} elements but the code returns "
                           f"{len(items)} values.", node, WarpCodegenError)
            st = self.ret_type
            got = [v.type if isinstance(v, Var) else (v.type or default_type(v.value)) if isinstance(v, Lit) else None
                   for v in items]
            if any(not self.returnable(v, ft) for v, (_, ft) in zip(items, st.fields)):
                types = ", ".join(type_name(t) if t is not None else describe(v) for t, v in zip(got, items))
                self.error(f"{head} `{self.return_annotation_text()}` but the code returns a tuple with types "
                           f"`({types})`.", node, WarpCodegenError)
        else:
            types = []
            for v in items:
                if isinstance(v, TupleVal):
                    self.error("nested tuples cannot be returned", node)
                v = self.materialize(v)
                if is_array(v.type):
                    self.error("a function cannot return an array inside a tuple", node)
                types.append(v)
            items = types
            st = tuple_struct([v.type for v in items])
        vals = [self.field_value(st, n, v, node) for (n, _), v in zip(st.fields, items)]
        return self.builtin_args("struct_new", [TypeArg(StructInit(st, tuple(n for n, _ in st.fields)))] + vals,
                                 node)

    def return_annotation_text(self) -> str:
        """The function's return annotation as written (``int``, ``tuple[int, int]``, ``int16``)."""
        try:
            ann = annotations(self.pyfunc, "function")[1]   # evaluated (from __future__ import annotations)
        except KernelError:
            ann = inspect.signature(self.pyfunc).return_annotation
        if isinstance(ann, str):
            return ann
        if isinstance(ann, type) and not typing.get_args(ann):
            return ann.__name__
        if typing.get_origin(ann) is not None:
            return repr(ann).replace("typing.", "")
        return type_name(ann) if hasattr(ann, "cname") else repr(ann)

    @staticmethod
    def returnable(v, ft) -> bool:
        """Whether a returned tuple item ``v`` fits the annotated member type ``ft``."""
        if isinstance(v, Lit) and v.type is None:
            return is_scalar(ft) and not (isinstance(v.value, float) and ft.kind != "float"
                                          and not float(v.value).is_integer())
        t = v.type if isinstance(v, (Var, Lit)) else None
        return t is ft or (is_composite(ft) and t == ft)

    def s_While(self, node):
        if node.orelse:
            self.error("while/else is not supported", node)
        brk = self.new_var(bool_, "flag", "brk")
        cont = self.new_var(bool_, "flag", "cont")
        entry = self.paths.snapshot()
        with self.sub_block() as header:
            cond = self.expr(node.test)
            forever = isinstance(cond, Lit) and bool(cond.value)
            cond = self.materialize(cond if not isinstance(cond, Lit) else Lit(bool(cond.value), bool_))
        self.loops.append((brk, cont))
        self.paths.enter_loop()
        self.dynamic += 1
        with self.sub_block() as body:
            self.stmts(node.body)
        self.dynamic -= 1
        breaks, conts = self.paths.leave_loop()
        self.loops.pop()
        # the loop ends when its condition fails (at entry or after an iteration) or at a break
        ends = breaks if forever else [entry, self.paths.bound, *conts, *breaks]
        self.paths.restore(meet(*ends))
        cnt = self.new_var(int64, "counter", "n")
        self.emit(Loop("while", body.stmts, cnt, self.loc(node), header=header.stmts, cond=cond, brk=brk, cont=cont))

    def s_For(self, node):
        if node.orelse:
            self.error("for/else is not supported", node)
        it = node.iter
        backwards = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "reversed" \
            and len(it.args) == 1 and not it.keywords
        if backwards:
            it = it.args[0]
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and 1 <= len(it.args) <= 3 and not it.keywords):
            self.error("only `for i in range(...)` and `for i in reversed(range(...))` loops are supported; "
                       "iterate over an index instead (for k in range(len(a)): ... a[k])", node)
        if not isinstance(node.target, ast.Name):
            self.error("the loop variable must be a single name", node)
        rargs = [self.expr(a) for a in it.args]
        for a, src in zip(rargs, it.args):
            if isinstance(a, Lit) and not isinstance(a.value, bool) and (
                    isinstance(a.value, (float, np.floating)) or (a.type is not None and is_float(a.type))):
                self.error(f"range() needs integer bounds, got {a.value!r} (Python raises TypeError; a float bound "
                           f"would run 0 times): convert it, e.g. range(int({ast.unparse(src)}))", node)
        if len(rargs) == 1:
            rargs = [Lit(0)] + rargs + [Lit(1)]
        elif len(rargs) == 2:
            rargs = rargs + [Lit(1)]
        if all(isinstance(a, Lit) for a in rargs):
            if rargs[2].value == 0:
                self.error("range() step must not be zero", node)
            values = range(*[int(a.value) for a in rargs])
            if backwards:
                values = values[::-1]
                rargs = [Lit(x, rargs[0].type) for x in (values.start, values.stop, values.step)]
            if len(values) <= MAX_UNROLL:
                return self.unrolled(node, list(values), rargs)
            return self.dynamic_for(node, rargs, runs=len(values) > 0)
        elif backwards:
            rargs = self.reversed_range(rargs, node)
        self.dynamic_for(node, rargs)

    def reversed_range(self, rargs, node):
        """``reversed(range(a, b, s))`` as ``range(a + (n - 1) * s, a - s, -s)`` with ``n`` its length."""
        anchor = next((a.type for a in rargs if isinstance(a, Var)), None)
        if not is_int(anchor):
            self.error(f"range() needs integer arguments, got {type_name(anchor)}; convert with int(...)", node)
        start, stop, step = [self.materialize(a, anchor) if isinstance(a, Lit) else a for a in rargs]
        count = self.call_op(op_range_count(), [start, stop, step], node)
        n = self.builtin_args("cast", [TypeArg(anchor), count], node) if anchor is not int64 else count
        last = self.builtin("add", [start, self.builtin("mul", [self.builtin("sub", [n, Lit(1)], node), step], node)],
                            node)
        return [last, self.builtin("sub", [start, step], node), self.builtin("neg", [step], node)]

    def unrolled(self, node, values, rargs):
        t = next((a.type for a in rargs if a.type is not None), None)   # weak when range() got literals
        brk = self.new_var(bool_, "flag", "brk")
        cont = self.new_var(bool_, "flag", "cont")
        has_cont = _contains(node.body, ast.Continue)
        name = node.target.id
        stops = [brk] + ([self.ret_flag] if self.ret_flag else [])
        if _contains(node.body, ast.Break):
            self.emit(SetFlag(brk, "false"))
        breaks = []
        # After the loop the name is an ordinary local holding the last index that ran (as in
        # Python): a later run-time loop may update it. Each copy sets it; the C++ compiler drops
        # the stores nothing reads.
        it_type = t or default_type(values[0]) if values else None
        prev = self.scope.get(name)
        index = prev if isinstance(prev, Var) and prev.kind == "local" and prev.type is it_type else \
            (self.new_var(it_type, "local", name) if values else None)

        def iteration(k):
            if k >= len(values):
                return
            if has_cont:
                self.emit(SetFlag(cont, "false"))
            self.emit(Write(index, self.materialize(Lit(values[k], t), it_type)))
            self.scope[name] = Lit(values[k], t)     # a compile-time constant in each copy
            self.paths.assigned(name, node.lineno + self.first - 1)
            before = sum(self.flag_sets.get(f, 0) for f in stops)
            self.loops.append((brk, cont))
            self.paths.enter_loop()
            self.stmts(node.body)
            brks, conts = self.paths.leave_loop()
            breaks.extend(brks)
            self.paths.restore(meet(self.paths.bound, *conts))   # where the next iteration starts
            self.loops.pop()
            after = sum(self.flag_sets.get(f, 0) for f in stops)
            if after > before and k + 1 < len(values):
                g = self.guard(stops)
                with self.sub_block() as rest:
                    iteration(k + 1)
                self.emit(If(g, rest.stmts, [], self.loc(node)))
            else:
                iteration(k + 1)

        iteration(0)
        if values:
            self.paths.restore(meet(self.paths.bound, *breaks))
            if isinstance(self.scope.get(name), Lit):   # the body did not rebind it
                self.scope[name] = index

    def dynamic_for(self, node, rargs, runs=False):
        """A ``Loop`` over ``range(*rargs)``; ``runs``: the trip count is known to be positive."""
        anchor = next((a.type for a in rargs if isinstance(a, Var)), None) or \
            next((a.type for a in rargs if isinstance(a, Lit) and a.type is not None), int32)
        if not is_int(anchor):
            self.error(f"range() needs integer arguments, got {type_name(anchor)}; convert with int(...)", node)
        start, stop, step = [self.materialize(a, anchor) if isinstance(a, Lit) else a for a in rargs]
        for a in (start, stop, step):
            if a.type is not anchor:
                self.error(f"range() arguments must have one integer type, got "
                           f"{', '.join(type_name(x.type) for x in (start, stop, step))}", node)
        count = self.call_op(op_range_count(), [start, stop, step], node)
        name = node.target.id
        cur = self.scope.get(name)
        if isinstance(cur, Var) and cur.kind == "local" and cur.type is anchor:
            var = cur
        else:
            var = self.new_var(anchor, "local", name)
            self.scope[name] = var
        brk = self.new_var(bool_, "flag", "brk")
        cont = self.new_var(bool_, "flag", "cont")
        entry = self.paths.snapshot()
        self.loops.append((brk, cont))
        self.paths.enter_loop()
        self.paths.assigned(name, node.lineno + self.first - 1)
        self.dynamic += 1
        with self.sub_block() as body:
            self.stmts(node.body)
        self.dynamic -= 1
        breaks, conts = self.paths.leave_loop()
        self.loops.pop()
        self.paths.restore(meet(*([] if runs else [entry]), self.paths.bound, *conts, *breaks))
        cnt = self.new_var(int64, "counter", "n")
        self.emit(Loop("range", body.stmts, cnt, self.loc(node), count=count, start=start, step=step, var=var,
                       brk=brk, cont=cont))

    # ------------------------------------------------------------------ misc

    def adjoint_target(self, expr, node):
        """``(param, path, type)`` of what ``tg.adjoint[expr]`` names: a parameter, or a struct
        field of one (``x.vec``: path ``("vec",)``)."""
        if isinstance(expr, ast.Name):
            p = next((p for p in self.params if p.label == expr.id), None)
            if p is None:
                self.error("tg.adjoint[...] must name a parameter of the function", node)
            return p, (), p.type
        if isinstance(expr, ast.Attribute):
            p, path, t = self.adjoint_target(expr.value, node)
            if not is_struct(t) or expr.attr not in dict(t.fields):
                self.error(f"tg.adjoint[...]: `{ast.unparse(expr)}` is not a field of a struct parameter", node)
            return p, path + (expr.attr,), dict(t.fields)[expr.attr]
        self.error("tg.adjoint[...] must name a parameter of the function (or a struct field of one)", node)

    def adjoint_accum(self, tgt, node, components=()):
        """``tg.adjoint[x] += v`` (also ``x.field``, and ``components``: constant indices of a
        vector/matrix, from ``tg.adjoint[x.vec][0]``)."""
        if self.kind != "grad":
            self.error("tg.adjoint[...] can only be used inside a @func_grad function", node)
        if not isinstance(node.op, ast.Add):
            self.error("tg.adjoint[x] only supports +=", node)
        p, path, t = self.adjoint_target(tgt.slice, node)
        if is_array(t):
            self.error("adjoints of array parameters are their gradient arrays; add into an element with "
                       "tg.adjoint[a][i] += v", node)
        if components:
            dims = (t.length_,) if is_vec(t) else (t.rows, t.cols) if is_composite(t) else ()
            if len(components) != len(dims):
                self.error(f"tg.adjoint[...][...]: a {type_name(t)} takes {len(dims)} constant index(es)", node)
            for i, n in zip(components, dims):
                if not 0 <= i < n:
                    self.error(f"tg.adjoint[...][{i}]: index out of range for a {type_name(t)}", node)
            path, t = path + tuple(components), t.scalar
        v = self.expr(node.value)
        v = self.materialize(v, t) if isinstance(v, Lit) else self.materialize(v)
        if v.type is not t:
            self.error(f"adjoint of '{ast.unparse(tgt.slice)}' must be a {type_name(t)}, got {type_name(v.type)}",
                       node)
        self.emit(AdjAccum(p, v, self.loc(node), path))


    def adjoint_array_accum(self, tgt, node):
        """``tg.adjoint[a][i, ...] += v`` in a ``@func_grad``: ``v`` added (atomically) into the
        gradient array of array parameter ``a`` at the index (Warp's spelling)."""
        if self.kind != "grad":
            self.error("tg.adjoint[...] can only be used inside a @func_grad function", node)
        if not isinstance(node.op, ast.Add):
            self.error("tg.adjoint[a][i] only supports +=", node)
        sl = tgt.value.slice
        p, path, t = self.adjoint_target(sl, node)
        if not is_array(t):    # tg.adjoint[x.vec][0]: a component of a value's adjoint
            idx = [self.expr(e) for e in (tgt.slice.elts if isinstance(tgt.slice, ast.Tuple) else [tgt.slice])]
            if not all(isinstance(i, Lit) and isinstance(i.value, (int, np.integer)) for i in idx):
                self.error("tg.adjoint[x][i]: the component index must be a constant", node)
            return self.adjoint_accum(tgt.value, node, tuple(int(i.value) for i in idx))
        if path:
            self.error("tg.adjoint[a][i] must name an array parameter of the function", node)
        idx = self.index_vars(self.indices(tgt.slice), node)
        if len(idx) != p.type.ndim:
            self.error(f"array has {p.type.ndim} dimension(s) but {len(idx)} index(es) were given", node)
        v = self.expr(node.value)
        v = self.materialize(v, p.type.dtype) if isinstance(v, Lit) else self.materialize(v)
        # the adjoint function's parameter holding the gradient array (emit.adj_name of the param)
        grad = self.call_op(Op("adjoint_array", lambda a, n=f"adj_{p.name}": n, p.type), [], node)
        self.builtin_args("atomic_add", [grad] + idx + [v], node)


class _SubBlock:
    def __init__(self, b):
        self.b = b
        self.stmts = []

    def __enter__(self):
        self.saved = self.b.block
        self.b.block = self.stmts
        return self

    def __exit__(self, *exc):
        self.b.block = self.saved


def _contains(nodes, kind):
    """True if a statement list contains ``kind`` outside nested loops."""
    for n in nodes:
        for sub in _walk_no_loops(n):
            if isinstance(sub, kind):
                return True
    return False


def _walk_no_loops(node):
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
            continue
        yield from _walk_no_loops(child)


def _assignable(node, arrays=False):
    """Whether a component/field update can be written back to what ``node`` names: a local,
    a struct field of one, or (``arrays``) an array element."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _assignable(node.value, arrays)
    return arrays and isinstance(node, ast.Subscript)


def _slice_value_message(want, got) -> str:
    """Warp's texts for a value of the wrong type assigned to a slice."""
    if is_vec(want):
        if is_vec(got) and got.length_ != want.length_:
            return (f"The length of the provided vector ({got.length_}) isn't compatible with the given slice "
                    f"(expected {want.length_}).")
        if is_vec(got):
            return (f"The provided vector is expected to be of length {want.length_} with dtype "
                    f"{type_name(want.scalar)}.")
        return (f"The provided value is expected to be a vector of length {want.length_}, with dtype "
                f"{type_name(want.scalar)}.")
    if is_mat(got) and (got.rows, got.cols) != (want.rows, want.cols):
        return (f"The shape of the provided matrix ({got.rows}, {got.cols}) isn't compatible with the given slice "
                f"(expected ({want.rows}, {want.cols})).")
    if is_mat(got):
        return (f"The provided matrix is expected to be of shape ({want.rows}, {want.cols}) with dtype "
                f"{type_name(want.scalar)}.")
    return (f"The provided value is expected to be a matrix of shape ({want.rows}, {want.cols}), with dtype "
            f"{type_name(want.scalar)}.")


def _same_binding(a, b) -> bool:
    """Whether two compile-time bindings of a name are the same array / object."""
    if isinstance(a, PyObj) and isinstance(b, PyObj):
        return a.obj is b.obj
    return a is b


def _has_return(node):
    return any(isinstance(n, ast.Return) for n in ast.walk(node))
