"""Forward mode and second order over a Tape's records: ``Tape.jvp`` and ``Tape.hvp`` (issue 26).

**jvp** replays the records in order with the kernels' tangent code (``launch_tangent``,
tangents only: the arrays keep their values), a copy's tangent is a copy of tangents.
Each record must see the values its forward read. The tape keeps exactly what its adjoints
need (``tape_saves``: a copy of each needed array a later record overwrote), and a kernel's
tangent needs the same values as its adjoint (the partial derivatives of the same ops at the
same points), so the replay reproduces, for record ``i``, the state ``Tape.backward`` gives
record ``i``'s adjoint: a first walk, last record to first, puts the saved values back as
``backward`` does, keeping a copy of what each restore overwrote; the forward walk then
undoes those restores in the opposite order, running each record's tangent in between. The
arrays end bit-identical to how they were (every undo restores an exact copy), and gradients
are not touched. Extra memory: one copy per save the tape holds, plus a tangent per array.

**hvp** is forward over reverse: the forward walk above computes the tangents, also saving
the tangent of each array when the tape saved its values; then the records' tangent-of-adjoint
code runs in reverse, with the primal and tangent saves put back at the same places, into
gradient buffers of its own (the arrays' ``.grad`` are not touched) and their tangents, which
end as ``H v``.

Fills (``FillRecord``: constants) have zero tangents. A record other than a launch, a copy or
a fill needs a forward rule: a method ``tangent(tan)`` (``tan``:
array -> its tangent buffer) for ``jvp``, plus ``tangent_adjoint(tan, grad, tan_grad)`` for
``hvp``; a ``record_func`` callback has none (an error names the record).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import memory_ops, tape_saves
from .array import array
from .launch import LaunchRecord
from .launch.tangent import MODE_GRADS, launch_tangent, tangent_module
from .recording import CopyRecord, FillRecord, copy_adjoint, grad_region
from .types import ArrayType

__all__ = ["jvp", "hvp", "TangentState"]


def _float_array(a) -> bool:
    if not isinstance(a, array):
        return False
    s = getattr(a.dtype, "scalar", a.dtype)
    return getattr(s, "kind", None) == "float"


def _region(g, offset: int, count: int, other_size: int):
    if not (offset or count):
        return g
    count = count or min(g.size - offset, other_size)
    return g.flat_view(offset, count)


@dataclass
class TangentState:
    """The tangent buffer of every float array the walk met (zero until written or seeded).

    Attributes:
        buffers: id(array) -> (array, its tangent buffer).
    """

    buffers: dict

    def of(self, a):
        """The tangent buffer of ``a`` (created, zero, on first use); None for non-float data."""
        if not _float_array(a):
            return None
        e = self.buffers.get(id(a))
        if e is None:
            view = self._view_of_root(a)
            if view is not None:
                e = self.buffers[id(a)] = (a, view)
                return view
            buf = array(shape=a.shape, dtype=a.dtype, device=a.device)
            buf.zero_()
            e = self.buffers[id(a)] = (a, buf)
        return e[1]

    def _view_of_root(self, a):
        """For a view of another array (same scalar type and element size), the matching view
        of that array's tangent: views of one memory share their tangents, as their values."""
        root = a
        while type(root.owner) is type(a):    # a view's owner is the array it views
            root = root.owner
        if root is a or not _float_array(root) or a.dtype.size != root.dtype.size or \
                getattr(a.dtype, "scalar", None) is not getattr(root.dtype, "scalar", None):
            return None
        tr = self.of(root)
        if tr.strides != root.strides:           # the tangent is contiguous: the root must be too
            return None
        return type(a).wrap_memory(tr.ptr + (a.ptr - root.ptr), a.dtype, a.shape, a.strides, a.device, tr)

    def tangent_arg(self, v):
        """A launch argument's tangent: an array's tangent buffer; for a struct holding arrays,
        a struct of its type whose array fields are their tangent buffers (other fields zero:
        struct values are constants of the tape); None otherwise."""
        if isinstance(v, array):
            return self.of(v)
        return struct_of(v, self.of)


def struct_of(v, buffer_of):
    """For a struct holding arrays, a struct of its type whose array fields are
    ``buffer_of(field)`` (nested structs likewise; other fields zero); None otherwise."""
    if not tape_saves.is_struct_instance(v):
        return None
    t = type(v)()
    for name, ft in type(v)._tg_struct.fields:
        f = getattr(v, name)
        if isinstance(ft, ArrayType):
            setattr(t, name, buffer_of(f) if isinstance(f, array) else None)
        elif tape_saves.is_struct_instance(f):
            setattr(t, name, struct_of(f, buffer_of))
    return t


def _check_tangents(who, tangents, arg="tangents"):
    if not isinstance(tangents, dict):
        raise TypeError(f"{who}: expected a dict {{array: tangent}}, got {type(tangents).__name__}")
    out = []
    for a, v in tangents.items():
        if not isinstance(a, array):
            raise TypeError(f"{who}: the keys of {arg} must be tapegrad arrays, got {type(a).__name__}")
        if not _float_array(a):
            raise TypeError(f"{who}: {arg} names an array of {a.dtype!r}, which has no tangent (float dtypes only)")
        if isinstance(v, array):
            if v.dtype is not a.dtype:
                raise TypeError(f"{who}: the tangent of an array of {a.dtype!r} (shape {a.shape}) is of "
                                f"{v.dtype!r}; expected {a.dtype!r}")
            if v.device is not a.device:
                raise ValueError(f"{who}: the tangent of an array on {a.device} (shape {a.shape}) is on {v.device}")
        else:
            try:
                v = array(v, dtype=a.dtype, device=a.device)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{who}: the tangent of an array of shape {a.shape} could not be read as "
                                f"{a.dtype!r}: {e}") from None
        if tuple(v.shape) != tuple(a.shape):
            raise ValueError(f"{who}: the tangent of an array of shape {a.shape} has shape {v.shape}")
        out.append((a, v))
    return out


def _unwind(tape):
    """Put the saved values back from the last record to the first, as ``Tape.backward`` does,
    keeping what each restore overwrote: ``(undo_before, undo_after)``, per record index the
    ``(array, copy, stream)`` to restore, in order, to undo that record's restores."""
    ub, ua = {}, {}
    for index in sorted(tape._saves, reverse=True):
        for flag, store in ((True, ub), (False, ua)):
            undo = []
            for s in tape._saves[index]:
                if s.before_adjoint is flag:
                    undo.append((s.array, tape_saves.snapshot(s.array, s.stream), s.stream))
                    tape_saves.restore(s.array, s.values, s.stream)
            if undo:
                store[index] = undo[::-1]
    return ub, ua


def _undo(entries):
    for a, copy, stream in entries:
        tape_saves.restore(a, copy, stream)


def _forward_walk(tape, state, who, tangent_saves=None):
    """Run every record's tangent in order (see the module docstring); ``tangent_saves``: a
    dict filled, per record index with saves, with copies of those arrays' tangents before it."""
    records = tape.records
    for index, rec in enumerate(records):
        if isinstance(rec, LaunchRecord):   # build first: a kernel without a rule fails before any change
            tangent_module(rec.kernel, rec.device, tangent_saves is not None)
        elif not (isinstance(rec, (CopyRecord, FillRecord)) or callable(getattr(rec, "tangent", None))):
            raise RuntimeError(f"{who}: {rec.label(index)} ({type(rec).__name__}) has no forward-mode rule "
                               f"(a record_func callback cannot be replayed in forward mode)")
    if not tape._saves:
        for index, rec in enumerate(records):
            _tangent_of(rec, state, index, tangent_saves, tape)
        return
    ub, ua = _unwind(tape)
    index = 0
    try:
        for index, rec in enumerate(records):
            _undo(ua.pop(index, ()))
            _tangent_of(rec, state, index, tangent_saves, tape)
            _undo(ub.pop(index, ()))
    finally:
        for j in range(index, len(records)):   # after an error: leave the arrays as they were
            _undo(ua.pop(j, ()))
            _undo(ub.pop(j, ()))


def _tangent_of(rec, state, index, tangent_saves, tape):
    if tangent_saves is not None and index in tape._saves:
        tangent_saves[index] = [(s, tape_saves.snapshot(state.of(s.array), s.stream) if _float_array(s.array)
                                 else None) for s in tape._saves[index]]
    if isinstance(rec, LaunchRecord):
        launch_tangent(rec.kernel, rec.dim, rec.inputs, rec.outputs, rec.device, rec.stream,
                       tan_inputs=[state.tangent_arg(a) for a in rec.inputs],
                       tan_outputs=[state.tangent_arg(a) for a in rec.outputs],
                       block_dim=rec.block_dim, max_blocks=rec.max_blocks, mode=0)
    elif isinstance(rec, CopyRecord):
        td, ts = state.of(rec.dest), state.of(rec.src)
        if td is None:
            return
        d = _region(td, rec.dest_offset, rec.count, rec.src.size)
        if ts is None:
            d.zero_()
            return
        s = _region(ts, rec.src_offset, rec.count, rec.dest.size)
        if d.shape != s.shape:
            d, s = d.reshape((d.size,)), s.reshape((s.size,))
        memory_ops.copy(d, s)
    elif isinstance(rec, FillRecord):          # constants: a zero tangent
        t = state.of(rec.array)
        if t is not None:
            t.zero_()
    else:
        rec.tangent(state.of)


def _written(tape) -> list:
    out, seen = [], set()
    for rec in tape.records:
        if isinstance(rec, LaunchRecord):
            args = rec.inputs + rec.outputs
            arrs = [a for (r, w), a in zip(rec.kernel.arg_access, args) if w]
        else:
            arrs = [acc.array for acc in rec.accesses() if acc.writes]
        for a in arrs:
            if _float_array(a) and id(a) not in seen:
                seen.add(id(a))
                out.append(a)
    return out


def _seed_state(who, tangents):
    state = TangentState({})
    for a, v in _check_tangents(who, tangents):
        memory_ops.copy(state.of(a), v)
    return state


def jvp(tape, tangents: dict) -> dict:
    """``Tape.jvp``: the tangents of every float array the tape wrote, given ``tangents``
    ({array: tangent} of some inputs; every other array starts with a zero tangent).

    Returns:
        {array: tangent array} for every array a recorded launch or copy wrote.
    Raises:
        TypeError, ValueError: a tangent of the wrong dtype, shape or device (naming the array).
        RuntimeError: called while recording; a record without a forward rule (named).
        KernelError: a kernel construct without a forward-mode rule (named, with its line).
    """
    who = "Tape.jvp"
    _not_recording(tape, who)
    state = _seed_state(who, tangents)
    _forward_walk(tape, state, who)
    return {a: state.of(a) for a in _written(tape)}


def _not_recording(tape, who):
    from .recording import active_tape
    if active_tape() is tape:
        raise RuntimeError(f"{who}: called while the tape is still recording (leave the 'with tape:' block first)")


def hvp(tape, loss, vectors: dict) -> dict:
    """``Tape.hvp``: the Hessian of the 1-element ``loss`` times ``vectors`` ({array: v}),
    forward over reverse (see the module docstring).

    Returns:
        {array: H v} for each array of ``vectors`` (the derivative of its gradient along v).
    Raises:
        ValueError: a loss that is not one element of a scalar float dtype.
        TypeError, RuntimeError, KernelError: as ``jvp``; a kernel built with
            ``enable_backward=False`` (named).
    """
    who = "Tape.hvp"
    _not_recording(tape, who)
    if not isinstance(loss, array):
        raise TypeError(f"{who}(loss=...): expected a tapegrad array, got {type(loss).__name__}")
    if loss.size != 1 or getattr(loss.dtype, "length", 1) != 1 or not _float_array(loss):
        raise ValueError(f"{who}(loss=...): expected a scalar loss (one element of a float dtype), got shape "
                         f"{loss.shape} of {loss.dtype!r}")
    for index, rec in enumerate(tape.records):
        if isinstance(rec, LaunchRecord) and not rec.kernel.enable_backward:
            raise RuntimeError(f"{who}: {rec.label(index)}: the kernel was built with enable_backward=False")
        if not isinstance(rec, (LaunchRecord, CopyRecord, FillRecord)) and \
                not callable(getattr(rec, "tangent_adjoint", None)):
            raise RuntimeError(f"{who}: {rec.label(index)} ({type(rec).__name__}) has no second-order rule "
                               f"(a record_func callback cannot be replayed in forward mode)")
    state = _seed_state(who, vectors)
    tsaves: dict = {}
    _forward_walk(tape, state, who, tsaves)
    grads, tgrads = TangentState({}), TangentState({})

    def grad_of(a):
        """Our gradient buffer of ``a`` (arrays without a gradient get none, as in ``backward``;
        views share their base's, as their gradients do)."""
        if not _float_array(a) or (grad_region(a) is None and a is not loss):
            return None
        return grads.of(a)

    grad_of(loss).fill_(1)
    finals = {}
    for saves in tape._saves.values():
        for s in saves:
            if id(s.array) not in finals:
                finals[id(s.array)] = (s.array, tape_saves.snapshot(s.array, s.stream), s.stream)
    try:
        for index in range(len(tape.records) - 1, -1, -1):
            saved = tsaves.get(index, ())
            for s, tcopy in saved:
                if s.before_adjoint:
                    _put_back(s, tcopy, state)
            _tangent_adjoint(tape.records[index], state, grad_of, tgrads)
            for s, tcopy in saved:
                if not s.before_adjoint:
                    _put_back(s, tcopy, state)
    finally:
        for a, copy, stream in finals.values():
            tape_saves.restore(a, copy, stream)
    out = {}
    for a, _ in _check_tangents(who, vectors, "vectors"):
        out[a] = tgrads.of(a) if grad_of(a) is not None else _zeros(a)
    return out


def _zeros(a):
    z = array(shape=a.shape, dtype=a.dtype, device=a.device)
    z.zero_()
    return z


def _put_back(s, tcopy, state):
    tape_saves.restore(s.array, s.values, s.stream)
    if tcopy is not None:
        tape_saves.restore(state.of(s.array), tcopy, s.stream)


def _with_grads(s, grad_of):
    """A twin of struct ``s`` whose array fields view the same memory and carry ``grad_of(field)``
    as their gradients (a kernel uses a struct array's own .grad): ours, not the user's."""
    t = type(s)()
    for name, ft in type(s)._tg_struct.fields:
        f = getattr(s, name)
        if isinstance(ft, ArrayType) and isinstance(f, array):
            w = array.wrap_memory(f.ptr, f.dtype, f.shape, f.strides, f.device, f)
            g = grad_of(f)
            if g is not None:
                w.grad = g
            f = w
        elif tape_saves.is_struct_instance(f):
            f = _with_grads(f, grad_of)
        setattr(t, name, f)
    return t


def _set_tangent_grads(s, t, grad_of, tgrad_of):
    """On the tangent struct ``t`` of ``s``: each tangent array's .grad is the tangent of our
    gradient of the field (what the tangent-of-adjoint code accumulates into)."""
    for name, ft in type(s)._tg_struct.fields:
        f, tf = getattr(s, name), getattr(t, name)
        if isinstance(ft, ArrayType) and isinstance(f, array) and isinstance(tf, array):
            if grad_of(f) is not None:
                tf.grad = tgrad_of(f)
        elif tape_saves.is_struct_instance(f):
            _set_tangent_grads(f, tf, grad_of, tgrad_of)


def _tangent_adjoint(rec, state, grad_of, tgrads):
    if isinstance(rec, LaunchRecord):
        args = rec.inputs + rec.outputs
        n_in = len(rec.inputs)
        adj, tadj = [], []
        for t, a in zip(rec.kernel.arg_types, args):
            if isinstance(t, ArrayType):
                g = grad_of(a)
                adj.append(g)       # None: no .grad, so launch's default (a.grad) is NULL too
                tadj.append(tgrads.of(a) if g is not None else None)
            else:
                adj.append(None)
                tadj.append(None)
        # arrays held in structs use their own .grad: a twin struct whose arrays (the same
        # memory) carry our gradient buffers, and tangents whose .grad are their tangents
        prim = [_with_grads(a, grad_of) if tape_saves.is_struct_instance(a) else a for a in args]
        tans = []
        for a in args:
            t = state.tangent_arg(a)
            if tape_saves.is_struct_instance(a):
                _set_tangent_grads(a, t, grad_of, tgrads.of)
            tans.append(t)
        launch_tangent(rec.kernel, rec.dim, prim[:n_in], prim[n_in:], rec.device, rec.stream, adjoint=True,
                       adj_inputs=adj[:n_in], adj_outputs=adj[n_in:], tan_inputs=tans[:n_in], tan_outputs=tans[n_in:],
                       tan_adj_inputs=tadj[:n_in], tan_adj_outputs=tadj[n_in:],
                       block_dim=rec.block_dim, max_blocks=rec.max_blocks, mode=MODE_GRADS)
    elif isinstance(rec, CopyRecord):
        for table in ((lambda a: grad_of(a)), tgrads.of):
            dg = table(rec.dest)
            if dg is not None:
                copy_adjoint(rec, dg, table(rec.src))
    elif isinstance(rec, FillRecord):          # the overwritten values reach nothing
        if not rec.array.retain_grad:
            for g in (grad_of(rec.array), tgrads.of(rec.array) if grad_of(rec.array) is not None else None):
                if g is not None:
                    g.zero_()
    else:
        rec.tangent_adjoint(state.of, grad_of, tgrads.of)

