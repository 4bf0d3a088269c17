"""Recorded launches: ``tg.Launch``, a launch packed once and replayed with changed parameters.

``launch(..., record_cmd=True)`` (or ``Launch(kernel, device)``) checks and packs the arguments
through the launch's packers (the reference and the source of every error), keeps the packed
values and their ``void*`` array, and launches nothing. ``launch()`` then calls the kernel's
entry with that array: no argument is converted again. ``set_param_*`` re-packs the one
parameter it changes; ``set_dim`` rebuilds the bounds. What a launch must check that depends on
several parameters at once (read-only arrays the kernel writes, the unguarded-``tid()`` grid
check, adjoint buffer shapes) runs once at the first replay after a change.

Struct parameters are read when the launch runs (a struct instance is mutable and Warp's
recorded launches see its current fields), so each replay re-packs them; every other parameter
is packed when it is set.
"""
from __future__ import annotations

import ctypes

from .. import cpu_capture, types
from ..array import array
from ..config import config
from ..device import get_device
from ..errors import KernelRuntimeError
from ..lang.kernel import Kernel
from ..modules import CpuModule
from ..recording import active_tape
from .core import LaunchRecord, launch_plan, register_command_builder
from .devices import infer_device
from .grid import NARROW_LAUNCH_SIZE, check_grid, launch_bounds
from .packers import (
    arg_label,
    check_adjoint_shapes,
    check_null_argument,
    exact_adjoint_buffers,
    finish_adjoint_buffers,
    grad_desc,
    null_array_desc,
    zero_value,
)

__all__ = ["Launch"]

_ENTRY_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)   # void(const launch_t*, void**)


class Launch:
    """A kernel launch packed once, to be replayed quickly with some parameters changed (Warp's
    ``wp.Launch``).

    Made by ``tg.launch(..., record_cmd=True)`` (the arguments given) or directly (every
    parameter zero: arrays empty, scalars, vectors and matrices zero, structs default; the grid
    empty until ``set_dim``). ``launch()`` runs it; the ``set_*`` methods change it.

    Args:
        kernel: a ``@tg.kernel`` function (a generic kernel: one of its specializations).
        device: the launch device (a ``Device`` or a name; None: the current device).
        hooks, params, params_addr: Warp's native launch internals; tapegrad has no equivalent,
            so they must be None.
        bounds: the grid, an int or a tuple of ints (None: empty, as Warp's zero bounds).
        max_blocks: the cap on CUDA blocks (0: none).
        block_dim: CUDA threads per block (None: 256).
        adjoint: replay the kernel's adjoint: the parameters are the forward values followed by
            the adjoint ones (``set_param_*(..., adjoint=True)``); an array parameter's adjoint
            defaults to the array's ``.grad``.
        fwd_args, adj_args: the forward and adjoint values to pack (None: the zero defaults).
    Raises:
        TypeError: ``kernel`` is not a kernel, is generic, or a Warp-internal argument was given;
            a value a parameter cannot take (as ``tg.launch``, naming the argument).
        RuntimeError: an adjoint launch of a kernel built with ``enable_backward=False``.
    """

    def __init__(self, kernel, device=None, hooks=None, params=None, params_addr=None, bounds=None,
                 max_blocks: int = 0, block_dim: int | None = None, adjoint: bool = False, fwd_args=None,
                 adj_args=None):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"Launch: expected a @tg.kernel function, got {type(kernel).__name__}")
        kernel.check_launchable("Launch")
        for name, v in (("hooks", hooks), ("params", params), ("params_addr", params_addr)):
            if v is not None:
                raise TypeError(f"Launch: '{name}' (Warp's native launch data) is not supported by tapegrad; "
                                "record a launch with tg.launch(..., record_cmd=True) instead")
        if kernel.is_generic():
            if fwd_args is None:
                raise TypeError(f"Launch: kernel '{kernel.key}' is generic; pass fwd_args, or a specialization "
                                "(kernel.specialize(...))")
            kernel = kernel.specialize_for(list(fwd_args))
        if adjoint and not kernel.enable_backward:
            raise RuntimeError(f"Launch(adjoint=True): kernel '{kernel.key}' was built with enable_backward=False")
        if adjoint and kernel.adjoint_refusal() is not None:
            raise RuntimeError(f"Launch(adjoint=True): {kernel.adjoint_refusal()}")
        self.kernel = kernel
        self.device = get_device(device)
        self.adjoint = bool(adjoint)
        self.max_blocks = int(max_blocks or 0)
        self.block_dim = int(block_dim) if block_dim else 256
        self._record_tape = True
        self.stream = None   # the stream launch() uses when given none (None: the device's current one)
        plan = launch_plan(kernel)
        self._packers = plan.packers
        self._written = plan.written
        self._tid_checks = plan.tid_checks
        self._arrays = plan.arrays
        n = self._n = len(self._packers)
        ts = kernel.arg_types
        self._structs = tuple(i for i, t in enumerate(ts) if isinstance(t, types.StructType))
        dev = self.device
        # the zero defaults (Warp's): empty arrays, zero scalars/vectors/matrices, default structs
        self._args = [None if isinstance(t, types.ArrayType) else zero_value(t) for t in ts]
        # (a default struct's None array fields are checked when launch() packs it again)
        self._values = [types.ArrayDesc() if isinstance(t, types.ArrayType) else getattr(p, "unchecked", p)(a, dev)
                        for t, p, a in zip(ts, self._packers, self._args)]
        self._adj_set = [False] * n   # adjoint values given explicitly (else an array's .grad)
        self._null_given = [False] * n   # array parameters set to None (a null array) on purpose
        if self.adjoint:
            self._adj_args = [None if isinstance(t, types.ArrayType) else zero_value(t) for t in ts]
            self._values += [grad_desc(g, p, dev) for g, p in zip(self._adj_args, self._packers)]
        self._argv = (ctypes.c_void_p * len(self._values))(*[ctypes.addressof(v) for v in self._values])
        self._checked = False
        self._entry = None   # the CPU entry point of the checked replay (launch())
        self._errors = None   # its module's ErrorSlot
        self._entries: dict = {}   # id(module) -> (module, its entry point)
        self.set_dim(bounds if bounds is not None else (0,) * max(kernel.tid_ndim, 1))
        if fwd_args is not None:
            self.set_params(fwd_args)
        if adj_args is not None:
            if not self.adjoint:
                raise TypeError("Launch: adj_args given for a forward launch (adjoint=False)")
            for i, g in enumerate(adj_args):
                if g is not None:
                    self.set_param_at_index(i, g, adjoint=True)

    # ------------------------------------------------------------------------- what Warp reads

    @property
    def params(self) -> list:
        """The packed values as Warp lays them out: the bounds, the forward values, then (adjoint
        launches) the adjoint values."""
        return [self.bounds, *self._values]

    @property
    def fwd_args(self) -> list:
        """The forward values as set (an entry set from a ctypes value holds that value)."""
        return list(self._args)

    @property
    def adj_args(self) -> list | None:
        """The adjoint values as set (None for a forward launch)."""
        return list(self._adj_args) if self.adjoint else None

    @property
    def record_tape(self) -> bool:
        """Whether a forward replay is recorded on the active tape (as ``tg.launch``'s
        ``record_tape``; default True)."""
        return self._record_tape

    @record_tape.setter
    def record_tape(self, value: bool) -> None:
        self._record_tape = bool(value)
        self._checked = False
        self._entry = None

    # ------------------------------------------------------------------------------- setters

    def set_dim(self, dim) -> None:
        """Set the grid.

        Args:
            dim: an int or a tuple of up to 4 ints.
        Raises:
            TypeError, ValueError: as ``tg.launch``'s ``dim`` (a kernel unpacking ``tid()`` into more
                indices than ``dim`` has).
        """
        dims, bounds = launch_bounds(dim)
        k = self.kernel
        if k.tid_ndim > len(dims) and bounds.size:
            raise ValueError(f"Launch.set_dim: kernel '{k.key}' unpacks tid() into {k.tid_ndim} indices, so dim "
                             f"needs {k.tid_ndim} entries (e.g. dim=(n, m)), got dim={dims}")
        self.dim, self.bounds = tuple(dims), bounds
        self._module = None   # chosen at the next launch: a grid past 2^31 - 1 threads takes the wide build
        self._checked = False
        self._entry = None

    def set_param_at_index(self, index: int, value, adjoint: bool = False) -> None:
        """Set parameter ``index`` (its adjoint with ``adjoint=True``), packing ``value`` as
        ``tg.launch`` packs an argument.

        Raises:
            IndexError: no such parameter.
            TypeError: as ``tg.launch``: a value the parameter cannot take; a single number
                for a vector or matrix parameter is a ``LaunchArgumentError``.
            ValueError: as ``tg.launch``: a value out of the parameter's range or shape.
            RuntimeError: as ``tg.launch``: an array on another device.
        """
        i = self._index(index, adjoint)
        pack = self._packers[i]
        if adjoint:
            v = grad_desc(value, pack, self.device)
            self._adj_args[i] = value
            self._adj_set[i] = value is not None
            self._put(self._n + i, v)
        else:
            # None is Warp's null array, as in tg.launch (``if not a:`` in the kernel); an array
            # parameter never set, or None where the kernel would dereference it, is refused by
            # launch() (Warp code records a launch with None and sets the array later)
            t = self.kernel.arg_types[i]
            if value is None and type(t) is types.ArrayType:
                self._put(i, null_array_desc(t.ndim))
            else:
                self._put(i, pack(value, self.device))
            self._args[i] = value
            if i in self._arrays:
                self._null_given[i] = value is None
            if self.adjoint and not self._adj_set[i] and i in self._arrays:
                g = value.grad if isinstance(value, array) else None
                self._put(self._n + i, grad_desc(g, pack, self.device))

    def set_param_by_name(self, name: str, value, adjoint: bool = False) -> None:
        """Set the parameter called ``name`` (``set_param_at_index``).

        Raises:
            ValueError: the kernel has no parameter ``name``; else as ``set_param_at_index``.
        """
        self.set_param_at_index(self._name_index(name), value, adjoint)

    def set_params(self, values) -> None:
        """Set the first ``len(values)`` forward parameters, in order (``set_param_at_index``)."""
        for i, v in enumerate(values):
            self.set_param_at_index(i, v)

    def set_param_at_index_from_ctype(self, index: int, value, adjoint: bool = False) -> None:
        """Set parameter ``index`` from a value already in its kernel-ABI form: a ctypes value of
        the parameter's C type (an array's ``__ctype__()``, a struct's ``__ctype__()``), or a
        Python number for a scalar. Other values (a host vector) are packed as
        ``set_param_at_index`` packs them.

        Raises:
            IndexError: no such parameter. TypeError: a ctypes value of another C type.
        """
        i = self._index(index, adjoint)
        t = self.kernel.arg_types[i]
        ctype = types.ArrayDesc if isinstance(t, types.ArrayType) else t.ctype
        if isinstance(value, ctypes._SimpleCData) and not isinstance(value, ctype):
            value = value.value
        if isinstance(value, (ctypes.Structure, ctypes.Array, ctypes._SimpleCData)):
            if ctypes.sizeof(value) != ctypes.sizeof(ctype) or not isinstance(value, ctype) and \
                    not isinstance(t, types.ArrayType):
                raise TypeError(f"{arg_label(self.kernel, i)}: expected a ctypes {ctype.__name__}, got "
                                f"{type(value).__name__}")
            # a struct's ctype (or a raw descriptor) is launched as is: it is not re-packed per replay
            slot = self._n + i if adjoint else i
            self._put(slot, value)
            if adjoint:
                self._adj_args[i], self._adj_set[i] = value, True
            else:
                self._args[i] = value
                if i in self._arrays:    # a raw descriptor without data is a null array too
                    self._null_given[i] = isinstance(value, types.ArrayDesc) and not value.data
            return
        self.set_param_at_index(i, value, adjoint)

    def set_param_by_name_from_ctype(self, name: str, value, adjoint: bool = False) -> None:
        """``set_param_at_index_from_ctype`` by parameter name.

        Raises:
            ValueError: the kernel has no parameter ``name``.
        """
        self.set_param_at_index_from_ctype(self._name_index(name), value, adjoint)

    def set_params_from_ctypes(self, values) -> None:
        """Set the first ``len(values)`` forward parameters from ctypes values, in order."""
        for i, v in enumerate(values):
            self.set_param_at_index_from_ctype(i, v)

    # --------------------------------------------------------------------------------- launch

    def launch(self, stream=None) -> None:
        """Run the kernel (its adjoint for an adjoint launch) with the values set.

        A forward launch is recorded on the active tape as ``tg.launch`` records one.

        Args:
            stream: a tapegrad ``Stream`` on the launch device (CUDA; None: the device's current
                stream).
        Raises:
            RuntimeError: the kernel writes a read-only array; a stream on another device.
            ValueError: the grid overruns an array the kernel indexes by ``tid()`` unguarded; an
                adjoint buffer whose shape is not its array's.
        """
        entry = self._entry
        if entry is not None and stream is None and config.mode is self._mode and not cpu_capture.open_count:
            # the replay the object exists for: a checked CPU launch without structs, the entry
            # point called with the packed array as is
            if self._record and active_tape() is not None:
                self._record_on_tape(None)
            entry(self._bounds_ptr, self._argv)
            for a in self._bump:
                a.version += 1
            errors = self._errors
            if errors.flag[0]:       # the kernel met a zero slice step (modules.ErrorSlot)
                errors.check("backward" if self.adjoint else "forward")
            return
        dev = self.device
        if stream is None:
            stream = self.stream
        if stream is not None and stream.device is not dev:
            raise RuntimeError(f"Launch.launch: stream is on {stream.device}, launch device is {dev}")
        for i in self._structs:   # mutable instances: their current fields (Warp's recorded launches)
            a = self._args[i]
            if not isinstance(a, ctypes.Structure):
                self._put(i, self._packers[i](a, dev))
        if not self._checked:
            self._check()
        mod = self._module
        if mod is None:
            k = self.kernel
            mod = self._module = k.module_for(dev) if self.bounds.size <= NARROW_LAUNCH_SIZE else \
                k.module_for(dev, wide=True)
        argv, bounds, vals = self._argv, self.bounds, self._values
        scratch = ()
        if self.adjoint and self._written:
            # explicit buffers of written arrays: the stores consume copies (as tg.launch)
            fwd, adj = list(vals[:self._n]), list(vals[self._n:])
            scratch = exact_adjoint_buffers(self.kernel, self._written, fwd, adj, dev,
                                            stream=stream if dev.is_cuda else None)
            if scratch:
                vals = fwd + adj
                argv = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        if self._record and active_tape() is not None:
            self._record_on_tape(stream)
        if cpu_capture.open_count and dev.is_cpu and cpu_capture.capturing():
            keep = (list(vals), list(self._args), argv, bounds, scratch)
            adj, bd, mb = self.adjoint, self.block_dim, self.max_blocks
            cpu_capture.record(lambda: mod.launch(bounds, argv, adj, 0, bd, mb), keep)
        else:
            handle = (stream or dev.stream).cuda_stream if dev.is_cuda else 0
            try:
                mod.launch(bounds, argv, self.adjoint, handle, self.block_dim, self.max_blocks)
            except KernelRuntimeError:
                for a in self._bump:    # it ran (with a zero-step slice empty): what it wrote moved on
                    a.version += 1
                raise
        for a in self._bump:
            a.version += 1
        if scratch:
            finish_adjoint_buffers(scratch)
            return   # no direct replay: every launch copies the buffers again
        if dev.is_cpu and not self._structs and self.stream is None and isinstance(mod, CpuModule):
            cached = self._entries.get(id(mod))
            if cached is None or cached[0] is not mod:
                fe = mod.fast_entry()
                cached = self._entries[id(mod)] = (mod, _ENTRY_TYPE(fe.backward if self.adjoint else fe.forward))
            self._entry, self._mode, self._errors = cached[1], config.mode, mod.errors
            self._bounds_ptr = ctypes.addressof(bounds)

    def _record_on_tape(self, stream):
        active_tape().record(LaunchRecord(self.kernel, self.dim, tuple(self._args), (), self.device, stream,
                                          self.block_dim, self.max_blocks))

    # ------------------------------------------------------------------------------- helpers

    def _put(self, slot, v):
        self._values[slot] = v
        self._argv[slot] = ctypes.addressof(v)
        if slot % self._n in self._arrays or slot in self._structs:
            # the checks read arrays only: a new scalar or vector keeps the checked replay
            self._checked = False
            self._entry = None

    def _index(self, index, adjoint):
        if adjoint and not self.adjoint:
            raise ValueError(f"Launch: kernel '{self.kernel.key}': an adjoint value set on a forward launch "
                             "(made with adjoint=False)")
        if not isinstance(index, int) or not -self._n <= index < self._n:
            raise IndexError(f"Launch: kernel '{self.kernel.key}' has {self._n} parameters "
                             f"({', '.join(self.kernel.arg_names)}), got index {index!r}")
        return index % self._n

    def _name_index(self, name):
        try:
            return self.kernel.arg_names.index(name)
        except ValueError:
            raise ValueError(f"Argument '{name}' not found in kernel '{self.kernel.key}' (its parameters: "
                             f"{', '.join(self.kernel.arg_names)})") from None

    def _check(self):
        """The checks over several parameters ``tg.launch`` makes, once per change."""
        k, vals = self.kernel, self._values
        if self.bounds.size:
            for i in self._arrays:
                if self._args[i] is None and not vals[i].data and not self._null_given[i]:
                    raise ValueError(f"Launch.launch: {arg_label(k, i)} has no array set (a kernel would read "
                                     "through a NULL pointer); set one with set_param_by_name")
                if self._null_given[i]:
                    check_null_argument(k, i)
        for i in self._written:
            if isinstance(vals[i], types.ArrayDesc) and vals[i].flags & 1:
                raise RuntimeError(f"{arg_label(k, i)}: the kernel writes this array, but it is read-only")
        if self._tid_checks and self.bounds.size:
            check_grid(k, self._tid_checks, self.dim, self.bounds.size, self._args, vals)
        if self.adjoint:
            check_adjoint_shapes(k, self._arrays, vals, vals[self._n:])
        self._checked = True
        self._record = not self.adjoint and self._record_tape
        # the arrays a forward replay writes: their versions move as a launch's do
        self._bump = () if self.adjoint else tuple(a for a in (self._args[i] for i in self._written)
                                                    if isinstance(a, array))

    def __repr__(self):
        kind = "adjoint " if self.adjoint else ""
        return f"Launch({kind}kernel '{self.kernel.key}', dim={self.dim}, device={self.device})"


def _record_cmd(kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs, record_tape,
                block_dim, max_blocks):
    """``launch(..., record_cmd=True)``: the launch packed into a ``Launch``, not run."""
    try:
        args = list(inputs) + list(outputs)
    except TypeError:
        raise TypeError("launch: inputs and outputs must be lists or tuples of the kernel's arguments") from None
    if not isinstance(kernel, Kernel):
        raise TypeError(f"launch: expected a @tg.kernel function, got {type(kernel).__name__}")
    kernel.check_launchable("launch")
    if kernel.is_generic():
        kernel = kernel.specialize_for(args)
    n = len(kernel.arg_types)
    if len(args) != n:
        raise TypeError(f"launch: kernel '{kernel.key}' takes {n} arguments ({', '.join(kernel.arg_names)}), got "
                        f"{len(args)} ({len(inputs)} inputs + {len(outputs)} outputs)")
    dev = infer_device(device, stream, [a for a in args if a is not None])
    adj_args = None
    if adjoint and (adj_inputs is not None or adj_outputs is not None):
        ai = list(adj_inputs) if adj_inputs is not None else [None] * len(inputs)
        ao = list(adj_outputs) if adj_outputs is not None else [None] * len(outputs)
        if len(ai) != len(inputs) or len(ao) != len(outputs):
            raise TypeError(f"launch(adjoint=True): adj_inputs/adj_outputs must have {len(inputs)}/{len(outputs)} "
                            f"entries, got {len(ai)}/{len(ao)}")
        adj_args = ai + ao
    cmd = Launch(kernel, dev, bounds=dim, max_blocks=max_blocks, block_dim=block_dim, adjoint=adjoint)
    cmd.record_tape = bool(record_tape)
    for i, a in enumerate(args):     # (a None array is a null array, as tg.launch packs it)
        cmd.set_param_at_index(i, a)
    if adj_args is not None:
        for i, g in enumerate(adj_args):
            if g is not None:
                cmd.set_param_at_index(i, g, adjoint=True)
    cmd.stream = stream
    return cmd


register_command_builder(_record_cmd)
