"""Array construction/conversion overhead side by side with NVIDIA Warp (when installed):
``array(ptr=...)``, ``array(numpy_arr, copy=False)``, ``numpy()``, ``zeros(1024)``.

    python benchmarks/array_overhead.py [--device cpu] [--n 20000] [--rounds 7]

Median of interleaved rounds (tapegrad and Warp alternate, so machine noise hits both), printed
as µs per call and the ratio tapegrad / Warp; JSON in benchmarks/results/array_overhead.json.
"""
import argparse
import json
import pathlib
import statistics
import time

import numpy as np


def _per_call(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def cases_tapegrad(device):
    import tapegrad as tg
    host = np.zeros(1024, dtype=np.float32)
    a = tg.zeros(1024, dtype=tg.float32, device=device)
    ptr = a.ptr
    return {
        "array(ptr=...)": lambda: tg.array(ptr=ptr, dtype=tg.float32, shape=(1024,), device=device),
        "array(np, copy=False)": (lambda: tg.array(host, dtype=tg.float32, copy=False)) if device == "cpu" else None,
        "numpy()": lambda: a.numpy(),
        "zeros(1024)": lambda: tg.zeros(1024, dtype=tg.float32, device=device),
    }


def cases_warp(device):
    import warp as wp
    wp.config.quiet = True
    wp.init()
    host = np.zeros(1024, dtype=np.float32)
    a = wp.zeros(1024, dtype=wp.float32, device=device)
    ptr = a.ptr
    return {
        "array(ptr=...)": lambda: wp.array(ptr=ptr, dtype=wp.float32, shape=(1024,), device=device),
        "array(np, copy=False)": (lambda: wp.array(host, dtype=wp.float32, copy=False, device=device))
        if device == "cpu" else None,
        "numpy()": lambda: a.numpy(),
        "zeros(1024)": lambda: wp.zeros(1024, dtype=wp.float32, device=device),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    ours = cases_tapegrad(args.device)
    try:
        peer = cases_warp(args.device)
    except ImportError:
        peer = None
    results = []
    print(f"{'case':24s} {'tapegrad':>10s} {'warp':>10s} {'ratio':>7s}")
    for name, fn in ours.items():
        if fn is None:
            continue
        pfn = peer.get(name) if peer else None
        fn(), pfn and pfn()
        t_ours, t_peer = [], []
        for _ in range(args.rounds):
            t_ours.append(_per_call(fn, args.n))
            if pfn:
                t_peer.append(_per_call(pfn, args.n))
        mo = statistics.median(t_ours)
        mp = statistics.median(t_peer) if t_peer else None
        ratio = mo / mp if mp else None
        print(f"{name:24s} {mo * 1e6:8.2f}us {(mp * 1e6 if mp else float('nan')):8.2f}us "
              f"{(f'{ratio:.2f}x' if ratio else '-'):>7s}")
        results.append({"case": name, "tapegrad_s": mo, "warp_s": mp, "ratio": ratio})
    out = pathlib.Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "array_overhead.json").write_text(json.dumps({"device": args.device, "results": results}, indent=2))


if __name__ == "__main__":
    main()
