"""A kernel's parameters as Warp's code reads them: ``kernel.adj.args`` (each with ``label`` and
``type``) and ``kernel.adj.kernel_dim``.

Warp's kernels carry their whole code generator state as ``kernel.adj``; tapegrad's compile
through ``lang.lower`` and keep no such object, so ``Kernel.adj`` gives only this read-only
summary of the signature, which is what code outside Warp's code generator reads of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["KernelArg", "KernelArgs"]


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter.

    Attributes:
        label: its name. type: its tapegrad type (``tg.vec3``, an array type...).
    """

    label: str
    type: Any


@dataclass(frozen=True)
class KernelArgs:
    """A kernel's signature (``Kernel.adj``).

    Attributes:
        args: the parameters in order (``KernelArg``). kernel_dim: how many indices the body
            unpacks ``tid()`` into (at least 1, as Warp's).
    """

    args: tuple
    kernel_dim: int
