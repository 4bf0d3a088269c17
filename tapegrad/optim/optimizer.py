"""What every fused optimizer shares: parameters, gradients, groups, the step protocol.

A concrete optimizer (``Adam``, ``SGD``) names its per-element state arrays and supplies one
kernel per (parameter, state) element type; ``Optimizer.step`` launches it once per
parameter group.
"""
from ..array import array
from ..launch import launch
from .multi_tensor import build_groups, flat_view, slot_struct

__all__ = ["Optimizer"]


class Optimizer:
    """Base of the fused optimizers (Warp's ``warp.optim`` protocol).

    Subclasses define ``state_names``, ``step_kernel(param scalar, state scalar, cpu, grain)``
    (the table kernel; ``cpu``: the build with one grid thread per ``multi_tensor.CPU_SPAN`` run,
    built with ``cpu_grain=grain``; its table rows are ``slot_struct(slot_prefix, param scalar,
    state scalar, state_names)``),
    ``flat_step_kernel(param scalar, state scalar)`` (large CPU parameters, one launch each) and
    ``hyperparameters()`` (the kernel's scalar arguments after the tables, as a list).
    """

    state_names: tuple = ()
    slot_prefix: str = ""   # names the row struct (subclasses of Adam share Adam's kernels)

    def __init__(self, params=None):
        self.params = None
        self.groups = []
        self._tables: dict = {}
        self._launches_key = None
        if params is not None:
            self.set_params(params)

    def set_params(self, params) -> None:
        """Use ``params`` (a list of tapegrad arrays) from now on; state starts at zero, unless
        ``params`` are the arrays in use already (then nothing changes, as in Warp).

        Raises:
            TypeError: not a list of floating-point tapegrad arrays.
            ValueError: a parameter is not contiguous, or two share memory (the same array twice,
                overlapping views: their updates would race).
        """
        if isinstance(params, array):
            raise TypeError(f"{type(self).__name__}(params=...): expected a list of arrays, got one array "
                            "(wrap it in a list)")
        params = list(params)
        if self.params is not None and len(params) == len(self.params) and \
                all(a is b for a, b in zip(params, self.params)):
            return   # the same arrays (Warp's optimizers keep their state then)
        self.groups = build_groups(params, self.state_names, self.slot_type)
        self.params = params
        self._tables = {}
        self._launches_key = None

    def state(self, name: str) -> list:
        """The state arrays called ``name`` (one of ``state_names``), one per parameter in the
        order of ``params``: flat arrays of the parameter's scalar count, in the state dtype
        (float32 for 16-bit parameters). Adam's ``m`` and ``v`` read them.

        Raises:
            KeyError: ``name`` is not a state of this optimizer.
        """
        if name not in self.state_names:
            raise KeyError(f"{type(self).__name__} keeps no state '{name}' (its states: {self.state_names})")
        out = [None] * (len(self.params) if self.params is not None else 0)
        for g in self.groups:
            for k, i in enumerate(g.indices):
                out[i] = g.states[name][k]
        return out

    def reset_internal_state(self) -> None:
        """Zero the optimizer state and the step count (the parameters are left as they are)."""
        for g in self.groups:
            for arrs in g.states.values():
                for a in arrs:
                    a.zero_()
            g.step.zero_()

    def _grads(self, grad):
        name = type(self).__name__
        if self.params is None:
            raise RuntimeError(f"{name}.step: no parameters (pass params= or call set_params first)")
        if grad is None:
            grad = [p.grad for p in self.params]
            missing = [i for i, g in enumerate(grad) if g is None]
            if missing:
                raise ValueError(f"{name}.step: params[{missing[0]}] has no gradient (create it with "
                                 "requires_grad=True, or pass grad=[...])")
        else:
            grad = list(grad)
            if len(grad) != len(self.params):
                raise ValueError(f"{name}.step(grad): expected {len(self.params)} gradient arrays, got {len(grad)}")
        for i, (p, g) in enumerate(zip(self.params, grad)):
            if not isinstance(g, array):
                raise TypeError(f"{name}.step: the gradient of params[{i}] must be a tapegrad array, "
                                f"got {type(g).__name__}")
            if (g.dtype, g.shape, g.device) != (p.dtype, p.shape, p.device):
                raise ValueError(f"{name}.step: the gradient of params[{i}] must match the parameter's dtype, shape "
                                 f"and device {(p.dtype, p.shape, str(p.device))}, got "
                                 f"{(g.dtype, g.shape, str(g.device))}")
        return grad

    def _table(self, gi, group, grads):
        """The group's table and its flat gradient views."""
        flat = tuple(flat_view(grads[i], f"{type(self).__name__}.step: the gradient of params[{i}]")
                     for i in group.indices)
        # a row is (pointers, lengths); lengths and dtypes are checked above, so equal pointers
        # mean a byte-identical table even if a gradient buffer was freed and reallocated
        key = tuple(g.ptr for g in flat)
        hit = self._tables.get(gi)
        if hit is None or hit[0] != key:
            hit = self._tables[gi] = (key, group.table(flat), flat)
        return hit[1], hit[2]

    def _group_launches(self, gi, group, grads) -> list:
        """``(kernel, grid, arguments before the hyperparameters)`` of one group's step: the
        table launch over its chunks, one launch per ``flat`` parameter (``multi_tensor.FLAT_MIN``)."""
        table, gflat = self._table(gi, group, grads)
        out = []
        if group.dim[0]:
            out.append((self._kernel_of(group), group.dim,
                        [table, group.chunk_slot, group.chunk_start, group.step, *group.walk]))
        if group.flat:
            k = self.flat_step_kernel(group.values[0].dtype, group.states[self.state_names[0]][0].dtype)
            for j in group.flat:
                out.append((k, group.values[j].size,
                            [group.values[j], gflat[j], *[group.states[n][j] for n in self.state_names], group.step]))
        return out

    def step(self, grad=None) -> None:
        """One optimizer step: one launch per parameter group (and one per large CPU parameter,
        ``multi_tensor.FLAT_MIN``), plus one to advance its step count.

        Args:
            grad: gradient arrays matching ``params`` (Warp's signature); default: each
                parameter's ``.grad`` (what ``tape.backward`` wrote).

        Raises:
            RuntimeError: no parameters set.
            ValueError: a missing gradient, or one whose dtype/shape/device differ from its parameter's.
            TypeError: a gradient that is not a tapegrad array.
        """
        if grad is not None:
            grad = list(grad)
        current = [p.grad for p in self.params] if grad is None and self.params is not None else grad
        key = tuple(map(id, current)) if current is not None else None
        if key is None or key != self._launches_key:
            # new gradient arrays: check them and build the launches (arrays never change shape,
            # dtype or memory, so the same objects as last step need neither)
            grads = self._grads(grad)
            self._launches = [(group, self._group_launches(gi, group, grads))
                              for gi, group in enumerate(self.groups) if group.dim[0] or group.flat]
            self._launches_key, self._launches_grads = key, list(current)   # keeps the ids valid
        hyper = self.hyperparameters()
        for group, launches in self._launches:
            group.tick()
            for k, dim, args in launches:
                launch(k, dim=dim, inputs=args + hyper, device=group.device, record_tape=False)

    def _kernel_of(self, group):
        scalar, state = group.values[0].dtype, group.states[self.state_names[0]][0].dtype
        if group.device.is_cpu:
            return self.step_kernel(scalar, state, True, group.cpu_grain)
        return self.step_kernel(scalar, state)

    # subclasses -------------------------------------------------------------------------
    def slot_type(self, scalar, state):
        """The struct class of a table row for parameters of ``scalar`` with ``state`` state."""
        return slot_struct(self.slot_prefix, scalar, state, self.state_names)

    def step_kernel(self, scalar, state, cpu=False, grain=None):
        raise NotImplementedError

    def flat_step_kernel(self, scalar, state):
        """The kernel stepping one parameter (CPU, ``multi_tensor.FLAT_MIN`` elements or more),
        one element per thread: arguments ``(p, g, *states, step, *hyperparameters())``."""
        raise NotImplementedError

    def hyperparameters(self) -> list:
        raise NotImplementedError
