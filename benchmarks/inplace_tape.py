"""In-place updates on a Tape: 100 recorded steps of ``x[i] = x[i] + dt * v[i] * x[i]``, side
by side with NVIDIA Warp (when `warp-lang` is installed), on the CPU (or --device cuda:0).

    python benchmarks/inplace_tape.py [--device cpu] [--n 64 --n 65536] [--reps 30]

For each array size: the cost of recording (forward under the tape) and of ``backward``, per
step, with tapegrad saving the overwritten values (the default) and without
(``save_overwritten=False``), the memory the tape keeps (``tape.saved_bytes``) and the
gradient's largest relative error against the closed form ``d sum(x_100) / d v =
100 dt x_0 (1 + dt v)^99`` (``d / d x_0 = (1 + dt v)^100`` needs no saved values: the step is
linear in x), and the bytes kept for 100 steps of a linear integrator (none). Warp records
the same steps without saving anything (and gets ``d / d v`` wrong: its adjoints read the
final x). Prints a table and writes benchmarks/results/inplace_tape[_<device>].json; the
figures that count are the ratios.
"""
import argparse

import numpy as np

from _peer import warp_or_none
from _timing import compare, fmt_ratio, fmt_time, interleave, per_call, write_results

STEPS = 100
DT = 0.01


def _inputs(n):
    rng = np.random.default_rng(0)
    return rng.uniform(0.5, 1.5, n), rng.uniform(-1.0, 1.0, n)


def truth(n):
    """d sum(x_STEPS) / d v in closed form."""
    x, v = _inputs(n)
    return x * STEPS * DT * (1.0 + DT * v) ** (STEPS - 1)


def contender(ns, device, n, tape_kwargs):
    """(record, backward, saved bytes, v's gradient) for ``ns`` (``tapegrad`` or ``warp``: the
    same code runs on both); ``tape_kwargs``: for ``ns.Tape``."""
    import warnings

    @ns.kernel
    def drift(x: ns.array(dtype=ns.float64), v: ns.array(dtype=ns.float64), dt: ns.float64):
        i = ns.tid()
        x[i] = x[i] + dt * v[i] * x[i]

    @ns.kernel
    def total(x: ns.array(dtype=ns.float64), s: ns.array(dtype=ns.float64)):
        i = ns.tid()
        ns.atomic_add(s, 0, x[i])

    x0, v0 = _inputs(n)
    x = ns.array(x0, dtype=ns.float64, device=device, requires_grad=True)
    v = ns.array(v0, dtype=ns.float64, device=device, requires_grad=True)
    loss = ns.zeros(1, dtype=ns.float64, device=device, requires_grad=True)
    state = {}

    def record():
        x.assign(x0)                       # outside the tape: every recording starts alike
        loss.zero_()
        tape = ns.Tape(**tape_kwargs)
        with tape:
            for _ in range(STEPS):
                ns.launch(drift, dim=n, inputs=[x, v, ns.float64(DT)], device=device)
            ns.launch(total, dim=n, inputs=[x, loss], device=device)
        ns.synchronize_device(device)
        state["tape"] = tape

    def backward():
        state["tape"].backward(loss=loss)
        ns.synchronize_device(device)
        state["tape"].zero()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # save_overwritten=False warns at every step (by design)
        record()
    tape = state["tape"]
    tape.backward(loss=loss)
    grad = v.grad.numpy().copy()
    tape.zero()
    return record, backward, getattr(tape, "saved_bytes", 0), grad


def bench_tapegrad(device, n, save):
    import tapegrad as tg
    return contender(tg, device, n, {"save_overwritten": save})


def bench_warp(device, n):
    """Warp's contender; None when Warp is not installed."""
    wp = warp_or_none()
    return None if wp is None else contender(wp, device, n, {})


def linear_steps_saved_bytes(device, n):
    """Bytes a tape keeps for 100 steps of a linear in-place integrator (v -= dt k x; x += dt v):
    none, since no adjoint reads the overwritten values."""
    import tapegrad as tg

    @tg.kernel
    def velocity(x: tg.array(dtype=tg.float64), v: tg.array(dtype=tg.float64), dt: tg.float64):
        i = tg.tid()
        v[i] = v[i] - dt * 3.0 * x[i]

    @tg.kernel
    def position(x: tg.array(dtype=tg.float64), v: tg.array(dtype=tg.float64), dt: tg.float64):
        i = tg.tid()
        x[i] = x[i] + dt * v[i]

    x0, v0 = _inputs(n)
    x = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
    v = tg.array(v0, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        for _ in range(STEPS):
            tg.launch(velocity, dim=n, inputs=[x, v, DT])
            tg.launch(position, dim=n, inputs=[x, v, DT])
    return tape.saved_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    sizes = args.n or [64, 65536]
    out = {"device": args.device, "steps": STEPS, "peer": None, "results": []}
    print(f"{STEPS} in-place steps; times per step; ratios tapegrad (saving) / contender")
    print(f"{'n':>7s} {'measure':10s} {'saving':>10s} {'not saving':>10s} {'warp':>10s} "
          f"{'/not saving':>11s} {'/warp':>8s}")
    for n in sizes:
        on = bench_tapegrad(args.device, n, True)
        off = bench_tapegrad(args.device, n, False)
        peer = bench_warp(args.device, n)
        out["peer"] = "warp" if peer else None
        ref = truth(n)
        err = {name: float(np.max(np.abs(r[3] - ref) / np.abs(ref)))
               for name, r in (("saving", on), ("not saving", off), ("warp", peer)) if r is not None}
        row = {"n": n, "array_bytes": n * 8, "saved_bytes": on[2], "saved_bytes_off": off[2],
               "saved_bytes_linear_integrator": linear_steps_saved_bytes(args.device, n),
               "grad_max_rel_error": err}
        for label, k in (("record", 0), ("backward", 1)):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                samples = interleave({"saving": per_call(on[k], 1), "not saving": per_call(off[k], 1),
                                      "warp": per_call(peer[k], 1) if peer else None}, args.reps)
            per_step = {name: [t / STEPS for t in s] for name, s in samples.items()}
            c_off = compare(per_step, "saving", "not saving", stat="best")
            c_wp = compare(per_step, "saving", "warp" if peer else None, stat="best")
            print(f"{n:7d} {label:10s} {fmt_time(c_off.ours, width=10)} {fmt_time(c_off.peer, width=10)} "
                  f"{fmt_time(c_wp.peer, width=10)} {fmt_ratio(c_off.ratio):>11s} {fmt_ratio(c_wp.ratio):>8s}")
            row[label] = {"saving_s": c_off.ours, "not_saving_s": c_off.peer, "warp_s": c_wp.peer,
                          "ratio_vs_not_saving": c_off.ratio, "ratio_vs_warp": c_wp.ratio}
        print(f"{n:7d} memory: saved {on[2]} bytes = {on[2] / (n * 8):.0f} x the array ({n * 8} bytes); "
              f"d/dv max rel. error: " + ", ".join(f"{k} {v:.1e}" for k, v in err.items()))
        print(f"{n:7d} memory of a linear in-place integrator (v -= dt k x; x += dt v), {STEPS} steps: "
              f"{row['saved_bytes_linear_integrator']} bytes")
        out["results"].append(row)
    suffix = "" if args.device == "cpu" else "_" + args.device.replace(":", "")
    write_results("inplace_tape" + suffix, out)


if __name__ == "__main__":
    main()
