"""The launch device: ``device=``, else the stream's, else the first tapegrad array's, else a
foreign object's (its ``TensorType`` row's accessor, its ``device`` attribute, its protocol, its CAI
pointer), else the current device; and how the native helper may treat a CAI type (``cai_kind``).
"""
from __future__ import annotations

import numpy as np

from ..array import array
from ..device import get_device
from ..protocols import pointer_device
from ..tensortypes import tensor_type_for
from .packers import ArrayCtype, adapter_for

__all__ = ["infer_device", "forget_device_accessors", "cai_kind"]


def infer_device(device, stream, args):
    if device is not None:
        return get_device(device)
    if stream is not None:
        return stream.device
    for a in args:
        if isinstance(a, array) and a.device is not None:
            return a.device
        if isinstance(a, ArrayCtype):
            return a.tg_device
    for a in args:  # arrays held in struct arguments come next (their pointers are the kernel's too)
        st = getattr(type(a), "_tg_struct", None)
        if st is not None:
            d = next((v.device for v in st.array_values(a) if isinstance(v, array) and v.device is not None), None)
            if d is not None:
                return d
    for a in args:  # no tapegrad array: the first foreign array decides (a CPU tensor -> "cpu")
        d = _foreign_device(a)
        if d is not None:
            return d
    return get_device(None)

_DEVICE_OF: dict = {}    # exact type -> its row's device accessor, or None (misses too)


def forget_device_accessors() -> None:
    """Forget the per-type device accessors (a ``TensorType`` row was registered)."""
    _DEVICE_OF.clear()


def _foreign_device(a):
    """Device of a foreign array object passed directly, or None when ``a`` is not one."""
    cls = a.__class__
    fn = _DEVICE_OF.get(cls, _DEVICE_OF)
    if fn is _DEVICE_OF:
        row = tensor_type_for(cls)
        fn = _DEVICE_OF[cls] = None if row is None else row.device or _layout_device(row)
    if fn is not None:
        return fn(a)   # the row's accessor
    if isinstance(a, np.ndarray):   # before the call below: CPU launches with numpy arrays ask per launch
        return get_device("cpu")
    d = _declared_device(a)
    if d is not None:
        return d
    if hasattr(a, "__cuda_array_interface__"):
        return pointer_device(a.__cuda_array_interface__["data"][0])
    return None


def _layout_device(row):
    """The device accessor of a row without one: its layout reader's device."""
    return lambda t: row.layout(t).device


def _declared_device(a):
    """The device a foreign object other than a numpy array names itself (a ``device``
    attribute: an object whose ``type`` is "cpu" or "cuda" with an ``index``, or the name "cpu"
    or "cuda:N"; else ``__array_interface__``: the CPU), or None (a CAI object's comes from its
    pointer). Tensor types with a registered row use its ``device`` accessor instead."""
    d = getattr(a, "device", None)
    kind = getattr(d, "type", None)          # a device object of the "type"/"index" kind
    if kind == "cpu":
        return get_device("cpu")
    if kind == "cuda":
        return get_device("cuda" if d.index is None else f"cuda:{d.index}")
    if isinstance(d, str) and (d == "cpu" or d.startswith("cuda")):   # tapegrad's own device names
        return get_device(d)
    if hasattr(a, "__array_interface__"):
        return get_device("cpu")
    return None

def cai_kind(obj) -> int:
    """How the native helper treats objects of ``type(obj)`` passed for an array parameter on
    CUDA (it asks once per exact type, with the first object it meets):

    0: not its CAI path (tapegrad arrays, numpy arrays, types a registered ``TensorType`` row
       covers, objects without ``__cuda_array_interface__``): the Python packer, called from C.
    1: the Python packer reads ``__cuda_array_interface__`` (``foreign_desc``) and a launch
       with no tapegrad array takes its device from the data pointer (``_foreign_device``):
       the helper caches the packer's descriptor per layout and may infer the device from the
       pointer's (the driver's ordinal of device memory, as the packer's layout was cached).
    2: as 1, but the device comes from elsewhere (a ``device`` attribute): the helper takes it
       only when the launch's other arguments fix the device.
    """
    try:
        if isinstance(obj, (array, ArrayCtype, np.ndarray)) or adapter_for(obj) is not None:
            return 0
        if not hasattr(obj, "__cuda_array_interface__"):
            return 0
    except Exception:  # noqa: BLE001  an object whose attributes raise: the packer (and its error)
        return 0
    try:
        declared = _declared_device(obj) is not None
    except Exception:  # noqa: BLE001  it names a device that does not resolve: never the pointer's
        declared = True
    return 2 if declared else 1
