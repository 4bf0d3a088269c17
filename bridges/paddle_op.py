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

    def run(self, dev, args, outs, adj_ins=None, adj_outs=None):
        b = self.bridge
        stream = wrap_stream_handle(dev, b.stream_handle(dev.ordinal)) if dev.is_cuda else None
        self.sig.launch(args, outs, self.desc, dev, stream, adj_ins, adj_outs)

    # -------------------------------------------------------------------------- building
    def build(self):
        layer = self
        sig, arrays, diff = self.sig, self.arrays, self.diff
        n_in, n_out = len(sig.inputs), len(sig.outputs)
        out_dtypes = [self.bridge.dtypes.to_framework(p.dtype) for p in sig.outputs]
        int_outs = [not p.dtype.scalar.is_float for p in sig.outputs]

        def forward(ctx, *args):
            dev = layer.check_inputs(args)
            place = args[arrays[0]].place
            grid = sig.grid(args)
            shapes = sig.output_shapes(args, grid)
            sig.check_grid_fits(args, grid, shapes)   # no out-of-bounds writes from a too-large grid
            outs = [paddle.zeros(list(s), dtype=dt, device=place) for s, dt in zip(shapes, out_dtypes)]
            layer.run(dev, args, outs)
            ctx.save_for_backward(*[args[i] for i in arrays], *outs)
            ctx.tg_scalars = [None if i in arrays else a for i, a in enumerate(args)]
            ctx.tg_device = dev
            # paddle wants None for every input that had stop_gradient=True (plain tensors' default)
            ctx.tg_needs = {i for i in diff if not args[i].stop_gradient}
            for o, is_int in zip(outs, int_outs):
                if is_int:
                    ctx.mark_non_differentiable(o)
            return outs[0] if n_out == 1 else tuple(outs)

        def backward(ctx, *grads):
            saved = ctx.saved_tensor()
            args = list(ctx.tg_scalars)
            for k, i in enumerate(arrays):
                args[i] = saved[k]
            outs = saved[len(arrays):]
            gr = [g if g is not None else paddle.zeros_like(o) for g, o in zip(grads, outs)]
            needs = ctx.tg_needs
            adj = [paddle.zeros(list(args[i].shape), dtype=args[i].dtype, device=args[i].place) if i in needs
                   else None for i in range(n_in)]
            if not getattr(sig.kernel, "enable_backward", True):
                raise RuntimeError(f"{layer.label}: kernel '{sig.kernel.key}' was built with enable_backward=False, so "
                                   "it has no adjoint to differentiate through. Drop enable_backward=False (adjoints "
                                   "are generated by default), or set stop_gradient=True on its inputs")
            if needs:
                # an adjoint may write to output gradients (`out[i] += x` reads out[i]): give it copies
                layer.run(ctx.tg_device, args, list(outs), adj, [g.clone() for g in gr])
            # one gradient per tensor input, in order (None: no gradient: integer arrays, stop_gradient inputs)
            return tuple(adj[i] for i in arrays) if len(arrays) != 1 else adj[arrays[0]]

        cls = type(self.name, (PyLayer,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                           "__doc__": f"PyLayer of kernel '{sig.kernel.key}' (tg.paddle_op)"})

        def op(*args):
            # under paddle.jit.to_static's bytecode tracer (SOT) the op is opaque: it runs eagerly, as
            # native Python, between the traced subgraphs (a no-op call everywhere else)
            _sot_fallback(recursive=True)
            return cls.apply(*args)

        op.__name__ = op.__qualname__ = self.name
        op.__doc__ = cls.__doc__
        op.pylayer, op.kernel = cls, sig.kernel
        return op
