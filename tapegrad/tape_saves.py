"""What a Tape keeps so that in-place kernels get exact gradients (issue 14, SPEC B12).

A launch's generated adjoint re-runs the forward reading the arrays' values *from memory*
(it stores nothing), so it needs the values each array had when the forward ran. A recorded
launch, copy or host fill that overwrites an array whose current values a differentiable record
still needs (the launch itself, reading before it writes; or an earlier record) makes the tape
take a copy of that array just before the overwrite (``snapshot``).

``Tape.backward`` never writes the forward's arrays (another thread may be reading them):
``Shadows`` gives each allocation that holds saved values a private buffer (a *shadow*),
filled from the forward's final values when backward starts; at each saving
record's place in the reverse order the saved copy is put into the shadow (``restore``), and
the adjoints of records reading that memory run on views of the shadow (``remap``), so every
adjoint sees what its forward saw while the forward's arrays keep their final values.

``kernel_reads`` says, per array argument of a launch, whether the kernel loads it before any
store to it (its adjoint needs the values from *before* the launch), after a store (the values
from *after* it: a kernel that writes then reads an array), or both (no single copy serves
both: the tape warns). That order is an IR fact of the kernel, computed in the language
(``tapegrad.lang.reads``: a dataflow over the lowered IR, stored in the direct cache's manifest
with the kernel's other facts, so a cached kernel lowers nothing); this module only groups the
arguments (arrays passed as several arguments are one, a struct's arrays share its group).

Views: ``memory_root`` and ``memory_range`` let the tape see that a write through one view of
an allocation overwrites values another view (or the base) still needs.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from . import cpu_capture, memory_ops, types
from .array import array
from .cuda import graph as cuda_graph
from .cuda import memory as cuda_memory
from .cuda.stream import ScopedStream
from .lang.reads import group_reads
from .storage import contiguous_strides
from .types import StructType

__all__ = ["SavedValues", "kernel_reads", "is_struct_instance",
           "struct_arrays", "memory_root", "memory_range", "overlaps", "drop_covered", "snapshot", "SaveArena",
           "restore", "record_arrays", "Shadow", "Shadows"]


@dataclass(frozen=True)
class SavedValues:
    """A copy of an array taken just before a record overwrote it (``Tape._saves`` keys these
    by the record's index).

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


def is_struct_instance(v) -> bool:
    """Whether ``v`` is an instance of a ``@tg.struct`` class."""
    return isinstance(getattr(type(v), "_tg_struct", None), StructType)


def struct_arrays(s) -> list:
    """The tapegrad arrays a struct instance holds, nested structs included."""
    return [v for v in type(s)._tg_struct.array_values(s) if isinstance(v, array)]


def memory_root(a):
    """The array owning the allocation ``a`` views (``a`` itself when it owns its memory or
    wraps foreign memory): views of one allocation share it."""
    owner = a.owner
    while isinstance(owner, array):
        a, owner = owner, owner.owner
    return a


def memory_range(a) -> tuple:
    """``(device, first byte, end byte)`` of the memory ``a``'s elements span."""
    lo = hi = a.ptr
    if not a.size:
        return a.device, lo, lo
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return a.device, lo, hi + a.dtype.size


def overlaps(r1, r2) -> bool:
    """Whether two ``memory_range`` spans share a byte (interleaved views count as sharing)."""
    return r1[0] is r2[0] and r1[1] < r2[2] and r2[1] < r1[2]


def drop_covered(saves: list) -> list:
    """``saves`` (of one record) without those whose elements another, restored at the same
    point, holds entirely (a view saved alongside its base).

    Holding means a contiguous save spanning the other's bytes, or a save of the same layout:
    a strided view's span has gaps (``a[::2]`` spans ``a[0:5]``'s bytes but not ``a[1]``),
    and dropping a save it only spans lost the elements in the gaps (a wrong gradient)."""
    if len(saves) < 2:
        return saves
    spans = [memory_range(s.array) for s in saves]

    def holds(j, i):
        t, r = spans[j], spans[i]
        if not (t[0] is r[0] and t[1] <= r[1] and r[2] <= t[2]):
            return False
        a, b = saves[j].array, saves[i].array
        return a.is_contiguous or (a.ptr, a.shape, a.strides) == (b.ptr, b.shape, b.strides)
    out = []
    for i, s in enumerate(saves):
        if not any(j != i and t.before_adjoint == s.before_adjoint and holds(j, i) and (not holds(i, j) or j < i)
                   for j, t in enumerate(saves)):
            out.append(s)
    return out


def snapshot(a, stream=None):
    """A new contiguous array holding ``a``'s current values (allocated and copied on
    ``stream``, so a stream-ordered allocation is ready where the copy runs)."""
    if stream is None:
        out = array(shape=a.shape, dtype=a.dtype, device=a.device)
        memory_ops.copy(out, a)
        return out
    with ScopedStream(stream, sync_enter=False):
        return snapshot(a)


class SaveArena:
    """Where a tape's saved copies live: carved from a few large buffers instead of one
    allocation per save (an in-place step saves a small array each time it runs: the
    allocation cost more than the copy). A buffer is a plain array of its device, allocated on
    the saving stream (as ``snapshot``'s); each saved copy is a contiguous view into it that
    keeps it alive. ``reset()`` starts carving again (host buffers reused): the tape calls it
    once it dropped its saves, so the next recording on the same tape allocates nothing on
    the CPU.
    """

    CHUNK = 1 << 16      # bytes per buffer (a larger save gets a buffer of its own size)
    ALIGN = 64

    def __init__(self):
        # the host's device, or (device, stream) on CUDA -> [[buffer, used bytes, its size], ...],
        # the open one last
        self._chunks: dict = {}
        self._spent: dict = {}     # the host's device -> full buffers, reused after reset()

    def snapshot(self, a, stream=None):
        """``snapshot(a, stream)``, the copy carved from this arena (the same values, dtype,
        shape; contiguous)."""
        nbytes = a.nbytes
        dev = a.device
        if not nbytes:
            return snapshot(a, stream)
        if dev.is_cpu:
            if cpu_capture.capturing():
                return snapshot(a, stream)     # a CPU graph capture owns the memory it records with
            s = None
            key = dev
        else:
            s = dev.stream if stream is None else stream
            if cuda_graph.is_capturing(stream=s):
                return snapshot(a, stream)     # graph-owned memory: the graph may outlive this tape
            key = (dev, s)                     # a buffer serves the stream it was allocated on
        size = -(-nbytes // self.ALIGN) * self.ALIGN
        chunks = self._chunks.get(key)
        if chunks is None or chunks[-1][1] + size > chunks[-1][2]:
            chunks = self._new_chunk(key, a, size, stream)
        entry = chunks[-1]
        buf, used = entry[0], entry[1]
        entry[1] = used + size
        at = buf.ptr + used
        # an in-place step saves at every recorded launch: a dense array is copied by one raw
        # call (the arena's memory is the tape's own, so memory_ops.copy's overlap and device
        # checks have nothing to find), on the stream the record ran on
        if a.is_contiguous:
            out = array.wrap_memory(at, a.dtype, a.shape, a.strides, dev, buf, False)
            if s is None:
                ctypes.memmove(at, a.ptr, nbytes)
            else:
                cuda_memory.memcpy(at, a.ptr, nbytes, s.cuda_stream)
            return out
        out = array.wrap_memory(at, a.dtype, a.shape, contiguous_strides(a.shape, a.dtype.size), dev, buf, False)
        restore(out, a, stream)
        return out

    def _new_chunk(self, key, a, size, stream) -> list:
        """Open a buffer of at least ``size`` bytes for ``key`` (a spent host buffer when one
        is large enough); returns the key's chunk list, the new one last."""
        spent = self._spent.get(key)
        if spent and spent[-1].nbytes >= size:
            buf = spent.pop()
        elif stream is None:
            buf = array(shape=(max(self.CHUNK, size),), dtype=types.uint8, device=a.device)
        else:
            with ScopedStream(stream, sync_enter=False):
                buf = array(shape=(max(self.CHUNK, size),), dtype=types.uint8, device=a.device)
        chunks = self._chunks.get(key)
        if chunks is None:
            chunks = self._chunks[key] = []
        chunks.append([buf, 0, buf.nbytes])
        return chunks

    def reset(self) -> None:
        """Carve from the start again (the copies handed out are no longer needed). Host
        buffers are kept for reuse; device buffers go back to their pool (a backward still
        queued on some stream may read them: the pool orders their reuse)."""
        for key, chunks in self._chunks.items():
            if not isinstance(key, tuple):     # a host buffer (keyed by its device alone)
                self._spent.setdefault(key, []).extend(sorted((c[0] for c in chunks), key=lambda b: b.nbytes))
        self._chunks = {}


def restore(dest, src, stream=None) -> None:
    """Copy ``src``'s values into ``dest`` on ``stream`` (no version bump: ``dest`` is a
    shadow's view, or an array a callback reads, whose forward values come back right after)."""
    if stream is None:
        memory_ops.copy(dest, src)
        return
    with ScopedStream(stream, sync_enter=False):
        memory_ops.copy(dest, src)


# ------------------------------------------------------------------ backward's private buffers

def record_arrays(rec) -> list:
    """The tapegrad arrays a record uses: a launch's array arguments and the arrays its struct
    arguments hold; the arrays of any other record's ``accesses()``."""
    if hasattr(rec, "kernel"):
        out = []
        for v in (*rec.inputs, *rec.outputs):
            if isinstance(v, array):
                out.append(v)
            elif is_struct_instance(v):
                out += struct_arrays(v)
        return out
    return [acc.array for acc in rec.accesses() if isinstance(acc.array, array)]


@dataclass(frozen=True, eq=False)
class Shadow:
    """``backward``'s private copy of one allocation that holds saved values.

    Attributes:
        root: the array owning the allocation. lo, hi: the bytes its elements span.
        buffer: the private copy (uint8, contiguous, same device). source: the allocation's
            bytes as a uint8 array (what ``begin`` copies from).
    """

    root: Any
    lo: int
    hi: int
    buffer: Any
    source: Any


class Shadows:
    """Where ``Tape.backward`` keeps the values its adjoints read instead of the forward's
    arrays: one private copy per allocation (memory root) an overwrite saved values of,
    allocated when the first save of it is recorded (so backward allocates nothing, also
    under a graph capture) and kept with the tape.

    Every view of an allocation lies in its root's byte range, so each array argument of a
    record maps into its root's copy (``remap``); ``indices`` says which records use such
    memory (kept up to date incrementally: a new allocation rescans the records).
    """

    def __init__(self):
        self._by_root: dict = {}     # id(root) -> Shadow
        self._streams: dict = {}     # id(root) -> stream of the last record that saved values there
        self._scanned = 0            # records already checked for ``_users``
        self._users: set = set()     # indices of the records using memory that has a shadow

    def __bool__(self) -> bool:
        return bool(self._by_root)

    @property
    def nbytes(self) -> int:
        return sum(sh.hi - sh.lo for sh in self._by_root.values())

    def add(self, saves) -> None:
        """Give the allocations of ``saves`` (``SavedValues`` of one record) a private copy
        (those that have none yet)."""
        for sv in saves:
            root = memory_root(sv.array)
            key = id(root)
            self._streams[key] = sv.stream
            if key in self._by_root:
                continue
            dev, lo, hi = memory_range(root)
            if hi <= lo:
                continue
            with ScopedStream(sv.stream, sync_enter=False):
                buf = array(shape=(hi - lo,), dtype=types.uint8, device=dev)
            src = array.wrap_memory(lo, types.uint8, (hi - lo,), (1,), dev, root)
            self._by_root[key] = Shadow(root, lo, hi, buf, src)
            self._scanned, self._users = 0, set()      # earlier records may use it: scan again

    def indices(self, records) -> set:
        """The indices of ``records`` with an argument in memory that has a private copy."""
        by_root = self._by_root
        for index in range(self._scanned, len(records)):
            if any(id(memory_root(a)) in by_root for a in record_arrays(records[index])):
                self._users.add(index)
        self._scanned = len(records)
        return self._users

    def begin(self) -> None:
        """Fill every private copy with the forward's current values (on the stream of the
        last record that saved values there)."""
        for key, sh in self._by_root.items():
            restore(sh.buffer, sh.source, self._streams[key])

    def remap(self, a):
        """``a``'s stand-in for the adjoints: the same view of its allocation's private copy
        (with ``a``'s gradient and flags), or ``a`` itself when its memory has none.

        Raises:
            RuntimeError: ``a`` reaches past its allocation's bytes (an array built over a
                pointer into it, which the tape cannot map).
        """
        sh = self._by_root.get(id(memory_root(a)))
        if sh is None:
            return a
        _, lo, hi = memory_range(a)
        if hi <= lo:
            return a
        if lo < sh.lo or hi > sh.hi:
            raise RuntimeError(f"Tape.backward: an array of shape {a.shape} reaches past the memory of the array "
                               f"owning it (shape {sh.root.shape}), whose values the tape saved; the adjoints "
                               f"cannot read its saved values. Make it a view of that array (slicing, reshape).")
        v = array.wrap_memory(sh.buffer.ptr + (a.ptr - sh.lo), a.dtype, a.shape, a.strides, a.device, sh.buffer,
                              a.readonly)
        d = v.__dict__
        for name in ("_grad", "_requires_grad", "_retain_grad"):
            if name in a.__dict__:
                d[name] = a.__dict__[name]
        return v


# ------------------------------------------------------------------ kernel load/store order

def kernel_reads(kernel, args) -> tuple:
    """Per argument of a launch, its ``lang.reads.ArrayReads`` (None for a value that is not a
    tapegrad array or a struct holding some); arguments that are the same array share one.
    The order is an IR fact (``lang.reads.group_reads``: stored with the kernel when each
    argument is its own, so a cached kernel lowers nothing); this groups the arguments.

    Args:
        kernel: the launched (specialized) ``Kernel``. args: its inputs + outputs as passed.
    """
    # arguments over one memory (an array and a view of it, two overlapping views) are one
    # group, as the same array passed twice: a load through one after a store through the
    # other reads the new values
    parent, spans, first = [], [], {}
    slots = []
    for a in args:
        if not (isinstance(a, array) or (is_struct_instance(a) and struct_arrays(a))):
            slots.append(None)
            continue
        k = first.get(id(a))
        if k is None:
            k = first[id(a)] = len(parent)
            parent.append(k)
            spans.append([memory_range(x) for x in ([a] if isinstance(a, array) else struct_arrays(a)) if x.size])
        slots.append(k)

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k
    for k in range(len(spans)):
        for m in range(k):
            if any(overlaps(r, t) for r in spans[k] for t in spans[m]):
                parent[find(k)] = find(m)
    number: dict = {}
    groups = [None if k is None else number.setdefault(find(k), len(number)) for k in slots]
    return group_reads(kernel, tuple(groups))
