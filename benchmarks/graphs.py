"""CUDA graph replay vs launching one by one: the per-launch cost of a sequence of 100 small
kernel launches, eager and replayed from a captured graph, reported as a ratio (target: replay
>= 10x cheaper per launch).

Measured side by side in one process with the same figures for PyTorch (eager ops vs
``torch.cuda.graph`` replay) and NVIDIA Warp (where ``warp-lang`` is installed).

    python benchmarks/graphs.py [--launches 100] [--n 256] [--repeats 7]

GPU only: on a machine without a CUDA device it prints why and exits 0. Writes
``benchmarks/results/graphs.json``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from _peer import warp_or_none  # noqa: E402
from _timing import RESULTS, compare, interleave, per_call, write_results  # noqa: E402


def _figures(eager, replay, sync, launches, eager_iters, replay_iters, repeats):
    """Per-launch medians: eager, replayed (waited for) and replay submission (host side only)."""
    samples = interleave({"eager": per_call(eager, eager_iters, sync),
                          "graph": per_call(replay, replay_iters, sync),
                          "submit": per_call(replay, replay_iters, sync, timed_sync=False)}, repeats)
    e, g, s = (compare(samples, k, None).ours / launches for k in ("eager", "graph", "submit"))
    return {"eager_us_per_launch": e * 1e6, "graph_us_per_launch": g * 1e6,
            "graph_submit_us_per_launch": s * 1e6, "ratio": e / g if g > 0 else float("inf")}


def bench_tapegrad(n, launches, repeats):
    import tapegrad as tg

    @tg.kernel
    def inc(a: tg.array[float]):
        i = tg.tid()
        a[i] = a[i] + 1.0

    dev = tg.get_device("cuda:0")
    a = tg.zeros(n, device=dev)

    def eager():
        for _ in range(launches):
            tg.launch(inc, dim=n, inputs=[a], device=dev)

    eager()                                   # compile + load outside the capture
    tg.synchronize_device(dev)
    with tg.ScopedCapture(device=dev) as capture:
        eager()
    graph = capture.graph

    def replay():
        tg.capture_launch(graph)

    def sync():
        tg.synchronize_device(dev)

    a.zero_()
    sync()
    replay()
    sync()
    assert float(a.numpy()[0]) == launches, "one replay must run the whole captured sequence once"
    return _figures(eager, replay, sync, launches, eager_iters=20, replay_iters=200, repeats=repeats)


def bench_torch(n, launches, repeats):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.zeros(n, device="cuda:0")

    def eager():
        for _ in range(launches):
            x.add_(1.0)

    eager()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        eager()                               # warm-up on the side stream, as torch recommends
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        eager()
    return _figures(eager, g.replay, torch.cuda.synchronize, launches, 20, 200, repeats)


def bench_warp(n, launches, repeats):
    try:
        wp = warp_or_none()
        if wp is None or not wp.is_cuda_available():
            return None

        @wp.kernel
        def winc(a: wp.array(dtype=float)):
            i = wp.tid()
            a[i] = a[i] + 1.0

        dev = wp.get_device("cuda:0")
        a = wp.zeros(n, dtype=float, device=dev)

        def eager():
            for _ in range(launches):
                wp.launch(winc, dim=n, inputs=[a], device=dev)

        eager()
        wp.synchronize_device(dev)
        with wp.ScopedCapture(device=dev) as capture:
            eager()
        graph = capture.graph
        return _figures(eager, lambda: wp.capture_launch(graph), lambda: wp.synchronize_device(dev),
                        launches, 20, 200, repeats)
    except Exception as e:  # the peer is optional: report, do not fail
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=100, help="kernel launches per captured sequence")
    ap.add_argument("--n", type=int, default=256, help="threads per launch (small on purpose)")
    ap.add_argument("--repeats", type=int, default=7, help="timed repetitions (the median is kept)")
    ap.add_argument("--out", default=str(RESULTS / "graphs.json"))
    args = ap.parse_args(argv)

    import tapegrad as tg
    if not tg.is_cuda_available():
        print("benchmarks/graphs.py: CUDA graphs need a CUDA GPU (cupy and a driver); "
              "none on this machine — nothing measured.")
        return 0

    tgf = bench_tapegrad(args.n, args.launches, args.repeats)
    peers = {"torch": bench_torch(args.n, args.launches, args.repeats),
             "warp": bench_warp(args.n, args.launches, args.repeats)}
    target = 10.0
    result = {
        "benchmark": "graph replay vs eager launches",
        "device": tg.get_device("cuda:0").name,
        "host": platform.node(),
        "python": platform.python_version(),
        "launches_per_sequence": args.launches,
        "threads_per_launch": args.n,
        "tapegrad": tgf,
        "peers": {k: v for k, v in peers.items() if v is not None},
        "target_ratio": target,
        "meets_target": tgf["ratio"] >= target,
    }
    rows = [("tapegrad", tgf)] + [(k, v) for k, v in result["peers"].items()]
    print(f"{args.launches} launches of a {args.n}-thread kernel, per launch (median of {args.repeats}):")
    print(f"{'':10s} {'eager us':>10s} {'replay us':>10s} {'submit us':>10s} {'ratio':>8s}")
    for name, f in rows:
        if "error" in f:
            print(f"{name:10s} {f['error']}")
            continue
        print(f"{name:10s} {f['eager_us_per_launch']:10.2f} {f['graph_us_per_launch']:10.2f} "
              f"{f['graph_submit_us_per_launch']:10.3f} {f['ratio']:7.1f}x")
    print(f"target: replay >= {target:.0f}x cheaper per launch -> {'met' if result['meets_target'] else 'NOT met'}")
    print(f"wrote {write_results('graphs', result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
