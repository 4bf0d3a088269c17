"""Warp's deprecated ``warp.jax_experimental.ffi`` namespace: tapegrad's JAX bridge under the old
name (see ``tapegrad.jax_experimental``), with a ``DeprecationWarning`` on import."""
from __future__ import annotations

from . import NAMES, deprecated_namespace

__all__ = list(NAMES)

deprecated_namespace(__name__, globals())
