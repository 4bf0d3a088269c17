"""The Tape: records kernel launches (and copies, and Python callbacks) and replays their
adjoints in reverse.

Gradient-buffer ownership (SPEC R16): ``backward(grads={out: g})`` *copies* ``g`` into a
buffer (``out``'s own grad, or one the tape allocates once and reuses) and never adopts or
modifies ``g`` — so re-running backward with the same ``g`` gives the same result.
"""
from __future__ import annotations

import warnings
from typing import Callable

from . import recording
from .array import array
from .errors import TapeWarning
from .launch import LaunchRecord
from .memory_ops import ZeroPlan
from .recording import CopyRecord, FuncRecord

__all__ = ["Tape", "TapeWarning", "LaunchRecord", "CopyRecord", "FuncRecord", "config"]


class _Config:
    """Global switches: ``tg.config.strict_tape = True`` turns TapeWarning into an error."""

    strict_tape = False
    verbose = False


config = _Config()


class Tape:
    """Records launches inside ``with tape:`` and computes gradients with ``backward``."""

    def __init__(self):
        self.records: list = []
        self.gradients: dict = {}      # array -> its gradient array (every array touched)
        self._owned: dict = {}         # id(array) -> tape-owned seed buffer
        self._readers: dict = {}       # id(array) -> (record index, label) of the first recorded read
        self._loss = None
        self._zero_plan = None         # (ids of the buffers, (host memsets, other buffers))

    # -------------------------------------------------------------------------- recording
    def __enter__(self):
        if recording.active_tape() is not None:
            raise RuntimeError("Tape: another Tape is already recording on this thread (nested tapes are not "
                               "supported)")
        recording.set_active_tape(self)
        return self

    def __exit__(self, *exc):
        recording.set_active_tape(None)
        return False

    def _label(self, rec_index):
        if rec_index < len(self.records):
            return self.records[rec_index].label(rec_index)
        return f"record #{rec_index}"

    def _warn(self, msg):
        if config.strict_tape:
            raise RuntimeError(msg)
        warnings.warn(msg, TapeWarning, stacklevel=4)

    def _note_read(self, a, index, what):
        if isinstance(a, array):
            self._readers.setdefault(id(a), (index, what, a))
            self._track(a)

    def _check_write(self, a, what, index):
        if not isinstance(a, array):
            return
        prev = self._readers.get(id(a))
        if prev is not None and prev[0] < index:
            self._warn(f"Tape: {what} (record #{index}) overwrites an array that {self._label(prev[0])} "
                       f"read as '{prev[1]}'; its replayed adjoint would see the new values. "
                       "Write to a new array instead.")
        self._track(a)

    def _track(self, a):
        if a.requires_grad and a.grad is not None:
            self.gradients[a] = a.grad

    def record(self, rec) -> None:
        """Append ``rec`` (a ``LaunchRecord`` built by ``launch``, a ``CopyRecord`` built by
        ``copy``) after checking its accesses: a write to an array an earlier record read, or a
        read and write of one array that needs gradients, warns (``TapeWarning``)."""
        index = len(self.records)
        accesses = rec.accesses()
        for acc in accesses:
            if acc.writes:
                self._check_write(acc.array, acc.what, index)
                if acc.reads and acc.array.requires_grad:
                    self._warn(f"Tape: {rec.label(index)} reads and writes array '{acc.name}' in place; "
                               "the adjoint replays the forward with the overwritten values, "
                               "so gradients through it are wrong. Write to a separate output array.")
        for acc in accesses:
            if acc.reads:
                self._note_read(acc.array, index, acc.label)
        self.records.append(rec)

    def record_func(self, backward: Callable[[], None], arrays) -> None:
        """Record a Python callback run (in reverse order) during ``backward``.

        Args:
            backward: called with no arguments; it reads/accumulates the ``.grad`` of arrays.
            arrays: the arrays whose gradients it touches (zeroed by ``zero()``).
        Raises:
            TypeError: ``backward`` is not callable.
        """
        if not callable(backward):
            raise TypeError(f"record_func: backward must be callable, got {type(backward).__name__}")
        arrays = tuple(arrays)
        for a in arrays:
            if isinstance(a, array):
                self._track(a)
        self.records.append(FuncRecord(backward, arrays))

    # --------------------------------------------------------------------------- backward
    def backward(self, loss: array | None = None, grads: dict | None = None) -> None:
        """Replay the recorded adjoints in reverse.

        Args:
            loss: an array whose gradient is seeded with ones.
            grads: ``{array: gradient}``; each gradient is *copied* into ``array.grad`` (or a
                tape-owned buffer when the array has none); the caller's buffer is not modified.
        Raises:
            ValueError: neither or both of ``loss``/``grads``; shape mismatches.
            RuntimeError: ``loss`` has no gradient buffer.
        """
        if (loss is None) == (grads is None):
            raise ValueError("Tape.backward: pass exactly one of loss= or grads=")
        if recording.active_tape() is self:
            raise RuntimeError("Tape.backward: called while the tape is still recording (leave the 'with "
                               "tape:' block first)")
        if loss is not None:
            if not isinstance(loss, array):
                raise TypeError(f"Tape.backward(loss=...): expected a tapegrad array, got {type(loss).__name__}")
            if loss.grad is None:
                raise RuntimeError("Tape.backward(loss=...): the loss array has no gradient; create it with "
                                   "requires_grad=True")
            loss.grad.fill_(1)
            self._track(loss)
        else:
            for a, g in grads.items():
                self._seed(a, g)
        for rec in reversed(self.records):
            rec.replay()

    def _seed(self, a, g):
        if not isinstance(a, array):
            raise TypeError(f"Tape.backward(grads=...): keys must be tapegrad arrays, got {type(a).__name__}")
        if not isinstance(g, array):
            g = array(g, dtype=a.dtype, device=a.device)
        if g.shape != a.shape:
            raise ValueError(f"Tape.backward(grads=...): gradient shape {g.shape} does not match array shape {a.shape}")
        if a.grad is None:
            buf = self._owned.get(id(a))
            if buf is None:  # allocated once, reused by later backward passes
                buf = array(shape=a.shape, dtype=a.dtype, device=a.device)
                self._owned[id(a)] = buf
            a.grad = buf
        if a.grad is not g:
            a.grad.assign(g)
        self._track(a)

    # ----------------------------------------------------------------------------- resets
    def zero(self) -> None:
        """Zero every gradient the tape touched (views of them stay valid)."""
        bufs = [a.grad if a.grad is not None else g for a, g in self.gradients.items()]
        bufs += self._owned.values()
        key = tuple(map(id, bufs))
        plan = self._zero_plan
        if plan is None or plan[0] != key:
            plan = self._zero_plan = (key, _zero_plan(bufs))
        plan[1][0].run()
        for buf in plan[1][1]:
            buf.zero_()
        for buf in bufs:
            buf.version += 1

    def reset(self) -> None:
        """Zero the gradients and forget the records."""
        self.zero()
        self.records.clear()
        self._readers.clear()
        self.gradients.clear()

    def get_adjoint(self, a: array):
        return a.grad

    @property
    def launches(self) -> list:
        return [r for r in self.records if isinstance(r, LaunchRecord)]


def _zero_plan(bufs):
    """Split gradient buffers into raw host memsets (one ctypes call each, the common case on
    the CPU) and buffers that need ``zero_()`` (CUDA, strided, read-only); duplicates once."""
    host, other, seen = [], [], set()
    for b in bufs:
        if id(b) in seen:
            continue
        seen.add(id(b))
        if b.device.is_cpu and b.is_contiguous and not b.readonly and b.ptr:
            host.append((b.ptr, b.nbytes))
        else:
            other.append(b)
    return ZeroPlan(host), other
