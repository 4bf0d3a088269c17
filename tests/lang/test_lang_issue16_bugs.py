"""Regression tests for two code-generation bugs (issue 16): an empty ``@struct`` as a kernel
argument, and reading an element of an array of structs in a differentiable kernel."""

import numpy as np

import tapegrad as tg


@tg.struct
class Empty:
    pass


@tg.kernel
def k_empty(s: Empty, out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = float(i)


def test_empty_struct_argument(device):
    out = tg.zeros(4, dtype=float, device=device)
    tg.launch(k_empty, dim=4, inputs=[Empty(), out], device=device)
    np.testing.assert_array_equal(out.numpy(), [0, 1, 2, 3])


@tg.struct
class Item:
    a: float
    v: tg.vec3


@tg.kernel
def k_struct_sum(xs: tg.array(dtype=Item), total: tg.array(dtype=float)):
    i = tg.tid()
    s = xs[i]
    tg.atomic_add(total, 0, s.a + s.v[0] * 2.0)


def test_array_of_structs_read_adjoint(device):
    n = 5
    xs = tg.zeros(n, dtype=Item, requires_grad=True, device=device)
    total = tg.zeros(1, dtype=float, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(k_struct_sum, dim=n, inputs=[xs, total], device=device)
    tape.backward(grads={total: tg.array(np.ones(1, np.float32), device=device)})
    g = xs.grad.numpy()
    np.testing.assert_allclose(g["a"], np.ones(n))
    np.testing.assert_allclose(g["v"][:, 0], 2 * np.ones(n))
    np.testing.assert_allclose(g["v"][:, 1:], 0)


@tg.struct
class Item64:
    a: tg.float64
    v: tg.vec3d


@tg.kernel
def k_struct_fd(xs: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64), items: tg.array(dtype=Item64)):
    i = tg.tid()
    s = items[i]
    out[i] = s.a * xs[i] + tg.length(s.v) * xs[i] * xs[i]


def test_array_of_structs_fd():
    n = 3
    items = np.zeros(n, dtype=tg.types.type_of(Item64).np_dtype)
    items["a"] = [1.0, 2.0, -0.5]
    items["v"] = np.arange(9.0).reshape(3, 3) + 1
    it = tg.zeros(n, dtype=Item64)
    it.numpy()[...] = items
    xs = tg.array(np.array([0.3, -0.2, 0.7]), dtype=tg.float64, requires_grad=True)
    out = tg.zeros(n, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_struct_fd, dim=n, inputs=[xs, out, it])
    tape.backward(grads={out: tg.array(np.ones(n), dtype=tg.float64)})
    lv = np.linalg.norm(items["v"], axis=1)
    np.testing.assert_allclose(xs.grad.numpy(), items["a"] + 2 * lv * xs.numpy(), rtol=1e-12)
