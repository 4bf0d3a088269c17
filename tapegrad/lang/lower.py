"""Lowering: a Python function to checked, planned IR, as a list of named passes.

Kernels, ``@func`` specializations and ``@func_grad`` bodies all go through ``lower()``::

    PASSES = (
        build          Python AST -> typed IR (frontend.Builder)
        plan_loops     reverse mode of each dynamic loop; loop-invariant reads hoisted (adjoint.plan)
        param_access   which array parameters the forward reads / writes
    )

A pass maps ``(ir, target) -> ir`` (``build`` starts from None) and runs when its ``applies``
predicate accepts the target. With IR checks on (``TAPEGRAD_CHECK_IR=1`` in the environment
at import, as the test suite sets it, or ``set_ir_checks(True)``), ``check.check_ir`` verifies
the IR's invariants after every pass and names the pass that broke them; production compiles
skip it. ``emit.kernel_parts`` then renders the lowered IR as C++.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .adjoint import plan
from .check import check_ir
from .frontend import Builder
from .ir import Assign, FunctionIR, Var, c_identifier, walk
from .typeutil import is_array


@dataclass(frozen=True)
class Target:
    """What to lower.

    Attributes:
        pyfunc: the Python function.
        kind: "kernel", "func" (a ``@func`` specialization) or "grad" (a ``@func_grad`` body).
        name: the IR's name, the stem of its C++ symbols.
        param_types: the parameter types (generic parameters already specialized).
        ret_type: the declared return type (None: inferred, or none).
        label: the name messages use (the kernel's key, the function's Python name).
        backward: plan the reverse mode (a kernel's ``enable_backward``).
        wide: the kernel's wide variant (int64 ``tid()``, for launches past 2^31 - 1 threads).
    """

    pyfunc: Callable
    kind: str
    name: str
    param_types: tuple
    ret_type: Any = None
    label: str = ""
    backward: bool = True
    wide: bool = False


@dataclass(frozen=True)
class Pass:
    """One lowering step: ``run(ir, target) -> ir`` when ``applies(target)``."""

    name: str
    run: Callable[[Optional[FunctionIR], Target], FunctionIR]
    applies: Callable[[Target], bool]
    doc: str


def build(ir, target: Target) -> FunctionIR:
    """Parse and type the function: names resolved, literals typed, break/continue/return
    lowered to flags and guards, small constant ``range`` loops unrolled."""
    return Builder(target.pyfunc, target.kind, target.name, list(target.param_types),
                   ret_type=target.ret_type, label=target.label, wide=target.wide).build()


def plan_loops(ir: FunctionIR, target: Target) -> FunctionIR:
    """Choose how the adjoint reverses each dynamic loop (``storefree`` or ``prefix``, warning
    about the latter) and hoist loop-invariant reads; declares the helper variables it needs."""
    def new_var(t, kind, label):
        v = Var(f"{'s_' if kind == 'snap' else 't'}{c_identifier(label)}_{len(ir.vars)}_x", t,
                "temp" if kind == "temp" else kind, label)
        ir.vars.append(v)
        return v
    plan(ir, new_var, target.label or target.name)
    return ir


def param_access(ir: FunctionIR, target: Target) -> FunctionIR:
    """Record per parameter ``(reads, writes)``: whether the forward loads from / stores into
    (or atomically updates) that array, through the function's own ops and its callees'."""
    access = {id(p): [False, False] for p in ir.params}
    root = {}                       # id(view temp) -> id of the parameter whose memory it views
    for s in walk(ir.body):
        if isinstance(s, Assign) and s.op.view is not None and s.out is not None:
            base = id(s.args[0])
            root[id(s.out)] = root.get(base, base)
    for s in walk(ir.body):
        if not isinstance(s, Assign):
            continue
        for pos in s.op.reads:
            a = root.get(id(s.args[pos]), id(s.args[pos]))
            if a in access:
                access[a][0] = True
        for pos in s.op.writes:
            a = root.get(id(s.args[pos]), id(s.args[pos]))
            if a in access:
                access[a][1] = True
        callee = s.op.callee
        if callee is not None:
            for i, arg in enumerate(s.args):
                a = root.get(id(arg), id(arg))
                if a in access and i < len(callee.param_access):
                    r, w = callee.param_access[i]
                    access[a][0] |= r
                    access[a][1] |= w
    ir.param_access = [tuple(access[id(p)]) if is_array(p.type) else (False, False) for p in ir.params]
    return ir


PASSES = (
    Pass("build", build, lambda t: True, "Python AST -> typed IR"),
    Pass("plan_loops", plan_loops, lambda t: t.backward and t.kind != "grad",
         "reverse mode of each dynamic loop; loop-invariant reads hoisted"),
    Pass("param_access", param_access, lambda t: t.kind != "grad", "array parameters read / written"),
)

_checks = os.environ.get("TAPEGRAD_CHECK_IR", "") not in ("", "0")


def set_ir_checks(on: bool) -> bool:
    """Turn the IR check between passes on or off; returns the previous setting."""
    global _checks
    previous, _checks = _checks, bool(on)
    return previous


def ir_checks() -> bool:
    """Whether ``lower`` checks the IR after every pass."""
    return _checks


def lower(target: Target) -> FunctionIR:
    """Run the passes that apply to ``target`` in order.

    Returns:
        The ``FunctionIR``, ready for ``emit``.
    Raises:
        KernelError: the function does not type-check (from ``build``).
        IRCheckError: with IR checks on, a pass produced IR that breaks an invariant.
    """
    ir, done = None, ()
    for p in PASSES:
        if p.applies(target):
            ir = p.run(ir, target)
            done += (p.name,)
            if _checks:
                check_ir(ir, p.name, done)
    return ir
