"""Debug mode for ``jax_kernel``: its launches run through ``tg.launch``'s checked path.

The XLA handler calls a kernel's compiled entry point directly, with no Python after the
launch to read a debug build's error slot (``tapegrad.lang.debug``): in debug mode
(``tg.config.mode = "debug"`` or the kernel module's ``"mode"`` option) a ``jax_kernel`` call,
forward or adjoint, eager or under ``jax.jit``/``vmap``, becomes a ``jax.pure_callback`` that
copies the operands to the host, launches the kernel's CPU debug build with ``tg.launch``
over them and returns the results. An out-of-range access raises ``KernelIndexError`` from
that launch (JAX re-raises it, as an ``XlaRuntimeError`` naming it, where the call executes),
and the slot is cleared, so no later launch reports it. Batched (vmapped) calls run one launch
per batch element, as the handler does. Slow by design: debug mode is for finding the bug.

Kernels with a struct value parameter keep the handler's (unchecked) path.
"""
from __future__ import annotations

import jax
import numpy as np

from tapegrad import types
from tapegrad.array import array as tg_array
from tapegrad.device import get_device
from tapegrad.launch import launch

from . import plan as ffi_plan

__all__ = ["debug_call"]


def _value(slot, t):
    """A VALUE slot's Python value (its packed bytes read back with the parameter's type ``t``)."""
    if isinstance(t, types.ScalarType):
        return np.frombuffer(slot.value, dtype=t.np_dtype, count=1)[0].item()
    return np.frombuffer(slot.value, dtype=t.scalar.np_dtype, count=t.length)


def _run(kernel, slots, results, grid, adjoint, bufs):
    cpu = get_device("cpu")
    outs = [np.zeros(shape, dtype=dt) for shape, dt in results]
    written = {}
    vals = []
    ts = kernel.arg_types
    for j, s in enumerate(slots):
        if s.kind in (ffi_plan.IN, ffi_plan.INOUT):
            a = tg_array(np.ascontiguousarray(bufs[s.arg]), dtype=s.dtype, device=cpu, copy=True)
            if s.kind == ffi_plan.INOUT:
                written[s.ret] = a
        elif s.kind == ffi_plan.OUT:
            a = tg_array(outs[s.ret], dtype=s.dtype, device=cpu, copy=True)
            written[s.ret] = a
        elif s.kind == ffi_plan.VALUE:
            a = _value(s, ts[j % len(ts)])
        else:              # NULL_ARRAY / NULL_VALUE: no adjoint (launch's None)
            a = None
        vals.append(a)
    n = len(kernel.arg_types)
    if adjoint:
        launch(kernel, grid, inputs=vals[:n], device=cpu, adjoint=True, adj_inputs=vals[n:], adj_outputs=[],
               record_tape=False)
    else:
        launch(kernel, grid, inputs=vals, device=cpu, record_tape=False)
    for j, a in written.items():
        outs[j] = np.asarray(a.numpy()).reshape(outs[j].shape).astype(outs[j].dtype, copy=True)
    return outs


def debug_call(kernel, slots, results, grid, adjoint):
    """A callable standing in for the FFI call of ``slots`` in debug mode (it takes and ignores
    the ``tapegrad_plan`` keyword), or None for a kernel whose values it cannot rebuild (a struct).

    Args:
        kernel: the ``Kernel``. slots: the call's ``plan.Slot``s (the kernel's parameters, then
            for an adjoint call their adjoints). results: ``(shape, dtype)`` per result.
        grid: the launch grid. adjoint: whether the call launches the adjoint.
    """
    ts = kernel.arg_types      # the slots follow the parameters (then, adjoint, their adjoints)
    if any(s.kind == ffi_plan.VALUE and not isinstance(ts[j % len(ts)], (types.ScalarType, types.VectorType,
                                                                         types.MatrixType))
           for j, s in enumerate(slots)):
        return None
    shapes = [jax.ShapeDtypeStruct(tuple(s), d) for s, d in results]
    res = [(tuple(s), np.dtype(d)) for s, d in results]

    def host(*bufs):
        return _run(kernel, slots, res, grid, adjoint, bufs)

    def call(*operands, tapegrad_plan=None):
        return list(jax.pure_callback(host, shapes, *operands, vmap_method="sequential"))

    return call
