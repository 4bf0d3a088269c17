"""A kernel's parameters as Warp's code reads them: ``kernel.adj.args`` (each with ``label`` and
``type``), ``kernel.adj.kernel_dim``, ``kernel.adj.source`` (the function's Python source) and
``kernel.adj.get_references()`` (what the body references outside itself).

Warp's kernels carry their whole code generator state as ``kernel.adj``; tapegrad's compile
through ``lang.lower`` and keep no such object, so ``Kernel.adj`` gives only this read-only
summary, which is what code outside Warp's code generator reads of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

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
            unpacks ``tid()`` into (at least 1, as Warp's). source: the function's Python source
            (dedented), as captured when it was decorated.
    """

    args: tuple
    kernel_dim: int
    source: str = ""
    references: Callable = field(default=None, repr=False, compare=False)

    def get_references(self) -> tuple:
        """What the body references outside itself, looked up now (Warp's
        ``adj.get_references()``): ``(constants, types, functions)``, dicts of dotted name ->
        number or vector/matrix value, type -> dotted name, ``@func`` -> dotted name
        (``depends.references``).

        Raises:
            KernelError: the kernel does not lower.
        """
        return self.references()
