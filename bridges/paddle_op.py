"""A tapegrad kernel as a native, differentiable paddle op in one call (SPEC B2).

``paddle_op(kernel)`` builds a ``paddle.autograd.PyLayer`` whose forward launches the kernel
on new zero-initialised output tensors and whose backward launches the kernel's generated
adjoint: no hand-written forward or backward. Same options and semantics as ``torch_op``
(the checks, launches and derivative wiring are ``kernel_op.KernelOp``'s).

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

from ._base import Bridge
from ._op import op_builder
from .kernel_op import BACKWARD, BACKWARD_JVP, FORWARD, TANGENT, KernelOp, OpFramework, op_doc

__all__ = ["make_paddle_op"]


def make_paddle_op(bridge: Bridge):
    """The public ``paddle_op`` over the paddle ``bridge`` (``tapegrad.bridges.paddle`` calls this:
    the op module gets the conversions it needs as an argument, so it imports no bridge)."""
    fw = _framework(bridge)
    return op_builder("paddle_op", "tapegrad.bridges.paddle", _DOC,
                      lambda *config: _PaddleOp(fw, *config).build(),
                      scalar_of=lambda t: bridge.dtypes.lookup(getattr(t, "dtype", None)))


_DOC = op_doc(
    "a differentiable paddle op (a ``paddle.autograd.PyLayer``)", "paddle tensors", "``[n, 2]``", "",
    """name: a name for the PyLayer class (default ``"<kernel>_op"``).""",
    """A function ``op(*args)`` running the PyLayer; ``op.pylayer`` is the class,
        ``op.kernel`` the kernel.""", """ Only trainable
    (``stop_gradient=False``) float arrays get gradients (the others get None, as paddle requires).""",
    "paddle", """
        RuntimeError: called while paddle builds a static graph (``to_static(full_graph=True)``,
            ``paddle.static``): static-graph variables have no memory.""")


class _PaddleOp:
    """The PyLayer half of ``paddle_op``: one PyLayer per node (``_Layer``) whose backward is the
    ``KernelOp``'s wiring, so gradients are PyLayers too and differentiate again."""

    def __init__(self, fw, kernel, num_outputs, launch_dims, output_dims, name):
        self.kop = KernelOp(fw, kernel, num_outputs, launch_dims=launch_dims, output_dims=output_dims)
        self.name = name or f"{self.kop.sig.kernel_name}_op"

    def build(self):
        kop = self.kop
        layers: dict = {}

        def apply(node, *vals):
            return layers[node].apply(*vals)

        def launch(node):
            def run(vals):
                if node == FORWARD and not paddle.in_dynamic_mode():
                    raise RuntimeError(f"{kop.label}: called while paddle builds a static graph (paddle.jit.to_static "
                                       "with full_graph=True, or paddle.static): its variables have no memory for the "
                                       "kernel; use to_static's default mode (full_graph=False), which runs the op "
                                       "eagerly, or dygraph")
                return kop.launch_node(node, vals)
            return run

        def grads(node):
            def vjp(vals, outs, needs, cts):
                # a backward launch reads the forward's values, not a graph through them
                outs = [o.detach() for o in outs] if node == FORWARD else outs
                return kop.vjp(node, vals, outs, cts, needs.__contains__, apply)
            return vjp

        int_outs = [k for k in range(kop.n_out) if k not in kop.fout]
        in_names = [p.name for p in kop.sig.inputs]

        def describe(pos):
            # a node's flat arguments start with the op's inputs (KernelOp.split)
            return f"{kop.label} argument '{in_names[pos]}'" if pos < len(in_names) else \
                f"{kop.label} (a derivative's argument {pos})"
        suffixes = ((FORWARD, ""), (BACKWARD, "_backward"), (TANGENT, "_jvp"), (BACKWARD_JVP, "_backward_jvp"))
        for node, suffix in suffixes:
            layers[node] = _Layer(self.name + suffix, launch(node), grads(node), int_outs if node == FORWARD else (),
                                  f"PyLayer {self.name + suffix} of kernel '{kop.kernel.key}' (tg.paddle_op)",
                                  describe)
        forward, cls = layers[FORWARD], layers[FORWARD].cls

        def op(*args):
            # under paddle.jit.to_static's bytecode tracer (SOT) the op is opaque: it runs eagerly, as
            # native Python, between the traced subgraphs (a no-op call everywhere else)
            _sot_fallback(recursive=True)
            # before the PyLayer: its forward runs with gradients off, where no tensor looks differentiated
            kop.sig.check_value_tensors(args, kop.fw)
            return forward.apply(*args)

        op.__name__ = op.__qualname__ = self.name
        op.__doc__ = cls.__doc__
        op.pylayer, op.kernel = cls, kop.kernel
        return op


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

    def __init__(self, name, forward_fn, grads_fn, int_outs=(), doc=None, describe=None):
        describe = describe or (lambda pos: f"{name} argument {pos}")

        def forward(ctx, tensors, layout):
            where, other = layout
            vals = list(other)
            for i, t in zip(where, tensors):
                vals[i] = t
            outs = forward_fn(vals)
            ctx.save_for_backward(*tensors, *outs)
            # paddle checks the inplace versions of what its own ops save, not of what a PyLayer
            # saves: backward compares them itself (a silently wrong gradient otherwise)
            ctx.tg_versions = [t._inplace_version() for t in (*tensors, *outs)]
            ctx.tg_layout = layout
            ctx.tg_needs = {i for i, t in zip(where, tensors) if not t.stop_gradient}
            for k in int_outs:
                ctx.mark_non_differentiable(outs[k])
            return outs[0] if len(outs) == 1 else tuple(outs)

        def backward(ctx, *grads):
            saved = ctx.saved_tensor()
            where, other = ctx.tg_layout
            _check_versions(name, describe, saved, ctx.tg_versions, where)
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


def _check_versions(name, describe, saved, versions, where) -> None:
    """Raise RuntimeError when a tensor a layer saved (its tensor arguments at positions ``where``,
    then its outputs) was modified in place after the forward, as paddle's own ops do: the
    backward would read the new values."""
    for k, (t, v) in enumerate(zip(saved, versions)):
        now = t._inplace_version()
        if now != v:
            what = describe(where[k]) if k < len(where) else f"{name}: output {k - len(where)}"
            raise RuntimeError(f"{what} was modified by an inplace operation after the forward (inplace version "
                               f"{now}, expected {v}): its gradient would be computed from the new values. Modify a "
                               "clone, or call the op again after the change")


# ------------------------------------------------------------------ the framework's part of KernelOp

def _framework(bridge: Bridge) -> OpFramework:
    dt = bridge.dtypes
    return OpFramework(
        who="paddle_op", tensor_name="paddle tensor", is_tensor=lambda t: isinstance(t, paddle.Tensor),
        scalar_of=lambda t: dt.lookup(t.dtype), dtype_name=lambda t: str(t.dtype),
        detach_hint="set stop_gradient=True on its inputs",
        device_of=lambda t: bridge.devices.from_framework(t.place),
        zeros=lambda shape, dtype, like: paddle.zeros(list(shape), dtype=dt.to_framework(dtype), device=like.place),
        zeros_like=lambda t: paddle.zeros(list(t.shape), dtype=t.dtype, device=t.place),
        copy=lambda t: t.clone(), contiguous=lambda t: t.contiguous(), framework_dtype=dt.to_framework,
        layout=lambda t, dtype, label: bridge.layout(t, dtype, fname=label),
        stream_handle=bridge.stream_handle, in_autodiff=lambda t: not t.stop_gradient and paddle.is_grad_enabled())
