"""Generic kernels: parameters annotated ``typing.Any`` (a scalar/value of any type) or with
an array of ``dtype=typing.Any`` are specialized per argument types, each specialization a
kernel of its own (own key, C++ symbol and cache entry).

``infer_type(param_type, value)`` reads the concrete type from a launch argument;
``is_generic_type`` says whether an annotation still needs one.
"""
from __future__ import annotations

import typing

import numpy as np

from ..types import (
    GENERIC_SCALARS,
    ArrayType,
    MatrixType,
    StructType,
    VectorType,
    bool_,
    dtype_from_numpy,
    float32,
    int32,
    type_of,
)
from .typeutil import type_name, type_of_value

__all__ = ["is_generic_type", "infer_type", "concrete_type", "is_generic_annotation", "generic_accepts"]


def is_generic_annotation(t) -> bool:
    """Whether ``t`` is Warp's ``Int``/``Float``/``Scalar``, or a vector/matrix of one or of
    ``typing.Any`` length/shape (``vector(Any, float)``)."""
    if isinstance(t, typing.TypeVar):
        return t in GENERIC_SCALARS
    return isinstance(t, (VectorType, MatrixType)) and (
        isinstance(t.scalar, typing.TypeVar) or any(d is typing.Any for d in t.inner_shape))


def generic_accepts(ann, t) -> bool:
    """Whether a value of concrete type ``t`` fits the generic annotation ``ann``
    (``is_generic_annotation``): the same kind and shape (``Any``: any size), a scalar of the
    kinds it names (or its own scalar type)."""
    if isinstance(ann, typing.TypeVar):
        return ann in GENERIC_SCALARS and getattr(t, "kind", None) in GENERIC_SCALARS[ann] \
            and not isinstance(t, (VectorType, MatrixType))
    if type(ann) is not type(t) or len(ann.inner_shape) != len(t.inner_shape):
        return False
    if any(a is not typing.Any and a != b for a, b in zip(ann.inner_shape, t.inner_shape)):
        return False
    if isinstance(ann.scalar, typing.TypeVar):
        return getattr(t.scalar, "kind", None) in GENERIC_SCALARS.get(ann.scalar, ())
    return t.scalar is ann.scalar


def is_generic_type(t) -> bool:
    """Whether a resolved annotation is generic (None: ``Any``; an array of ``Any``; a
    vector/matrix of ``Any`` size or of ``Int``/``Float``/``Scalar``)."""
    return t is None or (isinstance(t, ArrayType) and t.dtype is typing.Any) or is_generic_annotation(t)


def _array_type_of(value):
    """(dtype, ndim) of an array-like launch argument, or None."""
    dtype = getattr(value, "dtype", None)
    ndim = getattr(value, "ndim", None)
    if ndim is None:
        return None
    from_tapegrad = getattr(value, "_tg_annotation", None)
    if callable(from_tapegrad):
        t = from_tapegrad()
        return t.dtype, t.ndim
    try:
        return dtype_from_numpy(np.dtype(dtype)), int(ndim)
    except TypeError:
        return None


def infer_type(param, value, label):
    """The concrete type a generic parameter takes for launch argument ``value``.

    Args:
        param: the parameter's resolved annotation (None for ``Any``, or an array of ``Any``).
        value: the argument. label: names the parameter in messages.
    Raises:
        TypeError: the argument's type cannot be read (pass a tapegrad array or a typed value,
            or specialize explicitly with ``tg.overload``).
    """
    if is_generic_annotation(param):
        t = type_of_value(value)
        if t is None or not generic_accepts(param, t):
            raise TypeError(f"{label}: expected a value fitting {param!r}, got {type(value).__name__}"
                            + (f" ({type_name(t)})" if t is not None else ""))
        return t
    if isinstance(param, ArrayType):
        got = _array_type_of(value)
        if got is None or isinstance(getattr(value, "_tg_annotation", lambda: None)(), StructType):
            raise TypeError(f"{label}: expected an array for array(dtype=Any), got {type(value).__name__}")
        dtype, ndim = got
        if ndim != param.ndim:
            raise TypeError(f"{label}: expected a {param.ndim}-D array, got {ndim}-D")
        return ArrayType(dtype, ndim)
    if hasattr(value, "_tg_annotation"):
        t = value._tg_annotation()
        if isinstance(t, StructType):     # an indexed array: its kernel type (a struct of its arrays)
            return t
    got = _array_type_of(value) if hasattr(value, "_tg_annotation") else None
    if got is not None:
        return ArrayType(*got)
    if isinstance(value, np.generic):       # before float: np.float64 is a float subclass
        t = type_of_value(value)
        if t is not None:
            return t
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int32
    if isinstance(value, float):
        return float32
    st = getattr(type(value), "_tg_struct", None)
    if isinstance(st, StructType):
        return st
    t = type_of_value(value)
    if t is not None:
        return t
    raise TypeError(f"{label}: cannot tell the type of a {type(value).__name__} for a generic (Any) parameter; "
                    f"pass a typed value (e.g. tg.float64(x), tg.vec3(...)) or use tg.overload(kernel, [types])")


def concrete_type(param, given, label):
    """A type named for a generic parameter in ``tg.overload`` (annotation objects resolved).

    Raises:
        TypeError: not a type, or an array of another dimension than the annotation's.
    """
    t = type_of(given, arg=label)
    if isinstance(param, ArrayType):
        if not isinstance(t, ArrayType) or t.ndim != param.ndim:
            raise TypeError(f"{label}: expected a {param.ndim}-D array type, got {type_name(t)}")
        if t.dtype is typing.Any:
            raise TypeError(f"{label}: an overload needs a concrete dtype, got Any")
    return t

