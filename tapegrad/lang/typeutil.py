"""Small predicates and constructors over tapegrad types used by the compiler."""
from __future__ import annotations

import numpy as np

from ..types import (
    ArrayType,
    MatrixType,
    QuatType,
    ScalarType,
    StructType,
    VectorType,
    bool_,
    dtype_from_numpy,
    float16,
    float32,
    float64,
    matrix,
    quat,
    quatd,
    quath,
    vector,
)


def is_scalar(t):
    return isinstance(t, ScalarType)


def is_float(t):
    return isinstance(t, ScalarType) and t.kind == "float"


def is_int(t):
    return isinstance(t, ScalarType) and t.kind in ("int", "uint")


def is_bool(t):
    return t is bool_


def is_vec(t):
    return isinstance(t, VectorType)


def is_quat(t):
    return isinstance(t, QuatType)


def is_mat(t):
    return isinstance(t, MatrixType)


def is_composite(t):
    return isinstance(t, (VectorType, MatrixType))


def is_array(t):
    return isinstance(t, ArrayType)


def is_struct(t):
    return isinstance(t, StructType)


def float_based(t) -> bool:
    """True for types that carry gradients: float scalars, float vectors/matrices, structs."""
    if isinstance(t, StructType):
        return any(float_based(ft) for _, ft in t.fields)
    if isinstance(t, ArrayType):
        return float_based(t.dtype)
    if isinstance(t, (VectorType, MatrixType)):
        return t.scalar.kind == "float"
    return is_float(t)


def is_printable(t) -> bool:
    """Whether ``print()`` in a kernel can format a value of type ``t``."""
    if is_scalar(t):
        return True
    return (is_vec(t) or is_mat(t)) and is_float(t.scalar)


def scalar_of(t):
    if isinstance(t, ScalarType):
        return t
    if isinstance(t, (VectorType, MatrixType)):
        return t.scalar
    return None


def with_scalar(t, s):
    """The type of the same shape as ``t`` with scalar type ``s``."""
    if isinstance(t, ScalarType):
        return s
    if isinstance(t, QuatType):
        # the named quaternion types are singletons: a half-precision result must be tg.quath itself
        named = {float64: quatd, float32: quat, float16: quath}
        return named[s] if s in named else QuatType(4, s, f"quat_{s.name}")
    if isinstance(t, VectorType):
        return vector(t.length_, s)
    if isinstance(t, MatrixType):
        return matrix((t.rows, t.cols), s)
    raise TypeError(t)


def vec(n, s):
    return vector(n, s)


def mat(r, c, s):
    return matrix((r, c), s)


def cname(t) -> str:
    return t.cname


def type_name(t) -> str:
    """A short human name for messages (``float32``, ``vec3``, ``array(float32, 2d)``)."""
    if t is None:
        return "None"
    if type(t).__name__ in ("TypeRef", "TypeArg"):     # a constructor's / cast's target type
        return type_name(t.t)
    if isinstance(t, ArrayType):
        return f"array({type_name(t.dtype)}, {t.ndim}d)"
    if isinstance(t, StructType):
        return f"struct {t.name}"
    name = getattr(t, "name", None)
    return name if name else repr(t)


def constant_value(value, t):
    """``value`` converted for a constant of type ``t``: a bool, float or int for scalars, a flat
    tuple of those for vectors/matrices (``emit.literal`` renders it).

    Raises:
        TypeError, ValueError, OverflowError: ``value`` cannot be a constant of type ``t``.
    """
    if isinstance(t, ScalarType):
        if t.kind == "bool":
            return bool(value)
        if t.kind == "float":
            return float(value)
        return int(value)
    if isinstance(t, (VectorType, MatrixType)):
        return tuple(constant_value(x, t.scalar) for x in np.asarray(value).reshape(-1))
    raise TypeError(f"no constant literal for {t!r}")


def type_of_value(v):
    """The tapegrad type of a Python/numpy constant, or None when it has no kernel type."""
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, np.generic):
        try:
            return dtype_from_numpy(v.dtype)
        except TypeError:
            return None
    t = getattr(type(v), "tg_type", None)   # a host value (tg.quat(...)) knows its type
    if t is not None:
        return t
    if isinstance(v, np.ndarray) and v.ndim in (1, 2):
        try:
            s = dtype_from_numpy(v.dtype)
        except TypeError:
            return None
        return vector(v.shape[0], s) if v.ndim == 1 else matrix(v.shape, s)
    return None
