"""DLPack conversion overhead, tapegrad vs NVIDIA Warp, side by side in one process (CPU).

    python benchmarks/dlpack.py [--n 20000] [--rounds 7]

Each case is timed in interleaved rounds (tapegrad, Warp, tapegrad, Warp...) and the median of
the per-round times is reported, because these machines are noisy. Prints a table of µs per
conversion and the tapegrad/Warp ratio; writes benchmarks/results/dlpack.json.
Target (issue 5): each ratio <= 0.7.
"""
from __future__ import annotations

import argparse
import platform
import sys

import numpy as np

from _peer import warp_or_none
from _timing import RESULTS, compare, interleave, per_call, write_results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000, help="conversions per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(RESULTS / "dlpack.json"))
    args = ap.parse_args()

    import torch
    import torch.utils.dlpack as tud

    import tapegrad as tg
    wp = warp_or_none()

    t = torch.arange(1024, dtype=torch.float32)
    a = tg.array(np.arange(1024, dtype=np.float32), device="cpu")
    w = wp.array(np.arange(1024, dtype=np.float32), device="cpu") if wp else None
    tg.from_dlpack(t)                                   # builds the C helper once, outside the timing

    cases = [
        ("from_dlpack(torch tensor)", lambda: tg.from_dlpack(t), (lambda: wp.from_dlpack(t)) if wp else None),
        ("torch.from_dlpack(array)", lambda: torch.from_dlpack(a), (lambda: torch.from_dlpack(w)) if wp else None),
        ("from_dlpack(torch capsule)", lambda: tg.from_dlpack(tud.to_dlpack(t)),
         (lambda: wp.from_dlpack(tud.to_dlpack(t))) if wp else None),
        ("torch from to_dlpack(array)", lambda: tud.from_dlpack(tg.to_dlpack(a)),
         (lambda: tud.from_dlpack(wp.to_dlpack(w))) if wp else None),
        ("numpy.from_dlpack(array)", lambda: np.from_dlpack(a), (lambda: np.from_dlpack(w)) if wp else None),
    ]
    rows = []
    for name, f_tg, f_wp in cases:
        for f in (f_tg, f_wp):
            if f is not None:
                per_call(f, max(args.n // 10, 100))()   # warm-up
        samples = interleave({"tapegrad": per_call(f_tg, args.n),
                              "warp": per_call(f_wp, args.n) if f_wp else None}, args.rounds, warmup=0)
        c = compare(samples, "tapegrad", "warp")
        tg_us = c.ours * 1e6
        wp_us = c.peer * 1e6 if c.peer else None
        rows.append({"case": name, "tapegrad_us": round(tg_us, 3), "warp_us": round(wp_us, 3) if wp_us else None,
                     "ratio": round(tg_us / wp_us, 3) if wp_us else None,
                     "primary": name in ("from_dlpack(torch tensor)", "torch.from_dlpack(array)")})

    print(f"{'case':32s} {'tapegrad µs':>12s} {'Warp µs':>10s} {'ratio':>7s}")
    for r in rows:
        wp_s = f"{r['warp_us']:10.2f}" if r["warp_us"] else f"{'n/a':>10s}"
        ratio = f"{r['ratio']:7.2f}" if r["ratio"] else f"{'n/a':>7s}"
        print(f"{r['case']:32s} {r['tapegrad_us']:12.2f} {wp_s} {ratio}{'  *' if r['primary'] else ''}")
    print("* issue 5 target: ratio <= 0.70")
    result = {
        "benchmark": "dlpack", "device": "cpu", "n_per_round": args.n, "rounds": args.rounds, "stat": "median",
        "python": sys.version.split()[0], "platform": platform.platform(), "torch": torch.__version__,
        "warp": getattr(wp, "__version__", None) if wp else None, "numpy": np.__version__,
        "dlpack_backend": __import__("tapegrad.dlpack.capsules", fromlist=["backend"]).backend().name,
        "rows": rows,
    }
    print(f"wrote {write_results('dlpack', result, args.out)}")
    primary_ok = all(r["ratio"] is None or r["ratio"] <= 0.7 for r in rows if r["primary"])
    return 0 if primary_ok else 1


if __name__ == "__main__":
    sys.exit(main())
