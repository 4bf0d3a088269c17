"""Issue 28, item 3: Warp's ``transform_decompose(m) -> (position, rotation, scale)``, a builtin
returning a tuple: values against a float64 NumPy reference (Warp's column-norm scale), the round
trip with ``transform_compose``, gradients of all three results against central finite
differences, the Python-scope form; and `a * b` of two transforms (their composition, as Warp)."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import KernelError


@tg.kernel
def decompose(m: tg.array(dtype=tg.mat44d), out: tg.array(dtype=tg.float64, ndim=2)):
    i = tg.tid()
    p, q, s = tg.transform_decompose(m[i])
    for j in range(3):
        out[i, j] = p[j]
        out[i, 7 + j] = s[j]
    for j in range(4):
        out[i, 3 + j] = q[j]


@tg.kernel
def weighted(m: tg.array(dtype=tg.mat44d), w: tg.array(dtype=tg.float64, ndim=2), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    p, q, s = tg.transform_decompose(m[i])
    v = tg.float64(0.0)
    for j in range(3):
        v += p[j] * w[i, j] + s[j] * w[i, 7 + j]
    for j in range(4):
        v += q[j] * w[i, 3 + j]
    tg.atomic_add(loss, 0, v)


@tg.kernel
def round_trip(p: tg.array(dtype=tg.vec3d), q: tg.array(dtype=tg.quatd), s: tg.array(dtype=tg.vec3d),
               out: tg.array(dtype=tg.float64, ndim=2)):
    i = tg.tid()
    pp, qq, ss = tg.transform_decompose(tg.transform_compose(p[i], q[i], s[i]))
    for j in range(3):
        out[i, j] = pp[j]
        out[i, 7 + j] = ss[j]
    for j in range(4):
        out[i, 3 + j] = qq[j]


def _quat_of_rotation(r):
    # Shepperd's method on a proper rotation, w >= 0 branch first (float64 reference)
    t = np.trace(r)
    if t >= 0:
        w = 0.5 * np.sqrt(1 + t)
        return np.array([(r[2, 1] - r[1, 2]) / (4 * w), (r[0, 2] - r[2, 0]) / (4 * w),
                         (r[1, 0] - r[0, 1]) / (4 * w), w])
    raise AssertionError("reference: choose rotations with a nonnegative trace")


def _matrices(n, seed):
    """4x4 matrices [[R diag(s), p], [0, 1]] of rotations with a nonnegative trace."""
    rng = np.random.default_rng(seed)
    out, parts = [], []
    while len(out) < n:
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        x, y, z, w = q
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                      [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                      [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        if np.trace(r) < 0.2:
            continue
        p, s = rng.normal(size=3), rng.uniform(0.5, 2.0, size=3)
        m = np.eye(4)
        m[:3, :3] = r * s[None, :]
        m[:3, 3] = p
        out.append(m)
        parts.append(np.concatenate([p, q if w >= 0 else -q, s]))
    return np.array(out), np.array(parts)


def test_values_match_the_reference(device):
    m, expect = _matrices(16, 0)
    out = tg.zeros((16, 10), dtype=tg.float64, device=device)
    tg.launch(decompose, dim=16, inputs=[tg.array(m, dtype=tg.mat44d, device=device)], outputs=[out])
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-12, atol=1e-13)
    ref = np.array([np.concatenate([mm[:3, 3], _quat_of_rotation(mm[:3, :3] / np.linalg.norm(mm[:3, :3], axis=0)),
                                    np.linalg.norm(mm[:3, :3], axis=0)]) for mm in m])
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-13)


def test_round_trip_with_transform_compose(device):
    _, parts = _matrices(8, 1)
    out = tg.zeros((8, 10), dtype=tg.float64, device=device)
    tg.launch(round_trip, dim=8, inputs=[tg.array(parts[:, :3], dtype=tg.vec3d, device=device),
                                         tg.array(parts[:, 3:7], dtype=tg.quatd, device=device),
                                         tg.array(parts[:, 7:], dtype=tg.vec3d, device=device)], outputs=[out])
    np.testing.assert_allclose(out.numpy(), parts, rtol=1e-12, atol=1e-13)


def test_gradient_of_all_three_results(device):
    m, _ = _matrices(4, 2)
    m[:, :3, :3] += 0.05 * np.random.default_rng(3).normal(size=(4, 3, 3))   # not only exact rotations
    w = np.random.default_rng(4).normal(size=(4, 10))
    ma = tg.array(m, dtype=tg.mat44d, requires_grad=True, device=device)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(weighted, dim=4, inputs=[ma, tg.array(w, dtype=tg.float64, device=device)], outputs=[loss])
    tape.backward(loss)

    def f(x):
        out = tg.zeros((4, 10), dtype=tg.float64, device=device)
        tg.launch(decompose, dim=4, inputs=[tg.array(x, dtype=tg.mat44d, device=device)], outputs=[out])
        return float(np.sum(out.numpy() * w))

    eps = 1e-6
    fd = np.zeros_like(m)
    for idx in np.ndindex(m.shape):
        d = np.zeros_like(m)
        d[idx] = eps
        fd[idx] = (f(m + d) - f(m - d)) / (2 * eps)
    np.testing.assert_allclose(ma.grad.numpy(), fd, rtol=1e-6, atol=1e-7)


def test_python_scope():
    m, parts = _matrices(1, 5)
    p, q, s = tg.transform_decompose(m[0])
    np.testing.assert_allclose(np.concatenate([p, q, s]), parts[0], rtol=1e-6, atol=1e-6)


@tg.kernel
def compose_ops(a: tg.array(dtype=tg.transformd), b: tg.array(dtype=tg.transformd),
                prod: tg.array(dtype=tg.transformd), ident: tg.array(dtype=tg.transformd)):
    i = tg.tid()
    prod[i] = a[i] * b[i]
    ident[i] = tg.transform_inverse(a[i]) * a[i]


def _rand_transforms(n, seed):
    x = np.random.default_rng(seed).normal(size=(n, 7))
    x[:, 3:] /= np.linalg.norm(x[:, 3:], axis=1, keepdims=True)
    return x


def _np_transform_mul(a, b):
    # (p_a, q_a) * (p_b, q_b) = (p_a + R(q_a) p_b, q_a q_b), quaternions (x, y, z, w)
    def qmul(q, r):
        v, w, u, s = q[:3], q[3], r[:3], r[3]
        return np.append(w * u + s * v + np.cross(v, u), w * s - v @ u)

    def rot(q, x):
        return qmul(qmul(q, np.append(x, 0.0)), np.append(-q[:3], q[3]))[:3]

    return np.concatenate([a[:3] + rot(a[3:], b[:3]), qmul(a[3:], b[3:])])


def test_transform_times_transform_is_their_composition(device):
    a, b = _rand_transforms(8, 6), _rand_transforms(8, 7)
    prod = tg.zeros(8, dtype=tg.transformd, device=device)
    ident = tg.zeros(8, dtype=tg.transformd, device=device)
    tg.launch(compose_ops, dim=8, inputs=[tg.array(a, dtype=tg.transformd, device=device),
                                          tg.array(b, dtype=tg.transformd, device=device)], outputs=[prod, ident])
    np.testing.assert_allclose(prod.numpy(), np.array([_np_transform_mul(x, y) for x, y in zip(a, b)]),
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ident.numpy(), np.tile([0, 0, 0, 0, 0, 0, 1.0], (8, 1)), atol=1e-13)


@tg.kernel
def parts_by_attribute(x: tg.array(dtype=tg.transformd), w: tg.array(dtype=tg.float64, ndim=2),
                       p_out: tg.array(dtype=tg.vec3d), q_out: tg.array(dtype=tg.quatd),
                       loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    a = x[i]
    p_out[i] = a.p
    q_out[i] = x[i].q
    tg.atomic_add(loss, 0, a.p[0] * w[i, 0] + a.p[2] * w[i, 2] + a.q[3] * w[i, 6])


def test_transform_p_and_q_attributes(device):
    x = _rand_transforms(4, 8)
    w = np.random.default_rng(9).normal(size=(4, 7))
    xa = tg.array(x, dtype=tg.transformd, requires_grad=True, device=device)
    p = tg.zeros(4, dtype=tg.vec3d, device=device)
    q = tg.zeros(4, dtype=tg.quatd, device=device)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(parts_by_attribute, dim=4, inputs=[xa, tg.array(w, dtype=tg.float64, device=device)],
                  outputs=[p, q, loss])
    np.testing.assert_array_equal(p.numpy(), x[:, :3])
    np.testing.assert_array_equal(q.numpy(), x[:, 3:])
    tape.backward(loss)
    expect = np.zeros_like(x)
    expect[:, [0, 2, 6]] = w[:, [0, 2, 6]]
    np.testing.assert_array_equal(xa.grad.numpy(), expect)


@tg.kernel
def set_parts(x: tg.array(dtype=tg.transformd), p: tg.array(dtype=tg.vec3d), q: tg.array(dtype=tg.quatd),
              w: tg.array(dtype=tg.float64, ndim=2), out: tg.array(dtype=tg.transformd),
              loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    t = x[i]
    tg.transform_set_translation(t, p[i])
    out[i] = t
    tg.transform_set_rotation(t, q[i])
    v = tg.float64(0.0)
    for j in range(7):
        v += t[j] * w[i, j]
    tg.atomic_add(loss, 0, v)


@tg.kernel
def set_on_array_element(x: tg.array(dtype=tg.transformd), p: tg.array(dtype=tg.vec3d)):
    i = tg.tid()
    tg.transform_set_translation(x[i], p[i])


def test_transform_setters_in_kernels_and_python_scope(device):
    x, y = _rand_transforms(4, 10), _rand_transforms(4, 11)
    w = np.random.default_rng(12).normal(size=(4, 7))
    xa = tg.array(x, dtype=tg.transformd, requires_grad=True, device=device)
    pa = tg.array(y[:, :3], dtype=tg.vec3d, requires_grad=True, device=device)
    qa = tg.array(y[:, 3:], dtype=tg.quatd, requires_grad=True, device=device)
    out = tg.zeros(4, dtype=tg.transformd, device=device)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(set_parts, dim=4, inputs=[xa, pa, qa, tg.array(w, dtype=tg.float64, device=device)],
                  outputs=[out, loss])
    np.testing.assert_array_equal(out.numpy(), np.concatenate([y[:, :3], x[:, 3:]], axis=1))
    tape.backward(loss)
    # the final t is (p, q): every component of x was replaced, so x gets no gradient
    np.testing.assert_array_equal(xa.grad.numpy(), np.zeros_like(x))
    np.testing.assert_array_equal(pa.grad.numpy(), w[:, :3])
    np.testing.assert_array_equal(qa.grad.numpy(), w[:, 3:])
    t = tg.transform_identity()
    tg.transform_set_translation(t, tg.vec3f(1.0, 2.0, 3.0))
    tg.transform_set_rotation(t, tg.quatf(0.0, 0.6, 0.0, 0.8))
    np.testing.assert_allclose(np.asarray(t), [1.0, 2.0, 3.0, 0.0, 0.6, 0.0, 0.8], rtol=1e-7)
    assert tg.types.types_equal(type(t), tg.transformf) and not tg.types.types_equal(type(t), tg.transformd)
    with pytest.raises(TypeError, match=r"transform_set_translation\(t, \.\.\.\): expected a transform value"):
        tg.transform_set_translation((0.0,) * 7, tg.vec3f(1.0, 2.0, 3.0))


def test_transform_setter_needs_a_local():
    with pytest.raises(KernelError, match=r"first argument must be a local variable to update, got 'x\[i\]'"):
        tg.launch(set_on_array_element, dim=1, inputs=[tg.zeros(1, dtype=tg.transformd),
                                                       tg.zeros(1, dtype=tg.vec3d)])


@tg.kernel
def assign_parts(x: tg.array(dtype=tg.transformd), p: tg.array(dtype=tg.vec3d), q: tg.array(dtype=tg.quatd),
                 out: tg.array(dtype=tg.transformd)):
    i = tg.tid()
    a = x[i]
    a.p = p[i]
    a.q = q[i]
    b = x[i]
    b.p += p[i]
    b.p -= 0.5 * p[i]
    out[i] = a + b


def test_transform_p_and_q_assignment(device):
    x, y = _rand_transforms(4, 13), _rand_transforms(4, 14)
    xa = tg.array(x, dtype=tg.transformd, requires_grad=True, device=device)
    pa = tg.array(y[:, :3], dtype=tg.vec3d, requires_grad=True, device=device)
    qa = tg.array(y[:, 3:], dtype=tg.quatd, requires_grad=True, device=device)
    out = tg.zeros(4, dtype=tg.transformd, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(assign_parts, dim=4, inputs=[xa, pa, qa], outputs=[out])
    b = x.copy()
    b[:, :3] += 0.5 * y[:, :3]
    np.testing.assert_allclose(out.numpy(), y + b, rtol=1e-14)
    out.grad = tg.ones_like(out)
    tape.backward()
    gx = np.ones_like(x)
    np.testing.assert_array_equal(xa.grad.numpy(), gx)         # only b reads x where it was kept
    np.testing.assert_array_equal(pa.grad.numpy(), np.full((4, 3), 1.5))
    np.testing.assert_array_equal(qa.grad.numpy(), np.ones((4, 4)))


@tg.kernel
def keyword_transforms(p: tg.array(dtype=tg.vec3d), q: tg.array(dtype=tg.quatd), out: tg.array(dtype=tg.transformd)):
    i = tg.tid()
    out[3 * i] = tg.transformd(p=p[i], q=q[i])
    out[3 * i + 1] = tg.transformd(p=p[i])
    out[3 * i + 2] = tg.transformd(q=q[i])


def test_transform_keyword_constructor(device):
    y = _rand_transforms(2, 15)
    out = tg.zeros(6, dtype=tg.transformd, device=device)
    tg.launch(keyword_transforms, dim=2, inputs=[tg.array(y[:, :3], dtype=tg.vec3d, device=device),
                                                 tg.array(y[:, 3:], dtype=tg.quatd, device=device)], outputs=[out])
    o = out.numpy()
    np.testing.assert_array_equal(o[0::3], y)
    np.testing.assert_array_equal(o[1::3], np.concatenate([y[:, :3], np.tile([0, 0, 0, 1.0], (2, 1))], axis=1))
    np.testing.assert_array_equal(o[2::3], np.concatenate([np.zeros((2, 3)), y[:, 3:]], axis=1))
