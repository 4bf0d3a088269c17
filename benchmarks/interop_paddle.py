"""paddle <-> tapegrad interop overhead, side by side with NVIDIA Warp (issue 10, SPEC R18, R20).

Measured in one run, interleaved round by round (``_timing``), tapegrad / Warp (lower is better):

    from_paddle     one ``from_paddle`` of a 10-element float32 tensor     (Warp here: ~16 us; target <= 0.5x)
    from_paddle_g   the same with ``stop_gradient=False`` and an existing grad (reported)
    to_paddle       one ``to_paddle`` of a grad-carrying array            (Warp here: ~37 us; target <= 0.5x)
    direct          a launch with five paddle tensors passed as they are   (target <= 0.7x)
    return_ctype    five ``from_paddle(..., return_ctype=True)`` + launch  (target <= 0.7x)
    from_launch     five ``from_paddle`` + launch (reported)

Warp 1.19 does not accept paddle tensors in ``launch`` on the CPU (it wants an array interface
paddle does not offer), so "direct" is compared with Warp's fastest way to launch on paddle
tensors, five ``from_paddle(..., return_ctype=True)`` + launch.

The lazy-gradient patterns of R20 with paddle tensors (each iteration: a fresh tensor with
``stop_gradient=False``, converted, a kernel reading it, the result back to paddle):

    baseline  from_paddle(t)                           (the gradient is allocated on the way)
    A         from_paddle(t, requires_grad=False)
    B         from_paddle(t) of a stop_gradient=True tensor
    C         t.grad_ = paddle.zeros_like(t); from_paddle(t, grad=t.grad)

target: baseline within 1.2x of the best of A/B/C (tapegrad allocates the gradient with
paddle's own allocator). Results: ``benchmarks/results/interop_paddle_cpu.json``.

    python benchmarks/interop_paddle.py               # CPU
    python benchmarks/interop_paddle.py --rounds 9 --calls 5000
"""
import argparse
import os
import platform

# Warp runs CPU kernels on one thread; so does tapegrad here, so that both sides measure the
# interop rather than kernel threading (on a loaded machine OpenMP threads also thrash: a
# 64K-element CPU launch took 23 ms with the default thread count, 0.03 ms with one)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import paddle  # noqa: E402

import tapegrad as tg  # noqa: E402

from _peer import warp_or_none  # noqa: E402
from _timing import compare, fmt_ratio, fmt_time, interleave, per_call, write_results  # noqa: E402

TARGETS = {"from_paddle": 0.5, "to_paddle": 0.5, "direct": 0.7, "return_ctype": 0.7}
LAZY = ("baseline", "A", "B", "C")


@tg.kernel
def tg_five(a: tg.array[tg.float32], b: tg.array[tg.float32], c: tg.array[tg.float32],
            d: tg.array[tg.float32], e: tg.array[tg.float32]):
    pass


@tg.kernel
def tg_square(a: tg.array[float], out: tg.array[float]):
    i = tg.tid()
    out[i] = a[i] * a[i]


def _warp_kernels(wp):
    def five(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32), c: wp.array(dtype=wp.float32),
             d: wp.array(dtype=wp.float32), e: wp.array(dtype=wp.float32)):
        pass

    def square(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] * a[i]

    return wp.Kernel(five, key="interop_paddle_five"), wp.Kernel(square, key="interop_paddle_square")


def _ops(lib, five, tensors, grad_array, with_grad):
    """name -> zero-argument operation, for tapegrad or Warp (the same calls on both)."""
    from_paddle, to_paddle, launch = lib.from_paddle, lib.to_paddle, lib.launch
    a, b, c, d, e = tensors

    def ctype_launch():
        launch(five, dim=10, inputs=[from_paddle(a, return_ctype=True), from_paddle(b, return_ctype=True),
                                     from_paddle(c, return_ctype=True), from_paddle(d, return_ctype=True),
                                     from_paddle(e, return_ctype=True)], device="cpu")

    ops = {
        "from_paddle": lambda: from_paddle(a),
        "from_paddle_g": lambda: from_paddle(with_grad),
        "to_paddle": lambda: to_paddle(grad_array),
        "return_ctype": ctype_launch,
        "from_launch": lambda: launch(five, dim=10, inputs=[from_paddle(a), from_paddle(b), from_paddle(c),
                                                            from_paddle(d), from_paddle(e)], device="cpu"),
    }
    if lib is tg:
        ops["direct"] = lambda: launch(five, dim=10, inputs=[a, b, c, d, e], device="cpu")
    else:
        ops["direct"] = ctype_launch   # Warp's fastest launch on paddle tensors (see the module doc)
    return ops


def lazy_step(lib, square, mode, x0):
    """One iteration of an R20 pattern; returns a paddle tensor the next paddle op consumes."""
    t = x0.clone().detach()
    if mode != "B":
        t.stop_gradient = False
    if mode == "A":
        w = lib.from_paddle(t, requires_grad=False)
    elif mode == "C":
        t.grad_ = paddle.zeros_like(t)
        w = lib.from_paddle(t, grad=lib.from_paddle(t.grad, requires_grad=False))
    else:
        w = lib.from_paddle(t)
    out = lib.zeros(x0.shape[0], dtype=lib.float32, device="cpu")
    lib.launch(square, dim=x0.shape[0], inputs=[w], outputs=[out], device="cpu")
    return lib.to_paddle(out).sum()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000, help="calls per sample")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (the median is kept)")
    ap.add_argument("--lazy-n", type=int, default=2**20, help="elements for the lazy-grad patterns")
    ap.add_argument("--lazy-iters", type=int, default=20)
    ap.add_argument("--no-warp", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    paddle.set_device("cpu")
    wp = None if args.no_warp else warp_or_none()

    tensors = [paddle.zeros([10]) for _ in range(5)]
    with_grad = paddle.zeros([10])
    with_grad.stop_gradient = False
    with_grad.grad_ = paddle.zeros([10])
    libs = {"tapegrad": _ops(tg, tg_five, tensors, tg.zeros(10, requires_grad=True), with_grad)}
    square = {"tapegrad": tg_square}
    if wp is not None:
        wfive, wsquare = _warp_kernels(wp)
        libs["warp"] = _ops(wp, wfive, tensors, wp.zeros(10, dtype=wp.float32, requires_grad=True, device="cpu"),
                            with_grad)
        square["warp"] = wsquare

    rows = []
    print(f"per call, median of {args.rounds} interleaved rounds of {args.calls} calls")
    for name in libs["tapegrad"]:
        samplers = {lib: per_call(ops[name], args.calls) for lib, ops in libs.items()}
        c = compare(interleave(samplers, args.rounds), "tapegrad", "warp" if wp is not None else None)
        target = TARGETS.get(name)
        ok = "" if c.ratio is None or target is None else ("ok" if c.ratio <= target else "MISSED")
        print(f"{name:14s} tapegrad {fmt_time(c.ours)}   warp {fmt_time(c.peer)}   {fmt_ratio(c.ratio):>7s}"
              + (f"  (target <= {target}) {ok}" if target is not None and c.ratio is not None else ""), flush=True)
        rows.append({"op": name, "tapegrad_us": round(c.ours * 1e6, 2),
                     "warp_us": None if c.peer is None else round(c.peer * 1e6, 2),
                     "ratio": None if c.ratio is None else round(c.ratio, 3),
                     "median_round_ratio": None if c.median_ratio is None else round(c.median_ratio, 3),
                     "target": target})

    x0 = paddle.linspace(-1, 1, args.lazy_n)
    lazy_samplers = {(lib, m): per_call(lambda lib=lib, m=m: float(lazy_step(tg if lib == "tapegrad" else wp,
                                                                             square[lib], m, x0)), args.lazy_iters)
                     for m in LAZY for lib in libs}
    lazy = interleave(lazy_samplers, args.rounds)
    lazy_ms = {lib: {m: round(compare({"x": lazy[(lib, m)]}, "x", None).ours * 1e3, 3) for m in LAZY} for lib in libs}
    print(f"\nlazy-gradient patterns, N = {args.lazy_n:,} float32, ms per iteration (median of {args.rounds} rounds)")
    print(f"{'pattern':10s}" + "".join(f"{lib:>12s}" for lib in libs))
    for m in LAZY:
        print(f"{m:10s}" + "".join(f"{lazy_ms[lib][m]:12.3f}" for lib in libs))
    ratios = {}
    for lib in libs:
        top = min(lazy_ms[lib][m] for m in ("A", "B", "C"))
        ratios[lib] = round(lazy_ms[lib]["baseline"] / top, 3)
        print(f"{lib}: baseline / best solution = {ratios[lib]:.2f}x"
              + ("   (target <= 1.2x)" if lib == "tapegrad" else ""))

    meta = {"omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "calls": args.calls, "rounds": args.rounds,
            "lazy_n": args.lazy_n, "paddle": paddle.__version__,
            "tapegrad": tg.__version__, "warp": getattr(wp, "__version__", None), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version()}
    out = write_results("interop_paddle_cpu", {"meta": meta, "rows": rows, "lazy_grad_ms": lazy_ms,
                                               "lazy_baseline_over_best": ratios}, args.out)
    print(f"wrote {out}", flush=True)
    if wp is not None:
        # Warp 1.19 crashes at interpreter exit once it has exchanged memory with paddle (the
        # crash docs/paddle.md describes); the results are written, so leave without finalisers
        os._exit(0)


if __name__ == "__main__":
    main()
