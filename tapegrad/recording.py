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

import threading
from dataclasses import dataclass
from typing import Any, Callable

from . import memory_ops

__all__ = ["active_tape", "set_active_tape", "Access", "CopyRecord", "FuncRecord"]

class _Local(threading.local):
    tape = None   # a class default: reading it on a thread that never set one raises nothing


_tls = _Local()


def active_tape():
    """The Tape recording on this thread, or None."""
    return _tls.tape   # launch() asks at every launch: no AttributeError raised and caught inside getattr


def set_active_tape(tape) -> None:
    """Make ``tape`` (or None) the recording tape of this thread (``Tape.__enter__``/``__exit__``)."""
    _tls.tape = tape


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
        if dest.grad is None or src.grad is None:
            if dest.grad is not None:
                _region(dest.grad, self.dest_offset, self.count, src.size).zero_()
            return
        dg = _region(dest.grad, self.dest_offset, self.count, src.size)
        sg = _region(src.grad, self.src_offset, self.count, dest.size)
        if dg.shape != sg.shape:
            dg, sg = dg.reshape((dg.size,)), sg.reshape((sg.size,))
        memory_ops.accumulate(sg, dg)
        if not dest.retain_grad:   # Warp's flag: keep the gradient of the overwritten destination
            dg.zero_()


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
