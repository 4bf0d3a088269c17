"""SGD with momentum as one fused launch per parameter group (Warp's ``warp.optim.SGD``)."""
import functools

from .. import types
from ..array import array
from ..lang import func, kernel, min, tid
from .multi_tensor import CHUNK, slot_struct
from .optimizer import Optimizer

__all__ = ["SGD"]


@func
def sgd_rule(p, g, b, lr, momentum, dampening, weight_decay, nesterov, first):
    """One element's SGD update in the state type: (new p, new b); ``b`` is read and written by
    the caller only with momentum (the one owner of the rule: every launch form below calls it;
    generic, so one specialization per state type). The momentum buffer starts at zero, so
    without dampening the first step's ``b = g`` is the general formula, and only a dampened
    first step needs ``first``."""
    g = g + weight_decay * p
    if momentum != 0.0:
        b = momentum * b + (1.0 - dampening) * g
        if dampening != 0.0:
            if first:
                b = g
        if nesterov != 0:
            g = g + momentum * b
        else:
            g = b
    return p - lr * g, b


@functools.lru_cache(maxsize=None)
def _kernel(scalar, state):
    Slot, S, P = slot_struct("SGD", scalar, state, ("b",)), state, scalar

    def sgd_step(slots: array(dtype=Slot), chunk_slot: array(dtype=types.int32),
                 chunk_start: array(dtype=types.int64), step: array(dtype=types.int32), stride: types.int64,
                 span: types.int64, reach: types.int64,
                 lr: state, momentum: state, dampening: state, weight_decay: state, nesterov: types.int32):
        c, lane = tid()
        s = slots[chunk_slot[c]]            # one table row read per lane, not per element
        j = chunk_start[c] + types.int64(lane) * span
        end = min(min(chunk_start[c] + types.int64(CHUNK), j + reach), s.n)
        first = step[0] == 1
        # the row's memory as arrays built at its addresses: no array field of the table is
        # dereferenced, so the launch needs no read-back check of the rows (the native path)
        pa = array(ptr=s.p.ptr, shape=(s.n,), dtype=P)
        ga = array(ptr=s.g.ptr, shape=(s.n,), dtype=P)
        ba = array(ptr=s.b.ptr, shape=(s.n,), dtype=S)
        while j < end:
            b = S(0.0)
            if momentum != 0.0:
                b = ba[j]
            q, b = sgd_rule(S(pa[j]), S(ga[j]), b, lr, momentum, dampening, weight_decay, nesterov, first)
            if momentum != 0.0:
                ba[j] = b
            pa[j] = P(q)
            j += stride

    return kernel(sgd_step, enable_backward=False, key=f"tapegrad.optim.sgd_{scalar.name}")


@functools.lru_cache(maxsize=None)
def _runs_kernel(scalar, state, grain):
    Slot, S, P = slot_struct("SGD", scalar, state, ("b",)), state, scalar
    PSIZE, SSIZE = scalar.size, state.size

    def sgd_step_runs(slots: array(dtype=Slot), chunk_slot: array(dtype=types.int32),
                      chunk_start: array(dtype=types.int64), step: array(dtype=types.int32), stride: types.int64,
                      span: types.int64, reach: types.int64,
                      lr: state, momentum: state, dampening: state, weight_decay: state, nesterov: types.int32):
        # CPU (multi_tensor.CPU_SPAN runs): the run's memory as arrays of a compile-time unit stride,
        # indexed from 0, so the compiler vectorizes the loop as the flat kernel's
        c = tid()
        s = slots[chunk_slot[c]]
        j = chunk_start[c]
        m = min(s.n - j, span)
        at = types.uint64(j)
        pa = array(ptr=s.p.ptr + at * types.uint64(PSIZE), shape=(m,), dtype=P)
        ga = array(ptr=s.g.ptr + at * types.uint64(PSIZE), shape=(m,), dtype=P)
        ba = array(ptr=s.b.ptr + at * types.uint64(SSIZE), shape=(m,), dtype=S)
        first = step[0] == 1
        for k in range(m):
            b = S(0.0)
            if momentum != 0.0:
                b = ba[k]
            q, b = sgd_rule(S(pa[k]), S(ga[k]), b, lr, momentum, dampening, weight_decay, nesterov, first)
            if momentum != 0.0:
                ba[k] = b
            pa[k] = P(q)

    # grain (multi_tensor.ParamGroup.cpu_grain): a thread runs CPU_SPAN elements, not one
    return kernel(sgd_step_runs, enable_backward=False, cpu_grain=grain,
                  key=f"tapegrad.optim.sgd_runs_{scalar.name}{f'_g{grain}' if grain else ''}")


@functools.lru_cache(maxsize=None)
def _flat_kernel(scalar, state):
    S, P = state, scalar

    def sgd_step_flat(pa: array(dtype=P), ga: array(dtype=P), ba: array(dtype=S), step: array(dtype=types.int32),
                      lr: state, momentum: state, dampening: state, weight_decay: state, nesterov: types.int32):
        j = tid()
        b = S(0.0)
        first = False
        if momentum != 0.0:
            b = ba[j]
            if dampening != 0.0:     # the step count is read only where the rule needs it
                first = step[0] == 1
        q, b = sgd_rule(S(pa[j]), S(ga[j]), b, lr, momentum, dampening, weight_decay, nesterov, first)
        if momentum != 0.0:
            ba[j] = b
        pa[j] = P(q)

    return kernel(sgd_step_flat, enable_backward=False, key=f"tapegrad.optim.sgd_flat_{scalar.name}")


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, fused (``torch.optim.SGD``'s update).

    ``g += weight_decay * p``; with momentum, ``b = g`` on the first step, then
    ``b = momentum * b + (1 - dampening) * g``, and ``g = g + momentum * b`` (Nesterov) or
    ``g = b``; finally ``p -= lr * g``. The step count lives on the device (CUDA-graph safe).

    Args:
        params: tapegrad arrays (contiguous, floating point) to optimize.
        lr: learning rate.
        momentum, dampening, weight_decay: as in ``torch.optim.SGD``.
        nesterov: Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).
    Raises:
        ValueError: a negative hyperparameter, or ``nesterov`` without momentum / with dampening.
    """

    state_names = ("b",)
    slot_prefix = "SGD"

    def __init__(self, params=None, lr=0.001, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        for name, value in (("lr", lr), ("momentum", momentum), ("dampening", dampening),
                            ("weight_decay", weight_decay)):
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"SGD({name}=...): expected a number >= 0, got {value!r}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(f"SGD(nesterov=True): needs momentum > 0 and dampening == 0, got momentum={momentum}, "
                             f"dampening={dampening}")
        self.lr, self.momentum, self.dampening = float(lr), float(momentum), float(dampening)
        self.weight_decay, self.nesterov = float(weight_decay), bool(nesterov)
        super().__init__(params)

    def step_kernel(self, scalar, state, cpu=False, grain=None):
        return _runs_kernel(scalar.scalar, state.scalar, grain) if cpu else _kernel(scalar.scalar, state.scalar)

    def flat_step_kernel(self, scalar, state):
        return _flat_kernel(scalar.scalar, state.scalar)

    def hyperparameters(self):
        return [self.lr, self.momentum, self.dampening, self.weight_decay, int(self.nesterov)]
