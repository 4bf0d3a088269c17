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
from .ir import Assign, Const, If, Loop, Read, Var, Write, walk
from .typeutil import float_based


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
    _plan_block(fn.body, new_var, kernel_name)


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
