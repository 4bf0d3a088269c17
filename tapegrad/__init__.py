"""tapegrad: differentiable GPU/CPU kernels written in Python, inside any array framework.

The public names follow NVIDIA Warp's (``import tapegrad as wp`` runs Warp interop code).
Importing tapegrad imports no framework: bridge functions (``from_torch``, ``to_jax``...) are
resolved lazily on first use.
"""
from __future__ import annotations

import importlib

from . import frameworks as _frameworks
from . import indexed_ops as _indexed_ops  # noqa: F401  (registers indexed arrays' gather/scatter launches)
from . import types as _types
from .array import array, array1d, array2d, array3d, array4d, clone, copy  # noqa: F401
from .config import config  # noqa: F401
from .constants import *  # noqa: F401,F403  pi, e, inf, nan, tau...
from .creation import (  # noqa: F401
    empty,
    empty_like,
    from_numpy,
    full,
    full_like,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .device import (  # noqa: F401
    Device,
    ScopedDevice,
    get_cuda_device_count,
    get_cuda_devices,
    get_device,
    get_preferred_device,
    is_cpu_available,
    is_cuda_available,
    set_device,
    synchronize,
    synchronize_device,
)
from .errors import (  # noqa: F401
    ArgnamesError,
    ArgumentCountError,
    BridgeTypeError,
    CacheDirError,
    CacheWarning,
    CompileError,
    ConsumedCapsuleError,
    CopyArgumentError,
    CopyTypeError,
    DLPackDtypeError,
    DLPackStreamError,
    GradcheckError,
    GradLayoutError,
    KernelError,
    KernelIndexError,
    KernelRuntimeError,
    LaunchArgumentError,
    LaunchConversionError,
    NotDifferentiableError,
    ReshapeError,
    TapeCompileWarning,
    TapeWarning,
    ViewDtypeError,
    WarpCodegenAttributeError,
    WarpCodegenError,
    WarpCodegenIndexError,
    WarpCodegenKeyError,
    WarpCodegenTypeError,
    WarpCodegenValueError,
)
from .indexedarray import (  # noqa: F401
    indexedarray,
    indexedarray1d,
    indexedarray2d,
    indexedarray3d,
    indexedarray4d,
)
from .lang import *  # noqa: F401,F403  kernel, func, func_grad, tid, builtins...
from .lang import Kernel, func, func_grad, kernel  # noqa: F401
from .launch import ArrayCtype, Launch, launch  # noqa: F401
from .launch.tangent import launch_tangent as _launch_tangent  # noqa: F401  registers launch(tangent=True)
from .runtime import (  # noqa: F401
    DeterministicMode,
    Module,
    ModuleBuildOptions,
    ScopedTimer,
    clear_kernel_cache,
    force_load,
    get_cuda_device,
    get_devices,
    get_module,
    get_module_options,
    init,
    is_device_available,
    load_module,
    set_module_options,
)
from .tape import Tape  # noqa: F401
from .types import (  # noqa: F401
    ArrayType,
    Float,
    Int,
    MatrixType,
    QuatType,
    Scalar,
    ScalarType,
    StructType,
    VectorType,
    bfloat16,
    double,
    dtype_from_numpy,
    dtype_to_numpy,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    matrix,
    quaternion,
    struct,
    transformation,
    uint8,
    uint16,
    uint32,
    uint64,
    vector,
)
from .types import bool_ as bool  # noqa: F401
from .version import __version__  # noqa: F401

# every named vector/matrix/quat type (vec3, vec3f, vec3d, vec3h, vec3ub..., mat33h, quatd...)
globals().update({_n: getattr(_types, _n) for _n in _types.NAMED_TYPES})

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
    "tapegrad.cuda.mempool": (
        "is_mempool_supported", "is_mempool_enabled", "set_mempool_enabled", "get_mempool_used_mem_current",
        "get_mempool_used_mem_high", "get_mempool_release_threshold", "set_mempool_release_threshold",
    ),
    "tapegrad.dlpack": (
        "from_dlpack", "to_dlpack",
    ),
    "tapegrad.autograd": (
        "autograd", "gradcheck", "jacobian",
    ),
    "tapegrad.optim": (
        "optim",
    ),
}.items() for name in names}
_LAZY.update(_frameworks.public_names())   # the bridges' names: one table, tapegrad.frameworks

# The public face of `from tapegrad import *`: every name imported above (kernel builtins
# included). The lazy names stay out: a star import reads every name of __all__, which would import
# torch, paddle and JAX (and fail where one is missing); they resolve as attributes and are listed
# by dir(tapegrad). Submodules reached as attributes (tapegrad.types...) are not part of it.
__all__ = sorted(n for n, v in globals().items() if not n.startswith("_") and n != "annotations"
                 and type(v) is not type(importlib))


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
    value = m if mod.rsplit(".", 1)[-1] == name else getattr(m, name)   # a module itself (tg.optim)
    globals()[name] = value
    return value


def __dir__():
    import importlib.util
    present = {n for n, mod in _LAZY.items() if importlib.util.find_spec(mod) is not None}
    return sorted(set(globals()) | present)
