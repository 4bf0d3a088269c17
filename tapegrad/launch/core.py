"""launch(): turn arguments into kernel-ABI values and call a compiled kernel.

Two paths. The native one (``fastlaunch``, a small C helper) packs the arguments and launches
in one C call from a per-kernel plan built once beside the packers; it takes the common
launches (forward and adjoint ones, ``Tape.backward``'s replays, and launches under a recording
tape, which it records through ``_record_launch`` before launching) and returns
``NotImplemented`` for anything else. The Python path below is the rest, and the source of
every error message: each kernel gets its per-parameter packers (``packers``) built once
(``_plan``), so a launch is one packer call per argument plus one ctypes call. A launch's
record on a tape (``LaunchRecord``) lives here too: its replay is an adjoint launch.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import cpu_capture, recording, tensortypes, types
from ..array import array
from ..config import config
from ..device import Device, get_device
from ..errors import KernelRuntimeError
from ..lang import facts
from ..lang.kernel import Kernel
from ..lang.reads import distinct_array_reads
from ..recording import PENDING_FIELD, THREAD_STATE, Access, active_tape
from ..storage import CheckedDesc
from . import fastlaunch
from .devices import cai_kind, forget_device_accessors, infer_device
from .grid import NARROW_LAUNCH_SIZE, check_grid, launch_bounds
from .packers import (
    ArrayCtype,
    adjoint_values,
    arg_label,
    check_adjoint_shapes,
    exact_adjoint_buffers,
    finish_adjoint_buffers,
    forget_adapters,
    grad_desc,
    make_packers,
)

__all__ = ["launch", "LaunchPlan", "LaunchRecord", "PreparedLaunch", "prepare_launch", "adjoint_descriptors",
           "register_tangent_launcher", "register_command_builder", "launch_plan"]


def _on_tensor_type(row):
    """A ``TensorType`` row was registered (``tensortypes.add_listener``): forget the per-type
    adapters and device accessors, and set up the native helper's layout cache of its classes."""
    numpy_row = row.covers(np.ndarray)
    forget_adapters(numpy_row)
    forget_device_accessors()
    if numpy_row:
        fastlaunch.numpy_off()   # the row decides numpy descriptors now: not the helper's cache
    if row.native_keys and row.grad is None:   # a gradient pointer is read per launch: not a cached layout
        for cls in row.classes:
            fastlaunch.register_foreign(cls, row.native_keys, row.native_ptr, row.current_stream)
    fastlaunch.forget_types()    # a CAI type the helper caches may be the row's now


tensortypes.add_listener(_on_tensor_type)


@dataclass(frozen=True)
class LaunchPlan:
    """What ``launch`` computes once per kernel (kept in ``Kernel.launch_plan``).

    Attributes:
        packers: one ``pack(value, device) -> ctypes value`` per parameter.
        written: indices of the parameters the forward writes (read-only and version checks).
        native: the native helper's plan of the same parameters (``tapegrad.launch.fastlaunch``), or
            None when the helper is not available.
        tid_checks: the kernel's unguarded ``tid()`` accesses of array parameters
            (``lang.facts.tid_accesses``): a grid past one of those arrays is refused.
        arrays: indices of the array parameters (adjoint buffers are checked against them).
    """

    packers: tuple
    written: tuple
    native: Any = None
    tid_checks: tuple = ()
    arrays: tuple = ()

def _plan(kernel) -> LaunchPlan:
    plan = kernel.launch_plan
    if plan is not None:
        return plan
    with kernel.build_lock:   # threads making the first launch together build the plan once
        plan = kernel.launch_plan
        if plan is not None:
            return plan
        packers = make_packers(kernel)
        written = tuple(i for i, (r, w) in enumerate(kernel.arg_access) if w)
        ts = kernel.arg_types
        arrays = tuple(i for i, t in enumerate(ts) if isinstance(t, types.ArrayType))
        checks = tuple(a for a in facts.tid_accesses(kernel) if isinstance(ts[a.param], types.ArrayType))
        # indexed arrays indexed by tid(): their indexed shapes bound the grid (checked in Python;
        # the native helper reads only array parameters' shapes, so such kernels go without it)
        indexed = tuple(a for a in facts.tid_accesses(kernel) if getattr(ts[a.param], "indexed", None) is not None)
        native = None if indexed else _native_plan(kernel, packers, written, checks)
        checks += indexed
        plan = kernel.launch_plan = LaunchPlan(packers, written, native, checks, arrays)
    return plan

def launch_plan(kernel) -> LaunchPlan:
    """The ``LaunchPlan`` of a (non-generic) kernel: its packers, built once (recorded launches,
    ``tapegrad.launch.command``, pack through them)."""
    return _plan(kernel)

# ------------------------------------------------------------------------ the native path

_fast = None   # the helper's launch function while launch() uses it (None: the Python path only)
_helper = None  # the helper's launch function once loaded (native plans are made while _fast is off too)


def _load_native():
    """Load the native helper once (``fastlaunch.load`` remembers why it cannot be); returns its
    launch function (None: the Python path alone)."""
    global _helper
    if _helper is None:
        _helper = fastlaunch.load(fastlaunch.NativeHooks(
            kernel_type=Kernel, array_type=array, desc_type=types.ArrayDesc, ctype_type=ArrayCtype,
            device_type=Device, capture_count=cpu_capture.OPEN_COUNT_CELL, active_tape=active_tape,
            get_device=get_device, infer_device=infer_device, max_size=NARROW_LAUNCH_SIZE,
            array_fields=(array.DESCRIPTOR_CACHE, array.GRAD_FIELD, array.LINK_FIELD, array.OWNER_FIELD),
            float_types=(np.float16, np.float32, np.float64),
            int_types=(np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64),
            record=_record_launch, cai_kind=cai_kind, checked_type=CheckedDesc,
            record_plan=_record_plan, tape_field=PENDING_FIELD, device_stream_field=Device.STREAM_FIELD,
            tape_state=THREAD_STATE, tape_count=recording.TAPES_ACTIVE_CELL))
        if _helper is not None:   # (loaded once: _helper is never reset)
            _listen_for_build_changes()
    return _helper

def _native_plan(kernel, packers, written, tid_checks=()):
    """The native helper's plan for ``kernel`` (None without the helper): each parameter's kind,
    and for arrays the dtype and ndim the C code checks (``tapegrad.launch.fastlaunch``)."""
    if _load_native() is None:   # (once per kernel while the helper is unavailable)
        return None
    if any(isinstance(t, types.ArrayType) and isinstance(t.dtype, types.StructType) and
           any(p[:1] == (facts.ELEMENT,) for p in facts.null_unsafe_fields(kernel, i) + facts.written_fields(kernel, i))
           for i, t in enumerate(kernel.arg_types)):
        return None   # its arrays of structs need their elements' array fields checked (the Python packer)
    kinds, ndims, dtypes, zero_sizes = [], [], [], []
    for t in kernel.arg_types:
        if isinstance(t, types.ArrayType):
            kinds.append("array")
            ndims.append(t.ndim)
            dtypes.append(t.dtype)
            zero_sizes.append(0)
            continue
        kinds.append(t.name if isinstance(t, types.ScalarType) and t.name in fastlaunch.KINDS else "py")
        ndims.append(0)
        dtypes.append(None)
        # an adjoint launch's zero adjoint of a scalar/vector/matrix is that many zero bytes
        # (zero_value); a struct's (its default instance there) is never read by the backward
        # entries (CPU: a local accumulates only scalar/vector/matrix adjoints into the slot;
        # CUDA: every non-array adjoint is a local), so zero bytes of its size serve too
        zero_sizes.append(ctypes.sizeof(t.ctype))
    w = set(written)
    return fastlaunch.new_plan(kinds, ndims, [i in w for i in range(len(kinds))], dtypes, packers, kernel.tid_ndim,
                               zero_sizes, tid_checks)

def _record_launch(kernel, dim, inputs, outputs, device, stream, block_dim, max_blocks):
    """Record a launch the native helper is about to make on the recording tape (as the Python
    path does; ``dim``: an int or a tuple of ints, checked by the helper)."""
    tape = active_tape()
    if tape is not None:
        tape.record(LaunchRecord(kernel, (dim,) if dim.__class__ is int else dim, tuple(inputs), tuple(outputs),
                                 device, stream, block_dim, max_blocks))

def _record_plan(kernel):
    """Per parameter, the flags the native helper records a launch of ``kernel`` from (1: an
    array parameter of ``distinct_array_reads``; 2, 4, 8: it is read before / after a write, and
    written), as ``Tape._record_plain_launch`` reads them; None for a kernel with a struct
    parameter (its launches are recorded through ``_record_launch``)."""
    params = distinct_array_reads(kernel)
    if params is None:
        return None
    flags = [0] * len(kernel.arg_types)
    for i, r in params:
        flags[i] = 1 | (2 if r.before else 0) | (4 if r.after else 0) | (8 if r.writes else 0)
    return tuple(flags)

def _listen_for_build_changes():
    # tg.config.mode and module options choose the build kernel.module_for(dev) returns: a change
    # makes the native plans forget the modules they launch
    from ..config import add_mode_listener
    from ..lang.options import add_options_listener
    add_mode_listener(fastlaunch.invalidate)
    add_options_listener(fastlaunch.invalidate)

def _iterable(x) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True

# tangent... record_cmd are passed by keyword, but not keyword-only: Python fills each missing
# keyword-only argument from a dict lookup at every call (6 lookups: a third of the call's cost
# on the H200 host)
def launch(kernel, dim, inputs=(), outputs=(), device=None, stream=None, adjoint=False,
           adj_inputs=None, adj_outputs=None, record_tape=True, block_dim=256, max_blocks=0,
           tangent=False, tan_inputs=None, tan_outputs=None, tan_adj_inputs=None, tan_adj_outputs=None,
           record_cmd=False):
    """Run ``kernel`` over a grid of ``dim`` threads.

    Args:
        kernel: a ``@tg.kernel`` function.
        dim: grid size, an int or a tuple of up to 4 ints.
        inputs, outputs: the kernel's arguments in order (inputs first). Arrays may be
            tapegrad arrays, ``return_ctype`` descriptors, or any object exposing
            ``__array_interface__`` (CPU) / ``__cuda_array_interface__`` (CUDA) — these carry
            no gradients.
        device: launch device (default: the first array argument's device, else current).
        stream: a tapegrad Stream (CUDA; default: the device's current stream).
        adjoint: run the generated adjoint instead of the forward.
        adj_inputs, adj_outputs: adjoint buffers per argument (None entries: the array's .grad).
        record_tape: record on the active Tape (forward launches only).
        block_dim: CUDA threads per block.
        max_blocks: cap on CUDA blocks (0: none).
        tangent: forward mode (docs/tape.md, "Forward mode and second order"): run the kernel's
            tangent code, which writes the outputs and, into ``tan_inputs``/``tan_outputs``
            (one entry per argument: an array of the argument's dtype and shape, a value for a
            float scalar/vector/matrix, None for a zero tangent), their tangents. With
            ``adjoint=True`` too: the tangent of the adjoint (second order), which accumulates
            the adjoints into ``adj_inputs``/``adj_outputs`` and their tangents into
            ``tan_adj_inputs``/``tan_adj_outputs``. Tangent launches are not recorded on a tape.
        record_cmd: launch nothing; return the launch packed into a ``tg.Launch`` to replay
            (``Launch.launch()``) with changed parameters (Warp's recorded launches). Pass
            ``tangent`` to ``record_cmd`` by keyword.
    Returns:
        None; with ``record_cmd=True``, the ``tg.Launch``.
    Raises:
        TypeError: wrong argument count, dtype, ndim or type (message names the argument).
        RuntimeError: device mismatch, or a write to a read-only array.
        KernelError: ``tangent=True`` with a construct without a forward-mode rule.
    """
    if record_cmd:
        return _command_builder[0](kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs,
                                   record_tape, block_dim, max_blocks)
    if tangent:
        _tangent_launcher[0](kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs,
                             tan_inputs, tan_outputs, tan_adj_inputs, tan_adj_outputs, block_dim, max_blocks)
        return
    fast = _fast
    if fast is not None:
        # the native helper launches it (tapegrad.launch.fastlaunch; two more arguments: the adjoint)
        if not adjoint:
            r = fast(kernel, dim, inputs, outputs, device, stream, record_tape, block_dim, max_blocks)
            if r is not None:
                _finish_native(r, kernel, dim, inputs, outputs, device, stream, record_tape, block_dim, max_blocks)
            return
        elif (adj_inputs is None and adj_outputs is None) or not _copies_buffers(kernel, inputs, outputs, adj_inputs,
                                                                                  adj_outputs):
            r = fast(kernel, dim, inputs, outputs, device, stream, False, block_dim, max_blocks, adj_inputs,
                     adj_outputs)
            if r is None or _native_error(r, True):
                return
        # explicit adjoint buffers of a kernel that writes: the Python path copies them
        # (packers.exact_adjoint_buffers)
    _launch_python(kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs, record_tape,
                   block_dim, max_blocks)

def _finish_native(result, kernel, dim, inputs, outputs, device, stream, record_tape, block_dim, max_blocks):
    """A forward launch after the helper returned ``result`` (not None; from ``launch`` or its
    native front): raise the kernel's runtime error, or run the Python path (NotImplemented)."""
    if not _native_error(result, False):
        _launch_python(kernel, dim, inputs, outputs, device, stream, False, None, None, record_tape, block_dim,
                       max_blocks)

def native_launches(enabled: bool) -> bool:
    """Let ``launch`` use the native helper or only its Python path (tests compare the two).

    Args:
        enabled: True for the helper (when it is loaded), False for the Python path alone.
    Returns:
        Whether ``launch`` used the helper before the call.
    """
    global _fast
    was = _fast is not None
    _fast = _load_native() if enabled else None
    fastlaunch.front_switch(_fast is not None)
    return was

def _native_error(result, adjoint) -> bool:
    """After a native launch that returned ``result`` other than None: False for NotImplemented
    (the Python path runs the launch); else ``result`` is the module launched, whose kernel
    recorded a runtime error: raise it (the launch ran, and was recorded: it must not run again).

    Raises:
        KernelRuntimeError: the launch met a zero slice step.
    """
    if result is NotImplemented:
        return False
    result.errors.check("backward" if adjoint else "forward")
    return True     # (the code was cleared by another thread meanwhile: nothing to raise)


def _copies_buffers(kernel, inputs, outputs, adj_inputs, adj_outputs) -> bool:
    """Whether an adjoint launch may give a written array an explicit buffer other than its
    ``.grad``, which ``packers.exact_adjoint_buffers`` (Python path) replaces by a copy; True
    for a kernel without a plan yet (a generic kernel)."""
    plan = kernel.launch_plan if isinstance(kernel, Kernel) else None
    if plan is None:
        return True
    try:
        n_in = len(inputs)
        for i in plan.written:
            src = adj_inputs if i < n_in else adj_outputs
            if src is None:
                continue
            g = src[i] if i < n_in else src[i - n_in]
            if g is None:
                continue
            a = inputs[i] if i < n_in else outputs[i - n_in]
            if a.__class__ is not array or g.__class__ is not array or (g is not a.grad and not a.retain_grad):
                return True
    except (TypeError, IndexError, KeyError):
        return False   # malformed lists: the helper passes them to the Python path, which raises
    return False

def _checked_call(kernel, dim, inputs, outputs, args, device, stream):
    """The checks every launch form makes before packing (the one owner of their wording): the
    kernel (a generic one specialized for ``args``), the stream, the argument count, the device,
    the grid. Returns (kernel, plan, device, dim, bounds)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"launch: expected a @tg.kernel function, got {type(kernel).__name__}")
    kernel.check_launchable("launch")
    if stream is not None:
        from ..cuda.stream import Stream
        if not isinstance(stream, Stream):
            raise TypeError(f"launch: stream must be a tapegrad Stream, got {type(stream).__name__}")
    plan = kernel.launch_plan
    if plan is None:
        if kernel.is_generic():   # typing.Any parameters: the specialization for these arguments
            kernel = kernel.specialize_for(args)
        plan = kernel.launch_plan or _plan(kernel)
    if len(args) != len(plan.packers):
        raise TypeError(f"launch: kernel '{kernel.key}' takes {len(plan.packers)} arguments "
                        f"({', '.join(kernel.arg_names)}), got {len(args)} "
                        f"({len(inputs)} inputs + {len(outputs)} outputs)")
    dev = infer_device(device, stream, args)
    dim, bounds = launch_bounds(dim)
    if kernel.tid_ndim > len(dim):   # i, j = tid() in a 1-D launch: the missing index would be 0
        raise ValueError(f"launch: kernel '{kernel.key}' unpacks tid() into {kernel.tid_ndim} indices, so dim needs "
                         f"{kernel.tid_ndim} entries (e.g. dim=(n, m)), got dim={dim}")
    if stream is not None and stream.device is not dev:
        raise RuntimeError(f"launch: stream is on {stream.device}, launch device is {dev}")
    return kernel, plan, dev, dim, bounds


def _launch_python(kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs, record_tape,
                   block_dim, max_blocks):
    """``launch``'s Python path: every launch the native helper does not take, and every error."""
    try:
        args = list(inputs) + list(outputs)
    except TypeError:
        bad = "inputs" if not _iterable(inputs) else "outputs"
        raise TypeError(f"launch: {bad} must be a list or tuple of the kernel's arguments, got "
                        f"{type(inputs if bad == 'inputs' else outputs).__name__}") from None
    kernel, plan, dev, dim, bounds = _checked_call(kernel, dim, inputs, outputs, args, device, stream)
    packers = plan.packers
    handle = (stream or dev.stream).cuda_stream if dev.is_cuda else 0
    vals = [pack(a, dev) for pack, a in zip(packers, args)]
    written = plan.written
    scratch = ()
    for i in written:
        if isinstance(vals[i], types.ArrayDesc) and vals[i].flags & 1:
            raise RuntimeError(f"{arg_label(kernel, i)}: the kernel writes this array, but it is read-only")
    if plan.tid_checks:   # every thread indexes these arrays by tid(), unguarded: the grid must fit
        check_grid(kernel, plan.tid_checks, dim, bounds.size, args, vals)
    if adjoint:
        if not kernel.enable_backward:
            raise RuntimeError(f"launch(adjoint=True): kernel '{kernel.key}' was built with enable_backward=False")
        refusal = kernel.adjoint_refusal()
        if refusal is not None:     # its gradient would miss memory it reaches by address
            raise RuntimeError(f"launch(adjoint=True): {refusal}")
        n_in = len(inputs)
        adj_given = None
        if adj_inputs is not None or adj_outputs is not None:
            ai = list(adj_inputs) if adj_inputs is not None else [None] * n_in
            ao = list(adj_outputs) if adj_outputs is not None else [None] * len(outputs)
            if len(ai) != n_in or len(ao) != len(outputs):
                raise TypeError(f"launch(adjoint=True): adj_inputs/adj_outputs must have {n_in}/{len(outputs)} "
                                f"entries, got {len(ai)}/{len(ao)}")
            adj_given = ai + ao
        adj_vals = adjoint_values(kernel, args, adj_given, dev, vals)
        adj_descs = [grad_desc(g, pack, dev) for g, pack in zip(adj_vals, packers)]
        check_adjoint_shapes(kernel, plan.arrays, vals, adj_descs)
        if adj_given is not None and written:   # buffers given: the stores consume copies of them
            scratch = exact_adjoint_buffers(kernel, written, vals, adj_descs, dev,
                                            stream=stream if dev.is_cuda else None)
        vals = vals + adj_descs
    elif record_tape:
        tape = active_tape()
        if tape is not None:
            tape.record(LaunchRecord(kernel, tuple(dim), tuple(inputs), tuple(outputs), dev, stream, block_dim,
                                     max_blocks))
    argv = _argv_type(len(vals))(*[ctypes.addressof(v) for v in vals])
    if cpu_capture.open_count and dev.is_cpu and cpu_capture.capturing():
        # a CPU graph capture records the launch (the packed values and arguments stay alive
        # with the graph) and runs it at each replay
        mod = kernel.module_for(dev) if bounds.size <= NARROW_LAUNCH_SIZE else kernel.module_for(dev, wide=True)
        cpu_capture.record(lambda: mod.launch(bounds, argv, adjoint, 0, block_dim, max_blocks), (vals, args))
    else:
        # past 2^31 - 1 threads: the kernel's wide build (int64 tid()), compiled on first use
        mod = kernel.module_for(dev) if bounds.size <= NARROW_LAUNCH_SIZE else kernel.module_for(dev, wide=True)
        try:
            mod.launch(bounds, argv, adjoint, handle, block_dim, max_blocks)
        except KernelRuntimeError:
            if not adjoint:    # it ran (with a zero-step slice empty): what it wrote moved on
                _bump_versions(written, args)
            raise
        if plan.native is not None and bounds.size <= NARROW_LAUNCH_SIZE:
            fastlaunch.register_module(plan.native, dev, mod, config.mode)   # later launches: native
    if scratch:
        finish_adjoint_buffers(scratch)
    if not adjoint:
        _bump_versions(written, args)


def _bump_versions(written, args) -> None:
    for i in written:
        if isinstance(args[i], array):
            args[i].version += 1


# forward mode (tapegrad.launch.tangent registers it): launch(tangent=True) calls it


# forward mode (tapegrad.launch.tangent registers it): launch(tangent=True) calls it
_tangent_launcher: list = [None]


# recorded launches (tapegrad.launch.command registers it): launch(record_cmd=True) calls it
_command_builder: list = [None]


def register_command_builder(fn) -> None:
    """Let ``launch(..., record_cmd=True)`` call ``fn`` (``tapegrad.launch.command`` registers it)."""
    _command_builder[0] = fn


def register_tangent_launcher(fn) -> None:
    """Let ``launch(..., tangent=True)`` call ``fn`` (``tapegrad.launch.tangent`` registers it)."""
    _tangent_launcher[0] = fn

@dataclass(frozen=True)
class PreparedLaunch:
    """A launch's checked and packed arguments (``prepare_launch``).

    Attributes:
        kernel: the kernel (a generic kernel's specialization). device: the launch device.
        dim: the grid. bounds: its ``launch_t``. packers: one packer per parameter.
        values: the packed arguments. stream_handle: the CUDA stream handle (0 on the CPU).
    """

    kernel: Any
    device: Any
    dim: tuple
    bounds: Any
    packers: tuple
    values: list
    stream_handle: int

def prepare_launch(kernel, dim, inputs, outputs, device, stream) -> PreparedLaunch:
    """Check and pack a launch's arguments as ``launch`` does (the other launch forms use it).

    Raises:
        TypeError, ValueError, RuntimeError: as ``launch``, naming the argument.
    """
    args = list(inputs) + list(outputs)
    kernel, plan, dev, dim, bounds = _checked_call(kernel, dim, inputs, outputs, args, device, stream)
    packers = plan.packers
    handle = (stream or dev.stream).cuda_stream if dev.is_cuda else 0
    vals = [pack(a, dev) for pack, a in zip(packers, args)]
    for i, (r, w) in enumerate(kernel.arg_access):
        if w and isinstance(vals[i], types.ArrayDesc) and vals[i].flags & 1:
            raise RuntimeError(f"{arg_label(kernel, i)}: the kernel writes this array, but it is read-only")
    return PreparedLaunch(kernel, dev, tuple(dim), bounds, tuple(packers), vals, handle)

def adjoint_descriptors(prep: PreparedLaunch, args, adj_args) -> list:
    """The adjoint arguments of a prepared launch: ``adj_args[i]`` when given, else each
    array's ``.grad`` (None: no gradient), else a zero value (as ``launch(adjoint=True)``)."""
    vals = adjoint_values(prep.kernel, args, adj_args, prep.device, prep.values)
    return [grad_desc(g, pack, prep.device) for g, pack in zip(vals, prep.packers)]

@dataclass(frozen=True, init=False)
class LaunchRecord:
    """A forward launch recorded on a Tape (built by ``launch`` when a tape is active).

    Attributes:
        kernel: the ``Kernel``. dim: the grid. inputs, outputs: the arguments as passed.
        device: the launch device. stream: the stream given to ``launch`` (None: current).
        block_dim, max_blocks: the CUDA launch shape.
    """

    kernel: Kernel
    dim: tuple
    inputs: tuple
    outputs: tuple
    device: Device
    stream: Any          # a tapegrad Stream, or None
    block_dim: int
    max_blocks: int

    def __init__(self, kernel, dim, inputs, outputs, device, stream, block_dim, max_blocks):
        # one is made per launch under a tape: one dict update instead of the frozen
        # dataclass's eight object.__setattr__ calls (2.9 -> 1 us on the CPU machine)
        self.__dict__.update(kernel=kernel, dim=dim, inputs=inputs, outputs=outputs, device=device, stream=stream,
                             block_dim=block_dim, max_blocks=max_blocks)

    def accesses(self) -> tuple:
        """The tapegrad arrays among the arguments, with the kernel's reads and writes of each
        (an array the kernel neither reads nor writes counts as read: its adjoint may be)."""
        k = self.kernel
        out = []
        for i, ((r, w), a) in enumerate(zip(k.arg_access, self.inputs + self.outputs)):
            if isinstance(a, array):
                name = k.arg_names[i]
                out.append(Access(a, name, r or not w, w, f"kernel '{k.key}' writing '{name}'", f"{k.key}.{name}"))
        return tuple(out)

    def label(self, index: int) -> str:
        return f"launch #{index} of kernel '{self.kernel.key}'"

    def replay(self) -> None:
        """Launch the kernel's adjoint with the recorded arguments (gradients: each array's .grad)."""
        # launch(..., adjoint=True) without its keyword handling: the native helper, else the Python path
        fast = _fast
        r = None if fast is None else fast(self.kernel, self.dim, self.inputs, self.outputs, self.device, self.stream,
                                           False, self.block_dim, self.max_blocks, None, None)
        if fast is None or (r is not None and not _native_error(r, True)):
            _launch_python(self.kernel, self.dim, self.inputs, self.outputs, self.device, self.stream, True, None,
                           None, False, self.block_dim, self.max_blocks)

_ARGV: dict = {}

def _argv_type(n):
    t = _ARGV.get(n)
    if t is None:
        t = _ARGV[n] = ctypes.c_void_p * n
    return t


# ------------------------------------------------------------------------ the native front
# launch() as the helper's builtin: the common forward launch binds its arguments and launches
# in C with no Python frame (a third of a small launch's instructions); every other call runs the
# function above (fastlaunch.front). Made last: it wraps the finished function. The helper is
# loaded here, at import, for it (built at install; else compiled once into the kernel cache).
if _load_native() is not None:
    _fast = _helper
    launch = fastlaunch.front(launch, _finish_native,
                              ("kernel", "dim", "inputs", "outputs", "device", "stream", "record_tape", "block_dim",
                               "max_blocks"),
                              ("adjoint", "tangent", "record_cmd"))
