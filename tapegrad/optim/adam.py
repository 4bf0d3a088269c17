"""Adam as one fused launch per parameter group (Warp's ``warp.optim.Adam`` signature)."""
import functools

from .. import types
from ..array import array
from ..lang import func, kernel, min, pow, sqrt, tid
from .multi_tensor import CHUNK, slot_struct
from .optimizer import Optimizer

__all__ = ["Adam"]


@func
def adam_rule(p, g, m, v, lr, beta1, beta2, eps, c1, c2):
    """One element's Adam update in the state type: (new p, new m, new v), with the bias
    corrections ``c1 = 1 - beta1^t``, ``c2 = 1 - beta2^t`` (the one owner of the rule: every
    launch form below calls it; generic, so one specialization per state type)."""
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    return p - lr * (m / c1) / (sqrt(v / c2) + eps), m, v


@functools.lru_cache(maxsize=None)
def _kernel(scalar, state):
    Slot, S, P = slot_struct("Adam", scalar, state, ("m", "v")), state, scalar

    def adam_step(slots: array(dtype=Slot), chunk_slot: array(dtype=types.int32),
                  chunk_start: array(dtype=types.int64), step: array(dtype=types.int32), stride: types.int64,
                  span: types.int64, reach: types.int64,
                  lr: state, beta1: state, beta2: state, eps: state):
        c, lane = tid()
        s = slots[chunk_slot[c]]            # one table row read per lane, not per element
        j = chunk_start[c] + types.int64(lane) * span
        end = min(min(chunk_start[c] + types.int64(CHUNK), j + reach), s.n)
        t = S(step[0])
        c1 = 1.0 - pow(beta1, t)
        c2 = 1.0 - pow(beta2, t)
        # the row's memory as arrays built at its addresses: no array field of the table is
        # dereferenced, so the launch needs no read-back check of the rows (the native path)
        pa = array(ptr=s.p.ptr, shape=(s.n,), dtype=P)
        ga = array(ptr=s.g.ptr, shape=(s.n,), dtype=P)
        ma = array(ptr=s.m.ptr, shape=(s.n,), dtype=S)
        va = array(ptr=s.v.ptr, shape=(s.n,), dtype=S)
        while j < end:
            q, m, v = adam_rule(S(pa[j]), S(ga[j]), ma[j], va[j], lr, beta1, beta2, eps, c1, c2)
            ma[j] = m
            va[j] = v
            pa[j] = P(q)
            j += stride

    return kernel(adam_step, enable_backward=False, key=f"tapegrad.optim.adam_{scalar.name}")


@functools.lru_cache(maxsize=None)
def _runs_kernel(scalar, state, grain):
    Slot, S, P = slot_struct("Adam", scalar, state, ("m", "v")), state, scalar
    PSIZE, SSIZE = scalar.size, state.size

    def adam_step_runs(slots: array(dtype=Slot), chunk_slot: array(dtype=types.int32),
                       chunk_start: array(dtype=types.int64), step: array(dtype=types.int32), stride: types.int64,
                       span: types.int64, reach: types.int64,
                       lr: state, beta1: state, beta2: state, eps: state):
        # CPU (multi_tensor.CPU_SPAN runs): the run's memory as arrays of a compile-time unit stride,
        # indexed from 0, so the compiler vectorizes the loop as the flat kernel's
        c = tid()
        s = slots[chunk_slot[c]]
        j = chunk_start[c]
        n = min(s.n - j, span)
        at = types.uint64(j)
        pa = array(ptr=s.p.ptr + at * types.uint64(PSIZE), shape=(n,), dtype=P)
        ga = array(ptr=s.g.ptr + at * types.uint64(PSIZE), shape=(n,), dtype=P)
        ma = array(ptr=s.m.ptr + at * types.uint64(SSIZE), shape=(n,), dtype=S)
        va = array(ptr=s.v.ptr + at * types.uint64(SSIZE), shape=(n,), dtype=S)
        t = S(step[0])
        c1 = 1.0 - pow(beta1, t)
        c2 = 1.0 - pow(beta2, t)
        for k in range(n):
            q, m, v = adam_rule(S(pa[k]), S(ga[k]), ma[k], va[k], lr, beta1, beta2, eps, c1, c2)
            ma[k] = m
            va[k] = v
            pa[k] = P(q)

    # grain (multi_tensor.ParamGroup.cpu_grain): a thread runs CPU_SPAN elements, not one
    return kernel(adam_step_runs, enable_backward=False, cpu_grain=grain,
                  key=f"tapegrad.optim.adam_runs_{scalar.name}{f'_g{grain}' if grain else ''}")


@functools.lru_cache(maxsize=None)
def _flat_kernel(scalar, state):
    S, P = state, scalar

    def adam_step_flat(pa: array(dtype=P), ga: array(dtype=P), ma: array(dtype=S), va: array(dtype=S),
                       step: array(dtype=types.int32), lr: state, beta1: state, beta2: state, eps: state):
        j = tid()
        t = S(step[0])
        c1 = 1.0 - pow(beta1, t)
        c2 = 1.0 - pow(beta2, t)
        q, m, v = adam_rule(S(pa[j]), S(ga[j]), ma[j], va[j], lr, beta1, beta2, eps, c1, c2)
        ma[j] = m
        va[j] = v
        pa[j] = P(q)

    return kernel(adam_step_flat, enable_backward=False, key=f"tapegrad.optim.adam_flat_{scalar.name}")


class Adam(Optimizer):
    """Adam (Kingma & Ba), fused: one launch updates every parameter of a dtype and device.

    The update is ``torch.optim.Adam``'s (and Warp's) without weight decay:

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
        p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    float16 parameters keep their state in float32. The step count lives on the device, so a
    step captured in a CUDA graph (``tg.ScopedCapture``) replays with the right bias
    corrections; ``lr``, ``betas`` and ``eps`` are read when a step is launched (a captured
    graph keeps the values it was captured with).

    Args:
        params: tapegrad arrays (contiguous, floating point) to optimize.
        lr: learning rate.
        betas: ``(beta1, beta2)``, the decay rates of the moment estimates.
        eps: added to the denominator.
    Raises:
        TypeError, ValueError: see ``set_params`` and ``step``.
    """

    state_names = ("m", "v")
    slot_prefix = "Adam"

    def __init__(self, params=None, lr=0.001, betas=(0.9, 0.999), eps=1e-08):
        b1, b2 = betas
        for name, value, lo in (("lr", lr, 0.0), ("betas[0]", b1, 0.0), ("betas[1]", b2, 0.0), ("eps", eps, 0.0)):
            if not isinstance(value, (int, float)) or value < lo or (name.startswith("betas") and value >= 1.0):
                raise ValueError(f"Adam({name}=...): expected a number in "
                                 f"{'[0, 1)' if name.startswith('betas') else '[0, inf)'}, got {value!r}")
        self.lr, self.beta1, self.beta2, self.eps = float(lr), float(b1), float(b2), float(eps)
        super().__init__(params)

    @property
    def m(self) -> list:
        """The first-moment arrays, one per parameter (``state("m")``; Warp's ``opt.m``)."""
        return self.state("m")

    @property
    def v(self) -> list:
        """The second-moment arrays, one per parameter (``state("v")``; Warp's ``opt.v``)."""
        return self.state("v")

    def step_kernel(self, scalar, state, cpu=False, grain=None):
        return _runs_kernel(scalar.scalar, state.scalar, grain) if cpu else _kernel(scalar.scalar, state.scalar)

    def flat_step_kernel(self, scalar, state):
        return _flat_kernel(scalar.scalar, state.scalar)

    def hyperparameters(self):
        return [self.lr, self.beta1, self.beta2, self.eps]
