"""Constant slices of vector, matrix, quaternion and transform values in kernels (Warp's).

``v[1:3]``, ``v[::-1]``, ``m[0, :]``, ``m[:, 2]``, ``m[:2, 1:]`` read a new value; ``v[1:3] = w``,
``m[0, :] = r``, ``t[:3] += p`` update a local. Slice bounds and the indices next to a slice
are compile-time constants (Python's rules: clamped bounds, negative values from the end).
Slicing any vector type (quaternions and transforms too) gives a plain vector of its scalar type; a
matrix slice with two slices gives a matrix (``m[3:, -1:]`` is 1x1), with one index a vector.

A slice is resolved once into a ``SliceSpec``: the flat component indices it picks (row-major for
matrices) and the shape of the value it gives. Two builtins use it: ``extract_slice`` (a
gather, whose adjoint scatters) and ``assign_slice`` (a functional update, whose adjoint sends the
updated components' gradient to the new value and the others' to the old one); their C++ is
``tg::gather`` / ``tg::scatter`` in ``runtime/vec.h``, templates over the scalar type, so forward
mode needs no rule of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..types import matrix, vector
from .builtins import NO, Builtin, Sample, TypeRef
from .typeutil import is_composite, is_mat, is_vec, type_name

__all__ = ["SliceSpec", "SliceError", "slice_spec", "slice_result_type"]


class SliceError(ValueError):
    """A slice of a vector/matrix that cannot be resolved (the frontend adds the location)."""


@dataclass(frozen=True)
class SliceSpec:
    """A resolved constant slice.

    Attributes:
        flat: the source's flat component indices, in the order of the result's components.
        shape: the result's shape: ``(n,)`` a vector, ``(rows, cols)`` a matrix.
    """

    flat: tuple
    shape: tuple

    @property
    def size(self) -> int:
        return len(self.flat)


def _positions(part, n, what):
    """The positions one subscript component picks along an extent ``n``: a list for a slice
    (``part`` a ``(start, stop, step)`` of ints or None), an int for an index."""
    if isinstance(part, tuple):
        start, stop, step = part
        if step == 0:
            raise SliceError("Slice step cannot be zero")
        return list(range(*slice(start, stop, step).indices(n)))
    k = int(part)
    if not -n <= k < n:
        raise SliceError(f"index {k} is out of range for {what} (valid: 0..{n - 1}, or -{n}..-1 from the end)")
    return k % n


def slice_spec(t, parts) -> SliceSpec:
    """Resolve the subscript ``parts`` of a value of vector/matrix type ``t``.

    Args:
        t: a vector (quaternion, transform) or matrix type.
        parts: one entry per subscript component: ``(start, stop, step)`` (ints or None) for a
            slice, an int for an index; at least one slice.
    Returns:
        The ``SliceSpec``.
    Raises:
        SliceError: too many components, an index out of range or a zero step.
    """
    if is_vec(t):
        if len(parts) != 1:
            raise SliceError(f"a {type_name(t)} takes one subscript, got {len(parts)}")
        picked = _positions(parts[0], t.length_, f"a {type_name(t)}")
        return SliceSpec(tuple(picked), (len(picked),))
    if not is_mat(t) or not 1 <= len(parts) <= 2:
        raise SliceError(f"a {type_name(t)} takes one or two subscripts, got {len(parts)}")
    rows = _positions(parts[0], t.rows, f"the rows of a {type_name(t)}")
    cols = _positions(parts[1], t.cols, f"the columns of a {type_name(t)}") if len(parts) == 2 \
        else list(range(t.cols))
    rl = rows if isinstance(rows, list) else [rows]
    cl = cols if isinstance(cols, list) else [cols]
    flat = tuple(i * t.cols + j for i in rl for j in cl)
    if isinstance(rows, list) and isinstance(cols, list):
        # an empty slice of a matrix is Warp's 0x0 matrix, whichever dimension came out empty
        return SliceSpec(flat, (len(rl), len(cl)) if flat else (0, 0))
    return SliceSpec(flat, (len(flat),))


def slice_result_type(t, spec: SliceSpec):
    """The type of ``spec`` taken from a value of type ``t``."""
    if len(spec.shape) == 1:
        return vector(spec.shape[0], t.scalar)
    return matrix(spec.shape, t.scalar)


def _spec_of(ts, k):
    if len(ts) > k and isinstance(ts[k], TypeRef) and isinstance(ts[k].t, SliceSpec) and is_composite(ts[0]):
        size = ts[0].length_ if is_vec(ts[0]) else ts[0].rows * ts[0].cols
        spec = ts[k].t
        if all(0 <= i < size for i in spec.flat):
            return spec
    return None


def _extract_rule(ts):
    spec = _spec_of(ts, 1)
    if len(ts) != 2 or spec is None:
        return NO
    return slice_result_type(ts[0], spec)


def _assign_rule(ts):
    spec = _spec_of(ts, 1)
    if len(ts) != 3 or spec is None or ts[2] is not slice_result_type(ts[0], spec):
        return NO
    return ts[0]


def _flat_args(ts):
    return ", ".join(str(i) for i in ts[1].t.flat)


# an empty slice (Warp's zero-length vector, 0x0 matrix) picks nothing: a zero value, an update
# that changes nothing
def _gather_fwd(ts, r):
    if not ts[1].t.flat:
        return lambda a: f"{r.cname}()"
    return lambda a: f"tg::gather<{r.cname}, {_flat_args(ts)}>({a[0]})"


def _gather_adj(ts, r):
    if not ts[1].t.flat:
        return lambda a, aa, g: ";"
    return lambda a, aa, g: f"tg::adj_gather<{r.cname}, {_flat_args(ts)}>({a[0]}, {aa[0]}, {g});"


def _scatter_fwd(ts, r):
    if not ts[1].t.flat:
        return lambda a: a[0]
    return lambda a: f"tg::scatter<{_flat_args(ts)}>({a[0]}, {a[2]})"


def _scatter_adj(ts, r):
    if not ts[1].t.flat:
        return lambda a, aa, g: f"tg::accum({aa[0]}, {g});"
    return lambda a, aa, g: f"tg::adj_scatter<{_flat_args(ts)}>({a[0]}, {a[2]}, {aa[0]}, {aa[2]}, {g});"


Builtin("extract_slice", None, "constant slices of a value: v[1:3], m[0, :], m[:2, 1:]", export=False).add(
    _extract_rule, _gather_fwd, _gather_adj, linear=(0,),
    samples=[Sample(("V4:any",), "V2", "out[i] = {0}[1:3]"), Sample(("V4:any",), "V4", "out[i] = {0}[::-1]"),
             Sample(("M33:any",), "V3", "out[i] = {0}[:, 1]"), Sample(("M33:any",), "M22", "out[i] = {0}[1:, :2]"),
             Sample(("Q",), "V3", "out[i] = {0}[:3]"), Sample(("T",), "V3", "out[i] = {0}[-3:]")])
Builtin("assign_slice", None, "slice update of a local: v[1:3] = w, m[0, :] = r, t[:3] += p", export=False).add(
    _assign_rule, _scatter_fwd, _scatter_adj, linear=(0, 2),
    samples=[Sample(("V4:any", "V2:any"), "V4", "v = {0}\n    v[1:3] = {1}\n    out[i] = v"),
             Sample(("V4:any", "V2:any"), "V4", "v = {0}\n    v[3:1:-1] += {1}\n    out[i] = v"),
             Sample(("M33:any", "V3:any"), "M33", "m = {0}\n    m[:, 2] = {1}\n    out[i] = m"),
             Sample(("M33:any", "M22:any"), "M33", "m = {0}\n    m[1:, :2] -= {1}\n    out[i] = m"),
             Sample(("T", "V3:any"), "T", "t = {0}\n    t[:3] = {1}\n    out[i] = t")])


def literal_bound(v):
    """The int of a constant slice bound (a ``values.Lit`` holding an int), else None."""
    value = getattr(v, "value", None)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None
