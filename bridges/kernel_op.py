"""The one lifecycle of "a kernel as a framework op": ``torch_op``, ``paddle_op`` and ``jax_kernel``
register into it (the shape of torch's ``torch/_library/autograd.py`` ``make_autograd_impl``: one
generic wrapper, the framework supplying only what differs).

``KernelOp`` owns, for every framework:

- the checks of a call and their wording (``KernelSignature.prepare``: arguments, grid, output
  shapes, the grid-fits check), the output allocation and the four launches over ``y = f(x)``
  with Jacobian ``J`` and per-output Hessians ``H_k``:

  ================  ==============================  ======================================
  node              value                            launch
  ================  ==============================  ======================================
  ``FORWARD``       ``y = f(x)``                     forward, outputs zeroed first
  ``BACKWARD``      ``J^T g``                        adjoint (input gradients zeroed,
                                                     output gradients copied: it may write them)
  ``TANGENT``       ``J t``                          tangent (output tangents zeroed)
  ``BACKWARD_JVP``  ``sum_k g_k H_k t + J^T tg``     tangent of the adjoint
  ================  ==============================  ======================================

- the derivative wiring: which node gives each derivative of each node (``vjp`` for reverse
  mode, ``jvp`` for forward mode), so reverse over reverse, forward over reverse, forward mode
  and second order come from the same table for every framework; what would need a third
  derivative raises ``NotImplementedError`` naming the op;
- ``enable_backward=False``: the op runs forward and every derivative raises
  ``tg.NotDifferentiableError`` naming the op, the kernel and the fix (never a silent zero).

A framework supplies an ``OpFramework`` (frozen dataclass: what a tensor is, its dtype, its
device, how to allocate and copy, its stream) and registers the nodes with its own autograd
(torch: ``torch.library`` custom ops under ``autograd.Function``s; paddle: ``PyLayer``s; JAX:
primitives with JVP and transpose rules, launched through XLA FFI plans), calling ``vjp``/``jvp``
from their rules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tapegrad.errors import NotDifferentiableError
from tapegrad.launch import launch

from ._base import wrap_stream_handle
from ._op import KernelSignature

__all__ = ["OpFramework", "KernelOp", "FORWARD", "BACKWARD", "TANGENT", "BACKWARD_JVP", "as_list", "one", "op_doc"]

FORWARD, BACKWARD, TANGENT, BACKWARD_JVP = "forward", "backward", "tangent", "backward_jvp"


def as_list(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def one(xs):
    """A node's results as the framework returns them: one value, or a tuple of several."""
    return xs[0] if len(xs) == 1 else tuple(xs)


def op_doc(what, tensors, vec2_dims, grid_note, name_doc, returns, grads_note, framework, raises="") -> str:
    """The docstring of ``torch_op`` / ``paddle_op``: one text, the framework's words filled in."""
    return f"""Turn ``kernel`` into {what}.

    The op's arguments are the kernel's first ``len(params) - num_outputs`` parameters, in
    order: array parameters take {tensors} (vector/matrix dtypes: trailing component dims,
    e.g. {vec2_dims} for ``vec2``), scalar parameters take Python numbers (vector/matrix
    values: a list). The last ``num_outputs`` parameters (arrays) become the op's results: new
    zero-initialised tensors, one tensor (or a tuple for several outputs).

    Args:
        kernel: a ``@tg.kernel``.
        num_outputs: how many trailing kernel parameters are outputs (>= 1).
        launch_dims: the launch grid: an int, a tuple, or a function of the op's arguments
            returning one{grid_note}. Default: the tapegrad shape of the first array
            argument (component dims removed).
        output_dims: output shapes (tapegrad shapes, component dims are added): an int, a
            tuple or a function of the op's arguments (same for all outputs), or a dict
            naming every output ``{{output name: any of those, or None for the grid}}``.
            Default: the launch grid.
        {name_doc}

    Returns:
        {returns} Building the same configuration twice returns the same op.

    The backward launches the adjoint with zero-initialised input gradients and copies of the
    incoming output gradients; float array arguments get gradients, integer arrays and scalars
    none.{grads_note} Integer outputs are marked non-differentiable. On CUDA the op runs on
    {framework}'s current stream. Calls are checked as every kernel op's (docs/torch.md, "One
    op policy"); a kernel built with ``enable_backward=False`` gives an op that runs forward
    and raises ``tg.NotDifferentiableError`` for any derivative.

    Raises:
        TypeError: struct parameters; an output parameter that is not an array; a kernel
            with no array argument. Calls: as every kernel op (naming the argument).
        ValueError: ``num_outputs`` out of range, or an unknown name in ``output_dims``.{raises}
    """


@dataclass(frozen=True)
class OpFramework:
    """What one framework supplies to ``KernelOp`` (registered in one block at the end of each
    bridge's op module).

    Attributes:
        who: the public builder's name ("torch_op"...), the first word of every message.
        tensor_name: a tensor as messages call it ("torch tensor", "JAX array").
        is_tensor, scalar_of, dtype_name: ``tensor -> bool``, ``-> tapegrad ScalarType or None``,
            ``-> str`` (argument checks).
        detach_hint: how to call the op without derivatives, for ``NotDifferentiableError``.
        device_of: ``tensor -> tapegrad Device`` (None: the framework launches itself).
        zeros: ``(shape, tapegrad dtype, like tensor) -> zeroed tensor`` on ``like``'s device.
        zeros_like, copy, contiguous: ``tensor -> tensor``: zeroed, a contiguous copy, contiguous.
        framework_dtype: ``tapegrad dtype -> the framework's dtype``.
        layout: ``(tensor, tapegrad dtype, label) -> Layout`` (the bridge's).
        stream_handle: ``device ordinal -> the framework's current CUDA stream handle``.
        check_grid: ``(grid, label) -> None``, raising for grids the framework cannot launch.
        in_out: the op takes in-out arrays (``in_out_argnames``: JAX), which a kernel may write.
        in_autodiff: ``tensor -> bool``: whether a tensor takes part in differentiation (one
            given for a value parameter would get a silent zero gradient, so it is refused);
            None where the framework refuses such values itself (JAX: traced scalars).
    """

    who: str
    tensor_name: str
    is_tensor: Callable
    scalar_of: Callable
    dtype_name: Callable
    detach_hint: str
    device_of: Any = None
    zeros: Any = None
    zeros_like: Any = None
    copy: Any = None
    contiguous: Any = None
    framework_dtype: Any = None
    layout: Any = None
    stream_handle: Any = None
    check_grid: Any = None
    in_autodiff: Any = None
    in_out: bool = False


class KernelOp:
    """One kernel as a framework op: the signature, the checks, the launches, the derivative wiring.

    Args:
        fw: the framework's ``OpFramework``.
        kernel, num_outputs, launch_dims, output_dims, in_out_argnames: as ``KernelSignature.of``.
        device_input: the op takes its device from its first array input (torch, paddle), so a
            kernel without one is refused here.

    Raises:
        TypeError, ValueError: as ``KernelSignature.of``; a struct input where the framework
            cannot pass one; no array input with ``device_input``; (ValueError) a kernel that
            writes one of its input arrays.
    """

    def __init__(self, fw: OpFramework, kernel, num_outputs=1, *, launch_dims=None, output_dims=None,
                 in_out_argnames=(), device_input=True, structs=False):
        self.fw, self.kernel = fw, kernel
        sig = self.sig = KernelSignature.of(kernel, num_outputs, in_out_argnames=in_out_argnames,
                                            launch_dims=launch_dims, output_dims=output_dims, who=fw.who)
        if not structs:
            for p in sig.inputs:
                if hasattr(p.type, "fields"):
                    raise TypeError(f"{fw.who}: parameter '{p.name}' of kernel '{kernel.key}' is a struct, which "
                                    f"a {fw.who} cannot take (pass its fields)")
        for p in sig.inputs:
            if p.is_array and kernel.arg_access[p.index][1]:
                # an op's inputs are its caller's: a write would change them behind the framework's
                # back (torch/paddle: a silently changed tensor whose gradient the adjoint then
                # reads at the new values; XLA: immutable operands)
                hint = " or name it in in_out_argnames" if fw.in_out else ""
                raise ValueError(f"{fw.who}: kernel '{kernel.key}' writes its input array '{p.name}', but a kernel op "
                                 f"must not change its caller's {fw.tensor_name}s (they would change behind the "
                                 f"framework's back, and gradients would read the new values); make it an output "
                                 f"(num_outputs){hint}")
        if device_input:
            sig.first_array()
        self.label = sig.label
        self.n_in, self.n_out = len(sig.inputs), len(sig.outputs)
        self.arrays, self.diff, self.fout = list(sig.array_inputs), list(sig.differentiable), list(sig.float_outputs)
        self.has_derivatives = bool(getattr(kernel, "enable_backward", True))
        # calls met before (the same tensor types, shapes and dtypes, the same values) skip the
        # checks; only with fixed dims specs (a function of the arguments may read more than shapes)
        self._checked: dict | None = None if callable(launch_dims) or callable(output_dims) or \
            (isinstance(output_dims, dict) and any(callable(v) for v in output_dims.values())) else {}

    # ---------------------------------------------------------------------------- errors
    def not_differentiable(self, transform: str, fix: str | None = None) -> NotDifferentiableError:
        """The error of a derivative (``transform``) asked of an op that has none."""
        if fix is None:
            fix = (f"it was built with @tg.kernel(enable_backward=False) (no adjoint, no tangent). Drop "
                   f"enable_backward=False (adjoints are generated by default), or {self.fw.detach_hint}")
        return NotDifferentiableError(f"{self.label}: cannot differentiate kernel '{self.kernel.key}' "
                                      f"({transform}): {fix}")

    def unsupported(self, what: str) -> NotImplementedError:
        """The error of a derivative past what the kernel's launches give (third order...)."""
        return NotImplementedError(
            f"{self.label}: {what} is not supported: a kernel op has derivatives up to second order (tangent "
            "and tangent-of-adjoint launches); compute this derivative another way (for example finite "
            "differences of a second derivative)")

    # ---------------------------------------------------------------------------- checks
    def prepare(self, args, launch_dims=None, output_dims=None) -> tuple:
        """``(grid, output shapes)`` of a call, every check done (``KernelSignature.prepare``)."""
        checked = self._checked if launch_dims is None and output_dims is None else None
        key = None
        if checked is not None:
            try:
                key = tuple((type(a), tuple(a.shape), a.dtype) if p.is_array else (type(a), a)
                            for p, a in zip(self.sig.call_params, args))
                hit = checked.get(key)   # hashing raises for symbolic sizes and list values
            except (TypeError, AttributeError):
                key = hit = None
            if hit is not None and len(args) == len(self.sig.call_params):
                return hit
        res = self.sig.prepare(args, self.fw, launch_dims, output_dims)
        if key is not None and len(checked) < 256 and all(type(d) is int for d in res[0]):
            checked[key] = res
        return res

    def device(self, args):
        """The launch device: the first array input's; every array input must be on it.

        Raises:
            ValueError: an array input on another device, naming it.
        """
        fw, sig = self.fw, self.sig
        dev = fw.device_of(args[self.arrays[0]])
        for i in self.arrays[1:]:
            d = fw.device_of(args[i])
            if d is not dev:
                raise ValueError(f"{self.label} argument '{sig.inputs[i].name}': expected a tensor on {dev} (like "
                                 f"'{sig.inputs[self.arrays[0]].name}'), got one on {d}")
        return dev

    # --------------------------------------------------------------------------- launches
    def _desc(self, t, p, device):
        if p.inner_shape and not t.is_contiguous():
            t = t.contiguous()   # component dims must be contiguous: the op is functional, copy
        return self.fw.layout(t, p.dtype, self.label).new_ctype(t.data_ptr(), 0, (t,))

    def _run(self, args, outs, grid=None, adj_ins=None, adj_outs=None, tan_ins=None, tan_outs=None,
             tan_adj_ins=None, tan_adj_outs=None):
        """Launch the kernel over the op's tensors: the forward; with ``adj_outs`` (incoming
        gradients, one per output; ``adj_ins`` one accumulating gradient or None per input) the
        adjoint; with ``tan_ins`` (one tangent or None per input; ``tan_outs`` receiving the
        outputs') the tangent; with both, the tangent of the adjoint (``tan_adj_ins`` accumulate
        the tangents of the gradients, ``tan_adj_outs`` the tangents of the incoming gradients)."""
        sig, dev = self.sig, self.device(args)
        stream = wrap_stream_handle(dev, self.fw.stream_handle(dev.ordinal)) if dev.is_cuda else None

        def descs(ts, params):
            return None if ts is None else [self._desc(t, p, dev) if t is not None else None
                                            for t, p in zip(ts, params)]
        ins = [self._desc(a, p, dev) if p.is_array else (list(a) if isinstance(a, (list, tuple)) else a)
               for a, p in zip(args, sig.inputs)]
        kw = {}
        if adj_outs is not None:
            kw = dict(adjoint=True, adj_inputs=descs(adj_ins, sig.inputs), adj_outputs=descs(adj_outs, sig.outputs))
        if tan_ins is not None:
            kw.update(tangent=True, tan_inputs=descs(tan_ins, sig.inputs), tan_outputs=descs(tan_outs, sig.outputs))
            if adj_outs is not None:
                kw.update(tan_adj_inputs=descs(tan_adj_ins, sig.inputs), tan_adj_outputs=descs(tan_adj_outs,
                                                                                               sig.outputs))
        launch(self.kernel, sig.grid(args) if grid is None else grid, inputs=ins, outputs=descs(outs, sig.outputs),
               device=dev, stream=stream, record_tape=False, **kw)

    def new_outputs(self, args, shapes=None) -> list:
        """Zeroed outputs (kernels may accumulate into them), on the first array input's device."""
        like = args[self.arrays[0]]
        shapes = self.sig.output_shapes(args) if shapes is None else shapes
        return [self.fw.zeros(s, p.dtype, like) for s, p in zip(shapes, self.sig.outputs)]

    def _full_tangents(self, tans) -> list:
        """One entry per input from one (optional) tangent per differentiable input."""
        full = [None] * self.n_in
        for i, t in zip(self.diff, tans):
            full[i] = None if t is None else self.fw.contiguous(t)
        return full

    def _adjoint_buffers(self, args) -> list:
        # contiguous: the adjoint must write these very tensors (a strided one would be copied)
        return [self.fw.zeros_like(args[i]) if i in self.diff else None for i in range(self.n_in)]

    def _copies(self, ts) -> list:
        # an adjoint may write its output gradients (`out[i] += x` reads out[i]): never the caller's
        return [self.fw.copy(t) if t is not None else None for t in ts]

    def forward(self, args) -> list:
        """``y = f(x)``: the outputs, every check done first."""
        grid, shapes = self.prepare(args)
        outs = self.new_outputs(args, shapes)
        self._run(args, outs, grid)
        return outs

    def backward(self, args, outs, gouts) -> list:
        """``J^T g``, one gradient per differentiable input."""
        adj = self._adjoint_buffers(args)
        self._run(args, list(outs), adj_ins=adj, adj_outs=self._copies(gouts))
        return [adj[i] for i in self.diff]

    def tangent(self, args, tans) -> list:
        """``J t``, one tangent per float output."""
        outs = self.new_outputs(args)
        touts = [self.fw.zeros_like(o) if k in self.fout else None for k, o in enumerate(outs)]
        self._run(args, outs, tan_ins=self._full_tangents(tans), tan_outs=touts)
        return [touts[k] for k in self.fout]

    def backward_jvp(self, args, outs, gouts, tans, tgouts) -> list:
        """``sum_k g_k H_k t + J^T tg``, one per differentiable input (the outputs' state before
        the forward launch: their values and zero tangents)."""
        adj = self._adjoint_buffers(args)
        tadj = [self.fw.zeros_like(a) if a is not None else None for a in adj]
        self._run(args, list(outs), adj_ins=adj, adj_outs=self._copies(gouts), tan_ins=self._full_tangents(tans),
                  tan_outs=None, tan_adj_ins=tadj, tan_adj_outs=self._copies(tgouts))
        return [tadj[i] for i in self.diff]

    def launch_node(self, node, vals) -> list:
        """Run ``node`` on its flat arguments (the layouts of ``split``)."""
        if node == FORWARD:
            return self.forward(vals)
        parts = self.split(node, vals)
        return getattr(self, node)(*parts)

    # ---------------------------------------------------------------------- node layouts
    def arity(self, node) -> int:
        """Number of results of ``node``."""
        return {FORWARD: self.n_out, BACKWARD: len(self.diff), TANGENT: len(self.fout),
                BACKWARD_JVP: len(self.diff)}[node]

    def split(self, node, vals) -> tuple:
        """A node's flat arguments, grouped: FORWARD ``(x,)``; BACKWARD ``(x, y, g)``; TANGENT
        ``(x, t)``; BACKWARD_JVP ``(x, y, g, t, tg)`` (``t`` one per differentiable input)."""
        n, m, d = self.n_in, self.n_out, len(self.diff)
        x = list(vals[:n])
        if node == FORWARD:
            return (x,)
        if node == TANGENT:
            return x, list(vals[n:])
        y, g = list(vals[n:n + m]), list(vals[n + m:n + 2 * m])
        if node == BACKWARD:
            return x, y, g
        a = n + 2 * m
        return x, y, g, list(vals[a:a + d]), list(vals[a + d:])

    def _full_grads(self, ws, args) -> list:
        """One incoming gradient per output from one per float output (None: zero)."""
        zeros = None
        it, full = iter(ws), []
        for k in range(self.n_out):
            w = next(it) if k in self.fout else None
            if w is None:
                zeros = self.new_outputs(args) if zeros is None else zeros
                w = zeros[k]
            full.append(w)
        return full

    # ------------------------------------------------------------------- derivative wiring
    def vjp(self, node, vals, outs, cts, needed, apply) -> dict:
        """Reverse mode of ``node``: ``{argument position: gradient}`` for the positions
        ``needed(position)`` asks for, computed by other nodes through ``apply(node, *vals)``
        (the framework's differentiable application, so the result can be differentiated again).

        Args:
            vals: the node's flat arguments; outs: its results; cts: one cotangent (or None) per result.

        Raises:
            NotDifferentiableError: the kernel has no adjoint.
            NotImplementedError: a third derivative.
        """
        if not self.has_derivatives:
            raise self.not_differentiable("reverse mode")
        if all(c is None for c in cts):
            return {}
        n, m, diff, fout, fw = self.n_in, self.n_out, self.diff, self.fout, self.fw
        got: dict = {}

        def put(positions, res):
            got.update(zip(positions, as_list(res)))
        if node == FORWARD:
            if any(needed(i) for i in diff):
                g = [c if c is not None else fw.zeros_like(o) for c, o in zip(cts, outs)]
                put(diff, apply(BACKWARD, *vals, *outs, *g))
            return got
        x = vals[:n]
        if node == BACKWARD:
            y, g = vals[n:n + m], vals[n + m:]
            cs = [c if c is not None else fw.zeros_like(x[i]) for c, i in zip(cts, diff)]
            if any(needed(i) for i in diff):
                put(diff, apply(BACKWARD_JVP, *x, *y, *g, *cs, *([None] * m)))
            gpos = [n + m + k for k in fout]
            if any(needed(q) for q in gpos):
                put(gpos, apply(TANGENT, *x, *cs))
            return got
        if node == TANGENT:
            tans, tpos = vals[n:], [n + j for j in range(len(diff))]
            y, g = self.new_outputs(x), self._full_grads(cts, x)
            if any(needed(q) for q in tpos):
                put(tpos, apply(BACKWARD, *x, *y, *g))
            if any(needed(i) for i in diff):
                put(diff, apply(BACKWARD_JVP, *x, *y, *g, *tans, *([None] * m)))
            return got
        a = n + 2 * m            # BACKWARD_JVP
        if any(needed(i) for i in diff):
            raise self.unsupported("a third-order derivative (the derivative of a Hessian-vector product with "
                                   "respect to the op's inputs)")
        if any(needed(n + m + k) for k in fout):
            raise self.unsupported("the derivative of a Hessian-vector product with respect to the incoming "
                                   "gradient (reverse over reverse over reverse)")
        ws = [c if c is not None else fw.zeros_like(x[i]) for c, i in zip(cts, diff)]
        tpos, gpos = [a + j for j in range(len(diff))], [a + len(diff) + k for k in fout]
        if any(needed(q) for q in tpos):   # the weighted Hessian is symmetric: H[g] w
            put(tpos, apply(BACKWARD_JVP, *vals[:a], *ws, *([None] * m)))
        if any(needed(q) for q in gpos):   # J w
            put(gpos, apply(TANGENT, *x, *ws))
        return got

    def jvp(self, node, vals, tangents, apply) -> list:
        """Forward mode of ``node``: one tangent (or None) per result, from one tangent (or None)
        per argument, computed by other nodes through ``apply``.

        Raises:
            NotDifferentiableError: the kernel has no tangent.
            NotImplementedError: forward over forward, a third derivative.
        """
        if not self.has_derivatives:
            raise self.not_differentiable("forward mode")
        n, m, diff, fout = self.n_in, self.n_out, self.diff, self.fout
        x = vals[:n]
        if node == FORWARD:
            res = iter(as_list(apply(TANGENT, *x, *[tangents[i] for i in diff])))
            return [next(res) if k in fout else None for k in range(m)]
        if node == BACKWARD:
            return as_list(apply(BACKWARD_JVP, *vals, *[tangents[i] for i in diff], *tangents[n + m:]))
        if node == TANGENT:
            if any(tangents[i] is not None for i in diff):
                raise self.unsupported("forward mode over a forward-mode derivative (forward over forward, e.g. "
                                       "jacfwd(jacfwd(op)); use jacfwd(jacrev(op)) or hessian)")
            return as_list(apply(TANGENT, *x, *tangents[n:]))
        if any(tangents[i] is not None for i in diff):
            raise self.unsupported("a third-order derivative (forward mode over a Hessian-vector product, with "
                                   "respect to the op's inputs)")
        a = n + 2 * m
        y, tans, dg, lin = vals[n:n + m], vals[a:a + len(diff)], tangents[n + m:a], list(tangents[a:])
        res = None
        if any(t is not None for t in lin):   # linear in (t, tg)
            res = as_list(apply(BACKWARD_JVP, *vals[:a], *lin))
        if any(t is not None for t in dg) and any(t is not None for t in tans):   # bilinear: H[dg] t
            dg = [d if d is not None else self.fw.zeros_like(o) for d, o in zip(dg, y)]
            r = as_list(apply(BACKWARD_JVP, *x, *y, *dg, *tans, *([None] * m)))
            res = r if res is None else [p + q for p, q in zip(res, r)]
        return res if res is not None else [self.fw.zeros_like(x[i]) for i in diff]
