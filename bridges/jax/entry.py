"""Compiled entry points for the FFI handler, and the registry of live plans.

A plan needs the kernel's CPU entry point or, per CUDA device, its ``CUfunction`` with the
device's grid cap and the entry's lanes (the kernel ABI's grid, ``tapegrad.abi.grid_blocks``).
They come from the kernel's loaded module (``Kernel.module_for``: the same build, cache and
loaded module as a ``tg.launch``) and are filled in at trace time for the devices the module
preload mode names; a plan run on another device asks ``load`` (through a ctypes callback,
once per plan and device) — the only time an execution reaches Python.

Exported programs (``jax.export``): each call also carries the plan's stable key
(``plan_key``: the kernel's stable name and the plan's static facts as text). A program run
in another process is resolved by that key (``resolve_key``, called by the handler once per
key): the kernel this process defined under that name (``define_kernel``, when
``tg.jax_kernel`` builds it) gets an equal plan, or the handler returns an error naming the
kernel and what to import.
"""
from __future__ import annotations

import ctypes
import json
import math
import threading
from enum import IntEnum

import numpy as np

from tapegrad import abi, types
from tapegrad.device import get_device
from tapegrad.modules import no_adjoint

from ..export_names import advice, describe, stable_name
from . import plan as ffi_plan
from .ffi import process_id, set_key_resolver

__all__ = ["ModulePreloadMode", "register", "preload", "entries", "tangent_entry", "define_kernel",
           "plan_key", "resolve_key", "with_identity"]

_KEY_FORMAT = "tapegrad-plan 1"


class ModulePreloadMode(IntEnum):
    """When kernels are compiled and loaded for a ``jax_kernel`` call (Warp's names).

    NONE: on the first execution on each device. CURRENT_DEVICE (default): at trace time,
    for JAX's default device. ALL_DEVICES: at trace time, for every local JAX device.
    """

    NONE = 0
    CURRENT_DEVICE = 1
    ALL_DEVICES = 2


_lock = threading.RLock()
_plans: dict = {}            # plan address -> Plan (plans live as long as the process)


def entries(kernel, device, wide: bool = False) -> tuple:
    """``(forward, backward, threads cap, lanes)`` of the kernel's loaded module on ``device``
    (``modules.FastEntry``: CPU function addresses or CUfunction handles; backward None for
    ``enable_backward=False``; the cap and lanes are 0 and 1 on the CPU). ``wide``: the build
    with a 64-bit ``tid()``, which launches of more than 2^31 - 1 threads need (as ``tg.launch``)."""
    e = kernel.module_for(device, wide=wide).fast_entry()
    return e.forward, e.backward, e.threads_cap, e.lanes


def tangent_entry(kernel, device, tangent: int):
    """``(entry, threads cap)`` of the kernel's tangent (``tangent`` 1) or tangent-of-adjoint
    (2) build on ``device``: a CPU function address or a CUfunction (``launch.tangent``)."""
    from tapegrad.launch.tangent import tangent_module
    m = tangent_module(kernel, device, tangent == 2)
    fn = m.tangent_adjoint if tangent == 2 else m.tangent
    if not m.cuda:
        return ctypes.cast(fn, ctypes.c_void_p).value, 0
    return fn, m.threads_cap


def _fill(plan, platform: int, ordinal: int) -> None:
    spec, c = plan.spec, plan.c
    if platform != 0 and not 0 <= ordinal < ffi_plan.MAX_DEVICES:
        raise RuntimeError(f"CUDA device ordinal {ordinal} is beyond tapegrad's FFI limit ({ffi_plan.MAX_DEVICES})")
    device = get_device("cpu" if platform == 0 else f"cuda:{ordinal}")
    lanes = 1
    error = None    # CPU: the library's error code (modules.ErrorSlot), read after each launch
    if spec.tangent:
        fn, cap = tangent_entry(spec.kernel, device, spec.tangent)
        if platform == 0:
            from tapegrad.launch.tangent import tangent_module
            error = tangent_module(spec.kernel, device, spec.tangent == 2).errors.address
    else:
        fwd, bwd, cap, fwd_lanes = entries(spec.kernel, device, math.prod(spec.launch) > abi.MAX_NARROW_THREADS)
        fn = bwd if spec.adjoint else fwd
        if fn is None:
            # (an adjoint the kernel refuses, arrays built from addresses, says so: not "built with ...")
            raise RuntimeError(no_adjoint(spec.kernel) or
                               f"kernel '{spec.kernel.key}' was built with enable_backward=False")
        lanes = 1 if spec.adjoint else fwd_lanes    # adjoint entries loop over single threads
        if platform == 0:
            wide = math.prod(spec.launch) > abi.MAX_NARROW_THREADS
            error = spec.kernel.module_for(device, wide=wide).errors.address
    if platform == 0:
        c.cpu_error = error    # (before the entry: a handler that sees the entry sees it)
        c.cpu_entry = fn
    else:
        c.cuda_threads_cap[ordinal] = cap
        c.cuda_lanes[ordinal] = lanes
        c.cuda_fn[ordinal] = fn


def _load(plan_ptr, platform, ordinal, msg, msglen):
    """The C handler's callback for an entry point missing at execution (first run only)."""
    try:
        plan = _plans[ctypes.addressof(plan_ptr.contents)]
        with plan.lock:
            _fill(plan, platform, ordinal)
        return 0
    except BaseException as e:  # never let an exception cross into XLA
        text = f"tapegrad jax_kernel: loading the kernel failed: {type(e).__name__}: {e}".encode()[:max(0, msglen - 1)]
        ctypes.memmove(msg, text + b"\0", len(text) + 1)
        return 1


_LOADER = ffi_plan.LOADER(_load)


def register(spec: ffi_plan.PlanSpec) -> ffi_plan.Plan:
    """The plan for ``spec`` (built once; equal specs share it). Its ``key`` attribute is
    ``plan_key(spec)``."""
    with _lock:
        plan = _by_spec.get(spec)
        if plan is None:
            plan = ffi_plan.Plan(spec, _LOADER)
            plan.key = plan_key(spec)
            _plans[plan.address] = plan
            _by_spec[spec] = plan
    return plan


_by_spec: dict = {}

# ------------------------------------------------------------------ stable keys (jax.export)

_names: dict = {}            # kernel -> its stable name
_kernels: dict = {}          # stable name -> kernel defined in this process


def kernel_name(kernel) -> str:
    """The kernel's stable name (``export_names.stable_name``), computed once."""
    name = _names.get(kernel)
    if name is None:
        name = _names[kernel] = stable_name(kernel)
    return name


def define_kernel(kernel) -> None:
    """Make ``kernel`` the one an exported program naming its stable name runs in this process
    (``jax_kernel`` calls it when it builds the kernel's wrapper)."""
    with _lock:
        _kernels.setdefault(kernel_name(kernel), kernel)


def plan_key(spec: ffi_plan.PlanSpec) -> str:
    """The stable text of ``spec``: the kernel's stable name and every static fact of the call
    (slots, values, grid, block size), the same in every process."""
    define_kernel(spec.kernel)
    slots = [[s.kind, s.name, s.arg, s.ret, list(s.dims), s.value.hex(), s.xla,
              None if s.dtype is None else repr(s.dtype)] for s in spec.slots]
    body = {"slots": slots, "nargs": spec.nargs, "nrets": spec.nrets, "launch": list(spec.launch),
            "adjoint": bool(spec.adjoint), "block_dim": spec.block_dim}
    if spec.tangent:     # absent for the forward and adjoint entries: their keys are unchanged
        body["tangent"] = int(spec.tangent)
    return f"{_KEY_FORMAT};{kernel_name(spec.kernel)};{json.dumps(body, separators=(',', ':'))}"


def _spec_of_key(key: str) -> ffi_plan.PlanSpec:
    """The ``PlanSpec`` a key describes, over the kernel this process defined under its name.

    Raises:
        LookupError: no kernel of that name here (the message says what to import).
        ValueError: a key of another format, or one that does not fit the kernel.
    """
    fmt, name, body = key.split(";", 2)
    if fmt != _KEY_FORMAT:
        raise ValueError(f"tapegrad: the call's key has format '{fmt}', this tapegrad reads '{_KEY_FORMAT}' "
                         "(export the program again with this version)")
    kernel = _kernels.get(name)
    if kernel is None:
        d = describe(name)
        what = f"kernel '{d[0]}.{d[1]}'" if d else f"the kernel named '{name}'"
        raise LookupError(f"tapegrad: the program calls {what} (tapegrad name {name}), which this process has not "
                          f"defined: {advice(name, 'tg.jax_kernel')}")
    b = json.loads(body)
    names, ptypes = kernel.arg_names, kernel.arg_types
    slots = []
    tangent = int(b.get("tangent", 0))
    for i, (kind, sname, arg, ret, dims, value, xla, dtype) in enumerate(b["slots"]):
        if tangent and sname == "tg_mode" and i == len(b["slots"]) - 1:   # the tangent entries' mode value
            slots.append(ffi_plan.Slot(int(kind), sname, int(arg), int(ret), None, (), bytes.fromhex(value), int(xla)))
            continue
        t = ptypes[i % len(ptypes)]
        dt = None if dtype is None else (t.dtype if isinstance(t, types.ArrayType) else t)
        base = sname
        for prefix in ("tanadj_", "adj_", "tan_"):
            base = base.removeprefix(prefix)
        if (None if dt is None else repr(dt)) != dtype or base != names[i % len(names)]:
            raise ValueError(f"tapegrad: the call's slot {i} ({sname}: {dtype}) does not fit kernel "
                             f"'{kernel.key}' as defined in this process")
        slots.append(ffi_plan.Slot(int(kind), sname, int(arg), int(ret), dt, tuple(dims), bytes.fromhex(value),
                                   int(xla)))
    return ffi_plan.PlanSpec(kernel, tuple(slots), int(b["nargs"]), int(b["nrets"]), tuple(b["launch"]),
                             bool(b["adjoint"]), int(b["block_dim"]), tangent)


def resolve_key(key_ptr, length, msg, msglen):
    """The C handler's callback for a call traced in another process: the address of this
    process's plan for the key, or 0 with the reason written to ``msg``."""
    try:
        key = ctypes.string_at(key_ptr, length).decode()
        return register(_spec_of_key(key)).address
    except BaseException as e:  # never let an exception cross into XLA
        text = str(e) if isinstance(e, (LookupError, ValueError)) and str(e).startswith("tapegrad") else \
            f"tapegrad jax_kernel: cannot run a call traced in another process: {type(e).__name__}: {e}"
        text = text.encode()[:max(0, msglen - 1)]
        ctypes.memmove(msg, text + b"\0", len(text) + 1)
        return 0


set_key_resolver(resolve_key)


def with_identity(call, plan: ffi_plan.Plan):
    """``call`` (a ``jax.ffi.ffi_call`` result) with this process's id and ``plan``'s stable
    key added to its attributes, so the handler can tell a call traced elsewhere."""
    extra = {"tapegrad_process": np.int64(process_id()), "tapegrad_key": plan.key}

    def bound(*operands, **attrs):
        return call(*operands, **attrs, **extra)
    return bound


def preload(plan: ffi_plan.Plan, mode: ModulePreloadMode) -> None:
    """Compile/load ``plan``'s kernel at trace time for the devices ``mode`` names.

    Compile errors propagate (a clear Python exception at trace time); devices tapegrad
    cannot use are skipped (the first execution there reports it).
    """
    if mode == ModulePreloadMode.NONE:
        return
    import jax
    if mode == ModulePreloadMode.ALL_DEVICES:
        devices = jax.local_devices()
    else:
        d = jax.config.jax_default_device
        devices = [d if d is not None and not isinstance(d, str) else jax.local_devices()[0]]
    for d in devices:
        platform = 0 if d.platform == "cpu" else (1 if d.platform in ("gpu", "cuda") else None)
        if platform is None:
            continue
        ordinal = getattr(d, "local_hardware_id", None) if platform else 0
        ordinal = d.id if ordinal is None else ordinal
        c = plan.c
        if (platform == 0 and c.cpu_entry) or (platform == 1 and ordinal < ffi_plan.MAX_DEVICES and c.cuda_fn[ordinal]):
            continue
        with plan.lock:
            _fill(plan, platform, ordinal)
