"""tapegrad: differentiable GPU/CPU kernels written in Python, inside any array framework.

The public names follow NVIDIA Warp's (``import tapegrad as wp`` runs Warp interop code).
Importing tapegrad imports no framework: bridge functions (``from_torch``, ``to_jax``...) are
resolved lazily on first use.
"""
from __future__ import annotations

import importlib

from .version import __version__  # noqa: F401
from .errors import (  # noqa: F401
    KernelError, CompileError, CacheDirError, TapeWarning, TapeCompileWarning, GradcheckError,
    DLPackStreamError, DLPackDtypeError, ConsumedCapsuleError, BridgeTypeError, GradLayoutError,
)
from . import frameworks as _frameworks

from .types import (  # noqa: F401
    ScalarType, VectorType, MatrixType, QuatType, StructType, ArrayType,
    bool_ as bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, half, double,
    vec2, vec3, vec4, vec2d, vec3d, vec4d, vec2h, vec3h, vec4h, vec2i, vec3i, vec4i,
    mat22, mat33, mat44, mat22d, mat33d, mat44d, quat, quatd,
    vector, matrix, struct, dtype_to_numpy, dtype_from_numpy,
)
from .device import (  # noqa: F401
    Device, get_device, set_device, ScopedDevice, get_cuda_device_count, get_cuda_devices,
    is_cuda_available, is_cpu_available, get_preferred_device, synchronize, synchronize_device,
)
from .array import array, array1d, array2d, array3d, array4d, clone, copy  # noqa: F401
from .creation import (  # noqa: F401
    zeros, ones, empty, full, zeros_like, ones_like, empty_like, full_like, from_numpy,
)
from .launch import launch, ArrayCtype  # noqa: F401
from .tape import Tape, config  # noqa: F401
from .lang import *  # noqa: F401,F403  kernel, func, func_grad, tid, builtins...
from .lang import kernel, func, func_grad, Kernel  # noqa: F401

float_ = float32
int_ = int32

# name -> module resolved on first attribute access (keeps `import tapegrad` framework-free)
_LAZY = {name: module for module, names in {
    "tapegrad.cuda.stream": (
        "Stream", "Event", "ScopedStream", "get_stream", "set_stream", "wait_stream", "wait_event",
        "record_event", "synchronize_stream", "synchronize_event",
    ),
    "tapegrad.cuda.graph": (
        "ScopedCapture", "Graph", "capture_begin", "capture_end", "capture_launch",
    ),
    "tapegrad.cuda.allocators": (
        "set_allocator", "ScopedAllocator",
    ),
    "tapegrad.dlpack": (
        "from_dlpack", "to_dlpack",
    ),
    "tapegrad.autograd": (
        "autograd", "gradcheck", "jacobian",
    ),
}.items() for name in names}
_LAZY.update(_frameworks.public_names())   # the bridges' names: one table, tapegrad.frameworks


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tapegrad' has no attribute {name!r}")
    try:
        m = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name != mod:
            raise  # the framework itself is missing: its own ImportError says which
        raise AttributeError(f"tapegrad.{name}: the {mod} bridge is not part of this tapegrad "
                             f"version yet") from None
    value = m if name == "autograd" else getattr(m, name)
    globals()[name] = value
    return value


def __dir__():
    import importlib.util
    present = {n for n, mod in _LAZY.items() if importlib.util.find_spec(mod) is not None}
    return sorted(set(globals()) | present)
