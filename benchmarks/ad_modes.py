"""Forward mode and second order (issue 26): tapegrad's Tape.jvp / Tape.hvp against its own
forward and backward, and JAX's jvp and jvp(grad) against its own forward and
value_and_grad, for the same functions, in the same run.

    python benchmarks/ad_modes.py [--device cpu] [--reps 7] [--n 1048576] [--sim-n 65536] [--steps 100]

Workloads:

* ``elementwise``: y = sin(x) exp(-x^2 / 4) + tanh(w x) on 2^20 elements, loss = sum(y) (an
  atomic_add per element in tapegrad, ``jnp.sum`` in JAX).
* ``simulation``: ``steps`` recorded in-place steps ``v -= dt sin(x) x; x += dt v`` (tapegrad
  saves x before each step), then loss = sum(cos(x) x^2); JAX runs the same steps in a
  ``lax.fori_loop`` under ``jit``.

Ratios (median times): jvp / forward (goal <= 1.5) and hvp / (forward + backward) (goal <= 2.5);
tapegrad's forward is the recorded forward (launches under a tape), its backward ``tape.backward``.
Writes benchmarks/results/ad_modes[_<device>].json.
"""
import argparse

import numpy as np

import tapegrad as tg

from _timing import median_time, write_results


@tg.kernel
def elem(x: tg.array[tg.float64], w: tg.array[tg.float64], y: tg.array[tg.float64], loss: tg.array[tg.float64]):
    i = tg.tid()
    v = tg.sin(x[i]) * tg.exp(-x[i] * x[i] * 0.25) + tg.tanh(w[i] * x[i])
    y[i] = v
    tg.atomic_add(loss, 0, v)


@tg.kernel
def step(x: tg.array[tg.float64], v: tg.array[tg.float64], dt: tg.float64):
    i = tg.tid()
    v[i] = v[i] - dt * tg.sin(x[i]) * x[i]
    x[i] = x[i] + dt * v[i]


@tg.kernel
def energy(x: tg.array[tg.float64], loss: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_add(loss, 0, tg.cos(x[i]) * x[i] * x[i])


DT = 0.01


def tapegrad_case(kind, n, steps, device, reps):
    rng = np.random.default_rng(0)
    x0, w0, u0 = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    sync = (lambda: tg.synchronize_device(device)) if device != "cpu" else (lambda: None)
    state = {}

    def forward():
        x = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
        loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
        tape = tg.Tape()
        if kind == "elementwise":
            w = tg.array(w0, dtype=tg.float64, device=device, requires_grad=True)
            y = tg.zeros(n, dtype=tg.float64, device=device, requires_grad=True)
            with tape:
                tg.launch(elem, n, inputs=[x, w], outputs=[y, loss], device=device)
        else:
            xs = tg.clone(x)
            v = tg.zeros(n, dtype=tg.float64, device=device, requires_grad=True)
            with tape:
                tg.copy(x, xs)
                for _ in range(steps):
                    tg.launch(step, n, inputs=[x, v, DT], device=device)
                tg.launch(energy, n, inputs=[x], outputs=[loss], device=device)
            x = xs
        state.update(tape=tape, x=x, loss=loss)

    forward()
    u = tg.array(u0, dtype=tg.float64, device=device)
    t_fwd = median_time(forward, reps, sync)
    t_bwd = median_time(lambda: (state["tape"].zero(), state["tape"].backward(loss=state["loss"])), reps, sync)
    t_jvp = median_time(lambda: state["tape"].jvp({state["x"]: u}), reps, sync)
    t_hvp = median_time(lambda: state["tape"].hvp(state["loss"], {state["x"]: u}), reps, sync)
    return dict(forward=t_fwd, backward=t_bwd, jvp=t_jvp, hvp=t_hvp,
                jvp_ratio=t_jvp / t_fwd, hvp_ratio=t_hvp / (t_fwd + t_bwd))


def jax_case(kind, n, steps, reps):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    x0, w0, u0 = (jnp.asarray(rng.normal(size=n)) for _ in range(3))

    if kind == "elementwise":
        def f(x):
            return jnp.sum(jnp.sin(x) * jnp.exp(-x * x * 0.25) + jnp.tanh(w0 * x))
    else:
        def f(x):
            def body(_, c):
                x, v = c
                v = v - DT * jnp.sin(x) * x
                return x + DT * v, v
            x, _ = jax.lax.fori_loop(0, steps, body, (x, jnp.zeros_like(x)))
            return jnp.sum(jnp.cos(x) * x * x)

    fwd = jax.jit(f)
    vg = jax.jit(jax.value_and_grad(f))
    jv = jax.jit(lambda x, u: jax.jvp(f, (x,), (u,)))
    hv = jax.jit(lambda x, u: jax.jvp(jax.grad(f), (x,), (u,))[1])

    def run(fn, *a):
        return lambda: jax.block_until_ready(fn(*a))
    t_fwd = median_time(run(fwd, x0), reps, lambda: None)
    t_vg = median_time(run(vg, x0), reps, lambda: None)
    t_jvp = median_time(run(jv, x0, u0), reps, lambda: None)
    t_hvp = median_time(run(hv, x0, u0), reps, lambda: None)
    return dict(forward=t_fwd, forward_backward=t_vg, jvp=t_jvp, hvp=t_hvp,
                jvp_ratio=t_jvp / t_fwd, hvp_ratio=t_hvp / t_vg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--sim-n", type=int, default=1 << 16)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    results = {}
    for kind, n in (("elementwise", a.n), ("simulation", a.sim_n)):
        t = tapegrad_case(kind, n, a.steps, a.device, a.reps)
        j = jax_case(kind, n, a.steps, a.reps)
        results[kind] = dict(n=n, steps=a.steps if kind == "simulation" else 1, tapegrad=t, jax=j)
        print(f"{kind} (n={n}{f', {a.steps} steps' if kind == 'simulation' else ''}):")
        print(f"  tapegrad: forward {t['forward'] * 1e3:.2f} ms, backward {t['backward'] * 1e3:.2f} ms, "
              f"jvp {t['jvp'] * 1e3:.2f} ms, hvp {t['hvp'] * 1e3:.2f} ms -> jvp/forward {t['jvp_ratio']:.2f}x, "
              f"hvp/(forward+backward) {t['hvp_ratio']:.2f}x")
        if j is not None:
            vg = j['forward_backward'] * 1e3
            print(f"  jax:      forward {j['forward'] * 1e3:.2f} ms, value_and_grad {vg:.2f} ms, "
                  f"jvp {j['jvp'] * 1e3:.2f} ms, jvp(grad) {j['hvp'] * 1e3:.2f} ms -> jvp/forward "
                  f"{j['jvp_ratio']:.2f}x, hvp/(forward+backward) {j['hvp_ratio']:.2f}x")
    suffix = "" if a.device == "cpu" else "_" + a.device.replace(":", "")
    print("wrote", write_results(f"ad_modes{suffix}", results, a.out))


if __name__ == "__main__":
    main()
