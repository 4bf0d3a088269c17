"""JAX interop overhead, side by side with NVIDIA Warp (SPEC B16, R21-R22).

Measures, in one run, interleaved round by round (``_timing``):

    kernel_call   a jitted 64-element ``jax_kernel`` (out = 3 * x), ``block_until_ready`` each
                  call: tapegrad vs Warp's ``jax_kernel`` (target <= 0.3x) and vs the jnp op
                  ``jax.jit(lambda x: 3 * x)`` (the floor: XLA's own dispatch)
    vmap_call     the same kernel under ``jax.jit(jax.vmap(...))`` over 8 x 64 (reported)
    grad_call     ``jax.jit(jax.grad(sum(k(x)**2)))`` with ``enable_backward=True`` (reported)
    callable_call a jitted ``jax_callable`` launching the kernel (Python runs per call, by nature)
    eager_call    the kernel called without ``jax.jit``, vs the eager jnp op (Warp's eager call
                  compiles a new XLA executable each time, ~30 ms: not timed)
    from_jax      ``from_jax`` of a 10-element array (target <= 0.5x Warp)
    to_jax        ``to_jax`` of a 10-element array (target <= 0.5x Warp)

    python benchmarks/interop_jax.py                  # CPU (JAX's default device)
    python benchmarks/interop_jax.py --rounds 9 --calls 5000

Results: ``benchmarks/results/interop_jax_<platform>.json``.
"""
import argparse
import os
import platform

import jax
import jax.numpy as jnp
import numpy as np

import tapegrad as tg

from _peer import warp_or_none
from _timing import compare, fmt_ratio, fmt_time, interleave, per_call, write_results

TARGETS = {"kernel_call": 0.3, "from_jax": 0.5, "to_jax": 0.5}


@tg.kernel
def tg_triple(x: tg.array[tg.float32], y: tg.array[tg.float32]):
    i = tg.tid()
    y[i] = 3.0 * x[i]


def tg_callable_body(x: tg.array[tg.float32], y: tg.array[tg.float32]):
    tg.launch(tg_triple, dim=x.shape, inputs=[x], outputs=[y])


def warp_kernels(wp):
    @wp.kernel
    def wp_triple(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
        i = wp.tid()
        y[i] = 3.0 * x[i]

    def wp_callable_body(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
        wp.launch(wp_triple, dim=x.shape, inputs=[x], outputs=[y])
    return wp_triple, wp_callable_body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    wp = warp_or_none()
    dev = jax.devices()[0]
    plat = dev.platform
    x = jnp.arange(64, dtype=jnp.float32)
    xb = jnp.arange(8 * 64, dtype=jnp.float32).reshape(8, 64)

    k = tg.jax_kernel(tg_triple)
    kb = tg.jax_kernel(tg_triple, enable_backward=True)
    ours = {
        "kernel_call": jax.jit(lambda x: k(x)[0]),
        "vmap_call": jax.jit(jax.vmap(lambda x: k(x)[0])),
        "grad_call": jax.jit(jax.grad(lambda x: jnp.sum(kb(x)[0] ** 2))),
    }
    jnp_op = jax.jit(lambda x: 3 * x)
    peer = {}
    if wp is not None:
        wp_triple, wp_body = warp_kernels(wp)
        wk = wp.jax_kernel(wp_triple)
        peer["kernel_call"] = jax.jit(lambda x: wk(x)[0])
        wkb = wp.jax_kernel(wp_triple, enable_backward=True)
        wc = wp.jax_callable(wp_body)
        candidates = {"vmap_call": (jax.jit(jax.vmap(lambda x: wk(x)[0])), xb),
                      "grad_call": (jax.jit(jax.grad(lambda x: jnp.sum(wkb(x)[0] ** 2))), x),
                      "callable_call": (jax.jit(lambda x: wc(x)[0]), x)}
        for name, (fn, inp) in candidates.items():
            try:
                fn(inp).block_until_ready()
                peer[name] = fn
            except Exception:  # noqa: BLE001  a Warp version that refuses: the row is reported without a peer
                pass
    ours["eager_call"] = lambda x: k(x)[0]      # no jit: tapegrad's Python per call + JAX's dispatch
    tc = tg.jax_callable(tg_callable_body)
    ours["callable_call"] = jax.jit(lambda x: tc(x)[0])
    inputs = {"kernel_call": x, "vmap_call": xb, "grad_call": x, "eager_call": x, "callable_call": x}
    rows = []
    for name, fn in ours.items():
        inp = inputs[name]
        ref = np.asarray(fn(inp))
        samplers = {"tapegrad": per_call(lambda fn=fn, inp=inp: fn(inp).block_until_ready(), args.calls)}
        if name in peer:
            pf = peer[name]
            assert np.allclose(np.asarray(pf(inp)), ref), name
            samplers["warp"] = per_call(lambda pf=pf, inp=inp: pf(inp).block_until_ready(), args.calls)
        if name == "kernel_call":
            samplers["jnp"] = per_call(lambda: jnp_op(x).block_until_ready(), args.calls)
        if name == "eager_call":   # Warp's eager call re-traces and re-compiles every time (~30 ms): left out
            samplers["jnp"] = per_call(lambda: (3 * x).block_until_ready(), args.calls)
        s = interleave(samplers, args.rounds)
        c = compare(s, "tapegrad", "warp")
        j = compare(s, "tapegrad", "jnp") if "jnp" in s else None
        rows.append({"name": name, "tapegrad_us": c.ours * 1e6, "warp_us": c.peer and c.peer * 1e6,
                     "ratio_vs_warp": c.ratio, "jnp_us": j.peer * 1e6 if j else None,
                     "ratio_vs_jnp": j.ratio if j else None, "target": TARGETS.get(name)})
    # conversions (CPU arrays: the CPU is where DLPack aliasing is the question)
    jx = jnp.arange(10, dtype=jnp.float32)
    ta = tg.array(np.ones(10, np.float32), device="cpu")
    conv = {"from_jax": ({"tapegrad": per_call(lambda: tg.from_jax(jx), args.calls * 5)},),
            "to_jax": ({"tapegrad": per_call(lambda: tg.to_jax(ta), args.calls * 5)},)}
    if wp is not None:
        wa = wp.array(np.ones(10, np.float32), device="cpu")
        conv["from_jax"][0]["warp"] = per_call(lambda: wp.from_jax(jx), args.calls * 5)
        conv["to_jax"][0]["warp"] = per_call(lambda: wp.to_jax(wa), args.calls * 5)
    for name, (samplers,) in conv.items():
        c = compare(interleave(samplers, args.rounds), "tapegrad", "warp")
        rows.append({"name": name, "tapegrad_us": c.ours * 1e6, "warp_us": c.peer and c.peer * 1e6,
                     "ratio_vs_warp": c.ratio, "jnp_us": None, "ratio_vs_jnp": None, "target": TARGETS.get(name)})
    print(f"JAX interop on {plat} ({dev}), jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, {args.rounds} rounds x {args.calls} calls (median)")
    print(f"{'measure':<12} {'tapegrad':>11} {'warp':>11} {'vs warp':>8} {'target':>7} {'jnp op':>11} {'vs jnp':>7}")
    for r in rows:
        t = f"<={r['target']}" if r["target"] else ""
        print(f"{r['name']:<12} {fmt_time(r['tapegrad_us'] / 1e6)} {fmt_time(r['warp_us'] and r['warp_us'] / 1e6)} "
              f"{fmt_ratio(r['ratio_vs_warp']):>8} {t:>7} {fmt_time(r['jnp_us'] and r['jnp_us'] / 1e6)} "
              f"{fmt_ratio(r['ratio_vs_jnp']):>7}")
    path = write_results(f"interop_jax_{plat}", {"platform": plat, "device": str(dev), "jax": jax.__version__,
                                                 "rows": rows}, args.out)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
