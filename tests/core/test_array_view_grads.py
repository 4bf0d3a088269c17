"""Views keep their gradients (issue 23 item 3, SPEC B19, s27 c).

Every view constructor of ``tg.array`` gives the view a gradient that is the matching view of
its base's gradient, so a launch through the view accumulates into the base's ``.grad``.
Before the fix ``transpose()`` and ``view(dtype)`` dropped the link (the base's gradient stayed
0); slices, ``reshape`` and ``flatten`` had it.
"""
import numpy as np
import pytest

import tapegrad as tg

F64 = tg.float64


@pytest.fixture(autouse=True)
def _default_cpu():
    with tg.ScopedDevice("cpu"):
        yield


@tg.kernel
def sq_sum2(m: tg.array2d[F64], f: tg.array[F64]):
    i, j = tg.tid()
    tg.atomic_add(f, 0, m[i, j] * m[i, j] * F64(3 * i + j + 1))


@tg.kernel
def sq_sum3(m: tg.array3d[F64], f: tg.array[F64]):
    i, j, k = tg.tid()
    tg.atomic_add(f, 0, m[i, j, k] * m[i, j, k] * F64(7 * i + 3 * j + k + 1))


@tg.kernel
def sq_sum1(m: tg.array[F64], f: tg.array[F64]):
    i = tg.tid()
    tg.atomic_add(f, 0, m[i] * m[i] * F64(i + 1))


@tg.kernel
def quat_sum(q: tg.array[tg.quatd], f: tg.array[F64]):
    i = tg.tid()
    tg.atomic_add(f, 0, q[i][0] * q[i][1] + q[i][3] * q[i][3])


def _through(view, kernel, dim, device):
    f = tg.zeros(1, dtype=F64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(kernel, dim=dim, inputs=[view], outputs=[f])
    tape.backward(loss=f)


def _weights(shape, coef):
    return np.fromfunction(lambda *ix: sum(c * i for c, i in zip(coef, ix)) + 1, shape)


def test_transpose_of_the_scenario(device):
    mn = np.arange(1.0, 13.0).reshape(3, 4)
    m = tg.array(mn, dtype=F64, device=device, requires_grad=True)
    mt = m.transpose()
    assert mt.grad is not None and mt.grad.shape == (4, 3)
    _through(mt, sq_sum2, (4, 3), device)
    np.testing.assert_allclose(m.grad.numpy(), 2 * mn * _weights((4, 3), (3, 1)).T)


@pytest.mark.parametrize("axes", [(0, 1, 2), (2, 1, 0), (1, 2, 0), (0, 2, 1)])
def test_transpose_any_axes(axes, device):
    mn = np.random.default_rng(1).uniform(-1, 1, (2, 3, 4))
    m = tg.array(mn, dtype=F64, device=device, requires_grad=True)
    mt = m.transpose(axes)
    shape = mt.shape
    _through(mt, sq_sum3, shape, device)
    expect = np.transpose(2 * np.transpose(mn, axes) * _weights(shape, (7, 3, 1)), np.argsort(axes))
    np.testing.assert_allclose(m.grad.numpy(), expect)


def test_view_as_the_same_scalar_type(device):
    """vec4d memory viewed as quatd: component for component the same numbers."""
    vn = np.random.default_rng(2).uniform(-1, 1, (3, 4))
    v = tg.array(vn, dtype=tg.vec4d, device=device, requires_grad=True)
    q = v.view(tg.quatd)
    assert q.grad is not None and q.grad.dtype is tg.quatd
    _through(q, quat_sum, 3, device)
    expect = np.zeros_like(vn)
    expect[:, 0], expect[:, 1], expect[:, 3] = vn[:, 1], vn[:, 0], 2 * vn[:, 3]
    np.testing.assert_allclose(v.grad.numpy(), expect)


def test_view_as_another_scalar_type_has_no_gradient(device):
    a = tg.zeros(4, dtype=F64, device=device, requires_grad=True)
    assert a.view(tg.int64).grad is None and not a.view(tg.int64).requires_grad


@pytest.mark.parametrize("make", ["slice", "int_row", "reshape", "flatten", "flat_view", "transpose_slice"])
def test_every_view_constructor(make, device):
    mn = np.random.default_rng(3).uniform(-1, 1, (3, 4))
    m = tg.array(mn, dtype=F64, device=device, requires_grad=True)
    expect = np.zeros_like(mn)
    if make == "slice":
        v, dim, kern = m[1:, ::2], (2, 2), sq_sum2
        expect[1:, ::2] = 2 * mn[1:, ::2] * _weights((2, 2), (3, 1))
    elif make == "int_row":
        v, dim, kern = m[2], 4, sq_sum1
        expect[2] = 2 * mn[2] * _weights((4,), (1,))
    elif make == "reshape":
        v, dim, kern = m.reshape((2, 6)), (2, 6), sq_sum2
        expect = (2 * mn.reshape(2, 6) * _weights((2, 6), (3, 1))).reshape(3, 4)
    elif make == "flatten":
        v, dim, kern = m.flatten(), 12, sq_sum1
        expect = (2 * mn.reshape(12) * _weights((12,), (1,))).reshape(3, 4)
    elif make == "flat_view":
        v, dim, kern = m.flat_view(5, 4), 4, sq_sum1
        flat = expect.reshape(12)
        flat[5:9] = 2 * mn.reshape(12)[5:9] * _weights((4,), (1,))
    else:
        v, dim, kern = m.transpose()[1:3], (2, 3), sq_sum2
        expect.T[1:3] = 2 * mn.T[1:3] * _weights((2, 3), (3, 1))
    assert v.grad is not None and v.requires_grad
    _through(v, kern, dim, device)
    np.testing.assert_allclose(m.grad.numpy(), expect)


def test_views_keep_retain_grad(device):
    m = tg.zeros((2, 3), dtype=F64, device=device, requires_grad=True, retain_grad=True)
    for v in (m[0], m.transpose(), m.reshape((6,)), m.flat_view(1, 2), m.view(F64)):
        assert v.retain_grad and v.grad is not None


def test_a_view_made_before_its_base_had_a_gradient(device):
    """The view links to the base's gradient when asked: a launch through it reaches m.grad."""
    mn = np.random.default_rng(5).uniform(-1, 1, (3, 4))
    m = tg.array(mn, dtype=F64, device=device)
    mt, row = m.transpose(), m[1]
    assert mt.grad is None and not mt.requires_grad
    m.requires_grad = True
    assert mt.requires_grad and mt.grad is not None
    _through(mt, sq_sum2, (4, 3), device)
    _through(row, sq_sum1, 4, device)
    expect = 2 * mn * _weights((4, 3), (3, 1)).T
    expect[1] += 2 * mn[1] * _weights((4,), (1,))
    np.testing.assert_allclose(m.grad.numpy(), expect)


def test_a_view_whose_gradient_was_dropped_stays_without(device):
    m = tg.zeros((2, 3), dtype=F64, device=device, requires_grad=True)
    v = m[0]
    v.requires_grad = False
    assert v.grad is None and not v.requires_grad
    w = m.transpose()
    w.grad = None
    assert w.grad is None
    u = tg.zeros((2, 3), dtype=F64, device=device)[1]
    u.requires_grad = True                         # its base has none: a gradient of its own
    assert u.grad is not None and u.grad.shape == (3,)
