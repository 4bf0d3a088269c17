"""tapegrad arrays: typed, strided views of CPU or CUDA memory, with an optional gradient.

An array either owns its memory or borrows it; a borrowing array keeps the owner (a numpy
array, a CuPy allocation, a torch tensor, a DLPack holder...) alive for as long as it lives.
The same holds for ``.grad``, which is itself an array.
"""
from __future__ import annotations

import ctypes
import math
import typing
import weakref

import numpy as np

from . import memory_ops, storage, types
from .cuda import memory as cuda_memory  # imports CuPy only when CUDA memory is used
from .device import Device, get_device
from .errors import CopyArgumentError, CopyTypeError, ReshapeError, ViewDtypeError
from .frameworks import is_writable_framework_view
from .protocols import parse_cuda_array_interface
from .recording import CopyRecord, active_tape
from .storage import HostBuffer, HostView, alloc, contiguous_strides, fold_inner_dims, normalize_shape

_CPU = get_device("cpu")
_BY_NUMPY = types.SCALARS_BY_NUMPY

__all__ = ["array", "array1d", "array2d", "array3d", "array4d", "clone", "copy", "register_indexed"]


class _IndexedHooks:
    """What ``tapegrad.indexedarray`` registers (it sits above this module): its class, the view
    ``array.__getitem__`` makes for index-array keys, and ``copy`` for indexed operands."""

    cls: type | None = None
    view = None
    copy = None


_INDEXED = _IndexedHooks()


def register_indexed(cls, view, copy_fn) -> None:
    """Let arrays build indexed views (``a[idx]`` with int32 index arrays) and copy to/from
    them: ``view(base, key)`` and ``copy_fn(dest, src, dest_offset, src_offset, count)``
    (``tapegrad.indexedarray`` registers them)."""
    _INDEXED.cls, _INDEXED.view, _INDEXED.copy = cls, view, copy_fn


def annotation_dtype(dtype):
    """The dtype of an array annotation: a tapegrad type, or ``typing.Any`` (a generic kernel or
    function parameter, specialized per argument type)."""
    return dtype if dtype is typing.Any else types.resolve_dtype(dtype)


class _ArrayAnnotationGetter:
    """``tg.array2d[tg.vec3]`` -> ``ArrayType(vec3, 2)``; ``tg.array2d(...)`` builds a 2-D array."""

    def __init__(self, ndim):
        self.ndim = ndim

    def __getitem__(self, dtype):
        return types.ArrayType(annotation_dtype(dtype), self.ndim)

    def __call__(self, *args, **kwargs):
        kwargs.setdefault("ndim", self.ndim)
        return array(*args, **kwargs)

    def __repr__(self):
        return f"tapegrad.array{self.ndim}d"


class array:
    """A typed array of up to 4 dimensions on the CPU or a CUDA device.

    Args:
        data: a numpy array, nested list, scalar, or any object with ``__array_interface__``
            (CPU) or ``__cuda_array_interface__`` (CUDA). CUDA-interface objects are always
            wrapped zero-copy (their ``stream`` is waited for); host data is copied unless
            ``copy=False`` on a CPU device. An object with both interfaces is host data when
            ``device`` is a CPU device, else CUDA data.
        dtype: element type (``tg.float32``, ``float``, ``tg.vec3``, a struct...). Inferred from
            ``data`` when None. Vector/matrix dtypes consume trailing component dims of ``data``.
        shape: shape in elements. With no ``data``/``ptr``: allocate zeroed memory of this shape.
        strides: byte strides (with ``ptr``); contiguous when None.
        ptr: address of existing memory to wrap (requires ``shape`` and ``dtype``).
        device: "cpu", "cuda:N" or a Device (default: the data's device, else current).
        requires_grad: allocate (or keep) a zeroed gradient array of the same shape (integer and
            bool arrays take the flag but keep no gradient: ``grad`` stays None).
        grad: an existing gradient array to use (borrowed).
        copy: copy host data (default True, as in Warp) — False wraps it zero-copy on the CPU
            (a read-only numpy array gives a read-only array, except ``np.asarray(jax_array)``,
            wrapped writable as ``from_jax`` wraps the same memory) where it can: data of
            another scalar type than ``dtype``, a list or reversed strides are converted into
            a copy, as Warp does.
        pinned: page-locked host memory (CPU arrays; needs CUDA, else ignored).
        owner: with ``ptr``: object kept alive as long as the array (a weakref to a dead object
            is refused).
        deleter: ``deleter(ptr, size)`` called when the array is destroyed (with ``ptr``).
        ndim: number of dims of an annotation-only array (``tg.array(dtype=float, ndim=2)``).
        readonly: refuse kernel writes (e.g. DLPack READ_ONLY imports).
    Raises:
        TypeError: bad dtype, or data of an unsupported type.
        ValueError: bad shape/strides, data that does not fit the dtype, or a CAI ``mask``.
        RuntimeError: more than 4 dims, a dead owner, a device mismatch.
    """

    __array_priority__ = 10
    # defaults shared by every instance; set per instance only when they differ
    _grad = None
    # bumped whenever any array's gradient is set, replaced or dropped: a cache of gradient
    # buffers (Tape.zero()'s plan) stays valid while it does not change
    grad_changes = 0
    _requires_grad = False
    _retain_grad = False
    _unlinked = False    # a view whose gradient was dropped on purpose: no late link (_late_grad)
    _desc = None
    # The fields the native launch helper (tapegrad.launch.fastlaunch) reads, named here so that
    # they change with the class: descriptor()'s cache (None until built, reset when the
    # gradient changes); the gradient field, which is what .grad returns whenever it is not
    # None and the link field is None (see grad); otherwise the helper asks .grad.
    DESCRIPTOR_CACHE = "_desc"
    GRAD_FIELD = "_grad"
    LINK_FIELD = "_link"
    OWNER_FIELD = "_owner"   # what owner returns (the helper walks it to a recorded launch's memory roots)
    _owner = None
    # set by a framework bridge (``from_torch``...) on the arrays it makes: the link to the tensor
    # viewed, with ``sync_grad(a)`` (keeps ``.grad`` on the tensor's own gradient through the
    # framework's resets), ``version(a)`` (the tensor's in-place counter, checked by Tape) and
    # ``view_of(a)`` (the link of a view of ``a``)
    _link = None
    _storage_check = None   # a storage.StorageCheck for views of foreign memory a framework may move
    version = 0          # bumped by every write tapegrad makes (launches, fill_, zero_, copy, Tape.zero)
    readonly = False
    pinned = False
    deleter = None

    def __class_getitem__(cls, params):
        """``tg.array[dtype]`` (1-D) or Warp's ``tg.array[dtype, Literal[ndim]]``: an annotation."""
        if isinstance(params, tuple):
            if len(params) != 2:
                raise TypeError(f"array[dtype] or array[dtype, Literal[ndim]], got {len(params)} parameters")
            dtype, nd = params
            if typing.get_origin(nd) is typing.Literal and len(typing.get_args(nd)) == 1:
                nd = typing.get_args(nd)[0]
            if isinstance(nd, bool) or not isinstance(nd, int):
                raise TypeError(f"array[dtype, ndim]: ndim must be Literal[n] or an int, got {params[1]!r}")
            return types.ArrayType(annotation_dtype(dtype), nd)
        return types.ArrayType(annotation_dtype(params), 1)

    def __init__(self, data=None, dtype=None, shape=None, strides=None, ptr=None, device=None,
                 requires_grad=False, grad=None, copy=True, pinned=False, owner=None, deleter=None,
                 ndim=None, capacity=None, readonly=False, retain_grad=False):
        if readonly:
            self.readonly = True
        if dtype is typing.Any and data is not None:   # Warp's: the dtype of the data
            dtype = None
        recorded = None
        if ptr is not None:
            if data is not None:
                raise RuntimeError("array: pass either data= or ptr=, not both")
            self._init_ptr(ptr, dtype, shape, strides, device, owner, deleter, capacity)
        elif data is None and shape is None:
            self._init_annotation(dtype, ndim, device)
        elif data is None:
            self._init_alloc(dtype, shape, device, pinned)
        elif copy and (recorded := _recorded_source(data, dtype, shape)) is not None:   # copy=False may alias
            # a copy of an array (host or CUDA) with a gradient while a tape records: a recorded
            # tg.copy once the new array has its gradient (an unrecorded copy cut the gradient: 0)
            self._init_alloc(recorded.dtype, recorded.shape, recorded.device if device is None else device, pinned)
        elif hasattr(data, "__cuda_array_interface__") and not isinstance(data, np.ndarray) and not (
                device is not None and hasattr(data, "__array_interface__") and get_device(device).is_cpu):
            # (an object with both interfaces asked for on the CPU is host data, as in Warp)
            self._init_cai(data, dtype, shape, device)
        else:
            self._init_host(data, dtype, shape, device, copy, pinned)
        if grad is not None:
            self.grad = grad
        elif requires_grad:
            self.requires_grad = True
        if retain_grad:
            self.retain_grad = True
        if recorded is not None:
            _copy_recorded(self, recorded)

    # ----------------------------------------------------------------------- construction
    def _set(self, ptr, dtype, shape, strides, device, owner, check=True):
        """Install the layout (``shape``/``strides``: tuples of ints); ``check=False`` for
        strides tapegrad computed itself."""
        d = self.__dict__
        d["_ptr"] = ptr or 0
        d["dtype"] = dtype
        d["_shape"] = shape
        d["_strides"] = strides
        d["device"] = device
        d["_owner"] = owner
        d.pop("_contig", None)
        d.pop("_nbytes", None)
        d.pop("_npv", None)
        if check:
            self._check_strides()

    @classmethod
    def wrap_memory(cls, ptr, dtype, shape, strides, device, owner, readonly=False):
        """Build an array around checked foreign memory with no argument normalisation (the
        hot path of DLPack and bridge imports).

        Args:
            ptr: the address (int). dtype: a tapegrad dtype. shape, strides: tuples of ints
            (strides in bytes), already checked. device: a Device. owner: kept alive with the
            array. readonly: refuse kernel writes.
        Returns:
            The array (no copy, no checks).
        """
        a = cls.__new__(cls)
        d = a.__dict__
        d["_ptr"] = ptr
        d["dtype"] = dtype
        d["_shape"] = shape
        d["_strides"] = strides
        d["device"] = device
        d["_owner"] = owner
        if readonly:
            d["readonly"] = True
        return a

    def _check_strides(self):
        el = self.dtype.scalar.size if self.dtype.scalar is not None else 1
        if len(self._strides) != len(self._shape):
            raise ValueError(f"array strides: expected {len(self._shape)} strides for shape {self._shape}, "
                             f"got {self._strides}")
        for s in self._strides:
            if s < 0:
                raise ValueError(f"array strides: negative strides are not supported, got {self._strides}")
            if s % el:
                raise ValueError(f"array strides: each stride must be a multiple of the element's scalar size "
                                 f"({el} bytes), got {self._strides}")
        storage.check_extent(self._shape, self._strides, self.dtype.size, "array strides")   # no int64 offset wraps

    def _init_annotation(self, dtype, ndim, device):
        dt = annotation_dtype(dtype if dtype is not None else types.float32)
        nd = 1 if ndim is None else int(ndim)
        if not 1 <= nd <= types.MAX_DIMS:
            raise RuntimeError(f"array: ndim must be 1..{types.MAX_DIMS}, got {nd}")
        self._set(0, dt, (0,) * nd, (0,) * nd, get_device(device) if device is not None else None, None,
                  check=dt is not typing.Any)

    @classmethod
    def layout_prototype(cls, dtype, shape, strides, device) -> "array":
        """A pointer-less array of this layout, checked as ``array(ptr=..., ...)`` checks one
        (bridges build descriptor templates from it). Never read it or launch it: it has no memory.

        Raises:
            TypeError, ValueError: as the constructor, for the dtype, shape and strides.
        """
        a = cls.__new__(cls)
        a._init_ptr(0, dtype, shape, strides, device, None, None, None, allow_null=True)
        return a

    def _init_ptr(self, ptr, dtype, shape, strides, device, owner, deleter, capacity, allow_null=False):
        if dtype is None:
            raise TypeError("array(ptr=...): dtype is required")
        if shape is None:
            raise ValueError("array(ptr=...): shape is required")
        dt = dtype if dtype.__class__ is types.ScalarType else types.resolve_dtype(dtype)
        shape = normalize_shape(shape)
        check = strides is not None
        strides = contiguous_strides(shape, dt.size) if strides is None else tuple(int(x) for x in strides)
        if owner is not None and owner.__class__ is weakref.ref:
            target = owner()
            if target is None:
                raise RuntimeError("array(ptr=..., owner=...): the owner of the external memory is already dead")
            owner = target
        if ptr.__class__ is not int and not isinstance(ptr, np.integer) or isinstance(ptr, bool) or ptr < 0:
            raise TypeError(f"array(ptr=...): expected a non-negative int address, got {ptr!r}")
        ptr = int(ptr)
        if ptr == 0 and math.prod(shape) > 0 and not allow_null:   # a kernel or a copy would dereference NULL
            raise ValueError(f"array(ptr=0): a NULL pointer for a non-empty shape {shape}; pass the address of "
                             f"the memory (ptr=0 is only valid for an empty array)")
        align = ctypes.alignment(dt.ctype) if getattr(dt, "ctype", None) is not None else 1
        if ptr % align:   # misaligned loads are undefined behaviour in C++ and fault on the GPU
            raise ValueError(f"array(ptr=...): {dt!r} elements need an address aligned to {align} bytes, got "
                             f"ptr={ptr:#x} ({ptr} % {align} = {ptr % align})")
        self._set(ptr, dt, shape, strides, get_device(device), owner, check)
        if deleter is not None:
            self.deleter = deleter
            nbytes = capacity if capacity is not None else self.nbytes
            weakref.finalize(self, deleter, int(ptr), nbytes)

    def _init_alloc(self, dtype, shape, device, pinned):
        dt = types.resolve_dtype(dtype if dtype is not None else types.float32)
        shape = normalize_shape(shape)
        dev = get_device(device)
        strides = contiguous_strides(shape, dt.size)
        nbytes = math.prod(shape) * dt.size
        owner, ptr = alloc(dev, nbytes, pinned)
        if pinned and dev.is_cpu and not isinstance(owner, (HostBuffer, np.ndarray)):
            self.pinned = True
        self._set(ptr, dt, shape, strides, dev, owner, False)
        if dev.is_cuda:
            cuda_memory.memset(ptr, 0, nbytes, dev.stream.cuda_stream)

    def _init_cai(self, data, dtype, shape, device):
        iface = data.__cuda_array_interface__
        dev, ptr, base_dt, sh, st, ro = parse_cuda_array_interface(iface, device)
        dt, sh, st = fold_inner_dims(base_dt, types.resolve_dtype(dtype) if dtype is not None else None, sh, st, "data")
        if shape is not None and normalize_shape(shape) != sh:
            raise ValueError(f"array: shape {tuple(shape)} does not match the CUDA array's shape {sh}")
        if ro:
            self.readonly = True
        self._set(ptr, dt, sh, st, dev, data)

    def _init_host(self, data, dtype, shape, device, copy, pinned):
        if (not copy and type(data) is np.ndarray and shape is None and not pinned and 0 < data.ndim <= types.MAX_DIMS
                and (device is None or get_device(device).is_cpu)):
            # the aliasing fast path: a scalar-typed numpy array wrapped as is
            base = _BY_NUMPY.get(data.dtype)
            dt = base if dtype is None else types.resolve_dtype(dtype)
            if base is not None and dt is base and min(data.strides) >= 0:
                self._set(data.ctypes.data, dt, data.shape, data.strides, _CPU, data)
                if not data.flags.writeable and not is_writable_framework_view(data):
                    self.readonly = True
                return
        dt = types.resolve_dtype(dtype) if dtype is not None else None
        dev = get_device(device) if device is not None else _data_device(data, copy)
        if isinstance(data, array):
            src = data.numpy() if data.device.is_cpu or not dev.is_cuda else None
            if src is None:
                a = clone(data, device=dev)
                self._set(a.ptr, a.dtype, a.shape, a.strides, a.device, a._owner)
                return
            data = src
        if isinstance(data, np.ndarray) or hasattr(data, "__array_interface__"):
            arr = np.asarray(data)
        elif isinstance(dt, types.StructType) and isinstance(data, (list, tuple)):
            arr = _struct_records(data, dt, dev)
            copy = True
        else:
            npdt = dt.scalar.np_dtype if dt is not None and dt.scalar is not None else (
                dt.np_dtype if dt is not None else None)
            try:
                arr = np.asarray(data, dtype=npdt)
            except (TypeError, ValueError) as e:
                # ragged nesting is a shape problem (ValueError); a value numpy cannot convert, a type one
                cls = ValueError if "inhomogeneous" in str(e) or "sequence" in str(e) else TypeError
                raise cls(f"array(data=...): cannot convert {type(data).__name__} to an array: {e}") from None
            copy = True
        if arr.dtype.kind in "OUSVMmc" and arr.dtype != types.bfloat16.np_dtype and not (
                isinstance(dt, types.StructType) and arr.dtype == dt.np_dtype):   # ml_dtypes' bfloat16 is kind V
            raise TypeError(f"array(data=...): numpy dtype {arr.dtype} is not supported")
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if isinstance(dt, types.StructType):
            if arr.dtype != dt.np_dtype:
                raise TypeError(f"array(data=...): struct {dt.name} data must have numpy dtype {dt.np_dtype}, "
                                f"got {arr.dtype}")
            base = dt
        else:
            base = types.dtype_from_numpy(arr.dtype)
            if dt is not None and dt.scalar is not base:
                # another scalar type cannot be aliased: converted, a copy (as Warp; also what
                # copy=False does with a list, reversed strides or a CUDA device)
                arr = arr.astype(dt.scalar.np_dtype)
                base = dt.scalar
                copy = True
        if dt is not None and not isinstance(dt, types.StructType) and dt.inner_shape and shape is not None:
            want = normalize_shape(shape) + dt.inner_shape
            if arr.size != math.prod(want):
                raise ValueError(f"array: data with {arr.size} scalars does not fit shape {tuple(shape)} of {dt!r}")
            arr = arr.reshape(want)
        elif shape is not None and not (dt is not None and dt.inner_shape):
            want = normalize_shape(shape)
            if arr.shape != want:
                if arr.size != math.prod(want):
                    raise ValueError(f"array: data of shape {arr.shape} does not fit shape {want}")
                arr = arr.reshape(want)
        if arr.strides and min(arr.strides) < 0:
            arr = np.ascontiguousarray(arr)
            copy = True
        if dt is not None and shape is None and not isinstance(dt, types.StructType) and dt.inner_shape:
            arr, reshaped = _group_components(arr, dt)
            copy = copy or reshaped
        edt, esh, est = fold_inner_dims(base, dt, arr.shape, arr.strides, "data")
        if dev.is_cpu and not copy and not pinned:
            owner = data if data is not arr and hasattr(data, "__array_interface__") else arr
            self._set(arr.ctypes.data, edt, esh, est, dev, owner)
            if not arr.flags.writeable and not is_writable_framework_view(arr):
                self.readonly = True
            return
        contiguous = np.ascontiguousarray(arr)
        nbytes = contiguous.nbytes
        owner, ptr = alloc(dev, nbytes, pinned)
        if pinned and dev.is_cpu and not isinstance(owner, (HostBuffer, np.ndarray)):
            self.pinned = True
        self._set(ptr, edt, esh, contiguous_strides(esh, edt.size), dev, owner)
        if dev.is_cpu:
            ctypes.memmove(ptr, contiguous.ctypes.data, nbytes)
        else:
            cuda_memory.memcpy(ptr, contiguous.ctypes.data, nbytes, dev.stream.cuda_stream)
            dev.stream.synchronize()  # the host buffer is a temporary

    def _tg_annotation(self):
        return types.ArrayType(self.dtype, self.ndim)

    # ------------------------------------------------------------------------- properties
    @property
    def ptr(self) -> int:
        return self._ptr

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def strides(self) -> tuple:
        """Byte strides, one per dimension."""
        return self._strides

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        n = self.__dict__.get("_nbytes")
        if n is None:  # layouts never change after construction: compute once (hot in zero_())
            n = self._nbytes = math.prod(self._shape) * self.dtype.size
        return n

    @property
    def capacity(self) -> int:
        return self.nbytes

    @property
    def is_contiguous(self) -> bool:
        c = self.__dict__.get("_contig")
        if c is None:
            c = self._contig = self._strides == contiguous_strides(self._shape, self.dtype.size) or self.size <= 1
        return c

    @property
    def owner(self):
        """The object keeping this array's memory alive (None when the array owns it)."""
        return self._owner

    @property
    def _ref(self):
        """Warp's name for ``owner`` (Warp code checks ``a._ref is src`` after a zero-copy
        ``wp.array(src, copy=False)``): the same object, read-only."""
        return self._owner

    @property
    def vars(self):
        return {}

    def __len__(self):
        return self._shape[0]

    # ------------------------------------------------------------------------------ grads
    @property
    def requires_grad(self) -> bool:
        r = self._requires_grad
        if not r and self._owner.__class__ is array and self._grad is None:
            r = self._late_grad() is not None
        return r

    @requires_grad.setter
    def requires_grad(self, value: bool):
        value = bool(value)
        self._unlinked = not value
        # Integer and bool arrays take the flag as in Warp (code sets it on every input) but keep
        # no gradient: nothing is differentiable through them, so ``grad`` stays None.
        if value and self._grad is None and (self.dtype.scalar is None or self.dtype.scalar.is_float):
            if self._owner.__class__ is not array or self._late_grad() is None:    # a view: its base's
                self._grad = array(shape=self._shape, dtype=self.dtype, device=self.device, pinned=self.pinned)
                array.grad_changes += 1
        if not value:
            self._grad = None
            self._retain_grad = False
            array.grad_changes += 1
        self._requires_grad = value
        self._desc = None

    def _late_grad(self):
        """A view made before its base had a gradient gets the matching view of the base's
        gradient when asked (``grad``, ``requires_grad``), as views made afterwards have from
        the start; None when the base has none, the layouts do not match (another scalar
        type, a gradient strided differently from its array), or the gradient was dropped."""
        base = self._owner
        if self._unlinked:
            return None
        bg = base.grad
        dt = self.dtype
        if bg is None or bg.strides != base._strides or getattr(dt, "scalar", None) is None \
                or dt.scalar is not base.dtype.scalar or not _within(self, base):
            return None
        _link_grad(base, self, array.wrap_memory(bg._ptr + (self._ptr - base._ptr), dt, self._shape, self._strides,
                                                 self.device, bg))
        self._desc = None
        array.grad_changes += 1
        return self._grad

    @property
    def retain_grad(self) -> bool:
        """Keep this array's gradient through the adjoints of writes to it (Warp's flag).

        The adjoint of a kernel's ``a[i] = v`` and of a recorded ``copy(a, src)`` *consume*
        ``a.grad`` over what they wrote: the gradient passes to ``v`` / ``src`` and the element
        is zeroed, so an earlier write that the later one overwrote gets nothing (final write
        wins). With ``retain_grad`` the gradient is left in place (an array written several
        times then counts it once per write)."""
        return self._retain_grad

    @retain_grad.setter
    def retain_grad(self, value: bool):
        value = bool(value)
        if value and not self._requires_grad:
            raise ValueError("retain_grad: the array does not require gradients; pass requires_grad=True "
                             "(or set a.requires_grad = True) first")
        self._retain_grad = value
        self._desc = None

    @property
    def grad(self):
        """The gradient array (same shape, dtype and device), or None.

        An array made by ``from_torch``/``from_paddle`` with a shared gradient answers the
        tensor's current gradient: a gradient the framework dropped (``zero_grad()``) is put
        back, zeroed; one it replaced is followed."""
        # without a link, a set _grad is the answer: the native launch helper reads it directly
        # then (GRAD_FIELD, LINK_FIELD); keep that true
        link = self._link
        if link is not None:
            link.sync_grad(self)
        g = self._grad
        if g is None and self._owner.__class__ is array:    # a view made before its base had one
            g = self._late_grad()
        return g

    @grad.setter
    def grad(self, g):
        if g is None:
            self._unlinked = True
            self._grad = None
            self._requires_grad = False
            self._desc = None
            array.grad_changes += 1
            return
        if not isinstance(g, array):
            g = array(g, dtype=self.dtype, device=self.device, copy=False)
        if g.dtype is not self.dtype:
            raise ValueError(f"grad: expected dtype {self.dtype!r}, got {g.dtype!r}")
        if g.shape != self.shape:
            raise ValueError(f"grad: expected shape {self.shape}, got {g.shape}")
        if g.device != self.device:
            raise ValueError(f"grad: expected device {self.device}, got {g.device}")
        self._grad = g
        array.grad_changes += 1
        self._requires_grad = True
        self._desc = None

    # ------------------------------------------------------------------------- descriptor
    def descriptor(self) -> types.ArrayDesc:
        """The kernel-ABI descriptor (cached; rebuilt when ``grad`` changes).

        Raises:
            RuntimeError: the array views foreign memory its framework reallocated or freed.
        """
        chk = self._storage_check
        if chk is not None:
            chk.verify(f"array {self.dtype!r} of shape {self._shape}")
        d = self._desc
        if d is None:
            d = types.ArrayDesc() if chk is None else storage.CheckedDesc.of(chk)
            d.data = self._ptr or None
            d.grad = self._grad._ptr if self._grad is not None and self._grad._ptr else None
            for i, (n, s) in enumerate(zip(self._shape, self._strides)):
                d.shape[i] = n
                d.strides[i] = s
            d.ndim = len(self._shape)
            d.flags = (types.ARRAY_FLAG_READONLY if self.readonly else 0) | \
                (types.ARRAY_FLAG_RETAIN_GRAD if self._retain_grad else 0)
            self._desc = d
        return d

    __ctype__ = descriptor

    def _bump(self):
        self.version += 1

    # -------------------------------------------------------------------------- protocols
    def flat_layout(self) -> tuple:
        """``(shape, byte strides)`` with vector/matrix component dims appended (as foreign
        frameworks and numpy see the memory)."""
        dt = self.dtype
        if isinstance(dt, types.StructType) or not dt.inner_shape:
            return self._shape, self._strides
        inner = dt.inner_shape
        inner_strides = contiguous_strides(inner, dt.scalar.size)
        return self._shape + inner, self._strides + inner_strides

    def _typestr_descr(self):
        if isinstance(self.dtype, types.StructType):
            nd = self.dtype.np_dtype
            return nd.str, nd.descr
        nd = self.dtype.scalar.np_dtype
        return nd.str, [("", nd.str)]

    @property
    def __array_interface__(self):
        iface = self.__dict__.get("_aif")
        if iface is None:
            if self.device is None or not self.device.is_cpu:
                raise AttributeError("__array_interface__ is only available for CPU arrays")
            shape, strides = self.flat_layout()
            typestr, descr = self._typestr_descr()
            iface = self._aif = {"version": 3, "shape": shape, "typestr": typestr, "descr": descr,
                                 "data": (self._ptr, self.readonly), "strides": strides}
        return iface

    @property
    def __cuda_array_interface__(self):
        if self.device is None or not self.device.is_cuda:
            raise AttributeError("__cuda_array_interface__ is only available for CUDA arrays")
        shape, strides = self.flat_layout()
        typestr, descr = self._typestr_descr()
        handle = self.device.stream.cuda_stream
        return {"version": 3, "shape": shape, "typestr": typestr, "descr": descr,
                "data": (self._ptr, self.readonly), "strides": strides,
                # CAI v3: the consumer must sync with this stream; 0 is ambiguous, 1 is legacy default
                "stream": handle if handle else 1}

    # The DLPack export sits below this module, but importing any module of the dlpack package
    # runs the package face, which builds arrays (from_dlpack) and so imports this module: the
    # import is made on the first export, never at import time.
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from .dlpack import export
        return export.export_array(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        from .dlpack import export
        return export.array_device(self)

    def memory_owner(self):
        """The object keeping this array's memory alive, or None when only the array itself does.

        A view that holds it (a cached framework tensor, a numpy view) keeps the memory without
        keeping the array, so the array can cache the view without a reference cycle. None for
        memory released by a ``deleter`` when the array dies, and for borrowed pointers with no
        owner (the caller keeps those alive).
        """
        return None if self.deleter is not None else self._owner

    # ------------------------------------------------------------------------------ numpy
    def numpy(self) -> np.ndarray:
        """A zero-copy numpy view (CPU) or a synchronizing host copy (CUDA).

        Raises:
            RuntimeError: the array views foreign memory its framework reallocated or freed.
        """
        if self._storage_check is not None:
            self._storage_check.verify(f"numpy() of array {self.dtype!r} of shape {self._shape}")
        if self.device.is_cpu:
            v = self.__dict__.get("_npv")
            if v is None:
                if self._ptr == 0:
                    return np.empty(self.flat_layout()[0], dtype=self._np_elem_dtype())
                # cached base view whose base is the memory's owner, not this array (no cycle)
                owner = self._owner if self._owner is not None else self
                v = np.asarray(HostView(self.__array_interface__, owner))
                if v.dtype != self._np_elem_dtype():   # bfloat16: the interface says raw 2-byte void
                    v = v.view(self._np_elem_dtype())
                self._npv = v
                if owner is self:  # cannot happen for host arrays, which always have an owner
                    del self._npv
                    return v
            return v.view()
        return self.to("cpu").numpy()

    def _np_elem_dtype(self):
        return self.dtype.np_dtype if isinstance(self.dtype, types.StructType) else self.dtype.scalar.np_dtype

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def list(self):
        """Every element, in row-major order, as one flat list of Python values (Warp's ``list()``):
        numbers for scalar dtypes, vector/matrix values, struct instances (their array fields:
        arrays that do not own the memory, as Warp's)."""
        a = self.numpy()
        dt = self.dtype
        if isinstance(dt, types.StructType):
            return [_struct_value(dt, rec, self.device) for rec in a.reshape(-1)]
        if dt.inner_shape:
            return [dt(x) for x in a.reshape((-1,) + tuple(dt.inner_shape))]
        return a.reshape(-1).tolist()

    def cptr(self):
        """A ctypes pointer to the elements (``ctypes.POINTER`` of the dtype's ctypes type), as
        Warp's ``cptr()``: ``p[i]`` reads element ``i`` of a contiguous CPU array. The pointer
        does not keep the array alive: hold a reference while using it.

        Raises:
            RuntimeError: the array is not on the CPU (its memory is not readable from Python).
        """
        if not self.device.is_cpu:
            raise RuntimeError(f"cptr(): the array is on {self.device}; a ctypes pointer reads host memory only "
                               f"(use .to('cpu').cptr())")
        return ctypes.cast(self.ptr, ctypes.POINTER(self.dtype.ctype))

    def __repr__(self):
        if self._ptr == 0 and self.size == 0 and self.device is None:
            return f"array(dtype={self.dtype!r}, ndim={self.ndim})"
        return f"array({self.numpy()!r}, dtype={self.dtype!r}, device={self.device})"

    def __str__(self):
        return str(self.numpy())

    # -------------------------------------------------------------------------- transfers
    def to(self, device, requires_grad=None):
        """This array on ``device``: itself if already there, else a copy (with a copied grad)."""
        dev = get_device(device)
        if dev is self.device:
            return self
        return clone(self, device=dev, requires_grad=requires_grad)

    def contiguous(self):
        return self if self.is_contiguous else clone(self)

    def assign(self, src):
        """Copy ``src`` (an array or array-like of the same shape) into this array."""
        if not isinstance(src, array):
            src = array(src, dtype=self.dtype, device=self.device)
        if src.shape != self.shape:
            raise ValueError(f"assign: expected shape {self.shape}, got {src.shape}")
        copy(self, src)
        return self

    def fill_(self, value):
        """Set every element to ``value`` (a scalar, or a vector/matrix value).

        On a recording Tape, a fill of memory the tape has seen (an array a recorded operation
        used, or a view of it) is recorded: its adjoint zeroes the gradient of the overwritten
        elements, so nothing flows to the values it replaced.

        Raises:
            TypeError: ``value`` is not a number (or a vector/matrix of numbers) of the array's
                component shape, or holds a fractional float for an integer array.
        """
        self._check_writable("fill_")
        if isinstance(self.dtype, types.StructType):
            return self._fill_struct(value)
        inner = self.dtype.inner_shape
        if isinstance(value, (str, bytes)) or value is None:
            raise TypeError(f"fill_(value): expected a number{' or a value of shape ' + str(inner) if inner else ''} "
                            f"for an array of {self.dtype!r}, got {value!r}")
        if not isinstance(value, (int, float, bool, np.number, np.bool_)):
            try:
                shape = np.shape(np.asarray(value, dtype=self.dtype.scalar.np_dtype))
            except (TypeError, ValueError):
                shape = None
            if shape not in ((), inner):
                raise TypeError(f"fill_(value): expected a number or a value of shape {inner} for an array of "
                                f"{self.dtype!r}, got {value!r}")
        if np.dtype(self.dtype.scalar.np_dtype).kind in "iu":
            # a fractional float cannot be stored exactly in integers: Warp refuses it too (it
            # would otherwise be truncated silently)
            v = np.asarray(value)
            if v.dtype.kind in "fc" and not np.all(np.isfinite(v) & (v == np.trunc(v))):
                raise TypeError(f"fill_(value): expected an integer value for an array of {self.dtype!r}, "
                                f"got {value!r}")
        tape = active_tape()
        if tape is not None:     # part of the recorded program: its adjoint stops the gradient
            tape.record_write(self, "fill_")
        memory_ops.fill(self, value)
        self._bump()
        return self

    def _fill_struct(self, value):
        st = self.dtype
        if not isinstance(value, st.cls):
            raise TypeError(f"fill_(value): expected an instance of struct {st.name} for an array of {st!r}, "
                            f"got {value!r}")
        rec = np.frombuffer(bytes(st.to_ctype(value, self.device)), dtype=st.np_dtype)[0]
        tape = active_tape()
        if tape is not None:
            tape.record_write(self, "fill_")
        if self.device.is_cpu:
            memory_ops.fill(self, rec)
        else:   # the records built on the host, then one copy
            memory_ops.copy(self, array(np.full(self.shape, rec, dtype=st.np_dtype), dtype=st, device="cpu"))
        self._bump()
        return self

    def zero_(self):
        """Set every element to zero (recorded on a recording Tape as ``fill_`` is).

        Raises:
            RuntimeError: the array is read-only.
        """
        if self.readonly:
            self._check_writable("zero_")
        tape = active_tape()
        if tape is not None:
            tape.record_write(self, "zero_")
        memory_ops.zero(self)
        self._bump()
        return self

    def _check_writable(self, what):
        if self.readonly:
            raise RuntimeError(f"{what}: the array is read-only (imported as read-only)")

    # ---------------------------------------------------------------------------- views
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > self.ndim:
            raise IndexError(f"array index: too many indices ({len(key)}) for an array of {self.ndim} dims")
        if _INDEXED.view is not None and any(isinstance(k, array) for k in key):
            return _INDEXED.view(self, key)    # int32 index arrays: Warp's indexedarray
        ptr, shape, strides = self._ptr, [], []
        for d in range(self.ndim):
            n, st = self._shape[d], self._strides[d]
            k = key[d] if d < len(key) else slice(None)
            if isinstance(k, (int, np.integer)):
                k = int(k) + (n if k < 0 else 0)
                if not 0 <= k < n:
                    raise IndexError(f"array index {key[d]} out of range for dimension {d} of size {n}")
                ptr += k * st
            elif isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step < 0:
                    raise ValueError("array slicing: negative steps are not supported")
                ptr += start * st
                shape.append(max(0, (stop - start + step - 1) // step))
                strides.append(st * step)
            else:
                raise TypeError(f"array index: expected ints, slices and int32 index arrays, got {type(k).__name__}")
        if not shape:  # a single element: return its value
            return _view(self, ptr, (1,), (self.dtype.size,)).numpy()[0]
        v = _view(self, ptr, tuple(shape), tuple(strides))
        if self._grad is not None and self._grad.shape == self.shape:
            _link_grad(self, v, self._grad[key])
        return v

    def __setitem__(self, key, value):
        idx = key if isinstance(key, tuple) else (key,)
        if len(idx) > self.ndim:
            raise IndexError(f"array index: too many indices ({len(idx)}) for an array of {self.ndim} dims")
        # integer indices become 1-long slices so the target is always a view we can write;
        # they are checked as reads are (negative ones count from the end, as in Python)
        norm = []
        for d, k in enumerate(idx):
            if isinstance(k, (int, np.integer)):
                n = self._shape[d]
                i = int(k) + (n if k < 0 else 0)
                if not 0 <= i < n:
                    raise IndexError(f"array index {k} out of range for dimension {d} of size {n}")
                k = slice(i, i + 1)
            norm.append(k)
        target = self[tuple(norm)]
        if isinstance(value, array):
            if value.shape != target.shape and len(idx) < self.ndim and any(
                    isinstance(k, (int, np.integer)) for k in idx):
                target = self[idx]     # a[1] = b[0]: the row view, as a[1] reads (not the (1, n) slice)
            target.assign(value)
        elif np.ndim(value) <= len(target.dtype.inner_shape):
            target.fill_(value)
        else:
            target.assign(np.asarray(value).reshape(target.shape + target.dtype.inner_shape))

    def reshape(self, shape):
        """A view with a new shape (contiguous arrays only)."""
        if isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        shape = tuple(int(d) for d in shape)
        if shape.count(-1) == 1:
            known = math.prod([d for d in shape if d != -1])
            shape = tuple(self.size // max(known, 1) if d == -1 else d for d in shape)
        shape = normalize_shape(shape)
        if math.prod(shape) != self.size:
            raise ReshapeError(f"reshape: cannot reshape array of shape {self.shape} (size {self.size}) into shape "
                               f"{shape} (size {math.prod(shape)})")
        if not self.is_contiguous:
            raise ValueError("reshape: the array is not contiguous (call .contiguous() first)")
        v = _view(self, self._ptr, shape, contiguous_strides(shape, self.dtype.size))
        if self._grad is not None and self._grad.is_contiguous:
            _link_grad(self, v, self._grad.reshape(shape))
        return v

    def flatten(self):
        """A 1-D view of a contiguous array (its gradient, the matching view of the gradient)."""
        return self.reshape((self.size,))

    def flat_view(self, offset: int, count: int) -> "array":
        """A 1-D view of ``count`` elements from flat (row-major) index ``offset``: for
        contiguous arrays and 1-D strided views (``a[::2]``), which ``copy`` offsets address.

        Raises:
            ValueError: the range is out of bounds, or the array is strided with several dims
                (its flat range is no single view).
        """
        if offset < 0 or count < 0 or offset + count > self.size:
            raise ValueError(f"flat_view: range [{offset}, {offset + count}) is out of bounds for {self.size} elements")
        if self.is_contiguous:
            step = self.dtype.size
        elif self.ndim == 1:
            step = self._strides[0]
        else:
            raise ValueError(f"flat_view: a strided {self.ndim}-D array (shape {self.shape}, strides "
                             f"{self.strides}) has no 1-D view of a flat range; copy it contiguous first")
        v = _view(self, self._ptr + offset * step, (count,), (step,))
        g = self._grad
        if g is not None and (g.is_contiguous or g.ndim == 1):
            _link_grad(self, v, g.flat_view(offset, count))
        return v

    def transpose(self, axes=None):
        """A view with the dimensions permuted (reversed when ``axes`` is None); its gradient is
        the same permutation of this array's gradient.

        Raises:
            ValueError: ``axes`` is not a permutation of the dimensions.
        """
        axes = tuple(reversed(range(self.ndim))) if axes is None else tuple(axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"transpose: axes {axes} are not a permutation of {self.ndim} dims")
        v = _view(self, self._ptr, tuple(self._shape[a] for a in axes), tuple(self._strides[a] for a in axes))
        if self._grad is not None:
            _link_grad(self, v, self._grad.transpose(axes))
        return v

    def view(self, dtype):
        """Reinterpret the memory as another dtype, as Warp's ``view``.

        Same element size: the same shape. A vector/matrix array viewed as its scalar type (or
        another of that size) gets the component dims appended (``vec4`` ``(n,)`` -> ``(n, 4)``);
        a scalar array whose trailing dims are contiguous and match a vector/matrix type's
        component shape views as that type (``(n, 2, 2)`` -> ``mat22`` ``(n,)``; ``(2, 2)`` ->
        ``(1,)``, arrays have at least one dim). The view keeps the gradient link when both
        dtypes have the same scalar type; a view as another scalar type (bits reinterpreted) has
        no gradient.

        Raises:
            ViewDtypeError (a TypeError and ValueError): the sizes do not fit (Warp's message),
                or the trailing dims do not match the component shape.
        """
        dt = types.resolve_dtype(dtype)
        src = self.dtype
        shape, strides = self._shape, self._strides

        def refuse(detail):
            raise ViewDtypeError(f"view: cannot create an array view with dtype {_dtype_name(dt)} from source dtype "
                                 f"{_dtype_name(src)}: {detail}")

        src_inner = tuple(getattr(src, "inner_shape", ()))
        dt_inner = tuple(getattr(dt, "inner_shape", ()))
        if dt.size == src.size:
            pass
        elif src_inner and not dt_inner and not isinstance(dt, types.StructType):
            if dt.size != src.scalar.size:
                refuse(f"source scalar dtype {_dtype_name(src.scalar)} has size {src.scalar.size} bytes, but target "
                       f"dtype has size {dt.size} bytes")
            shape = tuple(shape) + src_inner
            strides = tuple(strides) + contiguous_strides(src_inner, dt.size)
        elif dt_inner and not src_inner and not isinstance(src, types.StructType):
            if src.size != dt.scalar.size:
                refuse(f"source dtype has size {src.size} bytes, but target scalar dtype {_dtype_name(dt.scalar)} has "
                       f"size {dt.scalar.size} bytes")
            k = len(dt_inner)
            if tuple(shape[-k:]) != dt_inner or tuple(strides[-k:]) != contiguous_strides(dt_inner, src.size):
                refuse(f"the trailing dims of shape {self.shape} (strides {self.strides}) are not a contiguous "
                       f"{dt_inner} block")
            shape, strides = tuple(shape[:-k]), tuple(strides[:-k])
            if not shape:      # arrays have at least one dim
                shape, strides = (1,), (dt.size,)
        else:
            refuse(f"source dtype has size {src.size} bytes, but target dtype has size {dt.size} bytes")
        v = _view(self, self._ptr, shape, strides)
        v.dtype = dt
        v.__dict__.pop("_contig", None)
        g = self._grad
        if g is not None and getattr(dt, "scalar", None) is not None and dt.scalar is getattr(src, "scalar", None):
            _link_grad(self, v, g.view(dt))
        return v


def _dtype_name(t) -> str:
    return getattr(t, "__name__", None) or getattr(t, "name", None) or repr(t)


array1d, array2d, array3d, array4d = (_ArrayAnnotationGetter(n) for n in (1, 2, 3, 4))


def _view(base: array, ptr, shape, strides) -> array:
    v = array.wrap_memory(ptr, base.dtype, shape, strides, base.device, base, base.readonly)
    if base.pinned:
        v.pinned = True
    if base._link is not None:       # a view of a framework tensor: the same tensor, version and gradient
        v._link = base._link.view_of(base)
    if base._storage_check is not None:   # the same foreign memory: the same check
        v._storage_check = base._storage_check
    return v


def _link_grad(base: array, v: array, g: array) -> None:
    """Give view ``v`` of ``base`` the matching view ``g`` of ``base``'s gradient, with its
    gradient flags (a launch through the view accumulates into the base's gradient)."""
    v._grad = g
    v._requires_grad = base._requires_grad
    if base._retain_grad:
        v._retain_grad = True


def _struct_records(data, st, device) -> np.ndarray:
    """A (nested) list of struct instances (or dicts) as a numpy array of the struct's record
    dtype, each packed as the kernels lay it out (``StructType.to_ctype``).

    Raises:
        TypeError: an element is not an instance of the struct (or a dict of its fields).
    """
    objs = np.empty(np.shape(np.array(data, dtype=object)), dtype=object)
    objs[...] = np.array(data, dtype=object)   # keeps nested lists of instances as a grid
    out = np.zeros(objs.shape, dtype=st.np_dtype)
    flat_out = out.reshape(-1)
    for i, v in enumerate(objs.reshape(-1)):
        if not (isinstance(v, st.cls) or isinstance(v, dict)):
            raise TypeError(f"array(data=..., dtype={st.name}): expected {st.name} instances, got "
                            f"{type(v).__name__}")
        flat_out[i] = np.frombuffer(bytes(st.to_ctype(v, device)), dtype=st.np_dtype)[0]
    return out


def _group_components(arr: np.ndarray, dt):
    """Host data for a vector/matrix dtype whose trailing dims are not the component shape, read
    as Warp reads it: trailing 1-dims dropped; a last dim equal to the component count is one
    value per row (``[1, 2, 3]`` as vec3, rows of 4 as mat22), a multiple of it is grouped
    (``zeros(6)`` as two vec3); a lone value gets shape ``(1,)``.

    Returns:
        (array, whether the data was copied to regroup it). Anything else is left for
        ``fold_inner_dims`` to reject.
    """
    inner = dt.inner_shape
    k = len(inner)
    if arr.ndim > k and arr.shape[-k:] == inner:
        return arr, False
    while arr.ndim > 1 and arr.shape[-1] == 1 and arr.shape[-k:] != inner:
        arr = arr[..., 0]
    if arr.ndim == 0 or arr.shape[-1] == 0:
        return arr, False
    if arr.shape[-k:] == inner:
        target = arr.shape
    elif arr.shape[-1] == dt.length:
        target = arr.shape[:-1] + inner
    elif arr.shape[-1] % dt.length == 0:
        target = arr.shape[:-1] + (arr.shape[-1] // dt.length,) + inner
    else:
        return arr, False
    if len(target) == k:      # a single value
        target = (1,) + target
    contiguous = arr.flags.c_contiguous
    return np.ascontiguousarray(arr).reshape(target), not contiguous


def _within(v: array, base: array) -> bool:
    """Whether the bytes ``v``'s elements span lie inside those of ``base``'s."""
    def span(a):
        hi = a._ptr + sum((n - 1) * st for n, st in zip(a._shape, a._strides)) + a.dtype.size
        return a._ptr, hi
    if not v.size:
        return False
    lo, hi = span(v)
    blo, bhi = span(base)
    return blo <= lo and hi <= bhi


def _data_device(data, copy):
    """Default device for host data: the current device (as in Warp), except that an explicit
    ``copy=False`` of host memory means "alias it", which only the CPU can do."""
    d = getattr(data, "device", None)
    if isinstance(d, Device):
        return d
    if not copy and (isinstance(data, np.ndarray) or hasattr(data, "__array_interface__")):
        return get_device("cpu")
    return get_device(None)


def _recorded_source(data, dtype, shape):
    """``data`` when ``array(data)`` must be a recorded copy: a tapegrad array with a gradient,
    copied while a tape records (same dtype and shape; None otherwise).

    Raises:
        RuntimeError: such an array converted to another dtype or shape (a cast the tape cannot
            differentiate: the gradient would silently stop there).
    """
    if not isinstance(data, array) or active_tape() is None or not data.requires_grad:
        return None
    dt = types.resolve_dtype(dtype) if dtype is not None else data.dtype
    if dt is not data.dtype or (shape is not None and normalize_shape(shape) != data.shape):
        raise RuntimeError(f"array(data=...): copying an array of {data.dtype!r} with a gradient into "
                           f"{dt!r}{'' if shape is None else f' of shape {tuple(normalize_shape(shape))}'} while a "
                           "Tape records cannot pass the gradient back: use tg.clone(data) (recorded), a kernel "
                           "that casts, or data.numpy() for a constant copy")
    return data


def _copy_recorded(dest, src) -> None:
    """``copy(dest, src)`` (``array.__init__`` has a parameter named ``copy``)."""
    copy(dest, src)


def clone(src: array, device=None, requires_grad=None, pinned=False, retain_grad=False) -> array:
    """A contiguous copy of ``src`` (on ``device`` when given), with a copy of its grad (as
    Warp's) — except while a tape records: the clone then starts with a zero gradient, since
    the recorded copy passes the clone's gradient back to ``src`` (a copied ``src.grad`` would
    be counted twice); ``retain_grad`` as for ``array`` (needs a gradient: ``ValueError``
    otherwise)."""
    if _INDEXED.cls is not None and isinstance(src, _INDEXED.cls):   # its selection, gathered
        src = src.contiguous()      # requires_grad as the data's (Warp's clone default)
        if device is not None or pinned or retain_grad or (
                requires_grad is not None and bool(requires_grad) != src.requires_grad):
            return clone(src, device, requires_grad, pinned, retain_grad)
        return src
    if not isinstance(src, array):
        raise TypeError(f"clone: expected a tapegrad array, got {type(src).__name__}")
    dev = src.device if device is None else get_device(device)
    out = array(shape=src.shape, dtype=src.dtype, device=dev, pinned=pinned)
    rg = src.requires_grad if requires_grad is None else requires_grad
    recording = active_tape() is not None
    if rg and recording:
        # the gradient exists before the recorded copy, so the tape tracks the clone as an array
        # with a gradient: later host writes into it (c[1] = v, c.fill_(v)) are recorded and
        # tape.zero() clears it (set after the copy, the tape never saw it: a fill of the
        # clone passed its new values' gradient back to src)
        out.requires_grad = True
    copy(out, src)
    if rg and not recording:
        if src.grad is not None:
            out.grad = clone(src.grad, device=dev, requires_grad=False)
        else:
            out.requires_grad = True
    if retain_grad:
        out.retain_grad = True
    return out


def copy(dest: array, src: array, dest_offset: int = 0, src_offset: int = 0, count: int = 0) -> None:
    """Copy elements from ``src`` into ``dest`` (any devices; on the current stream).

    With offsets/count the arrays are treated as flat, row-major (contiguous arrays, or 1-D
    strided views such as ``a[::2]``). Recorded on an active Tape with its adjoint:
    ``src.grad`` gets ``dest.grad`` over the copied range, which is then consumed (zeroed)
    unless ``dest.retain_grad``.

    As Warp's: ``count`` 0 copies all of ``src`` (``src.size`` elements); a larger ``dest``
    keeps its remaining elements.

    Raises:
        TypeError: arguments are not arrays. CopyTypeError (a TypeError and RuntimeError): dtypes
            that differ; an offset or count not an int.
        CopyArgumentError (a ValueError and RuntimeError): a negative offset or count; a range
            past the end of either array; shapes that differ between non-contiguous arrays;
            offsets or count on a non-contiguous array of several dims.
    """
    if _INDEXED.cls is not None and (isinstance(dest, _INDEXED.cls) or isinstance(src, _INDEXED.cls)):
        return _INDEXED.copy(dest, src, dest_offset, src_offset, count)
    for name, a in (("dest", dest), ("src", src)):
        if not isinstance(a, array):
            raise TypeError(f"copy: {name} must be a tapegrad array, got {type(a).__name__}")
    if dest.dtype.size != src.dtype.size or (dest.dtype.scalar is not src.dtype.scalar):
        raise CopyTypeError(f"copy: dtypes differ: Incompatible array data types: destination dtype={dest.dtype.name}, "
                            f"source dtype={src.dtype.name}")
    dest._check_writable("copy")
    what = {"dest_offset": "Destination offset", "src_offset": "Source offset", "count": "count"}
    for name, v in (("dest_offset", dest_offset), ("src_offset", src_offset), ("count", count)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise CopyTypeError(f"copy({name}=...): offsets and count must be integers, got {type(v).__name__}")
        if v < 0:
            raise CopyArgumentError(f"copy({name}=...): {what[name]} must be non-negative (>= 0), got {v}")
    dest_offset, src_offset, count = int(dest_offset), int(src_offset), int(count)
    if dest_offset or src_offset or count or dest.size != src.size:
        count = count or src.size
        if src_offset + count > src.size:
            raise CopyArgumentError(f"copy: out of bounds: a range of {count} element(s) from source offset "
                                    f"({src_offset}) exceeds the source size ({src.size})")
        if dest_offset + count > dest.size:
            raise CopyArgumentError(f"copy: out of bounds: a range of {count} element(s) to destination offset "
                                    f"({dest_offset}) exceeds the destination size ({dest.size})")
        for name, a in (("dest", dest), ("src", src)):
            if a.ndim > 1 and not a.is_contiguous:
                raise CopyArgumentError(f"copy: dest_offset, src_offset, and count (or arrays of different sizes) "
                                        f"are only supported for 1-D non-contiguous arrays ({name} is a strided "
                                        f"{a.ndim}-D array of shape {a.shape})")
        # flat ranges of contiguous arrays or of 1-D strided views (a[::2])
        pair = (dest.flat_view(dest_offset, count), src.flat_view(src_offset, count))
    else:
        if dest.shape != src.shape:
            if not (dest.is_contiguous and src.is_contiguous):
                raise CopyArgumentError(f"copy: Incompatible array shapes: destination shape={dest.shape}, source "
                                        f"shape={src.shape} (and the arrays are not contiguous)")
            pair = (dest.reshape((dest.size,)), src.reshape((src.size,)))
        else:
            pair = (dest, src)
    tape = active_tape()
    if tape is not None:     # before copying: the tape may save the values dest is about to lose
        tape.record(CopyRecord(dest, src, dest_offset, src_offset, count))
    memory_ops.copy(*pair)
    dest._bump()


def _struct_value(st, rec, device):
    """A struct instance from a record of its NumPy structured dtype. Array fields become arrays
    around the memory their descriptors name, which they do not own (as Warp's); a null one None."""
    kwargs = {}
    for fname, ftype in st.fields:
        v = rec[fname]
        if isinstance(ftype, types.ArrayType):
            desc = types.ArrayDesc.from_buffer_copy(np.ascontiguousarray(v).tobytes())
            if desc.data:
                nd = int(desc.ndim)
                kwargs[fname] = array.wrap_memory(int(desc.data), ftype.dtype, tuple(desc.shape[:nd]),
                                                  tuple(desc.strides[:nd]), device, None)
            continue
        if isinstance(ftype, types.StructType):
            kwargs[fname] = _struct_value(ftype, v, device)
        elif isinstance(ftype, types.ScalarType):
            kwargs[fname] = v.item()
        else:
            kwargs[fname] = ftype(np.asarray(v))
    return st.cls(**kwargs)
