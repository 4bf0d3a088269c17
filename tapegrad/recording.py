"""Which Tape is recording on this thread, and the records of copies and Python callbacks.

The low half of recording: ``launch`` and ``copy`` ask ``active_tape()`` and hand the tape a
record they build themselves (``launch.LaunchRecord``, ``CopyRecord`` here); ``tapegrad.tape``
registers a tape with ``set_active_tape`` on ``with tape:``. Nothing here imports the tape, so
recording points one way: up from the operations to the tape that collects them.

Every record is a frozen dataclass with ``accesses()`` (which arrays it reads and writes, for
the tape's overwrite checks), ``label(index)`` (how messages name it) and ``replay()`` (its
adjoint, run by ``Tape.backward`` in reverse order).
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Callable

from . import memory_ops

__all__ = ["active_tape", "set_active_tape", "TAPES_ACTIVE_CELL", "Access", "CopyRecord", "FillRecord", "FuncRecord",
           "grad_region", "copy_adjoint"]

# The attribute of a recording tape through which the native launch helper records the common
# launch without calling into Python (``tapegrad.launch.fastlaunch``): a tuple ``(pending, live,
# roots)`` of the tape's list of pending records, its dict of live memory roots (``id(root)`` ->
# set of live keys) and its dict of the pending records' read roots (``id(root)`` -> True, the
# same meaning until the tape drains them): a write to either kind of root is not one the helper
# records. The helper appends ``(kernel, dim, args, n_inputs, device, stream, block_dim,
# max_blocks, differentiable)`` to ``pending`` (``dim`` as given: an int or a tuple; ``args`` the
# inputs then the outputs; the tape makes the ``LaunchRecord`` when next read) and sets
# ``roots[id(memory root)] = True`` for each array whose values the launch's adjoint reads.
PENDING_FIELD = "_native_pending"


class _Local(threading.local):
    tape = None   # a class default: reading it on a thread that never set one raises nothing


_tls = _Local()
# the thread-local whose ``tape`` attribute is active_tape()'s answer: the native launch helper
# reads it at every launch without the Python call
THREAD_STATE = _tls

# Threads whose tape is set, counted by set_active_tape under a lock (a lost update could read 0
# while a tape records: its launches would go unrecorded). While it is 0 no thread records, and
# launch's hot path (Python and native) skips the thread-local read, which costs several dict
# lookups. A thread that ends inside ``with tape:`` leaves it one too high: only slower.
tapes_active = 0
# the same count where the native launch helper reads it with one load (written with tapes_active)
TAPES_ACTIVE_CELL = ctypes.c_long(0)
_count_lock = threading.Lock()


def active_tape():
    """The Tape recording on this thread, or None."""
    if not tapes_active:
        return None
    return _tls.tape   # a class default: no AttributeError raised and caught inside getattr


def set_active_tape(tape) -> None:
    """Make ``tape`` (or None) the recording tape of this thread (``Tape.__enter__``/``__exit__``)."""
    global tapes_active
    old = _tls.tape
    _tls.tape = tape
    delta = (tape is not None) - (old is not None)
    if delta:   # after the thread-local is set: the count is never below the threads recording
        with _count_lock:
            tapes_active += delta
            TAPES_ACTIVE_CELL.value = tapes_active


@dataclass(frozen=True)
class Access:
    """One array a record touches.

    Attributes:
        array: the tapegrad array.
        name: the argument's name (``y``, ``dest``).
        reads: the record's forward reads it (its adjoint needs the values read).
        writes: the record's forward writes it.
        what: how an overwrite message names the write (``kernel 'k' writing 'y'``).
        label: how a later overwrite names this read (``k.x``, ``copy``).
        values: the record's adjoint needs the values it read (False for a copy, whose
            adjoint only moves gradients): an overwrite of them must be saved (``Tape``).
    """

    array: Any
    name: str
    reads: bool
    writes: bool
    what: str
    label: str
    values: bool = True


@dataclass(frozen=True)
class CopyRecord:
    """A recorded ``tg.copy(dest, src, dest_offset, src_offset, count)`` (built by ``copy``).

    Attributes:
        dest, src: the arrays. dest_offset, src_offset, count: the flat range (0: everything).
    """

    dest: Any
    src: Any
    dest_offset: int
    src_offset: int
    count: int

    def accesses(self) -> tuple:
        """The write of ``dest``, then the read of ``src`` (whose values the adjoint never needs)."""
        return (Access(self.dest, "dest", False, True, f"copy into array of shape {self.dest.shape}", "copy", False),
                Access(self.src, "src", True, False, "copy", "copy", False))

    def label(self, index: int) -> str:
        return f"copy #{index}"

    def replay(self) -> None:
        """d(src) += d(dest) over the copied range; d(dest) is consumed (the old dest was overwritten)."""
        dest, src = self.dest, self.src
        dgrad, sgrad = grad_region(dest), grad_region(src)
        if dgrad is None:
            return
        copy_adjoint(self, dgrad, sgrad)


@dataclass(frozen=True)
class FillRecord:
    """A recorded host write of constants: ``a.fill_(v)``, ``a.zero_()``, ``a[k] = v`` (built by
    the array methods while a tape records, for an array whose memory the tape has seen).

    Attributes:
        array: the array written (a view writes only its elements). what: the operation
            (``fill_``, ``zero_``), for messages.
    """

    array: Any
    what: str

    def accesses(self) -> tuple:
        """The write of ``array`` (it reads nothing)."""
        a = self.array
        return (Access(a, "a", False, True, f"{self.what} of an array of shape {a.shape}", self.what, False),)

    def label(self, index: int) -> str:
        return f"{self.what} #{index}"

    def replay(self) -> None:
        """The overwritten values no longer reach anything: their gradient is zeroed (kept with
        ``retain_grad``, as for a kernel's store)."""
        g = grad_region(self.array)
        if g is not None and not self.array.retain_grad:
            memory_ops.zero(g)


def copy_adjoint(rec, dgrad, sgrad) -> None:
    """The adjoint of copy record ``rec`` over gradient buffers ``dgrad`` (of ``rec.dest``) and
    ``sgrad`` (of ``rec.src``, or None): the copied range's ``d(src) += d(dest)``, then
    ``d(dest)`` zeroed there, since the overwritten destination values reach nothing (kept
    with ``rec.dest.retain_grad``, Warp's flag). ``Tape.backward`` calls it with the ``.grad``
    buffers, ``Tape.hvp`` also with their tangents.

    When the two ranges share memory (a copy within one array: ``tg.copy(a, a, dest_offset=1,
    src_offset=0, count=4)``), the destination's gradient is read into a copy first: adding
    into the source range would otherwise change it before it is zeroed (the gradient of the
    shifted elements was lost) or read again.
    """
    dest, src = rec.dest, rec.src
    dg = _region(dgrad, rec.dest_offset, rec.count, src.size)
    sg = None if sgrad is None else _region(sgrad, rec.src_offset, rec.count, dest.size)
    if sg is not None and dg.shape != sg.shape:
        dg, sg = dg.reshape((dg.size,)), sg.reshape((sg.size,))
    if sg is not None and memory_ops.share_bytes(dg, sg):
        moved = type(dg)(shape=dg.shape, dtype=dg.dtype, device=dg.device)
        memory_ops.copy(moved, dg)
        if not dest.retain_grad:
            memory_ops.zero(dg)
        memory_ops.accumulate(sg, moved)
        return
    if sg is not None:
        memory_ops.accumulate(sg, dg)
    if not dest.retain_grad:
        memory_ops.zero(dg)


def grad_region(a):
    """The gradient of array ``a``'s elements: ``a.grad``, or for a view made before its base had
    a gradient, the matching view of the gradient of the array owning the memory (same layout
    needed); None when there is none."""
    g = a.grad
    if g is not None:
        return g
    root = a
    while type(root.owner) is type(a):     # a view's owner is the array it views
        root = root.owner
    rg = root.grad
    if root is a or rg is None or rg.strides != root.strides or a.dtype.size != root.dtype.size \
            or getattr(a.dtype, "scalar", None) is None or a.dtype.scalar is not root.dtype.scalar:
        return None
    return type(a).wrap_memory(rg.ptr + (a.ptr - root.ptr), a.dtype, a.shape, a.strides, a.device, rg)


def _region(g, offset: int, count: int, other_size: int):
    if not (offset or count):
        return g
    count = count or min(g.size - offset, other_size)
    return g.flat_view(offset, count)


@dataclass(frozen=True)
class FuncRecord:
    """A Python callback recorded with ``Tape.record_func``.

    Attributes:
        backward: called with no arguments during ``Tape.backward``.
        arrays: the arrays whose gradients it touches (zeroed by ``Tape.zero()``).
    """

    backward: Callable[[], None]
    arrays: tuple

    def accesses(self) -> tuple:
        """Reads of ``arrays``: the callback may use their values, so a later recorded
        overwrite of one is saved and restored before the callback runs (``Tape``)."""
        return tuple(Access(a, f"arrays[{k}]", True, False, "record_func", "record_func")
                     for k, a in enumerate(self.arrays))

    def label(self, index: int) -> str:
        return f"record #{index}"

    def replay(self) -> None:
        self.backward()
