"""Reverse mode planning: which statements need adjoints, and how each dynamic loop is reversed.

The adjoint of a function replays its forward (side effects skipped), then walks the
statements backwards, calling each op's adjoint (``emit`` writes that sweep). Temps hold the values of the latest
execution of their block, which is exactly right outside loops; inside a dynamic loop the
reverse sweep re-runs the body for each iteration, from last to first:

* ``storefree``: iteration ``k`` is recomputed from the loop index alone. Exact when no
  loop-carried variable's value is needed by an adjoint (``s += a[i] * x`` is fine).
* ``prefix``: iteration ``k`` is recomputed by restoring the loop-carried variables to their
  values at loop entry and re-running iterations ``0..k-1`` first: exact, O(n^2) work; the
  compiler warns (``TapeCompileWarning``) naming the variable and line.

Loop-invariant locals read inside a loop are hoisted into temps before the loop, so code
after the loop that reassigns them cannot leak into the recomputation.
"""
from __future__ import annotations

import warnings

from ..errors import TapeCompileWarning
from . import depends
from .builtins import op_copy
from .inplace import promote_inplace
from .ir import Assign, Const, If, Loop, Read, Var, Write, walk
from .typeutil import float_based, is_array


def active(stmt) -> bool:
    """Whether an Assign's adjoint must be emitted (differentiable and touching float data)."""
    op = stmt.op
    if op.adj is None:
        return False
    if stmt.out is not None and float_based(stmt.out.type):
        return True
    return any(isinstance(a, Var) and float_based(a.type) for a in stmt.args)


# ------------------------------------------------------------------------- loop planning

def plan(fn, new_var, kernel_name):
    """Choose the reverse mode of every dynamic loop in ``fn``; hoist invariant reads.

    ``new_var(type, kind, label)`` declares helper variables in ``fn``.
    """
    promote_inplace(fn, new_var)
    _plan_block(fn.body, new_var, kernel_name)
    _warn_atomic_returns(fn, kernel_name)
    _warn_without_adjoint(fn, kernel_name)


# builtins without an adjoint whose derivative is zero wherever it exists (piecewise constant):
# their missing adjoint is exact, not a dropped gradient
ZERO_DERIVATIVE = frozenset({"floor", "ceil", "round", "trunc", "rint", "nonzero", "sign", "step", "floordiv"})


def _varying(fn) -> set:
    """Float-based values that depend on the function's float inputs (parameters, array loads,
    calls' results on them): the values a gradient can flow through."""
    out = {p for p in fn.params if float_based(p.type) and not is_array(p.type)}
    for _ in range(2):                      # a second pass: values flowing around loops' back edges
        for s in walk(fn.body):
            if isinstance(s, Read) and s.var in out:
                out.add(s.out)
            elif isinstance(s, Write) and s.src in out:
                out.add(s.var)
            elif isinstance(s, Assign) and s.out is not None and float_based(s.out.type) and (
                    s.op.reads or any(isinstance(a, Var) and a in out for a in s.args)):
                out.add(s.out)
    return out


def _used_values(fn) -> set:
    """The values some statement of ``fn`` reads: call arguments, stored values, branch
    conditions and loop bounds."""
    used = set()
    for s in walk(fn.body):
        if isinstance(s, Assign):
            used.update(a for a in s.args if isinstance(a, Var))
        elif isinstance(s, Write):
            used.add(s.src)
        elif isinstance(s, If):
            used.add(s.cond)
        elif isinstance(s, Loop):
            used.update(v for v in (s.count, s.start, s.step, s.cond) if v is not None)
    return used


def _warn_without_adjoint(fn, kname):
    """A ``TapeCompileWarning`` for each call of a builtin (or ``@func``) without an adjoint that
    a gradient would flow through: a float value that depends on the inputs goes in, and a float
    result is used or the call writes it into an array. The gradient through it is 0 in the
    backward pass (the warning says so, naming the builtin and the line)."""
    varying = _varying(fn)
    used = _used_values(fn)
    seen = set()
    for s in walk(fn.body):
        if not isinstance(s, Assign) or s.op.adj is not None or s.op.name in ZERO_DERIVATIVE:
            continue
        if getattr(s.op, "array_adj", None) is not None:
            continue   # an array-valued result (a struct's array field): its gradient is the array's own
        if not any(isinstance(a, Var) and a in varying and float_based(a.type) and not is_array(a.type)
                   for a in s.args):
            continue
        writes_float = any(float_based(s.args[k].type) for k in s.op.writes if k < len(s.args))
        result = s.out is not None and float_based(s.out.type) and s.out in used
        if not (writes_float or result):
            continue
        key = (s.op.name, s.loc.line if s.loc else None)
        if key in seen:
            continue
        seen.add(key)
        what = f"@func '{s.op.name}'" if getattr(s.op, "callee", None) is not None else f"builtin '{s.op.name}'"
        w = TapeCompileWarning(
            f"{s.loc}: in '{kname}': {what} has no adjoint, and a gradient would flow through it here "
            f"(a float value that depends on the inputs goes in and its "
            f"{'result is used' if result else 'value is written into an array'}): the backward pass gives 0 "
            f"for that path. Keep it off the differentiated path (or compute the value another way).")
        depends.note_warning(w)
        warnings.warn(w, stacklevel=2)


# the atomics whose returned value (the element's content before the atomic) is differentiable
_RETURNING = ("atomic_add", "atomic_sub", "atomic_min", "atomic_max")


def _warn_atomic_returns(fn, kname):
    """A ``TapeCompileWarning`` for each float atomic whose returned value the function uses.

    Its adjoint sends the value's gradient to the element's previous content, and the backward
    replays it as the element's content (under a tape, restored to what it was before the
    launch): exact when no other thread of the launch updates the same element. When several
    do, each gets a value that depends on the order the atomics ran, which is not recorded."""
    used = _used_values(fn)
    for s in walk(fn.body):
        if isinstance(s, Assign) and s.op.name in _RETURNING and s.out is not None and s.out in used \
                and float_based(s.out.type):
            w = TapeCompileWarning(
                f"{s.loc}: in '{kname}': the value {s.op.name} returns is used; its gradient (and its value "
                f"in the backward pass) is exact only when no other thread of the launch updates the same "
                f"element: several updates of one element give each thread a value that depends on the order "
                f"the atomics ran, which the backward pass does not know. Leave the returned value unused "
                f"where several threads update one element.")
            depends.note_warning(w)
            warnings.warn(w, stacklevel=2)


def _plan_block(stmts, new_var, kname):
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if isinstance(s, If):
            _plan_block(s.body, new_var, kname)
            _plan_block(s.orelse, new_var, kname)
        elif isinstance(s, Loop):
            hoisted = _hoist_invariants(s, new_var)
            stmts[i:i] = hoisted
            i += len(hoisted)
            _choose_mode(s, new_var, kname)
            _plan_block(s.header, new_var, kname)
            _plan_block(s.body, new_var, kname)
        i += 1


def _assigned(stmts):
    out = set()
    for s in walk(stmts):
        if isinstance(s, Write):
            out.add(s.var)
        elif isinstance(s, Loop) and s.var is not None:
            out.add(s.var)
    return out


def _hoist_invariants(loop, new_var):
    region = loop.header + loop.body
    assigned = _assigned(region)
    if loop.var is not None:
        assigned.add(loop.var)
    hoisted, temps = [], {}
    for s in list(walk(region)):
        if isinstance(s, Read) and s.var not in assigned:
            if s.var not in temps:
                t = new_var(s.var.type, "temp", s.var.label)
                temps[s.var] = t
                hoisted.append(Read(t, s.var, loop.loc))
    if not temps:
        return []

    def rewrite(block):
        for k, s in enumerate(block):
            if isinstance(s, Read) and s.var in temps:
                block[k] = Assign(s.out, op_copy(), [temps[s.var]], s.loc)
            elif isinstance(s, If):
                rewrite(s.body)
                rewrite(s.orelse)
            elif isinstance(s, Loop):
                rewrite(s.header)
                rewrite(s.body)
    rewrite(loop.header)
    rewrite(loop.body)
    return hoisted


def _carried(loop):
    region = loop.header + loop.body
    assigned = _assigned(region)
    defined = {loop.var} if loop.var is not None else set()
    carried = []
    for s in region:
        for v in _reads(s, frozenset()):
            if v in assigned and v not in defined and v not in carried:
                carried.append(v)
        if isinstance(s, Write):
            defined.add(s.var)
    return carried


def _reads(s, bound):
    """Locals read by statement ``s``, except a nested loop's own variable inside that loop
    (it is set at the start of each of its iterations)."""
    if isinstance(s, Read):
        return [] if s.var in bound else [s.var]
    out = []
    if isinstance(s, If):
        for c in s.body + s.orelse:
            out += _reads(c, bound)
    elif isinstance(s, Loop):
        inner = bound | {s.var} if s.var is not None else bound
        for c in s.header + s.body:
            out += _reads(c, inner)
    return out


def _choose_mode(loop, new_var, kname):
    carried = _carried(loop)
    if not carried:
        return
    tainted = {v: v for v in carried}          # var -> the carried local it derives from
    const = set()
    needed = None                               # (carried local, stmt) whose adjoint needs it
    region = list(walk(loop.header)) + list(walk(loop.body))
    for _ in range(2):                          # second pass: values flowing around the back edge
        for s in region:
            if isinstance(s, Read) and s.var in tainted:
                tainted.setdefault(s.out, tainted[s.var])
            elif isinstance(s, Write) and s.src in tainted:
                tainted.setdefault(s.var, tainted[s.src])
            elif isinstance(s, Const):
                const.add(s.out)
            elif isinstance(s, Assign):
                src = next((tainted[a] for a in s.args if isinstance(a, Var) and a in tainted), None)
                if s.out is not None and src is not None:
                    tainted.setdefault(s.out, src)
                if s.out is not None and all(isinstance(a, Var) and a in const for a in s.args if a.name):
                    const.add(s.out)
                if needed is None and src is not None and active(s):
                    needed = _needs_value(s, tainted, const)
            elif isinstance(s, If) and s.cond in tainted and needed is None:
                needed = (tainted[s.cond], s)
            elif isinstance(s, Loop) and needed is None:
                for v in (s.count, s.start, s.step):
                    if v is not None and v in tainted:
                        needed = (tainted[v], s)
                if s.cond is not None and s.cond in tainted:
                    needed = (tainted[s.cond], s)
    if needed is None:
        return
    var, stmt = needed
    loop.mode = "prefix"
    loop.carried = [(v, new_var(v.type, "snap", v.label)) for v in carried]
    w = TapeCompileWarning(
        f"{loop.loc}: in '{kname}': the adjoint of this loop needs earlier iterations' values of the "
        f"loop-carried variable '{var.label}' (used at line {stmt.loc.line if stmt.loc else '?'}); the backward "
        f"pass recomputes the loop from its start for every iteration (exact, but O(n^2) work). "
        f"Restructure so the carried value is only accumulated (s += ...) to avoid it.")
    depends.note_warning(w)   # replayed when a later process reuses the cached binary
    warnings.warn(w, stacklevel=2)


def _needs_value(s, tainted, const):
    op = s.op
    n = len(s.args)
    lin = {p if p >= 0 else n + p for p in op.linear}
    for p, a in enumerate(s.args):
        if not (isinstance(a, Var) and a in tainted) or p in lin:
            continue
        if op.bilinear:
            others = [b for q, b in enumerate(s.args) if q != p]
            if all(b in const or not float_based(b.type) for b in others):
                continue
        return (tainted[a], s)
    return None
