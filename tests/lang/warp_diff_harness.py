"""Runs the same kernel source under NVIDIA Warp and tapegrad on the CPU and compares the results.

Used by tests/lang/test_warp_differential.py (skipped without Warp) and runnable alone:
``python -m tests.lang.warp_diff_harness`` prints every difference it finds.
"""
import importlib.util
import pathlib

import numpy as np

KERNELS = pathlib.Path(__file__).with_name("warp_diff_kernels.py")
_LOADED = {}


def load(backend):
    """Returns the kernels module with ``wp`` bound to ``backend`` ('warp' or 'tapegrad')."""
    if backend not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"warp_diff_kernels_{backend}", KERNELS)
        mod = importlib.util.module_from_spec(spec)
        mod.WP_BACKEND = backend
        spec.loader.exec_module(mod)
        if backend == "warp":
            mod.wp.config.quiet = True
            mod.wp.init()
        _LOADED[backend] = mod
    return _LOADED[backend]


def In(value, dtype, grad=False):
    return ("in", np.asarray(value), dtype, grad)


def Out(shape, dtype, grad=False, seed=None):
    return ("out", shape, dtype, grad, seed)


def View(value, dtype, view, grad=False):
    """An array made from ``value`` and passed as ``view(array)`` (a slice, a transpose...); with
    ``grad`` the whole array's gradient is returned."""
    return ("view", np.asarray(value), dtype, view, grad)


def Scalar(value):
    return ("scalar", value)


def Struct(**fields):
    return ("struct", fields)


def run(backend, kernel, dim, args, backward=False):
    """Launches ``kernel`` (a name in the kernels module) under ``backend``.

    Returns:
        dict: ``out{k}`` -> NumPy copy of the k-th array argument after the launch, and with
        ``backward`` ``grad{k}`` -> the gradient of every argument made with ``grad=True``.
    """
    mod = load(backend)
    wp = mod.wp
    made = []
    bases = {}
    seeds = {}
    for a in args:
        if a[0] == "in":
            _, val, dt, rg = a
            made.append(wp.array(val, dtype=getattr(wp, dt), requires_grad=rg, device="cpu"))
        elif a[0] == "out":
            _, shape, dt, rg, seed = a
            arr = wp.zeros(shape, dtype=getattr(wp, dt), requires_grad=rg, device="cpu")
            made.append(arr)
            if seed is not None:
                seeds[len(made) - 1] = seed
        elif a[0] == "view":
            _, val, dt, view, rg = a
            base = wp.array(val, dtype=getattr(wp, dt), requires_grad=rg, device="cpu")
            bases[len(made)] = base
            made.append(view(base))
        elif a[0] == "scalar":
            made.append(a[1])
        else:
            s = mod.Params()
            for k, v in a[1].items():
                setattr(s, k, wp.vec3(*v) if isinstance(v, tuple) else v)
            made.append(s)
    k = getattr(mod, kernel)
    tape = wp.Tape()
    with tape:
        wp.launch(k, dim=dim, inputs=made, device="cpu")
    res = {}
    for i, arr in enumerate(made):
        if hasattr(arr, "numpy") and hasattr(arr, "dtype"):
            res[f"out{i}"] = arr.numpy().copy()
    if backward:
        grads = {made[i]: wp.array(np.asarray(s), dtype=made[i].dtype, device="cpu") for i, s in seeds.items()}
        tape.backward(grads=grads)
        for i, (a, arr) in enumerate(zip(args, made)):
            if a[0] == "in" and a[3]:
                res[f"grad{i}"] = arr.grad.numpy().copy()
            if a[0] == "view" and a[4]:
                res[f"grad{i}"] = bases[i].grad.numpy().copy()
    return res


def same_bits(a, b):
    """True when ``a`` and ``b`` hold the same values bit for bit (any NaN equals any NaN)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        nan = np.isnan(a) & np.isnan(b)
        return bool(np.all(nan | ((a == b) & (np.signbit(a) == np.signbit(b)))))
    return bool(np.array_equal(a, b))


def compare(kernel, dim, args, backward=False, rtol=0.0, atol=0.0):
    """Runs ``kernel`` under both and returns a list of (key, index, warp value, tapegrad value)."""
    w = run("warp", kernel, dim, args, backward)
    t = run("tapegrad", kernel, dim, args, backward)
    diffs = []
    for key in w:
        a, b = w[key], t.get(key)
        if b is None or a.shape != b.shape:
            diffs.append((key, None, a, b))
            continue
        af = a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)
        bf = b.reshape(b.shape[0], -1) if b.ndim else b.reshape(1, 1)
        for r in range(af.shape[0]):
            if rtol or atol:
                ok = np.allclose(af[r], bf[r], rtol=rtol, atol=atol, equal_nan=True)
            else:
                ok = same_bits(af[r], bf[r])
            if not ok:
                diffs.append((key, r, af[r], bf[r]))
    return diffs


if __name__ == "__main__":  # pragma: no cover - manual exploration
    import sys

    from tests.lang import warp_diff_cases

    for name, case in warp_diff_cases.CASES.items():
        if len(sys.argv) > 1 and not any(name.startswith(p) for p in sys.argv[1:]):
            continue
        try:
            d = compare(**case)
        except Exception as e:
            print(f"== {name}: ERROR {type(e).__name__}: {str(e)[-300:]!r}")
            continue
        print(f"== {name}: {'same' if not d else f'{len(d)} differences'}")
        for key, r, a, b in d[:12]:
            print(f"   {key}[{r}]  warp={a!r}  tapegrad={b!r}")
