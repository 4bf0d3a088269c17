"""Arrays built inside a kernel from an address (Warp's ``wp.array(ptr=..., shape=..., dtype=...)``
in a kernel) and an array's address (``a.ptr``).

Such an array is a contiguous view of memory the kernel only knows by its address: it has no
gradient buffer, and no launch, tape or framework sees which memory it reads or writes. So its
gradient cannot be tracked: a kernel that builds a floating-point array this way has **no
adjoint** — its adjoint and tangent launches (``launch(adjoint=True)``, ``Tape.backward``,
framework ops' derivatives) raise ``RuntimeError`` naming the line, instead of giving gradients
that silently miss that memory. Integer and bool arrays carry no gradient, so they leave the
adjoint intact. The fact ``untracked_arrays`` lists the lines (stored in the direct cache's
manifest, so a cached kernel answers without lowering).
"""
from __future__ import annotations

from ..types import ArrayType, StructType, uint64
from .direct import register_fact
from .ir import Assign, Op, walk
from .typeutil import float_based

__all__ = ["UNTRACKED_ARRAYS", "op_array_from_ptr", "op_array_ptr", "untracked_arrays", "adjoint_refusal"]

UNTRACKED_ARRAYS = "untracked_arrays"


def _carries_gradient(dtype) -> bool:
    """Whether elements of ``dtype`` could carry a gradient (a float-based type, or a struct with
    such a field)."""
    if isinstance(dtype, StructType):
        return any(_carries_gradient(t.dtype if isinstance(t, ArrayType) else t) for _, t in dtype.fields)
    return float_based(dtype)


def op_array_from_ptr(dtype, ndim: int) -> Op:
    """``tg.array(ptr=p, shape=(n0, ...), dtype=T)`` in a kernel: operands the address (uint64)
    and one int64 extent per dimension; a contiguous ``array_t<T>`` with no gradient. Its adjoint
    descriptor is the same array with no memory (nothing accumulates into it)."""
    cname = dtype.cname

    def render(a):
        return f"tg::array_from_ptr<{cname}>({ndim}, {', '.join(a)})"

    def adjoint(a, aa):
        return f"tg::array_from_ptr<{cname}>({ndim}, uint64_t(0), {', '.join(a[1:])})"

    return Op("array_from_ptr", render, ArrayType(dtype, ndim), array_adj=adjoint)


def op_array_ptr() -> Op:
    """``a.ptr`` in a kernel: the address of the array's first element, a uint64 (0 for a null array)."""
    return Op("array_ptr", lambda a: f"tg::array_ptr({a[0]})", uint64)


def _untracked_rule(kernel, ir) -> list:
    """The fact ``untracked_arrays``: ``["file:line", ...]`` of the arrays of gradient-carrying
    dtypes the kernel (or a function it calls) builds from an address."""
    out = []
    seen = set()

    def visit(fn):
        if id(fn) in seen:
            return
        seen.add(id(fn))
        for s in walk(fn.body):
            if not isinstance(s, Assign):
                continue
            if s.op.name == "array_from_ptr" and _carries_gradient(s.op.ret.dtype):
                where = str(s.loc) if s.loc is not None else "?"
                if where not in out:
                    out.append(where)
            if s.op.callee is not None:
                visit(s.op.callee)
    visit(ir)
    return out


register_fact(UNTRACKED_ARRAYS, _untracked_rule)


def untracked_arrays(kernel) -> list:
    """Where ``kernel`` builds gradient-carrying arrays from addresses (``"file:line"`` each)."""
    return list(kernel.fact(UNTRACKED_ARRAYS) or ())


def adjoint_refusal(kernel) -> str | None:
    """Why ``kernel`` has no exact adjoint (its arrays built from addresses), or None."""
    lines = untracked_arrays(kernel)
    if not lines:
        return None
    return (f"kernel '{kernel.key}' has no adjoint: it builds a floating-point array from an address "
            f"(tg.array(ptr=...) at {', '.join(lines)}), whose gradient tapegrad cannot track (no launch or "
            f"tape sees that memory). Pass the array as a kernel parameter to differentiate through it, or "
            f"run this kernel outside the differentiated program.")
