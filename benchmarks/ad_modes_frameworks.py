"""Hessian-vector products through framework ops (issue 27 item 5): a ``tg.torch_op`` /
``tg.paddle_op`` against the same function written in the framework's native ops, same run.

    python benchmarks/ad_modes_frameworks.py [--device cpu] [--reps 5] [--n 1048576] [--only torch|paddle]

Function: loss(x) = sum(sin(x) exp(-x^2 / 4) + tanh(w x)) on n float64 elements (the kernel
computes the elementwise part; the sum is the framework's). Cases per framework:

* ``rev_rev``: ``g = grad(loss, x, create_graph=True)``, ``hv = grad(g . v, x)`` (double backward;
  torch and paddle);
* ``fwd_rev``: ``torch.func.jvp(torch.func.grad(loss), (x,), (v,))`` (forward over reverse; torch).

Reports median times and the ratio kernel op / native (goal: <= 1). Writes
benchmarks/results/ad_modes_frameworks[_<device>].json.
"""
import argparse

import numpy as np

import tapegrad as tg

from _timing import median_time, write_results


@tg.kernel
def elem_op(x: tg.array[tg.float64], w: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * tg.exp(-x[i] * x[i] * 0.25) + tg.tanh(w[i] * x[i])


def torch_cases(n, device, reps):
    import torch
    op = tg.torch_op(elem_op)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.normal(size=n), dtype=torch.float64, device=device)
    w = torch.tensor(rng.normal(size=n), dtype=torch.float64, device=device)
    v = torch.tensor(rng.normal(size=n), dtype=torch.float64, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def native(x):
        return (torch.sin(x) * torch.exp(-x * x * 0.25) + torch.tanh(w * x)).sum()

    def kernel(x):
        return op(x, w).sum()

    def rev_rev(f):
        def run():
            xg = x.clone().requires_grad_()
            (g,) = torch.autograd.grad(f(xg), xg, create_graph=True)
            (hv,) = torch.autograd.grad((g * v).sum(), xg)
            return hv
        return run

    def fwd_rev(f):
        return lambda: torch.func.jvp(torch.func.grad(f), (x,), (v,))[1]

    def fwd_bwd(f):
        def run():
            xg = x.clone().requires_grad_()
            f(xg).backward()
        return run

    torch.testing.assert_close(rev_rev(kernel)(), rev_rev(native)(), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(fwd_rev(kernel)(), fwd_rev(native)(), rtol=1e-9, atol=1e-9)
    out = {}
    for name, case in (("forward+backward", fwd_bwd), ("rev_rev", rev_rev), ("fwd_rev", fwd_rev)):
        tk, tn = median_time(case(kernel), reps, sync), median_time(case(native), reps, sync)
        out[name] = {"kernel_op_s": tk, "native_s": tn, "ratio": tk / tn}
    return out


def paddle_cases(n, device, reps):
    import paddle
    paddle.set_device("gpu" if device.startswith("cuda") else "cpu")
    op = tg.paddle_op(elem_op)
    rng = np.random.default_rng(0)
    xn = rng.normal(size=n)
    w = paddle.to_tensor(rng.normal(size=n), dtype="float64")
    v = paddle.to_tensor(rng.normal(size=n), dtype="float64")
    sync = paddle.device.synchronize if device.startswith("cuda") else (lambda: None)

    def native(x):
        return (paddle.sin(x) * paddle.exp(-x * x * 0.25) + paddle.tanh(w * x)).sum()

    def kernel(x):
        return op(x, w).sum()

    def rev_rev(f):
        def run():
            x = paddle.to_tensor(xn, dtype="float64", stop_gradient=False)
            (g,) = paddle.grad(f(x), [x], create_graph=True)
            (hv,) = paddle.grad((g * v).sum(), [x])
            return hv.numpy()
        return run

    def fwd_bwd(f):
        def run():
            x = paddle.to_tensor(xn, dtype="float64", stop_gradient=False)
            f(x).backward()
        return run

    np.testing.assert_allclose(rev_rev(kernel)(), rev_rev(native)(), rtol=1e-9, atol=1e-9)
    out = {}
    for name, case in (("forward+backward", fwd_bwd), ("rev_rev", rev_rev)):
        tk, tn = median_time(case(kernel), reps, sync), median_time(case(native), reps, sync)
        out[name] = {"kernel_op_s": tk, "native_s": tn, "ratio": tk / tn}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--only", choices=("torch", "paddle"))
    a = ap.parse_args()
    res = {"n": a.n, "device": a.device, "reps": a.reps}
    for name, fn in (("torch", torch_cases), ("paddle", paddle_cases)):
        if a.only and a.only != name:
            continue
        res[name] = fn(a.n, a.device, a.reps)
        for case, r in res[name].items():
            print(f"{name:7s} {case:17s} kernel op {r['kernel_op_s'] * 1e3:8.1f} ms   native "
                  f"{r['native_s'] * 1e3:8.1f} ms   ratio {r['ratio']:.2f}")
    stem = "ad_modes_frameworks" + ("" if a.device == "cpu" else "_" + a.device.replace(":", ""))
    print("wrote", write_results(stem, res))


if __name__ == "__main__":
    main()
