"""Indexed arrays in kernels (Warp's ``indexedarray``): the ops that turn an access through the
index arrays into an access of the data array.

A parameter (or struct field) of type ``IndexedArrayType`` is a struct of ``data`` and one int32
index array per dimension (a null array where the dimension is not indexed). The frontend
rewrites ``a[i, j]`` into ``a.data[map(a.index0, i), map(a.index1, j)]`` before the ordinary
array paths run, so loads, stores, atomics, their adjoints (into ``data``'s gradient, as for any
struct's array field) and the in-place analyses are those of arrays. ``a[i]`` of a 2-D indexed
array is an indexed array of one dimension (the data viewed at the mapped index).
"""
from __future__ import annotations

from ..indexedarray import IndexedArrayType, indexed_type
from ..types import int32
from .ir import Op

__all__ = ["is_indexed", "indexed_type", "op_index_map", "op_indexed_shape", "indexed_dims"]


def is_indexed(t) -> bool:
    """Whether ``t`` is an indexed array's kernel type."""
    return isinstance(t, IndexedArrayType)


def indexed_dims(t) -> int:
    """The dimension count of indexed array type ``t``."""
    return t.indexed[1]


def op_index_map(index_t) -> Op:
    """``map(ix, i)``: ``ix[i]`` when the index array ``ix`` is not null, else ``i`` (the
    result has ``i``'s integer type ``index_t``). No adjoint: indices carry no gradient."""
    return Op("index_map", lambda a: f"tg::index_map({a[0]}, {a[1]})", index_t)


def op_indexed_shape(k: int) -> Op:
    """``a.shape[k]`` of an indexed array, from its ``data`` and ``index{k}`` operands: the index
    array's length where dimension ``k`` is indexed, else the data's extent (an int32)."""
    return Op("indexed_shape", lambda a: f"tg::indexed_shape({a[0]}, {a[1]}, {k})", int32)
