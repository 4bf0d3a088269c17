"""Kernel launch, throughput and compile cost, side by side with NVIDIA Warp (CPU) and torch (GPU).

    python benchmarks/kernels.py                     # CPU: tapegrad vs Warp (and torch, info)
    python benchmarks/kernels.py --device cuda:0     # GPU: tapegrad vs torch (and Warp if installed)

Measures (issue 3, "Done when"), each for tapegrad and its peer in the same run:

    launch overhead   a 1-element launch of a kernel with 3 array parameters: tapegrad arrays vs
                      Warp arrays; numpy arrays / torch tensors passed directly to both launchers;
                      on the GPU also torch's smallest op (``torch.add(a, b, out=c)``, 1 element).
                      Target: <= 0.7x Warp's time (issue 3); on the GPU (issue 18) tapegrad arrays
                      <= 0.8x torch's op, torch tensors passed directly <= 1.5x torch and <= 0.5x
                      Warp. tapegrad's launches take the native path (``tapegrad.launch.fastlaunch``: one
                      C call packs and launches); the same launches through the Python path
                      (the helper switched off for the sample) are reported beside them ("py").
    saxpy             ``y[i] = a * x[i] + y[i]``, float32: 2^24 elements on the CPU (target
                      >= 1.5x Warp's throughput: Warp's CPU launches run on one thread, tapegrad's
                      on all cores), 2^28 on the GPU (target >= 0.9x torch's ``y.add_(x, alpha=a)``).
    cold compile      the first launch of a new one-kernel module in a fresh process with an empty
                      kernel cache (``TAPEGRAD_CACHE`` / Warp's ``kernel_cache_dir``): <= 0.5x Warp's.
    cached load       the same first launch in a fresh process once the cache holds the binary:
                      <= 2x Warp's. (Import time is reported separately, as information.)

Timing: contenders alternate within each round (the order rotates), every figure is the best of
its rounds (noise on a shared machine only ever adds time) and "ratio" compares the bests;
"median" (``median_ratio`` in the JSON) is the median of the per-round ratios. The "ok" column
judges the best-of ratio against the target. Peers that are not installed are skipped (on the GPU machine
Warp is optional: the torch ratios are still printed). Fresh processes get the repository on
``PYTHONPATH`` and a private bytecode cache (``PYTHONPYCACHEPREFIX``, warmed once per framework)
so that neither side pays for compiling its own Python files.

Results: printed as a table and merged into ``benchmarks/results/kernels.json`` under the device.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # benchmark this checkout, whatever `pip install -e` points at

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402

from _peer import warp_or_none  # noqa: E402
from _timing import RESULTS, compare, interleave, per_call  # noqa: E402

# ------------------------------------------------------------------------------ kernels

@tg.kernel
def tg_add3(a: tg.array[float], b: tg.array[float], c: tg.array[float]):
    i = tg.tid()
    c[i] = a[i] + b[i]


@tg.kernel
def tg_saxpy(x: tg.array[float], y: tg.array[float], a: float):
    i = tg.tid()
    y[i] = a * x[i] + y[i]


_WARP_KERNELS = None


def _warp_kernels(wp):
    global _WARP_KERNELS
    if _WARP_KERNELS is None:
        @wp.kernel
        def wp_add3(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
            i = wp.tid()
            c[i] = a[i] + b[i]

        @wp.kernel
        def wp_saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
            i = wp.tid()
            y[i] = a * x[i] + y[i]

        _WARP_KERNELS = wp_add3, wp_saxpy
    return _WARP_KERNELS


def _torch(device):
    try:
        import torch
    except ImportError:
        return None
    if device.startswith("cuda") and not torch.cuda.is_available():
        return None
    return torch


# ------------------------------------------------------------------------------ timing

class Table:
    def __init__(self, device):
        self.device = device
        self.rows = []

    def add(self, measure, ours, peer_name=None, peer=None, kind="time", target=None, unit="us",
            median_ratio=None, note=None):
        """``ours``/``peer``: seconds (kind "time": lower is better) or bytes/s ("throughput")."""
        ratio = ours / peer if peer else None   # time: lower is better; throughput: higher
        ok = None
        if ratio is not None and target is not None:
            ok = ratio <= target if kind == "time" else ratio >= target
        self.rows.append(dict(measure=measure, kind=kind, unit=unit, tapegrad=ours, peer=peer_name,
                              peer_value=peer, ratio=ratio, median_ratio=median_ratio,
                              target=(("<= " if kind == "time" else ">= ") + f"{target}x") if target else None,
                              ok=ok, note=note))
        self._print(self.rows[-1])

    def error(self, measure, err):
        self.rows.append(dict(measure=measure, error=f"{type(err).__name__}: {err}"))
        print(f"{measure:58s} ERROR {type(err).__name__}: {str(err)[:200]}", flush=True)

    @staticmethod
    def _fmt(v, kind, unit):
        if v is None:
            return "-"
        if kind == "throughput":
            return f"{v / 1e9:.2f} GB/s"
        scale = {"us": 1e6, "ms": 1e3}[unit]
        return f"{v * scale:.2f} {unit}"

    def header(self):
        print(f"{'measure':58s} {'tapegrad':>13s} {'peer':>7s} {'peer value':>13s} {'ratio':>7s} "
              f"{'median':>7s} {'target':>8s}  ok", flush=True)

    def _print(self, r):
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        med = f"{r['median_ratio']:.2f}x" if r["median_ratio"] is not None else "-"
        ok = {True: "yes", False: "NO", None: ""}[r["ok"]]
        print(f"{r['measure']:58s} {self._fmt(r['tapegrad'], r['kind'], r['unit']):>13s} {r['peer'] or '-':>7s} "
              f"{self._fmt(r['peer_value'], r['kind'], r['unit']):>13s} {ratio:>7s} {med:>7s} {r['target'] or '':>8s}"
              f"  {ok}", flush=True)


def _record(table, measure, samples, ours_key, peer_key, peer_name, **kw):
    c = compare(samples, ours_key, peer_key, stat="best", higher_is_better=kw.get("kind") == "throughput")
    table.add(measure, c.ours, peer_name, c.peer, median_ratio=c.median_ratio, **kw)


# ------------------------------------------------------------------------------ launch overhead

def python_path(sampler):
    """``sampler`` run with the native launch helper switched off: launch()'s Python path."""
    mod = sys.modules["tapegrad.launch.core"]   # launch() and its native switch

    def sample():
        was = mod.native_launches(False)
        try:
            return sampler()
        finally:
            mod.native_launches(was)
    return sample


def _fast_path_rows(table, s, label, peers):
    """Rows for tapegrad's native path ("tg") and its Python path ("tg_py") against ``peers``:
    ``[(key, name, target)]``, plus native vs Python path."""
    for key, name, target in peers:
        if key in s:
            _record(table, f"{label} vs {name}", s, "tg", key, name, target=target)
            _record(table, f"{label}, Python path vs {name} (info)", s, "tg_py", key, name)
    _record(table, f"{label}: native / Python path (info)", s, "tg", "tg_py", "tg py")


def bench_launch(table, device, wp, torch, calls, rounds):
    is_cuda = device.startswith("cuda")
    sync_tg = (lambda: tg.synchronize_device(device)) if is_cuda else None
    ta = [tg.zeros(1, dtype=float, device=device) for _ in range(3)]
    cont = {"tg": per_call(lambda: tg.launch(tg_add3, 1, inputs=ta[:2], outputs=ta[2:]), calls, sync_tg)}
    cont["tg_py"] = python_path(cont["tg"])
    if wp is not None:
        wp_add3, _ = _warp_kernels(wp)
        wa = [wp.zeros(1, dtype=float, device=device) for _ in range(3)]
        sync_wp = (lambda: wp.synchronize_device(device)) if is_cuda else None
        cont["wp"] = per_call(lambda: wp.launch(wp_add3, 1, inputs=wa[:2], outputs=wa[2:], device=device),
                               calls, sync_wp)
    if torch is not None and is_cuda:
        tt0 = [torch.zeros(1, device=device) for _ in range(3)]
        cont["torch_op"] = per_call(lambda: torch.add(tt0[0], tt0[1], out=tt0[2]), calls, torch.cuda.synchronize)
    s = interleave(cont, rounds)   # its warm-up round compiles and loads
    _fast_path_rows(table, s, "launch, 3 arrays", [("wp", "warp", 0.7),
                                                   ("torch_op", "torch.add(out=)", 0.8 if is_cuda else None)])

    # objects passed directly: numpy (CPU) and torch tensors
    direct = []
    if not is_cuda:
        na = [np.zeros(1, np.float32) for _ in range(3)]
        direct.append(("numpy", na))
    if torch is not None:
        tt = [torch.zeros(1, device=device) for _ in range(3)]
        direct.append(("torch", tt))
    for label, objs in direct:
        cont = {"tg": per_call(lambda o=objs: tg.launch(tg_add3, 1, inputs=o[:2], outputs=o[2:], device=device),
                                calls, sync_tg)}
        cont["tg_py"] = python_path(cont["tg"])
        if wp is not None:
            cont["wp"] = per_call(lambda o=objs: wp.launch(wp_add3, 1, inputs=o[:2], outputs=o[2:], device=device),
                                   calls, sync_wp)
        if label == "torch" and is_cuda:
            cont["torch_op"] = per_call(lambda: torch.add(tt0[0], tt0[1], out=tt0[2]), calls, torch.cuda.synchronize)
        try:
            s = interleave(cont, rounds)
        except Exception as e:  # noqa: BLE001  a peer that refuses the objects: report, go on
            table.error(f"launch, 3 {label} arrays passed directly", e)
            continue
        direct_cuda = label == "torch" and is_cuda
        _fast_path_rows(table, s, f"launch, 3 {label} passed directly",
                        [("wp", "warp", 0.5 if direct_cuda else 0.7),
                         ("torch_op", "torch.add(out=)", 1.5 if direct_cuda else None)])


# ------------------------------------------------------------------------------ saxpy

def bench_saxpy(table, device, wp, torch, n, rounds):
    is_cuda = device.startswith("cuda")
    reps = 10 if is_cuda else 1
    nbytes = 3 * 4 * n   # read x, read y, write y
    x = tg.full(n, 1.0, dtype=float, device=device)
    y = tg.zeros(n, dtype=float, device=device)

    def timed(launch, sync):
        seconds = per_call(launch, reps, sync)
        return lambda: nbytes / seconds()   # bytes per second

    cont = {"tg": timed(lambda: tg.launch(tg_saxpy, n, inputs=[x, y, 0.5]),
                        (lambda: tg.synchronize_device(device)) if is_cuda else None)}
    if wp is not None:
        _, wp_saxpy = _warp_kernels(wp)
        wx = wp.full(n, 1.0, dtype=float, device=device)
        wy = wp.zeros(n, dtype=float, device=device)
        cont["wp"] = timed(lambda: wp.launch(wp_saxpy, n, inputs=[wx, wy, 0.5], device=device),
                           (lambda: wp.synchronize_device(device)) if is_cuda else None)
    if torch is not None:
        tx = torch.ones(n, device=device)
        ty = torch.zeros(n, device=device)
        cont["torch"] = timed(lambda: ty.add_(tx, alpha=0.5), torch.cuda.synchronize if is_cuda else None)
    s = interleave(cont, rounds)
    label = f"saxpy 2^{n.bit_length() - 1} float32"
    if is_cuda:
        if "torch" in s:
            _record(table, label + " vs torch y.add_", s, "tg", "torch", "torch", kind="throughput", target=0.9)
        if "wp" in s:
            _record(table, label + " vs Warp", s, "tg", "wp", "warp", kind="throughput")
    else:
        if "wp" in s:
            _record(table, label + " vs Warp", s, "tg", "wp", "warp", kind="throughput", target=1.5)
        if "torch" in s:
            _record(table, label + " vs torch y.add_ (info)", s, "tg", "torch", "torch", kind="throughput")
    if len(s) == 1:
        _record(table, label, s, "tg", None, None, kind="throughput")


# ------------------------------------------------------------------------------ compile / load

_TG_CHILD = '''
import json, sys, time
t0 = time.perf_counter()
import tapegrad as tg
t1 = time.perf_counter()
dev = sys.argv[1]

@tg.kernel
def cold_saxpy(x: tg.array[float], y: tg.array[float], a: float):
    i = tg.tid()
    y[i] = a * x[i] + y[i]

if sys.argv[2] == "launch":
    x = tg.zeros(1, dtype=float, device=dev)
    y = tg.zeros(1, dtype=float, device=dev)
    tg.synchronize_device(dev)
    t2 = time.perf_counter()
    tg.launch(cold_saxpy, 1, inputs=[x, y, 2.0], device=dev)
    tg.synchronize_device(dev)
    t3 = time.perf_counter()
else:
    t2 = t3 = t1
print("@@BENCH " + json.dumps({"import": t1 - t0, "first_launch": t3 - t2}))
'''

_WP_CHILD = '''
import json, os, sys, time
t0 = time.perf_counter()
import warp as wp
wp.config.quiet = True
if hasattr(wp, "LOG_WARNING"):
    wp.config.log_level = wp.LOG_WARNING
wp.config.kernel_cache_dir = os.environ["WARP_CACHE_PATH"]
wp.init()
t1 = time.perf_counter()
dev = sys.argv[1]

@wp.kernel
def cold_saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = a * x[i] + y[i]

if sys.argv[2] == "launch":
    x = wp.zeros(1, dtype=float, device=dev)
    y = wp.zeros(1, dtype=float, device=dev)
    wp.synchronize_device(dev)
    t2 = time.perf_counter()
    wp.launch(cold_saxpy, 1, inputs=[x, y, 2.0], device=dev)
    wp.synchronize_device(dev)
    t3 = time.perf_counter()
else:
    t2 = t3 = t1
print("@@BENCH " + json.dumps({"import": t1 - t0, "first_launch": t3 - t2}))
'''


def _child(script, device, mode, env, cache_env, cache):
    e = dict(env)
    e[cache_env] = cache
    p = subprocess.run([sys.executable, script, device, mode], env=e, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("@@BENCH "):
            return json.loads(line[8:])
    raise RuntimeError(f"{os.path.basename(script)} failed (rc {p.returncode}): {(p.stderr or p.stdout)[-2000:]}")


def bench_compile(table, device, have_wp, cold_rounds, cached_rounds, tapegrad_path=None):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tg-bench-compile-"))
    try:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONDONTWRITEBYTECODE", "TAPEGRAD_CACHE", "WARP_CACHE_PATH")}
        first = tapegrad_path or str(ROOT)   # another path: e.g. an installed release (pip install --target)
        env["PYTHONPATH"] = os.pathsep.join([first] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pyc")
        sides = {"tg": (tmp / "tg_child.py", _TG_CHILD, "TAPEGRAD_CACHE")}
        if have_wp:
            sides["wp"] = (tmp / "wp_child.py", _WP_CHILD, "WARP_CACHE_PATH")
        for script, text, _ in sides.values():
            script.write_text(textwrap.dedent(text))
        n_dirs = [0]

        def new_cache():
            n_dirs[0] += 1
            d = tmp / f"cache{n_dirs[0]}"
            d.mkdir(mode=0o700)
            return str(d)

        for name, (script, _, cache_env) in sides.items():   # warm the bytecode cache
            _child(str(script), device, "import", env, cache_env, new_cache())

        caches = {}

        def cold(name):
            script, _, cache_env = sides[name]
            caches[name] = new_cache()
            return lambda: _child(str(script), device, "launch", env, cache_env, caches[name])

        def cached(name):
            script, _, cache_env = sides[name]
            return lambda: _child(str(script), device, "launch", env, cache_env, caches[name])

        # a fresh cache per side and round
        cold_s = interleave({n: (lambda n=n: cold(n)()["first_launch"]) for n in sides}, cold_rounds, warmup=0)
        cached_runs = interleave({n: cached(n) for n in sides}, cached_rounds, warmup=0)
        cached_s = {n: [r["first_launch"] for r in v] for n, v in cached_runs.items()}
        total_s = {n: [r["first_launch"] + r["import"] for r in v] for n, v in cached_runs.items()}
        imp_s = {n: [r["import"] for r in v] for n, v in cached_runs.items()}
        peer = "wp" if have_wp else None
        pname = "warp" if have_wp else None
        _record(table, "cold compile, first launch (fresh process)", cold_s, "tg", peer, pname,
                unit="ms", target=0.5 if have_wp else None)
        _record(table, "cached load, first launch (fresh process)", cached_s, "tg", peer, pname,
                unit="ms", target=2.0 if have_wp else None)
        _record(table, "import (+ wp.init) (info)", imp_s, "tg", peer, pname, unit="ms")
        _record(table, "import + cached first launch (info)", total_s, "tg", peer, pname, unit="ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (vs Warp) or cuda:N (vs torch, and Warp when installed)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds per launch-overhead measure")
    ap.add_argument("--calls", type=int, default=2000, help="launches per launch-overhead sample")
    ap.add_argument("--saxpy-rounds", type=int, default=15)
    ap.add_argument("--n", type=int, default=None, help="saxpy size (default 2^24 CPU, 2^28 GPU)")
    ap.add_argument("--cold-rounds", type=int, default=3)
    ap.add_argument("--cached-rounds", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: launch,saxpy,compile")
    ap.add_argument("--tapegrad-path", default=None,
                    help="where the compile section's fresh processes import tapegrad from (default: this "
                         "repository; e.g. a `pip install --target DIR .` to measure an installed release)")
    ap.add_argument("--out", default=str(RESULTS / "kernels.json"))
    args = ap.parse_args()
    device = str(tg.get_device(args.device))
    is_cuda = device.startswith("cuda")
    skip = set(filter(None, args.skip.split(",")))
    wp = warp_or_none()
    torch = _torch(device)
    if wp is None:
        print("warp-lang is not installed: Warp columns are skipped")
    n = args.n or (1 << 28 if is_cuda else 1 << 24)

    print(f"tapegrad kernels benchmark on {device} ({platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; warp {getattr(wp, '__version__', '-')}, "
          f"torch {getattr(torch, '__version__', '-')})")
    table = Table(device)
    table.header()
    sections = [("launch", lambda: bench_launch(table, device, wp, torch, args.calls, args.rounds)),
                ("saxpy", lambda: bench_saxpy(table, device, wp, torch, n, args.saxpy_rounds)),
                ("compile", lambda: bench_compile(table, device, wp is not None, args.cold_rounds,
                                                  args.cached_rounds, args.tapegrad_path))]
    for name, fn in sections:
        if name in skip:
            continue
        try:
            fn()
        except Exception as e:  # noqa: BLE001  one failing section must not lose the others
            table.error(name, e)

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(out.read_text())
        if "runs" not in data:
            data = {"runs": {}}
    except (OSError, ValueError):
        data = {"runs": {}}
    data["runs"][device] = {
        "device": device, "time": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
        "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "warp": getattr(wp, "__version__", None), "torch": getattr(torch, "__version__", None),
        "args": vars(args), "rows": table.rows}
    out.write_text(json.dumps(data, indent=2))
    print(f"wrote {out}")
    failed = [r["measure"] for r in table.rows if r.get("ok") is False]
    if failed:
        print("targets missed: " + "; ".join(failed))


if __name__ == "__main__":
    main()
