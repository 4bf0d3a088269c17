"""Forward-mode launches: ``launch(kernel, ..., tangent=True)`` and the tangent of the adjoint.

A kernel's tangent code (``lang/tangent.py``) is built on first use, in its own translation
unit (``<symbol>_tan``: tangent only; ``<symbol>_tan2``: tangent and tangent-of-adjoint, built
when second order is first asked for), cached on disk like every build; kernels never launched
in forward mode build nothing more. These launches take the Python path only.

Launch forms (``launch``'s keyword arguments; one entry per kernel argument, inputs then outputs):

* ``tangent=True, tan_inputs=[...], tan_outputs=[...]``: runs the forward and writes the outputs
  and their tangents. A tangent is an array of the argument's dtype, shape and device (None:
  zero in, and for a written array, tangent not written) or, for a float scalar / vector /
  matrix argument, a value (None: 0); for a struct argument, a struct of the same type whose
  fields are the tangents (array fields: the tangent arrays; None: zero). Ints take None.
* ``adjoint=True, tangent=True`` with ``adj_inputs/adj_outputs`` (None entries: the array's
  ``.grad``, as ``launch(adjoint=True)``), ``tan_inputs/tan_outputs`` (the tangents of the
  arguments) and ``tan_adj_inputs/tan_adj_outputs`` (the tangents of the adjoints: read where
  the adjoint reads the adjoint arrays, accumulated where it accumulates; None: zero, dropped):
  the tangent of the adjoint, i.e. with ``tan_*`` = v and the adjoint seeded, Hessian-vector
  products. Adjoints of non-array arguments are not returned by this form.
"""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

from .. import abi, build, types
from ..array import array
from ..errors import KernelError, KernelRuntimeError
from ..lang import direct, emit
from ..lang import tangent as lang_tangent
from ..modules import ErrorSlot, slice_lines
from .core import adjoint_descriptors, prepare_launch, register_tangent_launcher
from .packers import exact_adjoint_buffers, finish_adjoint_buffers, zero_value

__all__ = ["TangentModule", "tangent_module", "load_tangents", "launch_tangent", "MODE_WRITE_PRIMAL", "MODE_GRADS"]

MODE_WRITE_PRIMAL = 1   # stores and atomics write the primal values too
MODE_GRADS = 4          # tangent-of-adjoint: the adjoint arrays stand for the arrays' .grad

_MODULES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # kernel -> {key: TangentModule}


@dataclass(frozen=True)
class TangentModule:
    """The loaded tangent build of one kernel on one device.

    Attributes:
        kernel_key: the kernel's key (messages). cuda: whether the entries are CUDA functions.
        tangent, tangent_adjoint: the CPU entry points (ctypes functions) or CUfunction
            handles; ``tangent_adjoint`` None in a tangent-only build.
        ordinal: the CUDA device ordinal (-1 on the CPU). threads_cap: CUDA grid cap in threads.
        owner: the loaded library or CUDA module the entries point into (kept alive with them).
        errors: CPU: the library's ``modules.ErrorSlot`` (checked after each launch); None on CUDA.
    """

    kernel_key: str
    cuda: bool
    tangent: object
    tangent_adjoint: object
    ordinal: int = -1
    threads_cap: int = 0
    owner: object = None
    errors: object = None

    def launch(self, bounds, values, second_order, stream=0, block_dim=256, max_blocks=0) -> None:
        """Run an entry over ``bounds`` with the packed ``values`` (ctypes objects, mode last)."""
        f = self.tangent_adjoint if second_order else self.tangent
        if bounds.size <= 0:
            return
        if not self.cuda:
            argv = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
            f(ctypes.byref(bounds), argv)
            if self.errors.flag[0]:   # a zero slice step (the launch ran to its end)
                self.errors.check("tangent of the adjoint" if second_order else "tangent")
            return
        from cupy.cuda import driver, runtime
        params = (ctypes.c_void_p * (len(values) + 1))(ctypes.addressof(bounds),
                                                       *[ctypes.addressof(v) for v in values])
        block_dim = int(block_dim) or abi.DEFAULT_BLOCK_DIM
        blocks = abi.grid_blocks(bounds.size, block_dim, 1, int(max_blocks or 0), self.threads_cap)
        prev = runtime.getDevice()
        if prev != self.ordinal:
            runtime.setDevice(self.ordinal)
        try:
            driver.launchKernel(f, blocks, 1, 1, block_dim, 1, 1, 0, int(stream or 0),
                                ctypes.addressof(params), 0)
        finally:
            if prev != self.ordinal:
                runtime.setDevice(prev)


def tangent_module(kernel, device, second_order=False) -> TangentModule:
    """The kernel's tangent build for ``device`` (``second_order``: with the tangent-of-adjoint
    entry), generated, compiled (or loaded from the cache) and memoized on first use.

    Raises:
        KernelError: a construct without a forward-mode rule (named, with its line).
        tapegrad.CompileError: the compiler failed.
    """
    mods = _MODULES.get(kernel)
    if mods is None:
        mods = _MODULES.setdefault(kernel, {})
    alias = _memo_alias(kernel, device)
    m = mods.get((alias, second_order)) or (mods.get((alias, True)) if not second_order else None)
    if m is not None:
        return m
    with kernel.build_lock:
        m = mods.get((alias, second_order))
        if m is not None:
            return m
        if second_order and not kernel.enable_backward:
            raise RuntimeError(f"launch(adjoint=True, tangent=True): kernel '{kernel.key}' was built with "
                               "enable_backward=False")
        refusal = kernel.adjoint_refusal()
        if refusal is not None:     # the tangent would miss memory it reaches by address, as the adjoint
            raise RuntimeError(f"launch(tangent=True): {refusal}")
        m = _load_direct(kernel, device, second_order)
        if m is None:
            m = load_tangents([kernel], device, second_order)[0]
    return m


def _entries(kernels, device, second_order, owner, lines=None) -> list:
    """The ``TangentModule`` of each kernel in the loaded library / CUDA module ``owner``
    (``lines``: ``modules.slice_lines`` of its CPU unit, None when not at hand: a zero slice
    step's error then names no line)."""
    out = []
    if getattr(device, "is_cuda", False):
        from cupy.cuda import driver
        sms = device.sm_count
        for k in kernels:
            with device.context_guard():
                fwd = driver.moduleGetFunction(owner, abi.entry_name(k.symbol, "cuda", "tangent"))
                adj = (driver.moduleGetFunction(owner, abi.entry_name(k.symbol, "cuda", "tangent_adjoint"))
                       if second_order else None)
            out.append(TangentModule(k.key, True, fwd, adj, device.ordinal, abi.threads_cap(sms), owner))
    else:
        for k in kernels:
            fwd = getattr(owner, abi.entry_name(k.symbol, "cpu", "tangent"))
            fwd.restype = None
            adj = None
            if second_order:
                adj = getattr(owner, abi.entry_name(k.symbol, "cpu", "tangent_adjoint"))
                adj.restype = None
            errors = ErrorSlot(owner, k.key, None if lines is None else (lambda: lines))
            out.append(TangentModule(k.key, False, fwd, adj, owner=owner, errors=errors))
    return out


def _unit_name(kernels, second_order) -> str:
    first = kernels[0].symbol if len(kernels) == 1 else f"tgm_{len(kernels)}_{kernels[0].symbol}"
    return (first + ("_tan2" if second_order else "_tan"))[:90]


def _load_direct(kernel, device, second_order):
    """The tangent build from the cache without lowering the kernel (the direct cache:
    ``lang/direct.py``), or None (not lowered yet is the only case it helps)."""
    if kernel.is_lowered or kernel.mode() == "debug" or kernel.deterministic():
        return None
    variant = "tan2" if second_order else "tan"
    digest = direct.lookup_variant(kernel, variant)
    if digest is None:
        return None
    name = _unit_name([kernel], second_order)
    if getattr(device, "is_cuda", False):
        image = build.find_cuda(digest, name, int(device.arch))
        if image is None:
            return None
        owner = build.load_cuda_image(image, device)
    else:
        owner = build.find_cpu(digest, name)
        if owner is None:
            return None
    m = _entries([kernel], device, second_order, owner)[0]
    _remember(kernel, device, second_order, m)
    return m


def _memo_alias(kernel, device):
    """The memo key of a kernel's tangent build on ``device``: the device, and the module's
    build inputs when it has any (changed ``extra_build_options``: another build)."""
    alias = getattr(device, "alias", None) or str(device)
    digest = kernel.build_inputs().digest
    if kernel.deterministic():   # the serial build (DeterministicMode.RUN_TO_RUN): another unit
        alias += "#serial"
    return f"{alias}#{digest}" if digest else alias


def _remember(kernel, device, second_order, m):
    mods = _MODULES.get(kernel)
    if mods is None:
        mods = _MODULES.setdefault(kernel, {})
    mods[(_memo_alias(kernel, device), second_order)] = m


def load_tangents(kernels, device, second_order=False) -> list:
    """Build the tangent code of ``kernels`` together, in one translation unit (one compile),
    and memoize each kernel's ``TangentModule`` for ``device`` (``tangent_module`` then finds
    it); as ``load_kernels`` for the default builds.

    Raises:
        KernelError: a construct without a forward-mode rule. tapegrad.CompileError.
    """
    kernels = list(kernels)
    seen: set = set()
    parts = []
    serial = {k.deterministic() for k in kernels}
    if len(serial) > 1:
        raise ValueError(f"load_tangents: kernels '{kernels[0].key}' and others differ in their 'deterministic' "
                         f"option and cannot share a translation unit")
    serial = serial.pop()
    if serial and getattr(device, "is_cuda", False):
        raise RuntimeError(f"launch(tangent=True): kernel '{kernels[0].key}': deterministic=DeterministicMode."
                           f"RUN_TO_RUN is honoured on the CPU only; tapegrad has no ordered-reduction build for CUDA")
    for k in kernels:
        parts += lang_tangent.tangent_parts(k.ir, k.symbol, k.key, second_order, seen, serial)
    inputs = kernels[0].build_inputs()   # one unit: one set of extra_build_options
    source = emit.module_source(parts, inputs.unit_text())
    name = _unit_name(kernels, second_order)
    if getattr(device, "is_cuda", False):
        owner = build.load_cuda(source, name, device, kernels, include_dirs=inputs.cuda_include_dirs)
    else:
        owner = build.load_cpu(source, name, kernels, include_dirs=inputs.cpu_include_dirs)
    out = _entries(kernels, device, second_order, owner, None if getattr(device, "is_cuda", False)
                   else slice_lines(source))
    for k, m in zip(kernels, out):
        _remember(k, device, second_order, m)
    if len(kernels) == 1 and not serial:   # (the direct cache knows the default builds only)
        direct.store_variant(kernels[0], "tan2" if second_order else "tan", build.source_digest(source))
    return out


def _label(kernel, i, what, k):
    return f"launch(tangent=True): {what}[{k}] (for argument {i}, '{kernel.arg_names[i]}')"


def _tangent_values(prep, args, tans, what, n_in, null_for_ints=True):
    """Pack ``tans`` (one per argument, None: zero) like the arguments, checking each against
    its argument: dtype, ndim, shape and device; ``what``: the keyword names for messages."""
    kernel, dev = prep.kernel, prep.device
    out = []
    for i, (t, pack, a) in enumerate(zip(kernel.arg_types, prep.packers, args)):
        v = tans[i]
        k = i if i < n_in else i - n_in
        w = what[0] if i < n_in else what[1]
        if isinstance(t, types.ArrayType):
            if v is None:
                out.append(types.ArrayDesc())
                continue
            if not _float_dtype(t.dtype):
                raise TypeError(f"{_label(kernel, i, w, k)}: an array of {t.dtype!r} has no tangent; pass None")
            try:
                d = pack(v, dev)
            except (TypeError, ValueError, RuntimeError) as e:
                raise type(e)(f"{_label(kernel, i, w, k)}: {e}") from None
            prim = prep.values[i]
            shape = tuple(prim.shape[:t.ndim])
            got = tuple(d.shape[:t.ndim])
            if got != shape:
                raise ValueError(f"{_label(kernel, i, w, k)}: shape {got} does not match the argument's {shape}")
            out.append(d)
        elif isinstance(t, types.StructType):
            # a struct of the same type: its float fields' tangents, its arrays' tangent arrays
            # (None fields: zero, not written)
            try:
                # (unchecked: a None array field is a zero tangent, not a null dereference)
                out.append(getattr(pack, "unchecked", pack)(t.cls() if v is None else v, dev))
            except (TypeError, ValueError, RuntimeError) as e:
                raise type(e)(f"{_label(kernel, i, w, k)}: {e}") from None
        elif not _float_dtype(t):
            if v is not None:
                raise TypeError(f"{_label(kernel, i, w, k)}: a {t!r} argument has no tangent; pass None")
            out.append(prep.values[i])
        else:
            try:
                out.append(pack(zero_value(t) if v is None else v, dev))
            except (TypeError, ValueError) as e:
                raise TypeError(f"{_label(kernel, i, w, k)}: {e}") from None
    return out


def _float_dtype(t) -> bool:
    s = getattr(t, "scalar", t)
    return isinstance(s, types.ScalarType) and s.kind == "float"


def _split(given, n_in, n_out, names):
    ins, outs = given
    ins = [None] * n_in if ins is None else list(ins)
    outs = [None] * n_out if outs is None else list(outs)
    if len(ins) != n_in or len(outs) != n_out:
        raise TypeError(f"launch(tangent=True): {names[0]}/{names[1]} must have {n_in}/{n_out} entries "
                        f"(one per input/output), got {len(ins)}/{len(outs)}")
    return ins + outs


def launch_tangent(kernel, dim, inputs, outputs, device=None, stream=None, adjoint=False, adj_inputs=None,
                   adj_outputs=None, tan_inputs=None, tan_outputs=None, tan_adj_inputs=None, tan_adj_outputs=None,
                   block_dim=256, max_blocks=0, mode=None) -> None:
    """``launch(..., tangent=True)`` (see the module docstring for the forms).

    Args:
        mode: the entry's mode bits (None: write the primal outputs; ``tapegrad.tape_forward``
            passes 0 to write tangents only, ``MODE_GRADS`` for the tangent of the adjoint).
    Raises:
        TypeError, ValueError: a tangent of the wrong type, dtype, shape or device (naming it),
            wrong entry counts. KernelError: a construct without a forward-mode rule.
    """
    inputs, outputs = list(inputs), list(outputs)
    prep = prepare_launch(kernel, dim, inputs, outputs, device, stream)
    kernel = prep.kernel
    if prep.bounds.size > abi.MAX_NARROW_THREADS:
        raise KernelError(f"launch(tangent=True): kernel '{kernel.key}': forward mode runs launches of at most "
                          f"2^31 - 1 threads, got {prep.bounds.size}")
    args = inputs + outputs
    n_in, n_out = len(inputs), len(outputs)
    tans = _split((tan_inputs, tan_outputs), n_in, n_out, ("tan_inputs", "tan_outputs"))
    tvals = _tangent_values(prep, args, tans, ("tan_inputs", "tan_outputs"), n_in)
    vals = list(prep.values) + tvals
    scratch = ()
    if adjoint:
        m = 0 if mode is None else mode
        adj_given = None
        if adj_inputs is not None or adj_outputs is not None:
            adj_given = _split((adj_inputs, adj_outputs), n_in, n_out, ("adj_inputs", "adj_outputs"))
        adj_descs = adjoint_descriptors(prep, args, adj_given)
        tadj = _split((tan_adj_inputs, tan_adj_outputs), n_in, n_out, ("tan_adj_inputs", "tan_adj_outputs"))
        tadj_descs = _tangent_values(prep, args, tadj, ("tan_adj_inputs", "tan_adj_outputs"), n_in)
        if adj_given is not None and not m & MODE_GRADS:
            # buffers given: the stores consume copies of them (as launch); MODE_GRADS: they
            # stand for the arrays' .grad (Tape.hvp's own), consumed in place
            fwd = vals[:n_in + n_out]
            written = tuple(i for i, (r, w) in enumerate(kernel.arg_access) if w)
            scratch = exact_adjoint_buffers(kernel, written, fwd, adj_descs, prep.device, tadj_descs,
                                            stream if prep.device.is_cuda else None)
            vals[:n_in + n_out] = fwd
        vals += adj_descs + tadj_descs
    else:
        if tan_adj_inputs is not None or tan_adj_outputs is not None:
            raise TypeError("launch(tangent=True): tan_adj_inputs/tan_adj_outputs need adjoint=True too")
        m = MODE_WRITE_PRIMAL if mode is None else mode
    vals.append(ctypes.c_int32(m))
    mod = tangent_module(kernel, prep.device, adjoint)
    try:
        mod.launch(prep.bounds, vals, adjoint, prep.stream_handle, block_dim, max_blocks)
    except KernelRuntimeError:
        _bump_written(kernel, args, adjoint, m)   # it ran (with a zero-step slice empty)
        raise
    if scratch:
        finish_adjoint_buffers(scratch)
    _bump_written(kernel, args, adjoint, m)


def _bump_written(kernel, args, adjoint, mode) -> None:
    """The versions of the arrays a launch that wrote its primal outputs wrote."""
    if not adjoint and mode & MODE_WRITE_PRIMAL:
        for i, (r, w) in enumerate(kernel.arg_access):
            if w and isinstance(args[i], array):
                args[i].version += 1


def _from_launch(kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs, tan_inputs,
                 tan_outputs, tan_adj_inputs, tan_adj_outputs, block_dim, max_blocks):
    launch_tangent(kernel, dim, inputs, outputs, device, stream, adjoint, adj_inputs, adj_outputs, tan_inputs,
                   tan_outputs, tan_adj_inputs, tan_adj_outputs, block_dim, max_blocks)


register_tangent_launcher(_from_launch)
