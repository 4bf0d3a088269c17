"""Warp's indexed arrays: an array seen through per-dimension index arrays.

``tg.indexedarray(data, [i0, None, i2])`` (or ``data[i0, :, i2]`` with int32 index arrays) has
``shape[d] = len(i_d)`` where dimension ``d`` is indexed and ``data.shape[d]`` where it is not;
element ``(j0, j1, j2)`` is ``data[i0[j0], j1, i2[j2]]`` (each index array picks along its own
dimension: an outer product, as in Warp, not NumPy's fancy indexing). The indexed array holds
no memory of its own: reads gather from ``data``, writes scatter into it.

On the host: ``numpy()``/``list()`` (a gathered copy), ``fill_``, ``zero_``, ``assign``,
``contiguous()``, ``tg.copy`` in both directions and ``tg.clone``; indices are checked against
``data``'s extents on each of them (Warp reads past the end). Gathers and scatters are kernel
launches (``tapegrad.indexed_ops``) on the data's device, recorded on an active tape with their
exact adjoints; ``numpy()`` of a CPU one reads the host view directly.

In kernels, a parameter annotated ``tg.indexedarray[dtype]`` / ``tg.indexedarray[dtype,
Literal[n]]`` (or a struct field so annotated) is an ``IndexedArrayType``: a struct of the data
array and its index arrays, so launches, tapes and gradients treat it as one (see
``tapegrad/lang``).
"""
from __future__ import annotations

import ctypes
import typing

import numpy as np

from . import types
from .array import array, clone, copy, register_indexed
from .errors import CopyArgumentError, CopyTypeError
from .types import ArrayDesc, ArrayType, StructType

__all__ = ["indexedarray", "indexedarray1d", "indexedarray2d", "indexedarray3d", "indexedarray4d",
           "IndexedArrayType", "indexed_type", "register_copy_kernel"]

MAX_DIMS = types.MAX_DIMS
INDEX_FIELDS = tuple(f"index{d}" for d in range(MAX_DIMS))


class _CopyKernel:
    """``copy_elements(dst, src)``: the element copy launch ``tapegrad.indexed_ops`` registers
    (it sits above the kernel language, which sits above this module)."""

    run = None


_COPY = _CopyKernel()


def register_copy_kernel(fn) -> None:
    """Let indexed arrays gather and scatter through ``fn(dst, src)``, a kernel launch
    (``tapegrad.indexed_ops`` registers it)."""
    _COPY.run = fn


def _copy_kernel():
    if _COPY.run is None:
        raise RuntimeError("indexedarray: the element copy kernel is not registered (import tapegrad, whose package "
                           "face imports tapegrad.indexed_ops)")
    return _COPY.run


class IndexedArrayType(StructType):
    """The kernel type of an indexed array of ``dtype`` and ``ndim`` dimensions: a struct of
    ``data`` (an array of that dtype and ndim) and one int32 index array per dimension (a null
    array where the dimension is not indexed). Its values are ``tg.indexedarray`` objects."""

    @property
    def indexed(self) -> tuple:
        """``(dtype, ndim)``."""
        data_t = self.fields[0][1]
        return data_t.dtype, data_t.ndim

    @property
    def dtype(self):
        """The element type (Warp's annotation attribute)."""
        return self.indexed[0]

    @property
    def ndim(self) -> int:
        """The number of dimensions (Warp's annotation attribute)."""
        return self.indexed[1]

    def to_ctype(self, value, device=None):
        """Pack an indexed array, checking its dtype and dimensions first.

        Raises:
            TypeError: not an indexed array of this dtype and ndim.
        """
        dtype, ndim = self.indexed
        if not isinstance(value, indexedarray):
            raise TypeError(f"expected a tg.indexedarray of {types.type_repr(dtype)} with {ndim} dimension(s), got "
                            f"{type(value).__name__}")
        if value.data is not None and (value.dtype is not dtype or value.ndim != ndim):
            raise TypeError(f"expected a tg.indexedarray of {types.type_repr(dtype)} with {ndim} dimension(s), got one "
                            f"of {types.type_repr(value.dtype)} with {value.ndim}")
        return super().to_ctype(value, device)

    def __repr__(self):
        dtype, ndim = self.indexed
        return f"indexedarray(dtype={dtype!r}, ndim={ndim})"


_TYPES: dict = {}


def indexed_type(dtype, ndim: int = 1) -> IndexedArrayType:
    """The (cached) ``IndexedArrayType`` of ``dtype`` and ``ndim``.

    Raises:
        TypeError: ``dtype`` is no tapegrad dtype. ValueError: ``ndim`` not in 1..4.
    """
    dt = types.resolve_dtype(dtype)
    ndim = int(ndim)
    if not 1 <= ndim <= MAX_DIMS:
        raise ValueError(f"indexedarray: ndim must be 1..{MAX_DIMS}, got {ndim}")
    t = _TYPES.get((dt, ndim))
    if t is None:
        fields = (("data", ArrayType(dt, ndim)),) + tuple((INDEX_FIELDS[d], ArrayType(types.int32, 1))
                                                          for d in range(ndim))
        name = f"indexedarray{ndim}d_{c_name(dt)}"
        ctype = type(f"{name}_ctype", (ctypes.Structure,), {"_fields_": [(f, ArrayDesc) for f, _ in fields]})
        t = _TYPES[(dt, ndim)] = IndexedArrayType(indexedarray, name, fields, ctype)
    return t


def c_name(dt) -> str:
    """A C identifier for dtype ``dt`` (in the name of its indexed type)."""
    return "".join(c if c.isalnum() else "_" for c in getattr(dt, "cname", str(dt)))


def _literal_ndim(arg) -> int:
    """``Literal[2]`` (or a plain int) as an ndim."""
    if isinstance(arg, int):
        return arg
    if typing.get_origin(arg) is typing.Literal and len(typing.get_args(arg)) == 1:
        return int(typing.get_args(arg)[0])
    raise TypeError(f"indexedarray[dtype, ndim]: ndim must be Literal[n] or an int, got {arg!r}")


def _index_values(ix, d: int) -> np.ndarray:
    """Host index values (a list or NumPy array of ints) as int32, refusing what int32 would
    change: fractional numbers (truncated) and values past int32's range (wrapped).

    Raises:
        TypeError: not integers. ValueError: a value out of int32's range.
    """
    v = np.asarray(ix)
    if v.size == 0:
        return v.astype(np.int32)
    if v.dtype.kind not in "iu":
        raise TypeError(f"indexedarray: the indices of dimension {d} must be integers, got {v.dtype} values")
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    if v.min() < lo or v.max() > hi:
        bad = v[(v < lo) | (v > hi)].reshape(-1)[0]
        raise ValueError(f"indexedarray: index {int(bad)} of dimension {d} does not fit the int32 index array")
    return v.astype(np.int32)


class indexedarray:
    """An array seen through per-dimension int32 index arrays (Warp's ``indexedarray``).

    Args:
        data: the array (None: an annotation-only object, as ``tg.indexedarray(dtype=float)``).
        indices: one entry per leading dimension of ``data``: a 1-D int32 array on ``data``'s
            device (or a list / NumPy array of ints, copied into one), or None (that dimension
            not indexed); missing trailing entries are None.
        dtype, ndim: of an annotation-only object (no ``data``).
    Raises:
        TypeError: ``data`` is not a tapegrad array; an index array is not of int32 (Warp's
            message) or not 1-D.
        ValueError: more index entries than ``data`` has dimensions.
        RuntimeError: an index array on another device than ``data``.
    """

    __array_priority__ = 10
    is_contiguous = False      # its elements are scattered over data

    def __class_getitem__(cls, params):
        params = params if isinstance(params, tuple) else (params,)
        if len(params) not in (1, 2):
            raise TypeError(f"indexedarray[dtype] or indexedarray[dtype, Literal[ndim]], got {len(params)} parameters")
        return indexed_type(params[0], _literal_ndim(params[1]) if len(params) == 2 else 1)

    def __init__(self, data=None, indices=None, dtype=None, ndim=None):
        if data is None:
            self.data = None
            self.dtype = types.resolve_dtype(dtype if dtype is not None else types.float32)
            nd = 1 if ndim is None else int(ndim)
            self.indices = [None] * nd
            self.shape = (0,) * nd
            self.device = None
            return
        if not isinstance(data, array):
            raise TypeError(f"indexedarray(data=...): expected a tapegrad array, got {type(data).__name__}")
        if ndim is not None and int(ndim) != data.ndim:
            raise ValueError(f"indexedarray: ndim={ndim} does not match the data's {data.ndim} dimension(s)")
        if isinstance(indices, (array, np.ndarray)):   # one index array, not a list of them
            raise TypeError(f"indexedarray(indices=...): expected a list with one index array (or None) per "
                            f"dimension, got a {type(indices).__name__}; pass [indices]")
        indices = list(indices or [])
        if len(indices) > data.ndim:
            raise ValueError(f"indexedarray: {len(indices)} index arrays for data with {data.ndim} dimension(s)")
        indices += [None] * (data.ndim - len(indices))
        out, shape = [], []
        for d, ix in enumerate(indices):
            if ix is None:
                out.append(None)
                shape.append(data.shape[d])
                continue
            if not isinstance(ix, array):
                ix = array(_index_values(ix, d), dtype=types.int32, device=data.device)
            if ix.dtype is not types.int32:
                raise TypeError(f"Index array must use int32, got dtype {types.type_repr(ix.dtype)} (index of "
                                f"dimension {d})")
            if ix.ndim != 1:
                raise TypeError(f"indexedarray: the index array of dimension {d} must be 1-D, got shape {ix.shape}")
            if ix.device is not data.device:
                raise RuntimeError(f"indexedarray: the index array of dimension {d} is on {ix.device}, the data on "
                                   f"{data.device}")
            out.append(ix)
            shape.append(ix.shape[0])
        self.data = data
        self.dtype = data.dtype
        self.indices = out
        self.shape = tuple(shape)
        self.device = data.device

    def __setattr__(self, name, value):
        # the tape's struct walkers build twins field by field (``type(ia)()``, then ``data`` and
        # ``index0``.. set): keep dtype, device, shape and indices those of the fields set
        if name in INDEX_FIELDS and "indices" in self.__dict__:
            d = INDEX_FIELDS.index(name)
            idx = list(self.indices) + [None] * (d + 1 - len(self.indices))
            idx[d] = value
            object.__setattr__(self, "indices", idx)
            self._refresh()
            return
        object.__setattr__(self, name, value)
        if name == "data" and "indices" in self.__dict__:
            self._refresh()

    def _refresh(self) -> None:
        """dtype, device, shape and the index list after a field was set (no data: unchanged)."""
        data = self.data
        if not isinstance(data, array):
            return
        idx = (list(self.indices) + [None] * data.ndim)[:data.ndim]
        object.__setattr__(self, "indices", idx)
        object.__setattr__(self, "dtype", data.dtype)
        object.__setattr__(self, "device", data.device)
        object.__setattr__(self, "shape", tuple(data.shape[d] if ix is None else ix.shape[0]
                                                for d, ix in enumerate(idx)))

    # ------------------------------------------------------------------ Warp's interface
    def _tg_annotation(self):
        return indexed_type(self.dtype, self.ndim)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __len__(self):
        return self.shape[0]

    @property
    def requires_grad(self) -> bool:
        return self.data is not None and self.data.requires_grad

    def gradient_view(self):
        """This selection of ``data``'s gradient: an indexed array over ``data.grad`` with the same
        index arrays (None when ``data`` has no gradient; ``Tape.gradients[ia]``)."""
        g = self.data.grad if self.data is not None else None
        return None if g is None else indexedarray(g, list(self.indices))

    def __getattr__(self, name):
        # the struct fields index0..index3 a launch packs (null where a dimension is not indexed)
        if name in INDEX_FIELDS:
            d = INDEX_FIELDS.index(name)
            return self.indices[d] if d < len(self.indices) else None
        raise AttributeError(f"'indexedarray' object has no attribute '{name}'")

    def __repr__(self):
        if self.data is None:
            return f"indexedarray(dtype={self.dtype!r}, ndim={self.ndim})"
        return f"indexedarray({self.numpy()!r}, dtype={self.dtype!r}, device={self.device})"

    # -------------------------------------------------------------------- gather/scatter
    def _grid(self):
        """The NumPy index of the selected elements of ``data``'s host view (``np.ix_`` over
        every dimension), checked against ``data``'s extents."""
        return np.ix_(*self._parts())

    def _check_distinct(self, what: str) -> None:
        """Refuse a scatter from a source through repeated indices: several source elements
        would write one element of ``data``, and which lands is up to the threads' order (and
        the tape's adjoint could not know which one to pass the gradient to).

        Raises:
            ValueError: an index array names one element twice (``-1`` and ``n - 1`` alike).
        """
        for d, part in enumerate(self._parts()):
            if self.indices[d] is not None and np.unique(part).size != part.size:
                vals, counts = np.unique(part, return_counts=True)
                raise ValueError(f"indexedarray.{what}: the index array of dimension {d} selects element "
                                 f"{int(vals[counts > 1][0])} more than once; a scatter from a source writes each "
                                 f"selected element once (several sources for one element land in no defined "
                                 f"order): pass distinct indices")

    def _parts(self) -> list:
        """Per dimension, the selected positions of ``data`` (negative indices wrapped once),
        checked against ``data``'s extents."""
        parts = []
        for d, ix in enumerate(self.indices):
            n = self.data.shape[d]
            if ix is None:
                parts.append(np.arange(n))
                continue
            v = ix.numpy().astype(np.int64)
            bad = (v < -n) | (v >= n)
            if bad.any():
                raise IndexError(f"indexedarray: index {int(v[bad][0])} of dimension {d} is out of range for the "
                                 f"data's extent {n}")
            parts.append(np.where(v < 0, v + n, v))
        return parts

    def numpy(self) -> np.ndarray:
        """The selected elements, gathered into a new NumPy array (vector/matrix dtypes: with
        their component dims)."""
        if self.data is None:
            return np.empty(self.shape, dtype=types.dtype_to_numpy(self.dtype.scalar))
        if self.data.device.is_cpu:     # read straight from the host view
            return np.ascontiguousarray(self.data.numpy()[self._grid()])
        return self.contiguous().numpy()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def list(self):
        """Every selected element, row-major, as Python values (as ``array.list()``)."""
        return self.contiguous().list()

    def contiguous(self) -> array:
        """A new contiguous array of the selected elements, on this array's device (a gather
        launch: recorded on an active tape, with its adjoint)."""
        # as Warp's (empty_like, then copy): the copy needs a gradient when the data has one, or
        # the gather's adjoint would have nothing to pass back to the selected elements
        out = array(shape=self.shape, dtype=self.dtype, device=self.device, requires_grad=self.requires_grad)
        if self.data is not None:
            self._grid()
            _copy_kernel()(out, self)
        return out

    def _scatter_from(self, src, what: str, distinct: bool = False) -> None:
        """``self[...] = src[...]`` for an array or indexed array ``src`` of this shape and
        dtype (another device: copied here first, recorded as a copy); ``distinct``: refuse
        repeated indices (a source of several values; a fill writes one value anywhere)."""
        self.data._check_writable(what)
        if distinct:
            self._check_distinct(what)
        else:
            self._grid()
        if src.device is not self.device:
            src = clone(src.contiguous() if isinstance(src, indexedarray) else src, device=self.device)
        _copy_kernel()(self, src)

    def fill_(self, value):
        """Set every selected element of ``data`` to ``value`` (as ``array.fill_``): a scatter
        launch, so on a tape the filled elements' gradient is consumed and no other element's."""
        if self.data is None:
            return self
        tmp = array(shape=self.shape, dtype=self.dtype, device=self.device)
        tmp.fill_(value)
        self._scatter_from(tmp, "fill_")
        return self

    def zero_(self):
        """Set every selected element of ``data`` to zero."""
        if self.data is not None:
            self._scatter_from(array(shape=self.shape, dtype=self.dtype, device=self.device), "zero_")
        return self

    def assign(self, src):
        """Copy ``src`` (an array, indexed array or array-like of this shape) into the selected
        elements of ``data`` (a scatter launch; from an array or indexed array, recorded on a
        tape with the gradient passing to ``src``).

        Raises:
            ValueError: another shape; an index array selecting one element twice (several source
                values for it).
        """
        if self.data is None:
            return self
        if isinstance(src, (array, indexedarray)):
            if tuple(src.shape) != self.shape:
                raise ValueError(f"assign: expected shape {self.shape}, got {tuple(src.shape)}")
            if src.dtype is not self.dtype:
                raise CopyTypeError(f"assign: dtypes differ: Incompatible array data types: destination "
                                    f"dtype={types.type_repr(self.dtype)}, source dtype={types.type_repr(src.dtype)}")
        else:
            values = array(src, dtype=self.dtype, device="cpu").numpy()
            inner = tuple(getattr(self.dtype, "inner_shape", ()))
            if values.shape != self.shape + inner:
                if values.size != int(np.prod(self.shape + inner)):
                    raise ValueError(f"assign: expected shape {self.shape}, got {values.shape}")
                values = values.reshape(self.shape + inner)
            src = array(values, dtype=self.dtype, device=self.device)
        self._scatter_from(src, "assign", distinct=True)
        return self


def _indexed_view(base: array, key: tuple):
    """``base[key]`` where ``key`` holds index arrays (the ``array.__getitem__`` hook): the ints
    and slices make a view of ``base``, the index arrays index that view's dimensions."""
    plain, picks = [], []
    for d, k in enumerate(key):
        if isinstance(k, array):
            plain.append(slice(None))
            picks.append((d, k))
        else:
            plain.append(k)
    view = base[tuple(plain)] if any(not (isinstance(k, slice) and k == slice(None)) for k in plain) else base
    # the dimensions the ints removed shift the index arrays' positions
    removed = 0
    out = [None] * view.ndim
    pos = 0
    picks = dict(picks)
    for d, k in enumerate(key):
        if isinstance(k, (int, np.integer)):
            removed += 1
            continue
        if d in picks:
            out[pos] = picks[d]
        pos += 1
    return indexedarray(view, out)


def _indexed_copy(dest, src, dest_offset, src_offset, count):
    """``tg.copy`` when either side is an indexed array (the ``array.copy`` hook): a gather or
    scatter of the whole selection.

    Raises:
        CopyArgumentError: offsets or a count (Warp's words). CopyTypeError: dtypes differ.
        ValueError: the sizes differ.
    """
    if dest_offset or src_offset or count:
        raise CopyArgumentError("copy: dest_offset, src_offset, and count are not supported when copying to/from "
                                "non-contiguous indexed or Fabric arrays")
    if dest.dtype is not src.dtype:
        raise CopyTypeError(f"copy: dtypes differ: Incompatible array data types: destination "
                            f"dtype={types.type_repr(dest.dtype)}, source dtype={types.type_repr(src.dtype)}")
    if tuple(dest.shape) != tuple(src.shape):
        raise CopyArgumentError(f"copy: Incompatible array shapes: destination shape={tuple(dest.shape)}, source "
                                f"shape={tuple(src.shape)}")
    if isinstance(dest, indexedarray):
        dest.assign(src)
    elif dest.device is src.device:      # a gather launch (recorded with its adjoint)
        dest._check_writable("copy")
        src._grid()
        _copy_kernel()(dest, src)
    else:
        copy(dest, src.contiguous())


register_indexed(indexedarray, _indexed_view, _indexed_copy)

# what the tape, the launch's device inference and the struct packing walk in an indexed array
# (its data and index arrays, as a struct's array fields): one layout for every dtype and ndim
indexedarray._tg_struct = StructType(
    indexedarray, "indexedarray", (("data", ArrayType(types.float32, 1)),) +
    tuple((f, ArrayType(types.int32, 1)) for f in INDEX_FIELDS),
    type("indexedarray_walk_ctype", (ctypes.Structure,), {"_fields_": [("data", ArrayDesc)] +
                                                                       [(f, ArrayDesc) for f in INDEX_FIELDS]}))


def _nd(n):
    def make(data=None, indices=None, dtype=float):
        """Warp's ``indexedarray{n}d``: an ``indexedarray`` of ``n`` dimensions."""
        return indexedarray(data, indices, dtype=dtype if data is None else None, ndim=n)
    make.__name__ = make.__qualname__ = f"indexedarray{n}d"
    make.__doc__ = f"Warp's ``indexedarray{n}d(data, indices)``: an ``indexedarray`` of {n} dimension(s)."
    return make


indexedarray1d, indexedarray2d, indexedarray3d, indexedarray4d = (_nd(n) for n in (1, 2, 3, 4))
