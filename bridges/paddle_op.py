"""A tapegrad kernel as a native, differentiable paddle op in one call (SPEC B2).

``paddle_op(kernel)`` builds a ``paddle.autograd.PyLayer`` whose forward launches the kernel
on new zero-initialised output tensors and whose backward launches the kernel's generated
adjoint: no hand-written forward or backward. Same options and semantics as ``torch_op``
(the signature, grid, output shapes and argument checks are ``_op.KernelSignature``'s).

Works in eager mode, under ``loss.backward()`` and ``paddle.grad``, and inside functions
compiled by ``paddle.jit.to_static`` in its default (SOT, ``full_graph=False``) mode, where it
runs eagerly between the traced subgraphs. With ``full_graph=True`` (whole-program static
graphs) it raises a RuntimeError saying why: the kernel needs the tensors' memory, which
static-graph variables do not have (see docs/paddle.md).
"""
from __future__ import annotations

import paddle
from paddle.autograd import PyLayer
from paddle.jit.sot.psdb import fallback as _sot_fallback

from tapegrad import types

from ._base import Bridge, wrap_stream_handle
from ._op import KernelSignature, op_builder

__all__ = ["make_paddle_op"]


def make_paddle_op(bridge: Bridge):
    """The public ``paddle_op`` over the paddle ``bridge`` (``tapegrad.bridges.paddle`` calls this:
    the op module gets the conversions it needs as an argument, so it imports no bridge)."""
    return op_builder("paddle_op", "tapegrad.bridges.paddle", _DOC,
                      lambda *config: _KernelLayer(bridge, *config).build(),
                      scalar_of=lambda t: bridge.dtypes.lookup(getattr(t, "dtype", None)))


_DOC = """Turn ``kernel`` into a differentiable paddle op (a ``paddle.autograd.PyLayer``).

    The op's arguments are the kernel's first ``len(params) - num_outputs`` parameters, in
    order: array parameters take paddle tensors (vector/matrix dtypes: trailing component
    dims, e.g. ``[n, 2]`` for ``vec2``), scalar parameters take Python numbers
    (vector/matrix values: a list). The last ``num_outputs`` parameters (arrays) become the
    op's results: new zero-initialised tensors, one tensor (or a tuple for several outputs).

    Args:
        kernel: a ``@tg.kernel``.
        num_outputs: how many trailing kernel parameters are outputs (>= 1).
        launch_dims: the launch grid: an int, a tuple, or a function of the op's arguments
            returning one. Default: the tapegrad shape of the first array argument
            (component dims removed).
        output_dims: output shapes (tapegrad shapes, component dims are added): an int, a
            tuple or a function of the op's arguments (same for all outputs), or a dict
            ``{output name: any of those}``. Default: the launch grid.
        name: a name for the PyLayer class (default ``"<kernel>_op"``).

    Returns:
        A function ``op(*args)`` running the PyLayer; ``op.pylayer`` is the class,
        ``op.kernel`` the kernel. Building the same configuration twice returns the same op.

    The backward computes gradients for the float array arguments with
    ``stop_gradient=False`` (the others get None, as paddle requires) by launching the adjoint
    with zero-initialised input gradients and the incoming output gradients; integer arguments
    and scalars get none. On CUDA the
    op runs on paddle's current stream. Outputs are float unless the kernel's are not
    (integer outputs are marked non-differentiable).

    Raises:
        TypeError: struct parameters; an output parameter that is not an array; a kernel
            with no array argument. Calls: a wrong number of arguments, a non-tensor for an
            array parameter, dtype or dims that do not fit (naming the argument).
        ValueError: ``num_outputs`` out of range, or an unknown name in ``output_dims``.
        RuntimeError: called while paddle builds a static graph (``to_static(full_graph=True)``,
            ``paddle.static``): static-graph variables have no memory.
    """


class _KernelLayer:
    """The PyLayer half of ``paddle_op``; the kernel's signature is a ``KernelSignature``."""

    def __init__(self, bridge, kernel, num_outputs, launch_dims, output_dims, name):
        self.bridge = bridge
        sig = self.sig = KernelSignature.of(kernel, num_outputs, launch_dims=launch_dims, output_dims=output_dims,
                                            who="paddle_op")
        for p in sig.inputs:
            if isinstance(p.type, types.StructType):
                raise TypeError(f"paddle_op: parameter '{p.name}' of kernel '{kernel.key}' is a struct, which a "
                                "paddle op cannot take (pass its fields)")
        self.arrays = list(sig.array_inputs)
        sig.first_array()   # raises for kernels with no array input
        self.diff = list(sig.differentiable)
        self.fout = [k for k, p in enumerate(sig.outputs) if p.is_differentiable]   # float outputs
        self.out_dtypes = [bridge.dtypes.to_framework(p.dtype) for p in sig.outputs]
        self.label = f"paddle_op({sig.kernel_name})"
        self.name = name or f"{sig.kernel_name}_op"

    # -------------------------------------------------------------------------- checking
    def check_inputs(self, args):
        sig, b = self.sig, self.bridge
        if not paddle.in_dynamic_mode():
            raise RuntimeError(f"{self.label}: called while paddle builds a static graph (paddle.jit.to_static with "
                               "full_graph=True, or paddle.static): its variables have no memory for the kernel; use "
                               "to_static's default mode (full_graph=False), which runs the op eagerly, or dygraph")
        sig.check_tensors(args, self.label, paddle.Tensor, "paddle", b.dtypes)
        dev = b.devices.from_framework(args[self.arrays[0]].place)
        for i in self.arrays[1:]:
            d = b.devices.from_framework(args[i].place)
            if d is not dev:
                raise ValueError(f"{self.label} argument '{self.sig.inputs[i].name}': expected a tensor on {dev} "
                                 f"(like '{self.sig.inputs[self.arrays[0]].name}'), got one on {d}")
        return dev

    # ------------------------------------------------------------------------- launching
    def desc(self, t, p, device):
        if p.inner_shape and not t.is_contiguous():
            t = t.contiguous()   # component dims must be contiguous: the op is functional, copy
        return self.bridge.layout(t, p.dtype, fname=self.label).new_ctype(t.data_ptr(), 0, (t,))

    def run(self, dev, args, outs, adj_ins=None, adj_outs=None, **tangents):
        b = self.bridge
        stream = wrap_stream_handle(dev, b.stream_handle(dev.ordinal)) if dev.is_cuda else None
        self.sig.launch(args, outs, self.desc, dev, stream, adj_ins, adj_outs, **tangents)

    def new_outputs(self, args):
        place = args[self.arrays[0]].place
        return [paddle.zeros(list(s), dtype=dt, device=place) for s, dt in zip(self.sig.output_shapes(args),
                                                                                self.out_dtypes)]

    def zeros_like_diff(self, args):
        return [paddle.zeros(list(args[i].shape), dtype=args[i].dtype, device=args[i].place) if i in self.diff
                else None for i in range(len(self.sig.inputs))]

    def full_tangents(self, tans):
        full = [None] * len(self.sig.inputs)
        for i, t in zip(self.diff, tans):
            full[i] = t
        return full

    # the four launches (y = f(x), J its Jacobian, H_k the Hessian of output k)
    def launch_forward(self, dev, args):
        outs = self.new_outputs(args)
        self.run(dev, args, outs)
        return outs

    def launch_backward(self, dev, args, outs, gouts):
        """J^T g, per differentiable input."""
        adj = self.zeros_like_diff(args)
        # an adjoint may write to output gradients (`out[i] += x` reads out[i]): give it copies
        self.run(dev, args, list(outs), adj, [g.clone() for g in gouts])
        return [adj[i] for i in self.diff]

    def launch_tangent(self, dev, args, tans):
        """J t, per float output."""
        outs = self.new_outputs(args)
        touts = [paddle.zeros_like(o) if k in self.fout else None for k, o in enumerate(outs)]
        self.run(dev, args, outs, tan_ins=self.full_tangents(tans), tan_outs=touts)
        return [touts[k] for k in self.fout]

    def launch_backward_jvp(self, dev, args, outs, gouts, tans, tgouts):
        """sum_k g_k H_k t + J^T tg, per differentiable input (the tangent-of-adjoint launch)."""
        adj = self.zeros_like_diff(args)
        tadj = [paddle.zeros_like(a) if a is not None else None for a in adj]
        self.run(dev, args, list(outs), adj, [g.clone() for g in gouts], tan_ins=self.full_tangents(tans),
                 tan_outs=None, tan_adj_ins=tadj,
                 tan_adj_outs=[t.clone() if t is not None else None for t in tgouts])
        return [tadj[i] for i in self.diff]

    # -------------------------------------------------------------------------- building
    def build(self):
        layer = self
        sig, arrays, diff, fout = self.sig, self.arrays, self.diff, self.fout
        n_in, n_out = len(sig.inputs), len(sig.outputs)
        kname = sig.kernel.key

        def device(vals):
            return layer.bridge.devices.from_framework(vals[arrays[0]].place)

        def fail(what):
            return NotImplementedError(
                f"{layer.label} (kernel '{kname}'): {what} is not supported: a kernel op has derivatives up to "
                "second order (tangent and tangent-of-adjoint launches)")

        def full_grads(ws, args):
            """One incoming gradient per output from one per float output (None: zero)."""
            zeros = layer.new_outputs(args)
            it = iter(ws)
            full = []
            for k in range(n_out):
                w = next(it) if k in fout else None
                full.append(w if w is not None else zeros[k])
            return full

        # -- y = f(x)
        def fwd(vals):
            dev = layer.check_inputs(vals)
            grid = sig.grid(vals)
            sig.check_grid_fits(vals, grid, sig.output_shapes(vals, grid))   # no out-of-bounds writes
            return layer.launch_forward(dev, vals)

        def fwd_grads(vals, outs, needs, grads):
            if not getattr(sig.kernel, "enable_backward", True):
                raise RuntimeError(f"{layer.label}: kernel '{kname}' was built with enable_backward=False, so "
                                   "it has no adjoint to differentiate through. Drop enable_backward=False (adjoints "
                                   "are generated by default), or set stop_gradient=True on its inputs")
            if not needs:
                return {}
            gr = [g if g is not None else paddle.zeros_like(o) for g, o in zip(grads, outs)]
            r = backward_layer.apply(*vals, *[o.detach() for o in outs], *gr)
            return dict(zip(diff, _as_list(r)))

        # -- (x, y, g) -> J^T g
        def bwd(vals):
            return layer.launch_backward(device(vals), vals[:n_in], vals[n_in:n_in + n_out], vals[n_in + n_out:])

        def bwd_grads(vals, _res, needs, cs):
            args, outs, gouts = vals[:n_in], vals[n_in:n_in + n_out], vals[n_in + n_out:]
            cs = [c if c is not None else paddle.zeros_like(args[i]) for c, i in zip(cs, diff)]
            out = {}
            if any(i in needs for i in diff):
                r = backward_jvp_layer.apply(*args, *outs, *gouts, *cs, *([None] * n_out))
                out.update(zip(diff, _as_list(r)))
            if any(n_in + n_out + k in needs for k in fout):
                r = tangent_layer.apply(*args, *cs)
                out.update(zip([n_in + n_out + k for k in fout], _as_list(r)))
            return out

        # -- (x, t) -> J t
        def tan(vals):
            return layer.launch_tangent(device(vals), vals[:n_in], vals[n_in:])

        def tan_grads(vals, _res, needs, ws):
            args, tans = vals[:n_in], vals[n_in:]
            outs, gouts = layer.new_outputs(args), full_grads(ws, args)
            out = {}
            if any(n_in + j in needs for j in range(len(diff))):
                r = backward_layer.apply(*args, *outs, *gouts)
                out.update(zip([n_in + j for j in range(len(diff))], _as_list(r)))
            if any(i in needs for i in diff):
                r = backward_jvp_layer.apply(*args, *outs, *gouts, *tans, *([None] * n_out))
                out.update(zip(diff, _as_list(r)))
            return out

        # -- (x, y, g, t, tg) -> sum_k g_k H_k t + J^T tg
        a = n_in + 2 * n_out

        def bjvp(vals):
            return layer.launch_backward_jvp(device(vals), vals[:n_in], vals[n_in:n_in + n_out],
                                             vals[n_in + n_out:a], vals[a:a + len(diff)], vals[a + len(diff):])

        def bjvp_grads(vals, _res, needs, ws):
            if any(i in needs for i in diff):
                raise fail("a third-order derivative (the derivative of a Hessian-vector product with respect "
                           "to the op's inputs)")
            if any(n_in + n_out + k in needs for k in fout):
                raise fail("the derivative of a Hessian-vector product with respect to the incoming gradient")
            args, outs, gouts = vals[:n_in], vals[n_in:n_in + n_out], vals[n_in + n_out:a]
            ws = [w if w is not None else paddle.zeros_like(args[i]) for w, i in zip(ws, diff)]
            out = {}
            if any(a + j in needs for j in range(len(diff))):   # H symmetric: H[g] w
                r = backward_jvp_layer.apply(*args, *outs, *gouts, *ws, *([None] * n_out))
                out.update(zip([a + j for j in range(len(diff))], _as_list(r)))
            if any(a + len(diff) + k in needs for k in fout):   # J w
                r = tangent_layer.apply(*args, *ws)
                out.update(zip([a + len(diff) + k for k in fout], _as_list(r)))
            return out

        int_outs = [k for k in range(n_out) if k not in fout]
        forward_layer = _Layer(self.name, fwd, fwd_grads, int_outs, f"PyLayer of kernel '{kname}' (tg.paddle_op)")
        backward_layer = _Layer(self.name + "_backward", bwd, bwd_grads)
        tangent_layer = _Layer(self.name + "_jvp", tan, tan_grads)
        backward_jvp_layer = _Layer(self.name + "_backward_jvp", bjvp, bjvp_grads)
        cls = forward_layer.cls

        def op(*args):
            # under paddle.jit.to_static's bytecode tracer (SOT) the op is opaque: it runs eagerly, as
            # native Python, between the traced subgraphs (a no-op call everywhere else)
            _sot_fallback(recursive=True)
            return forward_layer.apply(*args)

        op.__name__ = op.__qualname__ = self.name
        op.__doc__ = cls.__doc__
        op.pylayer, op.kernel = cls, sig.kernel
        return op


def _as_list(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


class _Layer:
    """A PyLayer over a function of mixed values (tensors, None, numbers): ``forward_fn(values) ->
    [outputs]``; ``grads_fn(values, outputs, needs, output grads) -> {value position: gradient}``
    (``needs``: positions of the tensors with ``stop_gradient=False``). Gradients are computed by
    other such layers, so they can be differentiated again (``create_graph=True``).

    The PyLayer takes every tensor in ONE list argument, trainable ones first: paddle's partial
    ``paddle.grad(..., inputs)`` prunes the edges of a layer with several tensor arguments that do
    not lead to the requested inputs and then wants None there, which a PyLayer cannot know; a
    single argument is never pruned (the gradients paddle does not need are dropped), and paddle
    checks only its first tensor, which is trainable whenever backward runs.
    """

    def __init__(self, name, forward_fn, grads_fn, int_outs=(), doc=None):
        def forward(ctx, tensors, layout):
            where, other = layout
            vals = list(other)
            for i, t in zip(where, tensors):
                vals[i] = t
            outs = forward_fn(vals)
            ctx.save_for_backward(*tensors, *outs)
            ctx.tg_layout = layout
            ctx.tg_needs = {i for i, t in zip(where, tensors) if not t.stop_gradient}
            for k in int_outs:
                ctx.mark_non_differentiable(outs[k])
            return outs[0] if len(outs) == 1 else tuple(outs)

        def backward(ctx, *grads):
            saved = ctx.saved_tensor()
            where, other = ctx.tg_layout
            vals = list(other)
            for i, t in zip(where, saved):
                vals[i] = t
            outs = saved[len(where):]
            needs = ctx.tg_needs
            got = grads_fn(vals, outs, needs, list(grads)) if needs else {}
            return [got.get(i) if i in needs else None for i in where]

        self.cls = type(name, (PyLayer,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                           "__doc__": doc or f"PyLayer {name} (tg.paddle_op)"})

    def apply(self, *vals):
        where = [i for i, v in enumerate(vals) if isinstance(v, paddle.Tensor)]
        where.sort(key=lambda i: vals[i].stop_gradient)   # trainable first (stable)
        other = tuple(None if isinstance(v, paddle.Tensor) else v for v in vals)
        return self.cls.apply([vals[i] for i in where], (tuple(where), other))
