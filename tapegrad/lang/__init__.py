"""The tapegrad kernel language: ``@kernel``, ``@func``, ``@func_grad`` and the builtins.

``from tapegrad.lang import *`` exports the decorators, ``constant``, ``adjoint`` and every
builtin callable by its Warp name (``tid``, ``sin``, ``dot``, ``atomic_add``...).

Modules, bottom up: ``ir`` (the typed IR), ``typeutil``, ``builtins`` (the builtin table and its
C++ renderers; ``builtins_atomic``, ``builtins_math``, ``builtins_random`` and ``structs``
register more builtins into it), ``values``, ``expressions`` + ``frontend`` (AST -> IR),
``adjoint`` (reverse-mode planning), ``check`` (the IR check), ``lower`` (the pass pipeline),
``emit`` (IR -> C++), ``signature``, ``funcs`` (``@func``), ``generic`` (types of generic
kernel arguments), ``kernel`` (``@kernel``, ``overload``, loading).
"""
from __future__ import annotations

from ..errors import KernelError, TapeCompileWarning
from . import builtins as builtin_table

# these register builtins into the table
from . import (  # noqa: F401
    builtins_atomic,
    builtins_linalg,
    builtins_math,
    builtins_random,
    builtins_warp,
    slices,
    spatial,
    structs,
)
from .builtins_warp import cast
from .funcs import Func, GradOf, NativeFunc, func, func_grad, func_native, func_replay, grad
from .kernel import Kernel, kernel, overload
from .values import adjoint, constant, static

_exported = builtin_table.exported()
globals().update(_exported)

__all__ = ["kernel", "func", "func_grad", "Kernel", "Func", "KernelError", "TapeCompileWarning", "constant",
           "adjoint", "overload", "grad", "GradOf", "cast", "func_replay", "static", "func_native", "NativeFunc"] + \
    sorted(_exported)
