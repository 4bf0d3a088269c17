"""The Tape: records kernel launches (and copies, and Python callbacks) and replays their
adjoints in reverse.

Gradient-buffer ownership (SPEC R16): ``backward(grads={out: g})`` *copies* ``g`` into a
buffer (``out``'s own grad, or one the tape allocates once and reuses) and never adopts or
modifies ``g`` — so re-running backward with the same ``g`` gives the same result.
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from .array import array
from .hostops import ZeroPlan

__all__ = ["Tape", "TapeWarning", "LaunchRecord", "CopyRecord", "FuncRecord", "config"]


class TapeWarning(UserWarning):
    """A recorded launch overwrote data an earlier recorded launch read: the replayed adjoint
    would see the new values, so its gradient may be wrong."""


class _Config:
    """Global switches: ``tg.config.strict_tape = True`` turns TapeWarning into an error."""

    strict_tape = False
    verbose = False


config = _Config()


@dataclass(frozen=True)
class LaunchRecord:
    kernel: Any
    dim: tuple
    inputs: tuple
    outputs: tuple
    device: Any
    stream: Any
    block_dim: int
    max_blocks: int
    index: int


@dataclass(frozen=True)
class CopyRecord:
    dest: array
    src: array
    dest_offset: int
    src_offset: int
    count: int
    index: int


@dataclass(frozen=True)
class FuncRecord:
    backward: Callable[[], None]
    arrays: tuple
    index: int


_tls = threading.local()


def _active_tape():
    return getattr(_tls, "tape", None)


def _record_copy(dest, src, dest_offset, src_offset, count):
    tape = _active_tape()
    if tape is not None:
        tape._check_write(dest, f"copy into array of shape {dest.shape}", len(tape.records))
        tape._note_read(src, len(tape.records), "copy")
        tape.records.append(CopyRecord(dest, src, dest_offset, src_offset, count, len(tape.records)))


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
        if _active_tape() is not None:
            raise RuntimeError("Tape: another Tape is already recording on this thread (nested tapes are not supported)")
        _tls.tape = self
        return self

    def __exit__(self, *exc):
        _tls.tape = None
        return False

    def _label(self, rec_index):
        r = self.records[rec_index] if rec_index < len(self.records) else None
        if isinstance(r, LaunchRecord):
            return f"launch #{rec_index} of kernel '{r.kernel.key}'"
        if isinstance(r, CopyRecord):
            return f"copy #{rec_index}"
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

    def _record_launch(self, kernel, dim, inputs, outputs, device, stream, block_dim, max_blocks, access, args):
        index = len(self.records)
        for i, ((r, w), a) in enumerate(zip(access, args)):
            if not isinstance(a, array):
                continue
            name = kernel.arg_names[i]
            if w:
                self._check_write(a, f"kernel '{kernel.key}' writing '{name}'", index)
                if r and a.requires_grad:
                    self._warn(f"Tape: kernel '{kernel.key}' (launch #{index}) reads and writes array '{name}' "
                               "in place; the adjoint replays the forward with the overwritten values, "
                               "so gradients through it are wrong. Write to a separate output array.")
        for i, ((r, w), a) in enumerate(zip(access, args)):
            if isinstance(a, array) and (r or not w):
                self._note_read(a, index, f"{kernel.key}.{kernel.arg_names[i]}")
            elif isinstance(a, array):
                self._track(a)
        self.records.append(LaunchRecord(kernel, tuple(dim), tuple(inputs), tuple(outputs), device, stream,
                                         block_dim, max_blocks, index))

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
        self.records.append(FuncRecord(backward, arrays, len(self.records)))

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
        if _active_tape() is self:
            raise RuntimeError("Tape.backward: called while the tape is still recording (leave the 'with tape:' block first)")
        if loss is not None:
            if not isinstance(loss, array):
                raise TypeError(f"Tape.backward(loss=...): expected a tapegrad array, got {type(loss).__name__}")
            if loss.grad is None:
                raise RuntimeError("Tape.backward(loss=...): the loss array has no gradient; create it with requires_grad=True")
            loss.grad.fill_(1)
            self._track(loss)
        else:
            for a, g in grads.items():
                self._seed(a, g)
        for rec in reversed(self.records):
            if isinstance(rec, LaunchRecord):
                self._replay_launch(rec)
            elif isinstance(rec, CopyRecord):
                _copy_adjoint(rec)
            else:
                rec.backward()

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

    def _replay_launch(self, rec: LaunchRecord):
        from .launch import launch
        launch(rec.kernel, rec.dim, rec.inputs, rec.outputs, device=rec.device, stream=rec.stream,
               adjoint=True, record_tape=False, block_dim=rec.block_dim, max_blocks=rec.max_blocks)

    # ----------------------------------------------------------------------------- resets
    def zero(self) -> None:
        """Zero every gradient the tape touched (views of them stay valid)."""
        bufs = [a._grad if a._grad is not None else g for a, g in self.gradients.items()]
        bufs += self._owned.values()
        key = tuple(map(id, bufs))
        plan = self._zero_plan
        if plan is None or plan[0] != key:
            plan = self._zero_plan = (key, _zero_plan(bufs))
        plan[1][0].run()
        for buf in plan[1][1]:
            buf.zero_()
        for buf in bufs:
            buf._version += 1

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


def _copy_adjoint(rec: CopyRecord) -> None:
    """d(src) += d(dest) over the copied range; d(dest) is consumed (the old dest was overwritten)."""
    dest, src = rec.dest, rec.src
    if dest.grad is None or src.grad is None:
        if dest.grad is not None:
            _region(dest.grad, rec.dest_offset, rec.count, src.size).zero_()
        return
    dg = _region(dest.grad, rec.dest_offset, rec.count, src.size)
    sg = _region(src.grad, rec.src_offset, rec.count, dest.size)
    if dg.shape != sg.shape:
        dg, sg = dg.reshape((dg.size,)), sg.reshape((sg.size,))
    if sg.device.is_cpu and dg.device.is_cpu:
        sn = sg.numpy()
        sn += dg.numpy()
    else:
        from .storage import _cupy_view
        import cupy
        if sg.device is not dg.device:
            dg = dg.to(sg.device)
        with cupy.cuda.Device(sg.device.ordinal), sg.device.stream._cp:
            v = _cupy_view(sg)
            v += _cupy_view(dg)
    dg.zero_()


def _region(g: array, offset: int, count: int, other_size: int) -> array:
    if not (offset or count):
        return g
    count = count or min(g.size - offset, other_size)
    return g.flatten()[offset:offset + count]

