"""What a Tape keeps so that in-place kernels get exact gradients (issue 14, SPEC B12).

A launch's generated adjoint re-runs the forward reading the arrays' values *from memory*
(it stores nothing), so it needs the values each array had when the forward ran. A recorded
launch or copy that overwrites an array whose current values a differentiable record still
needs (the launch itself, reading before it writes; or an earlier record) makes the tape take a
copy of that array just before the overwrite (``snapshot``); ``Tape.backward`` copies it back
(``restore``) at that record's place in the reverse order, so every adjoint sees what its
forward saw, and finally puts the forward's last values back.

``kernel_reads`` says, per array argument of a launch, whether the kernel loads it before any
store to it (its adjoint needs the values from *before* the launch), after a store (the values
from *after* it: a kernel that writes then reads an array), or both (no single copy serves
both: the tape warns). It walks the kernel's lowered IR in program order (branches merged,
loop bodies walked twice so a load after the previous iteration's store counts as "after",
user functions followed through their parameters), treating arrays passed as several
arguments as one.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from . import memory_ops
from .array import array
from .cuda.stream import ScopedStream
from .lang.ir import Assign, If, Loop

__all__ = ["ArrayReads", "SavedValues", "kernel_reads", "buffer_like", "snapshot", "restore"]


@dataclass(frozen=True)
class ArrayReads:
    """How one launch uses one array (all the arguments it is passed as, together).

    Attributes:
        before: the kernel loads the array before storing to it (or never stores to it).
        after: the kernel loads the array after it may have stored to it.
        writes: the kernel stores to it (or updates it atomically).
    """

    before: bool
    after: bool
    writes: bool


@dataclass(frozen=True)
class SavedValues:
    """A copy of an array taken just before record ``index`` overwrote it.

    Attributes:
        array: the overwritten array. values: a contiguous copy of its values before the record.
        before_adjoint: restore the copy before replaying the record's adjoint (the record
            reads the old values) rather than after it (it reads only what it wrote).
        stream: the stream the record ran on (None: the device's current one); the copies
            run there, ordered with the record's kernels.
    """

    array: Any
    values: Any
    before_adjoint: bool
    stream: Any

    @property
    def nbytes(self) -> int:
        return self.values.nbytes


def buffer_like(a, stream=None):
    """A new contiguous array of ``a``'s shape, dtype and device (allocated on ``stream``)."""
    with ScopedStream(stream, sync_enter=False):
        return array(shape=a.shape, dtype=a.dtype, device=a.device)


def snapshot(a, stream=None):
    """A new contiguous array holding ``a``'s current values (allocated and copied on
    ``stream``, so a stream-ordered allocation is ready where the copy runs)."""
    if stream is None:
        out = array(shape=a.shape, dtype=a.dtype, device=a.device)
        memory_ops.copy(out, a)
        return out
    with ScopedStream(stream, sync_enter=False):
        return snapshot(a)


def restore(dest, src, stream=None) -> None:
    """Copy ``src``'s values into ``dest`` on ``stream`` (no version bump: the tape puts the
    forward's values back before ``backward`` returns)."""
    if stream is None:
        memory_ops.copy(dest, src)
        return
    with ScopedStream(stream, sync_enter=False):
        memory_ops.copy(dest, src)


# ------------------------------------------------------------------ kernel load/store order

_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # kernel -> {alias groups: result}


def kernel_reads(kernel, args) -> dict:
    """``{id(array): ArrayReads}`` for the tapegrad arrays among a launch's ``args``.

    Args:
        kernel: the launched (specialized) ``Kernel``. args: its inputs + outputs as passed.
    """
    groups, first = [], {}
    for a in args:
        if isinstance(a, array):
            groups.append(first.setdefault(id(a), len(first)))
        else:
            groups.append(None)
    groups = tuple(groups)
    per_kernel = _CACHE.get(kernel)
    if per_kernel is None:
        per_kernel = {}
        try:
            _CACHE[kernel] = per_kernel
        except TypeError:      # not weak-referenceable: no cache
            pass
    found = per_kernel.get(groups)
    if found is None:
        ir = getattr(kernel, "ir", None)
        found = per_kernel[groups] = (_group_reads(ir, groups) if ir is not None
                                      else _declared_reads(kernel.arg_access, groups))
    out = {}
    for a, g in zip(args, groups):
        if g is not None:
            out[id(a)] = found.get(g, ArrayReads(False, False, False))
    return out


def _group_reads(ir, groups) -> dict:
    key = {id(p): g for p, g in zip(ir.params, groups) if g is not None}
    flags: dict = {}
    _walk(ir.body, key, set(), flags, (id(ir),))
    return {g: ArrayReads(*f) for g, f in flags.items()}


def _declared_reads(access, groups) -> dict:
    """Without an IR: the kernel's ``(reads, writes)`` per argument, reads taken as before
    any write (the in-place update ``x[i] = f(x[i])``)."""
    flags: dict = {}
    for (r, w), g in zip(access, groups):
        if g is not None:
            f = flags.setdefault(g, [False, False, False])
            f[0] |= bool(r)
            f[2] |= bool(w)
    return {g: ArrayReads(*f) for g, f in flags.items()}


def _mark(flags, g, index):
    f = flags.setdefault(g, [False, False, False])
    f[index] = True


def _walk(stmts, key, stored, flags, stack) -> None:
    """Walk ``stmts`` in program order. ``key``: id(Var) -> group of the arrays of interest;
    ``stored``: the groups a store may have reached so far (updated in place)."""
    for s in stmts:
        if isinstance(s, Assign):
            op = s.op
            for pos in op.reads:
                g = key.get(id(s.args[pos]))
                if g is not None:
                    _mark(flags, g, 1 if g in stored else 0)
            callee = op.callee
            if callee is not None:
                sub = {id(p): key[id(a)] for p, a in zip(callee.params, s.args) if id(a) in key}
                if sub and id(callee) in stack:      # recursion: assume the worst
                    for g in sub.values():
                        _mark(flags, g, 0)
                        _mark(flags, g, 1)
                        _mark(flags, g, 2)
                        stored.add(g)
                elif sub:
                    _walk(callee.body, sub, stored, flags, stack + (id(callee),))
            for pos in op.writes:
                g = key.get(id(s.args[pos]))
                if g is not None:
                    _mark(flags, g, 2)
                    stored.add(g)
        elif isinstance(s, If):
            branch = set(stored)
            _walk(s.body, key, stored, flags, stack)
            _walk(s.orelse, key, branch, flags, stack)
            stored |= branch
        elif isinstance(s, Loop):
            for _ in range(2):          # the second pass sees the first iteration's stores
                _walk(s.header, key, stored, flags, stack)
                _walk(s.body, key, stored, flags, stack)
