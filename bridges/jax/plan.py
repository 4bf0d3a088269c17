"""The static half of a ``jax_kernel`` call, as the C handler reads it (``ffi_handler.cpp``).

A *plan* holds every fact of one traced call that does not change between executions: the
kernel-ABI slots (which call-frame operand or result each kernel parameter takes, expected
XLA dtype and unbatched dims), the packed static scalar values, the launch grid, block size
and the compiled entry points. It is built once per distinct call configuration at trace
time and its address is passed to XLA as the ``tapegrad_plan`` attribute, so an execution
needs no Python. Plans are kept for the life of the process: a compiled XLA executable may
run them at any later time.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

from tapegrad import abi, types

__all__ = ["Slot", "PlanSpec", "Plan", "IN", "OUT", "INOUT", "VALUE", "NULL_ARRAY", "NULL_VALUE", "MAX_DEVICES",
           "xla_dtype"]

# the slot kinds, the device limit and the plan's magic: the kernel ABI table's (tapegrad/abi)
IN, OUT, INOUT, VALUE, NULL_ARRAY, NULL_VALUE = range(len(abi.XLA_SLOT_KINDS))
MAX_DEVICES = abi.XLA_MAX_DEVICES
MAGIC = abi.XLA_PLAN_MAGIC

# XLA's element type names (xla_data.proto's PrimitiveType; XLA_FFI_DataType has the same values)
# by DLPack type code: the name is the prefix and the scalar table's bits ("S8", "BF16"; bool: "PRED")
_XLA_PREFIX = {types.DL_INT: "S", types.DL_UINT: "U", types.DL_FLOAT: "F", types.DL_BFLOAT: "BF"}
_xla_codes: dict = {}


def xla_dtype(scalar) -> int:
    """The XLA FFI data type code of a tapegrad scalar type, derived from its row of the scalar
    table (DLPack code and bits) and jaxlib's ``PrimitiveType``."""
    code = _xla_codes.get(scalar)
    if code is None:
        from jaxlib.xla_client import PrimitiveType
        name = "PRED" if scalar.dl_code == types.DL_BOOL else f"{_XLA_PREFIX[scalar.dl_code]}{scalar.bits}"
        code = _xla_codes[scalar] = int(PrimitiveType[name].value)
    return code


# the C structs (tg_xla_slot_t, tg_xla_plan_t of tapegrad/include/tg_abi.h), from the ABI table
_CSlot, _CPlan = abi.XlaSlot, abi.XlaPlan

# the plan's loader callback (tg_xla_loader_t)
LOADER = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(_CPlan), ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p,
                          ctypes.c_int64)


def abi_version() -> int:
    """The struct sizes the C handler must report (``tgx_abi_version``): a mismatch means
    ffi_handler.cpp and this module disagree on the plan layout."""
    return ctypes.sizeof(_CPlan) * 1000 + ctypes.sizeof(_CSlot)


@dataclass(frozen=True)
class Slot:
    """One kernel-ABI parameter of a call.

    Attributes:
        kind: IN, OUT, INOUT, VALUE, NULL_ARRAY or NULL_VALUE.
        name: the kernel parameter's name (``adj_<name>`` for adjoint slots), for messages.
        arg, ret: call-frame operand / result index (-1: none).
        dtype: the tapegrad dtype of the array's elements or of the value.
        dims: the unbatched tapegrad shape of the array (inner vector/matrix dims excluded).
        value: for VALUE slots, the packed bytes.
        xla: the XLA dtype code the buffer must have (0: the one of ``dtype``).
    """

    kind: int
    name: str
    arg: int = -1
    ret: int = -1
    dtype: object = None
    dims: tuple = ()
    value: bytes = b""
    xla: int = 0


@dataclass(frozen=True)
class PlanSpec:
    """Everything a plan is built from (hashable: equal specs share one plan). The entry point:
    the forward (``adjoint`` False, ``tangent`` 0), the adjoint (``adjoint``), the tangent
    (``tangent`` 1) or the tangent of the adjoint (``tangent`` 2; ``launch_tangent``)."""

    kernel: object
    slots: tuple
    nargs: int
    nrets: int
    launch: tuple
    adjoint: bool
    block_dim: int
    tangent: int = 0     # 1: the tangent entry, 2: the tangent-of-adjoint entry (forward mode)


class Plan:
    """A C ``tgx_plan`` and the memory it points into, alive as long as this object."""

    def __init__(self, spec: PlanSpec, loader):
        self.spec = spec
        n = len(spec.slots)
        self._slots = (_CSlot * max(n, 1))()
        self._names = [s.name.encode() for s in spec.slots]
        self._kernel_name = spec.kernel.key.encode()
        blob = bytearray()
        for i, s in enumerate(spec.slots):
            c = self._slots[i]
            c.kind, c.arg, c.ret, c.name = s.kind, s.arg, s.ret, self._names[i]
            if s.kind in (IN, OUT, INOUT, NULL_ARRAY):
                inner = s.dtype.inner_shape
                xdims = tuple(s.dims) + tuple(inner)
                c.ndim, c.rank, c.dtype = len(s.dims), len(xdims), s.xla or xla_dtype(s.dtype.scalar)
                for k, d in enumerate(xdims):
                    c.dims[k] = d
                c.elem_size = s.dtype.size
            elif s.kind in (VALUE, NULL_VALUE):
                while len(blob) % 16:
                    blob.append(0)
                c.value_offset, c.value_size = len(blob), len(s.value)
                blob += s.value
        self._values = (ctypes.c_char * max(len(blob), 16)).from_buffer_copy(bytes(blob) + b"\0" * 16)
        p = self._c = _CPlan()
        p.magic, p.nslots, p.nargs, p.nrets, p.adjoint = MAGIC, n, spec.nargs, spec.nrets, int(spec.adjoint)
        dims = spec.launch
        size = 1
        for k, d in enumerate(dims):
            p.bounds.shape[k] = d
            size *= d
        p.bounds.ndim, p.bounds.size = len(dims), size
        p.block_dim = spec.block_dim
        self._loader = loader       # the callback object stays alive with the plan
        p.loader = ctypes.cast(loader, ctypes.c_void_p).value
        p.kernel = self._kernel_name
        p.slots = ctypes.addressof(self._slots)
        p.values = ctypes.addressof(self._values)
        self.address = ctypes.addressof(p)
        self.lock = threading.Lock()

    @property
    def c(self):
        """The ``ctypes`` structure (entry points are filled in by the loader)."""
        return self._c


def _without_gradients(c):
    """A packed struct value with its arrays' gradient pointers cleared: a static value is a
    constant of the JAX program, so the adjoint (jax.grad) accumulates nothing into the arrays
    it holds (with their pointers it added into the caller's tapegrad ``.grad`` on every
    backward call)."""
    for name, _ in c._fields_:
        v = getattr(c, name)
        if isinstance(v, types.ArrayDesc):
            v.grad = None
        elif isinstance(v, ctypes.Structure):
            _without_gradients(v)
    return c


def pack_value(ptype, value, label) -> bytes:
    """The kernel-ABI bytes of static value ``value`` for parameter type ``ptype`` (a scalar:
    ``types.scalar_packer``, the rule ``tg.launch`` packs it by).

    Raises:
        TypeError: the value does not convert. OverflowError: an integer outside a scalar
            type's range. Both messages name the argument.
    """
    import numpy as np
    if isinstance(ptype, types.ScalarType):
        return bytes(types.scalar_packer(ptype, label)(value))
    try:
        if isinstance(ptype, types.StructType):
            return bytes(_without_gradients(ptype.to_ctype(value)))
        integral = ptype.scalar.kind in ("int", "uint")
        if isinstance(value, (str, bytes)) or (integral and isinstance(value, (float, np.floating))
                                               and not float(value).is_integer()):
            raise TypeError
        flat = np.asarray(value, dtype=ptype.scalar.np_dtype).reshape(-1)
        if flat.size != ptype.length:
            raise TypeError
        return flat.tobytes()
    except (TypeError, ValueError, AttributeError):
        raise TypeError(f"{label}: expected a static value of {ptype!r}, got {value!r}") from None
