"""optax over tapegrad parameters in one call: ``tg.optax_optimizer(optax.adam(1e-2), [xs, ys])``.

``step()`` runs one jitted optax update (``tx.update`` + ``optax.apply_updates``) on zero-copy
JAX views of the parameters and of the gradients the tape wrote, keeps optax's state in JAX,
and writes the new values back into the tapegrad buffers with a device-to-device copy on
tapegrad's stream (no host round trip). The update is traced once per set of shapes and
dtypes, not per step.
"""
from __future__ import annotations

import jax
import optax

from tapegrad.array import array, copy

from .jax import from_jax, to_jax

__all__ = ["OptaxOptimizer", "optax_optimizer"]


def _apply(tx, params, grads, state):
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state


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
        self.transformation = transformation
        self.params = params
        self._shapes = [(p.ptr, p.shape, p.strides) for p in params]
        self.state = transformation.init([to_jax(p) for p in params])
        # the state is donated: optax's moments are updated in place by XLA, step after step
        self._update = jax.jit(lambda ps, gs, st: _apply(transformation, ps, gs, st), donate_argnums=(2,))

    def _views(self):
        vals, grads = [], []
        for i, (p, was) in enumerate(zip(self.params, self._shapes)):
            if (p.ptr, p.shape, p.strides) != was:
                raise RuntimeError(f"OptaxOptimizer.step: params[{i}] changed memory or shape since the optimizer "
                                   "was built (build a new optimizer for new parameters)")
            g = p.grad
            if g is None:
                raise ValueError(f"OptaxOptimizer.step: params[{i}] has no gradient (create it with "
                                 "requires_grad=True and run tape.backward first)")
            # views are made per step: on CUDA the DLPack handshake orders XLA's stream after
            # the tapegrad work (the backward) that wrote them
            vals.append(to_jax(p))
            grads.append(to_jax(g))
        return vals, grads

    def step(self) -> None:
        """One optax update of every parameter from its ``.grad``, written back in place.

        Raises:
            ValueError: a parameter has no gradient.
            RuntimeError: a parameter's memory or shape changed since the optimizer was built.
        """
        vals, grads = self._views()
        new, self.state = self._update(vals, grads, self.state)
        for p, v in zip(self.params, new):
            copy(p, from_jax(v, dtype=p.dtype))


def optax_optimizer(transformation, params) -> OptaxOptimizer:
    """An optimizer object whose ``step()`` applies ``transformation`` to tapegrad ``params``.

    Args:
        transformation: an optax ``GradientTransformation`` (``optax.adam(1e-2)``, a chain...).
        params: tapegrad arrays (floating point, one device) whose ``.grad`` the tape writes.

    Returns:
        An ``OptaxOptimizer``.

    Raises:
        TypeError: not an optax transformation; a parameter that is not a floating-point array.
        ValueError: no parameters, or parameters on several devices.
    """
    return OptaxOptimizer(transformation, params)
