"""torch <-> tapegrad interop overhead, side by side with NVIDIA Warp (SPEC R18).

Warp's ``benchmark_interop_torch.py`` method: five tensors of 10 elements, a kernel with five
array parameters and an empty body, N iterations of "convert five tensors, launch" with no
synchronisation inside the loop (host-side dispatch cost only). Modes:

    from_torch     five ``from_torch`` + launch                     (Warp's sample: 5095 ms)
    return_ctype   five ``from_torch(..., return_ctype=True)`` + launch        (2113 ms)
    direct         the five tensors passed to ``launch`` as they are           (2950 ms)
    reuse          launch with arrays converted once, before the loop
    to_torch       five ``to_torch`` of tapegrad/Warp arrays (no launch)

for float32, vec3 and mat22. Each figure is measured for tapegrad and Warp in the same run and
reported as the ratio tapegrad / Warp (lower is better; targets: from_torch <= 0.5,
return_ctype/direct/to_torch <= 0.7). Results: ``benchmarks/results/interop_torch_<device>.json``.

    python benchmarks/interop_torch.py                # N = 100,000, CPU
    python benchmarks/interop_torch.py --n 20000 --device cuda:0
"""

import argparse
import os
import platform

import torch

import tapegrad as tg

from _peer import warp_or_none
from _timing import compare, interleave, per_call, write_results

TARGETS = {"from_torch": 0.5, "return_ctype": 0.7, "direct": 0.7, "to_torch": 0.7}


@tg.kernel
def tg_f32(a: tg.array[tg.float32], b: tg.array[tg.float32], c: tg.array[tg.float32],
           d: tg.array[tg.float32], e: tg.array[tg.float32]):
    pass


@tg.kernel
def tg_vec3(a: tg.array[tg.vec3], b: tg.array[tg.vec3], c: tg.array[tg.vec3],
            d: tg.array[tg.vec3], e: tg.array[tg.vec3]):
    pass


@tg.kernel
def tg_mat22(a: tg.array[tg.mat22], b: tg.array[tg.mat22], c: tg.array[tg.mat22],
             d: tg.array[tg.mat22], e: tg.array[tg.mat22]):
    pass


def _warp():
    wp = warp_or_none()
    if wp is None:
        return None

    def make(dtype):
        def k(a: wp.array(dtype=dtype), b: wp.array(dtype=dtype), c: wp.array(dtype=dtype),
              d: wp.array(dtype=dtype), e: wp.array(dtype=dtype)):
            pass
        return wp.Kernel(k, key=f"interop_{dtype.__name__}")

    return wp, {"float32": (make(wp.float32), wp.float32), "vec3": (make(wp.vec3), wp.vec3),
                "mat22": (make(wp.mat22), wp.mat22)}


def _side_by_side(fa, fb, n, chunks=20):
    """Total ms of ``fa(n)`` and ``fb(n)``, run in alternating chunks so that both see the same
    machine load (these machines are shared and noisy). ``fb`` may be None."""
    fa(1)   # warm-up: compilation, caches
    if fb is not None:
        fb(1)
    m = max(1, n // chunks)
    samples = interleave({"tapegrad": per_call(lambda: fa(m), 1),
                          "warp": per_call(lambda: fb(m), 1) if fb is not None else None}, chunks, warmup=0)
    c = compare(samples, "tapegrad", "warp", stat="mean")   # mean chunk time x chunks = the total
    scale = n / m * 1e3
    return c.ours * scale, (c.peer * scale if c.peer is not None else None)


def _modes(lib, kernel, dtype, tensors, arrays, device):
    """The five loops of one library; each takes an iteration count."""
    from_torch, to_torch, launch = lib.from_torch, lib.to_torch, lib.launch
    a, b, c, d, e = tensors
    wa = arrays

    def m_from(n):
        for _ in range(n):
            launch(kernel, dim=10, inputs=[from_torch(a, dtype=dtype), from_torch(b, dtype=dtype),
                                           from_torch(c, dtype=dtype), from_torch(d, dtype=dtype),
                                           from_torch(e, dtype=dtype)], device=device)

    def m_ctype(n):
        for _ in range(n):
            launch(kernel, dim=10, inputs=[from_torch(a, dtype=dtype, return_ctype=True),
                                           from_torch(b, dtype=dtype, return_ctype=True),
                                           from_torch(c, dtype=dtype, return_ctype=True),
                                           from_torch(d, dtype=dtype, return_ctype=True),
                                           from_torch(e, dtype=dtype, return_ctype=True)], device=device)

    def m_direct(n):
        for _ in range(n):
            launch(kernel, dim=10, inputs=[a, b, c, d, e], device=device)

    def m_reuse(n):
        conv = [from_torch(t, dtype=dtype) for t in tensors]
        for _ in range(n):
            launch(kernel, dim=10, inputs=conv, device=device)

    def m_to(n):
        for _ in range(n):
            to_torch(wa[0]), to_torch(wa[1]), to_torch(wa[2]), to_torch(wa[3]), to_torch(wa[4])

    return {"from_torch": m_from, "return_ctype": m_ctype, "direct": m_direct, "reuse": m_reuse, "to_torch": m_to}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="iterations per measurement (default 100,000)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-warp", action="store_true", help="tapegrad only")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/interop_torch_<device>.json)")
    args = ap.parse_args()

    dev = args.device
    tdev = tg.device_to_torch(dev)
    warp = None if args.no_warp else _warp()
    tg_kernels = {"float32": (tg_f32, tg.float32), "vec3": (tg_vec3, tg.vec3), "mat22": (tg_mat22, tg.mat22)}
    rows = []
    for name, (kernel, dtype) in tg_kernels.items():
        shape = (10,) + dtype.inner_shape
        tensors = [torch.zeros(shape, device=tdev) for _ in range(5)]
        tg_arrays = [tg.zeros(10, dtype=dtype, device=dev) for _ in range(5)]
        tg_modes = _modes(tg, kernel, dtype, tensors, tg_arrays, dev)
        wp_modes = None
        if warp is not None:
            wp, wk = warp
            wkernel, wdtype = wk[name]
            wp_arrays = [wp.zeros(10, dtype=wdtype, device=dev) for _ in range(5)]
            wp_modes = _modes(wp, wkernel, wdtype, tensors, wp_arrays, dev)
        for mode in tg_modes:
            wfn = wp_modes[mode] if wp_modes is not None else None
            if wfn is not None:
                try:
                    wfn(1)
                except Exception as e:  # e.g. Warp refusing a mode on this device
                    print(f"  warp {mode} {name}: {type(e).__name__}: {e}")
                    wfn = None
            t_ms, w_ms = _side_by_side(tg_modes[mode], wfn, args.n)
            if dev != "cpu":
                tg.synchronize()
            rows.append({"dtype": name, "mode": mode, "tapegrad_ms": round(t_ms, 1),
                         "warp_ms": None if w_ms is None else round(w_ms, 1),
                         "ratio": None if not w_ms else round(t_ms / w_ms, 3),
                         "target": TARGETS.get(mode)})
            r = rows[-1]
            ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
            wtxt = f"{r['warp_ms']:9.1f} ms" if r["warp_ms"] is not None else "        -   "
            target = f"(target <= {r['target']})" if r["target"] is not None and r["ratio"] is not None else ""
            ok = "" if not target else ("ok" if r["ratio"] <= r["target"] else "MISSED")
            print(f"{name:8s} {mode:13s} tapegrad {t_ms:9.1f} ms   warp {wtxt}   {ratio:>7s} {target} {ok}", flush=True)

    meta = {"n": args.n, "device": dev, "torch": torch.__version__, "tapegrad": tg.__version__,
            "warp": getattr(warp[0], "__version__", None) if warp else None,
            "machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
    out = write_results("interop_torch_" + dev.replace(":", ""), {"meta": meta, "rows": rows}, args.out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
