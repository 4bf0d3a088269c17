"""Constant slices of vectors, matrices, quaternions and transforms (``v[1:3]``, ``m[:2, 1:]``),
slice assignment (``v[1:3] = w``, ``m[0, :] += r``), in-place component assignment of array
elements and struct fields (``arr[i][j] = x``, ``s.m[1][2] = w``), ``tg.static`` and
assignment targets evaluated once; values against NumPy, gradients (reverse and forward mode,
float64) against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import autograd

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]
F64 = tg.float64
vec2d, vec3d, vec4d = tg.vec2d, tg.vec3d, tg.vec4d
mat23d = tg.types.matrix((2, 3), F64)


def _tape_gradients_agree(kernel, dim, inputs, outputs, device, fwd=True):
    """Gradients of sum(g * outputs) under a Tape (each output's own .grad) equal central finite
    differences (the kernels below store an element more than once: only the last store counts);
    with ``fwd`` the forward-mode Jacobians too."""
    rng = np.random.default_rng(0)
    start = [o.numpy().copy() for o in outputs]
    # only float outputs get a seed (not structs, not integers)
    seeds = [rng.normal(size=o.numpy().shape) if o.numpy().dtype.kind == "f" else None for o in outputs]
    fd = autograd.jacobian_fd(kernel, dim, inputs, outputs, device=device, eps=1e-6)
    for o, s0 in zip(outputs, start):
        o.assign(tg.array(s0, dtype=o.dtype, device=device))
    diff = [tg.array(x.numpy(), dtype=x.dtype, device=device, requires_grad=True) for x in inputs]
    outs = [tg.array(s0, dtype=o.dtype, device=device, requires_grad=True) for o, s0 in zip(outputs, start)]
    with tg.Tape() as tape:
        tg.launch(kernel, dim, inputs=diff, outputs=outs, device=device)
    tape.backward(grads={o: tg.array(g, dtype=o.dtype, device=device) for o, g in zip(outs, seeds) if g is not None})
    for i, x in enumerate(diff):
        want = sum(fd[(i, j)].T @ g.reshape(-1) for j, g in enumerate(seeds) if (i, j) in fd and g is not None)
        np.testing.assert_allclose(x.grad.numpy().reshape(-1), want, rtol=1e-6, atol=1e-8, err_msg=f"input {i}")
    if fwd:
        tan = autograd.jacobian_fwd(kernel, dim, inputs, outputs, device=device)
        for key in fd:
            np.testing.assert_allclose(tan[key], fd[key], rtol=1e-6, atol=1e-8, err_msg=f"tangent {key}")


def _jacobians_agree(kernel, dim, inputs, outputs, device, fwd=True):
    """Reverse-mode (and, with ``fwd``, forward-mode) Jacobians equal central finite differences."""
    fd = autograd.jacobian_fd(kernel, dim, inputs, outputs, device=device, eps=1e-6)
    rev = autograd.jacobian(kernel, dim, inputs, outputs, device=device)
    assert fd and set(fd) == set(rev)
    for key in fd:
        np.testing.assert_allclose(rev[key], fd[key], rtol=1e-6, atol=1e-8, err_msg=f"adjoint {key}")
    if fwd:
        tan = autograd.jacobian_fwd(kernel, dim, inputs, outputs, device=device)
        for key in fd:
            np.testing.assert_allclose(tan[key], fd[key], rtol=1e-6, atol=1e-8, err_msg=f"tangent {key}")


@tg.kernel
def read_slices(v: tg.array[vec4d], m: tg.array[tg.mat33d], q: tg.array[tg.quatd], t: tg.array[tg.transformd],
                o2: tg.array[vec2d], o4: tg.array[vec4d], o3: tg.array[vec3d], om: tg.array[tg.mat22d],
                oq: tg.array[vec3d], ot: tg.array[vec3d]):
    i = tg.tid()
    o2[i] = tg.cw_mul(v[i][1:3], v[i][-1:-3:-1])
    o4[i] = v[i][::-1]
    o3[i] = m[i][:, 1] + m[i][2, :]
    om[i] = m[i][1:, :2]
    oq[i] = q[i][1:]
    ot[i] = t[i][:3] + t[i][-3:]


@pytest.mark.parametrize("device", DEVICES)
def test_slices_read_values_like_numpy_and_differentiate(device):
    rng = np.random.default_rng(5)
    vn, mn, qn, tn = (rng.normal(size=s) for s in ((2, 4), (2, 3, 3), (2, 4), (2, 7)))
    ins = [tg.array(vn, dtype=vec4d, device=device), tg.array(mn, dtype=tg.mat33d, device=device),
           tg.array(qn, dtype=tg.quatd, device=device), tg.array(tn, dtype=tg.transformd, device=device)]
    outs = [tg.zeros(2, dtype=d, device=device) for d in (vec2d, vec4d, vec3d, tg.mat22d, vec3d, vec3d)]
    tg.launch(read_slices, dim=2, inputs=ins, outputs=outs, device=device)
    want = [vn[:, 1:3] * vn[:, -1:-3:-1], vn[:, ::-1], mn[:, :, 1] + mn[:, 2, :], mn[:, 1:, :2], qn[:, 1:],
            tn[:, :3] + tn[:, -3:]]
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o.numpy(), w, rtol=1e-12)
    _jacobians_agree(read_slices, 2, ins, outs, device)


@tg.kernel
def write_slices(x: tg.array[vec2d], y: tg.array[mat23d], t: tg.array[tg.transformd], z: tg.array[tg.mat44d],
                 v: tg.array[vec4d], tt: tg.array[tg.transformd]):
    i = tg.tid()
    a = v[i]
    a[:2] = x[i]
    a[1:-1] += x[i][:2] * x[i][1]
    a[3:1:-1] -= x[i]
    v[i] = a
    m = z[i]
    m[0, :2] = x[i]
    m[:2, 1:] = y[i]
    m[:2, 3] += x[i]
    m[1:-1, :2] += y[i][::-1, :-1]
    m[3:, -1:] -= y[i][:1, :1]
    z[i] = m
    u = t[i]
    u[:3] = u[:3] * x[i][0]
    u[3:] = tg.normalize(vec4d(u[3], u[4], u[5], u[6]))
    tt[i] = u


@pytest.mark.parametrize("device", DEVICES)
def test_slice_assignment_values_and_gradients(device):
    rng = np.random.default_rng(6)
    xn, yn, tn = rng.normal(size=(2, 2)), rng.normal(size=(2, 2, 3)), rng.normal(size=(2, 7))
    zn, vn = rng.normal(size=(2, 4, 4)), rng.normal(size=(2, 4))
    ins = [tg.array(xn, dtype=vec2d, device=device), tg.array(yn, dtype=mat23d, device=device),
           tg.array(tn, dtype=tg.transformd, device=device)]
    z = tg.array(zn, dtype=tg.mat44d, device=device)
    v = tg.array(vn, dtype=vec4d, device=device)
    tt = tg.zeros(2, dtype=tg.transformd, device=device)
    tg.launch(write_slices, dim=2, inputs=ins, outputs=[z, v, tt], device=device)
    a = vn.copy()
    a[:, :2] = xn
    a[:, 1:-1] += xn[:, :2] * xn[:, 1:2]
    a[:, 3:1:-1] -= xn
    m = zn.copy()
    m[:, 0, :2] = xn
    m[:, :2, 1:] = yn
    m[:, :2, 3] += xn
    m[:, 1:-1, :2] += yn[:, ::-1, :-1]
    m[:, 3:, -1:] -= yn[:, :1, :1]
    u = tn.copy()
    u[:, :3] *= xn[:, :1]
    u[:, 3:] /= np.linalg.norm(u[:, 3:], axis=1, keepdims=True)
    np.testing.assert_allclose(v.numpy(), a, rtol=1e-12)
    np.testing.assert_allclose(z.numpy(), m, rtol=1e-12)
    np.testing.assert_allclose(tt.numpy(), u, rtol=1e-12)
    z.assign(tg.array(zn, dtype=tg.mat44d, device=device))
    v.assign(tg.array(vn, dtype=vec4d, device=device))
    _jacobians_agree(write_slices, 2, ins, [z, v, tt], device)


def test_overwritten_slice_components_get_no_gradient():
    """``m[0, :2] = x`` then ``m[:2, 1:] = y`` overwrites m[0, 1]: x[1] no longer reaches the output."""
    @tg.kernel
    def overwrite(x: tg.array[vec2d], y: tg.array[mat23d], z: tg.array[tg.mat44d]):
        m = tg.mat44d()
        m[0, :2] = x[0]
        m[:2, 1:] = y[0]
        z[0] = m

    x = tg.ones(1, dtype=vec2d, requires_grad=True)
    y = tg.ones(1, dtype=mat23d, requires_grad=True)
    z = tg.zeros(1, dtype=tg.mat44d, requires_grad=True)
    with tg.Tape() as tape:
        tg.launch(overwrite, dim=1, inputs=[x, y], outputs=[z])
    tape.backward(grads={z: tg.ones_like(z)})
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 0.0]])
    np.testing.assert_array_equal(y.grad.numpy(), np.ones((1, 2, 3)))


@tg.kernel(module="unique")
def wrong_dtype():
    v = tg.vec4(1.0, 2.0, 3.0, 4.0)
    v[1:] = tg.vec3d(5.0, 6.0, 7.0)


@tg.kernel(module="unique")
def scalar_value():
    v = tg.vec4(1.0, 2.0, 3.0, 4.0)
    v[1:] = tg.float64(5.0)


@tg.kernel(module="unique")
def wrong_length():
    v = tg.vec4(1.0, 2.0, 3.0, 4.0)
    v[1:] = tg.vec2(5.0, 6.0)


@tg.kernel(module="unique")
def empty_slice():
    v = tg.vec4(1.0, 2.0, 3.0, 4.0)
    v[4:] = tg.vec2(5.0, 6.0)


@tg.kernel(module="unique")
def zero_step():
    v = tg.vec4(1.0, 2.0, 3.0, 4.0)
    v[::0] = v


@pytest.mark.parametrize("kernel,message", [
    (wrong_dtype, r"The provided vector is expected to be of length 3 with dtype float32\.$"),
    (scalar_value, r"The provided value is expected to be a vector of length 3, with dtype float32\.$"),
    (wrong_length, r"The length of the provided vector \(2\) isn't compatible with the given slice \(expected 3\)\.$"),
    (empty_slice, r"The length of the provided vector \(2\) isn't compatible with the given slice \(expected 0\)\.$"),
    (zero_step, r"Slice step cannot be zero"),
])
def test_slice_assignment_errors(kernel, message):
    with pytest.raises(tg.WarpCodegenValueError, match=message):
        tg.launch(kernel, dim=1)


def test_runtime_bounds_of_vector_slices_are_refused():
    @tg.kernel
    def dynamic_bound(out: tg.array[tg.vec2], n: int):
        v = tg.vec4(1.0, 2.0, 3.0, 4.0)
        out[0] = v[n:n + 2]

    with pytest.raises(tg.KernelError, match="need constant bounds"):
        tg.launch(dynamic_bound, dim=1, inputs=[tg.zeros(1, dtype=tg.vec2), 1])


@tg.struct
class Holder:
    m: tg.mat33d
    v: vec3d


@tg.kernel
def element_components(w: tg.array[F64], vs: tg.array[vec3d], ms: tg.array[tg.mat22d], out: tg.array[F64]):
    i = tg.tid()
    vs[i][0] = w[i] * w[i]
    vs[i].y += w[i]
    ms[i][0, 1] += 3.0 * w[i]
    ms[i][1][0] = ms[i][0][0] * w[i]
    s = Holder()
    s.m[1][2] = w[i]
    s.v.x += 2.0 * w[i] * w[i]
    out[i] = s.m[1, 2] + s.v.x + tg.trace(s.m)


@pytest.mark.parametrize("device", DEVICES)
def test_component_assignment_of_array_elements_and_struct_fields(device):
    rng = np.random.default_rng(7)
    vn, mn, wn = rng.normal(size=(3, 3)), rng.normal(size=(3, 2, 2)), rng.normal(size=3)
    vs = tg.array(vn, dtype=vec3d, device=device)
    ms = tg.array(mn, dtype=tg.mat22d, device=device)
    w = tg.array(wn, dtype=F64, device=device)
    out = tg.zeros(3, dtype=F64, device=device)
    tg.launch(element_components, dim=3, inputs=[w, vs, ms, out], device=device)
    v = vn.copy()
    v[:, 0] = wn * wn
    v[:, 1] += wn
    m = mn.copy()
    m[:, 0, 1] += 3.0 * wn
    m[:, 1, 0] = m[:, 0, 0] * wn
    np.testing.assert_allclose(vs.numpy(), v, rtol=1e-12)
    np.testing.assert_allclose(ms.numpy(), m, rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), wn + 2.0 * wn * wn, rtol=1e-12)
    vs.assign(tg.array(vn, dtype=vec3d, device=device))
    ms.assign(tg.array(mn, dtype=tg.mat22d, device=device))
    _tape_gradients_agree(element_components, 3, [w], [vs, ms, out], device)


@tg.kernel
def struct_element_fields(w: tg.array[F64], hs: tg.array[Holder], out: tg.array[F64]):
    i = tg.tid()
    hs[i].v.z = w[i] * 5.0
    hs[i].m[1][2] += w[i] * w[i]
    h = hs[i]
    out[i] = h.v.z * h.m[1, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_component_assignment_of_struct_array_elements(device):
    rng = np.random.default_rng(8)
    wn = rng.normal(size=3)
    w = tg.array(wn, dtype=F64, device=device)
    hs = tg.zeros(3, dtype=Holder, device=device)
    out = tg.zeros(3, dtype=F64, device=device)
    tg.launch(struct_element_fields, dim=3, inputs=[w, hs, out], device=device)
    np.testing.assert_allclose(hs.numpy()["v"][:, 2], 5.0 * wn, rtol=1e-12)
    np.testing.assert_allclose(hs.numpy()["m"][:, 1, 2], wn * wn, rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), 5.0 * wn ** 3, rtol=1e-12)
    hs.zero_()
    # forward mode has no arrays of structs yet: reverse mode only
    _tape_gradients_agree(struct_element_fields, 3, [w], [hs, out], device, fwd=False)


def test_static_is_evaluated_when_the_kernel_compiles():
    table = {"double": 2, "triple": 3}

    @tg.kernel
    def static_values(q: tg.quat, out: tg.array[tg.int32]):
        out[0] = tg.static(len(q))
        out[1] = tg.static(table["triple"]) * tg.static(1 + 1)

    out = tg.zeros(2, dtype=tg.int32)
    tg.launch(static_values, dim=1, inputs=[tg.quat(), out])
    assert out.numpy().tolist() == [4, 6]
    assert tg.static(5) == 5

    @tg.kernel
    def not_static(x: float, out: tg.array[float]):
        out[0] = tg.static(x * 2.0)

    with pytest.raises(tg.KernelError, match=r"static\(\): `x \* 2.0` is not known when the kernel compiles"):
        tg.launch(not_static, dim=1, inputs=[1.0, tg.zeros(1)])


@tg.func
def counted(counter: tg.array[tg.int32], i: int) -> int:
    tg.atomic_add(counter, 0, 1)
    return i


@tg.struct
class Cell:
    value: float


@tg.kernel
def targets_once(counter: tg.array[tg.int32], data: tg.array[Cell], vs: tg.array[tg.vec3], xs: tg.array[float]):
    i = tg.tid()
    data[counted(counter, i)].value += 5.0
    vs[counted(counter, i)][1] *= 2.0
    xs[counted(counter, i)] = 1.5
    vs[counted(counter, i)].z = 4.0


def test_assignment_targets_are_evaluated_once():
    counter = tg.zeros(1, dtype=tg.int32)
    data = tg.zeros(1, dtype=Cell)
    vs = tg.array([[1.0, 2.0, 3.0]], dtype=tg.vec3)
    xs = tg.zeros(1)
    tg.launch(targets_once, dim=1, inputs=[counter, data, vs, xs])
    assert counter.numpy()[0] == 4
    assert data.numpy()["value"][0] == 5.0
    np.testing.assert_array_equal(vs.numpy(), [[1.0, 4.0, 4.0]])
    assert xs.numpy()[0] == 1.5


@tg.kernel
def transform_parts(x: tg.array[vec3d], q: tg.array[tg.quatd], ts: tg.array[tg.transformd],
                    same: tg.array[tg.int32]):
    i = tg.tid()
    ts[i].p = x[i] * 2.0
    ts[i].q = tg.normalize(q[i])
    t = ts[i]
    if t[:3] == x[i] * 2.0 and t.q != tg.quatd(0.0, 0.0, 0.0, 0.0):
        same[i] = 1


@pytest.mark.parametrize("device", DEVICES)
def test_transform_parts_of_array_elements_and_composite_equality(device):
    rng = np.random.default_rng(9)
    xn, qn = rng.normal(size=(2, 3)), rng.normal(size=(2, 4))
    x = tg.array(xn, dtype=vec3d, device=device)
    q = tg.array(qn, dtype=tg.quatd, device=device)
    ts = tg.zeros(2, dtype=tg.transformd, device=device)
    same = tg.zeros(2, dtype=tg.int32, device=device)
    tg.launch(transform_parts, dim=2, inputs=[x, q, ts, same], device=device)
    want = np.concatenate([2.0 * xn, qn / np.linalg.norm(qn, axis=1, keepdims=True)], axis=1)
    np.testing.assert_allclose(ts.numpy(), want, rtol=1e-12)
    assert same.numpy().tolist() == [1, 1]
    ts.zero_()
    _tape_gradients_agree(transform_parts, 2, [x, q], [ts, same], device)


vec0 = tg.types.vector(0, float)
mat00 = tg.types.matrix((0, 0), float)
mat13 = tg.types.matrix((1, 3), float)


@tg.kernel
def empty_slices(out: tg.array[tg.int32]):
    v = tg.vec4(1.0, 2.0, 3.0, 4.0)
    m = tg.mat33(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
    if v[123:] == vec0() and v[:-123] == vec0() and m[5:] == mat00() and m[:, 3:] == mat00():
        out[0] = 1
    v[4:] = vec0()
    if v == tg.vec4(1.0, 2.0, 3.0, 4.0) and m[::5] == mat13(1.0, 2.0, 3.0):
        out[1] = 1


def test_empty_slices_are_zero_length_values():
    out = tg.zeros(2, dtype=tg.int32)
    tg.launch(empty_slices, dim=1, inputs=[out])
    assert out.numpy().tolist() == [1, 1]


def test_host_values_slice_like_kernels():
    """The same slices and ``%`` on host values give what kernels give (C's fmod, empty values equal)."""
    v = tg.vec4(-7.0, 21.0, 16.0, 51.0)
    v[:] %= tg.vec4(32.0, 33.0, 34.0, 35.0)
    assert v == tg.vec4(-7.0, 21.0, 16.0, 16.0)
    assert (tg.vec2(-5.0, 5.0) % 3.0) == tg.vec2(-2.0, 2.0)
    m = tg.mat33(*range(9))
    assert m[5:] == mat00() and m[:, 3:] == mat00() and v[123:] == vec0()
    assert not (m == tg.mat22())
