"""Optimizer steps side by side on the same parameters:

- native: ``tg.optim.Adam``/``SGD`` vs Warp's ``warp.optim`` and ``torch.optim`` (``fused=True``
  on CUDA, ``foreach`` on the CPU);
- optax: one step of ``tg.optax_optimizer`` vs the manual pattern of scenario s20 (``to_jax``
  views, ``tx.update``, ``apply_updates``, ``assign``; target <= 0.5x), vs ``torch.optim.Adam``
  (``fused=True`` on CUDA, ``foreach`` on the CPU) stepping ``to_torch`` views of the same
  tapegrad parameters (issue 30: <= 2x on the H200), and vs the bare jitted optax update on
  JAX arrays (state donated: JAX's own per-call cost, the floor of a one-call step); also the
  step of JAX-declared parameters (``tg.from_jax`` views: the step writes into JAX's memory).

The parameters are ``--n`` float32 values split into a few arrays of different sizes (a small
model: 60%, 30%, 9%, 1%), gradients fixed; one sample times ``--steps`` steps and waits for the
device at the end (execution time, not only submission).

    python benchmarks/optimizers.py                    # 10^6 parameters, CPU
    python benchmarks/optimizers.py --device cuda:0
    python benchmarks/optimizers.py --one-core         # work per element: one thread, CPU time
    python benchmarks/optimizers.py --n 32             # per-call overhead (optax: 4 tiny arrays)
    python benchmarks/optimizers.py --threads 16 --rounds 21   # CPU, 16 threads each (wall time)

``--cpu-flat-min N`` gives CPU parameters of N elements or more launches of their own
(``tapegrad.optim.multi_tensor.FLAT_MIN``; default: every parameter in the one table launch).

``--one-core`` runs every contender on one thread (``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``) and times the calling thread's CPU time, which a loaded shared
machine barely moves (wall time there mostly measures the other sessions). ``--threads N``
gives tapegrad's OpenMP team and torch's intra-op pool the same N threads
(``OMP_NUM_THREADS=N`` before any OpenMP runtime loads, ``torch.set_num_threads(N)``) and
times wall clock; without it each uses its default (the cores it may run on) and the table
says what that was.

Prints a table and writes ``benchmarks/results/optimizers_<device>.json``; the figures are the
ratios tapegrad / peer of one run.
"""
import argparse
import functools
import importlib.util
import os
import time

import numpy as np

from _peer import warp_or_none
from _timing import compare, fmt_ratio, fmt_time, interleave, write_results

SPLIT = (0.6, 0.3, 0.09, 0.01)


def sizes(n):
    s = [max(1, int(n * f)) for f in SPLIT]
    s[0] += n - sum(s)
    return s


def tapegrad_step(n, device, cls="Adam"):
    import tapegrad as tg
    from tapegrad import optim
    rng = np.random.default_rng(0)
    ps = [tg.array(rng.normal(size=k).astype(np.float32), device=device, requires_grad=True) for k in sizes(n)]
    for p in ps:
        p.grad.assign(rng.normal(size=p.shape).astype(np.float32))
    opt = getattr(optim, cls)(ps, lr=1e-3)
    return opt.step, lambda: tg.synchronize_device(device)


def warp_step(wp, n, device, cls="Adam"):
    import warp.optim
    rng = np.random.default_rng(0)
    ps = [wp.array(rng.normal(size=k).astype(np.float32), device=device, requires_grad=True) for k in sizes(n)]
    gs = [wp.array(rng.normal(size=k).astype(np.float32), device=device) for k in sizes(n)]
    opt = getattr(warp.optim, cls)(ps, lr=1e-3)
    return (lambda: opt.step(gs)), (lambda: wp.synchronize_device(device))


def torch_step(n, device, cls="Adam"):
    try:
        import torch
    except ImportError:
        return None, None
    dev = "cpu" if device == "cpu" else device
    ps = [torch.randn(k, device=dev, requires_grad=True) for k in sizes(n)]
    for p in ps:
        p.grad = torch.randn_like(p)
    kw = {"fused": True} if dev != "cpu" else {"foreach": True}
    opt = getattr(torch.optim, cls)(ps, lr=1e-3, **kw)

    def sync():
        if dev != "cpu":
            torch.cuda.synchronize()
    return opt.step, sync


def optax_steps(n, device):
    """``{name: step}`` over the same parameter sizes, and a sync: ``one_call`` (tapegrad
    parameters), ``jax_declared`` (``tg.from_jax`` views of JAX arrays), ``manual`` (the s20
    pattern), ``torch`` (Adam on ``to_torch`` views; fused on CUDA) and ``bare`` (the jitted optax
    update on JAX arrays, no tapegrad)."""
    import jax
    import optax

    import tapegrad as tg
    rng = np.random.default_rng(0)
    tx = optax.adam(1e-3)

    def params():
        ps = [tg.array(rng.normal(size=k).astype(np.float32), device=device, requires_grad=True) for k in sizes(n)]
        for p in ps:
            p.grad.assign(rng.normal(size=p.shape).astype(np.float32))
        return ps

    steps = {"one_call": tg.optax_optimizer(tx, params()).step}
    jdev = tg.device_to_jax(device)
    held = [jax.device_put(rng.normal(size=k).astype(np.float32), jdev) for k in sizes(n)]
    jps = [tg.from_jax(j) for j in held]
    for p in jps:
        p.requires_grad = True
        p.grad.assign(rng.normal(size=p.shape).astype(np.float32))
    steps["jax_declared"] = tg.optax_optimizer(tx, jps).step    # (a from_jax view keeps its JAX array alive)

    manual_ps = params()
    state = [tx.init([tg.to_jax(p) for p in manual_ps])]

    def manual():
        vals, grads = [tg.to_jax(p) for p in manual_ps], [tg.to_jax(p.grad) for p in manual_ps]
        updates, state[0] = tx.update(grads, state[0], vals)
        for p, v in zip(manual_ps, optax.apply_updates(vals, updates)):
            p.assign(v)
    steps["manual"] = manual

    bare_p = [jax.device_put(rng.normal(size=k).astype(np.float32), jdev) for k in sizes(n)]
    bare_g = [jax.device_put(rng.normal(size=k).astype(np.float32), jdev) for k in sizes(n)]
    bare_state = [bare_p, tx.init(bare_p)]

    @functools.partial(jax.jit, donate_argnums=(0, 2))
    def update(ps, gs, st):
        u, st = tx.update(gs, st, ps)
        return optax.apply_updates(ps, u), st

    def bare():
        bare_state[0], bare_state[1] = update(bare_state[0], bare_g, bare_state[1])
    steps["bare"] = bare

    try:
        import torch
        tps = params()
        kw = {"fused": True} if tg.get_device(device).is_cuda else {"foreach": True}
        steps["torch"] = torch.optim.Adam([tg.to_torch(p) for p in tps], lr=1e-3, **kw).step
    except ImportError:
        pass

    def sync():
        tg.synchronize_device(device)
        jax.block_until_ready(bare_state[0])
    return steps, sync


def cpu_time_per_call(fn, calls):
    """A sampler of the calling thread's CPU seconds per call (``--one-core``)."""
    def sample():
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        return (time.thread_time() - t0) / calls
    return sample


def cpu_threads() -> str:
    """The thread counts the CPU contenders run with: tapegrad's OpenMP team (the runtime's
    ``omp_get_max_threads``, what a launch asks for) and torch's intra-op pool."""
    import ctypes
    import ctypes.util
    out = []
    try:
        gomp = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")
        out.append(f"tapegrad (OpenMP) {gomp.omp_get_max_threads()}")
    except (OSError, AttributeError):
        out.append("tapegrad (OpenMP) unknown")
    if importlib.util.find_spec("torch") is not None:
        import torch
        out.append(f"torch {torch.get_num_threads()}")
    return ", ".join(out) + f" (cores available: {len(os.sched_getaffinity(0))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10 ** 6)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--one-core", action="store_true", help="one thread each, CPU time (CPU only)")
    ap.add_argument("--cpu-flat-min", type=int, default=None,
                    help="CPU parameters of this many elements or more step in launches of their own")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for tapegrad (OpenMP) and torch alike (wall time; CPU only)")
    args = ap.parse_args()
    if args.threads is not None and (args.threads < 1 or args.one_core or args.device != "cpu"):
        ap.error(f"--threads: expected a count >= 1 with --device cpu and without --one-core, got "
                 f"{args.threads} (device {args.device}{', --one-core' if args.one_core else ''})")
    if args.one_core:
        if args.device != "cpu":
            ap.error(f"--one-core: expected --device cpu, got {args.device}")
        args.threads = 1
    if args.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)   # before any kernel loads the OpenMP runtime
        if importlib.util.find_spec("torch") is not None:
            import torch
            torch.set_num_threads(args.threads)
    if args.cpu_flat_min is not None:     # (after OMP_NUM_THREADS: no OpenMP runtime loaded yet)
        if args.cpu_flat_min < 1:
            ap.error(f"--cpu-flat-min: expected a count >= 1, got {args.cpu_flat_min}")
        from tapegrad.optim import multi_tensor
        multi_tensor.FLAT_MIN = args.cpu_flat_min
    if args.one_core:

        def per_call(fn, calls, sync=None):      # the CPU-time sampler
            return cpu_time_per_call(fn, calls)
    else:
        from _timing import per_call
    wp = warp_or_none()
    rows = []
    print(f"{args.n} float32 parameters in {len(SPLIT)} arrays, {args.device}; time per step")
    if args.device == "cpu":
        from tapegrad.optim import multi_tensor
        fm = multi_tensor.FLAT_MIN
        print(f"CPU threads: {cpu_threads()}; tg.optim: "
              + ("every parameter in one table launch" if fm is None else f"own launches from {fm} elements"))
    print(f"{'optimizer':<8} {'peer':<20} {'tapegrad':>12} {'peer':>12} {'ratio':>8}")
    for cls in ("Adam", "SGD"):
        ours, sync = tapegrad_step(args.n, args.device, cls)
        samplers = {"tapegrad": per_call(ours, args.steps, sync)}
        if wp is not None:
            w, wsync = warp_step(wp, args.n, args.device, cls)
            samplers["warp"] = per_call(w, args.steps, wsync)
        t, tsync = torch_step(args.n, args.device, cls)
        if t is not None:
            samplers["torch"] = per_call(t, args.steps, tsync)
        samples = interleave(samplers, rounds=args.rounds)
        for peer, label in (("warp", "warp.optim"), ("torch", "torch.optim (fused/foreach)")):
            if peer not in samples:
                continue
            c = compare(samples, "tapegrad", peer)
            rows.append({"optimizer": cls, "peer": label, "tapegrad_s": c.ours, "peer_s": c.peer, "ratio": c.ratio})
            print(f"{cls:<8} {label:<20} {fmt_time(c.ours)} {fmt_time(c.peer)} {fmt_ratio(c.ratio):>8}")
    # (not with --one-core: JAX computes on threads of its own, which the calling thread's CPU time misses)
    if importlib.util.find_spec("optax") is not None and not args.one_core:
        steps, sync = optax_steps(args.n, args.device)
        samples = interleave({k: per_call(f, args.steps, sync) for k, f in steps.items()}, rounds=args.rounds)
        for ours, peer, label in (("one_call", "manual", "manual s20 pattern"),
                                  ("one_call", "torch", "torch Adam, to_torch"),
                                  ("one_call", "bare", "bare jitted optax"),
                                  ("jax_declared", "torch", "JAX-declared / torch"),
                                  ("jax_declared", "bare", "JAX-declared / bare")):
            if peer in samples:
                c = compare(samples, ours, peer)
                rows.append({"optimizer": "optax_optimizer" if ours == "one_call" else "optax_optimizer_jax_declared",
                             "peer": label, "tapegrad_s": c.ours, "peer_s": c.peer, "ratio": c.ratio})
                print(f"{'optax':<8} {label:<20} {fmt_time(c.ours)} {fmt_time(c.peer)} {fmt_ratio(c.ratio):>8}")
    threads = "_one_core" if args.one_core else (f"_threads{args.threads}" if args.threads else "")
    name = f"optimizers_{args.device.replace(':', '')}{threads}"
    out = write_results(name, {"n": args.n, "device": args.device, "one_core": args.one_core,
                               "threads": args.threads, "cpu_flat_min": args.cpu_flat_min, "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
