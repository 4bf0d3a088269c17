"""Every JAX autodiff transform of a differentiable ``jax_kernel`` (SPEC B17).

A ``jax_kernel(enable_backward=True)`` call binds four JAX primitives, each lowered to one
XLA FFI call of tapegrad's C handler (``ffi_handler.cpp``; no Python per execution), each
choosing its compiled entry point through its plan (``PlanSpec.adjoint``/``tangent``):

* ``tapegrad_kernel``: the forward, ``f(x)``. JVP rule: the tangent primitive.
* ``tapegrad_kernel_tangent``: ``J(x) u`` (the kernel's tangent build, ``<symbol>_tan``),
  linear in ``u``. Transpose: the adjoint primitive. JVP in ``x`` (forward over forward):
  ``d²f[u, v]``, one tangent-of-adjoint launch per output element (a batched launch over an
  identity basis: exact, but its cost grows with the output size; past
  ``FORWARD_OVER_FORWARD_MAX`` output elements it raises, naming forward over reverse).
* ``tapegrad_kernel_adjoint``: ``J(x)ᵀ w`` (the kernel's adjoint), linear in ``w``.
  Transpose: the tangent primitive. JVP: the tangent-of-adjoint primitive.
* ``tapegrad_kernel_tangent_adjoint``: ``J(x)ᵀ ẇ + (Σ_k w_k ∇²f_k(x)) u`` (the kernel's
  forward-over-reverse build, ``<symbol>_tan2``), linear in ``(u, ẇ)``. Transpose: the
  tangent primitive for ``ẇ`` and itself for ``u`` (the weighted Hessian is symmetric).
  Its JVP (third derivatives) raises, naming the kernel.

So ``jax.jvp``, ``grad``/``vjp``, ``jacfwd``, ``jacrev``, ``hessian`` and
``check_grads(order=2)`` compose. Batching (``vmap``): every primitive takes operands with
leading batch dims (``batch``, right-aligned; a missing or size-1 dim broadcasts) and the
handler runs one launch per batch element, so a batched call equals the stack of unbatched
ones under every transform.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core
from jax.interpreters import ad, batching, mlir

from tapegrad.lang.typeutil import float_based

from . import plan as ffi_plan
from .convert import dtype_to_jax, jax_scalar

__all__ = ["FORWARD_OVER_FORWARD_MAX", "KernelCall", "bind_forward", "forward_p", "tangent_p", "adjoint_p",
           "tangent_adjoint_p"]

FORWARD_OVER_FORWARD_MAX = 4096   # output elements: one launch each (and an m x m basis)
_MODE_WRITE_PRIMAL = 1   # the tangent entry writes the primal outputs too (tapegrad.launch.tangent.MODE_WRITE_PRIMAL)


@dataclass(frozen=True)
class KernelCall:
    """The static facts of one differentiable call (a primitive parameter).

    Attributes:
        op: the ``JaxKernel``. statics: ``((param index, packed bytes), ...)``.
        grid: the launch grid. in_shapes / in_dtypes: the unbatched shapes and JAX dtypes of
        the array inputs. shapes: the unbatched output shapes (framework dims). vm: vmap method.
    """

    op: object
    statics: tuple
    grid: tuple
    in_shapes: tuple
    in_dtypes: tuple
    shapes: tuple
    vm: str

    # ------------------------------------------------------------------ structure
    @property
    def sig(self):
        return self.op.sig

    def arrays(self):
        """``[(param, array operand index)]`` of the array inputs."""
        out, k = [], 0
        for p in self.sig.inputs:
            if p.is_array:
                out.append((p, k))
                k += 1
        return out

    def diff_inputs(self):
        """Array operand indices of the float (differentiable) array inputs."""
        return [k for p, k in self.arrays() if p.is_differentiable]

    def diff_outputs(self):
        """Output indices of the float outputs (the others have no tangent)."""
        return list(self.sig.float_outputs)

    def out_dtype(self, j):
        return dtype_to_jax(self.sig.outputs[j].dtype)

    def label(self):
        return self.op.label


def _ranks(prim, call):
    """The unbatched rank of each operand of ``prim``."""
    xs = [len(s) for s in call.in_shapes]
    us = [len(call.in_shapes[k]) for k in call.diff_inputs()]
    ws = [len(call.shapes[j]) for j in call.diff_outputs()]
    if prim is forward_p:
        return xs
    if prim is tangent_p:
        return xs + us
    if prim is adjoint_p:
        return xs + ws
    return xs + ws + us + ws


def _out_avals(prim, call):
    """``[(unbatched shape, dtype)]`` of ``prim``'s results."""
    if prim is forward_p:
        return [(tuple(s), call.out_dtype(j)) for j, s in enumerate(call.shapes)]
    if prim is tangent_p:
        return [(tuple(call.shapes[j]), call.out_dtype(j)) for j in call.diff_outputs()]
    return [(tuple(call.in_shapes[k]), call.in_dtypes[k]) for k in call.diff_inputs()]


# ------------------------------------------------------------------------ FFI calls
def _value_tangent(p, value):
    """The tangent slot of a static value: zero for float values (constants), the value itself
    for ints and structs (the tangent entry reads only the primal of those)."""
    t = p.type
    if float_based(t) and not hasattr(t, "fields"):
        return ffi_plan.Slot(ffi_plan.VALUE, f"tan_{p.name}", value=bytes(len(value)))
    return ffi_plan.Slot(ffi_plan.VALUE, f"tan_{p.name}", value=value)


def _tangent_slots(call, u_base, xla_of):
    """The tangents of the arguments: the differentiable arrays' from operand ``u_base`` on."""
    din, statics, slots = call.diff_inputs(), dict(call.statics), []
    for p in call.sig.inputs:
        if not p.is_array:
            slots.append(_value_tangent(p, statics[p.index]))
            continue
        k = _arg_index(call, p)
        dims = tuple(call.in_shapes[k])[:p.type.ndim]
        slots.append(ffi_plan.Slot(ffi_plan.IN, f"tan_{p.name}", arg=u_base + din.index(k), dtype=p.dtype, dims=dims,
                                   xla=xla_of(k)) if k in din else
                     ffi_plan.Slot(ffi_plan.NULL_ARRAY, f"tan_{p.name}", dtype=p.dtype, dims=dims))
    return slots


def _primal_inputs(call, xla_of):
    slots = []
    for p in call.sig.inputs:
        if p.is_array:
            k = _arg_index(call, p)
            slots.append(ffi_plan.Slot(ffi_plan.IN, p.name, arg=k, dtype=p.dtype,
                                       dims=tuple(call.in_shapes[k])[:p.type.ndim], xla=xla_of(k)))
        else:
            slots.append(ffi_plan.Slot(ffi_plan.VALUE, p.name, value=dict(call.statics)[p.index]))
    return slots


def _arg_index(call, p):
    for q, k in call.arrays():
        if q.index == p.index:
            return k
    raise AssertionError(p)


def _out_dims(call, j):
    p = call.sig.outputs[j]
    return tuple(call.shapes[j])[:p.type.ndim]


def _mode(m):
    return ffi_plan.Slot(ffi_plan.VALUE, "tg_mode", value=np.int32(m).tobytes())


def _run(call, slots, operands, results, batch, adjoint, tangent):
    """Run one FFI call: ``results`` are unbatched ``(shape, dtype)``, given ``batch`` dims."""
    if batch and call.op.kernel.mode() == "debug" and not tangent:
        return _run_debug_batched(call, slots, operands, results, batch, adjoint)
    res = [(tuple(batch) + tuple(s), d) for s, d in results]
    fn, addr = call.op.ffi_call(slots, list(operands), res, call.grid, adjoint, call.vm, None, tangent)
    return fn(*operands, tapegrad_plan=addr)


def _run_debug_batched(call, slots, operands, results, batch, adjoint):
    """Debug mode's host callback takes unbatched buffers: the batch, broadcast and flattened,
    goes through ``vmap`` (the callback runs one checked launch per element)."""
    base = {}
    for s in slots:
        if s.kind in (ffi_plan.IN, ffi_plan.INOUT):
            base[s.arg] = tuple(s.dims) + tuple(s.dtype.inner_shape)
    nb = math.prod(batch)
    flat = [jnp.broadcast_to(o, tuple(batch) + base[k]).reshape((nb,) + base[k]) for k, o in enumerate(operands)]
    fn, addr = call.op.ffi_call(slots, flat, list(results), call.grid, adjoint, call.vm, None, 0)
    outs = jax.vmap(lambda *ops: fn(*ops, tapegrad_plan=addr))(*flat)
    return [o.reshape(tuple(batch) + tuple(s)) for o, (s, _) in zip(outs, results)]


def _xla(operands):
    return lambda k: ffi_plan.xla_dtype(jax_scalar(operands[k].dtype))


def _forward_impl(*xs, call, batch):
    slots = _primal_inputs(call, _xla(xs))
    for j, p in enumerate(call.sig.outputs):
        slots.append(ffi_plan.Slot(ffi_plan.OUT, p.name, ret=j, dtype=p.dtype, dims=_out_dims(call, j)))
    return _run(call, slots, xs, _out_avals(forward_p, call), batch, False, 0)


def _tangent_impl(*ops, call, batch):
    n_arr = len(call.in_shapes)
    xs, us = ops[:n_arr], ops[n_arr:]
    dout = call.diff_outputs()
    slots = _primal_inputs(call, _xla(ops))
    # the primal outputs: scratch results the entry also writes (mode 1), so the kernel reads
    # back what it stored exactly as its forward does
    for j, p in enumerate(call.sig.outputs):
        slots.append(ffi_plan.Slot(ffi_plan.OUT, p.name, ret=len(dout) + j, dtype=p.dtype, dims=_out_dims(call, j)))
    slots += _tangent_slots(call, n_arr, _xla(ops))
    for j, p in enumerate(call.sig.outputs):
        kind = ffi_plan.OUT if j in dout else ffi_plan.NULL_ARRAY
        slots.append(ffi_plan.Slot(kind, f"tan_{p.name}", ret=dout.index(j) if j in dout else -1, dtype=p.dtype,
                                   dims=_out_dims(call, j)))
    slots.append(_mode(_MODE_WRITE_PRIMAL))
    results = _out_avals(tangent_p, call) + [(tuple(s), call.out_dtype(j)) for j, s in enumerate(call.shapes)]
    got = _run(call, slots, list(xs) + list(us), results, batch, False, 1)
    return got[:len(dout)]


def _adjoint_slots(call, n_arr, w_base, ret_base, what):
    """The adjoint-array slots (``what``: "adj" or "tanadj"): input gradients as results from
    ``ret_base``, output cotangents in-out from operand ``w_base``."""
    din, dout = call.diff_inputs(), call.diff_outputs()
    slots = []
    statics = dict(call.statics)
    for p in call.sig.inputs:
        if p.is_array:
            k = _arg_index(call, p)
            dims = tuple(call.in_shapes[k])[:p.type.ndim]
            if k in din:
                slots.append(ffi_plan.Slot(ffi_plan.OUT, f"{what}_{p.name}", ret=ret_base + din.index(k),
                                           dtype=p.dtype, dims=dims))
            else:
                slots.append(ffi_plan.Slot(ffi_plan.NULL_ARRAY, f"{what}_{p.name}", dtype=p.dtype, dims=dims))
        else:
            slots.append(ffi_plan.Slot(ffi_plan.NULL_VALUE, f"{what}_{p.name}",
                                       value=bytes(len(statics[p.index]))))
    for j, p in enumerate(call.sig.outputs):
        if j in dout:
            d = dout.index(j)
            slots.append(ffi_plan.Slot(ffi_plan.INOUT, f"{what}_{p.name}", arg=w_base + d,
                                       ret=ret_base + len(din) + d, dtype=p.dtype, dims=_out_dims(call, j)))
        else:
            slots.append(ffi_plan.Slot(ffi_plan.NULL_ARRAY, f"{what}_{p.name}", dtype=p.dtype,
                                       dims=_out_dims(call, j)))
    return slots


def _primal_outputs_in(call, n_arr):
    return [ffi_plan.Slot(ffi_plan.IN, p.name, arg=n_arr + j, dtype=p.dtype, dims=_out_dims(call, j))
            for j, p in enumerate(call.sig.outputs)]


def _cast(ws, call):
    return [w.astype(call.out_dtype(j)) if w.dtype != call.out_dtype(j) else w
            for w, j in zip(ws, call.diff_outputs())]


def _adjoint_impl(*ops, call, batch):
    n_arr = len(call.in_shapes)
    xs, ws = list(ops[:n_arr]), _cast(ops[n_arr:], call)
    outs = list(_forward_impl(*xs, call=call, batch=batch))
    n_out = len(outs)
    slots = _primal_inputs(call, _xla(xs)) + _primal_outputs_in(call, n_arr)
    slots += _adjoint_slots(call, n_arr, n_arr + n_out, 0, "adj")
    din = call.diff_inputs()
    results = _out_avals(adjoint_p, call) + [(tuple(call.shapes[j]), call.out_dtype(j)) for j in call.diff_outputs()]
    got = _run(call, slots, xs + outs + ws, results, batch, True, 0)
    return got[:len(din)]


def _tangent_adjoint_impl(*ops, call, batch):
    n_arr = len(call.in_shapes)
    din, dout = call.diff_inputs(), call.diff_outputs()
    xs = list(ops[:n_arr])
    ws = _cast(ops[n_arr:n_arr + len(dout)], call)
    us = list(ops[n_arr + len(dout):n_arr + len(dout) + len(din)])
    wdots = _cast(ops[n_arr + len(dout) + len(din):], call)
    outs = list(_forward_impl(*xs, call=call, batch=batch))
    n_out = len(outs)
    operands = xs + outs + ws + us + wdots
    slots = _primal_inputs(call, _xla(xs)) + _primal_outputs_in(call, n_arr)
    u_base = n_arr + n_out + len(dout)
    slots += _tangent_slots(call, u_base, _xla(xs))
    for j, p in enumerate(call.sig.outputs):   # the outputs' tangents are written, never needed here
        slots.append(ffi_plan.Slot(ffi_plan.NULL_ARRAY, f"tan_{p.name}", dtype=p.dtype, dims=_out_dims(call, j)))
    per = len(din) + len(dout)
    slots += _adjoint_slots(call, n_arr, n_arr + n_out, 0, "adj")
    slots += _adjoint_slots(call, n_arr, u_base + len(din), per, "tanadj")
    slots.append(_mode(0))
    avals = _out_avals(adjoint_p, call) + [(tuple(call.shapes[j]), call.out_dtype(j)) for j in dout]
    got = _run(call, slots, operands, avals + avals, batch, True, 2)
    return got[per:per + len(din)]


# ------------------------------------------------------------------------ primitives
def _primitive(name, impl):
    p = core.Primitive(name)
    p.multiple_results = True
    p.def_impl(impl)
    p.def_abstract_eval(lambda *avals, call, batch: _abstract(p, avals, call, batch))
    mlir.register_lowering(p, mlir.lower_fun(impl, multiple_results=True))
    return p


def _abstract(prim, avals, call, batch):
    mat = None
    for a in avals:
        m = getattr(a, "manual_axis_type", None)
        if m is not None and not getattr(m, "empty", True):
            mat, sharding = m, a.sharding
            break
    out = []
    for s, d in _out_avals(prim, call):
        shape = tuple(batch) + tuple(s)
        if mat is None:
            out.append(core.ShapedArray(shape, d))
        else:
            from jax.sharding import NamedSharding, PartitionSpec
            out.append(core.ShapedArray(shape, d, sharding=NamedSharding(sharding.mesh, PartitionSpec()),
                                        manual_axis_type=mat))
    return out


forward_p = _primitive("tapegrad_kernel", _forward_impl)
tangent_p = _primitive("tapegrad_kernel_tangent", _tangent_impl)
adjoint_p = _primitive("tapegrad_kernel_adjoint", _adjoint_impl)
tangent_adjoint_p = _primitive("tapegrad_kernel_tangent_adjoint", _tangent_adjoint_impl)


def bind_forward(call, arrays):
    """The outputs of the differentiable call ``call`` on the array inputs ``arrays``."""
    return forward_p.bind(*arrays, call=call, batch=())


# -------------------------------------------------------------------------- batching
def _batcher(prim):
    def rule(args, dims, *, call, batch):
        ranks = _ranks(prim, call)
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        new = []
        for a, d, r in zip(args, dims, ranks):
            if d is None:
                new.append(a)     # right-aligned: broadcast over the new leading batch dim
                continue
            a = jnp.moveaxis(a, d, 0)
            have = a.ndim - 1 - r
            if have < len(batch):   # pad the older batch dims with size 1 (broadcast)
                a = a.reshape(a.shape[:1] + (1,) * (len(batch) - have) + a.shape[1:])
            new.append(a)
        out = prim.bind(*new, call=call, batch=(size,) + tuple(batch))
        return out, [0] * len(out)
    batching.primitive_batchers[prim] = rule


for _p in (forward_p, tangent_p, adjoint_p, tangent_adjoint_p):
    _batcher(_p)


# ----------------------------------------------------------------------------- JVPs
def _inst(t, like):
    if type(t) is ad.Zero:
        return jnp.zeros(like.shape, like.dtype)
    return t


def _is_zero(t):
    return type(t) is ad.Zero


def _zero_like(x):
    return ad.Zero(jax.typeof(x).to_tangent_aval())


def _forward_jvp(primals, tangents, *, call, batch):
    outs = forward_p.bind(*primals, call=call, batch=batch)
    din, dout = call.diff_inputs(), call.diff_outputs()
    if all(_is_zero(tangents[k]) for k in din) or not dout:
        return outs, [_zero_like(o) for o in outs]
    us = [_inst(tangents[k], primals[k]) for k in din]
    touts = tangent_p.bind(*primals, *us, call=call, batch=batch)
    res = [_zero_like(o) for o in outs]
    for d, j in enumerate(dout):
        res[j] = touts[d]
    return outs, res


def _second_directional(call, batch, xs, us, vs):
    """``d²f[u, v]`` for every float output: one tangent-of-adjoint launch per output element
    (the rows of an identity basis as cotangents, batched), each dotted with ``v``."""
    dout = call.diff_outputs()
    sizes = [math.prod(call.shapes[j]) for j in dout]
    m = sum(sizes)
    if m > FORWARD_OVER_FORWARD_MAX:
        raise NotImplementedError(
            f"{call.label()}: a derivative of its forward-mode derivative in the inputs (forward over forward: jvp of "
            f"jvp, jacfwd of jacfwd, check_grads(modes=('fwd',), order=2)) takes one tangent-of-adjoint launch per "
            f"output element, and this call has {m} (> {FORWARD_OVER_FORWARD_MAX}); use forward over reverse "
            "instead: jax.jvp(jax.grad(f), ...) or jax.hessian (jacfwd of jacrev)")
    zeros_w = [jnp.zeros(call.shapes[j], call.out_dtype(j)) for j in dout]

    def one(e):
        ws, at = [], 0
        for j, s in zip(dout, sizes):
            ws.append(e[at:at + s].reshape(call.shapes[j]).astype(call.out_dtype(j)))
            at += s
        g = tangent_adjoint_p.bind(*xs, *ws, *us, *zeros_w, call=call, batch=batch)
        total = 0
        for gi, vi in zip(g, vs):
            axes = tuple(range(len(batch), gi.ndim))   # gi: batch + the input's shape
            total = total + jnp.sum(gi * vi, axis=axes)
        return total          # shape: batch

    rows = jax.vmap(one)(jnp.eye(m, dtype=zeros_w[0].dtype if zeros_w else jnp.float64))   # (m, *batch)
    rows = jnp.moveaxis(rows, 0, -1)                                                        # (*batch, m)
    out, at = [], 0
    for j, s in zip(dout, sizes):
        out.append(rows[..., at:at + s].reshape(tuple(batch) + tuple(call.shapes[j])))
        at += s
    return out


def _tangent_jvp(primals, tangents, *, call, batch):
    n_arr = len(call.in_shapes)
    din = call.diff_inputs()
    xs, us = primals[:n_arr], primals[n_arr:]
    dxs, dus = tangents[:n_arr], tangents[n_arr:]
    out = tangent_p.bind(*xs, *us, call=call, batch=batch)
    res = None
    if not all(_is_zero(t) for t in dus):
        res = tangent_p.bind(*xs, *[_inst(t, u) for t, u in zip(dus, us)], call=call, batch=batch)
    if not all(_is_zero(dxs[k]) for k in din):
        vs = [_inst(dxs[k], xs[k]) for k in din]
        sec = _second_directional(call, batch, xs, us, vs)
        res = sec if res is None else [a + b for a, b in zip(res, sec)]
    if res is None:
        return out, [_zero_like(o) for o in out]
    return out, [r.astype(o.dtype) for r, o in zip(res, out)]


def _adjoint_jvp(primals, tangents, *, call, batch):
    n_arr = len(call.in_shapes)
    din = call.diff_inputs()
    xs, ws = primals[:n_arr], primals[n_arr:]
    dxs, dws = tangents[:n_arr], tangents[n_arr:]
    out = adjoint_p.bind(*xs, *ws, call=call, batch=batch)
    if all(_is_zero(dxs[k]) for k in din):
        if all(_is_zero(t) for t in dws):
            return out, [_zero_like(o) for o in out]
        return out, adjoint_p.bind(*xs, *[_inst(t, w) for t, w in zip(dws, ws)], call=call, batch=batch)
    us = [_inst(dxs[k], xs[k]) for k in din]
    wd = [_inst(t, w) for t, w in zip(dws, ws)]
    return out, tangent_adjoint_p.bind(*xs, *ws, *us, *wd, call=call, batch=batch)


def _third_order(primals, tangents, *, call, batch):
    raise call.op.op.unsupported("third and higher derivatives (a derivative of the kernel's tangent-of-adjoint)")


ad.primitive_jvps[forward_p] = _forward_jvp
ad.primitive_jvps[tangent_p] = _tangent_jvp
ad.primitive_jvps[adjoint_p] = _adjoint_jvp
ad.primitive_jvps[tangent_adjoint_p] = _third_order


# ------------------------------------------------------------------------ transposes
def _fit(value, aval):
    """A cotangent computed at the call's batch shape, summed to ``aval``'s shape (an
    operand that broadcast over batch dims receives the sum over them)."""
    shape = tuple(aval.shape)
    if value.shape == shape:
        return value
    extra = value.ndim - len(shape)
    if extra > 0:
        value = jnp.sum(value, axis=tuple(range(extra)))
    axes = tuple(k for k, (a, b) in enumerate(zip(value.shape, shape)) if a != b and b == 1)
    if axes:
        value = jnp.sum(value, axis=axes, keepdims=True)
    return value.astype(aval.dtype)


def _known(call, xs, what):
    for x in xs:
        if ad.is_undefined_primal(x):
            raise NotImplementedError(f"{call.label()}: cannot transpose {what} with respect to the kernel's "
                                      "primal inputs (it is not linear in them)")


def _cts(cts, avals_like):
    return [jnp.zeros(a[0], a[1]) if _is_zero(c) else c for c, a in zip(cts, avals_like)]


def _transpose_into(prim, transposed_prim, what):
    """The transpose rule of ``prim``, linear in its arguments after the primal inputs: the
    tangent (``J u``) and the adjoint (``J^T w``) are each other's transposes, so the
    cotangent of ``prim``'s results goes through ``transposed_prim``."""
    def rule(cts, *args, call, batch):
        n_arr = len(call.in_shapes)
        xs, lin = args[:n_arr], args[n_arr:]
        _known(call, xs, what)
        if all(_is_zero(c) for c in cts):
            return [None] * len(args)
        shapes = [(tuple(batch) + s, d) for s, d in _out_avals(prim, call)]
        r = transposed_prim.bind(*xs, *_cts(cts, shapes), call=call, batch=batch)
        return [None] * n_arr + [_fit(ri, v.aval) if ad.is_undefined_primal(v) else None for ri, v in zip(r, lin)]
    return rule


def _tangent_adjoint_transpose(cts, *args, call, batch):
    n_arr = len(call.in_shapes)
    din, dout = call.diff_inputs(), call.diff_outputs()
    xs = args[:n_arr]
    ws = args[n_arr:n_arr + len(dout)]
    us = args[n_arr + len(dout):n_arr + len(dout) + len(din)]
    wdots = args[n_arr + len(dout) + len(din):]
    _known(call, list(xs) + list(ws), "the tangent of the adjoint")
    if all(_is_zero(c) for c in cts):
        return [None] * len(args)
    shapes = [(tuple(batch) + s, d) for s, d in _out_avals(adjoint_p, call)]
    c = _cts(cts, shapes)
    ct_u = [None] * len(us)
    ct_w = [None] * len(wdots)
    if any(ad.is_undefined_primal(u) for u in us):
        # (Σ_k w_k ∇²f_k) is symmetric: its transpose applied to c is the u-part with u = c
        zw = [jnp.zeros(tuple(batch) + tuple(call.shapes[j]), call.out_dtype(j)) for j in dout]
        h = tangent_adjoint_p.bind(*xs, *ws, *c, *zw, call=call, batch=batch)
        ct_u = [_fit(hi, u.aval) if ad.is_undefined_primal(u) else None for hi, u in zip(h, us)]
    if any(ad.is_undefined_primal(w) for w in wdots):
        t = tangent_p.bind(*xs, *c, call=call, batch=batch)
        ct_w = [_fit(ti, w.aval) if ad.is_undefined_primal(w) else None for ti, w in zip(t, wdots)]
    return [None] * (n_arr + len(ws)) + ct_u + ct_w


ad.primitive_transposes[tangent_p] = _transpose_into(tangent_p, adjoint_p, "the tangent")
ad.primitive_transposes[adjoint_p] = _transpose_into(adjoint_p, tangent_p, "the adjoint")
ad.primitive_transposes[tangent_adjoint_p] = _tangent_adjoint_transpose
