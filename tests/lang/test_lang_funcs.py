"""@tg.func (typed, overloaded, generic), @tg.func_grad, structs (incl. array fields),
vector/matrix kernels and multi-dimensional launches."""

import numpy as np

import tapegrad as tg

from ._lang_util import check_grad, run

F64 = tg.array(dtype=tg.float64)


@tg.func
def sq_plus(x: tg.float64, y: tg.float64):
    return x * x + tg.sin(y)


@tg.func
def sq_plus(x: tg.float32, y: tg.float32):   # noqa: F811  an overload by annotation
    return x * x - y


@tg.func
def twice(v):             # generic: one specialization per argument type
    return v + v


@tg.func
def clipped(x: tg.float64):
    if x > 1.0:
        return tg.float64(1.0)
    return x


@tg.kernel
def k_funcs(x: F64, y: F64, out: F64, out32: tg.array(dtype=tg.float32)):
    i = tg.tid()
    out[i] = sq_plus(x[i], y[i]) + twice(clipped(x[i]))
    out32[i] = sq_plus(tg.float32(x[i]), 1.0) + twice(tg.float32(2.0))


def test_funcs_overloads_generic_and_early_return(device):
    x, y = np.array([0.3, 1.5, -0.7]), np.array([0.1, -0.4, 2.0])
    out, out32 = run(k_funcs, 3, [x, y], [np.zeros(3), np.zeros(3, np.float32)], device)
    np.testing.assert_allclose(out, x * x + np.sin(y) + 2 * np.minimum(x, 1.0))
    np.testing.assert_allclose(out32, (x * x - 1 + 4).astype(np.float32), rtol=1e-6)
    check_grad(k_funcs, 3, [x, y], [np.zeros(3), np.zeros(3, np.float32)], device)


def test_func_is_callable_in_python(device):
    assert twice(2.0) == 4.0


@tg.func
def smooth_abs(x: tg.float64):
    return tg.sqrt(x * x + 1e-12)


@tg.func_grad(smooth_abs)
def adj_smooth_abs(x: tg.float64, adj_ret: tg.float64):
    # a deliberately different "gradient" so the test can tell it was used
    tg.adjoint[x] += 3.0 * adj_ret


@tg.kernel
def k_custom(x: F64, out: F64):
    i = tg.tid()
    out[i] = smooth_abs(x[i]) * 2.0


def test_func_grad_replaces_the_adjoint(device):
    x = tg.array(np.array([1.0, -2.0]), dtype=tg.float64, device=device)
    out = tg.zeros(2, dtype=tg.float64, device=device)
    tg.launch(k_custom, dim=2, inputs=[x], outputs=[out], device=device)
    np.testing.assert_allclose(out.numpy(), [2.0, 4.0])
    gx = tg.zeros(2, dtype=tg.float64, device=device)
    g = tg.array(np.ones(2), dtype=tg.float64, device=device)
    tg.launch(k_custom, dim=2, inputs=[x], outputs=[out], adjoint=True, adj_inputs=[gx], adj_outputs=[g],
              device=device)
    np.testing.assert_allclose(gx.numpy(), [6.0, 6.0])


@tg.struct
class Particle:
    pos: tg.vec3d
    mass: tg.float64
    w: tg.array(dtype=tg.float64)


@tg.kernel
def k_struct(p: Particle, scale: tg.float64, out: F64):
    i = tg.tid()
    q = p.pos * scale
    out[i] = tg.dot(q, q) * p.mass + p.w[i] * p.pos.x


def test_struct_with_array_field(device):
    w = tg.array(np.array([1.0, 2.0, 3.0]), dtype=tg.float64, device=device, requires_grad=True)
    p = Particle(pos=np.array([1.0, 2.0, 3.0]), mass=2.0, w=w)
    out = tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(k_struct, dim=3, inputs=[p, 0.5], outputs=[out], device=device)
    np.testing.assert_allclose(out.numpy(), 0.25 * 14 * 2 + np.array([1.0, 2.0, 3.0]))
    # the struct's array field takes its gradient into the array's own .grad
    g = tg.array(np.ones(3), dtype=tg.float64, device=device)
    tg.launch(k_struct, dim=3, inputs=[p, 0.5], outputs=[out], adjoint=True, adj_outputs=[g], device=device)
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 1.0, 1.0])


@tg.kernel
def k_vecmat(m: tg.array(dtype=tg.mat33d), v: tg.array(dtype=tg.vec3d), out: tg.array(dtype=tg.vec3d),
             s: F64):
    i = tg.tid()
    a = m[i] * v[i]
    b = tg.cross(a, v[i]) + tg.vec3d(1.0, 2.0, 3.0) * 0.5
    b[1] = b.y * 2.0
    b.z += tg.determinant(m[i])
    out[i] = tg.normalize(b) * tg.length(a) - tg.transpose(m[i])[0]
    s[i] = tg.dot(out[i], v[i]) + m[i][1, 2] + tg.trace(tg.inverse(m[i]))


def test_vector_matrix_kernel(device):
    rng = np.random.default_rng(3)
    m = 2 * np.eye(3)[None] + 0.3 * rng.normal(size=(4, 3, 3))
    v = rng.normal(size=(4, 3))
    tm, tv = tg.array(m, dtype=tg.mat33d, device=device), tg.array(v, dtype=tg.vec3d, device=device)
    out, s = tg.zeros(4, dtype=tg.vec3d, device=device), tg.zeros(4, dtype=tg.float64, device=device)
    tg.launch(k_vecmat, dim=4, inputs=[tm, tv], outputs=[out, s], device=device)
    a = np.einsum("nij,nj->ni", m, v)
    b = np.cross(a, v) + 0.5 * np.array([1.0, 2.0, 3.0])
    b[:, 1] *= 2
    b[:, 2] += np.linalg.det(m)
    exp = b / np.linalg.norm(b, axis=1, keepdims=True) * np.linalg.norm(a, axis=1, keepdims=True) - m[:, :, 0]
    np.testing.assert_allclose(out.numpy(), exp, rtol=1e-10)
    np.testing.assert_allclose(s.numpy(), (exp * v).sum(1) + m[:, 1, 2] + np.trace(np.linalg.inv(m), axis1=1, axis2=2))


@tg.kernel
def k_tid2(a: tg.array2d[tg.float64], out: tg.array2d[tg.float64]):
    i, j = tg.tid()
    out[i, j] = a[i, j] * tg.float64(i * 10 + j) + tg.float64(a.shape[1])


@tg.kernel
def k_tid3(out: tg.array3d[tg.int32]):
    i, j, k = tg.tid()
    out[i, j, k] = i * 100 + j * 10 + k + len(out) * 1000


def test_multi_dimensional_launches(device):
    a = np.arange(12.0).reshape(3, 4)
    ta = tg.array(a, dtype=tg.float64, device=device)
    out = tg.zeros((3, 4), dtype=tg.float64, device=device)
    tg.launch(k_tid2, dim=(3, 4), inputs=[ta], outputs=[out], device=device)
    ii, jj = np.meshgrid(range(3), range(4), indexing="ij")
    np.testing.assert_allclose(out.numpy(), a * (ii * 10 + jj) + 4)
    o3 = tg.zeros((2, 3, 4), dtype=tg.int32, device=device)
    tg.launch(k_tid3, dim=(2, 3, 4), inputs=[], outputs=[o3], device=device)
    i, j, k = np.meshgrid(range(2), range(3), range(4), indexing="ij")
    np.testing.assert_array_equal(o3.numpy(), i * 100 + j * 10 + k + 2000)


@tg.kernel
def k_count(x: tg.array(dtype=tg.float32), isum: tg.array(dtype=tg.int32), fsum: tg.array(dtype=tg.float32),
            mn: tg.array(dtype=tg.float32), mx: tg.array(dtype=tg.int64)):
    i = tg.tid()
    tg.atomic_add(isum, 0, 1)
    tg.atomic_add(fsum, 0, x[i])
    tg.atomic_min(mn, 0, x[i])
    tg.atomic_max(mx, 0, tg.int64(i))
    tg.atomic_sub(isum, 1, 2)


def test_atomics_under_contention(device):
    n = 1_000_000
    x = tg.array(np.ones(n, np.float32), dtype=tg.float32, device=device)
    x.numpy()[123] = -5.0 if device == "cpu" else 1.0
    isum = tg.zeros(2, dtype=tg.int32, device=device)
    fsum = tg.zeros(1, dtype=tg.float32, device=device)
    mn = tg.array(np.array([np.inf], np.float32), dtype=tg.float32, device=device)
    mx = tg.zeros(1, dtype=tg.int64, device=device)
    tg.launch(k_count, dim=n, inputs=[x], outputs=[isum, fsum, mn, mx], device=device)
    assert isum.numpy().tolist() == [n, -2 * n]
    assert abs(float(fsum.numpy()[0]) - float(x.numpy().astype(np.float64).sum())) < 1e-3 * n
    assert float(mn.numpy()[0]) == float(x.numpy().min())
    assert int(mx.numpy()[0]) == n - 1


@tg.kernel
def k_half(x: tg.array(dtype=tg.float16), y: tg.array(dtype=tg.float16), total: tg.array(dtype=tg.float16)):
    i = tg.tid()
    v = x[i]
    y[i] = tg.sin(v) * 2.0 + v
    tg.atomic_add(total, 0, v)


def test_float16_kernels(device):
    xn = np.array([0.5, -1.0, 2.0, 0.25], np.float16)
    x = tg.array(xn, dtype=tg.float16, device=device)
    y, total = tg.zeros(4, dtype=tg.float16, device=device), tg.zeros(1, dtype=tg.float16, device=device)
    tg.launch(k_half, dim=4, inputs=[x], outputs=[y, total], device=device)
    xf = xn.astype(np.float32)
    np.testing.assert_allclose(y.numpy().astype(np.float32), np.sin(xf) * 2 + xf, rtol=2e-3, atol=2e-3)
    assert float(total.numpy()[0]) == float(xf.sum())
    gx = tg.zeros(4, dtype=tg.float16, device=device)
    gy = tg.array(np.ones(4, np.float16), dtype=tg.float16, device=device)
    gt = tg.zeros(1, dtype=tg.float16, device=device)
    tg.launch(k_half, dim=4, inputs=[x], outputs=[y, total], adjoint=True, adj_inputs=[gx],
              adj_outputs=[gy, gt], device=device)
    np.testing.assert_allclose(gx.numpy().astype(np.float32), 2 * np.cos(xf) + 1, rtol=3e-3, atol=3e-3)
