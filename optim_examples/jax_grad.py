"""Parameters declared in JAX, a tapegrad kernel as a JAX primitive (``tg.jax_kernel`` with
``enable_backward=True``), gradients from ``jax.grad`` and steps from optax — all inside one
``jax.jit``ted training step.

    python -m optim_examples.jax_grad
"""
import jax
import jax.numpy as jnp
import optax

import tapegrad as tg
from optim_examples.common import rosenbrock_each, start_points, train

rosenbrock_jax = tg.jax_kernel(rosenbrock_each, enable_backward=True)


def objective(points):
    out = rosenbrock_jax(points)
    return jnp.mean(out[0] if isinstance(out, (tuple, list)) else out)


def main(steps=1500, device="cpu"):
    tx = optax.adam(0.02)
    state = [jax.device_put(start_points(5), tg.device_to_jax(device))]
    state.append(tx.init(state[0]))

    @jax.jit
    def train_step(points, opt_state):
        value, grad = jax.value_and_grad(objective)(points)
        updates, opt_state = tx.update(grad, opt_state, points)
        return optax.apply_updates(points, updates), opt_state, value

    def step():
        state[0], state[1], value = train_step(state[0], state[1])
        return value

    return train(step, steps)


if __name__ == "__main__":
    main()
