"""In-place arrays inside one kernel: an element a thread stores and reads again lives in a local.

The adjoint replays the forward with stores skipped, and under a tape the array holds its values
from before the launch while the adjoint runs (``tape.py`` saves and restores it). A load that
reads what the same thread stored earlier in the kernel (``x[i] = x[i] * x[i]; z[i] = x[i]``,
or ``for k in range(n): x[i] = x[i] * x[i]``) would replay with the old value. This pass keeps
such an element in a local: the element is loaded once where its accesses begin, every later
load of it reads the local, and every store also writes the local (the store to memory stays).
The forward computes what it computed before (one thread, one element: the same values), and
the replay reads the local, so the adjoint is exact; a loop that updates the element carries
the local, and the loop planner reverses it by recomputation (``adjoint.py``: prefix mode).

An array is promoted only when every access to it in the function is a plain load or store of
one element, named by the same index values (a local written once at the function's top level,
a constant, or pure arithmetic on those): accesses at other indices could alias the element at
run time, and a ``@func`` call or an atomic on the array is not followed. Anything else is left
as it was (the tape then warns as before).
"""
from __future__ import annotations

from .ir import Assign, Const, If, Loop, Op, Read, Var, Write, walk
from .typeutil import is_array

__all__ = ["promote_inplace"]


def promote_inplace(fn, new_var) -> list:
    """Keep each array element that ``fn`` stores and reads again in a local (module docstring).

    Args:
        fn: the ``FunctionIR`` (changed in place). new_var: ``new_var(type, kind, label)``
            declares a variable in ``fn``.
    Returns:
        The labels of the arrays promoted.
    """
    writes = {}
    for s in walk(fn.body):
        if isinstance(s, Write):
            writes[s.var] = writes.get(s.var, 0) + 1
        elif isinstance(s, Loop) and s.var is not None:
            writes[s.var] = writes.get(s.var, 0) + 2          # a loop variable: never a key
    top_writes = {s.var: k for k, s in enumerate(fn.body) if isinstance(s, Write) and writes.get(s.var) == 1}
    defs = {}
    for s in walk(fn.body):
        if isinstance(s, (Assign, Const, Read)) and getattr(s, "out", None) is not None:
            defs[s.out] = s
    done = []
    ops: dict = {}                      # id(op) -> op, for the index keys
    for arr in fn.params:
        if not is_array(arr.type):
            continue
        sites = _sites(fn.body, arr)
        if sites is None or not _reads_after_store(fn.body, arr):
            continue
        keys = {_key(s.args[1:len(s.args) - (1 if s.op.name == "store" else 0)], defs, top_writes, ops)
                for s, _ in sites}
        if len(keys) != 1 or None in keys:
            continue
        key = keys.pop()
        block, first = _common_block(fn.body, [path for _, path in sites])
        top = _top_index(fn.body, block, first)
        if top is None or any(top_writes[v] >= top for v in _locals_of(key)):
            continue                    # an index local not yet written where the element is loaded
        cell = new_var(arr.type.dtype, "local", f"{arr.label}[...]")
        init, idx = _materialize(key, new_var, sites[0][0].loc, ops)
        t0 = new_var(arr.type.dtype, "temp", arr.label)
        load = next(s for s, _ in sites if s.op.name == "load") if any(s.op.name == "load" for s, _ in sites) \
            else None
        if load is not None:
            # at the first access itself the load runs exactly when the kernel's did; hoisted
            # above a loop or branch it may run where the kernel never touches the element (an
            # index out of range there): then it is bounds-checked and gives 0 outside
            direct = any(first is s for s, _ in sites)
            op = load.op if direct else _checked_load(arr.type)
            init.append(Assign(t0, op, [arr] + idx, sites[0][0].loc))
            init.append(Write(cell, t0, sites[0][0].loc))
        else:
            init = []                   # stored before it is read: the first store sets the local
        at = _find(block, first)       # accesses are replaced below: find it first
        for s, path in sites:
            lst = path[-1][0]
            pos = _find(lst, s)
            if s.op.name == "load":
                lst[pos] = Read(s.out, cell, s.loc)
            else:
                lst.insert(pos + 1, Write(cell, s.args[-1], s.loc))
        block[at:at] = init
        done.append(arr.label)
    return done


def _sites(stmts, arr):
    """``[(stmt, path)]`` of every load/store of ``arr`` (``path``: ``[(list, index), ...]`` from
    the function's body to the statement); None if ``arr`` is used any other way that touches
    its memory (an atomic, a call, a store of the array itself...)."""
    out = []

    def visit(lst, path):
        for k, s in enumerate(lst):
            here = path + [(lst, k)]
            if isinstance(s, Assign):
                if any(a is arr for a in s.args):
                    name = s.op.name
                    if name in ("load", "store") and s.args[0] is arr and \
                            not any(a is arr for a in s.args[1:]):
                        out.append((s, here))
                    elif s.op.reads or s.op.writes or s.op.callee is not None or s.op.side_effect \
                            or s.op.view is not None:     # a view aliases the element
                        return False
            elif isinstance(s, If):
                if visit(s.body, here) is False or visit(s.orelse, here) is False:
                    return False
            elif isinstance(s, Loop):
                if visit(s.header, here) is False or visit(s.body, here) is False:
                    return False
        return True
    return out if visit(stmts, []) is not False and out else None


def _reads_after_store(stmts, arr) -> bool:
    """Whether a load of ``arr`` can run after a store to it in one thread's program order
    (a loop's body is seen twice: a load in one iteration after a store in the previous)."""
    state = {"stored": False, "hit": False}

    def visit(lst):
        for s in lst:
            if isinstance(s, Assign) and s.args and s.args[0] is arr:
                if s.op.name == "load" and state["stored"]:
                    state["hit"] = True
                elif s.op.name == "store":
                    state["stored"] = True
            elif isinstance(s, If):
                visit(s.body)
                visit(s.orelse)
            elif isinstance(s, Loop):
                for _ in range(2):
                    visit(s.header)
                    visit(s.body)
    visit(stmts)
    return state["hit"]


def _checked_load(t) -> Op:
    """``a[i, ...]`` when the indices are inside ``a``'s shape, else zero (forward, replay and
    adjoint), for a load the compiler adds where the kernel may not access the element."""
    zero = f"{t.dtype.cname}{{}}"

    def fwd(a):
        idx = ", ".join(a[1:])
        return f"(tg::cell_in_bounds({a[0]}, {idx}) ? *tg::addr({a[0]}.data, {a[0]}, {idx}) : {zero})"

    def adj(a, aa, g):
        idx = ", ".join(a[1:])
        return (f"if ({aa[0]}.data && tg::nonzero({g}) && tg::cell_in_bounds({a[0]}, {idx})) "
                f"tg::atomic_add_(tg::addr({aa[0]}.data, {aa[0]}, {idx}), {g});")
    return Op("load_cell", fwd, t.dtype, adj, reads=(0,), bounds_checked=True)


def _find(lst, stmt) -> int:
    return next(j for j, x in enumerate(lst) if x is stmt)


def _key(idx, defs, top_writes, ops):
    """A hashable name for the values of index temps ``idx``, equal for two accesses exactly
    when they name the same element; None when that cannot be told."""
    out = []
    for v in idx:
        k = _value_key(v, defs, top_writes, ops, 0)
        if k is None:
            return None
        out.append(k)
    return tuple(out)


def _value_key(v, defs, top_writes, ops, depth):
    if depth > 8 or not isinstance(v, Var):
        return None
    d = defs.get(v)
    if isinstance(d, Read):
        return ("local", d.var) if d.var in top_writes else None
    if isinstance(d, Const):
        try:
            hash(d.value)
        except TypeError:
            return None
        return ("const", v.type, d.value)
    if isinstance(d, Assign) and d.out is v:
        op = d.op
        if op.reads or op.writes or op.side_effect or op.callee is not None:
            return None
        args = []
        for a in d.args:
            k = _value_key(a, defs, top_writes, ops, depth + 1)
            if k is None:
                return None
            args.append(k)
        ops[id(op)] = op
        return ("op", id(op), v.type, tuple(args))
    return None


def _locals_of(key):
    out = []

    def visit(k):
        if k[0] == "local":
            out.append(k[1])
        elif k[0] == "op":
            for a in k[3]:
                visit(a)
    for k in key:
        visit(k)
    return out


def _materialize(key, new_var, loc, ops):
    """Statements computing the index values ``key`` names anew, and the temps holding them."""
    stmts = []

    def build(k):
        if k[0] == "local":
            t = new_var(k[1].type, "temp", k[1].label)
            stmts.append(Read(t, k[1], loc))
        elif k[0] == "const":
            t = new_var(k[1], "temp", "c")
            stmts.append(Const(t, k[2], loc))
        else:
            args = [build(a) for a in k[3]]
            t = new_var(k[2], "temp", "idx")
            stmts.append(Assign(t, ops[k[1]], args, loc))
        return t
    return stmts, [build(k) for k in key]


def _common_block(body, paths):
    """The deepest statement list holding every access (each path starts in ``body``) outside
    every loop that holds them all, and its first statement that contains one."""
    level = 0
    while True:
        lists = {id(p[level][0]) for p in paths if len(p) > level}
        if len(lists) != 1 or any(len(p) <= level for p in paths):
            break
        idxs = {p[level][1] for p in paths}
        if len(idxs) != 1 or any(len(p) <= level + 1 for p in paths):
            break
        if len({id(p[level + 1][0]) for p in paths}) != 1:
            break
        level += 1
    # inside a loop the element carries from one iteration to the next: load it before the
    # outermost loop that holds all its accesses
    for d in range(level):
        lst, k = paths[0][d]
        if isinstance(lst[k], Loop):
            return lst, lst[k]
    lst = paths[0][level][0]
    first = min(p[level][1] for p in paths)
    return lst, lst[first]


def _top_index(body, block, stmt):
    """The index in ``body`` of the top-level statement that holds ``stmt`` of ``block``."""
    if block is body:
        return body.index(stmt)
    for k, s in enumerate(body):
        if any(x is stmt for x in walk([s])):
            return k
    return None
