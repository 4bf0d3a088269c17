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
import os
import platform

import torch

import tapegrad as tg

from _peer import warp_or_none
from _timing import compare, interleave, per_call, write_results

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
    def one():
        return step(lib, kernel, mode, x0, device)

    one()   # warm-up
    sync()
    if device != "cpu":
        return per_call(lambda: one().item(), iters, sync)() * 1e3
    samples = interleave({"iteration": per_call(lambda: one().item(), 1)}, iters, warmup=0)
    return compare(samples, "iteration", None).ours * 1e3


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
    samplers = {(name, mode): (lambda lib=lib, kernel=kernel, mode=mode: run(lib, kernel, mode, x0, dev, args.iters,
                                                                           sync))
                for mode in MODES for name, (lib, kernel) in libs.items()}
    samples = interleave(samplers, args.rounds, warmup=0, rotate=False)
    best = {name: {m: min(samples[(name, m)]) for m in MODES} for name in libs}

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
    meta = {"n": n, "device": dev, "iters": args.iters, "rounds": args.rounds, "torch": torch.__version__,
            "warp": getattr(warp[0], "__version__", None) if warp else None,
            "machine": platform.machine(), "cpus": os.cpu_count()}
    out = write_results("lazy_grad_" + dev.replace(":", ""),
                        {"meta": meta, "ms_per_iter": best, "ratios": summary}, args.out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
