"""Issue 28, item 3: Warp's matrix decompositions ``svd3``, ``svd2``, ``qr3``, ``eig3`` (out-parameter
and tuple forms): factorizations against float64 NumPy, Warp's sign conventions (and the values
Warp's own test pins for a rank-deficient matrix), half/float/double, gradients through every
result against central finite differences (also where two singular values are equal and the
quantity is still smooth), and the errors of bad output arguments. The builtin table's
finite-difference samples (tests/lang/test_builtins_grad.py, test_builtins_tangent.py) check each
result's adjoint, tangent and second derivative too."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import KernelError


def _decomp_kernel(F, M, V):
    @tg.kernel
    def decomp(a: tg.array(dtype=M), u: tg.array(dtype=M), s: tg.array(dtype=V), v: tg.array(dtype=M),
               q: tg.array(dtype=M), r: tg.array(dtype=M), eq: tg.array(dtype=M), ed: tg.array(dtype=V)):
        i = tg.tid()
        U = M()
        sigma = V()
        W = M()
        tg.svd3(a[i], U, sigma, W)
        u[i] = U
        s[i] = sigma
        v[i] = W
        Q, R = tg.qr3(a[i])
        q[i] = Q
        r[i] = R
        EQ = M()
        d = V()
        tg.eig3(a[i], EQ, d)
        eq[i] = EQ
        ed[i] = d
    return decomp


_KERNELS = {F: _decomp_kernel(F, tg.types.matrix((3, 3), F), tg.types.vector(3, F))
            for F in (tg.float16, tg.float32, tg.float64)}


def _matrices():
    rng = np.random.default_rng(7)
    special = [np.zeros((3, 3)), np.eye(3), -np.eye(3), np.diag([1.0, 2.0, 3.0]), np.diag([-1.0, 2.0, 3.0]),
               np.ones((3, 3)), np.arange(1.0, 10.0).reshape(3, 3), np.diag([3.0, 0.0, 0.0])]
    return np.concatenate([rng.normal(size=(24, 3, 3)), np.array(special)])


def _run(F, a, device):
    M, V = tg.types.matrix((3, 3), F), tg.types.vector(3, F)
    n = len(a)
    arr = tg.array(a.astype(F.np_dtype), dtype=M, device=device)
    outs = [tg.zeros(n, dtype=t, device=device) for t in (M, V, M, M, M, M, V)]
    tg.launch(_KERNELS[F], dim=n, inputs=[arr], outputs=outs, device=device)
    return [o.numpy().astype(np.float64) for o in outs]


@pytest.mark.parametrize("F,tol", [(tg.float64, 1e-12), (tg.float32, 1e-5), (tg.float16, 2e-2)],
                         ids=["float64", "float32", "float16"])
def test_factorizations_and_conventions(F, tol, device):
    a = _matrices().astype(F.np_dtype).astype(np.float64)
    u, s, v, q, r, eq, ed = _run(F, a, device)
    eye = np.broadcast_to(np.eye(3), a.shape)
    # svd3: A = U diag(s) V^T, U and V rotations, |s| descending, s[0], s[1] >= 0
    np.testing.assert_allclose(u @ (s[:, :, None] * np.swapaxes(v, 1, 2)), a, atol=30 * tol)
    for m in (u, v, q, eq):
        np.testing.assert_allclose(m @ np.swapaxes(m, 1, 2), eye, atol=10 * tol)
        np.testing.assert_allclose(np.linalg.det(m), 1.0, atol=10 * tol)
    np.testing.assert_allclose(np.abs(s), np.sort(np.abs(np.linalg.svd(a, compute_uv=False)), axis=1)[:, ::-1],
                               atol=30 * tol)
    assert (s[:, :2] >= 0).all()
    np.testing.assert_array_equal(np.sign(s[:, 2]) * (np.abs(s[:, 2]) > 100 * tol),
                                  np.sign(np.linalg.det(a)) * (np.abs(s[:, 2]) > 100 * tol))
    # each of U's first two columns has its largest-magnitude component positive
    for j in range(2):
        col = u[:, :, j]
        lead = col[np.arange(len(a)), np.argmax(np.abs(col), axis=1)]
        assert (lead[s[:, j] > 100 * tol] > 0).all()
    # qr3: A = Q R, R upper triangular, R[0,0], R[1,1] >= 0
    np.testing.assert_allclose(q @ r, a, atol=30 * tol)
    np.testing.assert_allclose(np.tril(r, -1), 0.0, atol=tol)
    assert (np.diagonal(r, axis1=1, axis2=2)[:, :2] >= -tol).all()
    # eig3 of sym(A): ascending eigenvalues, Q diag(d) Q^T = sym(A)
    sym = 0.5 * (a + np.swapaxes(a, 1, 2))
    np.testing.assert_allclose(ed, np.linalg.eigvalsh(sym), atol=30 * tol * max(1.0, np.abs(sym).max()))
    np.testing.assert_allclose(eq @ (ed[:, :, None] * np.swapaxes(eq, 1, 2)), sym, atol=30 * tol * np.abs(sym).max())


def test_warp_pinned_values_rank_deficient(device):
    # the values Warp's test_codegen pins for svd3 of a rank-2 matrix (float32)
    a = np.arange(1.0, 10.0).reshape(1, 3, 3)
    u, s, v, *_ = _run(tg.float32, a, device)
    U = [[0.21483721, 0.88723058, -0.40824816], [0.52058744, 0.24964368, 0.81649637],
         [0.82633746, -0.38794267, -0.40824834]]
    V = [[0.47967088, -0.77669406, 0.40824246], [0.57236743, -0.07568054, -0.81649727],
         [0.66506463, 0.62531471, 0.40825251]]
    np.testing.assert_allclose(u[0], U, atol=1e-4)
    np.testing.assert_allclose(v[0], V, atol=1e-4)
    np.testing.assert_allclose(s[0], [16.84809875, 1.06836915, 0.0], atol=1e-4)
    # Python scope: the same conventions
    pu, ps, pv = tg.svd3(tg.mat33(*a.ravel()))
    np.testing.assert_allclose(np.asarray(pu), U, atol=1e-5)
    np.testing.assert_allclose(np.asarray(pv), V, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ps), [16.84809875, 1.06836915, 0.0], atol=1e-5)


def test_python_scope_matches_kernels(device):
    a = np.random.default_rng(3).normal(size=(6, 3, 3))
    u, s, v, q, r, eq, ed = _run(tg.float64, a, device)
    for k in range(len(a)):
        m = tg.mat33d(*a[k].ravel())
        pu, ps, pv = tg.svd3(m)
        pq, pr = tg.qr3(m)
        peq, ped = tg.eig3(m)
        for got, want in ((pu, u), (ps, s), (pv, v), (pq, q), (pr, r), (peq, eq), (ped, ed)):
            np.testing.assert_allclose(np.asarray(got), want[k], atol=1e-10)
    U, S, W = tg.svd2(tg.mat22d(3.0, 0.0, 4.0, 5.0))
    np.testing.assert_allclose(np.asarray(S), [np.sqrt(45.0), np.sqrt(5.0)], atol=1e-12)
    assert np.linalg.det(np.asarray(W)) > 0


@tg.kernel
def svd2_kernel(a: tg.array(dtype=tg.mat22d), u: tg.array(dtype=tg.mat22d), s: tg.array(dtype=tg.vec2d),
                v: tg.array(dtype=tg.mat22d)):
    i = tg.tid()
    U, sigma, V = tg.svd2(a[i])
    u[i] = U
    s[i] = sigma
    v[i] = V


def test_svd2_conventions_and_special_matrices(device):
    rng = np.random.default_rng(11)
    a = np.concatenate([rng.normal(size=(16, 2, 2)),
                        np.array([np.zeros((2, 2)), np.eye(2), -np.eye(2), 5 * np.eye(2), [[1.0, 0.0], [0.0, 0.0]],
                                  [[1.0, 1.0], [-1.0, -1.0]], [[3.0, 0.0], [4.0, 5.0]], [[-1.0, 0.0], [0.0, 2.0]]])])
    n = len(a)
    arr = tg.array(a, dtype=tg.mat22d, device=device)
    u, s, v = (tg.zeros(n, dtype=t, device=device) for t in (tg.mat22d, tg.vec2d, tg.mat22d))
    tg.launch(svd2_kernel, dim=n, inputs=[arr], outputs=[u, s, v], device=device)
    u, s, v = u.numpy(), s.numpy(), v.numpy()
    np.testing.assert_allclose(u @ (s[:, :, None] * np.swapaxes(v, 1, 2)), a, atol=1e-12)
    eye = np.broadcast_to(np.eye(2), a.shape)
    np.testing.assert_allclose(u @ np.swapaxes(u, 1, 2), eye, atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(v), 1.0, atol=1e-12)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-12)   # >= 0, descending


# --------------------------------------------------------------------------------- gradients

@tg.kernel
def weighted_results(a: tg.array(dtype=tg.mat33d), w: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    U = tg.mat33d()
    sigma = tg.vec3d()
    V = tg.mat33d()
    tg.svd3(a[i], U, sigma, V)
    Q, R = tg.qr3(a[i])
    EQ, d = tg.eig3(a[i])
    acc = tg.float64(0.0)
    for r in range(3):
        acc += w[0 * 9 + r] * sigma[r] + w[1 * 9 + r] * d[r]
        for c in range(3):
            acc += w[2 * 9 + 3 * r + c] * U[r, c] + w[3 * 9 + 3 * r + c] * V[r, c]
            acc += w[4 * 9 + 3 * r + c] * Q[r, c] + w[5 * 9 + 3 * r + c] * R[r, c] + w[6 * 9 + 3 * r + c] * EQ[r, c]
    tg.atomic_add(loss, 0, acc)


def _loss(a, w, device):
    loss = tg.zeros(1, dtype=tg.float64, device=device)
    tg.launch(weighted_results, dim=len(a), inputs=[tg.array(a, dtype=tg.mat33d, device=device),
                                                    tg.array(w, dtype=tg.float64, device=device)],
              outputs=[loss], device=device)
    return loss.numpy()[0]


def test_gradients_of_all_results_match_finite_differences(device):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(3, 3, 3)) + np.eye(3)
    w = rng.normal(size=63)
    arr = tg.array(a, dtype=tg.mat33d, device=device, requires_grad=True)
    loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(weighted_results, dim=3, inputs=[arr, tg.array(w, dtype=tg.float64, device=device)],
                  outputs=[loss], device=device)
    tape.backward(loss)
    got = arr.grad.numpy()
    fd = np.zeros_like(a)
    h = 1e-6
    for idx in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[idx] += h
        am[idx] -= h
        fd[idx] = (_loss(ap, w, device) - _loss(am, w, device)) / (2 * h)
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6)


@tg.kernel
def polar_rotation(a: tg.array(dtype=tg.mat33d), g: tg.array(dtype=tg.mat33d), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    U, sigma, V = tg.svd3(a[i])
    R = U * tg.transpose(V)
    acc = tg.float64(0.0)
    for r in range(3):
        for c in range(3):
            acc += g[i][r, c] * R[r, c]
    tg.atomic_add(loss, 0, acc)


def test_polar_rotation_gradient_at_equal_singular_values(device):
    # U V^T (the rotation of the polar decomposition) is smooth where singular values coincide
    # (its derivative couples them through 1 / (s_i + s_j) only): the regularized adjoint keeps
    # that part and drops the undefined one, so the gradient matches finite differences there
    a = np.array([2.0 * np.eye(3), np.diag([3.0, 1.5, 1.5])])
    g = np.random.default_rng(2).normal(size=(2, 3, 3))
    arr = tg.array(a, dtype=tg.mat33d, device=device, requires_grad=True)
    garr = tg.array(g, dtype=tg.mat33d, device=device)
    loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(polar_rotation, dim=2, inputs=[arr, garr], outputs=[loss], device=device)
    tape.backward(loss)

    def f(x):
        out = tg.zeros(1, dtype=tg.float64, device=device)
        tg.launch(polar_rotation, dim=2, inputs=[tg.array(x, dtype=tg.mat33d, device=device), garr], outputs=[out],
                  device=device)
        return out.numpy()[0]

    fd = np.zeros_like(a)
    h = 1e-6
    for idx in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[idx] += h
        am[idx] -= h
        fd[idx] = (f(ap) - f(am)) / (2 * h)
    np.testing.assert_allclose(arr.grad.numpy(), fd, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------- errors

def test_output_variable_of_the_wrong_type_is_named():
    @tg.kernel
    def bad(a: tg.array(dtype=tg.mat33)):
        U = tg.mat33()
        sigma = tg.mat33()
        V = tg.mat33()
        tg.svd3(a[0], U, sigma, V)

    with pytest.raises(KernelError, match="output variable 'sigma' is mat33, expected vec3"):
        tg.launch(bad, dim=1, inputs=[tg.zeros(1, dtype=tg.mat33)], device="cpu")


def test_wrong_argument_count_and_types():
    @tg.kernel
    def two(a: tg.array(dtype=tg.mat33)):
        Q = tg.mat33()
        tg.qr3(a[0], Q)

    with pytest.raises(KernelError, match=r"qr3\(\) takes 1 input\(s\) and 2 output variable\(s\)"):
        tg.launch(two, dim=1, inputs=[tg.zeros(1, dtype=tg.mat33)], device="cpu")

    @tg.kernel
    def wrong_shape(a: tg.array(dtype=tg.mat22)):
        U, s, V = tg.svd3(a[0])

    with pytest.raises(KernelError, match=r"svd3\(\) does not accept \(mat22\)"):
        tg.launch(wrong_shape, dim=1, inputs=[tg.zeros(1, dtype=tg.mat22)], device="cpu")


def test_python_scope_rejects_output_arguments():
    m = tg.mat33(1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0)
    with pytest.raises(TypeError, match="output variables exist in kernels only"):
        tg.svd3(m, tg.mat33(), tg.vec3(), tg.mat33())
    with pytest.raises(TypeError, match=r"expected a 3x3 matrix, got shape \(2, 2\)"):
        tg.eig3(tg.mat22(1.0, 0.0, 0.0, 1.0))


@tg.kernel
def det44(a: tg.array(dtype=tg.mat44), out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    out[i] = tg.determinant(a[i])


def test_determinant_4x4_float32_correctly_rounded(device):
    # nearly singular matrices: the determinant is a small difference of large products, which
    # float32 elimination loses (Warp's finite-difference test of it needs these digits)
    rng = np.random.default_rng(4)
    base = rng.normal(size=(64, 4, 4))
    base[:, 3] = base[:, 0] + base[:, 1] + 1e-3 * rng.normal(size=(64, 4))
    a = base.astype(np.float32)
    out = tg.zeros(64, dtype=tg.float32, device=device)
    tg.launch(det44, dim=64, inputs=[tg.array(a, dtype=tg.mat44, device=device)], outputs=[out], device=device)
    exact = np.linalg.det(a.astype(np.float64))
    np.testing.assert_allclose(out.numpy(), exact, rtol=3e-7, atol=0)
