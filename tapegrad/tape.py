"""The Tape: records kernel launches (and copies, and Python callbacks) and replays their
adjoints in reverse.

Gradient-buffer ownership (SPEC R16): ``backward(grads={out: g})`` *copies* ``g`` into a
buffer (``out``'s own grad, or one the tape allocates once and reuses) and never adopts or
modifies ``g`` — so re-running backward with the same ``g`` gives the same result.

In-place updates (SPEC B12): a recorded launch, copy or host fill that overwrites values a
differentiable record still needs is preceded by a copy of the array (``tape_saves``);
``backward`` puts those copies, in reverse order, into private buffers that the adjoints read
instead of the forward's arrays (``tape_saves.Shadows``), so each adjoint sees the values its
forward saw and the forward's arrays are never written (SPEC B21: another thread may read
them). ``Tape(save_overwritten=False)`` turns this off (and warns).
"""
from __future__ import annotations

import sys
import warnings
from typing import Callable

from . import recording, tape_forward, tape_graph, tape_saves, tensortypes
from .array import array
from .config import config
from .errors import TapeWarning
from .lang.reads import distinct_array_reads
from .launch import LaunchRecord
from .memory_ops import BufferZeroPlan
from .recording import CopyRecord, FillRecord, FuncRecord
from .tape_saves import is_struct_instance, struct_arrays
from .types import ArrayType, StructType

__all__ = ["Tape", "TapeWarning", "LaunchRecord", "CopyRecord", "FillRecord", "FuncRecord", "config"]


class _Gradients(dict):
    """``Tape.gradients``: a dict that counts its changes, so ``Tape.zero()`` can tell in O(1)
    that the buffers it zeroes are still the same ones (101 buffers: 43 us -> a few on an H200)."""

    changes = 0

    def __setitem__(self, k, v):
        self.changes += 1
        super().__setitem__(k, v)

    def __delitem__(self, k):
        self.changes += 1
        super().__delitem__(k)

    def pop(self, *args):
        self.changes += 1
        return super().pop(*args)

    def popitem(self):
        self.changes += 1
        return super().popitem()

    def clear(self):
        self.changes += 1
        super().clear()

    def update(self, *args, **kwargs):
        self.changes += 1
        super().update(*args, **kwargs)

    def setdefault(self, k, default=None):
        self.changes += 1
        return super().setdefault(k, default)

    def __ior__(self, other):
        self.changes += 1
        return super().__ior__(other)


_NO_PLAN = object()   # Tape._plans: kernel not seen yet


class Tape:
    """Records launches inside ``with tape:`` and computes gradients with ``backward``.

    Args:
        save_overwritten: keep a copy of each array a recorded launch or copy overwrites while
            a differentiable record still needs its values (an in-place kernel, or a write to
            an array an earlier launch read), so ``backward`` is exact (see docs/tape.md,
            "In-place updates"). None (default): ``tg.config.tape_save_overwritten`` (True).
            False saves nothing and warns (``TapeWarning``) that such gradients may be wrong.
            The ``save_overwritten`` attribute may be changed between records.
    Raises:
        TypeError: ``save_overwritten`` is not a bool or None.
    """

    def __init__(self, save_overwritten: bool | None = None):
        who = "Tape(save_overwritten=...)"
        if save_overwritten is None:
            save_overwritten, who = config.tape_save_overwritten, "tg.config.tape_save_overwritten"
        if not isinstance(save_overwritten, bool):
            raise TypeError(f"{who}: expected True or False (None: the config's default), got "
                            f"{type(save_overwritten).__name__}")
        self.save_overwritten = save_overwritten
        self._records: list = []
        # the launches the native helper recorded since the records were last read, as tuples
        # (recording.PENDING_FIELD): made into LaunchRecords by _drain when next needed
        self._pending: list = []
        self._gradients: dict = _Gradients()   # ``gradients``: array -> its gradient array (every array touched)
        # the arrays of plain launches recorded since ``gradients`` was last read: tracked
        # (``_track``) in one pass when it is next needed, not one by one at each record
        self._untracked: list = []
        self._owned: dict = {}         # id(array) -> tape-owned seed buffer
        # id(array) -> (record index, read label, array): a differentiable record read the
        # array's current values (its adjoint needs them), so overwriting them needs a save
        self._live: dict = {}
        self._live_roots: dict = {}    # id(allocation's root array) -> keys of _live over that memory
        # id(memory root) -> True of the reads the pending records' adjoints need (made live by _drain)
        self._pending_roots: dict = {}
        setattr(self, recording.PENDING_FIELD, self._native_state())
        self._saves: dict = {}         # record index -> [SavedValues] taken just before it ran
        self._shadows = tape_saves.Shadows()   # backward's private copies of the memory saves came from
        self._arena = tape_saves.SaveArena()   # where the saved copies are carved from
        self._remapped = None          # (array.grad_changes, views of the copies, launch records over them)
        self._loss = None
        self._zero_plan = None         # (signature, ids of the buffers, their BufferZeroPlan)
        self.scopes: list = []         # (record index, name or None for an end, metadata), as Warp
        self._structs: dict = {}       # id(struct instance) -> the instance (its arrays' grads are tracked)
        self._grad_roots: set = set()  # id(memory root) of every tracked array with a gradient (record_write)
        # id(array) -> (array, its tensor's in-place version, record index): arrays viewing a
        # framework tensor (from_torch...), checked unchanged at backward as torch checks its saves
        self._foreign: dict = {}
        # id(tensor) -> (tensor, its row, version, record index, memory span): framework tensors
        # passed directly to differentiable records that read them (no array stands for them:
        # checked unchanged at backward, and a recorded overwrite of their memory is refused)
        self._direct: dict = {}
        self._plans: dict = {}         # kernel -> its array parameters' reads (_record_plain_launch), or None

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

    def _live_add(self, key, entry) -> None:
        if key not in self._live:
            self._live[key] = entry
            self._live_roots.setdefault(id(tape_saves.memory_root(entry[2])), set()).add(key)

    def _live_pop(self, key) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            self._live_roots.get(id(tape_saves.memory_root(entry[2])), set()).discard(key)

    def _overlapping(self, a, reading) -> dict:
        """``{key: live entry}`` of the arrays whose needed values sit in memory ``a`` spans:
        ``a`` itself and views of the same allocation whose elements may overlap it, among the
        live ones and ``reading`` (the current record's reads: key -> (entry, id of its root)."""
        root = id(tape_saves.memory_root(a))
        cands = {k: self._live[k] for k in self._live_roots.get(root, ())}
        for k, (entry, entry_root) in reading.items():
            if k not in cands and entry_root == root:
                cands[k] = entry
        if not cands:
            return {}
        span = tape_saves.memory_range(a)
        return {k: e for k, e in cands.items()
                if k == id(a) or tape_saves.overlaps(span, tape_saves.memory_range(e[2]))}

    def _read_label(self, live) -> str:
        """How a warning names the read recorded in a ``_live`` entry (``k.x``, ``record_func``)."""
        index, label, _ = live
        kernel = getattr(self.records[index], "kernel", None) if index < len(self.records) else None
        return f"{kernel.key}.{label}" if kernel is not None else label

    def _warn(self, msg):
        if config.strict_tape:
            raise RuntimeError(msg)
        warnings.warn(msg, TapeWarning, stacklevel=_caller_level())

    @property
    def records(self) -> list:
        """Every record in order (``LaunchRecord``, ``CopyRecord``, ``FillRecord``,
        ``FuncRecord``); ``launches`` is the same list."""
        if self._pending:
            self._drain()
        return self._records

    def _drain(self) -> None:
        """Make the ``LaunchRecord``s of the launches the native helper recorded (as tuples, in
        ``_pending``) and finish their bookkeeping as ``_record_plain_launch`` does: the reads
        their adjoints need become live (the helper marked their memory roots pending, so the
        launches after them saw them), their arrays wait for gradient tracking."""
        items = self._pending[:]
        del self._pending[:len(items)]   # the same list (the helper holds it); a launch between: kept
        records, live, untracked = self._records, self._live, self._untracked
        for kernel, dim, args, n_in, device, stream, block_dim, max_blocks, diff in items:
            index = len(records)
            plan = self._plans.get(kernel, _NO_PLAN)
            if plan is _NO_PLAN:
                plan = self._kernel_plan(kernel)
            inputs, outputs = args[:n_in], args[n_in:]
            if dim.__class__ is int:
                dim = (dim,)
            arrays = [(args[p[0]], p) for p in plan if args[p[0]].__class__ is array]
            if diff:
                for a, (_, before, _, writes, name) in arrays:
                    if before and not writes and id(a) not in live:
                        self._live_add(id(a), (index, name, a))
            untracked.append(arrays)
            records.append(LaunchRecord(kernel, dim, inputs, outputs, device, stream, block_dim, max_blocks))
        if not self._pending:    # (a launch recorded meanwhile keeps every mark: conservative)
            self._pending_roots.clear()

    def _native_state(self) -> tuple:
        """What the native helper records the common launches into (``recording.PENDING_FIELD``):
        the pending list, the live memory roots, the pending roots, and the saver of in-place
        steps (a module function called with the tape: a bound method here would be a reference
        cycle, keeping a dropped tape's saved copies until the cycle collector runs)."""
        return self._pending, self._live_roots, self._pending_roots, _save_in_place

    def _kernel_plan(self, kernel):
        """``_plans[kernel]``: its array parameters' ``(index, before, after, writes, name)`` from
        ``distinct_array_reads`` (None: a struct parameter)."""
        params = distinct_array_reads(kernel)
        plan = self._plans[kernel] = None if params is None else tuple(
            (i, r.before, r.after, r.writes, r.name) for i, r in params)
        return plan

    @property
    def gradients(self) -> dict:
        """``{array: its gradient array}`` of every array a record touched (and of struct
        instances: a struct of their arrays' gradients), as Warp's ``tape.gradients``."""
        if self._pending:
            self._drain()
        if self._untracked:
            self._track_pending()
        return self._gradients

    @gradients.setter
    def gradients(self, value) -> None:
        if self._pending:
            self._drain()
        self._untracked = []
        self._gradients = value

    def _track_pending(self) -> None:
        """``_track`` the arrays of the plain launches recorded since the last call (in record
        order: ``gradients`` keeps the order the arrays were first touched)."""
        pending, self._untracked = self._untracked, []
        gradients, roots = self._gradients, self._grad_roots
        for arrays in pending:
            for a, _ in arrays:
                if a._link is not None:        # tracked when recorded (its gradient is the tensor's)
                    continue
                g = a._grad
                if g is not None and a._requires_grad and gradients.get(a) is not g:
                    gradients[a] = g
                    roots.add(id(tape_saves.memory_root(a)))

    def _track(self, a):
        if self._pending:
            self._drain()
        if self._untracked:
            self._track_pending()
        link = a._link
        if link is not None and id(a) not in self._foreign:
            self._foreign[id(a)] = (a, link.version(a), len(self.records))
        g = a.grad
        # set only when new: each set counts as a change of the table (Tape.zero's plan)
        if g is not None and a.requires_grad and self._gradients.get(a) is not g:
            self._gradients[a] = g
            self._grad_roots.add(id(tape_saves.memory_root(a)))

    def _note_direct(self, rec, index, direct) -> None:
        """Keep the framework tensors ``rec`` is given directly that its adjoint reads (a
        differentiable record), and refuse a write into memory such a tensor of an earlier
        record spans: no array stands for it, so the tape cannot save its values.

        Raises:
            RuntimeError: such a write, naming the argument and the conversion that fixes it.
        """
        reads = distinct_array_reads(rec.kernel)
        flags = dict(reads) if reads is not None else None
        spans = [(i, v, row, _direct_span(row, v)) for i, v, row in direct]
        for i, v, row, span in spans:
            r = flags.get(i) if flags is not None else None
            if flags is not None and (r is None or not r.writes):
                continue
            for pindex, name, a in self._live.values():    # arrays whose values an adjoint still needs
                if tape_saves.overlaps(span, tape_saves.memory_range(a)):
                    raise RuntimeError(
                        f"Tape: {rec.label(index)} writes the {row.framework} tensor passed directly as argument {i} "
                        f"('{rec.kernel.arg_names[i]}') into memory of array '{name}' that {self._label(pindex)} "
                        f"read; the tape cannot save values it overwrites through a tensor passed directly, so "
                        f"that adjoint would read the new values: pass tg.from_{row.framework}(t) instead")
            reader = self._direct_reader(span)
            if reader is not None:
                raise RuntimeError(
                    f"Tape: {rec.label(index)} writes the {row.framework} tensor passed directly as argument {i} "
                    f"('{rec.kernel.arg_names[i]}') into memory that {self._label(reader[0])} read from a "
                    f"{reader[1].framework} tensor passed directly; the tape keeps no copy of a tensor passed "
                    f"directly, so that adjoint would read the new values: pass tg.from_{row.framework}(t) to "
                    f"both launches (the tape then saves the overwritten values)")
        if not _differentiable(rec):
            return
        for i, v, row, span in spans:
            r = flags.get(i) if flags is not None else None
            if (flags is None or (r is not None and (r.before or r.after))) and id(v) not in self._direct:
                version = row.version(v) if row.version is not None else None
                self._direct[id(v)] = (v, row, version, index, span)
                # from here every record goes through record()'s checks of writes against these
                # tensors' memory (the native record knows only arrays): reset() restores it
                setattr(self, recording.PENDING_FIELD, None)

    def _check_direct_writes(self, rec, index, uses) -> None:
        """Refuse a record writing an array over memory that an earlier record read from a
        framework tensor passed directly (the tape has no copy of it to save).

        Raises:
            RuntimeError: naming the array and the earlier record.
        """
        for u in uses.values():
            if not u.writes:
                continue
            reader = self._direct_reader(tape_saves.memory_range(u.array))
            if reader is not None:
                raise RuntimeError(
                    f"Tape: {rec.label(index)} writes array '{u.name}' over memory that {self._label(reader[0])} "
                    f"read from a {reader[1].framework} tensor passed directly; the tape keeps no copy of a tensor "
                    f"passed directly, so that adjoint would read the new values: pass "
                    f"tg.from_{reader[1].framework}(t) to that launch instead (the tape then saves the values)")

    def _direct_reader(self, span):
        """``(record index, row)`` of a tensor passed directly to an earlier differentiable
        record whose memory overlaps ``span`` (a ``memory_range``), or None."""
        for _, prow, _, pindex, pspan in self._direct.values():
            if tape_saves.overlaps(span, pspan):
                return pindex, prow
        return None

    def _check_direct(self, refresh: bool = False) -> None:
        """Raise when a framework tensor passed directly to a differentiable record was modified
        in place since (its framework's version moved); ``refresh``: take the current versions
        (``zero()`` starts a new evaluation)."""
        for key, (v, row, version, index, span) in list(self._direct.items()):
            if version is None:
                continue
            now = row.version(v)
            if refresh:
                self._direct[key] = (v, row, now, index, span)
            elif now != version:
                raise RuntimeError(
                    f"Tape.backward: the {row.framework} tensor passed directly to {self._label(index)} was modified "
                    f"in place since (its version went from {version} to {now}); the adjoints would read the "
                    f"modified values. Record the launches again after modifying it, or modify a clone.")

    def record_write(self, a, what: str) -> None:
        """Record a host write of constants into ``a`` (``fill_``, ``zero_``; called by the array
        before it writes) when the tape has seen its memory: a recorded operation used an array
        with a gradient over the same allocation, or read values of it an adjoint still needs.
        A write to memory the tape never saw changes no gradient and is not recorded (an array
        created and filled inside ``with tape:``)."""
        if self._pending:
            self._drain()
        if self._untracked:
            self._track_pending()
        root = id(tape_saves.memory_root(a))
        if root in self._grad_roots or self._live_roots.get(root):
            self.record(FillRecord(a, what))

    def record(self, rec) -> None:
        """Append ``rec`` (a ``LaunchRecord`` built by ``launch`` *before* the kernel runs, a
        ``CopyRecord`` built by ``copy`` before it copies, a ``FuncRecord``).

        An array the record overwrites while its current values are still needed — the record
        reads them before writing (in place), or an earlier differentiable record read them,
        and the reader's adjoint uses the values read (``tape_saves.kernel_reads``) —
        is first copied (``save_overwritten``; ``backward`` restores it), or, with saving off,
        a ``TapeWarning`` says that gradients through it may be wrong. A kernel that reads an
        array both before and after writing it warns either way.

        Raises:
            RuntimeError: such a warning while ``tg.config.strict_tape`` is set.
        """
        if self._pending:
            self._drain()
        index = len(self._records)
        if rec.__class__ is LaunchRecord and rec.kernel.enable_backward:
            direct = _direct_tensors(rec, index)
            if direct:
                self._note_direct(rec, index, direct)
        if rec.__class__ is LaunchRecord and self._record_plain_launch(rec, index):
            return
        if isinstance(rec, LaunchRecord):       # no Access objects
            touched = [a for a in (*rec.inputs, *rec.outputs) if isinstance(a, array)]
            uses = _launch_uses(rec)
        else:
            accesses = rec.accesses()
            touched = [acc.array for acc in accesses if isinstance(acc.array, array)]
            uses = _uses(accesses)
        if self._direct:
            self._check_direct_writes(rec, index, uses)
        diff = _differentiable(rec)
        stream = getattr(rec, "stream", None)
        # the record's own reads count as live while its writes are checked (a launch reading
        # a and writing a view of it); the tape changes only once every check has passed
        reading = {key: ((index, u.label or u.name, u.array), id(tape_saves.memory_root(u.array)))
                   for key, u in uses.items() if diff and u.before and not u.writes}
        saves: dict = {}                     # id(array) -> SavedValues
        messages, stale, read_back = [], set(), {}
        for key, u in uses.items():
            if not u.writes:
                continue
            own = diff and u.before                     # the record reads the old values itself
            if own and u.after:
                messages.append(f"Tape: {rec.label(index)} reads array '{u.name}' both before and after "
                                "writing it; its adjoint sees the values from before the launch for both "
                                "reads, so gradients through the values read after the write may be wrong. "
                                "Write the new values to a separate array.")
            before = own or not (diff and u.after)
            needers = self._overlapping(u.array, reading)     # live arrays over the memory written
            if own and key not in needers:
                needers[key] = None
            for k, prev in needers.items():
                a = u.array if prev is None else prev[2]
                if k in saves:
                    continue
                if self.save_overwritten:
                    saves[k] = tape_saves.SavedValues(a, self._arena.snapshot(a, stream), before, stream)
                elif prev is None or (own and k == key):
                    messages.append(f"Tape: {rec.label(index)} reads and writes array '{u.name}' in place, "
                                    f"and this tape does not save overwritten values (save_overwritten=False): "
                                    f"its adjoint sees the overwritten values, so gradients through it may be "
                                    f"wrong. {_SAVE_HINT.format(nbytes=a.nbytes)}")
                else:
                    what = f"kernel '{rec.kernel.key}' writing '{u.name}'" if u.what is None else u.what
                    messages.append(f"Tape: {what} (record #{index}) overwrites {_array_words(k, key)} that "
                                    f"{self._label(prev[0])} read as '{self._read_label(prev)}', and this tape "
                                    f"does not save overwritten values (save_overwritten=False): that adjoint "
                                    f"sees the new values, so gradients through it may be wrong. "
                                    f"{_SAVE_HINT.format(nbytes=a.nbytes)}")
            stale.update(needers)                       # their current values are gone
            if diff and u.after:                        # the record read what it wrote
                read_back[key] = (index, u.label or u.name, u.array)
        for msg in messages:                            # strict_tape raises here, nothing changed yet
            self._warn(msg)
        for key, (entry, _) in reading.items():
            if key not in stale:
                self._live_add(key, entry)
        for key in stale:
            self._live_pop(key)
        for key, entry in read_back.items():
            self._live_add(key, entry)
        for a in touched:
            self._track(a)
        for v in (*getattr(rec, "inputs", ()), *getattr(rec, "outputs", ())):
            if is_struct_instance(v):
                self._track_struct(v)
        if saves:
            self._saves[index] = saves = tape_saves.drop_covered(list(saves.values()))
            self._shadows.add(saves)
        self._records.append(rec)

    def _record_plain_launch(self, rec, index) -> bool:
        """``record`` of the common launches, from the kernel's cached reads: a different plain
        array per array parameter, no struct, and nothing written that an earlier
        differentiable record still needs; an array the launch itself reads and then overwrites
        (an in-place step, ``x[i] = f(x[i])``) is saved as the general path saves it. Returns
        False, having changed nothing, for any other launch: ``record``'s general path decides
        it (and words its warnings).

        This runs once per recorded launch, so it is written for speed: the kernel's reads come
        from a per-tape dict, memory roots are looked up only for views, and the gradient
        tracking of ``_track`` is inlined."""
        if self._direct:
            return False                       # record() checks writes against tensors passed directly
        kernel = rec.kernel
        plan = self._plans.get(kernel, _NO_PLAN)
        if plan is _NO_PLAN:
            plan = self._kernel_plan(kernel)
        if plan is None:
            return False
        args = rec.inputs + rec.outputs
        arrays, diff = [], False
        for p in plan:
            a = args[p[0]]
            if a.__class__ is array:
                arrays.append((a, p))
                # a.grad without the property call (an array viewing a framework tensor asks it)
                if (a._grad if a._link is None else a.grad) is not None:
                    diff = True
            elif isinstance(a, array):         # a subclass
                return False
        if len(arrays) > 1 and len({id(a) for a, _ in arrays}) != len(arrays):
            return False                       # an array passed twice
        diff = diff and kernel.enable_backward      # as _differentiable
        live_roots = self._live_roots
        reading, written, own = [], None, None
        for a, (_, before, after, writes, name) in arrays:
            owner = a._owner
            root = id(a) if owner is None or owner.__class__ is not array and not isinstance(owner, array) \
                else id(tape_saves.memory_root(a))
            if writes:
                if diff and after:
                    return False               # reads back what it wrote
                if written is None:
                    written = {root}
                elif root in written:
                    return False               # writes two views of one allocation
                else:
                    written.add(root)
                needed = live_roots.get(root)  # memory recorded reads may still need
                if diff and before:            # in place: its own adjoint needs the old values
                    if not self.save_overwritten or (needed and (len(needed) > 1 or id(a) not in needed)):
                        return False
                    own = [a] if own is None else own + [a]
                elif needed:
                    return False
            elif diff and before:
                reading.append((a, name, root))
        if written is not None:
            for _, _, root in reading:
                if root in written:
                    return False               # writes a view of what it reads
        saves = None
        if own is not None:
            stream = rec.stream
            saves = [tape_saves.SavedValues(a, self._arena.snapshot(a, stream), True, stream) for a in own]
            for a in own:                      # the tape changes only from here on
                self._live_pop(id(a))
        live = self._live
        for a, name, root in reading:
            if id(a) not in live:
                live[id(a)] = (index, name, a)
                roots = live_roots.get(root)
                if roots is None:
                    live_roots[root] = {id(a)}
                else:
                    roots.add(id(a))
        for a, _ in arrays:
            if a._link is not None:            # a framework tensor's version is noted now
                self._track(a)
        self._untracked.append(arrays)         # the gradients: tracked when next needed
        if saves is not None:
            self._saves[index] = saves
            self._shadows.add(saves)
        self._records.append(rec)
        return True

    @property
    def saved_bytes(self) -> int:
        """Bytes the tape holds for in-place updates: the saved copies of overwritten arrays
        plus ``backward``'s private copy of each allocation they came from (allocated with its
        first saved copy; 0 when nothing was overwritten)."""
        return sum(s.nbytes for saves in self._saves.values() for s in saves) + self._shadows.nbytes

    def _track_struct(self, s) -> None:
        """Track the gradients of the arrays a struct argument holds (nested structs too) and
        keep ``gradients[s]``: a struct of the same type whose array fields are those grads."""
        self._structs[id(s)] = s
        for a in struct_arrays(s):
            self._track(a)
        self.gradients[s] = struct_gradients(s)

    def record_func(self, backward: Callable[[], None], arrays) -> None:
        """Record a Python callback run (in reverse order) during ``backward``.

        Args:
            backward: called with no arguments; it reads/accumulates the ``.grad`` of arrays.
            arrays: the arrays whose gradients it touches (zeroed by ``zero()``). They count
                as read by the callback: a later recorded overwrite of one is saved, so the
                callback sees the values they had when it was recorded.
        Raises:
            TypeError: ``backward`` is not callable, or an item of ``arrays`` is not an array.
            RuntimeError: an array has no gradient (``requires_grad=False``).
        """
        if not callable(backward):
            raise TypeError(f"record_func: backward must be callable, got {type(backward).__name__}")
        try:
            arrays = tuple(arrays)
        except TypeError:
            raise TypeError(f"record_func(arrays): expected a list of tapegrad arrays, got "
                            f"{type(arrays).__name__}") from None
        for k, a in enumerate(arrays):
            if not isinstance(a, array):
                raise TypeError(f"record_func(arrays): item {k} is a {type(a).__name__}, expected a tapegrad array")
            if a.grad is None:
                raise RuntimeError(f"record_func(arrays): item {k} (shape {a.shape}) has no gradient; create it "
                                   "with requires_grad=True")
        self.record(FuncRecord(backward, arrays))

    # --------------------------------------------------------------------------- backward
    def backward(self, loss: array | None = None, grads: dict | None = None) -> None:
        """Replay the recorded adjoints in reverse.

        With neither argument, the gradients already in the outputs' ``.grad`` are
        backpropagated (Warp's behaviour: set ``y.grad`` yourself, then ``tape.backward()``).
        Called inside the tape's ``with`` block (as Warp allows), the backward pass is not
        recorded and recording resumes after it.

        Args:
            loss: a one-element scalar array whose gradient is seeded with ones.
            grads: ``{array: gradient}``; each gradient is *copied* into ``array.grad`` (or a
                tape-owned buffer when the array has none); the caller's buffer is not modified.
                Given with ``loss``, both are seeded (the loss first), as in Warp.
        Raises:
            ValueError: a ``loss`` with more than one element or a
                vector/matrix dtype; shape mismatches.
            RuntimeError: ``loss`` has no gradient buffer; a framework
                tensor an array views (``from_torch``...) was modified in place since a record
                used it (as torch refuses).
        """
        if recording.active_tape() is self:
            # inside its `with tape:` block, as Warp allows: the backward pass itself (seeding,
            # adjoint launches) is not recorded; recording resumes after it
            recording.set_active_tape(None)
            try:
                return self.backward(loss, grads)
            finally:
                recording.set_active_tape(self)
        self._sync_foreign(check=True)
        self._check_direct()
        if loss is not None:
            if not isinstance(loss, array):
                raise TypeError(f"Tape.backward(loss=...): expected a tapegrad array, got {type(loss).__name__}")
            if loss.size != 1 or getattr(loss.dtype, "length", 1) != 1:
                raise ValueError(f"Tape.backward(loss=...): expected a scalar loss (one element of a scalar dtype), "
                                 f"got shape {loss.shape} of {loss.dtype!r}; pass grads={{y: dy}} for a "
                                 "non-scalar output")
            if loss.grad is None:
                raise RuntimeError("Tape.backward(loss=...): the loss array has no gradient; create it with "
                                   "requires_grad=True")
            loss.grad.fill_(1)
            self._track(loss)
        if grads is not None:     # with a loss too, as Warp: both seeds (a loss named in grads takes grads')
            if not isinstance(grads, dict):
                raise TypeError(f"Tape.backward(grads=...): expected a dict {{array: gradient}}, got "
                                f"{type(grads).__name__}")
            for a, g in grads.items():
                self._seed(a, g)
        self._replay()
        for st in self._structs.values():     # a field's grad may have been set since the launch
            self.gradients[st] = struct_gradients(st)

    def _sync_foreign(self, check: bool, refresh: bool = False) -> None:
        """Arrays viewing framework tensors: (``check``) raise when a tensor was modified in
        place since a record used it (or since the last ``zero()``, which ``refresh`` marks);
        re-read each one's gradient (the framework may have dropped or replaced it since)."""
        foreign = self._foreign
        for key, (a, version, index) in list(foreign.items()):
            if refresh:
                foreign[key] = (a, a._link.version(a), index)
            elif check and a._link.version(a) != version:
                raise RuntimeError(
                    f"Tape.backward: the {a._link.framework} tensor behind an array of shape {a.shape} was modified "
                    f"in place after {self._label(index)} used it (its version went from {version} to "
                    f"{a._link.version(a)}); the adjoints would read the modified values. Record the launches again "
                    "after modifying it, or modify a clone.")
            self._track(a)

    def _replay(self) -> None:
        """The adjoints in reverse order. Where values were saved, the adjoints read a private
        copy of that memory (the forward's final values, with each saved copy put back at its
        record's place) through views of it: the forward's arrays are never written."""
        if not self._saves:
            for rec in reversed(self.records):
                rec.replay()
            return
        plan = self._shadows
        plan.begin()
        # the views of the private copies (and the launch records over them) are reused while no
        # gradient was set anywhere (they carry their arrays' gradients) and no copy was added
        cache = self._remapped
        if cache is None or cache[0] != (array.grad_changes, plan.nbytes):
            cache = self._remapped = ((array.grad_changes, plan.nbytes), {}, {})
        remapped, launches = cache[1], cache[2]   # id(array) -> its view; index -> remapped record
        saves, records, indices = self._saves, self.records, plan.indices(self.records)
        for index in range(len(records) - 1, -1, -1):
            saved = saves.get(index, ())
            for s in saved:
                if s.before_adjoint:
                    tape_saves.restore(_stand_in(plan, s.array, remapped), s.values, s.stream)
            rec = records[index]
            if index not in indices:
                rec.replay()
            elif isinstance(rec, LaunchRecord):
                twin = launches.get(index)
                if twin is None:
                    twin = LaunchRecord(rec.kernel, rec.dim, tuple(_remap_arg(plan, v, remapped) for v in rec.inputs),
                                        tuple(_remap_arg(plan, v, remapped) for v in rec.outputs), rec.device,
                                        rec.stream, rec.block_dim, rec.max_blocks)
                    if not any(is_struct_instance(v) for v in (*rec.inputs, *rec.outputs)):
                        launches[index] = twin      # (struct fields may be reassigned: rebuilt each time)
                twin.replay()
            elif isinstance(rec, FuncRecord):
                _replay_callback(rec, plan, remapped)
            else:                 # copies and fills read no values
                rec.replay()
            for s in saved:
                if not s.before_adjoint:
                    tape_saves.restore(_stand_in(plan, s.array, remapped), s.values, s.stream)

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

    # ------------------------------------------------------------- forward mode (tape_forward)
    def jvp(self, tangents: dict) -> dict:
        """Forward mode over the records: the directional derivative of every array the tape
        wrote, given ``tangents`` ({array: tangent}; other arrays start with zero tangents).
        The arrays' values and gradients are unchanged (docs/tape.md, "Forward mode and
        second order").

        Returns:
            {array: tangent array} for every float array a recorded launch or copy wrote.
        Raises:
            TypeError, ValueError: a tangent of the wrong dtype, shape or device.
            RuntimeError: a record without a forward rule (a ``record_func`` callback), named.
            KernelError: a kernel construct without a forward-mode rule, named with its line.
        """
        return tape_forward.jvp(self, tangents)

    def hvp(self, loss: array, vectors: dict) -> dict:
        """Hessian-vector products of a one-element ``loss`` (forward over reverse): for
        ``vectors`` {array: v}, {array: H v}. Gradients and values are unchanged.

        Raises:
            ValueError: ``loss`` is not one element of a float dtype. Otherwise as ``jvp``.
        """
        return tape_forward.hvp(self, loss, vectors)

    # ----------------------------------------------------------------------------- resets
    def zero(self) -> None:
        """Zero every gradient the tape touched, those of arrays held in struct arguments
        included (views of them stay valid).

        ``zero()`` also starts a new evaluation of the recorded launches (Warp's replay idiom:
        ``tape.zero(); tape.backward(...)`` after an optimizer step and a fresh forward): framework
        tensors modified in place before it count as the values the next ``backward`` evaluates
        the adjoints at, as tapegrad's own arrays do. A modification after ``zero()`` (or after
        the record, without a ``zero()``) still makes ``backward`` raise."""
        self._sync_foreign(check=False, refresh=True)
        self._check_direct(refresh=True)
        g = self.gradients
        # what decides the buffers, cheaply: no gradient set anywhere, no entry of the table
        # changed, no seed buffer added (struct fields can change unseen: then recomputed)
        sig = (array.grad_changes, id(g), g.changes, len(self._owned)) \
            if type(g) is _Gradients and not self._structs else None
        plan = self._zero_plan
        if plan is None or sig is None or plan[0] != sig:
            bufs = [v if (ag := a.grad) is None else ag for a, v in g.items() if a.__class__ is array or
                    isinstance(a, array)]
            for st in self._structs.values():      # arrays held in struct arguments (nested too)
                bufs += [a.grad for a in struct_arrays(st) if a.grad is not None]
            bufs += self._owned.values()
            key = tuple(map(id, bufs))
            # host buffers: one native memset call; CUDA buffers: one launch per device
            zp = plan[2] if plan is not None and plan[1] == key else BufferZeroPlan(bufs)
            plan = self._zero_plan = (sig, key, zp)
        plan[2].run()
        for buf in plan[2].arrays:
            buf.version += 1

    def reset(self) -> None:
        """Zero the gradients and forget the records and scopes. ``gradients`` keeps its
        entries, zeroed (as Warp's does: ``tape.gradients[x]`` still works after a reset)."""
        self.zero()
        self.records.clear()
        self._live.clear()
        self._live_roots.clear()
        self._pending_roots.clear()
        self._saves.clear()
        self._arena.reset()               # the next recording carves its copies from the same buffers
        self._shadows = tape_saves.Shadows()
        self._remapped = None
        self._foreign.clear()
        self._direct.clear()
        setattr(self, recording.PENDING_FIELD, self._native_state())
        self.scopes.clear()

    # ----------------------------------------------------------------------------- scopes
    def record_scope_begin(self, scope_name: str, metadata: dict | None = None) -> None:
        """Open a named scope grouping the records that follow (``visualize`` draws it as a
        box; ``ScopedTimer`` opens one per timed block). Scopes nest.

        Raises:
            TypeError: ``scope_name`` is not a str, ``metadata`` not a dict.
        """
        if not isinstance(scope_name, str):
            raise TypeError(f"Tape.record_scope_begin(scope_name): expected a str, got {type(scope_name).__name__}")
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"Tape.record_scope_begin(metadata): expected None or a dict, got "
                            f"{type(metadata).__name__}")
        self.scopes.append((len(self.records), scope_name, {} if metadata is None else metadata))

    def record_scope_end(self, remove_scope_if_empty: bool = True) -> None:
        """Close the innermost open scope; a scope that recorded nothing is removed
        (``remove_scope_if_empty``).

        Raises:
            RuntimeError: no scope is open (an end without a begin).
        """
        depth = sum(1 if name is not None else -1 for _, name, _ in self.scopes)
        if depth <= 0:
            raise RuntimeError("Tape.record_scope_end: ended tape scope, but scope not present "
                               "(record_scope_end without a matching record_scope_begin)")
        last = self.scopes[-1]
        if remove_scope_if_empty and last[1] is not None and last[0] == len(self.records):
            self.scopes.pop()
        else:
            self.scopes.append((len(self.records), None, None))

    def visualize(self, filename: str | None = None, simplify_graph: bool = True,
                  hide_readonly_arrays: bool = False, array_labels: dict | None = None,
                  choose_longest_node_name: bool = True, ignore_graph_scopes: bool = False,
                  track_inputs=None, track_outputs=None, track_input_names=None,
                  track_output_names=None, graph_direction: str = "LR") -> str:
        """The recorded operations as GraphViz ``dot`` text (written to ``filename`` too).

        Records are boxes (kernel launches, copies, Python callbacks), arrays are ellipses
        labelled by argument name; an edge goes from an array to each record that reads it and
        from a record to each array it writes; scopes are clusters. Render with
        ``dot -Tsvg tape.dot -o tape.svg``.

        Args:
            filename: where to write the text (None: only return it).
            simplify_graph: draw a run of identical consecutive records (the same kernel on
                the same arrays, inside the same scopes) as one box labelled "repeated Nx".
            hide_readonly_arrays: leave out arrays no record writes.
            array_labels: ``{array: label}`` overriding the argument names.
            choose_longest_node_name: an array passed under several names is labelled by the
                longest (else by the first).
            ignore_graph_scopes: draw no scope clusters.
            track_inputs, track_outputs: arrays to highlight as inputs (green) / outputs (red),
                named by ``track_input_names`` / ``track_output_names``.
            graph_direction: GraphViz ``rankdir``: "LR", "RL", "TB" or "BT".
        Returns:
            The dot text.
        Raises:
            ValueError: a bad ``graph_direction``, or names and tracked arrays of different lengths.
            TypeError: ``array_labels`` is not a dict.
        """
        text = tape_graph.dot(self.records, self.scopes, hide_readonly_arrays=hide_readonly_arrays,
                              array_labels=array_labels, choose_longest=choose_longest_node_name,
                              ignore_scopes=ignore_graph_scopes, track_inputs=track_inputs,
                              track_outputs=track_outputs, track_input_names=track_input_names,
                              track_output_names=track_output_names, direction=graph_direction,
                              simplify=simplify_graph)
        if filename is not None:
            with open(filename, "w") as f:
                f.write(text)
        return text

    def get_adjoint(self, a):
        """The gradient of a kernel argument: ``a.grad`` for an array, a struct of gradients
        for a struct instance (see ``gradients``), None for other values."""
        if is_struct_instance(a):
            return struct_gradients(a)
        return a.grad if isinstance(a, array) else None

    @property
    def launches(self) -> list:
        """``records`` itself, under Warp's name: every record in order (launches, copies, fills,
        callbacks). Scope markers index it, so appending to it moves them as Warp's do."""
        return self.records


def _stand_in(plan, a, remapped):
    """``a``'s view of the private copy backward reads (cached in ``remapped``)."""
    v = remapped.get(id(a))
    if v is None:
        v = remapped[id(a)] = plan.remap(a)
    return v


def _remap_arg(plan, v, remapped):
    """A launch argument as its adjoint replay gets it: arrays (and the arrays inside structs)
    replaced by their views of the private copy."""
    if isinstance(v, array):
        return _stand_in(plan, v, remapped)
    if is_struct_instance(v):
        return _remap_struct(plan, v, remapped)
    return v


def _remap_struct(plan, s, remapped):
    cls = type(s)
    kwargs, changed = {}, False
    for fname, ftype in cls._tg_struct.fields:
        v = getattr(s, fname, None)
        if isinstance(ftype, (ArrayType, StructType)) and v is not None:
            w = _remap_arg(plan, v, remapped)
            changed |= w is not v
            v = w
        kwargs[fname] = v
    if not changed:
        return s
    out = cls()      # field by field: an indexed array's constructor takes (data, indices), not fields
    for fname, v in kwargs.items():
        setattr(out, fname, v)
    return out


def _replay_callback(rec, plan, remapped):
    """A ``record_func`` callback reads its arrays themselves, so they cannot be swapped for
    views of the private copy: their memory holds the recorded values while it runs, and the
    forward's final values right after (the one case where backward writes forward memory)."""
    finals = []
    try:
        for a in rec.arrays:
            v = _stand_in(plan, a, remapped)
            if v is not a:
                finals.append((a, tape_saves.snapshot(a)))
                tape_saves.restore(a, v)
        rec.replay()
    finally:
        for a, buf in reversed(finals):
            tape_saves.restore(a, buf)


def _save_in_place(tape, own, stream):
    """The native record's in-place step (``tapegrad.launch.fastlaunch``): copy the current values
    of ``own`` (arrays the launch reads and then overwrites, over memory no record needs) before
    it runs, as ``Tape._record_plain_launch`` does for the launch it records next; None, having
    changed nothing, when the tape does not save (the recorder then warns)."""
    if not tape.save_overwritten:
        return None
    saves = [tape_saves.SavedValues(a, tape._arena.snapshot(a, stream), True, stream) for a in own]
    # the index the pending record gets (Tape._drain appends the pending ones in order)
    tape._saves[len(tape._records) + len(tape._pending)] = saves
    tape._shadows.add(saves)
    return True


def _caller_level() -> int:
    """``warnings.warn``'s stacklevel naming the first caller outside tapegrad (the user's
    launch or copy, however many tapegrad frames, native ones not counted, lie between)."""
    level, f = 2, sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith("tapegrad."):
        level += 1
        f = f.f_back
    return level


_SAVE_HINT = ("Leave tg.Tape(save_overwritten=...) at its default (or set tg.config.tape_save_overwritten = "
              "True) to save a copy of the array ({nbytes} bytes) and get exact gradients.")


def _array_words(key, written) -> str:
    return "an array" if key == written else "memory (through another view of it)"


class _Use:
    """How one record uses one array (all the arguments it is passed as, together).

    ``name``: the argument's name; ``what``/``label``: how messages name the write and the
    read (None for a launch: built from the kernel's key when a warning needs them)."""

    __slots__ = ("array", "name", "what", "label", "before", "after", "writes")

    def __init__(self, a, name, what=None, label=None, before=False, after=False, writes=False):
        self.array, self.name, self.what, self.label = a, name, what, label
        self.before, self.after, self.writes = before, after, writes


def _launch_uses(rec) -> dict:
    """``{id(array): _Use}`` of a launch, from the kernel's load/store order (``kernel_reads``);
    the arrays a struct argument holds share the struct's."""
    args = rec.inputs + rec.outputs
    uses: dict = {}
    sources: dict = {}        # id(array) -> id of the argument (array or struct) it came with
    for a, r in zip(args, tape_saves.kernel_reads(rec.kernel, args)):
        if r is None:
            continue
        for b in (a,) if isinstance(a, array) else struct_arrays(a):
            u = uses.get(id(b))
            if u is None:
                uses[id(b)] = _Use(b, r.name, None, None, r.before, r.after, r.writes)
                sources[id(b)] = id(a)
            elif sources[id(b)] != id(a):
                # passed directly and inside a struct: a read through one may follow a write through the other
                cross = ((r.before or r.after) and u.writes) or ((u.before or u.after) and r.writes)
                u.before |= r.before or cross
                u.after |= r.after or cross
                u.writes |= r.writes
    return uses


def _uses(accesses) -> dict:
    """``{id(array): _Use}`` from a record's accesses (a read whose values the adjoint needs
    counts as "before": copies and callbacks read everything before they write)."""
    uses: dict = {}
    for acc in accesses:
        if not isinstance(acc.array, array):
            continue
        u = uses.get(id(acc.array))
        if u is None:
            u = uses[id(acc.array)] = _Use(acc.array, acc.name, acc.what, acc.label)
        if acc.writes:
            u.writes = True
            u.what = acc.what
        elif acc.reads:
            u.label = acc.label          # how a later overwrite names this read
            u.before |= acc.values
    return uses


def _direct_tensors(rec, index) -> list:
    """The framework tensors a launch record is given directly for array parameters, as
    ``(argument index, tensor, row)``; refuses one its framework differentiates (torch's
    ``requires_grad``) when the row has no gradient reader: the tape would record it, and
    ``backward`` would leave that tensor's gradient out without a word.

    Raises:
        RuntimeError: naming the argument and the conversion that carries the gradient.
    """
    kernel = rec.kernel
    out = []
    for i, v in enumerate((*rec.inputs, *rec.outputs)):
        if v.__class__ is array or v is None or v.__class__ in (int, float, bool):
            continue
        t = kernel.arg_types[i] if i < len(kernel.arg_types) else None
        if not isinstance(t, ArrayType) or isinstance(v, array):
            continue
        row = tensortypes.tensor_type_for(type(v))
        if row is None:
            continue
        if row.grad is None and row.requires_grad is not None and row.requires_grad(v):
            fw = row.framework
            raise RuntimeError(
                f"Tape: {rec.label(index)} is given a {fw} tensor that requires a gradient directly as argument "
                f"{i} ('{kernel.arg_names[i]}'), but a tensor passed directly carries no gradient, so backward "
                f"would leave its gradient out: pass tg.from_{fw}(t) (the array shares the tensor's memory and "
                f"its gradient), or a tensor that requires none (t.detach()) if no gradient is wanted")
        out.append((i, v, row))
    return out


def _direct_span(row, t) -> tuple:
    """``(device, first byte, end byte)`` of the memory a tensor passed directly spans."""
    lay = row.layout(t)
    lo = hi = int(row.data_ptr(t))
    size = lay.scalar.size
    for n, st in zip(lay.shape, lay.strides):
        if n == 0:
            return lay.device, lo, lo
        if st < 0:
            lo += (n - 1) * st * size
        else:
            hi += (n - 1) * st * size
    return lay.device, lo, hi + size


def _differentiable(rec) -> bool:
    """Whether ``rec``'s adjoint can produce a gradient, so the values it reads matter: a
    launch of a kernel with a backward and an array (or a struct holding one) that has a
    gradient; a callback always; a copy never (its adjoint only moves gradients)."""
    if isinstance(rec, (CopyRecord, FillRecord)):
        return False
    if not isinstance(rec, LaunchRecord):
        return True
    if not rec.kernel.enable_backward:      # no adjoint to feed
        return False
    for v in (*rec.inputs, *rec.outputs):
        if isinstance(v, array):
            if v.grad is not None:
                return True
        elif is_struct_instance(v) and any(a.grad is not None for a in struct_arrays(v)):
            return True
    return False


def struct_gradients(s):
    """A struct of ``s``'s type mirroring it with gradients: array fields hold the fields'
    ``.grad`` (or None), nested structs recurse, other fields are copied (Warp's
    ``tape.gradients[struct]``)."""
    cls = type(s)
    view = getattr(s, "gradient_view", None)
    if callable(view):       # an indexed array: the same indices over its data's gradient
        return view()
    kwargs = {}
    for fname, ftype in cls._tg_struct.fields:
        v = getattr(s, fname, None)
        if isinstance(ftype, ArrayType):
            kwargs[fname] = v.grad if isinstance(v, array) else None
        elif isinstance(ftype, StructType):
            kwargs[fname] = struct_gradients(v) if v is not None else None
        else:
            kwargs[fname] = v
    return cls(**kwargs)
