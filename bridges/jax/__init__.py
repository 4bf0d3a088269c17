"""JAX bridge: zero-copy conversions, kernels as XLA FFI primitives, callables, graph modes.

- ``convert``: ``from_jax``/``to_jax`` (DLPack, CPU and CUDA), device and dtype maps.
- ``kernel``: ``jax_kernel`` (a kernel as a JAX primitive; vmap, ``enable_backward``).
- ``callable``: ``jax_callable`` (a Python function launching kernels); ``graphs``: the WARP graph
  modes' bounded cache of CUDA graphs.
- ``ffi``/``plan``/``entry``: the C handler library, the per-call plans it reads, and the
  compiled entry points they point at.

Imported lazily by ``tapegrad`` (``tg.from_jax``, ``tg.jax_kernel``...): ``import tapegrad``
never imports JAX.
"""
from .callable import (  # noqa: F401
                      DEFAULT_GRAPH_CACHE_MAX,
                      GraphMode,
                      JaxCallable,
                      JaxCallableGraphMode,
                      clear_jax_callable_graph_cache,
                      jax_callable,
)
from .convert import device_from_jax, device_to_jax, dtype_from_jax, dtype_to_jax, from_jax, to_jax  # noqa: F401
from .entry import ModulePreloadMode  # noqa: F401
from .kernel import JaxKernel, jax_kernel  # noqa: F401

JaxModulePreloadMode = ModulePreloadMode

__all__ = ["from_jax", "to_jax", "device_from_jax", "device_to_jax", "dtype_from_jax", "dtype_to_jax",
           "jax_kernel", "JaxKernel", "ModulePreloadMode", "JaxModulePreloadMode", "jax_callable", "JaxCallable",
           "GraphMode", "JaxCallableGraphMode", "clear_jax_callable_graph_cache", "DEFAULT_GRAPH_CACHE_MAX"]
