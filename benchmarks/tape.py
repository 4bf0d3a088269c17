"""Tape cost side by side with NVIDIA Warp (when `warp-lang` is installed): backward over 100
recorded small launches (per launch) and `tape.zero()`, on the CPU (or --device cuda:0).

    python benchmarks/tape.py [--device cpu] [--reps 50]

Prints a table and writes benchmarks/results/tape.json. Figures are ratios tapegrad / peer
measured in the same run; absolute times count only from a quiet (GPU) machine.
"""
import argparse
import json
import pathlib
import time

import numpy as np

N_LAUNCHES = 100
N = 64


def _best(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_tapegrad(device, reps):
    import tapegrad as tg

    @tg.kernel
    def step(x: tg.array[float], y: tg.array[float]):
        i = tg.tid()
        y[i] = tg.sin(x[i]) * 0.5 + x[i]

    xs = [tg.array(np.linspace(0, 1, N), dtype=float, device=device, requires_grad=True)]
    xs += [tg.zeros(N, device=device, requires_grad=True) for _ in range(N_LAUNCHES)]
    tape = tg.Tape()
    with tape:
        for k in range(N_LAUNCHES):
            tg.launch(step, dim=N, inputs=[xs[k]], outputs=[xs[k + 1]])
    seed = {xs[-1]: tg.array(np.ones(N), dtype=float, device=device)}

    def backward():
        tape.backward(grads=seed)
        tg.synchronize_device(device)

    def zero():
        tape.zero()
        tg.synchronize_device(device)

    backward()
    return _best(backward, reps) / N_LAUNCHES, _best(zero, reps)


def bench_warp(device, reps):
    import warp as wp
    wp.config.quiet = True
    wp.init()

    @wp.kernel
    def step(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = wp.sin(x[i]) * 0.5 + x[i]

    xs = [wp.array(np.linspace(0, 1, N), dtype=float, device=device, requires_grad=True)]
    xs += [wp.zeros(N, dtype=float, device=device, requires_grad=True) for _ in range(N_LAUNCHES)]
    tape = wp.Tape()
    with tape:
        for k in range(N_LAUNCHES):
            wp.launch(step, dim=N, inputs=[xs[k]], outputs=[xs[k + 1]], device=device)
    g = wp.array(np.ones(N), dtype=float, device=device)

    def backward():
        # Warp's recommended pattern: the output owns its grad; backward copies into it
        tape.backward(grads={xs[-1]: g})
        wp.synchronize_device(device)

    def zero():
        tape.zero()
        wp.synchronize_device(device)

    backward()
    return _best(backward, reps) / N_LAUNCHES, _best(zero, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    ours = bench_tapegrad(args.device, args.reps)
    try:
        peer, peer_name = bench_warp(args.device, args.reps), "warp"
    except ImportError:
        peer, peer_name = None, None
    rows = [("backward, per launch", 0), ("tape.zero()", 1)]
    out = {"device": args.device, "peer": peer_name, "results": []}
    print(f"{'measure':24s} {'tapegrad':>12s} {peer_name or '-':>12s} {'ratio':>8s}")
    for name, k in rows:
        ratio = ours[k] / peer[k] if peer else None
        print(f"{name:24s} {ours[k] * 1e6:10.2f}us {(peer[k] * 1e6 if peer else float('nan')):10.2f}us "
              f"{(f'{ratio:.2f}x' if ratio else '-'):>8s}")
        out["results"].append({"measure": name, "tapegrad_s": ours[k], "peer_s": peer[k] if peer else None,
                               "ratio": ratio})
    res = pathlib.Path(__file__).parent / "results"
    res.mkdir(exist_ok=True)
    (res / "tape.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
