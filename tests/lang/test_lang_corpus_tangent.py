"""Forward mode and second order over the kernel corpus (issue 26): for every differentiable
corpus kernel, the tangent launch (``launch(tangent=True)``) matches float64 central finite
differences of the outputs along a random direction, and the tangent of the adjoint
(``launch(adjoint=True, tangent=True)``) matches central differences of the adjoint's
gradients along it (Hessian-vector products). The corpus has in-place updates, loops
(static and dynamic), branches, atomics, structs, tuples, vectors and matrices."""

import warnings

import numpy as np
import pytest

import tapegrad as tg

from . import corpus_kernels as corpus
from .test_lang_corpus import _concrete

pytestmark = pytest.mark.filterwarnings("ignore::tapegrad.TapeCompileWarning")

CASES = [c for c in corpus.CASES if c.grad]


def _arrays(case, shift=None, zero_outputs=False):
    vals = []
    for k, a in enumerate(case.args):
        if isinstance(a, corpus.A):
            data = np.array(a.data, copy=True)
            if shift is not None and k in shift:
                data = data + shift[k]
            if zero_outputs:
                data = np.zeros_like(data)
            vals.append(tg.array(data, dtype=a.dtype))
        else:
            vals.append(a)
    return vals


def _is_float64(a):
    return isinstance(a, corpus.A) and a.data.dtype == np.float64


def _direction(case, rng):
    """A random direction over the float64 arrays that are not outputs."""
    return {k: rng.normal(size=a.data.shape) for k, a in enumerate(case.args)
            if _is_float64(a) and k not in case.outputs}


def _tangents(case, u, device):
    out = []
    for k, a in enumerate(case.args):
        if isinstance(a, corpus.A) and a.data.dtype.kind == "f":
            out.append(tg.array(u[k] if k in u else np.zeros_like(a.data), dtype=a.dtype, device=device))
        else:
            out.append(None)
    return out


def _weights(case, rng):
    return {k: rng.normal(size=case.args[k].data.shape) for k in case.outputs}


def _adjoints(case, weights, device):
    adj = []
    for k, a in enumerate(case.args):
        if isinstance(a, corpus.A):
            g = weights[k] if k in case.outputs else np.zeros_like(a.data)
            adj.append(tg.array(np.array(g, dtype=a.data.dtype), dtype=a.dtype, device=device))
        else:
            adj.append(None if isinstance(a, corpus.A) else type(a)(0))
    return adj


def _outputs(kernel, case, shift):
    vals = _arrays(case, shift)
    tg.launch(kernel, dim=case.dim, inputs=vals)
    return {k: vals[k].numpy().astype(np.float64) for k in case.outputs}


def _grads(kernel, case, shift, weights):
    vals = _arrays(case, shift)
    tg.launch(kernel, dim=case.dim, inputs=vals)
    adj = _adjoints(case, weights, "cpu")
    tg.launch(kernel, dim=case.dim, inputs=vals, adjoint=True, adj_inputs=adj)
    return {k: adj[k].numpy().astype(np.float64) for k, a in enumerate(case.args) if _is_float64(a)
            and k not in case.outputs}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_tangent_and_hvp(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.TapeCompileWarning)
        kernel = _concrete(case)
    rng = np.random.default_rng(abs(hash(case.name)) % (2 ** 32))
    u = _direction(case, rng)
    if not u:
        pytest.skip("no float64 input")
    h = 1e-6
    # forward mode: outputs' tangents
    vals = _arrays(case)
    tans = _tangents(case, u, "cpu")
    tg.launch(kernel, dim=case.dim, inputs=vals, tangent=True, tan_inputs=tans)
    plus = _outputs(kernel, case, {k: h * v for k, v in u.items()})
    minus = _outputs(kernel, case, {k: -h * v for k, v in u.items()})
    for k in case.outputs:
        fd = (plus[k] - minus[k]) / (2 * h)
        got = tans[k].numpy().astype(np.float64).reshape(fd.shape)
        np.testing.assert_allclose(got, fd, rtol=case.rtol, atol=max(case.atol, 1e-6),
                                   err_msg=f"{case.name}: tangent of output {k}")
    # the primal outputs are what the forward computes
    ref = _outputs(kernel, case, None)
    for k in case.outputs:
        np.testing.assert_allclose(vals[k].numpy().astype(np.float64), ref[k], rtol=1e-12, atol=1e-12)
    # second order: the tangent of the adjoint (the arrays as the forward left them, with their tangents)
    weights = _weights(case, rng)
    adj = _adjoints(case, weights, "cpu")
    tadj = [tg.zeros_like(g) if isinstance(a, corpus.A) and a.data.dtype.kind == "f" else None
            for a, g in zip(case.args, adj)]
    tg.launch(kernel, dim=case.dim, inputs=vals, adjoint=True, adj_inputs=adj, tangent=True, tan_inputs=tans,
              tan_adj_inputs=tadj)
    gp = _grads(kernel, case, {k: h * v for k, v in u.items()}, weights)
    gm = _grads(kernel, case, {k: -h * v for k, v in u.items()}, weights)
    for k in gp:
        fd = (gp[k] - gm[k]) / (2 * h)
        got = tadj[k].numpy().astype(np.float64).reshape(fd.shape)
        np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-5, err_msg=f"{case.name}: H v of input {k}")
