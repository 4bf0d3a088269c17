"""CuPy (and Numba) arrays passed directly to ``launch``, side by side with NVIDIA Warp and CuPy.

A 1-element launch of a kernel with 3 array parameters (``c = a + b``), N launches per sample,
the contenders interleaved round by round (best of rounds; the median of the per-round ratios
is printed too), host dispatch time with one synchronisation per sample:

    tg cupy       tapegrad, 3 CuPy arrays passed directly (the native path's
                  ``__cuda_array_interface__`` layout cache: one CAI dict read per array)
    tg cupy py    the same through launch()'s Python path (information)
    tg arrays     tapegrad, 3 tapegrad arrays (the reference)
    wp cupy       Warp 1.x, the same 3 CuPy arrays passed directly (Warp reads their CAI)
    wp arrays     Warp, 3 Warp arrays
    cupy          CuPy's own ``cupy.add(a, b, out=c)`` (one elementwise kernel launch)

and the same with 3 Numba device arrays when Numba's CUDA target works. Warp columns are
skipped when warp-lang is not installed. Targets (as for torch tensors passed directly in
``kernels.py``): CuPy direct <= 0.5x Warp's CuPy direct and <= 1.5x ``cupy.add``.

    python benchmarks/interop_cupy.py                      # cuda:0
    python benchmarks/interop_cupy.py --calls 5000 --rounds 9
    TAPEGRAD_FAST_LAUNCH=0 python benchmarks/interop_cupy.py   # everything on the Python path

Results: ``benchmarks/results/interop_cupy_<device>.json``. Needs a CUDA GPU and CuPy.
"""
from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from kernels import python_path  # launch()'s Python path switch, as in the launch rows there

import tapegrad as tg

from _peer import warp_or_none
from _timing import compare, fmt_ratio, fmt_time, interleave, per_call, write_results


@tg.kernel
def tg_add3(a: tg.array[float], b: tg.array[float], c: tg.array[float]):
    i = tg.tid()
    c[i] = a[i] + b[i]


def _warp_kernel(wp):
    def wp_add3(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
        i = wp.tid()
        c[i] = a[i] + b[i]
    return wp.Kernel(wp_add3, key="interop_cupy_add3")


def _numba_cuda():
    try:
        from numba import cuda
        if not cuda.is_available():
            return None
        cuda.to_device(np.zeros(1, np.float32))
    except Exception as e:  # noqa: BLE001  no numba, or a CUDA target that does not work here
        print(f"numba columns skipped: {type(e).__name__}: {e}")
        return None
    return cuda


ROWS = [  # (measure, ours, peer, target)
    ("launch, 3 {kind} passed directly vs Warp passing them", "tg", "wp", 0.5),
    ("launch, 3 {kind} passed directly vs cupy.add(out=)", "tg", "cupy", 1.5),
    ("launch, 3 {kind} passed directly vs 3 tapegrad arrays (info)", "tg", "tg_arrays", None),
    ("launch, 3 {kind}: native / Python path (info)", "tg", "tg_py", None),
    ("Warp: 3 {kind} passed directly vs 3 Warp arrays (info)", "wp", "wp_arrays", None),
]


def bench(kind, objs, device, wp, cp, calls, rounds):
    def sync():
        tg.synchronize_device(device)
    o = objs
    cont = {"tg": per_call(lambda: tg.launch(tg_add3, 1, inputs=o[:2], outputs=o[2:], device=device), calls, sync)}
    cont["tg_py"] = python_path(cont["tg"])
    ta = [tg.zeros(1, dtype=float, device=device) for _ in range(3)]
    cont["tg_arrays"] = per_call(lambda: tg.launch(tg_add3, 1, inputs=ta[:2], outputs=ta[2:]), calls, sync)
    if wp is not None:
        wk = _warp_kernel(wp)
        wa = [wp.zeros(1, dtype=float, device=device) for _ in range(3)]

        def wsync():
            wp.synchronize_device(device)
        cont["wp"] = per_call(lambda: wp.launch(wk, 1, inputs=o[:2], outputs=o[2:], device=device), calls, wsync)
        cont["wp_arrays"] = per_call(lambda: wp.launch(wk, 1, inputs=wa[:2], outputs=wa[2:], device=device),
                                     calls, wsync)
        try:
            cont["wp"]()
        except Exception as e:  # noqa: BLE001  a Warp that refuses these objects: its column is left out
            print(f"  warp refuses {kind}: {type(e).__name__}: {e}")
            del cont["wp"]
    ca = [cp.zeros(1, cp.float32) for _ in range(3)]
    cont["cupy"] = per_call(lambda: cp.add(ca[0], ca[1], out=ca[2]), calls, cp.cuda.Device().synchronize)
    s = interleave(cont, rounds)    # its warm-up round compiles and loads
    rows = []
    for measure, ours, peer, target in ROWS:
        if ours not in s or peer not in s:
            continue
        c = compare(s, ours, peer, stat="best")
        ok = "" if target is None else ("ok" if c.ratio <= target else "MISSED")
        label = measure.format(kind=kind)
        print(f"{label:66s} {fmt_time(c.ours)} {fmt_time(c.peer)} {fmt_ratio(c.ratio):>7s} "
              f"(median {fmt_ratio(c.median_ratio)}) {'target <= ' + str(target) if target else ''} {ok}",
              flush=True)
        rows.append({"measure": label, "ours_us": round(c.ours * 1e6, 3), "peer_us": round(c.peer * 1e6, 3),
                     "ratio": round(c.ratio, 3), "median_ratio": round(c.median_ratio, 3), "target": target})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--calls", type=int, default=2000, help="launches per sample")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    ap.add_argument("--no-warp", action="store_true", help="tapegrad and CuPy only")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/interop_cupy_<device>.json)")
    args = ap.parse_args()
    if not tg.is_cuda_available():
        print("interop_cupy: needs a CUDA GPU and CuPy; nothing measured")
        return
    import cupy as cp
    device = str(tg.get_device(args.device))
    wp = None if args.no_warp else warp_or_none()
    if wp is None:
        print("warp-lang is not installed (or --no-warp): Warp columns are skipped")
    print(f"tapegrad {tg.__version__}, CuPy {cp.__version__}, Warp {getattr(wp, '__version__', '-')} on {device}; "
          f"{args.calls} launches x {args.rounds} rounds; native helper "
          f"{'off' if os.environ.get('TAPEGRAD_FAST_LAUNCH') == '0' else 'on'}")
    with cp.cuda.Device(tg.get_device(device).ordinal):
        rows = bench("CuPy arrays", [cp.zeros(1, cp.float32) for _ in range(3)], device, wp, cp, args.calls,
                     args.rounds)
        nb = _numba_cuda()
        if nb is not None:
            rows += bench("Numba arrays", [nb.device_array(1, np.float32) for _ in range(3)], device, wp, cp,
                          args.calls, args.rounds)
    meta = {"device": device, "calls": args.calls, "rounds": args.rounds, "tapegrad": tg.__version__,
            "cupy": cp.__version__, "warp": getattr(wp, "__version__", None),
            "fast_launch": os.environ.get("TAPEGRAD_FAST_LAUNCH", "1") != "0",
            "machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
    out = write_results("interop_cupy_" + device.replace(":", ""), {"meta": meta, "rows": rows}, args.out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
