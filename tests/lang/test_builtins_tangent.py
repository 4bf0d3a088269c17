"""Every differentiable builtin's tangent and second derivative against central finite
differences (issue 26), from the builtin table's samples (``Overload.samples``, as
``test_builtins_grad.py``): a new differentiable overload gets both checks automatically.

* tangent: ``launch(tangent=True)`` along a random direction u vs (f(x + h u) - f(x - h u)) / 2h;
* second order: ``launch(adjoint=True, tangent=True)`` (the tangent of the adjoint J^T g along
  u) vs central differences of the float64 adjoint along u.

A builtin without a forward-mode rule must raise a KernelError naming it (never a zero):
those are listed in ``NO_FORWARD_RULE`` so the list cannot grow silently.
"""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import types as T
from tapegrad.launch.tangent import load_tangents

from .test_builtins_grad import CASES, N, _kernels, _run, _sample, _type

NO_FORWARD_RULE = {"atomic_min", "atomic_max"}   # the tangent of a concurrent minimum is not determined


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("builtin_tangent_cases"))


_LOADED: set = set()


def _tangent_kernels(F, case_dir, device):
    """The cases' kernels with their tangent and second-order code built in one unit."""
    kernels = _kernels(F, case_dir, device)
    if (F.name, device) not in _LOADED:
        load_tangents([kernels[cid] for cid, name, _ in CASES if name not in NO_FORWARD_RULE],
                      tg.get_device(device), second_order=True)
        _LOADED.add((F.name, device))
    return kernels


def _arrays(inputs, s, F, device):
    tys = [_type(t, F) for t in s.args]
    return [tg.array(np.asarray(x, dtype=T.bool_.np_dtype if t is T.bool_ else F.np_dtype), dtype=t, device=device)
            for x, t in zip(inputs, tys)]


def _out(s, F, device):
    oty = _type(s.out, F)
    return tg.array(np.full((N,) + tuple(getattr(oty, "inner_shape", ())), s.out_init, dtype=F.np_dtype),
                    dtype=oty, device=device)


def _differentiable(tok):
    return not tok.startswith(("B", "I"))


def _tangent_launch(kernel, inputs, u, s, F, device, adj_out=None):
    """The outputs' tangent along u; with ``adj_out``: also the tangent of the adjoint."""
    ins = _arrays(inputs, s, F, device)
    tans = [tg.array(np.asarray(d, dtype=F.np_dtype), dtype=_type(t, F), device=device) if _differentiable(t)
            else None for t, d in zip(s.args, u)]
    out = _out(s, F, device)
    tout = tg.zeros_like(out)
    tg.launch(kernel, dim=N, inputs=ins, outputs=[out], tangent=True, tan_inputs=tans, tan_outputs=[tout])
    if adj_out is None:
        return tout.numpy().astype(np.float64)
    oty = _type(s.out, F)
    adj_ins = [tg.zeros(N, dtype=_type(t, F), device=device) for t in s.args]
    tadj = [tg.zeros(N, dtype=_type(t, F), device=device) if _differentiable(t) else None for t in s.args]
    g = tg.array(np.asarray(adj_out, dtype=F.np_dtype), dtype=oty, device=device)
    tg.launch(kernel, dim=N, inputs=ins, outputs=[out], adjoint=True, adj_inputs=adj_ins, adj_outputs=[g],
              tangent=True, tan_inputs=tans, tan_outputs=[tout], tan_adj_inputs=tadj, tan_adj_outputs=[None])
    return [t.numpy().astype(np.float64) if t is not None else None for t in tadj]


def _shift(inputs, u, s, h):
    return [np.asarray(x, dtype=np.float64) + h * d if _differentiable(t) else x
            for x, d, t in zip(inputs, u, s.args)]


@pytest.mark.parametrize("F", [T.float64, T.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("cid,name,sample", CASES, ids=[c[0] for c in CASES])
def test_builtin_tangent_and_second_derivative(cid, name, sample, F, device, case_dir):
    rng = np.random.default_rng(abs(hash(cid)) % (2 ** 32) + 7)
    inputs = [_sample(t, rng) for t in sample.args]
    if F is T.float32:
        inputs = [x.astype(np.float32).astype(np.float64) if x.dtype != bool else x for x in inputs]
    u = [rng.normal(size=np.shape(x)) if _differentiable(t) else None for x, t in zip(inputs, sample.args)]
    kernel = _tangent_kernels(F, case_dir, device)[cid]
    k64 = _kernels(T.float64, case_dir, device)[cid]
    if name in NO_FORWARD_RULE:
        with pytest.raises(tg.KernelError, match=f"{name}.*no forward-mode"):
            _tangent_launch(kernel, inputs, u, sample, F, device)
        return
    h = 1e-6
    rtol, atol = (1e-5, 1e-6) if F is T.float64 else (3e-3, 3e-3)
    fd = (_run(k64, _shift(inputs, u, sample, h), T.float64, sample, device)
          - _run(k64, _shift(inputs, u, sample, -h), T.float64, sample, device)) / (2 * h)
    got = _tangent_launch(kernel, inputs, u, sample, F, device).reshape(fd.shape)
    scale = max(1.0, float(np.abs(fd).max()))
    assert np.allclose(got, fd, rtol=rtol, atol=atol * scale), (
        f"{name}: tangent differs from finite differences\ntangent={got.reshape(N, -1)}\nfd={fd.reshape(N, -1)}")
    if sample.out_init != 0.0 or not any(_differentiable(t) for t in sample.args):
        return
    oty = _type(sample.out, T.float64)
    adj_out = rng.normal(size=(N,) + tuple(getattr(oty, "inner_shape", ())))
    gp = _run(k64, _shift(inputs, u, sample, h), T.float64, sample, device, adj_out=adj_out)
    gm = _run(k64, _shift(inputs, u, sample, -h), T.float64, sample, device, adj_out=adj_out)
    got2 = _tangent_launch(kernel, inputs, u, sample, F, device, adj_out=adj_out)
    for j, t in enumerate(sample.args):
        if not _differentiable(t):
            continue
        e = (gp[j] - gm[j]) / (2 * h)
        g = got2[j].reshape(e.shape)
        scale = max(1.0, float(np.abs(e).max()))
        tol = (1e-4, 1e-5) if F is T.float64 else (3e-3, 3e-3)
        assert np.allclose(g, e, rtol=tol[0], atol=tol[1] * scale), (
            f"{name}: second derivative (tangent of the adjoint) of argument {j} ({t}) differs from finite "
            f"differences\ngot={g.reshape(N, -1)}\nfd={e.reshape(N, -1)}")
