"""Data types: scalars, vectors, matrices, structs and array annotations.

One declarative table (``_SCALAR_TABLE``) describes every scalar type; every mapping to a
foreign framework (numpy, DLPack, and the torch/paddle/jax name columns the bridges' dtype
maps are built from: ``tapegrad.bridges._base.DtypeMap``) and to C (ctypes, C++ type names) is
derived from it, so there are no hand-written twins to drift apart. This module imports no
framework.
"""
from __future__ import annotations

import ctypes
import functools
import typing
from dataclasses import dataclass

import numpy as np

from . import abi
from .abi import ARRAY_FLAG_READONLY, ARRAY_FLAG_RETAIN_GRAD, MAX_DIMS, ArrayDesc, LaunchBounds
from .hostvalues import set_resolver, value_class

__all__ = [
    "ScalarType", "VectorType", "MatrixType", "QuatType", "TransformType", "StructType", "ArrayType",
    "vector", "matrix", "quaternion", "transformation", "struct", "type_of", "scalar_of",
    "type_is_int", "type_is_float", "type_is_scalar", "type_is_vector", "type_is_matrix", "type_is_quaternion",
    "type_is_transformation", "type_is_composite", "type_is_value", "type_is_struct", "type_is_array",
    "is_int", "is_float", "is_scalar", "is_vector", "is_matrix", "is_quaternion", "is_transformation",
    "is_composite", "is_value", "is_struct", "is_array",
    "resolve_dtype", "can_alias", "dtype_to_numpy", "dtype_from_numpy", "dtype_to_dlpack", "dtype_from_dlpack",
    "ArrayDesc", "LaunchBounds", "MAX_DIMS", "KERNEL_UNSUPPORTED", "bits16", "ARRAY_FLAG_READONLY",
    "ARRAY_FLAG_RETAIN_GRAD", "scalar_packer",
    "type_size_in_bytes", "type_size", "type_length", "type_scalar_type", "type_repr", "types_equal",
    "Int", "Float", "Scalar",
]

# MAX_DIMS, the ArrayDesc.flags bits and the kernel-ABI structs ArrayDesc, LaunchBounds are
# tapegrad.abi's (re-exported here: struct types lay out array fields as ArrayDesc)

# DLPack type codes (dlpack.h DLDataTypeCode)
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT, DL_BOOL = 0, 1, 2, 4, 6


@dataclass(frozen=True, eq=False)
class ScalarType:
    """A scalar element type (``tg.float32``...). Calling it converts a Python value."""

    name: str
    kind: str            # "bool" | "int" | "uint" | "float"
    bits: int
    np_name: str         # numpy dtype name ("bfloat16": ml_dtypes' type when importable, else raw uint16)
    cname: str           # C++ type name in generated code
    ctype: typing.Any    # ctypes type used to pack launch arguments
    dl_code: int
    torch_name: str | None
    paddle_name: str | None
    jax_name: str | None

    @property
    def size(self) -> int:
        return self.bits // 8

    @property
    def np_dtype(self) -> np.dtype:
        return _np_dtype(self.np_name)

    @property
    def scalar(self) -> "ScalarType":
        return self

    @property
    def length(self) -> int:
        return 1

    @property
    def inner_shape(self) -> tuple:
        return ()

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    def __call__(self, value=0):
        return self.np_dtype.type(value)

    def __repr__(self):
        return f"tapegrad.{self.name}"

    @property
    def __name__(self) -> str:
        """Warp's class name of the type (``float32``, ``bool``): Warp code names tests after it."""
        return self.name

    def __reduce__(self):   # by reference: the one object of that name
        return (_scalar_named, (self.name,))

    def __instancecheck__(self, obj) -> bool:
        """``isinstance(v, tg.uint8)``: whether ``v`` is a NumPy scalar of this type (what
        ``tg.uint8(1)`` returns); a Python int or float is none of them, as in Warp."""
        return isinstance(obj, np.generic) and obj.dtype == self.np_dtype

    # the attributes Warp code reads on its dtypes (``dtype._type_``, ``dtype._length_``)
    @property
    def _type_(self):
        return self.ctype

    @property
    def _length_(self) -> int:
        return 1


class _F16(ctypes.c_uint16):
    """float16 travels as raw bits in ctypes (ctypes has no half type)."""


class _BF16(ctypes.c_uint16):
    """bfloat16 travels as raw bits in ctypes."""


def _np_dtype(name: str) -> np.dtype:
    d = _NP_DTYPES.get(name)
    if d is None:
        if name == "bfloat16":
            try:   # ml_dtypes (a JAX dependency) gives numpy a real bfloat16; imported only when asked
                import ml_dtypes
                d = np.dtype(ml_dtypes.bfloat16)
            except ImportError:
                d = np.dtype(np.uint16)   # raw bits
        else:
            d = np.dtype(name)
        _NP_DTYPES[name] = d
    return d


_NP_DTYPES: dict = {}


# name, kind, bits, numpy, C++, ctypes, DLPack code, torch, paddle, jax
_SCALAR_TABLE = [
    ("bool",    "bool",  8,  "bool",    "bool",     ctypes.c_bool,   DL_BOOL,  "bool",    "bool",    "bool"),
    ("int8",    "int",   8,  "int8",    "int8_t",   ctypes.c_int8,   DL_INT,   "int8",    "int8",    "int8"),
    ("int16",   "int",   16, "int16",   "int16_t",  ctypes.c_int16,  DL_INT,   "int16",   "int16",   "int16"),
    ("int32",   "int",   32, "int32",   "int32_t",  ctypes.c_int32,  DL_INT,   "int32",   "int32",   "int32"),
    ("int64",   "int",   64, "int64",   "int64_t",  ctypes.c_int64,  DL_INT,   "int64",   "int64",   "int64"),
    ("uint8",   "uint",  8,  "uint8",   "uint8_t",  ctypes.c_uint8,  DL_UINT,  "uint8",   "uint8",   "uint8"),
    ("uint16",  "uint",  16, "uint16",  "uint16_t", ctypes.c_uint16, DL_UINT,  "uint16",  None,      "uint16"),
    ("uint32",  "uint",  32, "uint32",  "uint32_t", ctypes.c_uint32, DL_UINT,  "uint32",  None,      "uint32"),
    ("uint64",  "uint",  64, "uint64",  "uint64_t", ctypes.c_uint64, DL_UINT,  "uint64",  None,      "uint64"),
    ("float16", "float", 16, "float16", "half",     _F16,            DL_FLOAT, "float16", "float16", "float16"),
    ("bfloat16", "float", 16, "bfloat16", "tg::bfloat16_t", _BF16,  DL_BFLOAT, "bfloat16", "bfloat16", "bfloat16"),
    ("float32", "float", 32, "float32", "float",    ctypes.c_float,  DL_FLOAT, "float32", "float32", "float32"),
    ("float64", "float", 64, "float64", "double",   ctypes.c_double, DL_FLOAT, "float64", "float64", "float64"),
]

SCALARS: dict[str, ScalarType] = {row[0]: ScalarType(*row) for row in _SCALAR_TABLE}
abi.register_scalars(SCALARS.values())   # the parameter kinds of the native launch paths
bool_ = SCALARS["bool"]
int8, int16, int32, int64 = (SCALARS[n] for n in ("int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (SCALARS[n] for n in ("uint8", "uint16", "uint32", "uint64"))
float16, float32, float64 = (SCALARS[n] for n in ("float16", "float32", "float64"))
bfloat16 = SCALARS["bfloat16"]
half, float_, double = float16, float32, float64

# Scalar types kernels cannot compute with (none since bfloat16 arithmetic, issue 15; kept so a
# future storage-only type has its place).
KERNEL_UNSUPPORTED: frozenset = frozenset()

# bfloat16 is left out: looking its numpy type up would import ml_dtypes (see resolve_dtype)
SCALARS_BY_NUMPY = {s.np_dtype: s for s in SCALARS.values() if s is not bfloat16}
_BY_DLPACK = {(s.dl_code, s.bits): s for s in SCALARS.values()}


class _Composite:
    """Common behaviour of vector and matrix types (fixed-size, one scalar type)."""

    scalar: ScalarType
    inner_shape: tuple

    @property
    def length(self) -> int:
        return int(np.prod(self.inner_shape))

    @property
    def size(self) -> int:
        return self.length * self.scalar.size

    @property
    def np_dtype(self) -> np.dtype:
        return self.scalar.np_dtype

    @property
    def ctype(self):
        return self.scalar.ctype * self.length

    # the attributes Warp code reads on its vector/matrix types
    @property
    def _type_(self):
        """The ctypes type of one component."""
        return self.scalar.ctype

    @property
    def _shape_(self) -> tuple:
        return self.inner_shape

    @property
    def _length_(self) -> int:
        return self.length

    @property
    def _wp_scalar_type_(self) -> ScalarType:
        return self.scalar

    @functools.cached_property
    def value_class(self) -> type:
        """The class of this type's host values (``hostvalues.HostValue``: a numpy array of the
        component shape with Warp's interface: ``v.x``, ``==`` as one bool, ``m.get_row``...)."""
        if isinstance(self, TransformType):
            parts = {"p": vector(3, self.scalar).value_class, "q": quaternion(self.scalar).value_class}
            return value_class(self, "transform", self.__name__, parts)
        kind = "quat" if isinstance(self, QuatType) else "vector" if isinstance(self, VectorType) else "matrix"
        return value_class(self, kind, self.__name__)

    def __reduce__(self):   # by reference: the cached type (and its value class) of this process
        kind = "quat" if isinstance(self, QuatType) else "transform" if isinstance(self, TransformType) else (
            "vector" if isinstance(self, VectorType) else "matrix")
        return (_composite_named, (kind, self.inner_shape, self.scalar.name))

    def from_ptr(self, ptr: int):
        """A value of this type copied from the memory at address ``ptr`` (Warp's ``from_ptr``;
        16-bit floats are read as their bits).

        Raises:
            RuntimeError: ``ptr`` is 0 (Warp's "NULL pointer exception").
        """
        if not ptr:
            raise RuntimeError("NULL pointer exception")
        flat = np.empty(self.length, dtype=self.np_dtype)
        ctypes.memmove(flat.ctypes.data, int(ptr), flat.nbytes)
        return flat.reshape(self.inner_shape).view(self.value_class)

    def __instancecheck__(self, obj) -> bool:
        """``isinstance(v, tg.vec3)``: whether ``v`` is a host value of this type."""
        return isinstance(obj, self.value_class)

    def __call__(self, *values):
        """Build a value in Python scope: a ``value_class`` array of the component shape, from
        components, one scalar (every component), or one sequence (list, tuple, numpy array,
        CPU torch tensor, another value).

        Raises:
            ValueError: the number of components is not the type's.
        """
        what = "matrix" if isinstance(self, MatrixType) else "vector"
        if what == "matrix" and len(values) == self.rows and all(np.ndim(v) == 1 for v in values):
            for v in values:   # one row per argument
                if np.size(v) != self.cols:
                    raise TypeError(f"Invalid argument in matrix constructor, expected row of length {self.cols}, "
                                    f"got {tuple(np.asarray(v).tolist())}")
        if not values:
            flat = np.zeros(self.length, dtype=self.np_dtype)
        elif len(values) == 1 and np.ndim(values[0]) > 0:
            flat = np.asarray(values[0]).astype(self.np_dtype, copy=True).reshape(-1)
        elif len(values) == 1:
            flat = np.full(self.length, values[0], dtype=self.np_dtype)
        else:
            flat = np.array([np.asarray(v) for v in values] if any(np.ndim(v) for v in values) else values,
                            dtype=object if any(np.ndim(v) for v in values) else self.np_dtype)
            if flat.dtype == object:
                flat = np.concatenate([np.ravel(np.asarray(v, dtype=self.np_dtype)) for v in values])
            flat = flat.reshape(-1)
        if flat.size != self.length:
            raise ValueError(f"Invalid number of arguments in {what} constructor, expected {self.length} elements, "
                             f"got {flat.size}")
        return flat.reshape(self.inner_shape).view(self.value_class)


@dataclass(frozen=True, eq=False, repr=False)
class VectorType(_Composite):
    length_: int
    scalar: ScalarType
    name: str

    @property
    def inner_shape(self) -> tuple:
        return (self.length_,)

    @property
    def cname(self) -> str:
        return f"tg::vec_t<{self.length_}, {self.scalar.cname}>"

    @property
    def __name__(self) -> str:
        """Warp's class name: ``vec3f``, ``vec2d``, ``vec4ub``, ``quatf``, ``transformd``,
        ``spatial_vectorf`` (Warp spells float32 with an ``f``)."""
        return _warp_name(self)

    def __repr__(self):
        return f"tapegrad.{self.name}"


@dataclass(frozen=True, eq=False, repr=False)
class QuatType(VectorType):
    @property
    def cname(self) -> str:
        return f"tg::quat_t<{self.scalar.cname}>"


@dataclass(frozen=True, eq=False, repr=False)
class TransformType(VectorType):
    """A rigid transform, as Warp's: 7 components, position (x, y, z) then rotation quaternion
    (x, y, z, w). ``tg.transform()`` is the identity; ``tg.transform(p, q)`` joins the parts."""

    @property
    def cname(self) -> str:
        return f"tg::vec_t<7, {self.scalar.cname}>"

    def __call__(self, *values, **parts):
        """A transform value: ``()`` the identity, one number (every component), one sequence of
        3 (``p``, identity rotation) or 7 (a copy), ``(p, q)`` sequences, 7 components, or
        ``p=``/``q=`` keywords (positional values fill ``p`` then ``q``).

        Raises:
            TypeError: an unknown keyword, a part given twice, a part that is no sequence, a
                single value that is no number (Warp's messages).
        """
        unknown = [k for k in parts if k not in ("p", "q")]
        if unknown:   # Warp's words
            raise TypeError(f"got an unexpected keyword argument '{unknown[0]}'")
        if parts:   # positional values fill p, then q; keywords the rest
            given = dict(zip(("p", "q"), values)) if len(values) <= 2 else {"p": None, "q": None}
            for k, v in parts.items():
                if k in given:
                    raise TypeError(f"multiple values for argument '{k}'")
                given[k] = v
            values = (given.get("p", np.zeros(3)), given.get("q", np.array([0, 0, 0, 1])))
        if not values:
            return super().__call__([0, 0, 0, 0, 0, 0, 1])
        if len(values) == 2:
            for name, v in zip(("p", "q"), values):
                if np.ndim(v) == 0:
                    raise TypeError(f"Invalid argument '{name}' in transformation constructor: expected a sequence, "
                                    f"got {type(v).__name__}")
            if np.size(values[0]) == 3 and np.size(values[1]) == 4:
                return super().__call__(np.concatenate([np.ravel(values[0]), np.ravel(values[1])]))
        if len(values) == 1:
            v = values[0]
            if np.ndim(v) == 0 and not isinstance(v, (bool, int, float, np.number, np.bool_)):
                raise TypeError(f"Invalid argument in transformation constructor: expected a scalar value, got "
                                f"{type(v).__name__}")
            if np.size(v) == 3:   # Warp: a lone sequence is p, q the identity
                return super().__call__(np.concatenate([np.ravel(v), [0, 0, 0, 1]]))
        return super().__call__(*values)


@dataclass(frozen=True, eq=False, repr=False)
class MatrixType(_Composite):
    rows: int
    cols: int
    scalar: ScalarType
    name: str

    @property
    def inner_shape(self) -> tuple:
        return (self.rows, self.cols)

    @property
    def cname(self) -> str:
        return f"tg::mat_t<{self.rows}, {self.cols}, {self.scalar.cname}>"

    @property
    def __name__(self) -> str:
        """Warp's class name: ``mat33f``, ``mat22d``, ``spatial_matrixf``."""
        return _warp_name(self)

    def __repr__(self):
        return f"tapegrad.{self.name}"


_VEC_CACHE: dict = {}
_MAT_CACHE: dict = {}
# Warp's type-name suffixes (vec3 is float32; vec3ub is uint8...)
_SUFFIX = {float32: "", float64: "d", float16: "h", int32: "i", int8: "b", uint8: "ub", int16: "s",
           uint16: "us", uint32: "ui", int64: "l", uint64: "ul"}


def _dim(d) -> str:
    """A size in a type's name: its number, or ``Any`` for a generic annotation's."""
    return "Any" if d is typing.Any else str(d)


def _warp_name(t) -> str:
    """The ``__name__`` Warp's class of ``t`` has (its explicit-suffix spelling: ``vec3f``)."""
    s = t.scalar
    suffix = "f" if s is float32 else _SUFFIX.get(s, "_" + getattr(s, "name", str(s)))
    if isinstance(t, TransformType):
        return "transform" + suffix
    if isinstance(t, QuatType):
        return "quat" + suffix
    if isinstance(t, VectorType):
        if t.length_ == 6 and getattr(s, "is_float", False):
            return "spatial_vector" + suffix
        return f"vec{_dim(t.length_)}{suffix}"
    if (t.rows, t.cols) == (6, 6) and getattr(s, "is_float", False):
        return "spatial_matrix" + suffix
    return f"mat{_dim(t.rows)}{_dim(t.cols)}{suffix}"


# Warp's generic component annotations: a ``@func`` parameter annotated ``vector(3, Float)``
# accepts a vec3 of any float type, ``Int`` any integer type, ``Scalar`` any number (each
# argument type specializes the function); a return annotated with one is inferred.
Int = typing.TypeVar("Int")
Float = typing.TypeVar("Float")
Scalar = typing.TypeVar("Scalar")
GENERIC_SCALARS = {Int: ("int", "uint"), Float: ("float",), Scalar: ("int", "uint", "float")}


def _component_scalar(dtype, who: str) -> ScalarType:
    if isinstance(dtype, typing.TypeVar) and dtype in GENERIC_SCALARS:
        return dtype   # a generic annotation's placeholder (funcs specialize it per argument type)
    s = resolve_dtype(dtype, arg=f"{who}(dtype=...)")
    if not isinstance(s, ScalarType):
        raise TypeError(f"{who}(dtype=...) expects a scalar type, got {dtype!r}")
    return s


def vector(length: int, dtype=float32) -> VectorType:
    """Return the vector type of ``length`` components of ``dtype`` (cached: same args, same object).

    Raises:
        TypeError: ``dtype`` is not a scalar type.
        ValueError: ``length`` is not a non-negative integer (0: an empty vector, as Warp's) or
            ``typing.Any`` (a generic annotation: a parameter taking vectors of any length).
    """
    s = _component_scalar(dtype, "vector")
    # 0: Warp's empty slice type; typing.Any: a generic annotation (any length, per argument)
    if length is not typing.Any and (not isinstance(length, int) or isinstance(length, bool) or length < 0):
        raise ValueError(f"vector(length=...) expects a non-negative int (or typing.Any), got {length!r}")
    key = (length, s)
    if key not in _VEC_CACHE:
        _VEC_CACHE[key] = VectorType(length, s, f"vec{_dim(length)}{_SUFFIX.get(s, '_' + getattr(s, 'name', str(s)))}")
    return _VEC_CACHE[key]


def matrix(shape, dtype=float32) -> MatrixType:
    """Return the matrix type of ``shape=(rows, cols)`` with ``dtype`` elements (cached).

    Raises:
        TypeError: ``dtype`` is not a scalar type.
        ValueError: ``shape`` is not two non-negative integers (or ``typing.Any``: generic).
    """
    s = _component_scalar(dtype, "matrix")
    shape = tuple(shape)
    if len(shape) != 2 or not all(d is typing.Any or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)
                                  for d in shape):
        raise ValueError(f"matrix(shape=...) expects two non-negative ints (or typing.Any), got {shape!r}")
    key = (shape, s)
    if key not in _MAT_CACHE:
        _MAT_CACHE[key] = MatrixType(shape[0], shape[1], s,
                                     f"mat{_dim(shape[0])}{_dim(shape[1])}"
                                     f"{_SUFFIX.get(s, '_' + getattr(s, 'name', str(s)))}")
    return _MAT_CACHE[key]


def _float_component(dtype, who: str) -> ScalarType:
    s = _component_scalar(dtype, who)
    if s not in (float16, float32, float64):
        raise TypeError(f"{who}(dtype=...) expects float16, float32 or float64, got {dtype!r}")
    return s


def quaternion(dtype=float32) -> QuatType:
    """Return the quaternion type of ``dtype`` components (Warp's ``wp.types.quaternion``):
    ``quaternion(float64) is quatd``.

    Raises:
        TypeError: ``dtype`` is not float16, float32 or float64.
    """
    return _QUATS[_float_component(dtype, "quaternion")]


def transformation(dtype=float32) -> TransformType:
    """Return the rigid-transform type of ``dtype`` components (Warp's
    ``wp.types.transformation``): ``transformation(float64) is transformd``.

    Raises:
        TypeError: ``dtype`` is not float16, float32 or float64.
    """
    return _TRANSFORMS[_float_component(dtype, "transformation")]




# ---------------------------------------------------------------------------------- structs

@dataclass(frozen=True, eq=False)
class StructType:
    """A ``@tg.struct`` type: named fields of scalar, vector, matrix, array or struct types."""

    cls: type
    name: str
    fields: tuple          # ((name, type), ...)
    ctype: typing.Any      # ctypes.Structure subclass, laid out as the C++ struct

    @property
    def size(self) -> int:
        return ctypes.sizeof(self.ctype)

    @property
    def scalar(self):
        return None

    @property
    def inner_shape(self) -> tuple:
        return ()

    @property
    def np_dtype(self) -> np.dtype:
        return _struct_np_dtype(self)

    @property
    def cname(self) -> str:
        return self.name

    def __call__(self, **kwargs):
        return self.cls(**kwargs)

    def __eq__(self, other):
        # Warp's arrays of structs name the struct class as dtype: a.dtype == MyStruct
        return other is self or other is self.cls

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"tapegrad.struct {self.name}"

    def to_ctype(self, value, device=None):
        """Pack a struct instance (or a dict) into its ctypes structure.

        Array fields take any object whose ``descriptor()`` returns the kernel-ABI ``ArrayDesc``
        (tapegrad arrays): the dtype table knows nothing about storage.

        Args:
            device: the launch device; every array field (nested ones too) must be on it (a
                kernel on another device would dereference foreign pointers).
        Raises:
            TypeError: an array field holds something else.
            RuntimeError: an array field is on another device than ``device``.
        """
        out = self.ctype()
        for fname, ftype in self.fields:
            v = value[fname] if isinstance(value, dict) else getattr(value, fname)
            if isinstance(ftype, ArrayType):
                if v is None:
                    continue
                describe = getattr(v, "descriptor", None)
                desc = describe() if callable(describe) else None
                if not isinstance(desc, ArrayDesc):
                    raise TypeError(f"struct {self.name}.{fname}: expected a tapegrad array, got {type(v).__name__}")
                if device is not None and getattr(v, "device", device) is not device:
                    raise RuntimeError(f"struct {self.name}.{fname}: the array is on device {v.device}, but the launch "
                                       f"device is {device}")
                setattr(out, fname, desc)
            elif isinstance(ftype, StructType):
                setattr(out, fname, ftype.to_ctype(v, device))
            elif isinstance(ftype, ScalarType):
                setattr(out, fname, scalar_to_ctype(ftype, v))
            else:
                flat = bits16(ftype.scalar, v) if ftype.scalar in (float16, bfloat16) \
                    else np.asarray(v, dtype=ftype.np_dtype).reshape(-1)
                setattr(out, fname, ftype.ctype(*flat.tolist()))
        return out

    def array_values(self, value):
        """The array fields' values of a struct instance (or dict), nested structs included, in
        field order (None or missing fields skipped)."""
        for fname, ftype in self.fields:
            v = value.get(fname) if isinstance(value, dict) else getattr(value, fname, None)
            if v is None:
                continue
            if isinstance(ftype, ArrayType):
                yield v
            elif isinstance(ftype, StructType):
                yield from ftype.array_values(v)


def bits16(t: ScalarType, values) -> np.ndarray:
    """The raw uint16 bits of ``values`` as float16 or bfloat16 (``t``), flattened.

    bfloat16 rounds float32 to nearest even as the kernels do (no ml_dtypes needed).

    Args:
        t: ``float16`` or ``bfloat16``.
        values: anything ``np.asarray`` converts to floats.
    Returns:
        A 1-D uint16 array.
    Raises:
        TypeError: ``t`` is not a 16-bit float type.
    """
    if t is float16:
        return np.asarray(values, dtype=np.float16).reshape(-1).view(np.uint16)
    if t is not bfloat16:
        raise TypeError(f"t: expected float16 or bfloat16, got {t!r}")
    x = np.asarray(values, dtype=np.float32).reshape(-1).view(np.uint32)
    nan = (x & 0x7fffffff) > 0x7f800000
    r = ((x + 0x7fff + ((x >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((x >> 16) | 0x40).astype(np.uint16), r)


def scalar_packer(t: ScalarType, label: str):
    """The packer of a kernel argument of scalar type ``t``: ``pack(value, device=None)`` returns
    the ctypes value (16-bit floats as raw bits), the one rule ``tg.launch`` and ``jax_kernel``'s
    static values share.

    Args:
        t: the parameter's scalar type. label: names the argument in errors
            (``kernel 'k' argument 0 ('x')``).
    Returns:
        ``pack``, which raises ``TypeError`` (not a scalar: a string, None, an array or sequence;
        a non-integer float for an integer type) or ``OverflowError`` (an integer outside the
        type's range: ctypes would wrap it silently), each message starting with ``label``.
    """
    ctype, kind = t.ctype, t.kind
    lo, hi = abi.int_range(kind, t.bits) if kind in ("int", "uint") else (None, None)

    def pack(value, device=None):
        if isinstance(value, (str, bytes)) or value is None:
            raise TypeError(f"{label}: expected a scalar of {t!r}, got {value!r}")
        # tapegrad arrays (and objects shaped like them: a descriptor()), numpy arrays, sequences
        if (isinstance(value, (list, tuple, np.ndarray)) or callable(getattr(value, "descriptor", None))) \
                and np.ndim(value) > 0:
            raise TypeError(f"{label}: expected a scalar of {t!r}, got {type(value).__name__}")
        try:
            if kind == "float":
                return ctype(scalar_to_ctype(t, value))
            if kind == "bool":
                return ctype(bool(value))
            if isinstance(value, (float, np.floating)) and not float(value).is_integer():
                raise TypeError(f"{label}: expected an integer for {t!r}, got {value!r}")
            v = int(value)
            if not lo <= v <= hi:
                raise OverflowError(f"{label}: {v} is out of range for {t!r} ({lo}..{hi})")
            return ctype(v)
        except (TypeError, ValueError) as e:
            if str(e).startswith(label):   # our own message (Python's may mention "argument" too)
                raise
            raise TypeError(f"{label}: expected a scalar of {t!r}, got {value!r}") from None
    return pack


def scalar_to_ctype(t: ScalarType, v):
    """The Python value ctypes stores for scalar ``v`` of type ``t`` (16-bit floats: raw bits)."""
    if t is float16 or t is bfloat16:
        return int(bits16(t, v)[0])
    if t.kind == "float":
        return float(v)
    if t.kind == "bool":
        return bool(v)
    return int(v)


def _struct_np_dtype(st: StructType) -> np.dtype:
    names, formats, offsets = [], [], []
    for fname, ftype in st.fields:
        if isinstance(ftype, ArrayType):
            fmt = np.dtype((np.uint8, ctypes.sizeof(ArrayDesc)))
        elif isinstance(ftype, StructType):
            fmt = ftype.np_dtype
        else:
            fmt = np.dtype((ftype.np_dtype, ftype.inner_shape)) if ftype.inner_shape else ftype.np_dtype
        names.append(fname)
        formats.append(fmt)
        offsets.append(getattr(st.ctype, fname).offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": st.size})


def struct(cls):
    """Class decorator declaring a struct usable as kernel argument and array dtype.

    Fields are taken from the class annotations, in order; each must be a tapegrad type
    (scalar, vector, matrix, array annotation or another struct).

    Raises:
        TypeError: a field's annotation is not a tapegrad type; later, one number assigned to a
            vector/matrix field. RuntimeError: the class derives from another class (as Warp).
    """
    if any(b is not object for b in cls.__bases__):
        raise RuntimeError(f"struct {cls.__name__}: Warp structs must be defined as base classes")
    hints = dict(getattr(cls, "__annotations__", {}))
    if any(isinstance(v, str) for v in hints.values()):  # `from __future__ import annotations`
        import sys
        ns = dict(vars(sys.modules.get(cls.__module__, None) or object()))
        try:
            hints = typing.get_type_hints(cls, globalns=ns)
        except Exception as e:
            raise TypeError(f"struct {cls.__name__}: cannot resolve string annotations: {e}") from None
    fields = []
    cfields = []
    for fname, ann in hints.items():
        t = type_of(ann, arg=f"{cls.__name__}.{fname}", allow_array=True)
        fields.append((fname, t))
        if isinstance(t, ArrayType):
            cfields.append((fname, ArrayDesc))
        else:
            cfields.append((fname, t.ctype))
    # C++ gives an empty struct size 1: the twin gets a padding byte (as Warp's does)
    ctype = type(f"{cls.__name__}_ctype", (ctypes.Structure,), {"_fields_": cfields or [("_tg_pad", ctypes.c_uint8)]})
    st = StructType(cls, cls.__name__, tuple(fields), ctype)
    defaults = {f: getattr(cls, f) for f, _ in fields if hasattr(cls, f)}

    def __init__(self, **kwargs):
        unknown = set(kwargs) - {f for f, _ in fields}
        if unknown:
            raise TypeError(f"struct {cls.__name__} has no field(s) {sorted(unknown)}")
        for fname, ftype in fields:
            if fname in kwargs:
                v = kwargs[fname]
            elif fname in defaults:
                v = defaults[fname]
            elif isinstance(ftype, (ArrayType, StructType)):
                v = None if isinstance(ftype, ArrayType) else ftype.cls()
            elif isinstance(ftype, ScalarType):
                v = ftype(0)
            else:
                v = ftype()
            object.__setattr__(self, fname, v)

    def __repr__(self):
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f, _ in fields)
        return f"{cls.__name__}({inner})"

    composite = {f: t for f, t in fields if isinstance(t, (VectorType, MatrixType))}
    arrays = {f: t for f, t in fields if isinstance(t, ArrayType) or getattr(t, "indexed", None) is not None}

    def __setattr__(self, name, value):
        t = composite.get(name)
        if t is not None and value is None:   # None zero-initializes, as Warp's
            value = t()
        elif t is not None and np.ndim(value) == 0 and not isinstance(value, (list, tuple)):
            # one number would fill every component silently; Warp refuses it
            raise TypeError(f"Struct field '{name}' expects {t.__name__} but got a single value "
                            f"({type(value).__name__}); assign a {t.__name__} (e.g. tg.{t.name}(...))")
        elif value is not None and name in arrays:
            _check_array_field(name, arrays[name], value)
        object.__setattr__(self, name, value)

    def numpy_value(self):
        """This instance as a record of the struct's NumPy structured dtype (Warp's ``numpy_value``)."""
        return np.frombuffer(bytes(st.to_ctype(self)), dtype=st.np_dtype)[0]

    cls.__init__ = __init__
    cls.__repr__ = __repr__
    if composite or arrays:
        cls.__setattr__ = __setattr__
    cls._tg_struct = st
    # Warp's struct classes give their NumPy structured dtype (array fields: their descriptor's bytes)
    if "numpy_dtype" not in hints:
        cls.numpy_dtype = classmethod(lambda c: st.np_dtype)
    if "numpy_value" not in hints:
        cls.numpy_value = numpy_value
    if "__ctype__" not in hints:   # Warp's: the instance in its kernel-ABI form (tg.Launch takes it)
        cls.__ctype__ = lambda self: st.to_ctype(self)
    if "cls" not in hints:   # Warp's struct objects name their Python class ``.cls``
        cls.cls = cls
    for fname, ftype in fields:
        # Warp's private ``_<field>_grad`` (the gradient its struct keeps alive for an array field):
        # here the field's array keeps its own gradient, which this reads
        if isinstance(ftype, ArrayType) and f"_{fname}_grad" not in hints:
            setattr(cls, f"_{fname}_grad", property(lambda self, f=fname: _array_field_grad(self, f)))
    return cls


def _array_field_grad(instance, name: str):
    """The gradient of the array in field ``name`` of a struct instance (None: no array there,
    or one without a gradient)."""
    value = getattr(instance, name, None)
    return None if value is None else getattr(value, "grad", None)


def _check_array_field(name: str, t, value) -> None:
    """Warp's checks of a value assigned to an array field (``t`` an ``ArrayType``) or an indexed
    array field (a struct type with ``indexed = (dtype, ndim)``): the kind of array, its dtype
    and its number of dimensions.

    Raises:
        TypeError: with Warp's words.
    """
    indexed = getattr(t, "indexed", None)
    if indexed is not None:
        dtype, ndim = indexed
        if not isinstance(value, t.cls):
            raise TypeError(f"Struct field '{name}' expects a Warp indexed array, got {type(value).__name__}")
    else:
        dtype, ndim = t.dtype, t.ndim
        if not callable(getattr(value, "descriptor", None)):    # a tapegrad array
            raise TypeError(f"Struct field '{name}' expects a Warp array, got {type(value).__name__}")
    got = getattr(value, "dtype", None)
    if dtype is not typing.Any and got is not None and got is not dtype and got != dtype:
        raise TypeError(f"Struct field '{name}' expects dtype {type_repr(dtype)}, got {type_repr(got)}")
    if getattr(value, "ndim", ndim) != ndim:
        raise TypeError(f"Struct field '{name}' expects an array with {ndim} dimension(s), got {value.ndim} "
                        f"dimension(s)")


# ------------------------------------------------------------------------------ annotations

@dataclass(frozen=True)
class ArrayType:
    """Kernel-argument annotation for an array: ``tg.array[float]``, ``tg.array2d[tg.vec3]``."""

    dtype: typing.Any
    ndim: int = 1

    def __post_init__(self):
        if not 1 <= self.ndim <= MAX_DIMS:
            raise ValueError(f"array annotation ndim must be 1..{MAX_DIMS}, got {self.ndim}")

    @property
    def cname(self) -> str:
        return f"tg::array_t<{self.dtype.cname}>"

    def __repr__(self):
        return f"array(dtype={self.dtype!r}, ndim={self.ndim})"


def resolve_dtype(dtype, arg: str = "dtype"):
    """Map a user-given dtype (tapegrad type, Python ``float``/``int``/``bool``, numpy dtype,
    struct class) to a tapegrad type.

    Raises:
        TypeError: the value names no tapegrad type.
    """
    if isinstance(dtype, (ScalarType, VectorType, MatrixType, StructType)):
        return dtype
    if dtype is float:
        return float32
    if dtype is int:
        return int32
    if dtype is bool:
        return bool_
    if isinstance(dtype, type) and hasattr(dtype, "_tg_struct"):
        return dtype._tg_struct
    try:
        nd = np.dtype(dtype)
    except TypeError:
        nd = None
    if nd is not None and dtype is not None:
        s = _by_numpy(nd)
        if s is not None:
            return s
    raise TypeError(f"{arg}: expected a tapegrad dtype (e.g. tg.float32, tg.vec3, float), got {dtype!r}")


def type_of(ann, arg: str = "annotation", allow_array: bool = True):
    """Resolve a kernel/struct annotation (dtype or array annotation) to a tapegrad type.

    Raises:
        TypeError: not a tapegrad type, or one kernels cannot compute with yet (bfloat16).
    """
    if isinstance(ann, ArrayType):
        t = ann
    elif hasattr(ann, "_tg_annotation"):   # an array *instance* used as annotation: tg.array(dtype=float, ndim=2)
        t = ann._tg_annotation()
    else:
        t = resolve_dtype(ann, arg=arg)
    s = getattr(t.dtype if isinstance(t, ArrayType) else t, "scalar", None)
    if s in KERNEL_UNSUPPORTED:
        raise TypeError(f"{arg}: {t!r} cannot be a kernel or struct field type yet: kernels have no {s.name} "
                        f"arithmetic (arrays of {s.name} still convert zero-copy; cast to float32 for kernels)")
    return t


def can_alias(want: ScalarType, have: ScalarType) -> bool:
    """Whether memory of scalar type ``have`` may be viewed as ``want`` without a copy: the same
    type, or integer/bool types of the same width (uint8 data as bool, int32 as uint32...).
    Floats never reinterpret. One rule for DLPack imports and every bridge."""
    if want is have:
        return True
    return want.bits == have.bits and want.kind != "float" and have.kind != "float"


def scalar_of(t):
    """The scalar type underlying ``t`` (itself for scalars)."""
    return t.scalar


# ------------------------------------------------------------------ Warp's introspection
# ``type_is_*(t)`` ask about a type, ``is_*(x)`` about a value, with Warp's answers: Python's
# ``int``/``float`` count as int32/float32, ``bool`` is a value type but neither int nor scalar.
# One deviation follows from tapegrad's scalar values being NumPy scalars (``tg.int8(3)`` is an
# ``np.int8``): NumPy scalar types and values count as their tapegrad types.

def _named_type(t):
    """The tapegrad type ``t`` names (a tapegrad type, Python's int/float/bool, a NumPy scalar
    type, a struct class, a host value class), else None."""
    if t is int:
        return int32
    if t is float:
        return float32
    if t is bool:
        return bool_
    if isinstance(t, (ScalarType, VectorType, MatrixType, StructType)):
        return t
    if isinstance(t, type):
        if hasattr(t, "_tg_struct"):
            return t._tg_struct
        own = getattr(t, "tg_type", None)    # a host value class (type(tg.vec3()))
        if own is not None:
            return own
        if issubclass(t, np.generic):
            return SCALARS_BY_NUMPY.get(np.dtype(t))
    return None


def type_is_int(t) -> bool:
    """Whether ``t`` is an integer type (``int``, ``tg.int32``, ``tg.uint64``...; not bool)."""
    s = _named_type(t)
    return isinstance(s, ScalarType) and s.kind in ("int", "uint")


def type_is_float(t) -> bool:
    """Whether ``t`` is a floating-point type (``float``, ``tg.float16``, ``tg.float64``...)."""
    s = _named_type(t)
    return isinstance(s, ScalarType) and s.kind == "float"


def type_is_scalar(t) -> bool:
    """Whether ``t`` is an integer or floating-point type (bool is not, as in Warp)."""
    return type_is_int(t) or type_is_float(t)


def type_is_vector(t) -> bool:
    """Whether ``t`` is a vector type (``tg.vec3``, ``tg.spatial_vector``; quaternions and
    transforms are not)."""
    s = _named_type(t)
    return isinstance(s, VectorType) and not isinstance(s, (QuatType, TransformType))


def type_is_matrix(t) -> bool:
    """Whether ``t`` is a matrix type (``tg.mat33``, ``tg.types.matrix((5, 5), tg.float64)``)."""
    return isinstance(_named_type(t), MatrixType)


def type_is_quaternion(t) -> bool:
    """Whether ``t`` is a quaternion type (``tg.quat``, ``tg.quatd``...)."""
    return isinstance(_named_type(t), QuatType)


def type_is_transformation(t) -> bool:
    """Whether ``t`` is a transform type (``tg.transform``, ``tg.transformd``...)."""
    return isinstance(_named_type(t), TransformType)


def type_is_composite(t) -> bool:
    """Whether ``t`` is a vector, matrix, quaternion or transform type."""
    return isinstance(_named_type(t), (VectorType, MatrixType))


def type_is_value(t) -> bool:
    """Whether ``t`` is a value type: a scalar type (bool included) or a composite one."""
    return isinstance(_named_type(t), (ScalarType, VectorType, MatrixType))


def type_is_struct(t) -> bool:
    """Whether ``t`` is a ``@tg.struct`` class."""
    return isinstance(_named_type(t), StructType)


def type_is_array(t) -> bool:
    """Whether ``t`` is an array class (``tg.array``, ``tg.indexedarray``)."""
    return isinstance(t, type) and callable(getattr(t, "_tg_annotation", None))


def _type_of_value(x):
    if isinstance(x, type):    # a type is no value of any of them
        return None
    return type(x)


def is_int(x) -> bool:
    """Whether ``x`` is an integer value (``3``, ``tg.int16(3)``; not ``True``)."""
    return type_is_int(_type_of_value(x))


def is_float(x) -> bool:
    """Whether ``x`` is a floating-point value (``1.5``, ``tg.float16(1.5)``)."""
    return type_is_float(_type_of_value(x))


def is_scalar(x) -> bool:
    """Whether ``x`` is an integer or floating-point value."""
    return type_is_scalar(_type_of_value(x))


def is_vector(x) -> bool:
    """Whether ``x`` is a vector value (``tg.vec3(1, 2, 3)``)."""
    return type_is_vector(_type_of_value(x))


def is_matrix(x) -> bool:
    """Whether ``x`` is a matrix value (``tg.mat22(...)``)."""
    return type_is_matrix(_type_of_value(x))


def is_quaternion(x) -> bool:
    """Whether ``x`` is a quaternion value."""
    return type_is_quaternion(_type_of_value(x))


def is_transformation(x) -> bool:
    """Whether ``x`` is a transform value."""
    return type_is_transformation(_type_of_value(x))


def is_composite(x) -> bool:
    """Whether ``x`` is a vector, matrix, quaternion or transform value."""
    return type_is_composite(_type_of_value(x))


def is_value(x) -> bool:
    """Whether ``x`` is a value of a value type (a number, bool, vector, matrix...)."""
    return type_is_value(_type_of_value(x))


def is_struct(x) -> bool:
    """Whether ``x`` is an instance of a ``@tg.struct`` class."""
    return type_is_struct(_type_of_value(x))


def is_array(x) -> bool:
    """Whether ``x`` is an array (``tg.array``, ``tg.indexedarray``) or an array annotation
    (``tg.array(dtype=float)``, ``tg.array2d[tg.vec3]``)."""
    return isinstance(x, ArrayType) or type_is_array(_type_of_value(x))


# --------------------------------------------------------------------------- type queries
# Warp's ``wp.types.type_*`` helpers, for code that inspects dtypes generically.

def _query_type(t, who: str):
    if isinstance(t, type) and hasattr(t, "_tg_struct"):
        return t._tg_struct
    if isinstance(t, (ScalarType, VectorType, MatrixType, StructType)):
        return t
    try:
        return resolve_dtype(t, arg=f"{who}(dtype)")
    except TypeError:
        raise TypeError(f"{who}(dtype): expected a tapegrad dtype (scalar, vector, matrix, quat, struct), "
                        f"got {t!r}") from None


def type_repr(t) -> str:
    """Warp's readable name of a type (``wp.types.type_repr``), as Warp's messages print it:
    ``float32``, ``vec3f``, ``mat22d``, ``quatf``, ``transformh``, ``vector(length=6, dtype=float32)``,
    ``array(ndim=2, dtype=vec3f)``, ``Any``, ``float``; anything else: its qualified name or repr."""
    if t is typing.Any:
        return "Any"
    if callable(getattr(t, "_tg_annotation", None)):   # an array instance used as annotation
        t = t._tg_annotation()
    if isinstance(t, ArrayType):
        return f"array(ndim={t.ndim}, dtype={type_repr(t.dtype)})"
    if isinstance(t, type) and hasattr(t, "_tg_struct"):
        t = t._tg_struct
    if isinstance(t, StructType):
        return f"{t.cls.__module__}.{t.cls.__qualname__}"
    if isinstance(t, ScalarType):
        return t.name
    if isinstance(t, (VectorType, MatrixType)):
        sn = None if t.scalar is bool_ else ("f" if t.scalar is float32 else _SUFFIX.get(t.scalar))
        if t.scalar is bfloat16:
            sn = "bf"
        if isinstance(t, (QuatType, TransformType)):
            base = "quat" if isinstance(t, QuatType) else "transform"
            return f"{base}{sn}" if sn else f"{base}(dtype={type_repr(t.scalar)})"
        if isinstance(t, VectorType):
            if sn and t.length_ <= 4:
                return f"vec{t.length_}{sn}"
            return f"vector(length={t.length_}, dtype={type_repr(t.scalar)})"
        if sn and t.rows <= 4 and t.cols <= 4:
            return f"mat{t.rows}{t.cols}{sn}"
        return f"matrix(shape=({t.rows}, {t.cols}), dtype={type_repr(t.scalar)})"
    if t in (bool, float, int):
        return t.__name__
    name = getattr(t, "__name__", None)
    if name is None:
        return repr(t)
    return f"{getattr(t, '__module__', '')}.{getattr(t, '__qualname__', name)}".lstrip(".")


def type_size_in_bytes(dtype) -> int:
    """Bytes one element of ``dtype`` occupies (``vec3`` -> 12; a struct: its C layout).

    Raises:
        TypeError: ``dtype`` is not a tapegrad dtype.
    """
    return _query_type(dtype, "type_size_in_bytes").size


def type_length(dtype) -> int:
    """Number of scalar components of ``dtype`` (1 for scalars, 9 for ``mat33``).

    Raises:
        TypeError: ``dtype`` is not a scalar, vector or matrix type.
    """
    t = _query_type(dtype, "type_length")
    if isinstance(t, StructType):
        raise TypeError(f"type_length(dtype): struct {t.name} has no component count")
    return t.length


type_size = type_length   # Warp's name for the same count


def type_scalar_type(dtype) -> ScalarType:
    """The scalar type of ``dtype``'s components (itself for a scalar type).

    Raises:
        TypeError: ``dtype`` is not a scalar, vector or matrix type.
    """
    t = _query_type(dtype, "type_scalar_type")
    if isinstance(t, StructType):
        raise TypeError(f"type_scalar_type(dtype): struct {t.name} has no scalar type")
    return t.scalar


# -------------------------------------------------------------------------------- mappings

def dtype_to_numpy(dtype) -> np.dtype:
    """Return the numpy scalar type of a tapegrad scalar dtype.

    Raises:
        TypeError: ``dtype`` is a vector/matrix/struct type or unknown.
    """
    t = resolve_dtype(dtype)
    if not isinstance(t, ScalarType):
        raise TypeError(f"dtype_to_numpy: {t!r} has no single numpy scalar type "
                        f"(use dtype_to_numpy({t.scalar!r}) for its components)" if t.scalar
                        else f"dtype_to_numpy: {t!r} has no numpy scalar type")
    return t.np_dtype.type


def dtype_from_numpy(np_dtype) -> ScalarType:
    """Return the tapegrad scalar type of a numpy dtype.

    Raises:
        TypeError: numpy dtype has no tapegrad equivalent (complex, strings, objects...).
    """
    try:
        nd = np.dtype(np_dtype)
    except TypeError as e:
        raise TypeError(f"dtype_from_numpy: {np_dtype!r} is not a numpy dtype") from e
    s = _by_numpy(nd)
    if s is None:
        raise TypeError(f"dtype_from_numpy: numpy dtype {nd} has no tapegrad type")
    return s


def _by_numpy(nd: np.dtype):
    s = SCALARS_BY_NUMPY.get(nd)
    if s is None and nd.name == "bfloat16" and nd.itemsize == 2:   # ml_dtypes.bfloat16 (already imported)
        s = bfloat16
    return s


def dtype_to_dlpack(dtype) -> tuple[int, int, int]:
    """Return DLPack ``(code, bits, lanes)`` of a scalar dtype or of a vector/matrix's components.

    Raises:
        TypeError: struct dtypes have no DLPack form.
    """
    t = resolve_dtype(dtype)
    if isinstance(t, StructType):
        raise TypeError(f"struct dtype {t.name} has no DLPack equivalent")
    return (t.scalar.dl_code, t.scalar.bits, 1)


def dtype_from_dlpack(code: int, bits: int) -> ScalarType:
    """Return the tapegrad scalar type for a DLPack ``(code, bits)``.

    Raises:
        TypeError: no matching scalar type (complex, fp8, sub-byte types...).
    """
    key = (code, bits)
    if key not in _BY_DLPACK:
        raise TypeError(f"DLPack dtype (code={code}, bits={bits}) has no tapegrad equivalent")
    return _BY_DLPACK[key]


# ---------------------------------------------------------------- named vector/matrix types

vec2, vec3, vec4 = (vector(n, float32) for n in (2, 3, 4))
vec2d, vec3d, vec4d = (vector(n, float64) for n in (2, 3, 4))
vec2h, vec3h, vec4h = (vector(n, float16) for n in (2, 3, 4))
vec2i, vec3i, vec4i = (vector(n, int32) for n in (2, 3, 4))
mat22, mat33, mat44 = (matrix((n, n), float32) for n in (2, 3, 4))
mat22d, mat33d, mat44d = (matrix((n, n), float64) for n in (2, 3, 4))
mat22h, mat33h, mat44h = (matrix((n, n), float16) for n in (2, 3, 4))
quat = QuatType(4, float32, "quat")
quatd = QuatType(4, float64, "quatd")
quath = QuatType(4, float16, "quath")

transform = TransformType(7, float32, "transform")
transformd = TransformType(7, float64, "transformd")
transformh = TransformType(7, float16, "transformh")
# spatial vectors / matrices are 6-vectors and 6x6 matrices (Warp: vec_t<6> / mat_t<6,6>)
spatial_vector, spatial_vectord, spatial_vectorh = (vector(6, s) for s in (float32, float64, float16))
spatial_matrix, spatial_matrixd, spatial_matrixh = (matrix((6, 6), s) for s in (float32, float64, float16))
spatial_vectorf, spatial_matrixf, transformf = spatial_vector, spatial_matrix, transform
_QUATS = {float32: quat, float64: quatd, float16: quath}
_TRANSFORMS = {float32: transform, float64: transformd, float16: transformh}

# Warp's explicitly float32-suffixed names are the same objects
vec2f, vec3f, vec4f = vec2, vec3, vec4
mat22f, mat33f, mat44f = mat22, mat33, mat44
quatf = quat

# the integer vector families (Warp: b int8, ub uint8, s int16, us uint16, ui uint32, l int64, ul uint64)
vec2b, vec3b, vec4b = (vector(n, int8) for n in (2, 3, 4))
vec2ub, vec3ub, vec4ub = (vector(n, uint8) for n in (2, 3, 4))
vec2s, vec3s, vec4s = (vector(n, int16) for n in (2, 3, 4))
vec2us, vec3us, vec4us = (vector(n, uint16) for n in (2, 3, 4))
vec2ui, vec3ui, vec4ui = (vector(n, uint32) for n in (2, 3, 4))
vec2l, vec3l, vec4l = (vector(n, int64) for n in (2, 3, 4))
vec2ul, vec3ul, vec4ul = (vector(n, uint64) for n in (2, 3, 4))

# Names of every vector/matrix/quat type defined above (the package face re-exports them).
NAMED_TYPES = tuple(n for n, v in list(globals().items())
                    if isinstance(v, (VectorType, MatrixType)) and not n.startswith("_"))


def _value_class_of(shape, np_dtype):
    """The host value class of a result of ``shape`` (a vector or matrix) and numpy dtype."""
    s = SCALARS_BY_NUMPY.get(np_dtype)
    if s is None or s is bool_ or not all(shape):
        return None
    return (vector(shape[0], s) if len(shape) == 1 else matrix(shape, s)).value_class


set_resolver(_value_class_of)


def _scalar_named(name: str) -> ScalarType:
    return SCALARS[name]


def _composite_named(kind: str, shape: tuple, scalar: str):
    s = SCALARS[scalar]
    if kind == "quat":
        return quaternion(s)
    if kind == "transform":
        return transformation(s)
    return vector(shape[0], s) if kind == "vector" else matrix(shape, s)


def types_equal(a, b) -> bool:
    """Whether two type descriptions name the same tapegrad type (Warp's ``types_equal``): a
    tapegrad type, the class of a host value (``type(tg.transform_identity())``), Python
    ``float``/``int``/``bool`` or a NumPy dtype; descriptions naming no type are equal only when
    they are the same object.

    Args:
        a, b: the type descriptions.
    Returns:
        True when both resolve to the same type.
    """
    def resolve(t):
        t = getattr(t, "tg_type", t)      # a host value class carries its type
        try:
            return resolve_dtype(t)
        except TypeError:
            return t
    return resolve(a) == resolve(b)
