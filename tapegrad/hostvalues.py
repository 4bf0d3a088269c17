"""Host-side values of vector, matrix, quaternion and transform types (``tg.vec3(1, 2, 3)``).

A value is a numpy array of its type's component shape whose class carries Warp's interface:
component attributes (``v.x``... ``v.w``), ``==``/``!=`` answering one bool, ``m.get_row(i)`` /
``set_row`` / ``get_col`` / ``set_col``, a transform's ``t.p`` / ``t.q``, and Warp's products
(``m * m`` and ``m * v`` are matrix products, ``q * q`` the quaternion product, ``t * t`` the
transform composition). Everything else is numpy's: the values pass to kernels, to numpy and to
the frameworks as the arrays they are, with no conversion.

This module imports nothing from tapegrad: ``tapegrad.types`` builds one class per type
(``value_class``) and tells it how to find the class of a result's shape (``set_resolver``).
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["HostValue", "value_class", "set_resolver"]

_LEGACY_SCALARS = [False]   # Warp's config.legacy_scalar_return_types (set_legacy_scalars)


def set_legacy_scalars(on: bool) -> None:
    """Components read from a value (``v[0]``, ``m[0, 1]``) as Python ``float``/``int`` (True,
    Warp's ``config.legacy_scalar_return_types``) or as NumPy scalars of the type (False)."""
    _LEGACY_SCALARS[0] = bool(on)


def legacy_scalars() -> bool:
    """Whether components are read as Python numbers (``set_legacy_scalars``)."""
    return _LEGACY_SCALARS[0]


_RESOLVER = [None]   # (shape, numpy dtype) -> value class or None; set by tapegrad.types


def set_resolver(fn) -> None:
    """Install ``fn(shape, np_dtype)``: the value class of a vector/matrix result shape, or None."""
    _RESOLVER[0] = fn


def _is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) or (isinstance(x, np.ndarray) and x.ndim == 0)


class HostValue(np.ndarray):
    """Base class of the values (see the module docstring). ``tg_type`` is the tapegrad type."""

    tg_type = None
    kind = ""            # "vector", "matrix", "quat" or "transform"
    __hash__ = None      # mutable, as numpy arrays and Warp's values

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        if arr.ndim == 0:
            return arr[()] if return_scalar else arr.view(np.ndarray)
        return _typed(arr, type(self))

    def _check_key(self, key):
        """Keys Warp's values refuse with a KeyError (None, strings, floats; more indices than a
        matrix has); ints, slices, pairs, ``...``, ``None`` inside a tuple (a new axis: numpy's
        own functions use it) and numpy's index arrays (masks) pass."""
        if key is None:
            raise KeyError("Invalid key None, expected int or pair of ints" if self.ndim == 2 else
                           "Invalid key None, expected int or slice")
        mat = self.ndim == 2
        items = key if isinstance(key, tuple) else (key,)
        if mat and len(items) > 2 and not any(k is None or k is Ellipsis for k in items):
            raise KeyError(f"Invalid key, expected one or two indices, got {len(items)}")
        if any(isinstance(k, (str, bytes, float)) for k in items):
            raise KeyError(f"Invalid key {key}, expected int or pair of ints" if mat else
                           f"Invalid key {key}, expected int or slice")

    def __setitem__(self, key, value):
        self._check_key(key)
        dst = self.view(np.ndarray)[key]
        name = self.tg_type.scalar.name
        if isinstance(value, (str, bytes)):
            raise TypeError(f"Expected to assign a `{name}` value but got `{type(value).__name__}` instead")
        if isinstance(dst, np.ndarray) and dst.ndim and isinstance(value, (list, tuple)):
            for x in value:
                if np.ndim(x) > dst.ndim - 1 or isinstance(x, (str, bytes)):
                    raise TypeError(f"Expected to assign a slice from a sequence of `{name}` values but got "
                                    f"`{type(x).__name__}` instead")
            if len(value) != dst.shape[0]:
                raise ValueError(f"Can only assign sequence of same size (expected {dst.shape[0]}, got "
                                 f"{len(value)})")
        super().__setitem__(key, value)

    def __getitem__(self, key):
        self._check_key(key)
        r = super().__getitem__(key)
        if isinstance(r, np.ndarray):
            if r.ndim == 0:
                r = r[()]
            else:
                return _typed(r, None)
        if _LEGACY_SCALARS[0] and isinstance(r, np.generic):
            return r.item()   # Warp's legacy_scalar_return_types: a Python float/int
        return r

    def __eq__(self, other):
        """Warp's ``==``: one bool, True when ``other`` has the same components."""
        try:
            o = np.asarray(other)
        except Exception:  # noqa: BLE001  anything numpy cannot read is simply not equal
            return False
        if o.shape != self.shape:
            return o.size == 0 and self.size == 0   # two empty values are equal (Warp: m[4:] == mat00())
        return bool(np.all(self.view(np.ndarray) == o))

    def __ne__(self, other):
        return not self.__eq__(other)

    # a % b with C's semantics (the sign of a), as Warp's kernels and host values
    def __mod__(self, other):
        return np.fmod(self, other)

    def __rmod__(self, other):
        return np.fmod(other, self)

    def __imod__(self, other):
        np.fmod(self, other, out=self)
        return self

    # two values of different component types: no implicit conversion, as in kernels (Warp's
    # "Couldn't find a function 'add' compatible with the arguments 'vec3f, vec3d'")
    def __add__(self, other):
        _same_scalars("add", self, other)
        return super().__add__(other)

    def __radd__(self, other):
        _same_scalars("add", other, self)
        return super().__radd__(other)

    def __sub__(self, other):
        _same_scalars("sub", self, other)
        return super().__sub__(other)

    def __rsub__(self, other):
        _same_scalars("sub", other, self)
        return super().__rsub__(other)

    def __iadd__(self, other):   # numpy's in-place add rounded a vec3d into a vec3f silently
        _same_scalars("add", self, other)
        return super().__iadd__(other)

    def __isub__(self, other):
        _same_scalars("sub", self, other)
        return super().__isub__(other)

    def __truediv__(self, other):
        _same_scalars("div", self, other)
        return super().__truediv__(other)

    def __rtruediv__(self, other):
        _same_scalars("div", other, self)
        return super().__rtruediv__(other)

    def __itruediv__(self, other):
        _same_scalars("div", self, other)
        return super().__itruediv__(other)

    def __mul__(self, other):
        if _is_scalar(other):
            _same_scalars("mul", self, other)
            return super().__mul__(other)
        return _product(self, other)

    def __rmul__(self, other):
        if _is_scalar(other):
            return super().__rmul__(other)
        return _product(other, self)

    def __imul__(self, other):
        if _is_scalar(other):
            _same_scalars("mul", self, other)
            return super().__imul__(other)
        self[...] = _product(self, other)
        return self

    def __matmul__(self, other):
        return _product(self, other)

    def __rmatmul__(self, other):
        return _product(other, self)

    def __str__(self):   # Warp's: a matrix prints a row per line
        rows = self.view(np.ndarray).tolist()
        if self.ndim == 2:
            return "[" + ",\n ".join(str(r) for r in rows) + "]"
        return str(rows)

    def __repr__(self):
        # Warp's: float32/int32 components as Python numbers, the others with their type's name
        # (vec4d([float64(1.0), ...])); a matrix as its rows
        items = self.view(np.ndarray).tolist()
        name = self.dtype.name
        if name not in ("float32", "int32", "bool") and self.ndim == 1:
            items = "[" + ", ".join(f"{name}({x!r})" for x in items) + "]"
        return f"{type(self).__name__}({items})"

    def __reduce__(self):   # pickles as its type's value (numpy's would lose the class)
        return (_rebuild, (type(self).tg_type, self.view(np.ndarray).copy()))


def _rebuild(tg_type, data):
    return data.view(tg_type.value_class)


def _typed(arr: np.ndarray, own):
    """``arr`` as the value class of its shape and dtype (``own`` when it matches), else plain."""
    if own is not None and arr.shape == own.tg_type.inner_shape and arr.dtype == own.tg_type.np_dtype:
        return arr.view(own)
    fn = _RESOLVER[0]
    cls = fn(arr.shape, arr.dtype) if fn is not None and arr.ndim in (1, 2) else None
    return arr.view(cls) if cls is not None else arr.view(np.ndarray)


def _kind(x) -> str:
    return x.kind if isinstance(x, HostValue) else ""


def _same_scalars(op: str, a, b) -> None:
    """Raise Warp's RuntimeError when ``a`` and ``b`` are both values, of different component
    types, or a value and a NumPy scalar (``np.float64(2)``, ``tg.float64(2)``) of another type
    (numpy promoted ``vec3f * np.float64(2)`` to a vec3d; Warp has no such overload). Python
    numbers are literals and combine with any value."""
    if isinstance(a, HostValue) and isinstance(b, HostValue) and a.dtype != b.dtype:
        raise RuntimeError(f"Couldn't find a function '{op}' compatible with the arguments "
                           f"'{type(a).__name__}, {type(b).__name__}'")
    if isinstance(a, HostValue) and isinstance(b, np.generic) and not isinstance(b, np.bool_) \
            and b.dtype != a.dtype:
        raise RuntimeError(f"Couldn't find a function '{op}' compatible with the arguments "
                           f"'{type(a).__name__}, {b.dtype.name}'")


def _product(a, b):
    """Warp's ``*`` of two values: matrix products, the quaternion product, the transform
    composition. Two vectors have no product (Warp has none; ``cw_mul`` is the componentwise one).

    Raises:
        RuntimeError: values of different component types (mat22f * mat22d), as Warp's.
        TypeError: two vectors, or shapes without a product.
    """
    _same_scalars("mul", a, b)
    ka, kb = _kind(a), _kind(b)
    A = np.asarray(a)
    B = np.asarray(b)
    if ka == kb == "quat":
        return _quat_mul(A, B).view(type(a))
    if ka == kb == "transform":
        return _transform_mul(A, B).view(type(a))
    if A.ndim == 2 or B.ndim == 2:
        if A.ndim == 1 and B.ndim == 2:   # vector * matrix: the row vector times the matrix
            return _typed(A @ B, None)
        if A.ndim == 2 and B.ndim in (1, 2):
            return _typed(A @ B, type(a) if B.ndim == 2 and A.shape == B.shape else None)
    raise TypeError(f"no product of {type(a).__name__} and {type(b).__name__} (as in Warp: vectors multiply "
                    f"componentwise with tg.cw_mul, and scale by scalars)")


def _quat_mul(a, b):
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([aw * bx + bw * ax + ay * bz - az * by,
                     aw * by + bw * ay + az * bx - ax * bz,
                     aw * bz + bw * az + ax * by - ay * bx,
                     aw * bw - ax * bx - ay * by - az * bz], dtype=np.result_type(a, b))


def _quat_rotate(q, v):
    qv = q[:3]
    w = q[3]
    return v * (2.0 * w * w - 1.0) + np.cross(qv, v) * w * 2.0 + qv * np.dot(qv, v) * 2.0


def _transform_mul(a, b):
    p = _quat_rotate(a[3:], b[:3]) + a[:3]
    q = _quat_mul(a[3:], b[3:])
    return np.concatenate([p, q]).astype(np.result_type(a, b))


def _component(i):
    def get(self):
        return self.view(np.ndarray)[i][()]

    def set_(self, value):
        self.view(np.ndarray)[i] = value
    return property(get, set_, doc=f"Component {i}.")


def _part(start, stop, which):
    def get(self):
        return self.view(np.ndarray)[start:stop].view(getattr(type(self), which))

    def set_(self, value):
        self.view(np.ndarray)[start:stop] = np.asarray(value).reshape(-1)
    return property(get, set_)


class _MatrixMethods:
    def get_row(self, r):
        """Row ``r`` (a copy), as the vector type of the row length.

        Raises:
            IndexError: ``r`` is out of range.
        """
        return _typed(np.array(self.view(np.ndarray)[self._index(r, 0, "row")]), None)

    def get_col(self, c):
        """Column ``c`` (a copy), as the vector type of the column length.

        Raises:
            IndexError: ``c`` is out of range.
        """
        return _typed(np.array(self.view(np.ndarray)[:, self._index(c, 1, "column")]), None)

    def set_row(self, r, v):
        """Set row ``r`` to ``v`` (a sequence of the row length, or a scalar).

        Raises:
            IndexError: ``r`` is out of range. ValueError: ``v`` has another length.
        """
        self.view(np.ndarray)[self._index(r, 0, "row")] = self._line(v, 1)

    def set_col(self, c, v):
        """Set column ``c`` to ``v`` (a sequence of the column length, or a scalar).

        Raises:
            IndexError: ``c`` is out of range. ValueError: ``v`` has another length.
        """
        self.view(np.ndarray)[:, self._index(c, 1, "column")] = self._line(v, 0)

    def _index(self, i, axis, what):
        n = self.shape[axis]
        if not -n <= i < n:
            raise IndexError(f"Invalid {what} index")   # Warp's words
        return i % n

    def _line(self, v, axis):
        n = self.shape[axis]
        a = np.asarray(v)
        if a.ndim and a.shape != (n,):
            raise ValueError(f"{type(self).__name__}: expected {n} values, got {a.size}")
        return a


def value_class(tg_type, kind: str, name: str, parts: dict | None = None) -> type:
    """The value class of a vector/matrix/quat/transform type.

    Args:
        tg_type: the type (its ``inner_shape`` and ``np_dtype`` describe the values).
        kind: "vector", "matrix", "quat" or "transform".
        name: the class name (Warp's: ``vec3f``).
        parts: a transform's ``{"p": vec3 class, "q": quat class}``.
    Returns:
        A ``HostValue`` subclass.
    """
    ns = {"tg_type": tg_type, "kind": kind, "__module__": "tapegrad.types", "__slots__": ()}
    bases = (HostValue,)
    if kind in ("vector", "quat", "transform"):
        for i, c in enumerate("xyzw"[:min(4, tg_type.inner_shape[0])]):
            ns[c] = _component(i)
    if kind == "transform":
        ns["_p_cls"], ns["_q_cls"] = parts["p"], parts["q"]
        ns["p"] = _part(0, 3, "_p_cls")
        ns["q"] = _part(3, 7, "_q_cls")
    if kind == "matrix":
        bases = (_MatrixMethods, HostValue)
    return type(name, bases, ns)
