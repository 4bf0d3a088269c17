"""Parameter groups for fused optimizers: many arrays updated by one launch.

An optimizer step over N parameter arrays would cost N launches (Warp's ``warp.optim`` does
that). Here the arrays of one *group* — same element type, same device — are described by a
device-resident table of structs (one row per parameter: its flat value, gradient and state
arrays and its length) plus a chunk table, so that one launch updates every element of
every parameter. On CUDA the grid is ``(chunks, lanes)`` over chunks of ``CHUNK`` elements:
thread ``(c, k)`` updates elements ``chunk_start[c] + k``, ``+ lanes``, ``+ 2 lanes``... of chunk
``c`` (coalesced). On the CPU each chunk is a contiguous run of ``CPU_SPAN`` elements and the
grid ``(runs,)``: one grid thread per run (its kernel views the run's memory as arrays built over
its address, whose unit stride the compiler sees: the loop is vectorized as a flat launch's),
so a small parameter costs as many grid threads as it has runs (with 64 lanes per 4096-element
chunk, a 64-element parameter paid for 64 grid threads, 63 of them idle), and a large table
passes the generated loop's OpenMP threshold with the table kernel's ``cpu_grain``. (With
``FLAT_MIN`` set, parameters of that many elements or more get CPU launches of their own.)
The tables hold descriptors (pointers), not data: nothing is copied per step, and a step
records cleanly into a CUDA graph.

The step count lives on the device too (``ParamGroup.step``, advanced by a one-thread launch), so
bias corrections stay right when a captured step is replayed.
"""
import dataclasses
import functools

import numpy as np

from .. import types
from ..array import array
from ..creation import zeros
from ..lang import kernel
from ..launch import launch
from ..types import struct

__all__ = ["CHUNK", "CPU_SPAN", "FLAT_MIN", "RUN_GRAIN", "TEAM_MIN", "ParamGroup", "build_groups", "flat_view",
           "slot_struct", "state_dtype"]

CHUNK = 4096   # elements per CUDA chunk: large enough that the tables stay tiny, small enough to balance
CUDA_LANES = 256   # threads per chunk on CUDA (coalesced, 16 elements each)
# contiguous elements per CPU grid thread (a run) of the table launch: each run pays a setup
# (its table row, the run's arrays), small next to 256 elements
CPU_SPAN = 256
# the table kernel's cpu_grain (runs per OpenMP chunk: >= 1024 elements, as a flat launch's
# 1024 grid threads) when the table holds TEAM_MIN elements or more; a smaller table gets the
# default grain, under whose threshold (4096 grid threads) it runs on the calling thread
RUN_GRAIN = 4
TEAM_MIN = 4096
# None: every CPU parameter of a group steps in the one table launch, whose runs are vectorized
# as a launch of their own would be (one core, 10^6 float32 parameters in 4 arrays: SGD 333 us
# in one launch, 339 us in four; Adam 938 / 971 us), and whose team (cpu_grain RUN_GRAIN) takes
# chunks of runs across the parameters: one OpenMP region a step, not one per parameter. An int:
# CPU parameters of at least that many elements get a launch of their own (``flat`` kernels, one
# grid thread per element) as before (``benchmarks/optimizers.py --cpu-flat-min N`` compares)
FLAT_MIN = None


@kernel(enable_backward=False, key="tapegrad.optim.tick")
def _tick(step: array(dtype=types.int32)):
    step[0] = step[0] + 1


@functools.lru_cache(maxsize=None)
def slot_struct(optimizer: str, scalar, state, state_names: tuple) -> type:
    """The struct class of one table row: ``p`` and ``g`` (flat parameter and gradient of
    ``scalar``), one flat ``state`` array per name in ``state_names``, and the length ``n``."""
    fields = {"p": array(dtype=scalar), "g": array(dtype=scalar)}
    fields.update({name: array(dtype=state) for name in state_names})
    fields["n"] = types.int64
    return struct(type(f"{optimizer}Slot_{scalar.name}", (), {"__annotations__": fields}))


def state_dtype(scalar: types.ScalarType) -> types.ScalarType:
    """The dtype optimizer state is kept in for parameters of ``scalar`` (float16 -> float32)."""
    return types.float32 if scalar is types.float16 else scalar


def flat_view(a: array, what: str) -> array:
    """``a``'s memory as a 1-D array of its scalar type (vector/matrix components flattened).

    Raises:
        ValueError: ``a`` is not contiguous (a flat view would not cover its elements).
    """
    if not a.is_contiguous:
        raise ValueError(f"{what}: expected a contiguous array, got one of shape {a.shape} and byte strides "
                         f"{a.strides} (optimizers update parameters as flat memory; pass a contiguous copy)")
    n = a.size * max(1, int(np.prod(a.dtype.inner_shape, dtype=np.int64)))
    return array(ptr=a.ptr, dtype=a.dtype.scalar, shape=(n,), device=a.device)


@dataclasses.dataclass(frozen=True)
class ParamGroup:
    """Parameters of one element type on one device, updated together by one launch.

    Attributes:
        indices: positions of the group's parameters in the optimizer's parameter list.
        values: flat views of the parameters.
        states: per state name (``"m"``, ``"v"``, ``"b"``...), one flat state array per parameter.
        chunk_slot, chunk_start: the chunk table (device arrays): per chunk (CUDA: ``CHUNK``
            elements; CPU: a run of ``CPU_SPAN``), its parameter and first element.
        dim: the launch grid: ``(chunks, lanes)`` on CUDA, ``(runs,)`` on the CPU (no chunks:
            every parameter is empty or ``flat``).
        walk: the kernel's ``(stride, span, reach)`` arguments: thread ``(c, k)`` starts at
            ``chunk_start[c] + k * span``, steps by ``stride`` and stops ``reach`` elements on
            (or at the chunk's or parameter's end).
        step: one-element int32 device array, the number of steps taken.
        slot_type: the struct type of a table row.
        flat: positions (in ``values``) of the parameters updated by a launch of their own
            (CPU, at least ``FLAT_MIN`` elements when it is set); the chunk table leaves them out.
        cpu_grain: the CPU table kernel's ``cpu_grain`` (``RUN_GRAIN`` for a table of
            ``TEAM_MIN`` elements or more, else None: the default, one thread).
    """

    indices: tuple
    values: tuple
    states: dict
    chunk_slot: array
    chunk_start: array
    dim: tuple
    walk: tuple
    step: array
    slot_type: object
    device: object
    flat: tuple = ()
    cpu_grain: object = None

    def table(self, grads: tuple) -> array:
        """The device table of rows ``(value, grad, *states, n)`` for the given flat gradients."""
        st = self.slot_type._tg_struct
        rows = []
        for k, (v, g) in enumerate(zip(self.values, grads)):
            row = {"p": v, "g": g, "n": v.size}
            for name, arrs in self.states.items():
                row[name] = arrs[k]
            rows.append(bytes(st.to_ctype(row)))
        host = np.frombuffer(b"".join(rows), dtype=st.np_dtype)
        tab = zeros(len(rows), dtype=self.slot_type, device="cpu")
        tab.numpy()[:] = host
        return tab if self.device.is_cpu else tab.to(self.device)

    def tick(self) -> None:
        """Advance the device-side step count by one (one single-thread launch)."""
        launch(_tick, dim=1, inputs=[self.step], device=self.device, record_tape=False)


def _check_disjoint(params) -> None:
    """Raise when two parameters share memory (the same array twice, or overlapping views):
    their rows would update the same elements from different grid threads, at once when an
    OpenMP team or CUDA blocks run them (lost updates: a different result from run to run)."""
    by_device: dict = {}
    for i, p in enumerate(params):
        if p.ptr and p.nbytes:
            by_device.setdefault(str(p.device), []).append((p.ptr, p.ptr + p.nbytes, i))
    for spans in by_device.values():
        spans.sort()
        # sorted by start, any overlap shows between neighbours
        hit = next(((i, j) for (_, end, i), (start, _, j) in zip(spans, spans[1:]) if start < end), None)
        if hit is not None:
            i, j = sorted(hit)
            raise ValueError(f"params[{i}] and params[{j}]: expected parameters in separate memory, got two that "
                             f"share it (the same array twice, or overlapping views): their updates would race")


def build_groups(params, state_names, slot_type_for) -> list:
    """Split ``params`` into ``ParamGroup``s by (scalar type, device) and allocate zero state.

    Args:
        params: tapegrad arrays of a floating-point dtype.
        state_names: names of the per-element state arrays the optimizer keeps.
        slot_type_for: ``(param scalar, state scalar) -> struct class`` of a table row.

    Raises:
        TypeError: a parameter is not a tapegrad array or not floating point.
        ValueError: a parameter is not contiguous, or two share memory.
        RuntimeError: a parameter is read-only.
    """
    by_key: dict = {}
    for i, p in enumerate(params):
        if not isinstance(p, array):
            raise TypeError(f"params[{i}]: expected a tapegrad array, got {type(p).__name__}")
        if p.device is None or not p.dtype.scalar.is_float:
            raise TypeError(f"params[{i}]: expected a floating-point array with memory, got {p.dtype!r}")
        if p.readonly:    # the step kernels write it through its address (no launch-time read-only check)
            raise RuntimeError(f"params[{i}]: the optimizer writes its parameters, but this array is read-only")
        by_key.setdefault((p.dtype.scalar, p.device), []).append(i)
    _check_disjoint(params)
    groups = []
    for (scalar, device), idx in by_key.items():
        values = tuple(flat_view(params[i], f"params[{i}]") for i in idx)
        sdt = state_dtype(scalar)
        states = {name: tuple(zeros(v.size, dtype=sdt, device=device) for v in values) for name in state_names}
        flat = tuple(k for k, v in enumerate(values) if v.size >= FLAT_MIN) \
            if device.is_cpu and FLAT_MIN is not None else ()
        run = CPU_SPAN if device.is_cpu else CHUNK
        table = [k for k in range(len(values)) if k not in flat]
        counts = np.asarray([-(-values[k].size // run) for k in table], np.int64)
        cslot = np.repeat(np.asarray(table, np.int32), counts)
        # each parameter's run starts: 0, run, 2 run... (a running index minus its first run's)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        cstart = (np.arange(len(cslot), dtype=np.int64) - first) * run
        groups.append(ParamGroup(
            indices=tuple(idx), values=values, states=states,
            chunk_slot=array(cslot, dtype=types.int32, device=device),
            chunk_start=array(cstart, dtype=types.int64, device=device),
            dim=(len(cslot),) if device.is_cpu else (len(cslot), CUDA_LANES),
            walk=(1, CPU_SPAN, CPU_SPAN) if device.is_cpu else (CUDA_LANES, 1, CHUNK),
            step=zeros(1, dtype=types.int32, device=device),
            slot_type=slot_type_for(scalar, sdt), device=device, flat=flat,
            cpu_grain=RUN_GRAIN if device.is_cpu and sum(values[k].size for k in table) >= TEAM_MIN else None))
    return groups
