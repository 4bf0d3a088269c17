"""The corpus (issue 16): every kernel of ``corpus_kernels.py`` compiles on the CPU (all in one
translation unit), runs, and — where differentiable — its adjoint matches float64 central
finite differences of sum(w * outputs) with respect to every float64 array input."""

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lang.kernel import load_kernels

from . import corpus_kernels as corpus

pytestmark = pytest.mark.filterwarnings("ignore::tapegrad.TapeCompileWarning")   # O(n^2) loop replays named


def _values(case, override=None):
    vals = []
    for k, a in enumerate(case.args):
        if isinstance(a, corpus.A):
            data = a.data if override is None or k not in override else override[k]
            vals.append(tg.array(np.array(data, copy=True), dtype=a.dtype))
        else:
            vals.append(a)
    return vals


def _concrete(case):
    k = case.kernel
    return k.specialize_for(_values(case)) if k.is_generic() else k


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.TapeCompileWarning)
        kernels = [_concrete(c) for c in corpus.CASES]
        load_kernels(kernels, tg.get_device("cpu"))
    return dict(zip([c.name for c in corpus.CASES], kernels))


def _forward(kernel, case, override=None):
    vals = _values(case, override)
    tg.launch(kernel, dim=case.dim, inputs=vals)
    return vals


def _loss(kernel, case, weights, override):
    vals = _forward(kernel, case, override)
    return sum(float((vals[k].numpy().astype(np.float64) * weights[k]).sum()) for k in case.outputs)


def test_corpus_size():
    assert len(corpus.CASES) >= 60
    assert len({c.name for c in corpus.CASES}) == len(corpus.CASES)


@pytest.mark.parametrize("case", corpus.CASES, ids=[c.name for c in corpus.CASES])
def test_corpus_kernel(case, compiled):
    kernel = compiled[case.name]
    vals = _forward(kernel, case)
    for v in vals:
        if isinstance(v, tg.array):
            assert np.isfinite(v.numpy().astype(np.float64)).all()
    if not case.grad:
        return
    rng = np.random.default_rng(abs(hash(case.name)) % (2 ** 32))
    weights = {k: rng.normal(size=case.args[k].data.shape) for k in case.outputs}
    adj = []
    for k, a in enumerate(case.args):
        if isinstance(a, corpus.A):
            g = weights[k] if k in case.outputs else np.zeros_like(a.data)
            adj.append(tg.array(np.array(g, dtype=a.data.dtype), dtype=a.dtype))
        else:
            adj.append(type(a)(0))
    tg.launch(kernel, dim=case.dim, inputs=vals, adjoint=True, adj_inputs=adj)
    checked = 0
    for k, a in enumerate(case.args):
        if not isinstance(a, corpus.A) or k in case.outputs or a.data.dtype != np.float64:
            continue
        got = adj[k].numpy().astype(np.float64).reshape(a.data.shape)
        exp = np.zeros_like(a.data)
        h = 1e-6
        for idx in np.ndindex(a.data.shape):
            plus, minus = a.data.copy(), a.data.copy()
            plus[idx] += h
            minus[idx] -= h
            exp[idx] = (_loss(kernel, case, weights, {k: plus}) - _loss(kernel, case, weights, {k: minus})) / (2 * h)
        np.testing.assert_allclose(got, exp, rtol=case.rtol, atol=case.atol, err_msg=f"{case.name}: input {k}")
        checked += 1
    assert checked, f"{case.name}: no float64 input to check"
