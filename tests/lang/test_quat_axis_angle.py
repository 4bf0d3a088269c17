"""Issue 28, item 3: Warp's ``quat_to_axis_angle(q, axis, angle)``, a builtin writing its results
into local variables: values against a float64 NumPy reference, gradients through both results
against central finite differences, slerp written with it, and the errors of bad output arguments."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import KernelError


@tg.kernel
def axis_angle(q: tg.array(dtype=tg.quatd), out: tg.array(dtype=tg.vec4d)):
    i = tg.tid()
    axis = tg.vec3d()
    angle = tg.float64(0.0)
    tg.quat_to_axis_angle(q[i], axis, angle)
    out[i] = tg.vec4d(axis[0], axis[1], axis[2], angle)


@tg.kernel
def weighted(q: tg.array(dtype=tg.quatd), w: tg.array(dtype=tg.vec4d), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    axis = tg.vec3d()
    angle = tg.float64(0.0)
    tg.quat_to_axis_angle(q[i], axis, angle)
    tg.atomic_add(loss, 0, tg.dot(tg.vec4d(axis[0], axis[1], axis[2], angle), w[i]))


@tg.kernel
def slerp_by_hand(a: tg.array(dtype=tg.quatd), b: tg.array(dtype=tg.quatd), t: float, out: tg.array(dtype=tg.quatd)):
    i = tg.tid()
    axis = tg.vec3d()
    angle = tg.float64(0.0)
    tg.quat_to_axis_angle(tg.mul(tg.quat_inverse(a[i]), b[i]), axis, angle)
    out[i] = tg.mul(a[i], tg.quat_from_axis_angle(axis, tg.float64(t) * angle))


@tg.kernel
def slerp_builtin(a: tg.array(dtype=tg.quatd), b: tg.array(dtype=tg.quatd), t: float, out: tg.array(dtype=tg.quatd)):
    i = tg.tid()
    out[i] = tg.quat_slerp(a[i], b[i], tg.float64(t))


def _reference(q):
    v, w = q[:, :3], q[:, 3]
    n = np.linalg.norm(v, axis=1)
    axis = v / n[:, None] * np.where(w < 0, -1.0, 1.0)[:, None]
    return np.concatenate([axis, (2.0 * np.arctan2(n, np.abs(w)))[:, None]], axis=1)


def _unit_quats(n, seed):
    q = np.random.default_rng(seed).normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_values_match_the_reference(device):
    q = _unit_quats(64, 0)
    out = tg.zeros(64, dtype=tg.vec4d, device=device)
    tg.launch(axis_angle, dim=64, inputs=[tg.array(q, dtype=tg.quatd, device=device)], outputs=[out])
    np.testing.assert_allclose(out.numpy(), _reference(q), rtol=1e-13, atol=1e-14)
    # the identity rotation: zero axis (normalize of a zero vector), zero angle
    out = tg.zeros(1, dtype=tg.vec4d, device=device)
    tg.launch(axis_angle, dim=1, inputs=[tg.array([[0.0, 0.0, 0.0, 1.0]], dtype=tg.quatd, device=device)],
              outputs=[out])
    np.testing.assert_array_equal(out.numpy(), [[0.0, 0.0, 0.0, 0.0]])


def test_gradient_through_both_results(device):
    q = _unit_quats(8, 1)
    w = np.random.default_rng(2).normal(size=(8, 4))
    qa = tg.array(q, dtype=tg.quatd, requires_grad=True, device=device)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(weighted, dim=8, inputs=[qa, tg.array(w, dtype=tg.vec4d, device=device)], outputs=[loss])
    tape.backward(loss)

    def f(x):
        return float(np.sum(_reference(x) * w))

    eps = 1e-6
    fd = np.zeros_like(q)
    for i in range(8):
        for j in range(4):
            d = np.zeros_like(q)
            d[i, j] = eps
            fd[i, j] = (f(q + d) - f(q - d)) / (2 * eps)
    np.testing.assert_allclose(qa.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_slerp_written_with_it_matches_quat_slerp(device):
    a, b = _unit_quats(16, 3), _unit_quats(16, 4)
    out = tg.zeros(16, dtype=tg.quatd, device=device)
    aa, bb = tg.array(a, dtype=tg.quatd, device=device), tg.array(b, dtype=tg.quatd, device=device)
    tg.launch(slerp_by_hand, dim=16, inputs=[aa, bb, 0.3], outputs=[out])
    ref = tg.zeros(16, dtype=tg.quatd, device=device)
    tg.launch(slerp_builtin, dim=16, inputs=[aa, bb, 0.3], outputs=[ref])
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-13, atol=1e-14)
    # float64 on the host: the ends of the arc are a and b (up to the sign of a quaternion)
    tg.launch(slerp_by_hand, dim=16, inputs=[aa, bb, 1.0], outputs=[out])
    np.testing.assert_allclose(np.abs(np.sum(out.numpy() * b, axis=1)), 1.0, rtol=1e-12)


@tg.kernel
def bad_not_local(q: tg.array(dtype=tg.quatd), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    axis = tg.vec3d()
    tg.quat_to_axis_angle(q[i], axis, out[i])


@tg.kernel
def bad_type(q: tg.array(dtype=tg.quatd), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    axis = tg.vec3()
    a = tg.float64(0.0)
    tg.quat_to_axis_angle(q[i], axis, a)


@tg.kernel
def bad_count(q: tg.array(dtype=tg.quatd), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    axis = tg.vec3d()
    tg.quat_to_axis_angle(q[i], axis)


@pytest.mark.parametrize("kernel,message", [
    (bad_not_local, r"output argument 'out\[i\]' must be a local variable"),
    (bad_type, r"output variable 'axis' is vec3, expected vec3d"),
    (bad_count, r"takes 1 input\(s\) and 2 output variable\(s\), got 2"),
], ids=["not_local", "type", "count"])
def test_bad_output_arguments_raise(kernel, message):
    with pytest.raises(KernelError, match=message):
        tg.launch(kernel, dim=1, inputs=[tg.zeros(1, dtype=tg.quatd)], outputs=[tg.zeros(1, dtype=tg.float64)])


@tg.kernel
def tuple_form(q: tg.array(dtype=tg.quatd), out: tg.array(dtype=tg.vec4d)):
    i = tg.tid()
    axis, angle = tg.quat_to_axis_angle(q[i])
    out[i] = tg.vec4d(axis[0], axis[1], axis[2], angle)


def test_tuple_form_in_kernels_and_python_scope(device):
    q = _unit_quats(16, 9)
    out = tg.zeros(16, dtype=tg.vec4d, device=device)
    tg.launch(tuple_form, dim=16, inputs=[tg.array(q, dtype=tg.quatd, device=device)], outputs=[out])
    np.testing.assert_allclose(out.numpy(), _reference(q), rtol=1e-13, atol=1e-14)
    axis, angle = tg.quat_to_axis_angle(tg.quatd(*q[0]))
    np.testing.assert_allclose(np.append(np.asarray(axis), angle), _reference(q[:1])[0], rtol=1e-13)
    axis, angle = tg.quat_to_axis_angle(tg.quath(1.0, 2.0, 3.0, 4.0))     # Warp's test_codegen values
    assert isinstance(angle, np.float16)
    np.testing.assert_allclose(np.asarray(axis, np.float64), [0.26726124, 0.53452247, 0.80178368], atol=1e-3)
    assert abs(float(angle) - 1.50408018) < 1e-3


def test_python_scope_output_arguments_raise():
    with pytest.raises(TypeError, match=r"output variables exist in kernels only.*returns \(axis, angle\)"):
        tg.quat_to_axis_angle(tg.quat_identity(), tg.vec3(), 0.0)


@tg.kernel
def half_rotate(q: tg.array(dtype=tg.quath), angle: tg.array(dtype=tg.float16), out: tg.array(dtype=tg.quath)):
    i = tg.tid()
    axis = tg.vec3h()
    a = tg.float16(0.0)
    tg.quat_to_axis_angle(q[i], axis, a)
    # quat_from_axis_angle of half inputs is tg.quath itself, so it multiplies with q[i]
    out[i] = tg.mul(q[i], tg.quat_from_axis_angle(axis, angle[i] * a))


def test_half_precision_results_are_quath(device):
    q = _unit_quats(8, 7)
    t = np.full(8, 0.5)
    out = tg.zeros(8, dtype=tg.quath, device=device)
    tg.launch(half_rotate, dim=8, inputs=[tg.array(q, dtype=tg.quath, device=device),
                                          tg.array(t, dtype=tg.float16, device=device)], outputs=[out])
    # q * (q's rotation by half its angle) = a rotation by 1.5x the angle about the same axis
    ax = _reference(q)
    half = 0.75 * ax[:, 3]
    expect = np.concatenate([ax[:, :3] * np.sin(half)[:, None], np.cos(half)[:, None]], axis=1)
    expect *= np.where(q[:, 3] < 0, -1.0, 1.0)[:, None]
    np.testing.assert_allclose(out.numpy().astype(np.float64), expect, atol=5e-3)
