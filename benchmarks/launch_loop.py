"""The launch in a tight loop: `tg.launch` of a 3-array kernel (one element) called back to back,
against the peers' own small launches (torch / CuPy `add(out=)`, Warp's `wp.launch`, numpy's
`add(out=)` on the CPU) and, on CUDA, against the driver itself: `driver_loop.c` calling
`cuLaunchKernel` from C with the parameter block tapegrad's ABI passes (compiled here when a C
compiler, `cuda.h` and `libcuda.so.1` are found). The driver's loop is the floor any launcher
from Python can reach; the gap above it is what tapegrad's launch path costs.

Each contender runs in its own fresh process (one process's caches and allocator state do not
tilt another's figure), the processes alternate run by run, and each times `--rounds` rounds of
`--launches` launches with a final synchronize (a tight loop of small kernels fills the queue,
so the host's cost per launch is what is timed). Per contender: the best round of all runs, and
the median of the runs' medians.

    python benchmarks/launch_loop.py [--device cuda:0] [--runs 4] [--launches 20000] [--rounds 9]

Prints a table and writes benchmarks/results/launch_loop_<device>.json.
"""
from __future__ import annotations

import argparse
import ctypes.util
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _timing import write_results

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ one contender, in this process

def _tapegrad(device):
    import tapegrad as tg

    @tg.kernel
    def add3(a: tg.array(dtype=tg.float32), b: tg.array(dtype=tg.float32), c: tg.array(dtype=tg.float32)):
        i = tg.tid()
        c[i] = a[i] + b[i]

    a, b, c = (tg.zeros(1, dtype=tg.float32, device=device) for _ in range(3))
    for _ in range(3):      # compiles; the first launch registers its module with the native helper
        tg.launch(add3, 1, inputs=[a, b, c])
    return (lambda: tg.launch(add3, 1, inputs=[a, b, c])), (lambda: tg.synchronize_device(device))


def _torch(device):
    import torch
    x, y, z = (torch.zeros(1, device=device) for _ in range(3))
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    return (lambda: torch.add(x, y, out=z)), sync


def _cupy(device):
    import cupy as cp
    with cp.cuda.Device(int(device.partition(":")[2] or 0)):
        x, y, z = (cp.zeros(1, cp.float32) for _ in range(3))
    return (lambda: cp.add(x, y, out=z)), cp.cuda.runtime.deviceSynchronize


def _numpy(device):
    import numpy as np
    x, y, z = (np.zeros(1, np.float32) for _ in range(3))
    return (lambda: np.add(x, y, out=z)), (lambda: None)


def _warp(device):
    import warp as wp

    from _peer import quiet_warp
    quiet_warp(wp)

    @wp.kernel
    def wadd3(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32), c: wp.array(dtype=wp.float32)):
        i = wp.tid()
        c[i] = a[i] + b[i]

    a, b, c = (wp.zeros(1, dtype=wp.float32, device=device) for _ in range(3))
    wp.launch(wadd3, 1, inputs=[a, b, c], device=device)
    wp.synchronize_device(device)
    return (lambda: wp.launch(wadd3, 1, inputs=[a, b, c], device=device)), (lambda: wp.synchronize_device(device))


MAKERS = {"tapegrad": _tapegrad, "torch": _torch, "cupy": _cupy, "numpy": _numpy, "warp": _warp}


def run_one(name, device, launches, rounds):
    """Prints ``<name> <min> <median>`` (microseconds per launch) for one contender."""
    fn, sync = MAKERS[name](device)
    times = []
    for _ in range(rounds):
        sync()
        t = time.perf_counter()
        for _ in range(launches):
            fn()
        sync()
        times.append((time.perf_counter() - t) / launches * 1e6)
    times.sort()
    print(f"{name} {times[0]:.3f} {times[len(times) // 2]:.3f}")


# ------------------------------------------------------------------ the driver's own loop

def driver_binary(tmp):
    """``driver_loop.c`` compiled, or (None, why)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    headers = [p for p in ("/usr/local/cuda/include/cuda.h", *glob.glob("/usr/local/cuda*/include/cuda.h"),
                           *glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/cu*/include/cuda.h"),
                           *glob.glob(os.path.join(sys.prefix, "lib/python3*/site-packages/nvidia/cu*/include/cuda.h")),
                           "/usr/include/cuda.h") if os.path.exists(p)]
    lib = ctypes.util.find_library("cuda")
    if lib and not os.path.isabs(lib):     # the linker wants the file: ldconfig's path for the soname
        ld = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout if shutil.which("ldconfig") \
            else ""
        lib = next((ln.split("=>")[-1].strip() for ln in ld.splitlines() if ln.strip().startswith(lib + " ")), lib)
    if not (cc and headers and lib):
        return None, f"the driver's loop not built (compiler {cc}, cuda.h {headers[:1]}, libcuda {lib})"
    out = os.path.join(tmp, "driver_loop")
    r = subprocess.run([cc, "-O2", os.path.join(HERE, "driver_loop.c"), "-I", os.path.dirname(headers[0]),
                        "-o", out, lib if os.path.isabs(lib) else f"-l:{lib}"],
                       capture_output=True, text=True)
    return (out, None) if r.returncode == 0 else (None, f"the driver's loop did not build: {r.stderr[-300:]}")


# ------------------------------------------------------------------ the table

def available(device):
    names = ["tapegrad", "torch"]
    if device.startswith("cuda"):
        names.append("cupy")
    else:
        names.append("numpy")
    names.append("warp")
    import importlib.util
    return [n for n in names if n in ("tapegrad", "numpy") or importlib.util.find_spec(n) is not None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=4, help="processes per contender, alternated")
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        run_one(a.one, a.device, a.launches, a.rounds)
        return
    names = available(a.device)
    samples = {}
    note = None
    with tempfile.TemporaryDirectory() as tmp:
        drv = None
        if a.device.startswith("cuda"):
            drv, note = driver_binary(tmp)
        for _ in range(a.runs):
            for n in names:
                r = subprocess.run([sys.executable, __file__, "--one", n, "--device", a.device, "--launches",
                                    str(a.launches), "--rounds", str(a.rounds)], capture_output=True, text=True)
                lines = [ln for ln in r.stdout.splitlines() if ln.startswith(n + " ")]
                if r.returncode or not lines:
                    samples.setdefault(n, None)
                    print(f"{n}: failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
                    continue
                _, lo, med = lines[-1].split()
                if samples.get(n, ()) is not None:
                    samples.setdefault(n, []).append((float(lo), float(med)))
            if drv:
                r = subprocess.run([drv, str(a.launches), str(a.rounds)], capture_output=True, text=True)
                for ln in r.stdout.splitlines():
                    k, lo, med = ln.split()
                    samples.setdefault(k, []).append((float(lo), float(med)))
    rows = []
    ours = samples.get("tapegrad")
    best_ours = min(s[0] for s in ours) if ours else None
    med_ours = statistics.median(s[1] for s in ours) if ours else None
    print(f"tight loop of {a.launches} launches, 3-array kernel, {a.device}: {a.runs} processes each, "
          f"{a.rounds} rounds each")
    print(f"{'contender':14s} {'best':>8s} {'median':>8s}   tapegrad / it (best, median)")
    for n, s in samples.items():
        if not s:
            continue
        lo, med = min(x[0] for x in s), statistics.median(x[1] for x in s)
        ratio = (best_ours / lo, med_ours / med) if ours else (None, None)
        rows.append({"contender": n, "best_us": lo, "median_us": med, "ratio_best": ratio[0], "ratio_median": ratio[1]})
        print(f"{n:14s} {lo:8.2f} {med:8.2f}   " + ("" if n == "tapegrad" or not ours else
                                                    f"{ratio[0]:.2f}x / {ratio[1]:.2f}x"))
    if note:
        print(note)
    write_results(f"launch_loop_{a.device.replace(':', '')}", {"device": a.device, "launches": a.launches,
                                                               "rounds": a.rounds, "runs": a.runs, "rows": rows,
                                                               "note": note})


if __name__ == "__main__":
    main()
