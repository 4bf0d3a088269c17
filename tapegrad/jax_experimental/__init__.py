"""Warp's deprecated ``warp.jax_experimental`` namespace, for code written against it.

Warp 1.10 to 1.17 kept its JAX interop under ``warp.jax_experimental`` (and ``.ffi``) before
moving it to the top level; Warp 1.19 has removed the namespace. ``import
tapegrad.jax_experimental`` (and ``tapegrad.jax_experimental.ffi``) gives the same names, bound
to tapegrad's JAX bridge (``tg.jax_kernel`` ... are the very same objects), and warns once with a
``DeprecationWarning`` naming the top-level API to use instead. Importing it imports JAX.

Warp's ``register_ffi_callback`` (raw XLA FFI callbacks) and the legacy custom-call
``jax_kernel`` (``warp.jax_experimental.custom_call``, which needs JAX older than 0.8) have no
tapegrad counterpart and are absent.
"""
from __future__ import annotations

import importlib
import warnings

NAMES = ("from_jax", "to_jax", "device_from_jax", "device_to_jax", "dtype_from_jax", "dtype_to_jax", "jax_kernel",
         "jax_callable", "GraphMode", "JaxCallableGraphMode", "ModulePreloadMode", "JaxModulePreloadMode",
         "clear_jax_callable_graph_cache")

__all__ = list(NAMES)


def deprecated_namespace(old: str, namespace: dict, names=NAMES) -> None:
    """Warn that ``old`` (a module of this package) is deprecated, and bind ``names`` of tapegrad's
    JAX bridge in ``namespace`` (that module's globals).

    Args:
        old: the deprecated module's name ("tapegrad.jax_experimental.ffi").
        namespace: the module's ``globals()``.
        names: the bridge names to bind.
    """
    warnings.warn(f"The `{old}` namespace is deprecated (as Warp's `warp{old[len('tapegrad'):]}`, removed in "
                  "Warp 1.19): use the top-level JAX APIs (tg.jax_kernel, tg.jax_callable, tg.from_jax ...) "
                  "instead.", DeprecationWarning, stacklevel=3)
    # by name, as the package face resolves tg.jax_kernel: the core holds no import of a bridge
    bridge = importlib.import_module("tapegrad.bridges.jax")
    for name in names:
        namespace[name] = getattr(bridge, name)


deprecated_namespace(__name__, globals())
