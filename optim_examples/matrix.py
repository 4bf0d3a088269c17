"""The declarer-by-optimizer matrix: parameters declared in tapegrad, torch, paddle or JAX,
stepped by torch's Adam, paddle's Adam, optax's adam or tapegrad's own ``tg.optim.Adam``, with
gradients from a tapegrad tape — 16 pairs, all on the same loss, all converging alike.

    python -m optim_examples.matrix            # the table (what `python -m optim_examples` shows)

How each declarer becomes a tapegrad parameter (no copy per step in any pair):

- tapegrad: the array itself;
- torch: ``tg.from_torch(t)`` shares ``t``'s memory and ``t.grad``;
- paddle: ``tg.from_paddle(p)`` shares ``p``'s memory and its gradient;
- JAX: JAX arrays are immutable, so the parameter is one clone of ``tg.from_jax(j)`` made
  when it is declared; every step then updates that clone in place, and ``tg.to_jax(param)``
  hands the trained values back to JAX without a copy.

How each optimizer reaches the parameter: torch and paddle step zero-copy views
(``tg.to_torch``, ``tg.to_paddle``) whose gradients *are* the tape's gradient buffers; optax
runs through ``tg.optax_optimizer`` (one jitted update on zero-copy JAX views); ``tg.optim.Adam``
is a fused tapegrad kernel.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import time

import numpy as np

import tapegrad as tg

DECLARERS = ("tapegrad", "torch", "paddle", "jax")
OPTIMIZERS = ("torch", "paddle", "optax", "tapegrad")
NEEDS = {"tapegrad": (), "torch": ("torch",), "paddle": ("paddle",), "jax": ("jax",), "optax": ("jax", "optax")}
TARGET = np.array([1.0, -2.0])
LR = 0.05


@tg.kernel
def loss_kernel(xs: tg.array2d[float], loss: tg.array[float]):
    i = tg.tid()
    tg.atomic_add(loss, 0, (xs[i, 0] - 1.0) ** 2.0 + (xs[i, 1] + 2.0) ** 2.0)


@dataclasses.dataclass(frozen=True)
class PairResult:
    """One pair's run. ``history`` holds the loss per step (for the convergence plot);
    ``zero_copy`` is False only for JAX-declared parameters, cloned once when declared (never per step)."""

    declared_in: str
    optimizer: str
    first_loss: float
    final_loss: float
    steps_per_second: float
    zero_copy: bool
    converged: bool
    history: tuple


def missing(name: str) -> list:
    """The frameworks a declarer or optimizer needs that are not installed."""
    return [m for m in NEEDS[name] if importlib.util.find_spec(m) is None]


def initial_values(seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(64, 2)).astype(np.float32)


def declare(where: str, init: np.ndarray, device: str = "cpu"):
    """``(native parameter object, tapegrad array sharing its memory and gradient)``."""
    if where == "tapegrad":
        a = tg.array(init, dtype=tg.float32, requires_grad=True, device=device)
        return a, a
    if where == "torch":
        import torch
        t = torch.tensor(init, requires_grad=True, device=tg.device_to_torch(device))
        return t, tg.from_torch(t)
    if where == "paddle":
        import paddle
        p = paddle.to_tensor(init, stop_gradient=False, place=tg.device_to_paddle(device))
        return p, tg.from_paddle(p)
    if where == "jax":
        import jax
        j = jax.device_put(init, tg.device_to_jax(device))
        return j, tg.clone(tg.from_jax(j), requires_grad=True)    # the one copy: JAX arrays are immutable
    raise ValueError(f"declare: unknown declarer {where!r} (expected one of {DECLARERS})")


def make_step(optimizer: str, param):
    """A zero-argument function applying one step of ``optimizer`` to ``param`` from ``param.grad``."""
    if optimizer == "torch":
        import torch
        return torch.optim.Adam([tg.to_torch(param)], lr=LR).step
    if optimizer == "paddle":
        import paddle
        return paddle.optimizer.Adam(learning_rate=LR, parameters=[tg.to_paddle(param)]).step
    if optimizer == "optax":
        import optax
        return tg.optax_optimizer(optax.adam(LR), [param]).step
    if optimizer == "tapegrad":
        return tg.optim.Adam([param], lr=LR).step
    raise ValueError(f"make_step: unknown optimizer {optimizer!r} (expected one of {OPTIMIZERS})")


WARMUP = 20   # steps not timed: the first ones compile kernels, jit optax, warm caches


def run_pair(where: str, optimizer: str, steps: int = 300, device: str = "cpu", progress=None) -> PairResult:
    """Train one pair for ``steps`` steps on the shared loss.

    Args:
        progress: called as ``progress(step)`` now and then (None: silent).
    Returns:
        The pair's ``PairResult``; its steps/s is measured after the first ``WARMUP`` steps
        (all of them when ``steps <= WARMUP``).
    """
    native, param = declare(where, initial_values(), device)
    loss = tg.zeros(1, dtype=tg.float32, requires_grad=True, device=device)
    step = make_step(optimizer, param)
    tape = tg.Tape()
    with tape:
        tg.launch(loss_kernel, dim=len(param), inputs=[param], outputs=[loss])
    history = [float(loss.numpy()[0])]
    warmup = WARMUP if steps > WARMUP else 0
    t0 = time.perf_counter()
    for k in range(steps):
        if k == warmup:
            t0 = time.perf_counter()
        tape.zero()
        tape.backward(loss=loss)
        step()
        loss.zero_()
        tg.launch(loss_kernel, dim=len(param), inputs=[param], outputs=[loss])
        history.append(float(loss.numpy()[0]))
        if progress is not None and (k + 1) % 50 == 0:
            progress(k + 1)
    rate = (steps - warmup) / (time.perf_counter() - t0)
    mean = param.numpy().mean(axis=0)
    converged = bool(np.allclose(mean, TARGET, atol=0.05))
    return PairResult(where, optimizer, history[0], history[-1], rate, zero_copy=where != "jax", converged=converged,
                      history=tuple(history))


def run_matrix(steps: int = 300, device: str = "cpu", out=print, pairs=None) -> list:
    """Run every pair whose frameworks are installed; ``out`` gets one line per skipped pair.

    Returns:
        The ``PairResult`` of every pair that ran.
    """
    results = []
    todo = pairs or [(d, o) for d in DECLARERS for o in OPTIMIZERS]
    for n, (where, opt) in enumerate(todo, 1):
        lack = sorted(set(missing(where) + missing(opt)))
        if lack:
            out(f"[skip] {where} params x {opt} Adam: needs {', '.join(lack)}")
            continue
        r = run_pair(where, opt, steps, device,
                     progress=lambda k, n=n: print(f"\r  pair {n}/{len(todo)} ({where} x {opt}): step {k}/{steps}",
                                                   end="", flush=True))
        print("\r" + " " * 70 + "\r", end="")
        results.append(r)
    return results


def table(results) -> str:
    """The results as a text table."""
    lines = [f"{'declared in':<12} {'optimizer':<16} {'first loss':>11} {'final loss':>11} {'steps/s':>9} "
             f"{'zero-copy':>9} {'converged':>9}"]
    for r in results:
        name = {"tapegrad": "tg.optim.Adam", "optax": "optax.adam"}.get(r.optimizer, f"{r.optimizer} Adam")
        lines.append(f"{r.declared_in:<12} {name:<16} {r.first_loss:>11.4f} {r.final_loss:>11.2e} "
                     f"{r.steps_per_second:>9.0f} {'yes' if r.zero_copy else '1 clone':>9} "
                     f"{'yes' if r.converged else 'NO':>9}")
    return "\n".join(lines)


# one look per declaring framework: colour, line style and width (wide first, so lines that
# coincide, as they should, stay visible under each other)
STYLE = {"tapegrad": ("#1f77b4", "-", 5.0), "torch": ("#d62728", "--", 3.2),
         "paddle": ("#2ca02c", "-.", 2.2), "jax": ("#ff7f0e", ":", 1.6)}
OPTIMIZER_NAMES = {"torch": "torch.optim.Adam", "paddle": "paddle.optimizer.Adam", "optax": "optax.adam",
                   "tapegrad": "tg.optim.Adam"}


def plot(results, path: str) -> str | None:
    """Write the showcase figure (``figure``) to ``path``; None when matplotlib is missing
    (``pip install "tapegrad[examples]"``)."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = figure(results)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def figure(results):
    """The showcase figure: one panel per optimizer with the loss curve of each declaring
    framework (own colour and line style), and a panel of steps/s per pair (measured after
    warm-up). Needs matplotlib."""
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(13, 8.5))
    grid = fig.add_gridspec(2, len(OPTIMIZERS), height_ratios=(1.15, 1.0), hspace=0.42, wspace=0.12)
    first = None
    for col, opt in enumerate(OPTIMIZERS):
        ax = fig.add_subplot(grid[0, col], sharey=first)
        first = first or ax
        ran = [r for r in results if r.optimizer == opt]
        for r in sorted(ran, key=lambda r: DECLARERS.index(r.declared_in)):
            color, dash, width = STYLE[r.declared_in]
            ax.semilogy(r.history, color=color, linestyle=dash, linewidth=width, label=f"declared in {r.declared_in}")
        if ran:
            spread = max(abs(a - b) / max(abs(b), 1e-30) for r in ran for a, b in zip(r.history, ran[0].history))
            note = ("" if len(ran) < 2 else f"the {len(ran)} curves are identical" if spread == 0 else
                    f"the {len(ran)} curves differ by {spread:.1e} at most")
        else:
            note = "not installed"
        ax.set_title(f"stepped by {OPTIMIZER_NAMES[opt]}", fontsize=10)
        ax.text(0.97, 0.97, note, transform=ax.transAxes, ha="right", va="top", fontsize=8, color="0.3")
        ax.set_xlabel("step")
        ax.grid(True, which="major", alpha=0.3)
        if col == 0:
            ax.set_ylabel("loss (log scale)")
        else:
            ax.tick_params(labelleft=False)
    handles = [plt.Line2D([], [], color=c, linestyle=d, linewidth=w) for c, d, w in STYLE.values()]
    fig.legend(handles, [f"parameters declared in {d}" for d in STYLE], loc="upper center", ncol=4, fontsize=9,
               frameon=False, bbox_to_anchor=(0.5, 0.955))
    # steps/s: a group of bars per optimizer, one bar per declarer
    ax = fig.add_subplot(grid[1, :])
    width = 0.8 / len(DECLARERS)
    for k, where in enumerate(DECLARERS):
        xs, ys = [], []
        for col, opt in enumerate(OPTIMIZERS):
            hit = [r for r in results if r.declared_in == where and r.optimizer == opt]
            if hit:
                xs.append(col + (k - (len(DECLARERS) - 1) / 2) * width)
                ys.append(hit[0].steps_per_second)
        bars = ax.bar(xs, ys, width * 0.92, color=STYLE[where][0], alpha=0.85, label=f"declared in {where}")
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax.set_xticks(range(len(OPTIMIZERS)), [OPTIMIZER_NAMES[o] for o in OPTIMIZERS])
    ax.set_ylabel("steps per second")
    ax.set_title(f"speed of a training step (tape backward + optimizer step + forward), after {WARMUP} warm-up "
                 "steps", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.margins(y=0.15)
    ax.legend(fontsize=8, ncol=len(DECLARERS), loc="upper left")
    fig.suptitle("tapegrad: the same loss, parameters declared in any framework, stepped by any optimizer",
                 fontsize=13, y=0.995)
    return fig


def main(steps: int = 300, device: str = "cpu", plot_path: str | None = "optim_matrix.png") -> list:
    """Run the matrix, print the table and write the plot; returns the results."""
    print(f"parameters declared in {', '.join(DECLARERS)} x optimizers {', '.join(OPTIMIZERS)}; "
          f"{steps} steps each on {device}")
    results = run_matrix(steps, device)
    print(table(results))
    if plot_path:
        written = plot(results, plot_path)
        print(f"convergence plot: {written}" if written else
              "convergence plot: skipped (matplotlib is not installed: pip install matplotlib)")
    return results


if __name__ == "__main__":
    import sys

    from optim_examples.common import quiet_third_party
    quiet_third_party()
    sys.exit(0 if all(r.converged for r in main()) else 1)
