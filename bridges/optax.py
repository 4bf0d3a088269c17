"""optax over tapegrad parameters in one call: ``tg.optax_optimizer(optax.adam(1e-2), [xs, ys])``.

``step()`` runs one jitted optax update (``tx.update`` + ``optax.apply_updates``) on zero-copy
JAX views of the parameters and of the gradients the tape wrote, keeps optax's state in JAX,
and writes the new values back into the tapegrad buffers with a device-to-device copy on
tapegrad's stream (no host round trip). The update is traced once per set of shapes and
dtypes, not per step.

Per step the Python work is small and fixed: the JAX views of the parameters and gradients
are made once and reused while their memory stays put (checked each step: pointer, shape,
strides, the gradient array itself).

On CUDA the update writes the parameters in place. The parameters' views are *donated*: XLA
writes each new value into the buffer of the old one, which is the tapegrad array's memory
(checked once per device on a probe array, and per step by pointer: an output elsewhere is
copied back as on the CPU), and the outputs are the next step's views. Ordering is two cheap
stream operations, no host wait: before the update, an event recorded on tapegrad's stream that
a ``tapegrad_stream_wait`` FFI call at the start of the jitted update makes XLA's stream wait
for (``StreamEvent`` of the JAX bridge's FFI module; without the FFI handler library, a tiny *ordering token* imported
through DLPack each step does the same, at ~30 µs); after it, one DLPack handshake on an output
that makes tapegrad's stream wait for the update. On the CPU, where JAX copies donated DLPack
views instead of aliasing them, the outputs are copied into the parameters' memory by pointer
(one native call, threads sharing a large total), and the outputs are donated to the next step
as scratch: its new values are written into their buffers (no allocation per step).

A step that fails changes nothing: every check (gradients, dtypes JAX can hold, memory) runs
before optax's state is touched. ``step(**extra_args)`` passes what a transformation needs
beyond the gradients (``value``, ``grad``, ``value_fn`` for ``optax.lbfgs``) to ``tx.update``.
"""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import optax

from tapegrad import types
from tapegrad.array import array, copy
from tapegrad.creation import zeros
from tapegrad.cuda import memory as cuda_memory
from tapegrad.memory_ops import copy_regions
from tapegrad.types import StructType

from .jax import from_jax, to_jax
from .jax.convert import stream_wait_for
from .jax.ffi import StreamEvent, stream_wait

__all__ = ["OptaxOptimizer", "optax_optimizer"]


def _apply(tx, params, grads, scratch, state, extra=None, static=(), token=None, wait=None):
    # ``token`` (CUDA without the FFI handler): unused, passed only for its ready event (see the
    # module docstring); the update is jitted with keep_unused=True so that XLA still receives it
    done = ()
    if wait is not None:
        # XLA's stream waits for the event step() recorded on tapegrad's stream: every read of
        # tapegrad memory below is after the barrier, so after tapegrad's kernels. The barrier's
        # token is returned: an unused one would let XLA drop the barrier's wait
        params, grads, extra, tok = jax.lax.optimization_barrier((params, grads, extra, stream_wait(wait)))
        done = (tok,)
    updates, state = tx.update(grads, state, params, **(extra or {}), **dict(static))
    # the params, grads and extra arrays are zero-copy views of tapegrad memory that the next
    # backward and this step's write-back overwrite: a state leaf that is one of them unchanged
    # must own a copy, whatever jit does with outputs equal to inputs (copies of the values
    # computed here are dropped by XLA)
    state = jax.tree_util.tree_map(lambda x: jnp.copy(x) if isinstance(x, jax.Array) else x, state)
    # ``scratch`` (unused; the update is jitted with keep_unused=True): where the parameters are
    # not donated, the last step's outputs, donated so that the new values reuse their buffers
    # (no allocation per step). JAX gives each output, in order, the first unclaimed donated
    # input of its shape and dtype: the new values first, then the state, as the donated inputs
    # come (the parameters' views or the scratch, then the state), so each output takes its own
    # old buffer. Otherwise a moment of a parameter's shape would be paired with the new
    # parameter, and XLA adds a copy of every moment to keep the state right (measured: the CPU
    # step 1.2-1.5x dearer)
    return (optax.apply_updates(params, updates), state) + done


def _unique_buffers(state):
    """``state`` with no JAX array appearing twice among its leaves (optax's lbfgs starts with
    shared zeros): the update donates the state, and XLA refuses to donate one buffer twice."""
    leaves = jax.tree_util.tree_leaves(state)
    if len(set(map(id, leaves))) == len(leaves):    # the usual case: no rebuild of the tree
        return state
    leaves, tree = jax.tree_util.tree_flatten(state)
    seen, out, dup = set(), [], False
    for x in leaves:
        if isinstance(x, jax.Array) and id(x) in seen:
            x, dup = x.copy(), True
        seen.add(id(x))
        out.append(x)
    return jax.tree_util.tree_unflatten(tree, out) if dup else state


_UNSET = object()   # no gradient viewed yet (None is a gradient state that raises)

_donation_aliases_on: dict = {}   # tapegrad device -> whether XLA writes a donated DLPack view in place


def _donation_aliases(device) -> bool:
    """Whether a jitted function's output takes the buffer of a donated JAX view of tapegrad
    memory on ``device`` (a probe array, once per device): then the optimizer's update writes the
    parameters in place. JAX's CPU client copies donated views instead (measured: jaxlib 0.10)."""
    ok = _donation_aliases_on.get(device)
    if ok is None:
        probe = zeros(16, dtype=types.float32, device=device)
        try:
            out = jax.jit(lambda x: x + 1, donate_argnums=0)(to_jax(probe))
            out.block_until_ready()
            ok = out.unsafe_buffer_pointer() == probe.ptr and float(probe.numpy()[0]) == 1.0
        except Exception:   # noqa: BLE001  no donation on this backend: the copying path
            ok = False
        _donation_aliases_on[device] = ok
    return ok


def _aliases(view, a) -> bool:
    """Whether JAX array ``view`` reads ``a``'s memory (``to_jax`` copies what XLA cannot alias)."""
    try:
        return view.unsafe_buffer_pointer() == a.ptr
    except Exception:   # noqa: BLE001  a backend without raw pointers: treat the view as a copy
        return False


def _x64_error(where, i, p) -> str:
    return (f"{where}: params[{i}] is {p.dtype!r}, but JAX runs without 64-bit types (jax_enable_x64 is off), so "
            f"optax would compute in float32 and the step could not be written back; enable it "
            f"(jax.config.update('jax_enable_x64', True)) or use float32 parameters")


class OptaxOptimizer:
    """An optax transformation stepping tapegrad arrays in place.

    Attributes:
        params: the tapegrad arrays being optimized.
        state: optax's state (a pytree of JAX arrays on the parameters' device).
        transformation: the optax ``GradientTransformation``.
    """

    def __init__(self, transformation, params):
        if not (callable(getattr(transformation, "init", None)) and callable(getattr(transformation, "update", None))):
            raise TypeError(f"optax_optimizer(transformation=...): expected an optax GradientTransformation "
                            f"(with init and update), got {type(transformation).__name__}")
        if isinstance(params, array):
            raise TypeError("optax_optimizer(params=...): expected a list of tapegrad arrays, got one array "
                            "(wrap it in a list)")
        params = list(params)
        if not params:
            raise ValueError("optax_optimizer(params=...): expected at least one parameter array, got none")
        for i, p in enumerate(params):
            if not isinstance(p, array):
                raise TypeError(f"optax_optimizer: params[{i}] must be a tapegrad array, got {type(p).__name__}")
            if not p.dtype.scalar.is_float:
                raise TypeError(f"optax_optimizer: params[{i}] must be floating point, got {p.dtype!r}")
            if p.device != params[0].device:
                raise ValueError(f"optax_optimizer: params[{i}] is on {p.device}, params[0] on {params[0].device}: "
                                 "one optimizer steps parameters of one device")
        _check_distinct(params)
        self.transformation = transformation
        self.params = params
        self._shapes = [(p.ptr, p.shape, p.strides) for p in params]
        views = [to_jax(p) for p in params]
        self._check_dtypes(views, "optax_optimizer")
        self.state = _unique_buffers(transformation.init(views))
        # the parameters' views live as long as the optimizer (their memory is checked unchanged
        # each step); the gradients' are remade only when a parameter's .grad is another array
        self._pviews = views
        # a view JAX had to copy (memory XLA cannot alias, e.g. misaligned) goes stale: remade per step
        self._copied = [i for i, (p, v) in enumerate(zip(params, views)) if not _aliases(v, p)]
        self._gviews = [(_UNSET, None)] * len(params)
        self._has64 = any(p.dtype.scalar.size == 8 for p in params)
        self._device = params[0].device
        # contiguous parameters are written back by one raw copy each, from the output's pointer
        self._raw = [(p.ptr, p.nbytes) if p.is_contiguous else None for p in params]
        # CUDA: how the update is ordered after tapegrad's stream (the module docstring), whether
        # it writes the parameters in place, and the previous step's outputs that were copied
        # back (kept until the next update is queued, so their memory is not reused early)
        self._token = self._wait = None
        self._donate = False
        if self._device.is_cuda:
            try:
                self._wait = StreamEvent(self._device)
            except (RuntimeError, OSError, ImportError) as e:   # no handler library (no compiler...)
                warnings.warn(f"optax_optimizer: XLA's stream cannot wait on tapegrad's through the FFI handler "
                              f"({e}); a DLPack token orders each step instead (slower)", RuntimeWarning,
                              stacklevel=3)
                self._token = zeros(1, dtype=types.float32, device=self._device)
            self._donate = _donation_aliases(self._device)
        self._in_flight = None
        # the state is donated (optax's moments are updated in place by XLA, step after step), and
        # on CUDA the parameters' views too (written in place); else the scratch: buffers of the
        # parameters' shapes that the new values are written into (the last step's outputs)
        self._donated = (0, 3) if self._donate else (2, 3)
        self._scratch = () if self._donate else [jnp.zeros_like(v) for v in views]
        wait = self._wait
        self._update = jax.jit(lambda ps, gs, sc, st, tok: _apply(transformation, ps, gs, sc, st, token=tok, wait=wait),
                               donate_argnums=self._donated, keep_unused=True)
        self._updates_with: dict = {}     # static extra arguments (value_fn...) -> their jitted update

    def _check_dtypes(self, views, where):
        """Raise unless JAX holds every parameter in its own dtype (float64 needs jax_enable_x64:
        without it to_jax gives a float32 copy, and the result could not be written back)."""
        for i, (p, v) in enumerate(zip(self.params, views)):
            if v.dtype != p.dtype.scalar.np_dtype:
                if p.dtype.scalar.size == 8 and not jax.config.jax_enable_x64:
                    raise TypeError(_x64_error(where, i, p))
                raise TypeError(f"{where}: params[{i}] is {p.dtype!r} but JAX sees it as {v.dtype}")

    def _views(self):
        """The JAX views of the parameters and of their gradients for this step, after the checks."""
        if self._has64 and not jax.config.jax_enable_x64:
            for i, p in enumerate(self.params):
                if p.dtype.scalar.size == 8:
                    raise TypeError(_x64_error("OptaxOptimizer.step", i, p))
        gviews = self._gviews
        for i, (p, was) in enumerate(zip(self.params, self._shapes)):
            if (p.ptr, p.shape, p.strides) != was:
                raise RuntimeError(f"OptaxOptimizer.step: params[{i}] changed memory or shape since the optimizer "
                                   "was built (build a new optimizer for new parameters)")
            g = p.grad
            if g is not gviews[i][0]:
                v = self._grad_view(i, p, g)
                gviews[i] = (g if _aliases(v, g) else _UNSET, v)   # a copy is remade next step
        vals = self._pviews
        if self._copied or self._donate:
            vals = list(vals)
            for i in self._copied:
                vals[i] = to_jax(self.params[i])
            for i, v in enumerate(vals):
                if v is None:    # donated last step, its output copied back: a new view
                    vals[i] = to_jax(self.params[i])
        return vals, [v for _, v in gviews]

    def _grad_view(self, i, p, g):
        if g is None:
            raise ValueError(f"OptaxOptimizer.step: params[{i}] has no gradient (create it with "
                             "requires_grad=True and run tape.backward first)")
        if (g.dtype, g.shape, g.device) != (p.dtype, p.shape, p.device):
            raise ValueError(f"OptaxOptimizer.step: params[{i}]'s gradient has dtype, shape and device "
                             f"{(g.dtype, g.shape, g.device)}, expected its parameter's "
                             f"{(p.dtype, p.shape, p.device)}")
        v = to_jax(g)
        if v.dtype != p.dtype.scalar.np_dtype:
            raise TypeError(f"OptaxOptimizer.step (gradients): params[{i}] is {p.dtype!r} but JAX sees its "
                            f"gradient as {v.dtype}")
        return v

    def _updater(self, extra):
        """The jitted update and the arguments it traces, for ``step``'s extra arguments:
        arrays (``value``, ``grad``; tapegrad arrays as JAX views) are traced, callables
        (``value_fn``) are closed over, one compiled update per distinct set of them."""
        if not extra:
            return self._update, None
        dynamic, static = {}, []
        for name in sorted(extra):
            v = extra[name]
            if isinstance(v, array) and isinstance(v.dtype, StructType):
                raise TypeError(f"OptaxOptimizer.step({name}=...): a struct array has no JAX equivalent")
            if callable(v) and not isinstance(v, (array, jax.Array)):
                static.append((name, v))
            else:
                dynamic[name] = jax.tree_util.tree_map(lambda x: to_jax(x) if isinstance(x, array) else x, v,
                                                       is_leaf=lambda x: isinstance(x, array))
        static = tuple(static)
        key = (tuple(dynamic), static)
        fn = self._updates_with.get(key)
        if fn is None:
            tx = self.transformation
            if len(self._updates_with) >= 16:    # a new value_fn object per step: don't keep them all
                self._updates_with.clear()
            wait = self._wait
            fn = self._updates_with[key] = jax.jit(
                lambda ps, gs, sc, st, tok, dyn: _apply(tx, ps, gs, sc, st, dyn, static, tok, wait),
                donate_argnums=self._donated, keep_unused=True)
        return fn, dynamic

    def step(self, **extra_args) -> None:
        """One optax update of every parameter from its ``.grad``, written back in place.

        A step that raises leaves optax's state and the parameters as they were (every check
        runs before the update).

        Args:
            **extra_args: passed to ``tx.update(grads, state, params, **extra_args)``, for
                transformations that need more than the gradients (``optax.lbfgs``: ``value``,
                ``grad``, ``value_fn``). Arrays (JAX arrays, numbers, tapegrad arrays, which
                are viewed zero-copy) are traced; callables such as ``value_fn`` (called on
                the parameters as a list of JAX arrays, inside the jitted update) are part of
                the compiled update: pass the same function object each step.

        Raises:
            ValueError: a parameter has no gradient, or one of another dtype/shape/device.
            TypeError: a float64 parameter while ``jax_enable_x64`` is off; a struct array among
                ``extra_args``; what ``tx.update`` raises for missing or unexpected arguments.
            RuntimeError: a parameter's memory or shape changed since the optimizer was built.
        """
        vals, grads = self._views()
        update, dynamic = self._updater(extra_args)
        # CUDA: the update waits for tapegrad's stream: through the event (its stream_wait call), or
        # a fresh view of the token (its DLPack handshake)
        if self._wait is not None:
            self._wait.record(self._device.stream.cuda_stream)
        token = None if self._token is None else to_jax(self._token)
        if dynamic is None:
            new, state, *_ = update(vals, grads, self._scratch, self.state, token)
        else:
            new, state, *_ = update(vals, grads, self._scratch, self.state, token, dynamic)
        self.state = _unique_buffers(state)   # the old state was donated: this is optax's state now
        if not self._donate:
            self._scratch = new                # donated too: the next step's new values go there
        self._write_back(new)

    def _write_back(self, new):
        """Copy the update's outputs into the parameters' memory, after the update finished
        (CPU: waited for; CUDA: tapegrad's stream waits for it, through one handshake)."""
        dev = self._device
        if dev.is_cpu:
            regions = []
            for p, raw, v in zip(self.params, self._raw, new):
                if raw is None:
                    copy(p, from_jax(v, dtype=p.dtype))
                else:
                    v.block_until_ready()     # (jax.block_until_ready(list) walks the tree: ~8x dearer)
                    regions.append((raw[0], v.unsafe_buffer_pointer(), raw[1]))
            # one native call for every contiguous parameter: a team of threads shares a large total
            copy_regions(regions)
            return
        # one handshake on one output: tapegrad's stream now waits for the update (all its
        # outputs become ready together), so the outputs' memory is copied from by pointer
        stream_wait_for(new[-1], dev)
        # written in place (donated views whose buffers XLA gave back to their new values): the
        # next step's views; any other parameter's memory must hold none of the outputs before
        # the copies write it
        inplace = [self._donate and v.unsafe_buffer_pointer() == p.ptr for p, v in zip(self.params, new)]
        if self._donate and not all(inplace):
            self._check_donated_memory(new)
        stream = dev.stream.cuda_stream
        for i, (p, raw, v, done) in enumerate(zip(self.params, self._raw, new, inplace)):
            if self._donate:
                self._pviews[i] = v if done else None   # a donated view is gone: a new one next step
            if done:
                continue
            if raw is None:
                copy(p, from_jax(v, dtype=p.dtype))
            else:
                cuda_memory.memcpy(raw[0], v.unsafe_buffer_pointer(), raw[1], stream)
        self._in_flight = None if all(inplace) else new

    def _check_donated_memory(self, new):
        """Raise if an output of the update other than a parameter's own new value took a
        parameter's memory (a donated view whose buffer XLA gave to another output): the
        parameters' memory would then hold optax's state. JAX pairs each donated input with an
        output of its shape and dtype in order, so this does not happen with the jaxlibs tested."""
        own = {p.ptr: i for i, p in enumerate(self.params)}
        leaves = [(f"the new value of params[{i}]", v) for i, v in enumerate(new)]
        leaves += [("optax's state", x) for x in jax.tree_util.tree_leaves(self.state) if isinstance(x, jax.Array)]
        for what, x in leaves:
            try:
                ptr = x.unsafe_buffer_pointer()
            except Exception:   # noqa: BLE001  no raw pointer (not a single-device array)
                continue
            i = own.get(ptr)
            if i is not None and x is not new[i]:
                raise RuntimeError(f"OptaxOptimizer.step: XLA placed {what} in the memory of params[{i}], whose view "
                                   "was donated to the update; the parameters no longer hold their values (a jaxlib "
                                   "that pairs donated buffers differently). Please report it with your jax version.")


def _check_distinct(params) -> None:
    """Raise ValueError when two parameters are one array or overlapping contiguous memory: each
    step writes every parameter's new value back, so the last write would win and the other
    update would be lost (torch's optimizers refuse duplicate parameters too)."""
    spans = []
    for i, p in enumerate(params):
        if p.size == 0:
            continue
        if p.is_contiguous:
            spans.append((p.ptr, p.ptr + p.nbytes, i))
        for j, q in enumerate(params[:i]):
            if (q.ptr, q.shape, q.strides) == (p.ptr, p.shape, p.strides) and q.device == p.device:
                raise ValueError(f"optax_optimizer: params[{j}] and params[{i}] are the same memory (each step "
                                 "writes both back: one update would be lost); pass each parameter once")
    spans.sort()
    for (a0, a1, i), (b0, b1, j) in zip(spans, spans[1:]):
        if b0 < a1 and params[i].device == params[j].device:
            i, j = min(i, j), max(i, j)
            raise ValueError(f"optax_optimizer: params[{i}] and params[{j}] overlap in memory (each step writes "
                             "both back: the overlapping elements would get only one update); pass disjoint arrays")


def optax_optimizer(transformation, params) -> OptaxOptimizer:
    """An optimizer object whose ``step()`` applies ``transformation`` to tapegrad ``params``.

    Args:
        transformation: an optax ``GradientTransformation`` (``optax.adam(1e-2)``, a chain...).
        params: tapegrad arrays (floating point, one device) whose ``.grad`` the tape writes.

    Returns:
        An ``OptaxOptimizer``.

    Raises:
        TypeError: not an optax transformation; a parameter that is not a floating-point array.
        ValueError: no parameters, parameters on several devices, or two parameters that are
            the same or overlapping (contiguous) memory.
    """
    return OptaxOptimizer(transformation, params)
