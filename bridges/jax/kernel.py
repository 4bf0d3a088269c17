"""``jax_kernel``: a tapegrad kernel as a JAX primitive (XLA FFI), with vmap and autodiff.

The Python side runs at trace time only: it checks the arguments, resolves the launch grid
and output shapes, and builds (once per distinct configuration) a *plan* — the static facts
of the call in C memory (``plan.py``) — whose address becomes the ``tapegrad_plan`` attribute
of a ``jax.ffi.ffi_call`` to tapegrad's C handler (``ffi_handler.cpp``). An execution runs
no Python: the handler wraps XLA's buffers in the kernel's array descriptors and calls the
compiled entry point (CPU) or ``cuLaunchKernel`` on XLA's stream (CUDA).

vmap (every ``vmap_method`` of ``ffi_call``): the handler sees the batch as leading buffer
dims and runs the launch once per batch element, so a batched call equals the stack of the
unbatched calls for every kernel (Warp folds the batch into the first launch dimension
instead, which is wrong for kernels writing fixed elements or reducing with atomics).

``enable_backward=True``: a ``jax.custom_vjp`` whose backward is a second FFI call that
launches the kernel's generated adjoint over the same grid as the forward.
"""
from __future__ import annotations

import math
import threading

import jax
import numpy as np

from tapegrad import abi, types
from tapegrad.launch.grid import MAX_LAUNCH_SIZE
from tapegrad.launch.packers import check_null_fields, check_written_fields

from .._base import check_argnames
from .._op import GenericOp, config_key
from ..kernel_op import KernelOp, OpFramework
from . import entry
from . import plan as ffi_plan
from .convert import ArrayImpl, Tracer, dtype_to_jax, jax_scalar
from .debug import debug_call
from .ffi import KERNEL_TARGET, ensure_registered
from .kernel_ad import KernelCall, bind_forward

__all__ = ["jax_kernel", "JaxKernel", "VMAP_METHODS", "JAX_FRAMEWORK"]

VMAP_METHODS = ("broadcast_all", "expand_dims", "sequential", "sequential_unrolled", "legacy_vectorized")
# methods under which an in-out operand always has its result's shape, so XLA may alias them;
# under the others the handler copies the operand into the result (broadcasting batch dims)
_ALIASING = ("broadcast_all", "sequential", "sequential_unrolled")
_MAX_THREADS = MAX_LAUNCH_SIZE        # the int64 launch bounds (past 2^31 - 1 threads: the wide build)
_EAGER_CACHE_MAX = 256
_WHO = "jax_kernel"

_registry: dict = {}
_registry_lock = threading.Lock()


def _check_vmap_method(m, who=_WHO):
    if m not in VMAP_METHODS:
        raise ValueError(f"{who}: vmap_method must be one of {list(VMAP_METHODS)}, got {m!r}")
    return m


def _check_block_dim(block_dim):
    """``block_dim`` as given (None or an int in 1..1024), with Warp's error texts."""
    if block_dim is None:
        return None
    if isinstance(block_dim, bool) or not isinstance(block_dim, (int, np.integer)):
        raise TypeError(f"{_WHO}: block_dim must be an integer or None, got {type(block_dim).__name__}")
    if int(block_dim) <= 0:
        raise ValueError(f"{_WHO}: block_dim must be positive (CUDA threads per block, 1..{abi.MAX_BLOCK_DIM}), "
                         f"got {block_dim}")
    if int(block_dim) > abi.MAX_BLOCK_DIM:
        raise ValueError(f"{_WHO}: block_dim must be at most {abi.MAX_BLOCK_DIM} (CUDA threads per block), "
                         f"got {block_dim}")
    return int(block_dim)


def _varying(v):
    """``(varying manual axes of v, whether this JAX spells them ManualAxisType, its mesh)``."""
    t = jax.typeof(v)
    mat = getattr(t, "manual_axis_type", None)
    vma = mat.varying if mat is not None else getattr(t, "vma", None)
    return frozenset(vma or ()), mat is not None, getattr(getattr(t, "sharding", None), "mesh", None)


def output_metadata(values) -> dict:
    """``ShapeDtypeStruct.update`` keywords giving outputs the varying manual axes of the
    inputs (needed inside ``shard_map``; JAX cannot see what an FFI output depends on)."""
    if not hasattr(jax, "typeof") or not hasattr(jax.ShapeDtypeStruct, "update"):
        return {}
    axes, manual_type, mesh = set(), False, None
    for v in values:
        vma, manual, m = _varying(v)
        if vma:
            axes.update(vma)
            manual_type = manual_type or manual
            mesh = m or mesh
    if not axes:
        return {}
    vma = frozenset(axes)
    meta = {"manual_axis_type": jax.sharding.ManualAxisType(varying=vma)} if manual_type else {"vma": vma}
    if hasattr(jax.sharding, "get_abstract_mesh"):
        mesh = jax.sharding.get_abstract_mesh()
    if mesh is not None:
        meta["sharding"] = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return meta


def common_varying(arrays) -> list:
    """``arrays`` cast to the union of their varying manual axes (inside ``shard_map``).

    A ``custom_vjp``'s backward must return cotangents typed like its inputs; the adjoint's
    gradient of a replicated input used next to sharded ones varies over the mesh axis, so
    every input enters the ``custom_vjp`` varying, and JAX sums the replicated inputs'
    gradients itself (the transpose of the cast is a ``psum``).
    """
    if not hasattr(jax, "typeof"):
        return list(arrays)
    each = [_varying(a)[0] for a in arrays]
    union = frozenset().union(*each)
    if not union:
        return list(arrays)
    cast = getattr(jax.lax, "pcast", None)
    out = []
    for a, vma in zip(arrays, each):
        missing = tuple(sorted(union - vma))
        if missing:
            a = cast(a, missing, to="varying") if cast is not None else jax.lax.pvary(a, missing)
        out.append(a)
    return out


class JaxKernel:
    """The callable ``jax_kernel`` returns (one per distinct configuration).

    Call it with the kernel's inputs (arrays as JAX arrays, scalars as static Python values)
    followed by its in-out arrays; it returns a list of the outputs (in-out ones first).
    Attributes mirror the constructor arguments (``block_dim``, ``vmap_method``...).
    """

    def __init__(self, kernel, num_outputs, vmap_method, launch_dims, output_dims, in_out_argnames,
                 module_preload_mode, enable_backward, has_side_effect, block_dim):
        if enable_backward and in_out_argnames:
            raise NotImplementedError(f"{_WHO}: in_out_argnames cannot be combined with enable_backward=True (the "
                                      "gradient of an array the kernel updates in place is not defined by its adjoint)")
        self.kernel = kernel
        self.op = KernelOp(JAX_FRAMEWORK, kernel, num_outputs, in_out_argnames=in_out_argnames or (),
                           launch_dims=launch_dims, output_dims=output_dims, device_input=False, structs=True)
        self.sig = self.op.sig   # (a kernel writing an input array is refused there, as for every kernel op)
        self.num_outputs = num_outputs
        self.vmap_method = _check_vmap_method(vmap_method)
        self.launch_dims = launch_dims
        self.output_dims = output_dims
        self.in_out_argnames = tuple(in_out_argnames) if in_out_argnames else None
        self.module_preload_mode = entry.ModulePreloadMode(module_preload_mode)
        self.enable_backward = bool(enable_backward)
        self.has_side_effect = bool(has_side_effect)
        self.block_dim = _check_block_dim(block_dim)     # as given (None: the default), as Warp's attribute
        self._threads = abi.DEFAULT_BLOCK_DIM if self.block_dim is None else self.block_dim
        self.call_params = self.sig.call_params     # what the caller passes, in order
        self.label = self.op.label
        self._calls: dict = {}     # call configuration -> (ffi callable, plan)
        self._eager: dict = {}     # eager argument key -> (ffi callable, plan address)
        self._operand_positions = tuple(k for k, p in enumerate(self.call_params) if p.is_array)
        ensure_registered()
        entry.define_kernel(kernel)   # exported programs naming it run it in this process

    def __repr__(self):
        return f"<tapegrad jax_kernel {self.kernel.key}>"

    # ----------------------------------------------------------------------- arguments
    def _check_static(self, args) -> None:
        """JAX's part of the checks: a value parameter takes a Python value known at trace time."""
        self.sig.check_count(args, self.label)
        for p, v in zip(self.call_params, args):
            if not p.is_array and isinstance(v, Tracer):
                raise ValueError(f"{self.label}: argument '{p.name}' ({p.type!r}) must be a static value (a Python "
                                 "number known at trace time), got a traced value; under jax.jit pass it through "
                                 f"static_argnames/static_argnums or a closure")

    # --------------------------------------------------------------------------- calls
    def __call__(self, *args, output_dims=None, launch_dims=None, vmap_method=None):
        """Run the kernel on ``args`` (inputs, then in-out arrays); returns the list of outputs.

        Args:
            output_dims, launch_dims, vmap_method: per-call overrides of the constructor's.

        Raises:
            ValueError: wrong input count; a traced scalar; bad launch/output dims.
            TypeError: an argument's dtype, dims or type does not fit its parameter.
        """
        plain = output_dims is None and launch_dims is None and vmap_method is None and not self.enable_backward \
            and self.kernel.mode() != "debug"
        if plain:   # eager calls with a configuration met before: straight to the FFI call
            key = self._eager_key(args)
            hit = self._eager.get(key) if key is not None else None
            if hit is not None:
                call, addr = hit
                return call(*[args[i] for i in self._operand_positions], tapegrad_plan=addr)
        vm = self.vmap_method if vmap_method is None else _check_vmap_method(vmap_method)
        self._check_static(args)
        grid, shapes = self.op.prepare(args, launch_dims, output_dims)   # the checks every kernel op makes
        grid = tuple(int(d) for d in grid)
        shapes = [tuple(int(d) for d in s) for s in shapes]
        arrays = [v for p, v in zip(self.call_params, args) if p.is_array]
        statics = {p.index: ffi_plan.pack_value(p.type, v, f"{self.label} argument '{p.name}'")
                   for p, v in zip(self.call_params, args) if not p.is_array}
        for p, v in zip(self.call_params, args):    # a struct's None array field the kernel reads: refused
            if isinstance(p.type, types.StructType):
                check_null_fields(self.kernel, p.index, p.type, v, label=f"{self.label} argument '{p.name}'")
                check_written_fields(self.kernel, p.index, v, label=f"{self.label} argument '{p.name}'")
        if not (self.enable_backward and self.op.has_derivatives):
            call, addr, operands = self._forward(arrays, statics, grid, shapes, vm)
            if plain and key is not None and len(self._eager) < _EAGER_CACHE_MAX and not output_metadata(operands):
                self._eager[key] = (call, addr)
            if any(isinstance(o, jax.core.Tracer) for o in operands):   # jax.grad would name only the FFI target
                return _no_adjoint(self, call, addr)(*operands)
            return call(*operands, tapegrad_plan=addr)
        kc = KernelCall(self, tuple(sorted(statics.items())), grid, tuple(tuple(a.shape) for a in arrays),
                        tuple(a.dtype for a in arrays), tuple(tuple(s) for s in shapes), vm)
        return bind_forward(kc, common_varying(arrays))

    def _eager_key(self, args):
        """A key of concrete (eager) arguments, or None: traced or unhashable arguments take
        the full path (tracing speed does not matter, and tracers carry more than a shape)."""
        if len(args) != len(self.call_params):
            return None
        key = []
        for p, v in zip(self.call_params, args):
            if p.is_array:
                if type(v) is not ArrayImpl:
                    return None
                key.append((v.shape, v.dtype))
            elif isinstance(v, (int, float, bool)):
                key.append((type(v), v))
            else:
                return None
        return tuple(key)

    def _forward(self, arrays, statics, grid, shapes, vm):
        """``(ffi callable, plan address attribute, operands)`` of the forward call."""
        slots, arg_of = [], {}
        k = 0
        for p in self.call_params:
            if p.is_array:
                arg_of[p.index] = k
                k += 1
        n_io = len(self.sig.in_out)
        for p in self.sig.inputs:
            if p.is_array:
                a = arrays[arg_of[p.index]]
                slots.append(ffi_plan.Slot(ffi_plan.IN, p.name, arg=arg_of[p.index], dtype=p.dtype,
                                    dims=tuple(a.shape)[:p.type.ndim], xla=ffi_plan.xla_dtype(jax_scalar(a.dtype))))
            else:
                slots.append(ffi_plan.Slot(ffi_plan.VALUE, p.name, value=statics[p.index]))
        for j, p in enumerate(self.sig.outputs):
            dims = shapes[j][:p.type.ndim]
            if j < n_io:
                a = arrays[arg_of[p.index]]
                slots.append(ffi_plan.Slot(ffi_plan.INOUT, p.name, arg=arg_of[p.index], ret=j, dtype=p.dtype, dims=dims,
                                    xla=ffi_plan.xla_dtype(jax_scalar(a.dtype))))
            else:
                slots.append(ffi_plan.Slot(ffi_plan.OUT, p.name, ret=j, dtype=p.dtype, dims=dims))
        out_dtypes = [dtype_to_jax(p.dtype) for p in self.sig.outputs]
        aliases = {arg_of[p.index]: j for j, p in enumerate(self.sig.in_out)} if vm in _ALIASING else None
        call, addr = self._ffi(slots, arrays, list(zip(shapes, out_dtypes)), grid, False, vm, aliases)
        return call, addr, arrays

    def _ffi(self, slots, operands, results, grid, adjoint, vm, aliases):
        return self.ffi_call(slots, operands, results, grid, adjoint, vm, aliases)

    def ffi_call(self, slots, operands, results, grid, adjoint, vm, aliases, tangent=0):
        """``(ffi callable, plan address attribute)`` for a call with these slots and operands.

        Args:
            slots: ``plan.Slot`` per entry-point parameter. operands: the call's operands.
            results: ``(shape, dtype)`` per result. grid: the launch grid. adjoint: the adjoint
            entry. vm: vmap method. aliases: operand -> result aliases (or None).
            tangent: 1 / 2: the tangent / tangent-of-adjoint entry (``kernel_ad``).
        Returns:
            ``(callable, plan address)``: call it with the operands and ``tapegrad_plan=address``.
        """
        if self.kernel.mode() == "debug" and not tangent:   # checked launches through tg.launch (debug.py)
            call = debug_call(self.kernel, tuple(slots), results, grid, adjoint)
            if call is not None:
                return call, None
        if tangent and math.prod(grid) > abi.MAX_NARROW_THREADS:
            raise ValueError(f"{self.label}: forward mode (jvp, jacfwd) runs launches of at most 2^31 - 1 threads "
                             f"(the tangent build's tid() is 32-bit), got launch_dims {tuple(grid)} = "
                             f"{math.prod(grid)} threads; jax.grad, vjp and jacrev run past that")
        spec = ffi_plan.PlanSpec(self.kernel, tuple(slots), len(operands), len(results), grid, adjoint,
                                 self._threads, tangent)
        ckey = (spec, vm, tuple(sorted(aliases.items())) if aliases else None,
                tuple((tuple(s), str(d)) for s, d in results))   # batched calls differ in result shapes only
        hit = self._calls.get(ckey)
        meta = output_metadata(operands)
        if hit is None or meta:
            plan = entry.register(spec)
            entry.preload(plan, self.module_preload_mode)
            out_types = [jax.ShapeDtypeStruct(s, d) for s, d in results]
            if meta:
                out_types = [t.update(**meta) for t in out_types]
            call = entry.with_identity(jax.ffi.ffi_call(KERNEL_TARGET, out_types, vmap_method=vm,
                                                        input_output_aliases=aliases or None,
                                                        has_side_effect=self.has_side_effect), plan)
            hit = (call, np.int64(plan.address))
            if not meta:
                self._calls[ckey] = hit
        return hit

def _no_adjoint(wrapper, call, addr):
    """The forward FFI call under a ``jax.custom_jvp`` whose rule raises what fixes a gradient
    through a wrapper made without ``enable_backward`` (JAX's own error names only the FFI target;
    the rule runs only when a tangent reaches the kernel)."""
    fn = jax.custom_jvp(lambda *ops: call(*ops, tapegrad_plan=addr))

    def jvp(primals, tangents):
        transform = "jax.grad, vjp, jvp, jacfwd, jacrev, hessian"
        remake = ("make it with tg.jax_kernel(kernel, enable_backward=True) for jax.grad, vjp, jvp, jacfwd, jacrev "
                  "and hessian (every JAX derivative transform, to second order)")
        if wrapper.op.has_derivatives:
            raise wrapper.op.not_differentiable(transform, "this jax_kernel was made with enable_backward=False (the "
                                                f"default): {remake}, or {JAX_FRAMEWORK.detach_hint}")
        err = wrapper.op.not_differentiable(transform)
        if not wrapper.enable_backward:
            err.args = (f"{err.args[0]}; then {remake}",)
        raise err
    fn.defjvp(jvp)
    return fn


def jax_kernel(kernel, num_outputs=1, vmap_method="broadcast_all", launch_dims=None, output_dims=None,
               in_out_argnames=None, module_preload_mode=entry.ModulePreloadMode.CURRENT_DEVICE, enable_backward=False,
               has_side_effect=False, block_dim=None) -> JaxKernel:
    """A tapegrad kernel as a JAX primitive (XLA FFI), usable inside ``jax.jit`` on CPU and CUDA.

    The kernel's last ``num_outputs`` parameters are outputs (arrays); the others are
    inputs: JAX arrays for array parameters (vector/matrix dtypes as trailing dims), static
    Python values for scalar/vector/struct parameters. Outputs are new arrays, zeroed before
    the launch; in-out parameters (``in_out_argnames``, the first outputs) are also passed,
    after the inputs, and come back updated.

    Args:
        kernel: a ``@tg.kernel``.
        num_outputs: number of output parameters (in-out ones included), >= 1.
        vmap_method: ``jax.ffi.ffi_call``'s: "broadcast_all" (default), "expand_dims",
            "sequential", "sequential_unrolled", "legacy_vectorized". Under every method a
            batched call equals the stack of unbatched calls.
        launch_dims: the launch grid (int, tuple or callable of the inputs); default: the
            tapegrad shape of the first array argument. Excludes vmap batch dims.
        output_dims: output shapes (tapegrad shapes): int, tuple, callable, or a dict with an
            entry for every pure output; default: the launch grid. In-out outputs keep their
            input's shape.
        in_out_argnames: names of outputs that are also inputs (updated in place).
        module_preload_mode: ``ModulePreloadMode`` (NONE, CURRENT_DEVICE, ALL_DEVICES).
        enable_backward: differentiable with every JAX transform through the kernel's adjoint
            and tangent (float array inputs get gradients; static scalars and integer arrays
            none). Without it, or with a kernel built with ``enable_backward=False``, the op
            runs forward and a derivative raises ``tg.NotDifferentiableError``.
        has_side_effect: keep the call even when its results are unused.
        block_dim: CUDA threads per block (default 256).

    Returns:
        A ``JaxKernel``; equal configurations return the same object.

    Raises:
        ValueError: bad ``num_outputs``, ``in_out_argnames``, ``vmap_method``, ``block_dim``.
        TypeError: an output that is not an array; a bad ``block_dim`` type.
        NotImplementedError: ``in_out_argnames`` with ``enable_backward``.
    """
    if isinstance(in_out_argnames, str):
        in_out_argnames = [in_out_argnames]
    if getattr(kernel, "is_generic", None) is not None and kernel.is_generic():
        return _generic(kernel, num_outputs, vmap_method, launch_dims, output_dims, in_out_argnames,
                        module_preload_mode, enable_backward, has_side_effect, block_dim)
    check_argnames(in_out_argnames, kernel.arg_names, _WHO)
    key = config_key(kernel, num_outputs, vmap_method, launch_dims, output_dims,
                     tuple(in_out_argnames) if in_out_argnames else None, int(module_preload_mode),
                     bool(enable_backward), bool(has_side_effect), block_dim)
    if key is not None:
        hit = _registry.get(key)
        if hit is not None:
            return hit
    with _registry_lock:
        hit = _registry.get(key) if key is not None else None
        if hit is None:
            hit = JaxKernel(kernel, num_outputs, vmap_method, launch_dims, output_dims, in_out_argnames,
                            module_preload_mode, enable_backward, has_side_effect, block_dim)
            if key is not None:
                _registry[key] = hit
    return hit



_generic_registry: dict = {}


def _generic(kernel, num_outputs, *options):
    """A generic kernel's ``jax_kernel``: specialized per call from the JAX arrays' dtypes
    (``GenericOp``), each specialization a ``jax_kernel`` of its own."""
    key = config_key(kernel, num_outputs, *[tuple(o) if isinstance(o, list) else o for o in options])
    hit = _generic_registry.get(key) if key is not None else None
    if hit is None:
        hit = GenericOp(kernel, num_outputs, lambda spec: jax_kernel(spec, num_outputs, *options),
                        lambda x: jax_scalar(getattr(x, "dtype", None)), _WHO)
        if key is not None:
            _generic_registry[key] = hit
    return hit


# ------------------------------------------------------------------ the framework's part of KernelOp

def _check_grid(grid, label):
    """The XLA handler's grids: ints, at most 2^63 - 1 threads, as ``tg.launch``'s (the handler
    runs the kernel's default build, whose tid() is 32-bit, up to 2^31 - 1 threads and its wide
    build, whose tid() is 64-bit, past that: ``entry.entries``)."""
    try:
        grid = tuple(int(d) for d in grid)
    except (TypeError, ValueError):
        raise TypeError(f"{label}: launch_dims must be ints, got {grid!r}") from None
    if any(d > _MAX_THREADS for d in grid) or math.prod(grid) > _MAX_THREADS:
        raise ValueError(f"{label}: launch_dims {grid} has {math.prod(grid)} threads; jax_kernel launches "
                         f"at most {_MAX_THREADS} (2^63 - 1, the int64 thread index): split the call, or loop "
                         "inside the kernel")


JAX_FRAMEWORK = OpFramework(
    who=_WHO, tensor_name="JAX array",
    is_tensor=lambda v: getattr(v, "shape", None) is not None and getattr(v, "dtype", None) is not None,
    scalar_of=lambda v: jax_scalar(v.dtype), dtype_name=lambda v: str(v.dtype),
    detach_hint="apply jax.lax.stop_gradient to its inputs", check_grid=_check_grid, in_out=True)
