"""The IR check: verifies the invariants every pass relies on and every pass must keep.

``lower`` runs ``check_ir`` after each pass when IR checks are on (the test suite turns them
on; see ``lower.set_ir_checks``). A failure is a compiler bug, not a user error: the message
names the pass that ran last, the function and the statement's Python line.

Checked, for one ``FunctionIR``:

* statements are of the known kinds and carry a source location;
* every variable is declared (a parameter or in ``vars``), names are unique;
* temps are SSA: defined by exactly one statement, before (in program order) any use;
  locals are touched only by ``Read``/``Write`` (and as a range loop's variable);
  flags only by ``SetFlag``, loops and guards;
* operand and result types: an op's result has the op's type; a builtin's operands are
  accepted by its type rule with that result; a ``@func`` call matches the callee's
  parameters and is listed in ``callees``; reads, writes, copies and accumulations keep the
  type; conditions and trip counts are scalars of the right kind; constants are normalized
  values of their type;
* loops: flags and counters of the right kinds, a known reverse mode, and for ``prefix`` a
  snapshot of the same type per carried local;
* after ``plan_loops``: no dynamic loop reads a local it never assigns (they are hoisted);
* after ``param_access``: one ``(reads, writes)`` pair per parameter.
"""
from __future__ import annotations

from ..errors import IRCheckError
from ..types import bool_, int32, int64, uint64
from .builtins import COPY, REGISTRY
from .ir import AdjAccum, Assign, Const, If, Loop, Op, Print, Read, SetFlag, Var, Write, walk
from .typeutil import constant_value, is_array, is_composite, is_int, is_printable, is_scalar, is_struct, type_name

_STATEMENTS = (Assign, Const, Read, Write, SetFlag, If, Loop, AdjAccum, Print)
_OPERAND_KINDS = ("temp", "param", "typearg")


def check_ir(fn, after: str = "", done: tuple = ()) -> None:
    """Verify ``fn``'s invariants (see the module docstring).

    Args:
        fn: the ``FunctionIR``.
        after: the pass that produced it (for the message).
        done: every pass that has run on it, in order (enables pass-specific checks).
    Raises:
        IRCheckError: an invariant does not hold.
    """
    _Checker(fn, after, done).run()


def _same(a, b) -> bool:
    return a is b or a == b


class _Checker:
    def __init__(self, fn, after, done):
        self.fn = fn
        self.after = after
        self.done = done
        self.declared = {id(v) for v in fn.vars} | {id(p) for p in fn.params}
        self.defined = {id(p) for p in fn.params}
        self.stmt = None

    def fail(self, msg):
        stage = f" after pass '{self.after}'" if self.after else ""
        head = f"IR check{stage}: {self.fn.kind} '{self.fn.name}'"
        if self.stmt is None:
            raise IRCheckError(f"{head}: {msg}")
        raise IRCheckError(f"{head}, {type(self.stmt).__name__} at {self.stmt.loc or self.fn.loc}: {msg}")

    # ------------------------------------------------------------------ variables
    def var(self, v, kinds, what):
        if not isinstance(v, Var) and getattr(v, "kind", None) != "typearg":
            self.fail(f"{what} is {v!r}, not a variable")
        if v.kind not in kinds:
            self.fail(f"{what} '{v.name}' is a {v.kind}, expected {' or '.join(kinds)}")
        if v.kind != "typearg" and id(v) not in self.declared:
            self.fail(f"{what} '{v.name}' is not declared (not a parameter, not in vars)")
        return v

    def use(self, v, what, kinds=_OPERAND_KINDS):
        self.var(v, kinds, what)
        if v.kind == "temp" and id(v) not in self.defined:
            self.fail(f"{what} '{v.name}' is used before it is defined")
        return v

    def define(self, v, what):
        self.var(v, ("temp",), what)
        if id(v) in self.defined:
            self.fail(f"temp '{v.name}' is defined twice (SSA)")
        self.defined.add(id(v))

    def same_type(self, a, b, what):
        if not _same(a, b):
            self.fail(f"{what}: {type_name(a)} vs {type_name(b)}")

    # ------------------------------------------------------------------ function
    def run(self):
        fn = self.fn
        names = [v.name for v in fn.vars] + [p.name for p in fn.params]
        if len(names) != len(set(names)):
            dup = sorted({n for n in names if names.count(n) > 1})
            self.fail(f"variable names declared twice: {', '.join(dup)}")
        for p in fn.params:
            self.var(p, ("param",), "parameter")
        if fn.ret_var is not None:
            self.var(fn.ret_var, ("local",), "return variable")
            self.same_type(fn.ret_var.type, fn.ret_type, "return variable type vs return type")
        if fn.ret_flag is not None:
            self.var(fn.ret_flag, ("flag",), "return flag")
        self.block(fn.body)
        if "plan_loops" in self.done:
            for s in walk(fn.body):
                if isinstance(s, Loop):
                    self.hoisted(s)
        if "param_access" in self.done and len(fn.param_access) != len(fn.params):
            self.fail(f"param_access has {len(fn.param_access)} entries for {len(fn.params)} parameters")

    def block(self, stmts):
        for s in stmts:
            self.stmt = s
            if not isinstance(s, _STATEMENTS):
                self.fail("unknown statement kind")
            if s.loc is None:
                self.fail("statement without a source location")
            getattr(self, "s_" + type(s).__name__)(s)

    # ------------------------------------------------------------------ statements
    def s_Assign(self, s):
        op = s.op
        if not isinstance(op, Op):
            self.fail(f"op is {op!r}")
        operand_kinds = _OPERAND_KINDS + (("flag",) if op.name == "guard" and op.callee is None else ())
        args = [self.use(a, f"operand {k} of {op.name}", operand_kinds) for k, a in enumerate(s.args)]
        types = [a.type for a in args]
        if op.callee is not None:
            self.call(s, op.callee, types)
        elif op is COPY:
            if len(args) != 1 or s.out is None:
                self.fail("a copy takes one operand and defines a temp")
            self.same_type(s.out.type, types[0], "copy result vs operand")
        else:
            self.builtin(op, types)
        if s.out is not None:
            self.define(s.out, f"result of {op.name}")
            if op is not COPY:
                self.same_type(s.out.type, op.ret, f"result of {op.name} vs the op's type")
        elif op.ret is not None:
            self.fail(f"{op.name} returns {type_name(op.ret)} but the statement keeps no result")

    def builtin(self, op, types):
        special = _SPECIAL.get(op.name)
        if special is not None:
            problem = special(types, op.ret)
            if problem:
                self.fail(f"{op.name}: {problem}")
            return
        b = REGISTRY.get(op.name)
        if b is None or not b.overloads:
            self.fail(f"op '{op.name}' is neither a builtin nor a function call")
        ov, ret = b.match(types)
        if ov is None:
            self.fail(f"{op.name}() does not accept ({', '.join(type_name(t) for t in types)})")
        if not _same(ret, op.ret):
            self.fail(f"{op.name}({', '.join(type_name(t) for t in types)}) gives {type_name(ret)}, "
                      f"the op says {type_name(op.ret)}")

    def call(self, s, callee, types):
        if callee not in self.fn.callees:
            self.fail(f"calls '{callee.name}', which is not in callees")
        if len(types) != len(callee.params):
            self.fail(f"'{callee.name}' takes {len(callee.params)} arguments, got {len(types)}")
        for k, (t, p) in enumerate(zip(types, callee.params)):
            self.same_type(t, p.type, f"argument {k} of '{callee.name}'")
        if not _same(s.op.ret, callee.ret_type):
            self.fail(f"call of '{callee.name}' typed {type_name(s.op.ret)}, returns {type_name(callee.ret_type)}")

    def s_Const(self, s):
        self.define(s.out, "constant")
        if s.out.type is None:
            self.fail("constant without a type")
        try:
            normal = constant_value(s.value, s.out.type)
        except (TypeError, ValueError, OverflowError) as e:
            self.fail(f"constant {s.value!r} is not a {type_name(s.out.type)}: {e}")
        if type(normal) is not type(s.value) or repr(normal) != repr(s.value):   # repr: NaN equals NaN
            self.fail(f"constant {s.value!r} is not normalized for {type_name(s.out.type)} ({normal!r})")

    def s_Read(self, s):
        self.var(s.var, ("local",), "read variable")
        self.define(s.out, "read result")
        self.same_type(s.out.type, s.var.type, "read result vs variable")

    def s_Write(self, s):
        self.var(s.var, ("local",), "written variable")
        self.use(s.src, "written value")
        self.same_type(s.src.type, s.var.type, "written value vs variable")

    def s_SetFlag(self, s):
        self.var(s.var, ("flag",), "flag")
        if s.value not in ("true", "false"):
            self.fail(f"flag value {s.value!r}")

    def s_If(self, s):
        self.use(s.cond, "condition")
        if not is_scalar(s.cond.type):
            self.fail(f"condition of type {type_name(s.cond.type)}")
        self.block(s.body)
        self.block(s.orelse)

    def s_Loop(self, s):
        self.var(s.cnt, ("counter",), "iteration counter")
        self.same_type(s.cnt.type, int64, "iteration counter type")
        for f, what in ((s.brk, "break flag"), (s.cont, "continue flag")):
            if f is None:
                self.fail(f"loop without a {what}")
            self.var(f, ("flag",), what)
            self.same_type(f.type, bool_, what)
        if s.mode not in ("storefree", "prefix"):
            self.fail(f"loop mode {s.mode!r}")
        if s.mode == "storefree" and s.carried:
            self.fail("a storefree loop snapshots nothing")
        for v, snap in s.carried:
            self.var(v, ("local",), "carried variable")
            self.var(snap, ("snap",), "snapshot")
            self.same_type(snap.type, v.type, "snapshot vs carried variable")
        if s.kind == "range":
            self.use(s.count, "trip count")
            self.same_type(s.count.type, int64, "trip count type")
            self.var(s.var, ("local",), "loop variable")
            if not is_int(s.var.type):
                self.fail(f"loop variable of type {type_name(s.var.type)}")
            for v, what in ((s.start, "range start"), (s.step, "range step")):
                self.use(v, what)
                self.same_type(v.type, s.var.type, what)
            self.block(s.body)
        elif s.kind == "while":
            self.block(s.header)
            self.stmt = s
            self.use(s.cond, "while condition")
            if not is_scalar(s.cond.type):
                self.fail(f"while condition of type {type_name(s.cond.type)}")
            self.block(s.body)
        else:
            self.fail(f"loop kind {s.kind!r}")

    def s_AdjAccum(self, s):
        if self.fn.kind != "grad":
            self.fail("tg.adjoint[...] accumulation outside a custom adjoint")
        if s.param not in self.fn.params:
            self.fail(f"accumulates into '{s.param.name}', not a parameter")
        self.use(s.src, "accumulated value")
        t = s.param.type
        for step in s.path:   # struct fields, then vector/matrix components
            if isinstance(step, str):
                if not is_struct(t) or step not in dict(t.fields):
                    self.fail(f"adjoint path {s.path}: no field '{step}'")
                t = dict(t.fields)[step]
            elif is_composite(t) and isinstance(step, int):
                t = t.scalar
            elif not (isinstance(step, int) and is_scalar(t)):   # a matrix's second index
                self.fail(f"adjoint path {s.path}: bad step {step!r}")
        self.same_type(s.src.type, t, "accumulated value vs parameter")

    def s_Print(self, s):
        for item in s.items:
            if s.fmt is None and isinstance(item, str):
                continue
            self.use(item, "printed value")
            ok = is_scalar(item.type) if s.fmt is not None else is_printable(item.type)
            if not ok:
                self.fail(f"cannot print a {type_name(item.type)}")

    # ------------------------------------------------------------------ pass postconditions
    def hoisted(self, loop):
        assigned = {id(s.var) for s in walk(loop.header + loop.body) if isinstance(s, Write)}
        assigned |= {id(s.var) for s in walk(loop.header + loop.body) if isinstance(s, Loop) and s.var is not None}
        if loop.var is not None:
            assigned.add(id(loop.var))
        for s in walk(loop.header + loop.body):
            if isinstance(s, Read) and id(s.var) not in assigned:
                self.stmt = s
                self.fail(f"the loop at {loop.loc} reads '{s.var.label}', which it never assigns: "
                          "plan_loops hoists such reads")


def _tid(types, ret):   # int64 in a kernel's wide variant
    return None if not types and ret in (int32, int64) else "takes no operands and gives int32 (int64: wide)"


def _guard(types, ret):
    return None if ret is bool_ and all(t is bool_ for t in types) else "takes bool flags and gives bool"


def _range_count(types, ret):
    if len(types) == 3 and all(t is types[0] for t in types) and is_int(types[0]) and ret is int64:
        return None
    return "takes three integers of one type and gives int64"


def _shape(types, ret):
    if len(types) == 1 and is_array(types[0]) and ret in (int32, int64):   # int64 in a wide variant
        return None
    return "takes an array and gives int32 (int64: wide)"


def _field(types, ret):
    if len(types) == 1 and is_struct(types[0]) and any(_same(ft, ret) for _, ft in types[0].fields):
        return None
    return "takes a struct and gives one of its fields' types"


def _load_cell(types, ret):   # inplace.py's bounds-checked load
    if types and is_array(types[0]) and len(types) == 1 + types[0].ndim and all(is_int(t) for t in types[1:]) \
            and _same(ret, types[0].dtype):
        return None
    return "takes an array and one integer index per dimension and gives its element type"


def _grad(types, ret):   # tg.grad(f)(args): the arguments' adjoints, a tuple struct of them for several
    if not types or any(is_array(t) for t in types):
        return "takes values and gives their adjoints"
    if len(types) == 1 and _same(ret, types[0]):
        return None
    if is_struct(ret) and len(ret.fields) == len(types) and all(_same(ft, t) for (_, ft), t in zip(ret.fields, types)):
        return None
    return "gives the adjoint of each operand (one, or a tuple of them)"


def _bit_cast(types, ret):   # tg.cast(a, T): same size, values only
    if len(types) == 1 and not is_array(types[0]) and ret is not None and not is_array(ret) \
            and getattr(ret, "size", None) == getattr(types[0], "size", -1):
        return None
    return "reinterprets one value as a type of the same size"


def _adjoint_array(types, ret):   # tg.adjoint[a] of an array parameter in a @func_grad
    return None if not types and is_array(ret) else "takes nothing and gives an array (a gradient array)"


def _view(types, ret):
    if types and is_array(types[0]) and is_array(ret) and _same(ret.dtype, types[0].dtype) \
            and 1 <= ret.ndim <= types[0].ndim and all(is_int(t) for t in types[1:]):
        return None
    return "takes an array and integer indices / slice bounds and gives an array of its dtype"


def _array_from_ptr(types, ret):    # ptr_arrays.py: tg.array(ptr=..., shape=..., dtype=...) in a kernel
    if is_array(ret) and len(types) == 1 + ret.ndim and types[0] is uint64 and all(t is int64 for t in types[1:]):
        return None
    return "takes a uint64 address and an int64 extent per dimension and gives an array"


def _array_ptr(types, ret):
    if len(types) == 1 and is_array(types[0]) and ret is uint64:
        return None
    return "takes an array and gives its uint64 address"


def _index_map(types, ret):    # indexed.py: an index through a dimension's index array
    if len(types) == 2 and is_array(types[0]) and types[0].dtype is int32 and is_int(types[1]) and ret is types[1]:
        return None
    return "takes an int32 index array and an index and gives an index of the index's type"


def _indexed_shape(types, ret):
    if len(types) == 2 and is_array(types[0]) and is_array(types[1]) and ret is int32:
        return None
    return "takes the data and an index array and gives an int32 extent"


# ops the builtins (and passes) make directly (no type rule in the table)
_SPECIAL = {"tid": _tid, "guard": _guard, "range_count": _range_count, "shape": _shape, "field": _field,
            "load_cell": _load_cell, "grad": _grad, "bit_cast": _bit_cast,
            "adjoint_array": _adjoint_array, "view": _view, "array_from_ptr": _array_from_ptr,
            "array_ptr": _array_ptr, "index_map": _index_map, "indexed_shape": _indexed_shape}
