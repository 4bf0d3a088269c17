"""Every differentiable builtin's adjoint against central finite differences.

The cases come from the builtin table itself (``Overload.samples``): a differentiable
overload without samples fails ``test_every_differentiable_builtin_has_samples``, so a new
builtin cannot skip this test. All cases of one float type are compiled as one module.
float64 adjoints are compared with float64 finite differences; float32 adjoints with the
float64 finite differences of the same inputs, at a looser tolerance.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import types as T
from tapegrad.lang.builtins import REGISTRY
from tapegrad.lang.kernel import load_kernels

N = 5   # threads per case


def _cases():
    out = []
    for name, b in sorted(REGISTRY.items()):
        for k, ov in enumerate(b.overloads):
            for j, s in enumerate(ov.samples):
                out.append((f"{name}_{k}_{j}", name, s))
    return out


CASES = _cases()



def test_every_differentiable_builtin_has_samples():
    missing = [f"{name} overload {k}" for name, b in REGISTRY.items() for k, ov in enumerate(b.overloads)
               if ov.differentiable and not ov.samples]
    assert not missing, f"differentiable builtins without finite-difference samples: {missing}"


def _type(token, F):
    kind = token.split(":")[0]
    if kind == "S":
        return F
    if kind == "B":
        return T.bool_
    if kind == "I":
        return T.int32
    if kind == "Q":
        return T.quatd if F is T.float64 else T.quat
    if kind == "T":
        return T.transformd if F is T.float64 else T.transform
    if kind[0] == "V":
        return T.vector(int(kind[1]), F)
    if kind[0] == "M":
        return T.matrix((int(kind[1]), int(kind[2])), F)
    raise ValueError(token)


def _sample(token, rng):
    kind, dom = (token.split(":") + ["any"])[:2]
    t = _type(token, T.float64)
    shape = (N,) + tuple(getattr(t, "inner_shape", ()))
    if kind == "B":
        return rng.random(N) < 0.5
    if dom == "inv":
        n = t.rows
        return 2.0 * np.eye(n)[None] + 0.3 * rng.normal(size=(N, n, n))
    if kind == "Q":
        q = rng.normal(size=(N, 4))
        return q / np.linalg.norm(q, axis=1, keepdims=True)
    if kind == "T":   # a rigid transform: any position, a unit rotation quaternion
        q = rng.normal(size=(N, 4))
        return np.concatenate([rng.normal(size=(N, 3)), q / np.linalg.norm(q, axis=1, keepdims=True)], axis=1)
    if dom == "pos":
        return rng.uniform(0.5, 2.0, shape)
    if dom == "unit":
        return rng.uniform(-0.8, 0.8, shape)
    if dom == "away":
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)
    if dom == "lo":
        return rng.uniform(-1.5, -0.5, shape)
    if dom == "hi":
        return rng.uniform(0.5, 1.5, shape)
    return rng.normal(size=shape)


def _module_source(F):
    lines = ["import tapegrad as tg", "from tapegrad import types as T", "from tests_builtin_types import TYPES", ""]
    suffix = "d" if F is T.float64 else ""
    for cid, name, s in CASES:
        params = []
        for j, tok in enumerate(s.args):
            params.append(f"x{j}: T.ArrayType(TYPES[{tok.split(':')[0]!r}], 1)")
        params.append(f"out: T.ArrayType(TYPES[{s.out!r}], 1)")
        stmt = s.stmt or f"out[i] = tg.{name}({', '.join('{%d}' % j for j in range(len(s.args)))})"
        stmt = stmt.replace("{d}", suffix).replace("{o}", "d").replace("{F}", F.name).replace("{G}", "float64")
        stmt = stmt.format(*[f"x{j}[i]" for j in range(len(s.args))])
        lines += ["@tg.kernel", f"def k_{cid}({', '.join(params)}):", "    i = tg.tid()", f"    {stmt}", ""]
    return "\n".join(lines)


_MODULES: dict = {}


def _kernels(F, tmp_dir, device):
    key = (F.name, device)
    if key in _MODULES:
        return _MODULES[key]
    import sys
    import types as pytypes
    tmod = pytypes.ModuleType("tests_builtin_types")
    tmod.TYPES = {k: _type(k + ":any", F) for k in
                  ("S", "B", "I", "Q", "T", "V2", "V3", "V4", "V6", "M22", "M33", "M44", "M23", "M32",
                   "M66")}
    sys.modules["tests_builtin_types"] = tmod
    path = os.path.join(tmp_dir, f"builtin_cases_{F.name}.py")
    with open(path, "w") as f:
        f.write(_module_source(F))
    spec = importlib.util.spec_from_file_location(f"builtin_cases_{F.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernels = {cid: getattr(mod, f"k_{cid}") for cid, _, _ in CASES}
    load_kernels(list(kernels.values()), tg.get_device(device))
    _MODULES[key] = kernels
    return kernels


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("builtin_cases"))


def _run(kernel, inputs, F, s, device, adj_out=None):
    """Forward (or adjoint when adj_out is given); returns out (and input adjoints)."""
    tys = [_type(t, F) for t in s.args]
    ins = [tg.array(np.asarray(x, dtype=T.bool_.np_dtype if t is T.bool_ else F.np_dtype), dtype=t, device=device)
           for x, t in zip(inputs, tys)]
    oty = _type(s.out, F)
    out_np = np.full((N,) + tuple(getattr(oty, "inner_shape", ())), s.out_init, dtype=F.np_dtype)
    out = tg.array(out_np, dtype=oty, device=device)
    if adj_out is None:
        tg.launch(kernel, dim=N, inputs=ins, outputs=[out], device=device)
        return out.numpy().astype(np.float64)
    # the adjoint sees the arrays as the forward left them (atomic_min/max compare against them)
    tg.launch(kernel, dim=N, inputs=ins, outputs=[out], device=device)
    adj_ins = [tg.zeros(N, dtype=t, device=device) for t in tys]
    g = tg.array(np.asarray(adj_out, dtype=F.np_dtype), dtype=oty, device=device)
    tg.launch(kernel, dim=N, inputs=ins, outputs=[out], device=device, adjoint=True, adj_inputs=adj_ins,
              adj_outputs=[g])
    return [a.numpy().astype(np.float64) for a in adj_ins]


def _fd(kernel, inputs, s, adj_out, device, h=1e-6):
    """Central differences of sum(adj_out * f(inputs)) in float64, per thread and component."""
    grads = []
    for j, x in enumerate(inputs):
        tok = s.args[j]
        if tok.startswith("B") or tok.startswith("I"):
            grads.append(None)
            continue
        g = np.zeros_like(x, dtype=np.float64)
        flat = x.reshape(N, -1)
        for c in range(flat.shape[1]):
            xs_p = [np.array(v, dtype=np.float64) if not s.args[q].startswith(("B", "I")) else v
                    for q, v in enumerate(inputs)]
            xs_m = [np.array(v, copy=True) for v in xs_p]
            xs_p[j].reshape(N, -1)[:, c] += h
            xs_m[j].reshape(N, -1)[:, c] -= h
            fp = _run(kernel, xs_p, T.float64, s, device)
            fm = _run(kernel, xs_m, T.float64, s, device)
            d = ((fp - fm) * adj_out).reshape(N, -1).sum(axis=1) / (2 * h)
            g.reshape(N, -1)[:, c] = d
        grads.append(g)
    return grads


@pytest.mark.parametrize("F", [T.float64, T.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("cid,name,sample", CASES, ids=[c[0] for c in CASES])
def test_builtin_adjoint_matches_finite_differences(cid, name, sample, F, device, case_dir):
    rng = np.random.default_rng(abs(hash(cid)) % (2 ** 32))
    inputs = [_sample(t, rng) for t in sample.args]
    if F is T.float32:
        inputs = [x.astype(np.float32).astype(np.float64) if x.dtype != bool else x for x in inputs]
    oty = _type(sample.out, T.float64)
    adj_out = rng.normal(size=(N,) + tuple(getattr(oty, "inner_shape", ())))
    k64 = _kernels(T.float64, case_dir, device)[cid]
    expected = _fd(k64, inputs, sample, adj_out, device)
    got = _run(_kernels(F, case_dir, device)[cid], inputs, F, sample, device, adj_out=adj_out)
    rtol, atol = (1e-5, 1e-6) if F is T.float64 else (3e-3, 3e-3)
    for j, (e, g) in enumerate(zip(expected, got)):
        if e is None:
            continue
        g = g.reshape(e.shape)
        scale = max(1.0, float(np.abs(e).max()))
        assert np.allclose(g, e, rtol=rtol, atol=atol * scale), (
            f"{name}: adjoint of argument {j} ({sample.args[j]}) differs from finite differences\n"
            f"adjoint={g.reshape(N, -1)}\nfd={e.reshape(N, -1)}")
