"""Parameters declared in tapegrad, stepped by optax through ``tg.optax_optimizer``: one jitted
optax update per step on zero-copy JAX views of the values and of the tape's gradients, written
back in place (no host round trip, traced once).

    python -m optim_examples.optax_adam
"""
import optax

import tapegrad as tg
from optim_examples.common import start_points, train_on_tape


def main(steps=1500, device="cpu"):
    p = tg.array(start_points(4), dtype=tg.vec2, device=device, requires_grad=True)
    return train_on_tape(p, tg.optax_optimizer(optax.adam(0.02), [p]).step, steps)


if __name__ == "__main__":
    main()
