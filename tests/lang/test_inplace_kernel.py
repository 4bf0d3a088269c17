"""In-place updates inside one kernel are exact (issue 23 item 6): an element a thread stores
and reads again is kept in a local (``lang/inplace.py``), so the adjoint's replay sees the
values the forward saw. Every case against float64 central differences through a tape."""
import warnings

import numpy as np
import pytest

import tapegrad as tg

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]
F64 = tg.float64


@tg.kernel
def guarded_rwr(x: tg.array(dtype=F64), n: int, z: tg.array(dtype=F64)):
    i = tg.tid()
    if i < n:
        x[i] = tg.sin(x[i]) * x[i]
        if x[i] > 0.2:
            x[i] = x[i] * 3.0
        z[i] = x[i] * x[i] + x[i]


@tg.kernel
def grid_loop(x: tg.array2d(dtype=F64), n: int):
    i, j = tg.tid()
    for _k in range(n):
        x[i, j] = x[i, j] * 0.5 + tg.cos(x[i, j])
    x[i, j] = x[i, j] * x[i, j]


@tg.kernel
def vec_steps(p: tg.array(dtype=tg.vec3d), v: tg.array(dtype=tg.vec3d), n: int):
    i = tg.tid()
    for _k in range(n):
        p[i] = p[i] + v[i] * tg.length(p[i]) * 0.1
        v[i] = v[i] * 0.9 - p[i] * 0.05


@tg.kernel
def loss_of(x: tg.array(dtype=F64), s: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(s, 0, tg.sin(x[i]) * (1.0 + tg.float64(i)))


@tg.kernel
def loss_of2(x: tg.array2d(dtype=F64), s: tg.array(dtype=F64)):
    i, j = tg.tid()
    tg.atomic_add(s, 0, tg.sin(x[i, j]) * (1.0 + tg.float64(i) + 0.5 * tg.float64(j)))


@tg.kernel
def loss_of_vec(p: tg.array(dtype=tg.vec3d), s: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(s, 0, tg.dot(p[i], tg.vec3d(1.0, -2.0, 0.5)) + tg.length(p[i]))


def _check(forward, values, device):
    def run(vals, grad):
        arrs = [tg.array(v, dtype=t, requires_grad=grad, device=device) for v, t in vals]
        loss = tg.zeros(1, dtype=F64, requires_grad=grad, device=device)
        tape = tg.Tape()
        with tape:
            forward(arrs, loss)
        return arrs, loss, tape
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.TapeWarning)    # no "reads both before and after" warning
        arrs, loss, tape = run(values, True)
    tape.backward(loss=loss)
    h = 1e-6
    for k, (v, t) in enumerate(values):
        fd = np.zeros_like(v)
        for idx in np.ndindex(*v.shape):
            vp = [np.array(x, copy=True) for x, _ in values]
            vm = [np.array(x, copy=True) for x, _ in values]
            vp[k][idx] += h
            vm[k][idx] -= h
            lp = run(list(zip(vp, [t for _, t in values])), False)[1].numpy()[0]
            lm = run(list(zip(vm, [t for _, t in values])), False)[1].numpy()[0]
            fd[idx] = (lp - lm) / (2 * h)
        np.testing.assert_allclose(arrs[k].grad.numpy(), fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_read_write_read_with_branches(device):
    def f(arrs, loss):
        x, = arrs
        z = tg.zeros(6, dtype=F64, requires_grad=True, device=device)
        tg.launch(guarded_rwr, dim=8, inputs=[x, 6, z], device=device)
        tg.launch(loss_of, dim=6, inputs=[x, loss], device=device)
        tg.launch(loss_of, dim=6, inputs=[z, loss], device=device)
    _check(f, [(np.array([0.1, 0.5, -0.4, 1.2, 0.3, 0.9]), F64)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_loop_over_a_2d_element(device):
    def f(arrs, loss):
        x, = arrs
        tg.launch(grid_loop, dim=(2, 3), inputs=[x, 4], device=device)
        tg.launch(loss_of2, dim=(2, 3), inputs=[x, loss], device=device)
    _check(f, [(np.random.default_rng(1).uniform(-1, 1, (2, 3)), F64)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_two_arrays_updated_in_a_loop(device):
    def f(arrs, loss):
        p, v = arrs
        tg.launch(vec_steps, dim=3, inputs=[p, v, 5], device=device)
        tg.launch(loss_of_vec, dim=3, inputs=[p, loss], device=device)
        tg.launch(loss_of_vec, dim=3, inputs=[v, loss], device=device)
    rng = np.random.default_rng(2)
    _check(f, [(rng.normal(size=(3, 3)), tg.vec3d), (rng.normal(size=(3, 3)), tg.vec3d)], device)


@tg.kernel
def other_index(x: tg.array(dtype=F64), z: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] * x[i]
    z[i] = x[(i + 1) % 4] * x[(i + 1) % 4]


def test_accesses_at_other_indices_still_warn():
    """x[(i + 1) % 4] may be another thread's element: not promoted, the tape warns as before."""
    x = tg.array(np.arange(4.0), dtype=F64, requires_grad=True)
    z = tg.zeros(4, dtype=F64, requires_grad=True)
    with tg.Tape():
        with pytest.warns(tg.TapeWarning, match="both before and after"):
            tg.launch(other_index, dim=4, inputs=[x, z])


@tg.kernel
def guard_in_loop(x: tg.array(dtype=F64), n: int):
    i = tg.tid()
    for _k in range(n):
        if i < len(x):
            x[i] = x[i] * x[i] + 0.1


@pytest.mark.parametrize("device", DEVICES)
def test_element_loaded_before_a_loop_is_bounds_checked(device):
    """The element is loaded before the loop, where the kernel's guard does not hold yet: the
    load is bounds-checked (a debug build reports no out-of-range access; more threads than
    elements run), and the gradient stays exact."""
    prev = tg.config.mode
    tg.config.mode = "debug"
    try:
        x = tg.array(np.array([0.5, -0.3, 0.9]), dtype=F64, device=device)
        tg.launch(guard_in_loop, dim=6, inputs=[x, 2], device=device)
        ref = np.array([0.5, -0.3, 0.9])
        for _ in range(2):
            ref = ref * ref + 0.1
        np.testing.assert_allclose(x.numpy(), ref)
    finally:
        tg.config.mode = prev

    def f(arrs, loss):
        x, = arrs
        tg.launch(guard_in_loop, dim=6, inputs=[x, 3], device=device)
        tg.launch(loss_of, dim=3, inputs=[x, loss], device=device)
    _check(f, [(np.array([0.5, -0.3, 0.9]), F64)], device)
