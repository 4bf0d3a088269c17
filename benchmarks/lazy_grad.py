"""The lazy-gradient-allocation trap (SPEC R20, B3), tapegrad side by side with NVIDIA Warp.

Each iteration makes a fresh ``requires_grad`` tensor (``x0.clone().detach().requires_grad_()``),
converts it, launches a kernel reading it and hands the result back to torch. Patterns:

    baseline  from_torch(t)                                   (Warp allocates t.grad itself)
    A         from_torch(t, requires_grad=False)
    B         from_torch(t.detach())  (the tensor is made without requires_grad)
    C         t.grad = torch.zeros_like(t); from_torch(t, grad=t.grad)

Warp's published GPU figures (N = 3e8): baseline 98.0 ms, A 22.6, B 22.1, C 28.6 — the
baseline 4.3x the best, because Warp allocates the gradient with its own allocator and torch
then synchronises the device. tapegrad allocates it with torch's allocator, so the baseline
must stay within 1.2x of the best pattern. Results: ``benchmarks/results/lazy_grad_<device>.json``.

    python benchmarks/lazy_grad.py                       # CPU, N = 2**20
    python benchmarks/lazy_grad.py --device cuda:0       # N = 3e8 as in Warp's case study
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import time

import torch

import tapegrad as tg
from _peer import warp_or_none

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
MODES = ("baseline", "A", "B", "C")


@tg.kernel
def tg_square(a: tg.array[float], out: tg.array[float]):
    i = tg.tid()
    out[i] = a[i] * a[i]


def _warp():
    wp = warp_or_none()
    if wp is None:
        return None

    def square(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] * a[i]

    return wp, wp.Kernel(square, key="lazy_grad_square")


def step(lib, kernel, mode, x0, device):
    """One iteration of a pattern; returns a torch tensor the next torch op would consume."""
    if mode == "B":
        t = x0.clone().detach()
        w = lib.from_torch(t)
    else:
        t = x0.clone().detach().requires_grad_(True)
        if mode == "baseline":
            w = lib.from_torch(t)
        elif mode == "A":
            w = lib.from_torch(t, requires_grad=False)
        else:
            t.grad = torch.zeros_like(t)
            w = lib.from_torch(t, grad=t.grad)
    out = lib.zeros(x0.shape[0], dtype=lib.float32, device=device)
    lib.launch(kernel, dim=x0.shape[0], inputs=[w], outputs=[out], device=device)
    return lib.to_torch(out).sum()


def run(lib, kernel, mode, x0, device, iters, sync):
    """ms per iteration. CUDA: the whole loop, synchronised once at the end (asynchronous work
    and any hidden device-wide sync both count). CPU: the median of per-iteration times, since
    host allocation (page faults of fresh buffers) makes single iterations noisy."""
    step(lib, kernel, mode, x0, device)   # warm-up
    sync()
    if device != "cpu":
        t0 = time.perf_counter()
        for _ in range(iters):
            r = step(lib, kernel, mode, x0, device)
        r.item()
        sync()
        return (time.perf_counter() - t0) / iters * 1e3
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step(lib, kernel, mode, x0, device).item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=float, default=None, help="elements (default 2**20 on the CPU, 3e8 on CUDA)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the minimum is kept")
    ap.add_argument("--no-warp", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    dev = args.device
    n = int(args.n or (2**20 if dev == "cpu" else 3e8))
    tdev = tg.device_to_torch(dev)
    x0 = torch.linspace(-1, 1, n, device=tdev)
    warp = None if args.no_warp else _warp()

    def sync():
        if dev != "cpu":
            torch.cuda.synchronize()

    libs = {"tapegrad": (tg, tg_square)}
    if warp is not None:
        libs["warp"] = warp
    best = {lib: {m: float("inf") for m in MODES} for lib in libs}
    for _ in range(args.rounds):
        for mode in MODES:
            for name, (lib, kernel) in libs.items():
                best[name][mode] = min(best[name][mode], run(lib, kernel, mode, x0, dev, args.iters, sync))

    how = "median iteration" if dev == "cpu" else "mean iteration"
    print(f"N = {n:,} float32 on {dev}, {args.iters} iterations x {args.rounds} rounds (min of the {how}s), ms")
    print(f"{'pattern':10s}" + "".join(f"{name:>12s}" for name in libs) + ("   tapegrad/warp" if warp else ""))
    for mode in MODES:
        line = f"{mode:10s}" + "".join(f"{best[name][mode]:12.3f}" for name in libs)
        if warp:
            line += f"   {best['tapegrad'][mode] / best['warp'][mode]:8.2f}x"
        print(line)
    summary = {}
    for name in libs:
        top = min(best[name][m] for m in ("A", "B", "C"))
        summary[name] = {"baseline/best": round(best[name]["baseline"] / top, 3),
                         "baseline/C": round(best[name]["baseline"] / best[name]["C"], 3)}
        print(f"{name}: baseline / best solution = {summary[name]['baseline/best']:.2f}x, "
              f"baseline / C = {summary[name]['baseline/C']:.2f}x" +
              ("   (target: baseline/best <= 1.2x)" if name == "tapegrad" else "   (Warp's GPU case study: 4.3x)"))
    out = pathlib.Path(args.out) if args.out else RESULTS / f"lazy_grad_{dev.replace(':', '')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"n": n, "device": dev, "iters": args.iters, "rounds": args.rounds, "torch": torch.__version__,
            "warp": getattr(warp[0], "__version__", None) if warp else None,
            "machine": platform.machine(), "cpus": os.cpu_count()}
    out.write_text(json.dumps({"meta": meta, "ms_per_iter": best, "ratios": summary}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
