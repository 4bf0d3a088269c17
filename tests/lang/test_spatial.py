"""Issue 15, item 2: transforms, spatial vectors/matrices and quat_rpy — types, host functions
and kernel builtins agree with each other and with Warp 1.19's values (taken from Warp)."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.types import TransformType

# Warp 1.19: wp.quat_rpy(0.1, 0.2, 0.3) and
# wp.transform_point(wp.transform((1, 2, 3), wp.quat_rpy(0.1, 0.2, 0.3)), wp.vec3(1, 0, 0))
WARP_RPY = [0.03427080065011978, 0.10602051019668579, 0.14357218146324158, 0.983347475528717]
WARP_POINT = [1.936293363571167, 2.2896294593811035, 2.80133056640625]


def test_types():
    assert isinstance(tg.transform, TransformType) and tg.transform.length == 7
    assert tg.transformf is tg.transform and tg.transformd.scalar is tg.float64 and tg.transformh.scalar is tg.float16
    assert tg.spatial_vector is tg.vector(6, tg.float32) and tg.spatial_vectorf is tg.spatial_vector
    assert tg.spatial_matrix is tg.matrix((6, 6), tg.float32) and tg.spatial_matrixd.scalar is tg.float64
    assert tg.transform._shape_ == (7,) and tg.types.type_size_in_bytes(tg.transformd) == 56
    assert tg.transform().tolist() == [0, 0, 0, 0, 0, 0, 1]            # Warp: identity
    assert tg.transform((1, 2, 3), (0, 0, 0, 1)).tolist() == [1, 2, 3, 0, 0, 0, 1]
    a = tg.zeros(4, dtype=tg.transform)
    assert a.numpy().shape == (4, 7)


def test_host_functions_match_warp():
    np.testing.assert_allclose(tg.quat_rpy(0.1, 0.2, 0.3), WARP_RPY, rtol=1e-6)
    t = tg.transform((1, 2, 3), tg.quat_rpy(0.1, 0.2, 0.3))
    np.testing.assert_allclose(tg.transform_point(t, tg.vec3(1, 0, 0)), WARP_POINT, rtol=1e-6)
    inv = tg.transform_inverse(t)
    np.testing.assert_allclose(tg.transform_multiply(t, inv), tg.transform_identity(), atol=1e-6)
    np.testing.assert_allclose(tg.quat_from_axis_angle((0, 0, 1), np.pi), [0, 0, 1, 0], atol=1e-7)


@tg.kernel
def xf_kernel(t: tg.array(dtype=tg.transform), p: tg.array(dtype=tg.vec3), out_p: tg.array(dtype=tg.vec3),
              out_v: tg.array(dtype=tg.vec3), out_t: tg.array(dtype=tg.transform), out_i: tg.array(dtype=tg.transform)):
    i = tg.tid()
    x = t[i]
    out_p[i] = tg.transform_point(x, p[i])
    out_v[i] = tg.transform_vector(x, p[i])
    built = tg.transform(tg.transform_get_translation(x), tg.transform_get_rotation(x))
    out_t[i] = tg.transform_multiply(built, tg.transform_inverse(x))
    out_i[i] = tg.transform_multiply(tg.transform(), tg.transform_identity())


@tg.kernel
def spatial_kernel(a: tg.array(dtype=tg.spatial_vector), b: tg.array(dtype=tg.spatial_vector),
                   r: tg.array(dtype=tg.mat33), cross: tg.array(dtype=tg.spatial_vector),
                   dual: tg.array(dtype=tg.spatial_vector), dots: tg.array(dtype=float),
                   adj: tg.array(dtype=tg.spatial_matrix), q: tg.array(dtype=tg.quat)):
    i = tg.tid()
    cross[i] = tg.spatial_cross(a[i], b[i])
    dual[i] = tg.spatial_cross_dual(tg.spatial_vector(tg.spatial_top(a[i]), tg.spatial_bottom(a[i])), b[i])
    dots[i] = tg.spatial_dot(a[i], b[i])
    adj[i] = tg.spatial_adjoint(r[i], r[i])
    q[i] = tg.quat_rpy(0.1, 0.2, 0.3)


def test_transform_builtins_in_kernels_match_the_host():
    rng = np.random.default_rng(0)
    n = 5
    qs = rng.normal(size=(n, 4))
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    tnp = np.concatenate([rng.normal(size=(n, 3)), qs], axis=1).astype(np.float32)
    pnp = rng.normal(size=(n, 3)).astype(np.float32)
    t = tg.array(tnp, dtype=tg.transform)
    p = tg.array(pnp, dtype=tg.vec3)
    outs = [tg.zeros(n, dtype=tg.vec3), tg.zeros(n, dtype=tg.vec3), tg.zeros(n, dtype=tg.transform),
            tg.zeros(n, dtype=tg.transform)]
    tg.launch(xf_kernel, dim=n, inputs=[t, p], outputs=outs)
    for k in range(n):
        np.testing.assert_allclose(outs[0].numpy()[k], tg.transform_point(tnp[k], pnp[k]), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outs[1].numpy()[k], tg.transform_vector(tnp[k], pnp[k]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[2].numpy(), np.tile([0, 0, 0, 0, 0, 0, 1], (n, 1)), atol=1e-5)
    assert outs[3].numpy().tolist() == [[0, 0, 0, 0, 0, 0, 0]] * n     # Warp 1.19: transform() in a kernel is zero


def test_spatial_builtins_in_kernels_match_the_host():
    rng = np.random.default_rng(1)
    n = 3
    anp, bnp = (rng.normal(size=(n, 6)).astype(np.float32) for _ in range(2))
    rnp = rng.normal(size=(n, 3, 3)).astype(np.float32)
    a, b = tg.array(anp, dtype=tg.spatial_vector), tg.array(bnp, dtype=tg.spatial_vector)
    r = tg.array(rnp, dtype=tg.mat33)
    cross, dual = tg.zeros(n, dtype=tg.spatial_vector), tg.zeros(n, dtype=tg.spatial_vector)
    dots, adj, q = tg.zeros(n), tg.zeros(n, dtype=tg.spatial_matrix), tg.zeros(n, dtype=tg.quat)
    tg.launch(spatial_kernel, dim=n, inputs=[a, b, r], outputs=[cross, dual, dots, adj, q])
    for k in range(n):
        np.testing.assert_allclose(cross.numpy()[k], tg.spatial_cross(anp[k], bnp[k]), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dual.numpy()[k], tg.spatial_cross_dual(anp[k], bnp[k]), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dots.numpy()[k], tg.spatial_dot(anp[k], bnp[k]), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(adj.numpy()[k], tg.spatial_adjoint(rnp[k], rnp[k]), rtol=1e-6)
        np.testing.assert_allclose(q.numpy()[k], WARP_RPY, rtol=1e-6)
    np.testing.assert_allclose(tg.spatial_top(anp[0]), anp[0][:3])
    np.testing.assert_allclose(tg.spatial_bottom(anp[0]), anp[0][3:])


def test_gradient_through_a_transform_chain():
    """d/dp of sum(transform_point(t, p)) through the tape equals R^T 1 (R the rotation)."""
    @tg.kernel
    def chain(t: tg.array(dtype=tg.transform), p: tg.array(dtype=tg.vec3), loss: tg.array(dtype=float)):
        i = tg.tid()
        y = tg.transform_point(tg.transform_multiply(t[i], tg.transform_inverse(t[i])), p[i])
        tg.atomic_add(loss, 0, y[0] + y[1] + y[2])

    t = tg.array(np.array([[1, 2, 3, *tg.quat_rpy(0.3, -0.2, 0.5)]], np.float32), dtype=tg.transform,
                 requires_grad=True)
    p = tg.array(np.array([[0.5, -1.0, 2.0]], np.float32), dtype=tg.vec3, requires_grad=True)
    loss = tg.zeros(1, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(chain, dim=1, inputs=[t, p], outputs=[loss])
    tape.backward(loss)
    np.testing.assert_allclose(p.grad.numpy()[0], [1, 1, 1], rtol=1e-5)   # t * t^-1 is the identity
    # the position cancels; the quaternion's gradient is not zero (off the unit sphere q q^-1 != 1)
    np.testing.assert_allclose(t.grad.numpy()[0][:3], 0, atol=1e-5)


def test_bad_argument_types_are_clear_errors():
    @tg.kernel
    def bad(t: tg.array(dtype=tg.vec3), out: tg.array(dtype=tg.vec3)):
        i = tg.tid()
        out[i] = tg.transform_point(t[i], t[i])      # a vec3 is not a transform

    with pytest.raises(tg.KernelError, match=r"transform_point\(\) does not accept"):
        tg.launch(bad, dim=1, inputs=[tg.zeros(1, dtype=tg.vec3), tg.zeros(1, dtype=tg.vec3)])


# Warp 1.19: wp.quat_to_matrix(wp.quat_rpy(0.1, 0.2, 0.3))
WARP_MATRIX = [[0.9362934231758118, -0.2750958502292633, 0.21835066378116608],
               [0.2896294891834259, 0.9564251899719238, -0.036957018077373505],
               [-0.19866932928562164, 0.09784340113401413, 0.9751704335212708]]


@tg.kernel
def to_matrix_kernel(t: tg.array(dtype=tg.transform), r: tg.array(dtype=tg.mat33), m: tg.array(dtype=tg.mat44)):
    i = tg.tid()
    r[i] = tg.quat_to_matrix(tg.transform_get_rotation(t[i]))
    m[i] = tg.transform_to_matrix(t[i])


def test_rotation_matrices_match_warp_on_host_and_in_kernels():
    q = tg.quat_rpy(0.1, 0.2, 0.3)
    np.testing.assert_allclose(tg.quat_to_matrix(q), WARP_MATRIX, rtol=1e-5, atol=1e-6)
    t = tg.transform((1, 2, 3), q)
    ta = tg.array(np.asarray(t)[None], dtype=tg.transform)   # t[None]: a KeyError on a value, as Warp
    r, m = tg.zeros(1, dtype=tg.mat33), tg.zeros(1, dtype=tg.mat44)
    tg.launch(to_matrix_kernel, dim=1, inputs=[ta], outputs=[r, m])
    np.testing.assert_allclose(r.numpy()[0], WARP_MATRIX, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.numpy()[0], tg.transform_to_matrix(t), rtol=1e-5, atol=1e-6)
    assert m.numpy()[0][:3, 3].tolist() == [1, 2, 3] and m.numpy()[0][3].tolist() == [0, 0, 0, 1]


def _rotations():
    """Rotation matrices that reach every branch of quat_from_matrix (trace >= 0, each diagonal max)."""
    qs = [tg.quat_rpy(0.1, 0.2, 0.3), tg.quat_rpy(3.0, 0.1, 0.2), tg.quat_rpy(0.1, 3.0, 0.2),
          tg.quat_rpy(0.2, 0.1, 3.0), tg.quat_rpy(2.5, -2.0, 1.0)]
    return np.array([tg.quat_to_matrix(q) for q in qs], dtype=np.float32)


@tg.kernel
def from_matrix_kernel(m: tg.array(dtype=tg.mat33), h: tg.array(dtype=tg.mat44),
                       q: tg.array(dtype=tg.quat), t: tg.array(dtype=tg.transform)):
    i = tg.tid()
    q[i] = tg.quat_from_matrix(m[i])
    t[i] = tg.transform_from_matrix(h[i])


def _homogeneous(r):
    h = np.tile(np.eye(4, dtype=np.float32), (len(r), 1, 1))
    h[:, :3, :3] = r
    h[:, :3, 3] = np.arange(3 * len(r), dtype=np.float32).reshape(-1, 3)
    return h


def test_quat_from_matrix_inverts_quat_to_matrix_in_every_branch():
    r = _rotations()
    diag = np.diagonal(r, axis1=1, axis2=2)
    assert (diag.sum(1) < 0).sum() >= 3 and set(diag.argmax(1)[diag.sum(1) < 0]) == {0, 1, 2}
    h = _homogeneous(r)
    q, t = tg.zeros(len(r), dtype=tg.quat), tg.zeros(len(r), dtype=tg.transform)
    tg.launch(from_matrix_kernel, dim=len(r), inputs=[tg.array(r, dtype=tg.mat33), tg.array(h, dtype=tg.mat44)],
              outputs=[q, t])
    for i in range(len(r)):
        np.testing.assert_allclose(tg.quat_to_matrix(q.numpy()[i]), r[i], atol=2e-6)
        np.testing.assert_allclose(q.numpy()[i], tg.quat_from_matrix(r[i]), atol=1e-6)
        np.testing.assert_allclose(t.numpy()[i], tg.transform_from_matrix(h[i]), atol=1e-6)
        np.testing.assert_allclose(t.numpy()[i][:3], h[i][:3, 3])


def test_quat_from_matrix_equals_warp():
    wp = pytest.importorskip("warp")
    r = _rotations()
    h = _homogeneous(r)

    @wp.kernel
    def warp_from_matrix(m: wp.array(dtype=wp.mat33), hm: wp.array(dtype=wp.mat44),
                         q: wp.array(dtype=wp.quat), t: wp.array(dtype=wp.transform)):
        i = wp.tid()
        q[i] = wp.quat_from_matrix(m[i])
        t[i] = wp.transform_from_matrix(hm[i])

    wq, wt = wp.zeros(len(r), dtype=wp.quat, device="cpu"), wp.zeros(len(r), dtype=wp.transform, device="cpu")
    wp.launch(warp_from_matrix, dim=len(r), inputs=[wp.array(r, dtype=wp.mat33, device="cpu"),
                                                   wp.array(h, dtype=wp.mat44, device="cpu")],
              outputs=[wq, wt], device="cpu")
    q, t = tg.zeros(len(r), dtype=tg.quat), tg.zeros(len(r), dtype=tg.transform)
    tg.launch(from_matrix_kernel, dim=len(r), inputs=[tg.array(r, dtype=tg.mat33), tg.array(h, dtype=tg.mat44)],
              outputs=[q, t])
    np.testing.assert_allclose(q.numpy(), wq.numpy(), atol=1e-6)
    np.testing.assert_allclose(t.numpy(), wt.numpy(), atol=1e-6)


@tg.kernel
def quat_helpers_kernel(a: tg.array(dtype=tg.vec3), b: tg.array(dtype=tg.vec3), q0: tg.array(dtype=tg.quat),
                        q1: tg.array(dtype=tg.quat), t: tg.array(dtype=float), between: tg.array(dtype=tg.quat),
                        rpy: tg.array(dtype=tg.vec3), slerp: tg.array(dtype=tg.quat)):
    i = tg.tid()
    between[i] = tg.quat_between_vectors(a[i], b[i])
    rpy[i] = tg.quat_to_rpy(q0[i])
    slerp[i] = tg.quat_slerp(q0[i], q1[i], t[i])


def _helper_inputs():
    rng = np.random.default_rng(3)
    q0, q1 = (rng.normal(size=(8, 4)) for _ in range(2))
    q0, q1 = (q / np.linalg.norm(q, axis=1, keepdims=True) for q in (q0, q1))
    return [x.astype(np.float32) for x in (rng.normal(size=(8, 3)), rng.normal(size=(8, 3)), q0, q1,
                                            rng.uniform(0, 1, 8))]


def _run_helpers(inputs):
    dts = [tg.vec3, tg.vec3, tg.quat, tg.quat, tg.float32]
    outs = [tg.zeros(8, dtype=d) for d in (tg.quat, tg.vec3, tg.quat)]
    tg.launch(quat_helpers_kernel, dim=8, inputs=[tg.array(x, dtype=d) for x, d in zip(inputs, dts)], outputs=outs)
    return [o.numpy() for o in outs]


def test_quat_helpers_in_kernels_equal_the_host_versions():
    a, b, q0, q1, t = inputs = _helper_inputs()
    between, rpy, slerp = _run_helpers(inputs)
    for i in range(8):
        np.testing.assert_allclose(between[i], tg.quat_between_vectors(a[i], b[i]), atol=1e-6)
        rotated = tg.transform_vector(tg.transform((0, 0, 0), between[i]), a[i] / np.linalg.norm(a[i]))
        np.testing.assert_allclose(rotated, b[i] / np.linalg.norm(b[i]), atol=1e-5)
        np.testing.assert_allclose(rpy[i], tg.quat_to_rpy(q0[i]), atol=1e-6)
        np.testing.assert_allclose(np.abs(tg.quat_rpy(*rpy[i]) @ q0[i]), 1, atol=1e-5)   # same rotation
        np.testing.assert_allclose(slerp[i], tg.quat_slerp(q0[i], q1[i], t[i]), atol=1e-6)
    np.testing.assert_allclose(tg.quat_slerp(q0[0], q1[0], 0.0), q0[0], atol=1e-6)
    np.testing.assert_allclose(np.abs(tg.quat_slerp(q0[0], q1[0], 1.0) @ q1[0]), 1, atol=1e-6)


def test_quat_helpers_equal_warp():
    wp = pytest.importorskip("warp")

    @wp.kernel
    def warp_helpers(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), q0: wp.array(dtype=wp.quat),
                     q1: wp.array(dtype=wp.quat), t: wp.array(dtype=float), between: wp.array(dtype=wp.quat),
                     rpy: wp.array(dtype=wp.vec3), slerp: wp.array(dtype=wp.quat)):
        i = wp.tid()
        between[i] = wp.quat_between_vectors(a[i], b[i])
        rpy[i] = wp.quat_to_rpy(q0[i])
        slerp[i] = wp.quat_slerp(q0[i], q1[i], t[i])

    inputs = _helper_inputs()
    dts = [wp.vec3, wp.vec3, wp.quat, wp.quat, wp.float32]
    outs = [wp.zeros(8, dtype=d, device="cpu") for d in (wp.quat, wp.vec3, wp.quat)]
    wp.launch(warp_helpers, dim=8, inputs=[wp.array(x, dtype=d, device="cpu") for x, d in zip(inputs, dts)],
              outputs=outs, device="cpu")
    for ours, theirs in zip(_run_helpers(inputs), outs):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=2e-6)


@tg.kernel
def euler_kernel(e: tg.array(dtype=tg.vec3), q: tg.array(dtype=tg.quat), v: tg.array(dtype=tg.vec3),
                 xyz: tg.array(dtype=tg.quat), zxz: tg.array(dtype=tg.quat), inv: tg.array(dtype=tg.vec3)):
    i = tg.tid()
    xyz[i] = tg.quat_from_euler(e[i], 0, 1, 2)
    zxz[i] = tg.quat_from_euler(e[i], 2, 0, 2)
    inv[i] = tg.quat_rotate_inv(q[i], v[i])


def _euler_run():
    e, _, q, _, _ = _helper_inputs()
    v = _helper_inputs()[0]
    outs = [tg.zeros(8, dtype=d) for d in (tg.quat, tg.quat, tg.vec3)]
    tg.launch(euler_kernel, dim=8, inputs=[tg.array(e, dtype=tg.vec3), tg.array(q, dtype=tg.quat),
                                           tg.array(v, dtype=tg.vec3)], outputs=outs)
    return (e, q, v), [o.numpy() for o in outs]


def test_quat_from_euler_and_rotate_inv():
    (e, q, v), (xyz, zxz, inv) = _euler_run()
    for i in range(8):
        np.testing.assert_allclose(xyz[i], tg.quat_rpy(*e[i]), atol=1e-6)     # Warp: (e, 0, 1, 2) is quat_rpy
        np.testing.assert_allclose(zxz[i], tg.quat_from_euler(e[i], 2, 0, 2), atol=1e-6)
        back = tg.transform_vector(tg.transform((0, 0, 0), q[i]), inv[i])
        np.testing.assert_allclose(back, v[i], atol=1e-5)
        np.testing.assert_allclose(inv[i], tg.quat_rotate_inv(q[i], v[i]), atol=1e-6)
    with pytest.raises(ValueError, match="k must be an axis index"):
        tg.quat_from_euler(e[0], 0, 1, 3)


def test_quat_from_euler_and_rotate_inv_equal_warp():
    wp = pytest.importorskip("warp")

    @wp.kernel
    def warp_euler(e: wp.array(dtype=wp.vec3), q: wp.array(dtype=wp.quat), v: wp.array(dtype=wp.vec3),
                   xyz: wp.array(dtype=wp.quat), zxz: wp.array(dtype=wp.quat), inv: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        xyz[i] = wp.quat_from_euler(e[i], 0, 1, 2)
        zxz[i] = wp.quat_from_euler(e[i], 2, 0, 2)
        inv[i] = wp.quat_rotate_inv(q[i], v[i])

    (e, q, v), ours = _euler_run()
    outs = [wp.zeros(8, dtype=d, device="cpu") for d in (wp.quat, wp.quat, wp.vec3)]
    ins = [wp.array(x, dtype=d, device="cpu") for x, d in ((e, wp.vec3), (q, wp.quat), (v, wp.vec3))]
    wp.launch(warp_euler, dim=8, inputs=ins, outputs=outs, device="cpu")
    for a, b in zip(ours, outs):
        np.testing.assert_allclose(a, b.numpy(), atol=2e-6)


@tg.kernel
def compose_kernel(p: tg.array(dtype=tg.vec3), q: tg.array(dtype=tg.quat), s: tg.array(dtype=tg.vec3),
                   m: tg.array(dtype=tg.mat44)):
    i = tg.tid()
    m[i] = tg.transform_compose(p[i], q[i], s[i])


def _compose_run():
    p, s, q, _, _ = _helper_inputs()
    m = tg.zeros(8, dtype=tg.mat44)
    tg.launch(compose_kernel, dim=8, inputs=[tg.array(p, dtype=tg.vec3), tg.array(q, dtype=tg.quat),
                                             tg.array(s, dtype=tg.vec3)], outputs=[m])
    return (p, q, s), m.numpy()


def test_transform_compose_scales_the_rotation_columns():
    (p, q, s), m = _compose_run()
    for i in range(8):
        np.testing.assert_allclose(m[i][:3, :3], tg.quat_to_matrix(q[i]) * s[i][None, :], atol=1e-6)
        np.testing.assert_allclose(m[i][:3, 3], p[i])
        np.testing.assert_allclose(m[i], tg.transform_compose(p[i], q[i], s[i]), atol=1e-6)


def test_transform_compose_equals_warp():
    wp = pytest.importorskip("warp")

    @wp.kernel
    def warp_compose(p: wp.array(dtype=wp.vec3), q: wp.array(dtype=wp.quat), s: wp.array(dtype=wp.vec3),
                     m: wp.array(dtype=wp.mat44)):
        i = wp.tid()
        m[i] = wp.transform_compose(p[i], q[i], s[i])

    (p, q, s), ours = _compose_run()
    wm = wp.zeros(8, dtype=wp.mat44, device="cpu")
    ins = [wp.array(x, dtype=d, device="cpu") for x, d in ((p, wp.vec3), (q, wp.quat), (s, wp.vec3))]
    wp.launch(warp_compose, dim=8, inputs=ins, outputs=[wm], device="cpu")
    np.testing.assert_allclose(ours, wm.numpy(), atol=2e-6)


@tg.kernel
def to_euler_kernel(q: tg.array(dtype=tg.quat), xyz: tg.array(dtype=tg.vec3), zxz: tg.array(dtype=tg.vec3),
                    yzx: tg.array(dtype=tg.vec3)):
    i = tg.tid()
    xyz[i] = tg.quat_to_euler(q[i], 0, 1, 2)
    zxz[i] = tg.quat_to_euler(q[i], 2, 0, 2)
    yzx[i] = tg.quat_to_euler(q[i], 1, 2, 0)


def _to_euler_run():
    q = _helper_inputs()[2]
    outs = [tg.zeros(8, dtype=tg.vec3) for _ in range(3)]
    tg.launch(to_euler_kernel, dim=8, inputs=[tg.array(q, dtype=tg.quat)], outputs=outs)
    return q, [o.numpy() for o in outs]


def test_quat_to_euler_round_trips_through_quat_from_euler():
    q, outs = _to_euler_run()
    for axes, e in zip(((0, 1, 2), (2, 0, 2), (1, 2, 0)), outs):
        for n in range(8):
            np.testing.assert_allclose(e[n], tg.quat_to_euler(q[n], *axes), atol=2e-6)
            if axes[0] != axes[2]:   # Tait-Bryan; a proper sequence stores its third angle at e[3 - i - j]
                back = tg.quat_from_euler(e[n], *axes)
                np.testing.assert_allclose(abs(float(back @ q[n])), 1, atol=1e-5)     # the same rotation
    with pytest.raises(ValueError, match="j must be an axis index"):
        tg.quat_to_euler(q[0], 0, -1, 2)


def test_quat_to_euler_equals_warp():
    wp = pytest.importorskip("warp")

    @wp.kernel
    def warp_to_euler(q: wp.array(dtype=wp.quat), xyz: wp.array(dtype=wp.vec3), zxz: wp.array(dtype=wp.vec3),
                      yzx: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        xyz[i] = wp.quat_to_euler(q[i], 0, 1, 2)
        zxz[i] = wp.quat_to_euler(q[i], 2, 0, 2)
        yzx[i] = wp.quat_to_euler(q[i], 1, 2, 0)

    q, ours = _to_euler_run()
    outs = [wp.zeros(8, dtype=wp.vec3, device="cpu") for _ in range(3)]
    wp.launch(warp_to_euler, dim=8, inputs=[wp.array(q, dtype=wp.quat, device="cpu")], outputs=outs, device="cpu")
    for a, b in zip(ours, outs):
        np.testing.assert_allclose(a, b.numpy(), atol=1e-5)
