"""What the examples share: the Rosenbrock kernels, starting points and the training loops.

Every example minimises the mean Rosenbrock function ``(1 - x)^2 + 100 (y - x^2)^2`` over 64
points (minimum at (1, 1)), so their numbers compare directly.
"""
import logging
import os
import warnings

import numpy as np

import tapegrad as tg


def quiet_third_party() -> None:
    """Keep the frameworks' own chatter out of the examples' output: paddle's "No ccache found"
    warning (it imports its C++-extension builder), JAX's INFO line about backends it cannot
    load (TPU), matplotlib's first-run font cache line, and the C++ logs of XLA and paddle
    below warnings. tapegrad's one line per kernel build stays (``tg.config.verbose = False``
    silences it)."""
    warnings.filterwarnings("ignore", message="No ccache found")
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)       # "generated new fontManager"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")   # XLA's C++ logging (read when jaxlib loads)
    os.environ.setdefault("GLOG_minloglevel", "1")       # paddle's C++ logging (read when paddle loads)


@tg.kernel
def rosenbrock(p: tg.array[tg.vec2], loss: tg.array[float]):
    """Sum of the Rosenbrock function over the points (one scalar loss)."""
    i = tg.tid()
    x = p[i][0]
    y = p[i][1]
    tg.atomic_add(loss, 0, (1.0 - x) * (1.0 - x) + 100.0 * (y - x * x) * (y - x * x))


@tg.kernel
def rosenbrock_each(p: tg.array[tg.vec2], out: tg.array[float]):
    """The Rosenbrock function of each point (one value per point)."""
    i = tg.tid()
    x = p[i][0]
    y = p[i][1]
    out[i] = (1.0 - x) * (1.0 - x) + 100.0 * (y - x * x) * (y - x * x)


def start_points(seed: int) -> np.ndarray:
    """64 starting points in [-1.5, 1.5]^2, float32, shape (64, 2)."""
    return np.random.default_rng(seed).uniform(-1.5, 1.5, size=(64, 2)).astype(np.float32)


def train(step, steps: int, every: int = 500):
    """Call ``step()`` (which returns the loss) ``steps`` times, printing progress.

    Returns:
        ``(first loss, last loss)``.
    """
    first = value = None
    for t in range(1, steps + 1):
        value = float(step())
        first = value if first is None else first
        if t == 1 or t % every == 0:
            print(f"  step {t:5d}  mean Rosenbrock {value:.6f}")
    return first, value


def train_on_tape(p, optimizer_step, steps: int, device=None):
    """Minimise the mean Rosenbrock of tapegrad points ``p`` (a vec2 array with a gradient):
    each step records the kernel on a tape, backpropagates into ``p.grad`` and calls
    ``optimizer_step()`` (any optimizer that reads ``p.grad`` and updates ``p`` in place).

    Returns:
        ``(first loss, last loss)``.
    """
    loss = tg.zeros(1, dtype=float, device=device or p.device, requires_grad=True)

    def step():
        loss.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(rosenbrock, dim=len(p), inputs=[p], outputs=[loss])
        tape.backward(loss=loss)
        optimizer_step()
        tape.zero()
        return float(loss.numpy()[0]) / len(p)

    return train(step, steps)


def share_near_minimum(points: np.ndarray) -> float:
    """The fraction of points within 0.1 of the minimum (1, 1)."""
    return float(np.mean(np.linalg.norm(points.reshape(-1, 2) - 1.0, axis=1) < 0.1))
