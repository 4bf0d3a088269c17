"""Every AD mode of a differentiable jax_kernel against the same function in jax.numpy (issue 27
item 5): forward, grad, jvp and the Hessian-vector product jvp(grad(f)), all under jax.jit, in
the same run (interleaved rounds, median).

    python benchmarks/ad_modes_jax.py [--device cpu|gpu] [--n 1048576] [--rounds 7]

The function: y = sin(x) exp(-x^2 / 4) + tanh(w x) on n float64 elements (a tapegrad kernel
wrapped by ``tg.jax_kernel(enable_backward=True)``, or the same expression in jax.numpy),
loss = sum(y) (``jnp.sum`` for both). Ratio: kernel op / jax.numpy (the goal: at or below 1).
Writes benchmarks/results/ad_modes_jax[_<device>].json.
"""
import argparse

import numpy as np

import tapegrad as tg

from _timing import compare, fmt_ratio, fmt_time, interleave, per_call, write_results


@tg.kernel
def wavy(x: tg.array[tg.float64], w: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * tg.exp(-x[i] * x[i] * 0.25) + tg.tanh(w[i] * x[i])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="JAX platform: cpu or gpu")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    dev = next(d for d in jax.devices() if d.platform == a.device)
    rng = np.random.default_rng(0)
    x, w, u = (jax.device_put(jnp.asarray(rng.normal(size=a.n)), dev) for _ in range(3))
    k = tg.jax_kernel(wavy, enable_backward=True)

    def f_kernel(x, w):
        return jnp.sum(k(x, w)[0])

    def f_native(x, w):
        return jnp.sum(jnp.sin(x) * jnp.exp(-x * x * 0.25) + jnp.tanh(w * x))

    def modes(f):
        return {
            "forward": jax.jit(f),
            "grad": jax.jit(jax.grad(f)),
            "jvp": jax.jit(lambda x, w, u: jax.jvp(lambda x: f(x, w), (x,), (u,))[1]),
            "hvp": jax.jit(lambda x, w, u: jax.jvp(jax.grad(lambda x: f(x, w)), (x,), (u,))[1]),
        }

    mk, mn = modes(f_kernel), modes(f_native)
    rows = []
    print(f"n = {a.n}, device {dev}, float64, jit; median of {a.rounds} interleaved rounds")
    for mode in mk:
        args = (x, w) if mode in ("forward", "grad") else (x, w, u)
        np.testing.assert_allclose(np.asarray(mk[mode](*args)), np.asarray(mn[mode](*args)), rtol=1e-9, atol=1e-9)
        calls = 5
        samples = interleave({"kernel": per_call(lambda: jax.block_until_ready(mk[mode](*args)), calls),
                              "jax.numpy": per_call(lambda: jax.block_until_ready(mn[mode](*args)), calls)},
                             rounds=a.rounds)
        c = compare(samples, "kernel", "jax.numpy")
        rows.append(dict(mode=mode, kernel_s=c.ours, native_s=c.peer, ratio=c.ratio))
        print(f"  {mode:8s} kernel op {fmt_time(c.ours, 'ms')}  jax.numpy {fmt_time(c.peer, 'ms')}  "
              f"ratio {fmt_ratio(c.ratio)}")
    suffix = "" if a.device == "cpu" else "_" + a.device
    print("wrote", write_results(f"ad_modes_jax{suffix}", {"device": str(dev), "n": a.n, "rows": rows}, a.out))


if __name__ == "__main__":
    main()
