"""The one table of framework bridges: where each lives and which public names it gives ``tg``.

The core never imports a bridge by an import statement. It reads this table: ``tapegrad``'s
package face resolves ``tg.from_torch`` and friends on first access, and ``launch`` imports
the bridge of a foreign tensor's framework the first time it meets one (through
``tensortypes.tensor_type_for``; the bridge then registers its tensor types' rows with
``tensortypes.register_tensor_type``). Adding a bridge means adding one row here.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Bridge", "BRIDGES", "bridge_for_type_module", "allocator_module", "public_names",
           "is_writable_framework_view"]


@dataclass(frozen=True)
class Bridge:
    """One framework bridge.

    Attributes:
        framework: the framework's name ("torch").
        module: the bridge module (``tapegrad.bridges.torch``).
        type_modules: top-level module names of the framework's tensor types (``type(x).__module__``
            split at the first dot): meeting such an object in ``launch`` imports the bridge.
        names: the public names the bridge gives the ``tapegrad`` namespace.
        allocators: ``{allocator name: module}`` for the CUDA allocators the bridge provides
            (``tg.set_allocator(name)`` imports the module, which registers the allocator).
        writable_host_views: the framework hands out host views of its arrays read-only through
            the buffer protocol (``np.asarray(jax_array)``) while its zero-copy DLPack export of
            the same memory, and so ``from_<framework>``, is writable: a numpy array viewing
            such an array directly is wrapped writable, as ``from_<framework>`` would wrap it.
    """

    framework: str
    module: str
    type_modules: tuple
    names: tuple
    allocators: tuple = ()    # ((name, module), ...)
    writable_host_views: bool = False


BRIDGES = (
    Bridge("torch", "tapegrad.bridges.torch", ("torch",), (
        "from_torch", "to_torch", "device_from_torch", "device_to_torch", "dtype_from_torch",
        "dtype_to_torch", "stream_from_torch", "stream_to_torch", "torch_op"),
        allocators=(("torch", "tapegrad.bridges.torch_memory"), ("pytorch", "tapegrad.bridges.torch_memory"))),
    Bridge("paddle", "tapegrad.bridges.paddle", ("paddle",), (
        "from_paddle", "to_paddle", "device_from_paddle", "device_to_paddle", "dtype_from_paddle",
        "dtype_to_paddle", "stream_from_paddle", "stream_to_paddle", "paddle_op")),
    Bridge("jax", "tapegrad.bridges.jax", ("jax", "jaxlib"), (
        "from_jax", "to_jax", "device_from_jax", "device_to_jax", "dtype_from_jax", "dtype_to_jax",
        "jax_kernel", "jax_callable", "GraphMode", "JaxCallableGraphMode", "clear_jax_callable_graph_cache",
        "JaxModulePreloadMode"), writable_host_views=True),
    Bridge("optax", "tapegrad.bridges.optax", (), ("optax_optimizer", "OptaxOptimizer")),
)

_BY_TYPE_MODULE = {m: b.module for b in BRIDGES for m in b.type_modules}
_ALLOCATOR_MODULES = {name: module for b in BRIDGES for name, module in b.allocators}
_WRITABLE_VIEW_MODULES = frozenset(m for b in BRIDGES if b.writable_host_views for m in b.type_modules)


def bridge_for_type_module(top_module: str):
    """The bridge module for objects whose type lives in ``top_module`` ("torch"), or None."""
    return _BY_TYPE_MODULE.get(top_module)


def allocator_module(name: str):
    """The bridge module providing the CUDA allocator called ``name`` ("torch"), or None."""
    return _ALLOCATOR_MODULES.get(name)


def public_names() -> dict:
    """``{public name: bridge module}`` for the package face's lazy attributes."""
    return {name: b.module for b in BRIDGES for name in b.names}


def is_writable_framework_view(arr) -> bool:
    """Whether a read-only numpy array is read-only only by its framework's convention.

    True when ``arr``'s base is, directly, a buffer-protocol view (a ``memoryview``) of an array of
    a framework whose bridge declares ``writable_host_views`` (JAX: ``np.asarray(jax_array)`` is
    read-only because JAX arrays are immutable, yet JAX exports the same memory writable through
    DLPack). Views numpy derived from such an array (slices, ``broadcast_to``) are not: numpy may
    have made those read-only for reasons of its own (overlapping elements).

    Args:
        arr: a numpy array.

    Returns:
        bool.
    """
    base = getattr(arr, "base", None)
    if type(base) is not memoryview:
        return False
    owner = base.obj
    return owner is not None and type(owner).__module__.partition(".")[0] in _WRITABLE_VIEW_MODULES
