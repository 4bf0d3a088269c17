"""tapegrad: differentiable GPU/CPU kernels written in Python, inside any array framework.

The public names follow NVIDIA Warp's (``import tapegrad as wp`` runs Warp interop code).
Importing tapegrad imports no framework: bridge functions (``from_torch``, ``to_jax``...) are
resolved lazily on first use.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

from .types import (  # noqa: F401
    ScalarType, VectorType, MatrixType, QuatType, StructType, ArrayType,
    bool_ as bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, float32, float64, half, double,
    vec2, vec3, vec4, vec2d, vec3d, vec4d, vec2h, vec3h, vec4h, vec2i, vec3i, vec4i,
    mat22, mat33, mat44, mat22d, mat33d, mat44d, quat, quatd,
    vector, matrix, struct, dtype_to_numpy, dtype_from_numpy,
)
from .device import (  # noqa: F401
    Device, get_device, set_device, ScopedDevice, get_cuda_device_count, get_cuda_devices,
    is_cuda_available, is_cpu_available, get_preferred_device, synchronize, synchronize_device,
)
from .array import (  # noqa: F401
    array, array1d, array2d, array3d, array4d, zeros, ones, empty, full, zeros_like, ones_like,
    empty_like, full_like, from_numpy, clone, copy,
)
from .launch import launch, ArrayCtype  # noqa: F401
from .tape import Tape, TapeWarning, config  # noqa: F401
from .lang import *  # noqa: F401,F403  kernel, func, func_grad, tid, builtins...
from .lang import kernel, func, func_grad, Kernel  # noqa: F401

float_ = float32
int_ = int32

# name -> module resolved on first attribute access (keeps `import tapegrad` framework-free)
_LAZY = {
    "Stream": "tapegrad.cuda.stream", "Event": "tapegrad.cuda.stream", "ScopedStream": "tapegrad.cuda.stream",
    "get_stream": "tapegrad.cuda.stream", "set_stream": "tapegrad.cuda.stream",
    "wait_stream": "tapegrad.cuda.stream", "wait_event": "tapegrad.cuda.stream",
    "record_event": "tapegrad.cuda.stream", "synchronize_stream": "tapegrad.cuda.stream",
    "synchronize_event": "tapegrad.cuda.stream",
    "ScopedCapture": "tapegrad.cuda.graph", "Graph": "tapegrad.cuda.graph", "capture_begin": "tapegrad.cuda.graph",
    "capture_end": "tapegrad.cuda.graph", "capture_launch": "tapegrad.cuda.graph",
    "set_allocator": "tapegrad.cuda.allocators", "ScopedAllocator": "tapegrad.cuda.allocators",
    "from_dlpack": "tapegrad.dlpack", "to_dlpack": "tapegrad.dlpack",
    "autograd": "tapegrad.autograd", "gradcheck": "tapegrad.autograd", "jacobian": "tapegrad.autograd",
    "from_torch": "bridges.torch", "to_torch": "bridges.torch", "device_from_torch": "bridges.torch",
    "device_to_torch": "bridges.torch", "dtype_from_torch": "bridges.torch", "dtype_to_torch": "bridges.torch",
    "stream_from_torch": "bridges.torch", "stream_to_torch": "bridges.torch", "torch_op": "bridges.torch",
    "from_paddle": "bridges.paddle", "to_paddle": "bridges.paddle", "device_from_paddle": "bridges.paddle",
    "device_to_paddle": "bridges.paddle", "dtype_from_paddle": "bridges.paddle",
    "dtype_to_paddle": "bridges.paddle", "stream_from_paddle": "bridges.paddle",
    "stream_to_paddle": "bridges.paddle", "paddle_op": "bridges.paddle",
    "from_jax": "bridges.jax", "to_jax": "bridges.jax", "device_from_jax": "bridges.jax",
    "device_to_jax": "bridges.jax", "dtype_from_jax": "bridges.jax", "dtype_to_jax": "bridges.jax",
    "jax_kernel": "bridges.jax", "jax_callable": "bridges.jax", "GraphMode": "bridges.jax",
    "JaxCallableGraphMode": "bridges.jax", "clear_jax_callable_graph_cache": "bridges.jax",
}


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
