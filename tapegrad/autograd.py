"""Gradient checking: Jacobians from generated adjoints vs central finite differences.

``jacobian`` builds each output row by one adjoint launch seeded with a one-hot output
gradient; ``jacobian_fwd`` builds each input column by one tangent launch (forward mode,
``launch(tangent=True)``) seeded with a one-hot input tangent; ``jacobian_fd`` perturbs each
input component by ``±eps`` and re-runs the forward from the original output contents.
``gradcheck`` compares the adjoint and finite-difference Jacobians and reports the worst entries.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .array import array, clone
from .config import config
from .creation import zeros
from .errors import GradcheckError, TapeWarning
from .indexedarray import indexedarray
from .lang.kernel import Kernel
from .launch import launch
from .tape_forward import struct_of
from .tape_saves import kernel_reads
from .types import StructType

__all__ = ["jacobian", "jacobian_fwd", "jacobian_fd", "gradcheck", "GradcheckError", "GradcheckEntry"]




@dataclass(frozen=True)
class GradcheckEntry:
    input_index: int
    output_index: int
    row: int          # flat component of the output
    col: int          # flat component of the input
    adjoint: float
    finite_difference: float

    @property
    def abs_error(self) -> float:
        return abs(self.adjoint - self.finite_difference)


def _is_diff_array(a) -> bool:
    return isinstance(a, array) and a.dtype.scalar is not None and a.dtype.scalar.is_float


def _flat(a: array) -> np.ndarray:
    return np.array(a.numpy(), dtype=np.float64).reshape(-1)


def _set_flat(a: array, values: np.ndarray) -> None:
    host = np.asarray(values, dtype=a.dtype.scalar.np_dtype).reshape(a.shape + a.dtype.inner_shape)
    a.assign(array(host, dtype=a.dtype, device=a.device))


def _check_kernel(kernel, who: str, derivative: str = "") -> None:
    """Refuse a kernel ``who`` cannot launch, or whose ``derivative`` ("adjoint": generated
    backward; "tangent": forward mode) it lacks, before anything runs: with no float array to
    perturb, the loops below would launch nothing and return an empty (vacuous) result.

    Raises:
        TypeError: ``kernel`` is not a ``@tg.kernel``.
        RuntimeError: an ``entry_point_abi='external_constant_params'`` kernel (an outside
            launcher's entry, never launched by tapegrad), or ``derivative="adjoint"`` of a
            kernel built with ``enable_backward=False`` (Warp's "Kernel must have backward
            pass enabled to compute Jacobians").
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"{who}: expected a @tg.kernel function, got {type(kernel).__name__}")
    abi = kernel.entry_point_abi
    if abi != "warp":
        raise RuntimeError(f"{who}: kernel '{kernel.key}' uses entry_point_abi={abi!r}: an outside launcher's "
                           "entry, which tapegrad neither launches nor differentiates")
    if derivative == "adjoint" and not kernel.enable_backward:
        raise RuntimeError(f"{who}: kernel '{kernel.key}' was built with enable_backward=False (Kernel must have "
                           "backward pass enabled to compute Jacobians)")


def _select(items, mask_indices, who="jacobian", what="input_indices"):
    """The positions of ``items`` whose Jacobians are taken: the float arrays (those of
    ``mask_indices`` when given; naming another argument there is an error).

    Raises:
        ValueError: ``mask_indices`` names an argument that is not a float tapegrad array (an
            indexed array or struct: its arrays are not differentiated here).
    """
    if mask_indices is not None:
        for i in mask_indices:
            if isinstance(i, (int, np.integer)) and 0 <= i < len(items) and not _is_diff_array(items[i]):
                raise ValueError(f"{who}: {what} names argument {i}, a {type(items[i]).__name__}, but Jacobians are "
                                 f"taken with respect to floating-point tapegrad arrays only (an indexed array or a "
                                 f"struct's arrays: pass the array itself to a kernel taking it)")
    return [i for i, a in enumerate(items) if _is_diff_array(a) and (mask_indices is None or i in mask_indices)]


def _arrays_in(a) -> list:
    """The tapegrad arrays argument ``a`` holds: itself, a struct's array fields (nested structs
    too), an indexed array's data."""
    if isinstance(a, array):
        return [a]
    if isinstance(a, indexedarray):
        return _arrays_in(a.data)
    st = getattr(type(a), "_tg_struct", None)
    if isinstance(st, StructType):
        return [x for name, _ in st.fields for x in _arrays_in(getattr(a, name, None))]
    return []


class _Written:
    """The input arrays ``kernel`` writes (in place, a counter it bumps with ``atomic_add``...),
    with copies of their contents: every run of a Jacobian starts from them and they are put back
    at the end. Without it, each run started where the previous one left them (a finite
    difference of drifted values; a slot counter ran past its output array and the process
    died of heap corruption)."""

    def __init__(self, kernel, inputs):
        access = None if kernel.is_generic() else kernel.arg_access
        self.saved = []
        seen = set()
        for k, a in enumerate(inputs):
            # arg_access answers for array parameters; a struct's arrays are all taken (its
            # entry says (False, False) whatever the kernel does with its fields)
            if isinstance(a, array) and access is not None and k < len(access) and not access[k][1]:
                continue
            for x in _arrays_in(a):
                if id(x) not in seen and x.size:
                    seen.add(id(x))
                    self.saved.append((k, x, clone(x, requires_grad=False)))

    def restore(self, keep=()) -> None:
        """Put the original contents back (except in the inputs at positions ``keep``)."""
        for k, x, v in self.saved:
            if k not in keep:
                x.assign(v)


def _after_only(kernel, inputs, outputs):
    """The positions (of ``inputs + outputs``) of the arrays (and structs of arrays) the kernel
    writes without loading them before the write: the adjoint's replay, which skips stores, must
    read them holding the forward's results (a load after the store; the final value the
    adjoints of ``atomic_min``/``atomic_max`` read), while the others hold their values from
    before the launch (an in-place update's old values). The order is the tape's
    (``tape_saves.kernel_reads``); an argument loaded both before and after a write cannot be
    served either way: a ``TapeWarning`` says so (``RuntimeError`` under
    ``tg.config.strict_tape``), as the tape does. A generic kernel: the write-only outputs."""
    args = list(inputs) + list(outputs)
    if kernel.is_generic():       # the specialization is chosen at launch: no order known here
        return set()
    reads = kernel_reads(kernel, args)
    out = set()
    for k, r in enumerate(reads):
        if r is None or not r.writes:
            continue
        if r.before and r.after:
            msg = (f"jacobian: kernel '{kernel.key}' reads argument '{r.name}' both before and after writing it; "
                   "its adjoint sees one of the two values for both reads, so this Jacobian may be wrong. Write "
                   "the new values to a separate array.")
            if config.strict_tape:
                raise RuntimeError(msg)
            warnings.warn(msg, TapeWarning, stacklevel=3)
        if not r.before:
            out.add(k)
    return out


def _scratch_twin(a):
    """For a struct (or indexed array) argument: a twin whose arrays view the same memory and
    whose float arrays carry zeroed scratch gradients (an adjoint accumulates into a struct's
    arrays' own ``.grad``: the caller's, which a Jacobian must leave alone); others as given."""
    t = type(a)
    st = getattr(t, "_tg_struct", None)
    if not isinstance(st, StructType):
        return a
    out = t()
    for name, _ in st.fields:
        f = getattr(a, name, None)
        if _is_diff_array(f):
            w = array.wrap_memory(f.ptr, f.dtype, f.shape, f.strides, f.device, f)
            # the descriptor's gradient pointer shares the data's strides: scratch laid out alike
            span = sum((n - 1) * st_ for n, st_ in zip(f.shape, f.strides) if n) + f.dtype.size
            buf = zeros(-(-span // f.dtype.size) if f.size else 0, f.dtype, f.device)
            w.grad = array.wrap_memory(buf.ptr, f.dtype, f.shape, f.strides, f.device, buf)
            f = w
        elif isinstance(getattr(type(f), "_tg_struct", None), StructType):
            f = _scratch_twin(f)
        setattr(out, name, f)
    return out


def jacobian(kernel, dim, inputs, outputs, device=None, input_indices=None, output_indices=None,
             block_dim=256, max_blocks=0) -> dict:
    """Jacobians of ``kernel`` from its generated adjoint.

    Each row runs the forward, then the adjoint with the arrays the kernel loads before writing
    them (in place) restored to their original contents (its replay reads them) and those it
    writes without loading them first holding the forward's results (a load after the store;
    the final value the adjoints of ``atomic_min``/``atomic_max`` read), the tape's rule;
    inputs and outputs are left as given.

    Args:
        kernel, dim, inputs, outputs, device: as for ``launch``.
        input_indices, output_indices: restrict to these argument positions (default: every
            float array).
    Returns:
        ``{(input_index, output_index): J}`` with ``J.shape == (output components, input components)``.
    Raises:
        RuntimeError: the kernel was built with ``enable_backward=False``, or is an
            ``entry_point_abi='external_constant_params'`` kernel.
    """
    _check_kernel(kernel, "jacobian", "adjoint")
    inputs, outputs = list(inputs), list(outputs)
    ins = _select(inputs, input_indices, "jacobian")
    outs = _select(outputs, output_indices, "jacobian", "output_indices")
    saved = {j: clone(outputs[j], requires_grad=False) for j in range(len(outputs)) if isinstance(outputs[j], array)}
    n_in = len(inputs)
    post = _after_only(kernel, inputs, outputs)
    after = {o for o in saved if n_in + o in post}        # outputs holding the forward's results
    keep = {k for k in post if k < n_in}                  # inputs likewise
    written = _Written(kernel, inputs)
    result = {}
    twin_in, twin_out = [_scratch_twin(a) for a in inputs], [_scratch_twin(a) for a in outputs]
    for j in outs:
        out = outputs[j]
        n_out = out.size * max(out.dtype.length, 1)
        rows = {i: np.zeros((n_out, inputs[i].size * max(inputs[i].dtype.length, 1))) for i in ins}
        for r in range(n_out):
            adj_in = [zeros(a.shape, a.dtype, a.device) if _is_diff_array(a) else None for a in inputs]
            adj_out = [zeros(a.shape, a.dtype, a.device) if _is_diff_array(a) else None for a in outputs]
            seed = np.zeros(n_out)
            seed[r] = 1.0
            _set_flat(adj_out[j], seed)
            _restore(outputs, saved)
            written.restore()
            if post:
                # arrays the kernel writes before (or without) loading them hold the forward's
                # results, as under a tape; the others their original contents
                launch(kernel, dim, inputs, outputs, device=device, record_tape=False, block_dim=block_dim,
                       max_blocks=max_blocks)
                _restore(outputs, {o: saved[o] for o in saved if o not in after})
                written.restore(keep)
            launch(kernel, dim, twin_in, twin_out, device=device, adjoint=True, adj_inputs=adj_in,
                   adj_outputs=adj_out, record_tape=False, block_dim=block_dim, max_blocks=max_blocks)
            for i in ins:
                rows[i][r] = _flat(adj_in[i])
        for i in ins:
            result[(i, j)] = rows[i]
    _restore(outputs, saved)
    written.restore()
    return result


def jacobian_fwd(kernel, dim, inputs, outputs, device=None, input_indices=None, output_indices=None,
                 block_dim=256, max_blocks=0) -> dict:
    """Jacobians of ``kernel`` in forward mode: one tangent launch per input component
    (cheaper than ``jacobian`` when the inputs have fewer components than the outputs).

    Every launch starts from the outputs' original contents; inputs and outputs are left as
    they were.

    Args:
        kernel, dim, inputs, outputs, device: as for ``launch``.
        input_indices, output_indices: restrict to these argument positions (default: every
            float array).
    Returns:
        ``{(input_index, output_index): J}`` as ``jacobian``.
    Raises:
        KernelError: the kernel uses a builtin without a forward-mode rule (named).
        RuntimeError: an ``entry_point_abi='external_constant_params'`` kernel.
    """
    _check_kernel(kernel, "jacobian_fwd", "tangent")
    inputs, outputs = list(inputs), list(outputs)
    ins = _select(inputs, input_indices, "jacobian_fwd")
    outs = _select(outputs, output_indices, "jacobian_fwd", "output_indices")
    saved = {j: clone(outputs[j], requires_grad=False) for j in range(len(outputs)) if isinstance(outputs[j], array)}
    written = _Written(kernel, inputs)     # inputs the kernel writes (in place) are restored too
    result = {}
    for i in ins:
        n_in = inputs[i].size * max(inputs[i].dtype.length, 1)
        cols = {j: np.zeros((outputs[j].size * max(outputs[j].dtype.length, 1), n_in)) for j in outs}
        for c in range(n_in):
            tan_in, tan_out = [_zero_tangent(a) for a in inputs], [_zero_tangent(a) for a in outputs]
            seed = np.zeros(n_in)
            seed[c] = 1.0
            _set_flat(tan_in[i], seed)
            _restore(outputs, saved)
            written.restore()
            launch(kernel, dim, inputs, outputs, device=device, tangent=True, tan_inputs=tan_in,
                   tan_outputs=tan_out, block_dim=block_dim, max_blocks=max_blocks)
            for j in outs:
                cols[j][:, c] = _flat(tan_out[j])
        for j in outs:
            result[(i, j)] = cols[j]
    _restore(outputs, saved)
    written.restore()
    return result


def _zero_tangent(a):
    """A zero tangent for launch argument ``a``: a float array's buffer; for a struct holding
    arrays, a struct whose float arrays are zero buffers (without them, a value the kernel
    stores into a struct's array and loads back lost its tangent); None otherwise."""
    if _is_diff_array(a):
        return zeros(a.shape, a.dtype, a.device)
    return struct_of(a, lambda f: zeros(f.shape, f.dtype, f.device) if _is_diff_array(f) else None)


def _restore(outputs, saved):
    for j, s in saved.items():
        outputs[j].assign(s)


def jacobian_fd(kernel, dim, inputs, outputs, device=None, eps: float = 1e-4, input_indices=None,
                output_indices=None, block_dim=256, max_blocks=0) -> dict:
    """Jacobians of ``kernel`` by central finite differences (``(f(x+eps) - f(x-eps)) / 2eps``).

    Every forward run starts from the outputs' original contents, so kernels that accumulate
    into their outputs (``atomic_add``) are differentiated correctly, and from the original
    contents of the inputs the kernel writes (in place, or a counter it bumps). Inputs are
    restored.

    Returns:
        ``{(input_index, output_index): J}`` as ``jacobian``.
    Raises:
        RuntimeError: an ``entry_point_abi='external_constant_params'`` kernel.
    """
    _check_kernel(kernel, "jacobian_fd")
    inputs, outputs = list(inputs), list(outputs)
    ins = _select(inputs, input_indices, "jacobian_fd")
    outs = _select(outputs, output_indices, "jacobian_fd", "output_indices")
    saved = {j: clone(outputs[j], requires_grad=False) for j in range(len(outputs)) if isinstance(outputs[j], array)}
    written = _Written(kernel, inputs)

    def run(i, values):
        _restore(outputs, saved)
        written.restore()
        _set_flat(inputs[i], values)
        launch(kernel, dim, inputs, outputs, device=device, record_tape=False, block_dim=block_dim,
               max_blocks=max_blocks)
        return {j: _flat(outputs[j]) for j in outs}

    result = {}
    for i in ins:
        x0 = _flat(inputs[i])
        cols = {j: np.zeros((outputs[j].size * max(outputs[j].dtype.length, 1), x0.size)) for j in outs}
        for c in range(x0.size):
            xp = x0.copy()
            xp[c] += eps
            fp = run(i, xp)
            xp[c] = x0[c] - eps
            fm = run(i, xp)
            for j in outs:
                cols[j][:, c] = (fp[j] - fm[j]) / (2 * eps)
        written.restore()
        _set_flat(inputs[i], x0)
        for j in outs:
            result[(i, j)] = cols[j]
    _restore(outputs, saved)
    return result


def gradcheck(kernel, dim, inputs, outputs, eps: float = 1e-4, atol: float = 1e-3, rtol: float = 1e-2,
              device=None, raise_exception: bool = True, input_indices=None, output_indices=None,
              show_summary: bool = False, max_report: int = 5) -> bool:
    """Compare adjoint and finite-difference Jacobians of ``kernel``.

    Passes when ``|adj - fd| <= atol + rtol * |fd|`` for every entry. Use float64 arrays for
    tight tolerances.

    Args:
        eps, atol, rtol: finite-difference step and tolerances.
        raise_exception: raise ``GradcheckError`` with a report of the worst entries on failure.
        show_summary: print the max absolute/relative error per (input, output) pair.
    Returns:
        True when the Jacobians agree (False instead of raising when ``raise_exception=False``).
    Raises:
        GradcheckError: they disagree and ``raise_exception`` is set.
        RuntimeError: as ``jacobian`` (a kernel without a generated adjoint, an external entry).
        ValueError: nothing to compare: no floating-point array among the (selected) inputs
            or outputs (a check that compares nothing would pass whatever the adjoint does).
    """
    _check_kernel(kernel, "gradcheck", "adjoint")
    ja = jacobian(kernel, dim, inputs, outputs, device, input_indices, output_indices)
    if not ja:
        raise ValueError(f"gradcheck: kernel '{kernel.key}' has nothing to compare: no floating-point array among the "
                         f"inputs{'' if input_indices is None else f' {list(input_indices)}'} and the outputs"
                         f"{'' if output_indices is None else f' {list(output_indices)}'}")
    jf = jacobian_fd(kernel, dim, inputs, outputs, device, eps, input_indices, output_indices)
    bad: list[GradcheckEntry] = []
    names = kernel.arg_names
    n_in = len(inputs)
    for key, a in ja.items():
        f = jf[key]
        err = np.abs(a - f)
        tol = atol + rtol * np.abs(f)
        if show_summary:
            rel = err / np.maximum(np.abs(f), 1e-12)
            print(f"gradcheck {kernel.key}: d {names[n_in + key[1]]} / d {names[key[0]]}: "
                  f"max abs err {err.max(initial=0):.3g}, max rel err {rel.max(initial=0):.3g}")
        for r, c in zip(*np.nonzero(err > tol)):
            bad.append(GradcheckEntry(key[0], key[1], int(r), int(c), float(a[r, c]), float(f[r, c])))
    if not bad:
        return True
    if not raise_exception:
        return False
    bad.sort(key=lambda e: -e.abs_error)
    lines = [f"gradcheck failed for kernel '{kernel.key}': {len(bad)} Jacobian entries differ "
             f"(atol={atol}, rtol={rtol}, eps={eps}); worst:"]
    for e in bad[:max_report]:
        lines.append(f"  d {names[n_in + e.output_index]}[{e.row}] / d {names[e.input_index]}[{e.col}]: "
                     f"adjoint {e.adjoint:.6g}, finite difference {e.finite_difference:.6g} "
                     f"(|diff| {e.abs_error:.3g})")
    raise GradcheckError("\n".join(lines))
