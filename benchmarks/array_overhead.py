"""Array construction/conversion overhead side by side with NVIDIA Warp (when installed):
``array(ptr=...)``, ``array(numpy_arr, copy=False)``, ``numpy()``, ``zeros(1024)``.

    python benchmarks/array_overhead.py [--device cpu] [--n 20000] [--rounds 7]

Median of interleaved rounds (tapegrad and Warp alternate, so machine noise hits both), printed
as µs per call and the ratio tapegrad / Warp; JSON in benchmarks/results/array_overhead.json.
"""
import argparse

import numpy as np

from _peer import warp_or_none
from _timing import compare, fmt_ratio, fmt_time, interleave, per_call, write_results


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
    """Warp's cases, as `cases_tapegrad`; None when Warp is not installed."""
    wp = warp_or_none()
    if wp is None:
        return None
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
    peer = cases_warp(args.device)
    results = []
    print(f"{'case':24s} {'tapegrad':>10s} {'warp':>10s} {'ratio':>7s}")
    for name, fn in ours.items():
        if fn is None:
            continue
        pfn = peer.get(name) if peer else None
        samples = interleave({"tapegrad": per_call(fn, args.n),
                              "warp": per_call(pfn, args.n) if pfn else None}, args.rounds)
        c = compare(samples, "tapegrad", "warp")
        print(f"{name:24s} {fmt_time(c.ours)} {fmt_time(c.peer)} {fmt_ratio(c.ratio):>7s}")
        results.append({"case": name, "tapegrad_s": c.ours, "warp_s": c.peer, "ratio": c.ratio})
    write_results("array_overhead", {"device": args.device, "results": results})


if __name__ == "__main__":
    main()
