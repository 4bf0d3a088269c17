"""Small predicates and constructors over tapegrad types used by the compiler."""
from __future__ import annotations

import math

import numpy as np

from .. import types as T


def is_scalar(t):
    return isinstance(t, T.ScalarType)


def is_float(t):
    return isinstance(t, T.ScalarType) and t.kind == "float"


def is_int(t):
    return isinstance(t, T.ScalarType) and t.kind in ("int", "uint")


def is_bool(t):
    return t is T.bool_


def is_vec(t):
    return isinstance(t, T.VectorType)


def is_quat(t):
    return isinstance(t, T.QuatType)


def is_mat(t):
    return isinstance(t, T.MatrixType)


def is_composite(t):
    return isinstance(t, (T.VectorType, T.MatrixType))


def is_array(t):
    return isinstance(t, T.ArrayType)


def is_struct(t):
    return isinstance(t, T.StructType)


def float_based(t) -> bool:
    """True for types that carry gradients: float scalars, float vectors/matrices, structs."""
    if isinstance(t, T.StructType):
        return any(float_based(ft) for _, ft in t.fields)
    if isinstance(t, T.ArrayType):
        return float_based(t.dtype)
    if isinstance(t, (T.VectorType, T.MatrixType)):
        return t.scalar.kind == "float"
    return is_float(t)


def scalar_of(t):
    if isinstance(t, T.ScalarType):
        return t
    if isinstance(t, (T.VectorType, T.MatrixType)):
        return t.scalar
    return None


def with_scalar(t, s):
    """The type of the same shape as ``t`` with scalar type ``s``."""
    if isinstance(t, T.ScalarType):
        return s
    if isinstance(t, T.QuatType):
        return T.quatd if s is T.float64 else T.quat if s is T.float32 else T.QuatType(4, s, f"quat_{s.name}")
    if isinstance(t, T.VectorType):
        return T.vector(t.length_, s)
    if isinstance(t, T.MatrixType):
        return T.matrix((t.rows, t.cols), s)
    raise TypeError(t)


def vec(n, s):
    return T.vector(n, s)


def mat(r, c, s):
    return T.matrix((r, c), s)


def cname(t) -> str:
    return t.cname


def type_name(t) -> str:
    """A short human name for messages (``float32``, ``vec3``, ``array(float32, 2d)``)."""
    if t is None:
        return "None"
    if isinstance(t, T.ArrayType):
        return f"array({type_name(t.dtype)}, {t.ndim}d)"
    if isinstance(t, T.StructType):
        return f"struct {t.name}"
    name = getattr(t, "name", None)
    return name if name else repr(t)


def _float_literal(v: float, s) -> str:
    if math.isnan(v):
        return "tg::bits_float(0x7fc00000u)" if s is not T.float64 else "tg::from_bits<double>(0x7ff8000000000000ull)"
    if math.isinf(v):
        sign = "-" if v < 0 else ""
        if s is T.float64:
            return f"{sign}tg::from_bits<double>(0x7ff0000000000000ull)"
        return f"{sign}tg::bits_float(0x7f800000u)"
    if s is T.float64:
        return repr(float(v))
    text = repr(float(np.float32(v))) + "f"
    if "e" not in text and "." not in text:
        text = text[:-1] + ".0f"
    return text if s is T.float32 else f"half({text})"


def literal(value, t) -> str:
    """C++ source for a compile-time constant ``value`` of tapegrad type ``t``."""
    if isinstance(t, T.ScalarType):
        if t.kind == "bool":
            return "true" if bool(value) else "false"
        if t.kind == "float":
            return _float_literal(float(value), t)
        v = int(value)
        if t.kind == "uint":
            v &= (1 << t.bits) - 1
            return f"{t.cname}({v}ull)"
        if t.bits == 64 and v == -(1 << 63):
            return "int64_t(-9223372036854775807ll - 1)"
        return f"{t.cname}({v}ll)"
    if isinstance(t, T.VectorType):
        flat = np.asarray(value).reshape(-1)
        return f"tg::make_vec<{t.length_}, {t.scalar.cname}>({', '.join(literal(x, t.scalar) for x in flat)})"
    if isinstance(t, T.MatrixType):
        flat = np.asarray(value).reshape(-1)
        return f"tg::make_mat<{t.rows}, {t.cols}, {t.scalar.cname}>({', '.join(literal(x, t.scalar) for x in flat)})"
    raise TypeError(f"no constant literal for {t!r}")


def type_of_value(v):
    """The tapegrad type of a Python/numpy constant, or None when it has no kernel type."""
    if isinstance(v, (bool, np.bool_)):
        return T.bool_
    if isinstance(v, np.generic):
        try:
            return T.dtype_from_numpy(v.dtype)
        except TypeError:
            return None
    if isinstance(v, np.ndarray) and v.ndim in (1, 2):
        try:
            s = T.dtype_from_numpy(v.dtype)
        except TypeError:
            return None
        return T.vector(v.shape[0], s) if v.ndim == 1 else T.matrix(v.shape, s)
    return None
