"""Tape cost side by side with NVIDIA Warp (when `warp-lang` is installed): recording 100 small
launches on a new tape and the backward over them (both per launch) and `tape.zero()`, on the CPU
(or --device cuda:0). The same launches without a tape give the plain launch cost, and the last
row is tapegrad's record / plain launch ratio, measured interleaved (goal <= 1.2x). On CUDA
also the backward captured once into a CUDA graph and replayed (per launch): the fastest way to
replay many small adjoints (docs/graphs.md, "Capturing a backward pass").

    python benchmarks/tape.py [--device cpu] [--reps 50]

Prints a table and writes benchmarks/results/tape.json. Figures are ratios tapegrad / peer
measured in the same run; absolute times count only from a quiet (GPU) machine.
"""
import argparse

import numpy as np

from _peer import warp_or_none
from _timing import compare, fmt_ratio, fmt_time, interleave, per_call, write_results

N_LAUNCHES = 100
N = 64


def bench_tapegrad(device):
    """tapegrad's (backward, zero, captured backward or None, record, plain launches) operations
    over a tape of N_LAUNCHES launches."""
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

    def record():
        with tg.Tape():
            for k in range(N_LAUNCHES):
                tg.launch(step, dim=N, inputs=[xs[k]], outputs=[xs[k + 1]])
        tg.synchronize_device(device)

    def plain():
        for k in range(N_LAUNCHES):
            tg.launch(step, dim=N, inputs=[xs[k]], outputs=[xs[k + 1]])
        tg.synchronize_device(device)

    def backward():
        tape.backward(grads=seed)
        tg.synchronize_device(device)

    def zero():
        tape.zero()
        tg.synchronize_device(device)

    captured = None
    if tg.get_device(device).is_cuda:
        backward()                          # outside the capture: compiles and allocates
        with tg.ScopedCapture(device=device) as cap:
            tape.backward(grads=seed)

        def captured():
            tg.capture_launch(cap.graph)
            tg.synchronize_device(device)

    return backward, zero, captured, record, plain


def bench_warp(device):
    """Warp's (backward, zero) operations, as `bench_tapegrad`; None when Warp is not installed."""
    wp = warp_or_none()
    if wp is None:
        return None

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

    def record():
        with wp.Tape():
            for k in range(N_LAUNCHES):
                wp.launch(step, dim=N, inputs=[xs[k]], outputs=[xs[k + 1]], device=device)
        wp.synchronize_device(device)

    def plain():
        for k in range(N_LAUNCHES):
            wp.launch(step, dim=N, inputs=[xs[k]], outputs=[xs[k + 1]], device=device)
        wp.synchronize_device(device)

    def backward():
        # Warp's recommended pattern: the output owns its grad; backward copies into it
        tape.backward(grads={xs[-1]: g})
        wp.synchronize_device(device)

    def zero():
        tape.zero()
        wp.synchronize_device(device)

    captured = None
    if wp.get_device(device).is_cuda:
        backward()
        with wp.ScopedCapture(device=device) as cap:
            tape.backward(grads={xs[-1]: g})

        def captured():
            wp.capture_launch(cap.graph)
            wp.synchronize_device(device)

    return backward, zero, captured, record, plain


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    ours = bench_tapegrad(args.device)
    peer = bench_warp(args.device)
    peer_name = "warp" if peer else None
    # best of single calls, tapegrad and Warp alternating (the backward is per launch)
    rows = [("plain launch (no tape)", 4, N_LAUNCHES), ("record, per launch", 3, N_LAUNCHES),
            ("backward, per launch", 0, N_LAUNCHES), ("tape.zero()", 1, 1)]
    if ours[2] is not None:
        rows.append(("captured backward/launch", 2, N_LAUNCHES))
    out = {"device": args.device, "peer": peer_name, "results": []}
    print(f"{'measure':24s} {'tapegrad':>12s} {peer_name or '-':>12s} {'ratio':>8s}")
    for name, k, per in rows:
        theirs = per_call(peer[k], 1) if peer and peer[k] else None
        samples = interleave({"tapegrad": per_call(ours[k], 1), "warp": theirs}, args.reps)
        c = compare({n: [t / per for t in v] for n, v in samples.items()}, "tapegrad", peer_name, stat="best")
        print(f"{name:24s} {fmt_time(c.ours, width=10)} {fmt_time(c.peer, width=10)} {fmt_ratio(c.ratio):>8s}")
        out["results"].append({"measure": name, "tapegrad_s": c.ours, "peer_s": c.peer, "ratio": c.ratio})
    samples = interleave({"record": per_call(ours[3], 1), "plain": per_call(ours[4], 1)}, args.reps)
    c = compare(samples, "record", "plain", stat="best")
    print(f"{'record / plain launch':24s} {fmt_time(c.ours / N_LAUNCHES, width=10)} "
          f"{fmt_time(c.peer / N_LAUNCHES, width=10)} {fmt_ratio(c.ratio):>8s}   (tapegrad, goal <= 1.2x)")
    out["results"].append({"measure": "record / plain launch", "tapegrad_s": c.ours / N_LAUNCHES,
                           "peer_s": c.peer / N_LAUNCHES, "ratio": c.ratio})
    write_results("tape", out)


if __name__ == "__main__":
    main()
