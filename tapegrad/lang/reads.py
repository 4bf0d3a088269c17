"""The order in which a kernel loads and stores its array parameters, as the tape needs it:
an IR fact computed once per kernel (issue 14, SPEC B12; the tape's in-place saves).

A launch's generated adjoint re-runs the forward reading the arrays' values *from memory*, so
the tape must know, per array argument, whether the kernel loads it before any store to it
(its adjoint needs the values from *before* the launch), after a store (the values from *after*
it: a kernel that writes then reads an array), or both (no single copy serves both).

``group_reads`` answers that for one launch's alias pattern: it walks the kernel's lowered IR
in program order (branches merged, loop bodies walked twice so a load after the previous
iteration's store counts as "after", user functions followed through their parameters),
treating arrays passed as several arguments as one. Only loads whose values the adjoint reads
count (``needed_loads``: a dataflow over the IR using each op's ``linear``/``bilinear`` marks, as
the compiler's loop planning does), so linear updates (``x[i] = x[i] + dt * v[i]``) need no copy.
The arrays a struct argument holds form one group, reached through the struct's locals and
field ops.

The answer for the common pattern, every array and struct parameter passed its own argument,
is the registered fact ``param_reads`` (``direct.register_fact``): computed from the IR when the
kernel is lowered and stored in the direct cache's manifest, so a cached kernel recorded on a
tape lowers nothing (``param_reads``, ``distinct_array_reads``). Only a launch passing one array
as several arguments needs the IR itself. The tape's runtime side (which arguments are the
same array, the copies it takes) is ``tapegrad.tape_saves``.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from ..types import ArrayType, StructType
from .adjoint import active
from .direct import register_fact
from .ir import Assign, If, Loop, Read, Write, walk
from .typeutil import float_based

__all__ = ["ArrayReads", "PARAM_READS", "param_reads", "distinct_array_reads", "group_reads", "needed_loads"]


@dataclass(frozen=True)
class ArrayReads:
    """How one launch uses one array (all the arguments it is passed as, together).

    Attributes:
        before: the kernel loads the array before storing to it (or never stores to it).
        after: the kernel loads the array after it may have stored to it.
        writes: the kernel stores to it (or updates it atomically).
        name: the argument's name (for an array passed as several, one it is written as).
    """

    before: bool
    after: bool
    writes: bool
    name: str = ""



_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # kernel -> {alias groups: result}

PARAM_READS = "param_reads"


def _param_reads_fact(kernel, ir):
    """The fact ``param_reads``: ``[[index, before, after, writes], ...]`` per array or struct
    parameter, each passed its own argument (a struct's arrays form its group)."""
    groups = tuple(i if isinstance(t, (ArrayType, StructType)) else None for i, t in enumerate(kernel.arg_types))
    by_group = _group_reads(ir, groups)
    return [[i, *map(bool, by_group.get(g, (False, False, False)))] for i, g in enumerate(groups) if g is not None]


register_fact(PARAM_READS, _param_reads_fact)


def param_reads(kernel) -> dict:
    """``{index: ArrayReads}`` of ``kernel``'s array and struct parameters, for a launch that
    passes each its own argument; from the direct cache's manifest when the kernel is cached
    (no lowering), else from the IR. Cached per kernel.

    Raises:
        KernelError: the kernel does not type-check.
    """
    per_kernel = _per_kernel(kernel)
    found = per_kernel.get("params")
    if found is None:
        names = kernel.arg_names
        found = per_kernel["params"] = {int(i): ArrayReads(bool(b), bool(a), bool(w), names[int(i)])
                                        for i, b, a, w in kernel.fact(PARAM_READS)}
    return found


def distinct_array_reads(kernel):
    """``((index, ArrayReads), ...)`` of ``kernel``'s array parameters for a launch that passes
    a different array to each (``param_reads``), cached per kernel; None when the kernel has a
    struct parameter (its arrays share the struct's group).

    ``Tape.record`` uses it for the common launch: no array passed twice, no struct.
    """
    per_kernel = _per_kernel(kernel)
    found = per_kernel.get("distinct", _CACHE)
    if found is _CACHE:
        ts = kernel.arg_types
        found = None if any(isinstance(t, StructType) for t in ts) else tuple(sorted(param_reads(kernel).items()))
        per_kernel["distinct"] = found
    return found


def _per_kernel(kernel) -> dict:
    per_kernel = _CACHE.get(kernel)
    if per_kernel is None:
        per_kernel = {}
        try:
            _CACHE[kernel] = per_kernel
        except TypeError:      # not weak-referenceable: no cache
            pass
    return per_kernel


def group_reads(kernel, groups: tuple) -> tuple:
    """Per argument of a launch, its ``ArrayReads`` (None where ``groups`` has None); arguments
    in one group (the same array passed twice) share one. Cached per kernel and alias pattern.

    Args:
        kernel: the launched (specialized) ``Kernel``.
        groups: per argument, the group of the memory it passes (equal for the same array or
            struct), or None for an argument the tape does not follow.
    Raises:
        KernelError: the kernel does not type-check.
    """
    per_kernel = _per_kernel(kernel)
    found = per_kernel.get(groups)
    if found is None:
        used = [g for g in groups if g is not None]
        ts = kernel.arg_types
        if len(set(used)) == len(used) and all(
                g is None or isinstance(t, (ArrayType, StructType)) for g, t in zip(groups, ts)):
            # one group per parameter: each group's order is independent of the others', so the
            # stored fact answers (no lowering)
            per_param = param_reads(kernel)
            found = tuple(None if g is None else per_param.get(i, ArrayReads(False, False, False,
                                                                              kernel.arg_names[i]))
                          for i, g in enumerate(groups))
        else:
            ir = getattr(kernel, "ir", None)
            by_group = _group_reads(ir, groups) if ir is not None else _declared_reads(kernel.arg_access, groups)
            names: dict = {}
            for g, name, (_, w) in zip(groups, kernel.arg_names, kernel.arg_access):
                if g is not None and (w or g not in names):
                    names[g] = name
            found = tuple(None if g is None else ArrayReads(*by_group.get(g, (False, False, False)), names[g])
                          for g in groups)
        per_kernel[groups] = found
    return found


def _group_reads(ir, groups) -> dict:
    key = {id(p): g for p, g in zip(ir.params, groups) if g is not None}   # grows with aliases
    flags: dict = {}
    _walk(ir.body, key, set(), flags, (id(ir),), needed_loads(ir))
    return {g: tuple(f) for g, f in flags.items()}


# positions of an op's arguments whose values its adjoint never reads, beyond ``Op.linear``:
# the value stored or atomically added (adj_value += adj_a[i]); the indices stay needed
_VALUE_LINEAR = {"store": -1, "atomic_add": -1, "atomic_sub": -1}


def needed_loads(ir, callee: bool = False) -> set:
    """``id``s of the array loads of ``ir``'s body (and of its atomic updates, which return
    the old value) whose values its adjoint needs.

    A loaded value is needed when it flows (through any ops and locals) into an argument
    that an active op's adjoint reads (not in ``Op.linear``; for a ``bilinear`` op, only when
    another argument varies, i.e. derives from array data: kernel scalars get no gradient on a
    tape), into a branch or loop condition or bound, or into a user function call. So
    ``x[i] = x[i] + dt * v[i]`` needs neither ``x`` nor ``v``; ``x[i] = x[i] * x[i]`` needs ``x``.
    For a user function (``callee``), its parameters may carry array data and its returned
    value is needed.
    """
    stmts = list(walk(ir.body))
    origin: dict = {}        # id(var) -> ids of the loads its value derives from
    varying: set = {id(p) for p in ir.params} if callee else set()   # values derived from array data
    changed = True
    while changed:           # a fixpoint: locals carry values around loops
        changed = False
        for s in stmts:
            if isinstance(s, Assign):
                if s.out is None:
                    continue
                src = set()
                vary = bool(s.op.reads or s.op.writes or s.op.callee is not None)
                for a in s.args:
                    src |= origin.get(id(a), set())
                    vary |= id(a) in varying
                if s.op.name == "load" or s.op.writes:     # an atomic returns the old value
                    src.add(id(s))
                dst, out = origin.setdefault(id(s.out), set()), id(s.out)
            elif isinstance(s, (Read, Write)):
                a, out = (s.var, id(s.out)) if isinstance(s, Read) else (s.src, id(s.var))
                src, vary = origin.get(id(a), set()), id(a) in varying
                dst = origin.setdefault(out, set())
            else:
                continue
            if not src <= dst:
                dst |= src
                changed = True
            if vary and out not in varying:
                varying.add(out)
                changed = True
    needed: set = set(origin.get(id(ir.ret_var), ())) if callee and ir.ret_var is not None else set()
    for s in stmts:
        if isinstance(s, Assign):
            needed |= _value_reads(s, origin, varying)
        elif isinstance(s, If):
            needed |= origin.get(id(s.cond), set())
        elif isinstance(s, Loop):
            for v in (s.count, s.start, s.step, s.cond):
                if v is not None:
                    needed |= origin.get(id(v), set())
    return needed


def _value_reads(s, origin, varying) -> set:
    """The loads whose values statement ``s``'s adjoint reads."""
    op, n = s.op, len(s.args)
    tainted = [origin.get(id(a), set()) for a in s.args]
    if op.callee is not None:          # a user function: whatever it receives (conservative)
        return set().union(*tainted)
    if not active(s):
        return set()
    lin = {p if p >= 0 else n + p for p in op.linear}
    extra = _VALUE_LINEAR.get(op.name)
    if extra is not None:
        lin.add(n + extra)
    out: set = set()
    for p, a in enumerate(s.args):
        if not tainted[p] or p in lin:
            continue
        if op.bilinear and all(id(b) not in varying or not float_based(b.type)
                               for q, b in enumerate(s.args) if q != p):
            continue
        out |= tainted[p]
    return out


def _declared_reads(access, groups) -> dict:
    """Without an IR: the kernel's ``(reads, writes)`` per argument, reads taken as before
    any write (the in-place update ``x[i] = f(x[i])``)."""
    flags: dict = {}
    for (r, w), g in zip(access, groups):
        if g is not None:
            f = flags.setdefault(g, [False, False, False])
            f[0] |= bool(r)
            f[2] |= bool(w)
    return {g: tuple(f) for g, f in flags.items()}


def _mark(flags, g, index):
    f = flags.setdefault(g, [False, False, False])
    f[index] = True


def _walk(stmts, key, stored, flags, stack, needed) -> None:
    """Walk ``stmts`` in program order. ``key``: id(Var) -> group of the arrays of interest;
    ``stored``: the groups a store may have reached so far (updated in place); ``needed``:
    the loads (and atomics) whose values count (``needed_loads``)."""
    for s in stmts:
        if isinstance(s, (Read, Write)):     # struct arguments reach their fields through locals
            src, dst = (s.var, s.out) if isinstance(s, Read) else (s.src, s.var)
            if id(src) in key:
                key[id(dst)] = key[id(src)]
        elif isinstance(s, Assign):
            op = s.op
            if op.name == "field" and s.args and id(s.args[0]) in key:
                key[id(s.out)] = key[id(s.args[0])]     # an array (or nested struct) of a struct
            elif s.out is not None and isinstance(s.out.type, ArrayType) and id(s.out) not in key:
                # an array made from one of interest (a view ``row = m[i]``, a slice, a function
                # returning one) shares its memory: its loads and stores are the group's (a
                # store through the view then a load of ``m[i, 0]`` is a load after a store)
                g = next((key[id(a)] for a in s.args
                          if id(a) in key and isinstance(getattr(a, "type", None), ArrayType)), None)
                if g is not None:
                    key[id(s.out)] = g
            if op.name != "load" or id(s) in needed:
                for pos in op.reads:
                    g = key.get(id(s.args[pos]))
                    if g is not None:
                        _mark(flags, g, 1 if g in stored else 0)
            if op.writes and id(s) in needed:      # an atomic whose returned old value is used
                for pos in op.writes:
                    g = key.get(id(s.args[pos]))
                    if g is not None:
                        _mark(flags, g, 1 if g in stored else 0)
            callee = op.callee
            if callee is not None:
                sub = {id(p): key[id(a)] for p, a in zip(callee.params, s.args) if id(a) in key}
                if sub and getattr(callee, "native", None) is not None:
                    # a @func_native's C++ body is not seen: it may load and store the arrays it
                    # takes (a store there was missed: the tape saved nothing, the adjoint read
                    # the new values)
                    for g in sub.values():
                        _mark(flags, g, 1 if g in stored else 0)
                        _mark(flags, g, 2)
                        stored.add(g)
                elif sub and id(callee) in stack:      # recursion: assume the worst
                    for g in sub.values():
                        _mark(flags, g, 0)
                        _mark(flags, g, 1)
                        _mark(flags, g, 2)
                        stored.add(g)
                elif sub:
                    _walk(callee.body, sub, stored, flags, stack + (id(callee),), needed_loads(callee, True))
            for pos in op.writes:
                g = key.get(id(s.args[pos]))
                if g is not None:
                    _mark(flags, g, 2)
                    stored.add(g)
        elif isinstance(s, If):
            branch = set(stored)
            _walk(s.body, key, stored, flags, stack, needed)
            _walk(s.orelse, key, branch, flags, stack, needed)
            stored |= branch
        elif isinstance(s, Loop):
            for _ in range(2):          # the second pass sees the first iteration's stores
                _walk(s.header, key, stored, flags, stack, needed)
                _walk(s.body, key, stored, flags, stack, needed)
