"""The tapegrad kernel language: ``@kernel``, ``@func``, ``@func_grad`` and the builtins.

``from tapegrad.lang import *`` exports the decorators, ``constant``, ``adjoint`` and every
builtin callable by its Warp name (``tid``, ``sin``, ``dot``, ``atomic_add``...).
"""
from __future__ import annotations

from . import builtins as _builtins
from .adjoint import TapeCompileWarning
from .values import KernelError, adjoint, constant
from .kernel import Func, Kernel, func, func_grad, kernel

_exported = _builtins.exported()
globals().update(_exported)

__all__ = ["kernel", "func", "func_grad", "Kernel", "Func", "KernelError", "TapeCompileWarning", "constant",
           "adjoint"] + sorted(_exported)
