"""``jax_callable``: a Python function that launches tapegrad kernels, called from JAX.

The function runs when XLA executes the call: tapegrad's C handler marshals the call frame
(buffer pointers and dims, XLA's stream and device) into one int64 record and calls
``_dispatch`` (one ctypes callback). The function receives tapegrad arrays wrapping XLA's
buffers (no copies) and static scalars, with XLA's stream current on CUDA.

Graph modes (CUDA; on the CPU only JAX and NONE): JAX lets XLA record the call into its own
command buffer (CUDA graph); NONE runs it plainly; WARP captures the function's work into a
tapegrad graph per set of buffer addresses (an LRU of ``graph_cache_max``) and replays it;
WARP_STAGED and WARP_STAGED_EX work on persistent staging buffers (``graphs.py``).

vmap: as ``jax_kernel``, the function runs once per batch element on views of the batch.
"""
from __future__ import annotations

import ctypes
import inspect
import itertools
import math
import threading
import traceback
from dataclasses import dataclass
from enum import IntEnum

import jax
import numpy as np

from tapegrad import types
from tapegrad.array import array as tg_array
from tapegrad.device import ScopedDevice, get_device

from .._base import Layout, check_argnames
from .._op import KernelSignature, config_key
from . import entry
from . import plan as ffi_plan
from .convert import Tracer, dtype_to_jax
from .ffi import CALLABLE_GRAPHABLE_TARGET, CALLABLE_TARGET, ensure_registered, process_id, set_callable_target
from .graphs import GraphCache, copy_array, zero_array
from .kernel import JAX_FRAMEWORK, VMAP_METHODS, output_metadata

__all__ = ["GraphMode", "JaxCallableGraphMode", "jax_callable", "JaxCallable", "clear_jax_callable_graph_cache",
           "DEFAULT_GRAPH_CACHE_MAX"]

DEFAULT_GRAPH_CACHE_MAX = 32
_WHO = "jax_callable"


class GraphMode(IntEnum):
    """How a ``jax_callable`` uses CUDA graphs (Warp's ``JaxCallableGraphMode``)."""

    NONE = 0
    JAX = 1
    WARP = 2
    WARP_STAGED = 3
    WARP_STAGED_EX = 4


JaxCallableGraphMode = GraphMode
_ALIASING = ("broadcast_all", "sequential", "sequential_unrolled")


@dataclass(frozen=True)
class _Signature:
    """What ``KernelSignature`` reads from a kernel, for a Python function."""

    key: str
    arg_names: tuple
    arg_types: tuple


def _function_signature(func) -> _Signature:
    sig = inspect.signature(func)
    names, types_ = [], []
    for name, p in sig.parameters.items():
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, getattr(func, "__globals__", {}))  # noqa: S307  the user's own annotations
            except Exception as e:
                raise RuntimeError(f"{_WHO}: cannot evaluate the annotation of '{name}' ({ann!r}): {e}") from None
        if ann is inspect.Parameter.empty:
            raise RuntimeError(f"{_WHO}: function '{func.__qualname__}': parameter '{name}' needs a type annotation "
                               f"(e.g. {name}: tg.array(dtype=float) or {name}: float)")
        try:
            types_.append(types.type_of(ann, arg=name))
        except (TypeError, ValueError) as e:
            raise TypeError(f"{_WHO}: function '{func.__qualname__}': parameter '{name}': {e}") from None
        names.append(name)
    return _Signature(f"{func.__module__}.{func.__qualname__}", tuple(names), tuple(types_))


@dataclass
class _Call:
    """One traced call configuration: what the dispatcher needs to rebuild the arguments."""

    owner: "JaxCallable"
    statics: dict            # param index -> Python value
    slots: tuple             # per function parameter: (kind, operand, result, Param, tapegrad dims)
    nargs: int
    nrets: int
    layouts: dict            # (slot, device alias) -> Layout
    geometries: dict         # buffer ranks and dims -> (batch shape, per-slot buffers and strides)


_calls: list = []            # call id -> _Call
_calls_by_key: dict = {}
_lock = threading.RLock()
_callables: "list[JaxCallable]" = []


class JaxCallable:
    """The callable ``jax_callable`` returns (one per distinct configuration)."""

    def __init__(self, func, num_outputs, graph_mode, vmap_method, output_dims, in_out_argnames, stage_in_argnames,
                 stage_out_argnames, graph_cache_max, module_preload_mode, has_side_effect):
        self.func = func
        self.sig = KernelSignature.of(_function_signature(func), num_outputs, in_out_argnames=in_out_argnames or (),
                                      output_dims=output_dims, who=_WHO)
        try:
            self.graph_mode = GraphMode(graph_mode)
        except ValueError:
            raise ValueError(f"{_WHO}: graph_mode must be one of {[m.name for m in GraphMode]}, got {graph_mode!r}") \
                from None
        if vmap_method not in VMAP_METHODS:
            raise ValueError(f"{_WHO}: vmap_method must be one of {list(VMAP_METHODS)}, got {vmap_method!r}")
        self.vmap_method = vmap_method
        self.output_dims = output_dims
        self.in_out_argnames = tuple(in_out_argnames) if in_out_argnames else None
        names = set(self.sig.kernel.arg_names)
        for label, lst in (("stage_in_argnames", stage_in_argnames), ("stage_out_argnames", stage_out_argnames)):
            for n in lst or ():
                if n not in names:
                    raise ValueError(f"{_WHO}: {label} names '{n}', which is no parameter of '{func.__qualname__}'")
        self.stage_in = None if stage_in_argnames is None else frozenset(stage_in_argnames)
        self.stage_out = None if stage_out_argnames is None else frozenset(stage_out_argnames)
        self.module_preload_mode = entry.ModulePreloadMode(module_preload_mode)
        self.has_side_effect = bool(has_side_effect)
        self.call_params = self.sig.inputs + self.sig.in_out
        self.label = self.sig.label
        self._graphs = GraphCache(graph_cache_max, self.stage_in, self.stage_out, self.label)
        self._ffi: dict = {}
        ensure_registered()
        _install_dispatcher()
        with _lock:
            _callables.append(self)

    def __repr__(self):
        return f"<tapegrad jax_callable {self.func.__qualname__}>"

    # -------------------------------------------------------------------- graph cache
    @property
    def graph_cache_max(self):
        """Most graphs kept (None: unbounded); lowering it evicts the least recently used."""
        return self._graphs.max

    @graph_cache_max.setter
    def graph_cache_max(self, n):
        self._graphs.max = n

    @property
    def graph_cache_size(self) -> int:
        """Number of graphs currently cached."""
        return self._graphs.size

    def clear_graph_cache(self) -> None:
        """Drop every cached graph (and staging buffers)."""
        self._graphs.clear()

    # -------------------------------------------------------------------------- calls
    @property
    def stage_in_argnames(self):
        """The staged-in argument names as a set (Warp's attribute), or None when not given."""
        return None if self.stage_in is None else set(self.stage_in)

    @property
    def stage_out_argnames(self):
        """The staged-out argument names as a set (Warp's attribute), or None when not given."""
        return None if self.stage_out is None else set(self.stage_out)

    def __call__(self, *args, output_dims=None, vmap_method=None):
        """Call the function from JAX; returns the list of outputs (in-out ones first).

        Raises:
            ValueError: wrong input count, a traced scalar, bad output dims.
            TypeError: an argument's dtype, dims or type does not fit its parameter.
        """
        vm = self.vmap_method if vmap_method is None else vmap_method
        if vm not in VMAP_METHODS:
            raise ValueError(f"{self.label}: vmap_method must be one of {list(VMAP_METHODS)}, got {vm!r}")
        self.sig.check_arrays(args, JAX_FRAMEWORK)   # the wording of every kernel op
        arrays, statics, operand = [], {}, {}
        for p, v in zip(self.call_params, args):
            if p.is_array:
                operand[p.index] = len(arrays)
                arrays.append(v)
            else:
                if isinstance(v, Tracer):
                    raise ValueError(f"{self.label}: argument '{p.name}' ({p.type!r}) must be a static value, got a "
                                     "traced value")
                ffi_plan.pack_value(p.type, v, f"{self.label} argument '{p.name}'")   # checks the value now
                statics[p.index] = v
        shapes = self._output_shapes(args, output_dims)
        slots = []
        for p in self.sig.inputs:
            slots.append((ffi_plan.IN, operand[p.index], -1, p, tuple(args[p.index].shape)[:p.type.ndim]) if p.is_array
                         else (ffi_plan.VALUE, -1, -1, p, ()))
        for j, p in enumerate(self.sig.outputs):
            kind = ffi_plan.INOUT if j < len(self.sig.in_out) else ffi_plan.OUT
            slots.append((kind, operand.get(p.index, -1), j, p, shapes[j][:p.type.ndim]))
        key = (id(self), tuple(sorted((k, repr(v)) for k, v in statics.items())), tuple(slots), len(arrays))
        with _lock:
            cid = _calls_by_key.get(key)
            if cid is None:
                cid = len(_calls)
                _calls.append(_Call(self, statics, tuple(slots), len(arrays), len(shapes), {}, {}))
                _calls_by_key[key] = cid
        out_types = [jax.ShapeDtypeStruct(s, dtype_to_jax(p.dtype)) for s, p in zip(shapes, self.sig.outputs)]
        meta = output_metadata(arrays)
        if meta:
            out_types = [t.update(**meta) for t in out_types]
        aliases = {operand[p.index]: j for j, p in enumerate(self.sig.in_out)} if vm in _ALIASING else None
        target = CALLABLE_GRAPHABLE_TARGET if self.graph_mode == GraphMode.JAX else CALLABLE_TARGET
        call = jax.ffi.ffi_call(target, out_types, vmap_method=vm, input_output_aliases=aliases or None,
                                has_side_effect=self.has_side_effect)
        # the process id: a call id means nothing in another process (a jax.export program);
        # the handler refuses such calls, naming the function
        attrs = dict(tapegrad_call=np.int64(cid), tapegrad_process=np.int64(process_id()),
                     tapegrad_name=self.func.__qualname__)
        if any(isinstance(a, Tracer) for a in arrays):   # jax.grad would name only the FFI target
            return self._no_derivative(call, attrs)(*arrays)
        return call(*arrays, **attrs)

    def _no_derivative(self, call, attrs):
        """The FFI call under a ``jax.custom_jvp`` whose rule (run only when a tangent reaches the
        call) says what gives a gradient."""
        fn = jax.custom_jvp(lambda *ops: call(*ops, **attrs))

        def jvp(primals, tangents):
            raise ValueError(f"{self.label}: a jax_callable has no derivative. For jax.grad, launch the kernels "
                             "through tg.jax_kernel(kernel, enable_backward=True), or wrap this call in a "
                             "jax.custom_vjp whose backward launches the adjoints; or apply jax.lax.stop_gradient "
                             "to its inputs")
        fn.defjvp(jvp)
        return fn

    def _output_shapes(self, args, output_dims):
        """The one ``output_dims`` policy (``KernelSignature.output_shapes``); an output without
        dims takes the first array input's shape (a function has no launch grid)."""
        arrays = [i for i, p in enumerate(self.call_params) if p.is_array]
        first = tuple(args[arrays[0]].shape)[:self.call_params[arrays[0]].type.ndim] if arrays else ()
        return [tuple(int(d) for d in s) for s in self.sig.output_shapes(args, first, output_dims)]

    # ------------------------------------------------------------------------ execution
    def _run(self, call: _Call, rec):
        platform, ordinal, stream_handle, nargs, nrets, capturing, blocking = rec[:_HEAD]
        if nargs != call.nargs or nrets != call.nrets:
            raise RuntimeError(f"the call has {nargs} operands and {nrets} results, {call.nargs} and {call.nrets} "
                               "expected")
        dev = get_device("cpu") if platform == 0 else get_device(f"cuda:{ordinal}")
        if dev.is_cpu and self.graph_mode not in (GraphMode.JAX, GraphMode.NONE):
            raise RuntimeError(f"graph mode {self.graph_mode.name} needs CUDA; on the CPU use GraphMode.JAX or "
                               "GraphMode.NONE")
        ptrs = rec[_HEAD::10]
        dims = rec[_HEAD:]
        del dims[::10]                     # every buffer's rank and dims, without its pointer
        dims = tuple(dims)
        geom = call.geometries.get(dims)
        if geom is None:
            bufs = [rec[_HEAD + 10 * i: _HEAD + 10 + 10 * i] for i in range(nargs + nrets)]
            geom = call.geometries[dims] = _geometry(call, bufs, nargs)
        batch, per = geom
        per = [None if q is None else (ptrs[q[0]], ptrs[q[1]], q[2], q[3]) for q in per]
        stream = _xla_stream(dev, stream_handle, blocking) if dev.is_cuda else None
        with ScopedDevice(dev):
            if stream is not None:
                from tapegrad.cuda.stream import ScopedStream
                with ScopedStream(stream, sync_enter=False):
                    self._run_on(call, dev, stream, batch, per, capturing)
            else:
                self._run_on(call, dev, None, batch, per, capturing)

    def _run_on(self, call, dev, stream, batch, per, capturing=-1):
        nb = math.prod(batch)
        for b in range(nb):
            args = self._arguments(call, dev, per, b, batch)
            mode = self.graph_mode
            if dev.is_cpu or mode == GraphMode.NONE:
                self._invoke(args)
            elif mode == GraphMode.JAX:
                from tapegrad.cuda.graph import ScopedCapture, is_capturing
                # XLA is recording a command buffer: join its capture (the handler read the
                # stream's capture status through the driver; -1: it could not)
                if capturing == 1 or (capturing == -1 and is_capturing(dev, stream)):
                    with ScopedCapture(stream=stream, external=True, force_module_load=False):
                        self._invoke(args)
                else:
                    self._invoke(args)
            elif mode == GraphMode.WARP:
                self._graphs.run_captured(call, dev, stream, args, self._invoke)
            elif mode == GraphMode.WARP_STAGED:
                self._graphs.run_staged(call, dev, stream, args, self._invoke)
            else:
                self._graphs.run_staged_ex(call, dev, stream, args, self._invoke)

    def _invoke(self, args):
        r = self.func(*args)
        if r is not None:
            raise TypeError(f"{self.label}: the function must return None (it writes its outputs), got "
                            f"{type(r).__name__}")

    def _arguments(self, call, dev, per, b, batch):
        """The function's arguments for batch element ``b``: arrays over XLA's buffers."""
        args = []
        for i, (kind, _, _, p, dims) in enumerate(call.slots):
            if kind == ffi_plan.VALUE:
                args.append(call.statics[p.index])
                continue
            ptr, in_ptr, out_st, in_st = per[i]
            off = _offset(batch, out_st, b)
            lay = call.layouts.get((i, dev.alias))
            if lay is None:
                lay = call.layouts[(i, dev.alias)] = Layout(p.dtype, dims, _strides(p.dtype, dims), dev)
            if kind == ffi_plan.IN:    # XLA's operands are immutable: kernel writes to them are refused
                a = tg_array.wrap_memory(ptr + off, lay.dtype, lay.shape, lay.strides, dev, None, True)
            else:
                a = lay.new_array(ptr + off, None)
            # on CUDA both run on XLA's stream through the driver: inside XLA's command-buffer
            # capture (graph mode JAX, vmap "sequential" under jit) a runtime-API or CuPy call
            # on another stream, or a query the capture refuses, would invalidate it
            if kind == ffi_plan.INOUT and in_ptr != ptr:      # not aliased by XLA: seed the result from the operand
                src = lay.new_array(in_ptr + _offset(batch, in_st, b), None)
                copy_array(a, src)
            elif kind == ffi_plan.OUT:
                zero_array(a)
            args.append(a)
        return args


_HEAD = 7                    # the handler's record header: platform .. blocking (ffi_handler.cpp)
_streams: dict = {}          # (ordinal, XLA stream handle) -> tapegrad Stream wrapping it


def _xla_stream(dev, handle: int, blocking: int):
    """A tapegrad Stream over XLA's stream ``handle``, made without asking the driver anything
    (``Stream`` would ask its flags: refused during a capture, which it invalidates). Its
    blocking flag is the handler's reading when it had one (-1: none, counted non-blocking,
    so ordering with the legacy stream takes an event rather than being assumed)."""
    s = _streams.get((dev.ordinal, handle))
    if s is None:
        from tapegrad.cuda.stream import Stream
        if len(_streams) >= 256:
            _streams.clear()
        s = _streams[(dev.ordinal, handle)] = Stream(dev, cuda_stream=handle, blocking=blocking == 1,
                                                     blocking_known=True)
    return s


def _strides(dtype, dims):
    acc, out = dtype.size, []
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _offset(batch, strides, b):
    off = 0
    for n, s in zip(reversed(batch), reversed(strides)):
        off += (b % n) * s
        b //= n
    return off


def _geometry(call, bufs, nargs):
    """``(batch shape, per slot (buffer, operand buffer, result batch strides, operand batch strides))``:
    the buffers as indices into the call's buffer list (pointers change between calls, the
    geometry does not)."""
    batch = None
    for kind, arg, ret, p, dims in call.slots:
        if kind in (ffi_plan.OUT, ffi_plan.INOUT):
            buf = bufs[nargs + ret]
            rank = p.framework_ndim
            batch = tuple(buf[2:2 + buf[1] - rank])
            break
    batch = batch or ()
    per = []
    for kind, arg, ret, p, dims in call.slots:
        if kind == ffi_plan.VALUE:
            per.append(None)
            continue
        item = p.dtype.size * math.prod(dims)
        out_buf = in_buf = 0
        out_st = in_st = ()
        if kind in (ffi_plan.IN, ffi_plan.INOUT):
            in_buf, in_st = arg, _batch_strides(batch, bufs[arg], p.framework_ndim, item)
        if kind in (ffi_plan.OUT, ffi_plan.INOUT):
            out_buf = nargs + ret
            out_st = _batch_strides(batch, bufs[out_buf], p.framework_ndim, item)
        if kind == ffi_plan.IN:
            out_buf, out_st = in_buf, in_st
        per.append((out_buf, in_buf, out_st, in_st))
    return batch, per


def _batch_strides(batch, buf, rank, item):
    extra = buf[1] - rank
    dims = buf[2:2 + extra]
    st, acc = [0] * len(batch), item
    for k in range(len(batch) - 1, -1, -1):
        j = k - (len(batch) - extra)
        if j < 0:
            continue
        n = dims[j]
        st[k] = 0 if n == 1 else acc
        acc *= n
    return tuple(st)


# ------------------------------------------------------------------------------- dispatch

_installed = False


def _dispatch(call_id, rec_addr, msg, msglen):
    """Every ``jax_callable`` execution lands here (from the C handler, any XLA thread)."""
    try:
        call = _calls[call_id]
        n = (ctypes.c_int64 * _HEAD).from_address(rec_addr)[3:5]
        rec = (ctypes.c_int64 * (_HEAD + 10 * (n[0] + n[1]))).from_address(rec_addr)[:]
        with _lock:
            call.owner._run(call, rec)
        return 0
    except BaseException as e:  # never let an exception cross into XLA: report it as an XLA error
        try:
            owner = _calls[call_id].owner.label
        except Exception:
            owner = _WHO
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-3:])
        text = f"{owner}: {type(e).__name__}: {e}\n{tb}".encode()[:max(0, msglen - 1)]
        ctypes.memmove(msg, text + b"\0", len(text) + 1)
        return 1


def _install_dispatcher():
    global _installed
    if not _installed:
        with _lock:
            if not _installed:
                set_callable_target(_dispatch)
                _installed = True


_registry: dict = {}
_counter = itertools.count()


def jax_callable(func, num_outputs=1, graph_mode=GraphMode.JAX, vmap_method="broadcast_all", output_dims=None,
                 in_out_argnames=None, stage_in_argnames=None, stage_out_argnames=None,
                 graph_cache_max=DEFAULT_GRAPH_CACHE_MAX, module_preload_mode=entry.ModulePreloadMode.CURRENT_DEVICE,
                 has_side_effect=False) -> JaxCallable:
    """A Python function launching tapegrad kernels, callable from JAX (inside ``jax.jit``).

    The function's parameters are annotated like a kernel's; the last ``num_outputs`` are
    output arrays (in-out ones, named in ``in_out_argnames``, first). It receives tapegrad
    arrays over XLA's buffers (outputs zeroed) and static scalars, must write its outputs
    and return None. On CUDA it runs with XLA's stream as the current stream.

    Args:
        func: the function.
        num_outputs: number of output parameters (in-out included).
        graph_mode: a ``GraphMode`` (or its int): JAX (default), NONE, WARP, WARP_STAGED,
            WARP_STAGED_EX (the last three on CUDA only).
        vmap_method: as for ``jax_kernel``; the function runs once per batch element.
        output_dims: output shapes (int, tuple, callable or dict per output); default: the
            shape of the first array input.
        in_out_argnames: outputs that are also inputs.
        stage_in_argnames, stage_out_argnames: WARP_STAGED*: arrays copied in / out on every
            call (default: all).
        graph_cache_max: most graphs kept per callable (None: unbounded).
        module_preload_mode: accepted for Warp compatibility (kernels load on first launch).
        has_side_effect: keep the call even when its results are unused.

    Returns:
        A ``JaxCallable``; equal configurations return the same object (``graph_cache_max``
        is re-applied to it).

    Raises:
        RuntimeError: a parameter without annotation. TypeError: an unsupported annotation.
        ValueError: bad ``num_outputs``, names, ``graph_mode`` or ``vmap_method``.
    """
    norm = lambda x: None if not x else tuple(x)  # noqa: E731
    if in_out_argnames:   # checked before the cache: a cached wrapper must not hide a bad list
        check_argnames(in_out_argnames, list(inspect.signature(func).parameters), _WHO)
    key = config_key(func, num_outputs, int(graph_mode) if isinstance(graph_mode, (int, GraphMode)) else graph_mode,
                     vmap_method, output_dims, norm(in_out_argnames), norm(stage_in_argnames),
                     norm(stage_out_argnames), int(module_preload_mode), bool(has_side_effect))
    hit = _registry.get(key) if key is not None else None
    if hit is None:
        hit = JaxCallable(func, num_outputs, graph_mode, vmap_method, output_dims, norm(in_out_argnames),
                          norm(stage_in_argnames), norm(stage_out_argnames), graph_cache_max, module_preload_mode,
                          has_side_effect)
        if key is not None:
            _registry[key] = hit
    else:
        hit.graph_cache_max = graph_cache_max
    return hit


def clear_jax_callable_graph_cache(callable=None) -> None:  # noqa: A002  Warp's parameter name
    """Drop the cached CUDA graphs of one ``jax_callable`` (or of all of them)."""
    targets = [callable] if callable is not None else list(_callables)
    for c in targets:
        if not isinstance(c, JaxCallable):
            raise TypeError(f"clear_jax_callable_graph_cache: expected a jax_callable, got {type(c).__name__}")
        c.clear_graph_cache()
