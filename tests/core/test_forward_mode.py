"""Forward mode and second order (issue 26): tangent launches, the tangent-of-adjoint launch,
Tape.jvp / Tape.hvp (in-place updates, copies, loops, atomics, @func, vectors, 16-bit floats),
forward-mode Jacobians and the errors for bad input. References: float64 central differences."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autograd import jacobian, jacobian_fd, jacobian_fwd

pytestmark = pytest.mark.filterwarnings("ignore::tapegrad.TapeCompileWarning")


@tg.func
def soft(x: tg.float64, y: tg.float64):
    return tg.log(tg.exp(x) + tg.exp(y)), x * y


@tg.kernel
def mixed(x: tg.array[tg.float64], v: tg.array[tg.vec3d], s: tg.float64, out: tg.array[tg.float64],
          vo: tg.array[tg.vec3d]):
    i = tg.tid()
    a, b = soft(x[i], s)
    acc = tg.float64(0.0)
    for k in range(3):                       # a static loop
        acc += tg.sin(v[i][k] * a)
    n = int(3.0 + x[i] * 0.0)
    j = int(0)
    while j < n:                             # a dynamic loop with a carried value
        acc = acc * 0.9 + b * tg.cos(acc)
        j += 1
    if x[i] > 0.0:
        acc = acc * x[i]
    else:
        acc = -acc
    q = tg.quat_from_axis_angle(tg.normalize(v[i]), x[i])
    r = tg.quat_rotate(q, tg.vec3d(1.0, 2.0, 3.0))
    m = tg.outer(v[i], r)
    out[i] = acc + tg.determinant(m + tg.mat33d(1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0))
    tg.atomic_add(vo, 0, r * x[i])


def _mixed_args(seed=0, n=6):
    rng = np.random.default_rng(seed)
    return rng.normal(size=n), rng.normal(size=(n, 3)), 0.7


def _mixed_run(x, v, s, n=6, device="cpu"):
    xa, va = tg.array(x, dtype=tg.float64, device=device), tg.array(v, dtype=tg.vec3d, device=device)
    out, vo = tg.zeros(n, dtype=tg.float64, device=device), tg.zeros(1, dtype=tg.vec3d, device=device)
    tg.launch(mixed, n, inputs=[xa, va, s], outputs=[out, vo])
    return out.numpy().copy(), vo.numpy().copy()


def test_tangent_launch_matches_finite_differences(device):
    x, v, s = _mixed_args()
    ux, uv, us = np.random.default_rng(1).normal(size=6), np.random.default_rng(2).normal(size=(6, 3)), 0.3
    xa, va = tg.array(x, dtype=tg.float64, device=device), tg.array(v, dtype=tg.vec3d, device=device)
    out, vo = tg.zeros(6, dtype=tg.float64, device=device), tg.zeros(1, dtype=tg.vec3d, device=device)
    tout, tvo = tg.zeros(6, dtype=tg.float64, device=device), tg.zeros(1, dtype=tg.vec3d, device=device)
    tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo], tangent=True, tan_outputs=[tout, tvo],
              tan_inputs=[tg.array(ux, dtype=tg.float64, device=device), tg.array(uv, dtype=tg.vec3d, device=device),
                          us])
    h = 1e-6
    p = _mixed_run(x + h * ux, v + h * uv, s + h * us, device=device)
    m = _mixed_run(x - h * ux, v - h * uv, s - h * us, device=device)
    np.testing.assert_allclose(tout.numpy(), (p[0] - m[0]) / (2 * h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tvo.numpy(), (p[1] - m[1]) / (2 * h), rtol=1e-6, atol=1e-7)
    # and the outputs themselves
    ref = _mixed_run(x, v, s, device=device)
    np.testing.assert_allclose(out.numpy(), ref[0], rtol=1e-13)


def test_second_order_launch_is_a_hessian_vector_product(device):
    x, v, s = _mixed_args(3)
    ux = np.random.default_rng(4).normal(size=6)
    w = np.random.default_rng(5).normal(size=6)

    def grad(xn):
        xa, va = tg.array(xn, dtype=tg.float64, device=device), tg.array(v, dtype=tg.vec3d, device=device)
        out, vo = tg.zeros(6, dtype=tg.float64, device=device), tg.zeros(1, dtype=tg.vec3d, device=device)
        gx = tg.zeros(6, dtype=tg.float64, device=device)
        tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo])
        tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo], adjoint=True, adj_inputs=[gx, None, 0.0],
                  adj_outputs=[tg.array(w, dtype=tg.float64, device=device),
                               tg.zeros(1, dtype=tg.vec3d, device=device)])
        return gx.numpy().copy()

    xa, va = tg.array(x, dtype=tg.float64, device=device), tg.array(v, dtype=tg.vec3d, device=device)
    out, vo = tg.zeros(6, dtype=tg.float64, device=device), tg.zeros(1, dtype=tg.vec3d, device=device)
    tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo])
    gx, hx = tg.zeros(6, dtype=tg.float64, device=device), tg.zeros(6, dtype=tg.float64, device=device)
    tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo], adjoint=True,
              adj_inputs=[gx, None, 0.0],
              adj_outputs=[tg.array(w, dtype=tg.float64, device=device), tg.zeros(1, dtype=tg.vec3d, device=device)],
              tangent=True, tan_inputs=[tg.array(ux, dtype=tg.float64, device=device), None, None],
              tan_adj_inputs=[hx, None, None])
    h = 1e-6
    np.testing.assert_allclose(gx.numpy(), grad(x), rtol=1e-12)
    np.testing.assert_allclose(hx.numpy(), (grad(x + h * ux) - grad(x - h * ux)) / (2 * h), rtol=1e-5, atol=1e-6)


@tg.kernel
def poly16(x: tg.array[tg.float16], y: tg.array[tg.bfloat16], o: tg.array[tg.float32]):
    i = tg.tid()
    a = x[i] * x[i] + tg.sin(x[i])
    b = y[i] * y[i] * y[i]
    o[i] = tg.float32(a) + tg.float32(b)


def test_16_bit_floats_have_tangents(device):
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    y = np.array([1.5, 0.25, -0.75], dtype=np.float32)
    o, to = tg.zeros(3, dtype=tg.float32, device=device), tg.zeros(3, dtype=tg.float32, device=device)
    tg.launch(poly16, 3, outputs=[o],
              inputs=[tg.array(x, dtype=tg.float16, device=device), tg.array(y, dtype=tg.bfloat16, device=device)],
              tangent=True, tan_outputs=[to],
              tan_inputs=[tg.array(np.ones(3), dtype=tg.float16, device=device),
                          tg.array(np.ones(3), dtype=tg.bfloat16, device=device)])
    exp = 2 * x + np.cos(x) + 3 * y * y
    np.testing.assert_allclose(to.numpy(), exp, rtol=2e-2)


@tg.kernel
def step(x: tg.array[tg.float64], v: tg.array[tg.float64], dt: tg.float64):
    i = tg.tid()
    v[i] = v[i] - dt * tg.sin(x[i]) * x[i]
    x[i] = x[i] + dt * v[i]


@tg.kernel
def energy(x: tg.array[tg.float64], e: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_add(e, 0, tg.cos(x[i]) * x[i] * x[i])


def _record(x0, n=7, steps=5, device="cpu"):
    x = tg.array(x0, dtype=tg.float64, requires_grad=True, device=device)
    v = tg.zeros(n, dtype=tg.float64, requires_grad=True, device=device)
    e = tg.zeros(1, dtype=tg.float64, requires_grad=True, device=device)
    xs = tg.clone(x)
    tape = tg.Tape()
    with tape:
        tg.copy(x, xs)
        for _ in range(steps):
            tg.launch(step, n, inputs=[x, v, 0.1])
        tg.launch(energy, n, inputs=[x], outputs=[e])
    return tape, xs, x, v, e


def test_tape_jvp_and_hvp_in_place(device):
    rng = np.random.default_rng(0)
    x0, u = rng.normal(size=7), rng.normal(size=7)
    tape, xs, x, v, e = _record(x0, device=device)
    before = [a.numpy().copy() for a in (xs, x, v, e)]
    t = tape.jvp({xs: tg.array(u, dtype=tg.float64, device=device)})
    assert set(map(id, t)) >= {id(x), id(v), id(e)}
    for a, b in zip((xs, x, v, e), before):          # values unchanged, bit for bit
        assert np.array_equal(a.numpy(), b)
    h = 1e-6
    fp, fm = _record(x0 + h * u, device=device), _record(x0 - h * u, device=device)
    for k, arr in ((2, x), (3, v), (4, e)):
        np.testing.assert_allclose(t[arr].numpy(), (fp[k].numpy() - fm[k].numpy()) / (2 * h), rtol=1e-6, atol=1e-8)
    tape.backward(loss=e)
    g = xs.grad.numpy().copy()
    hv = tape.hvp(e, {xs: u})[xs].numpy()
    assert np.array_equal(xs.grad.numpy(), g)          # gradients unchanged

    def grad(x):
        tp, xs2, *_ , e2 = _record(x, device=device)
        tp.backward(loss=e2)
        return xs2.grad.numpy().copy()
    np.testing.assert_allclose(hv, (grad(x0 + h * u) - grad(x0 - h * u)) / (2 * h), rtol=1e-5, atol=1e-7)
    tape.zero()
    tape.backward(loss=e)
    assert np.array_equal(xs.grad.numpy(), g)


def test_tape_errors():
    tape, xs, x, v, e = _record(np.ones(7))
    with pytest.raises(TypeError, match="float32"):
        tape.jvp({xs: tg.zeros(7, dtype=tg.float32)})
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        tape.jvp({xs: tg.zeros(6, dtype=tg.float64)})
    with pytest.raises(ValueError, match="scalar loss"):
        tape.hvp(x, {xs: np.ones(7)})
    tape2 = tg.Tape()
    with tape2:
        tg.launch(energy, 7, inputs=[x], outputs=[e])
        tape2.record_func(lambda: None, [e])
    with pytest.raises(RuntimeError, match=r"record #1 \(FuncRecord\) has no forward-mode rule"):
        tape2.jvp({x: np.ones(7)})
    with pytest.raises(RuntimeError, match="no second-order rule"):
        tape2.hvp(e, {x: np.ones(7)})


def test_launch_tangent_errors():
    x, v, s = _mixed_args()
    xa, va = tg.array(x, dtype=tg.float64), tg.array(v, dtype=tg.vec3d)
    out, vo = tg.zeros(6, dtype=tg.float64), tg.zeros(1, dtype=tg.vec3d)
    with pytest.raises(TypeError, match=r"tan_inputs\[0\] \(for argument 0, 'x'\)"):
        tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo], tangent=True,
                  tan_inputs=[tg.zeros(6, dtype=tg.float32), None, None])
    with pytest.raises(ValueError, match=r"tan_outputs\[0\] .*shape \(5,\)"):
        tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo], tangent=True,
                  tan_outputs=[tg.zeros(5, dtype=tg.float64), None])
    with pytest.raises(TypeError, match="tan_inputs/tan_outputs must have 3/2 entries"):
        tg.launch(mixed, 6, inputs=[xa, va, s], outputs=[out, vo], tangent=True, tan_inputs=[None])


@tg.kernel
def amin(x: tg.array[tg.float64], m: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_min(m, 0, x[i])


def test_builtin_without_forward_rule_is_an_error():
    x, m = tg.array(np.ones(3), dtype=tg.float64), tg.zeros(1, dtype=tg.float64)
    with pytest.raises(tg.KernelError, match=r"test_forward_mode.py:\d+: .*atomic_min\(\) on a float array has no "
                                             r"forward-mode"):
        tg.launch(amin, 3, inputs=[x, m], tangent=True)


def test_forward_jacobian():
    x, v, s = _mixed_args(7, n=4)
    args = [tg.array(x, dtype=tg.float64), tg.array(v, dtype=tg.vec3d), s]
    outs = [tg.zeros(4, dtype=tg.float64), tg.zeros(1, dtype=tg.vec3d)]
    jf = jacobian_fwd(mixed, 4, args, outs)
    ja = jacobian(mixed, 4, args, outs)
    jd = jacobian_fd(mixed, 4, args, outs, eps=1e-6)
    for key in ja:
        np.testing.assert_allclose(jf[key], ja[key], rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(jf[key], jd[key], rtol=1e-5, atol=1e-6)


def test_default_build_is_unchanged_by_forward_mode():
    src = step.source()
    assert "tg::dual" not in src and "darray_t" not in src
    x, v = tg.array(np.ones(3), dtype=tg.float64), tg.zeros(3, dtype=tg.float64)
    tg.launch(step, 3, inputs=[x, v, 0.1], tangent=True)
    assert step.source() == src


@tg.kernel
def square_into(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = y[i] + x[i] * x[i] * x[i]


def test_tape_fill_has_zero_tangent():
    x = tg.array(np.array([1.0, 2.0, 3.0]), dtype=tg.float64, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, requires_grad=True)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square_into, 3, inputs=[x], outputs=[y])
        y.fill_(0.5)                               # a recorded host write: the cubes are gone
        tg.launch(square_into, 3, inputs=[x], outputs=[y])
        tg.launch(energy, 3, inputs=[y], outputs=[loss])
    t = tape.jvp({x: np.ones(3)})
    np.testing.assert_allclose(t[y].numpy(), 3 * x.numpy() ** 2)
    yv = 0.5 + x.numpy() ** 3
    # loss = sum(cos(y) y^2): d loss/dx = (2 y cos y - y^2 sin y) 3 x^2
    d1 = 2 * yv * np.cos(yv) - yv ** 2 * np.sin(yv)
    d2 = 2 * np.cos(yv) - 4 * yv * np.sin(yv) - yv ** 2 * np.cos(yv)
    xv = x.numpy()
    hv = tape.hvp(loss, {x: np.ones(3)})[x].numpy()
    np.testing.assert_allclose(hv, d2 * (3 * xv ** 2) ** 2 + d1 * 6 * xv, rtol=1e-10)


@tg.struct
class Body:
    x: tg.array(dtype=tg.float64)
    k: tg.float64


@tg.kernel
def spring(b: Body, e: tg.array[tg.float64]):
    i = tg.tid()
    xi = b.x[i]
    b.x[i] = xi - 0.1 * b.k * tg.sin(xi)
    tg.atomic_add(e, 0, xi * xi * b.k)


def test_struct_arguments_have_tangents(device):
    x0 = np.array([0.3, -0.7, 1.1])
    u = np.array([1.0, 2.0, -1.0])

    def run(x, k):
        b = Body()
        b.x = tg.array(x, dtype=tg.float64, device=device)
        b.k = k
        e = tg.zeros(1, dtype=tg.float64, device=device)
        tg.launch(spring, 3, inputs=[b], outputs=[e], device=device)
        return e.numpy()[0], b.x.numpy()

    b = Body()
    b.x = tg.array(x0, dtype=tg.float64, device=device)
    b.k = 2.0
    tb = Body()
    tb.x = tg.array(u, dtype=tg.float64, device=device)
    tb.k = 0.5
    e, te = tg.zeros(1, dtype=tg.float64, device=device), tg.zeros(1, dtype=tg.float64, device=device)
    tg.launch(spring, 3, inputs=[b], outputs=[e], device=device, tangent=True, tan_inputs=[tb], tan_outputs=[te])
    h = 1e-6
    (ep, xp), (em, xm) = run(x0 + h * u, 2.0 + 0.5 * h), run(x0 - h * u, 2.0 - 0.5 * h)
    np.testing.assert_allclose(te.numpy()[0], (ep - em) / (2 * h), rtol=1e-7)
    np.testing.assert_allclose(tb.x.numpy(), (xp - xm) / (2 * h), rtol=1e-7)
    # on a tape: the struct's array gets its tangent buffer (its float field is a constant)
    b2 = Body()
    b2.x = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
    b2.k = 2.0
    x_in = tg.clone(b2.x)
    e2 = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.copy(b2.x, x_in)
        tg.launch(spring, 3, inputs=[b2], outputs=[e2], device=device)
    t = tape.jvp({x_in: u})
    (ep, _), (em, _) = run(x0 + h * u, 2.0), run(x0 - h * u, 2.0)
    np.testing.assert_allclose(t[e2].numpy()[0], (ep - em) / (2 * h), rtol=1e-7)


@tg.kernel
def cube(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i] * x[i] * x[i]


def test_tape_jvp_through_views():
    x = tg.array(np.array([1.0, 2.0, 3.0, 4.0]), dtype=tg.float64, requires_grad=True)
    y = tg.zeros(4, dtype=tg.float64, requires_grad=True)
    x_in = tg.clone(x)
    y_lo, y_hi = y[:2], y[2:]
    tape = tg.Tape()
    with tape:
        tg.copy(x, x_in)                                       # the tangent is given for x_in
        tg.launch(cube, 2, inputs=[x[2:]], outputs=[y_lo])     # views of x and y
        tg.launch(cube, 2, inputs=[x[:2]], outputs=[y_hi])
    t = tape.jvp({x_in: np.array([1.0, 2.0, 3.0, 4.0])})
    xv = x.numpy()
    np.testing.assert_allclose(t[y_lo].numpy(), 3 * xv[2:] ** 2 * np.array([3.0, 4.0]))
    np.testing.assert_allclose(t[y_hi].numpy(), 3 * xv[:2] ** 2 * np.array([1.0, 2.0]))


def test_tape_hvp_through_views():
    x0 = np.array([0.5, 1.0, 1.5, 2.0])
    u = np.array([1.0, -1.0, 0.5, 2.0])

    def record(xn):
        x = tg.array(xn, dtype=tg.float64, requires_grad=True)
        y = tg.zeros(4, dtype=tg.float64, requires_grad=True)
        e = tg.zeros(1, dtype=tg.float64, requires_grad=True)
        tape = tg.Tape()
        with tape:
            tg.launch(cube, 2, inputs=[x[2:]], outputs=[y[:2]])
            tg.launch(cube, 2, inputs=[x[:2]], outputs=[y[2:]])
            tg.launch(energy, 4, inputs=[y], outputs=[e])
        return tape, x, e

    def grad(xn):
        tape, x, e = record(xn)
        tape.backward(loss=e)
        return x.grad.numpy().copy()

    tape, x, e = record(x0)
    hv = tape.hvp(e, {x: u})[x].numpy()
    h = 1e-6
    np.testing.assert_allclose(hv, (grad(x0 + h * u) - grad(x0 - h * u)) / (2 * h), rtol=1e-5, atol=1e-6)


@tg.kernel
def guarded_square(x: tg.array[tg.float64], y: tg.array[tg.float64], n: int):
    i = tg.tid()
    for _k in range(n):
        if i < len(x):
            x[i] = x[i] * x[i]
    if i < len(x):
        y[i] = tg.sin(x[i])


def test_in_place_element_kept_in_a_local(device):
    # the in-place pass keeps x[i] in a local, loaded (bounds-checked) before the loop
    from tapegrad.lang.ir import walk
    assert "load_cell" in [s.op.name for s in walk(guarded_square.ir.body) if hasattr(s, "op")]
    x0, u = np.array([0.5, -1.0, 0.8]), np.array([1.0, 2.0, 3.0])
    x, y = tg.array(x0, dtype=tg.float64, device=device), tg.zeros(3, dtype=tg.float64, device=device)
    tx, ty = tg.array(u, dtype=tg.float64, device=device), tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(guarded_square, 5, inputs=[x, y, 2], tangent=True, tan_inputs=[tx, ty, None])
    s4 = x0 ** 4
    np.testing.assert_allclose(x.numpy(), s4)
    np.testing.assert_allclose(tx.numpy(), 4 * x0 ** 3 * u)
    np.testing.assert_allclose(ty.numpy(), np.cos(s4) * 4 * x0 ** 3 * u)
    # second order: d/du of the gradient of sum(w * y) with respect to the original x
    w = np.array([1.0, -2.0, 0.5])
    x, y = tg.array(x0, dtype=tg.float64, device=device), tg.zeros(3, dtype=tg.float64, device=device)
    gx, hx = tg.zeros(3, dtype=tg.float64, device=device), tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(guarded_square, 5, inputs=[x, y, 2], adjoint=True,
              adj_inputs=[gx, tg.array(w, dtype=tg.float64, device=device), 0], tangent=True,
              tan_inputs=[tg.array(u, dtype=tg.float64, device=device), None, None], tan_adj_inputs=[hx, None, None])
    d1 = 4 * x0 ** 3
    d2 = (-np.sin(s4) * d1 ** 2 + np.cos(s4) * 12 * x0 ** 2) * w
    np.testing.assert_allclose(gx.numpy(), np.cos(s4) * d1 * w, rtol=1e-12)
    np.testing.assert_allclose(hx.numpy(), d2 * u, rtol=1e-12)


@tg.func
def fsq(x: tg.float64, y: tg.float64):
    return tg.sin(x) * y


@tg.func_grad(fsq)
def adj_fsq(x: tg.float64, y: tg.float64, adj_ret: tg.float64):
    tg.adjoint[x] += tg.cos(x) * y * adj_ret
    tg.adjoint[y] += tg.sin(x) * adj_ret


@tg.kernel
def uses_custom(x: tg.array[tg.float64], y: tg.array[tg.float64], o: tg.array[tg.float64]):
    i = tg.tid()
    o[i] = fsq(x[i], y[i]) * x[i]


def test_custom_adjoint_in_forward_and_second_order(device):
    x0, y0, u = np.array([0.3, 1.2]), np.array([2.0, -1.0]), np.array([1.0, 0.5])
    x, y = tg.array(x0, dtype=tg.float64, device=device), tg.array(y0, dtype=tg.float64, device=device)
    o, to = tg.zeros(2, dtype=tg.float64, device=device), tg.zeros(2, dtype=tg.float64, device=device)
    tg.launch(uses_custom, 2, inputs=[x, y], outputs=[o], tangent=True,
              tan_inputs=[tg.array(u, dtype=tg.float64, device=device), None], tan_outputs=[to])
    # o = sin(x) y x: do/dx = (cos(x) x + sin(x)) y
    np.testing.assert_allclose(to.numpy(), (np.cos(x0) * x0 + np.sin(x0)) * y0 * u, rtol=1e-12)
    gx, hx = tg.zeros(2, dtype=tg.float64, device=device), tg.zeros(2, dtype=tg.float64, device=device)
    tg.launch(uses_custom, 2, inputs=[x, y], outputs=[o], adjoint=True, adj_inputs=[gx, None],
              adj_outputs=[tg.ones(2, dtype=tg.float64, device=device)], tangent=True,
              tan_inputs=[tg.array(u, dtype=tg.float64, device=device), None], tan_adj_inputs=[hx, None])
    # d2o/dx2 = (2 cos(x) - sin(x) x) y, through the custom adjoint's own derivative
    np.testing.assert_allclose(hx.numpy(), (2 * np.cos(x0) - np.sin(x0) * x0) * y0 * u, rtol=1e-12)


def test_tape_hvp_with_arrays_in_structs(device):
    x0 = np.array([0.3, -0.7, 1.1])
    u = np.array([1.0, 2.0, -1.0])

    def record(xn):
        b = Body()
        b.x = tg.array(xn, dtype=tg.float64, device=device, requires_grad=True)
        b.k = 2.0
        x_in = tg.clone(b.x)
        e = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
        tape = tg.Tape()
        with tape:
            tg.copy(b.x, x_in)
            tg.launch(spring, 3, inputs=[b], outputs=[e], device=device)
        return tape, x_in, e

    def grad(xn):
        tape, x_in, e = record(xn)
        tape.backward(loss=e)
        return x_in.grad.numpy().copy()

    tape, x_in, e = record(x0)
    tape.backward(loss=e)
    g = x_in.grad.numpy().copy()
    hv = tape.hvp(e, {x_in: u})[x_in].numpy()
    assert np.array_equal(x_in.grad.numpy(), g)
    h = 1e-6
    np.testing.assert_allclose(hv, (grad(x0 + h * u) - grad(x0 - h * u)) / (2 * h), rtol=1e-6, atol=1e-8)


@tg.func_native("return 3.0f * x;")
def _fm_native_triple(x: float) -> float: ...


@tg.kernel(module="unique")
def _fm_calls_native(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = _fm_native_triple(1.0) * x[i]


def test_func_native_has_no_tangent_rule():
    # its C++ body has no dual twin: forward mode refuses it (it returned garbage: y came out 0)
    x = tg.array(np.array([1.0, 2.0], dtype=np.float32))
    y, ty = tg.zeros(2, dtype=float), tg.zeros(2, dtype=float)
    with pytest.raises(tg.KernelError, match="no rule for the @func_native '_fm_native_triple'"):
        tg.launch(_fm_calls_native, dim=2, inputs=[x, y], tangent=True,
                  tan_inputs=[tg.array(np.ones(2, dtype=np.float32)), ty])
    tg.launch(_fm_calls_native, dim=2, inputs=[x, y])   # the primal launch runs it
    np.testing.assert_allclose(y.numpy(), [3.0, 6.0])


@tg.kernel
def _through_a_zero_vector(x: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    v = tg.vec3d(x[i], 1.0, x[i] * x[i])
    m = tg.mat33d()                                   # zero: m * v is zero whatever x is
    z = m * v
    out[i] = x[i] * x[i] + tg.length(z) + tg.length(tg.normalize(z)) + tg.sqrt(x[i] * 0.0) \
        + tg.atan2(x[i] * 0.0, x[i] * 0.0) + tg.pow(x[i] * 0.0, 0.5)


def test_a_zero_tangent_through_singular_derivatives(device):
    """Functions whose derivative is infinite where a value that does not depend on the inputs
    sits (sqrt and length at 0, atan2 at the origin, pow at 0) pass a zero tangent: forward mode
    gave NaN (0 * inf; for length and normalize, whose adjoints guard 0, reverse mode gives 0).
    d/dx = 2x."""
    x0 = np.array([0.3, -0.7])
    x = tg.array(x0, dtype=tg.float64, requires_grad=True, device=device)
    out = tg.zeros(2, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(_through_a_zero_vector, dim=2, inputs=[x, out], device=device)
    tan = tape.jvp({x: np.ones(2)})[out].numpy()
    np.testing.assert_allclose(tan, 2 * x0, rtol=1e-12)
