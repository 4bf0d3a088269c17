"""Elementwise kernels: which ones the CUDA entry vectorizes, and that the vector path (CUDA)
gives the per-element results for every layout it meets."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lang.elementwise import vector_plan


@tg.kernel
def saxpy(a: float, x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    y[i] = a * x[i] + y[i]


@tg.kernel
def add3(a: tg.array(dtype=tg.float32), b: tg.array(dtype=tg.float32), c: tg.array(dtype=tg.float32)):
    i = tg.tid()
    c[i] = a[i] + b[i]


@tg.kernel
def guarded(n: int, a: tg.array(dtype=tg.float64), c: tg.array(dtype=tg.float32)):
    i = tg.tid()
    if i < n:
        c[i] = tg.float32(a[i]) + tg.float32(len(a))


@tg.kernel
def halves(a: tg.array(dtype=tg.float16), c: tg.array(dtype=tg.float16)):
    i = tg.tid()
    c[i] = a[i] + a[i]


@tg.kernel
def shifted(a: tg.array(dtype=tg.float32), c: tg.array(dtype=tg.float32)):
    i = tg.tid()
    c[i] = a[i + 1]


@tg.kernel
def atomic(a: tg.array(dtype=tg.float32), c: tg.array(dtype=tg.float32)):
    i = tg.tid()
    tg.atomic_add(c, 0, a[i])


@tg.kernel
def reassigned(a: tg.array(dtype=tg.float32), c: tg.array(dtype=tg.float32)):
    i = tg.tid()
    c[i] = a[i]
    i = 0
    c[i] = 1.0


@tg.kernel
def vec3s(a: tg.array(dtype=tg.vec3), c: tg.array(dtype=tg.vec3)):
    i = tg.tid()
    c[i] = a[i]


@tg.kernel
def two_d(a: tg.array(dtype=tg.float32, ndim=2)):
    i, j = tg.tid()
    a[i, j] = 1.0


def _plan(k):
    return vector_plan(k.ir() if callable(k.ir) else k.ir)


def test_plans():
    p = _plan(saxpy)
    assert p.lanes == 4 and [(a.index, a.load, a.store) for a in p.arrays] == [(1, True, False), (2, True, True)]
    p = _plan(add3)   # c is written unconditionally and never read: stored without a load
    assert [(a.index, a.load, a.store) for a in p.arrays] == [(0, True, False), (1, True, False), (2, False, True)]
    p = _plan(guarded)  # float64 limits the lanes to 2; c is written under a branch: loaded first
    assert p.lanes == 2 and [(a.index, a.load, a.store) for a in p.arrays] == [(1, True, False), (2, True, True)]
    assert _plan(halves).lanes == 8
    for k in (shifted, atomic, reassigned, vec3s, two_d):
        assert _plan(k) is None, k.key


def _layouts(device, n):
    """(label, x, y) pairs: dense, misaligned (offset 1), strided, aliased, short arrays."""
    x = tg.array(np.arange(n + 8, dtype=np.float32), device=device)
    y = tg.array(np.ones(n + 8, dtype=np.float32), device=device)
    return [("dense", x[:n], y[:n]), ("offset", x[1:n + 1], y[1:n + 1]), ("x offset", x[1:n + 1], y[:n]),
            ("strided", x[::2][: n // 2], y[:n // 2]), ("aliased", y[:n], y[:n])]


@pytest.mark.cuda
@pytest.mark.parametrize("n", [1, 3, 4, 5, 1023, 4096 + 3])
def test_vector_path_matches_numpy(device, n):
    if not device.startswith("cuda"):
        pytest.skip("CUDA only")
    for label, x, y in _layouts(device, n):
        xv, yv = x.numpy().copy(), y.numpy().copy()
        m = min(x.shape[0], y.shape[0])
        tg.launch(saxpy, m, inputs=[2.0, x], outputs=[y])
        want = yv.copy()
        want[:m] = 2.0 * (yv[:m] if x is y else xv[:m]) + yv[:m]
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, err_msg=label)


@pytest.mark.cuda
def test_vector_path_guard_tail_and_types(device):
    if not device.startswith("cuda"):
        pytest.skip("CUDA only")
    a = tg.array(np.arange(37, dtype=np.float64), device=device)
    c = tg.array(np.full(40, -1, np.float32), device=device)
    tg.launch(guarded, 40, inputs=[30, a], outputs=[c])   # the launch runs past a: the guard stops it
    want = np.full(40, -1, np.float32)
    want[:30] = np.arange(30) + 37
    np.testing.assert_array_equal(c.numpy(), want)
    h = tg.array(np.arange(21, dtype=np.float16), device=device)
    o = tg.zeros(21, dtype=tg.float16, device=device)
    tg.launch(halves, 21, inputs=[h], outputs=[o])
    np.testing.assert_array_equal(o.numpy(), 2 * np.arange(21, dtype=np.float16))
    a3, b3, c3 = (tg.array(np.arange(10, dtype=np.float32) * k, device=device) for k in (1, 2, 0))
    tg.launch(add3, 10, inputs=[a3, b3], outputs=[c3])
    np.testing.assert_array_equal(c3.numpy(), np.arange(10, dtype=np.float32) * 3)


@pytest.mark.cuda
def test_vector_path_backward(device):
    """The adjoint keeps the per-element loop: gradients as before."""
    if not device.startswith("cuda"):
        pytest.skip("CUDA only")
    x = tg.array(np.arange(9, dtype=np.float32), device=device, requires_grad=True)
    y = tg.array(np.ones(9, dtype=np.float32), device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(add3, 9, inputs=[x, x], outputs=[y])
    y.grad.fill_(1.0)
    tape.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(9, 2.0, np.float32))
