"""Gradients of atomics (issue 23 item 6): an ``atomic_max``/``atomic_min`` target's starting
value gets the slot's gradient only when it won (it got 1 even when it lost), and the value an
atomic returns has a gradient (it had none): it flows to the element's content before the
atomic. Expected values are the derivatives of the math, checked against float64 central
differences."""
import warnings

import numpy as np
import pytest

import tapegrad as tg

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]
_WARNED: set = set()   # kernels whose lowering (once per process, whichever device came first) warned
F64 = tg.float64


@tg.kernel
def max_into(v: tg.array(dtype=F64), m: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_max(m, i % 2, v[i] * v[i])


@tg.kernel
def min_into(v: tg.array(dtype=F64), m: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_min(m, i % 2, v[i] * v[i])


@tg.kernel
def max_vec(v: tg.array(dtype=tg.vec3d), m: tg.array(dtype=tg.vec3d)):
    i = tg.tid()
    tg.atomic_max(m, 0, v[i])


def _grads(kernel, vn, mn, device, dtype=F64):
    v = tg.array(vn, dtype=dtype, requires_grad=True, device=device)
    m = tg.array(mn, dtype=dtype, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(kernel, dim=len(vn), inputs=[v], outputs=[m], device=device)
    g = np.arange(1.0, 1.0 + np.asarray(mn).size).reshape(np.asarray(mn).shape)
    tape.backward(grads={m: tg.array(g, dtype=dtype, device=device)})
    return v.grad.numpy(), m.grad.numpy(), g


def _fd(kernel, vn, mn, g, device, dtype=F64, h=1e-6):
    def f(vv, mm):
        m = tg.array(mm, dtype=dtype, device=device)
        tg.launch(kernel, dim=len(vv), inputs=[tg.array(vv, dtype=dtype, device=device), m], device=device)
        return float((m.numpy() * g).sum())
    out = []
    for x, other, first in ((vn, mn, True), (mn, vn, False)):
        d = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            e = np.zeros_like(x)
            e[idx] = h
            args_p = (x + e, other) if first else (other, x + e)
            args_m = (x - e, other) if first else (other, x - e)
            d[idx] = (f(*args_p) - f(*args_m)) / (2 * h)
        out.append(d)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel,start", [(max_into, [5.0, -5.0]), (min_into, [5.0, -5.0]),
                                          (max_into, [-5.0, 50.0]), (min_into, [50.0, 0.5])])
def test_min_max_gradient_goes_to_the_winner_only(device, kernel, start):
    vn = np.array([1.0, -2.0, 1.5, 3.0, -0.5, 2.5])
    mn = np.array(start)
    vg, mg, g = _grads(kernel, vn, mn, device)
    fd_v, fd_m = _fd(kernel, vn, mn, g, device)
    np.testing.assert_allclose(vg, fd_v, atol=1e-6)
    np.testing.assert_allclose(mg, fd_m, atol=1e-6)     # was g (1 per slot) even where the start lost


@pytest.mark.parametrize("device", DEVICES)
def test_vector_max_is_per_component(device):
    vn = np.array([[1.0, 5.0, -1.0], [2.0, 0.0, -3.0]])
    mn = np.array([[0.0, 6.0, -2.0]])
    vg, mg, g = _grads(max_vec, vn, mn, device, tg.vec3d)
    np.testing.assert_array_equal(vg, [[0.0, 0.0, 3.0], [1.0, 0.0, 0.0]])   # slot gradient (1, 2, 3)
    np.testing.assert_array_equal(mg, [[0.0, 2.0, 0.0]])


@tg.kernel
def max_ties(v: tg.array(dtype=F64), m: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_max(m, 0, v[i])


@pytest.mark.parametrize("device", DEVICES)
def test_ties_keep_the_sum(device):
    """Equal winners: one of them takes the slot's gradient (a subgradient), never both."""
    vg, mg, _ = _grads(max_ties, np.array([3.0, 3.0, 1.0, 3.0]), np.array([3.0]), device)
    assert vg.sum() + mg.sum() == 1.0 and set(vg.tolist() + mg.tolist()) <= {0.0, 1.0}


@tg.kernel
def add_returning(x: tg.array(dtype=F64), v: tg.array(dtype=F64), out: tg.array(dtype=F64)):
    i = tg.tid()
    old = tg.atomic_add(x, i, v[i])
    out[i] = old * old + v[i]


@tg.kernel
def max_returning(x: tg.array(dtype=F64), v: tg.array(dtype=F64), out: tg.array(dtype=F64)):
    i = tg.tid()
    old = tg.atomic_max(x, i, v[i])
    out[i] = 3.0 * old


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", [add_returning, max_returning])
def test_returned_value_has_a_gradient(device, kernel):
    """One thread per element (exact): before, the returned value had no gradient at all."""
    xn = np.array([1.0, 2.0, -3.0])
    vn = np.array([5.0, -6.0, 0.5])
    gout, gx = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])

    def f(xv, vv):
        x = tg.array(xv, dtype=F64, device=device)
        out = tg.zeros(3, dtype=F64, device=device)
        tg.launch(kernel, dim=3, inputs=[x, tg.array(vv, dtype=F64, device=device), out], device=device)
        return float((out.numpy() * gout).sum() + (x.numpy() * gx).sum())

    x = tg.array(xn, dtype=F64, requires_grad=True, device=device)
    v = tg.array(vn, dtype=F64, requires_grad=True, device=device)
    out = tg.zeros(3, dtype=F64, requires_grad=True, device=device)
    tape = tg.Tape()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel.module_for(tg.get_device(device))     # lowered once per process: the warning comes then
    if any(issubclass(w.category, tg.TapeCompileWarning) and "returns is used" in str(w.message) for w in caught):
        _WARNED.add(kernel.key)
    assert kernel.key in _WARNED, "no TapeCompileWarning for the used return value of a float atomic"
    with tape:
        tg.launch(kernel, dim=3, inputs=[x, v, out], device=device)
    tape.backward(grads={out: tg.array(gout, dtype=F64, device=device), x: tg.array(gx, dtype=F64, device=device)})
    h = 1e-6
    for arr, base, which in ((x, xn, 0), (v, vn, 1)):
        fd = np.zeros(3)
        for k in range(3):
            e = np.zeros(3)
            e[k] = h
            args_p = [xn, vn]
            args_m = [xn, vn]
            args_p[which] = base + e
            args_m[which] = base - e
            fd[k] = (f(*args_p) - f(*args_m)) / (2 * h)
        np.testing.assert_allclose(arr.grad.numpy(), fd, rtol=1e-6, atol=1e-6)


@tg.kernel
def add_unused(x: tg.array(dtype=F64), f: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(f, 0, x[i] * x[i])


def test_unused_returned_value_does_not_warn(recwarn):
    add_unused.module_for(tg.get_device("cpu"))
    assert not [w for w in recwarn if issubclass(w.category, tg.TapeCompileWarning)]
