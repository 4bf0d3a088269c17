"""Tuple returns from @tg.func and structs built inside kernels (issue 16, items 3 and 4):
forward values and adjoints against float64 finite differences."""

import numpy as np
import pytest

import tapegrad as tg

from ._lang_util import check_grad, run

F64 = tg.array(dtype=tg.float64)


@tg.func
def polar(x: tg.float64, y: tg.float64) -> tuple[tg.float64, tg.float64]:
    return tg.sqrt(x * x + y * y), tg.atan2(y, x)


@tg.func
def divmod_pos(a: int, b: int) -> tuple[bool, int]:
    return a > b, a % b


@tg.func
def swap_scaled(x, y):          # unannotated, generic: the tuple type is inferred
    if x > y:
        return y * 2.0, x
    return x, y * 3.0


@tg.kernel
def k_tuple(x: F64, y: F64, r: F64, t: F64, s: F64, flags: tg.array(dtype=int)):
    i = tg.tid()
    a, b = polar(x[i], y[i])
    r[i] = a
    t[i] = b
    p, q = swap_scaled(x[i], y[i])
    res = swap_scaled(a, b)
    s[i] = p * q + res[0] - res[1]
    big, rem = divmod_pos(i + 3, 2)
    if big:
        flags[i] = rem


def _tuple_inputs(n=5):
    rng = np.random.default_rng(1)
    return [rng.uniform(0.5, 2, n), rng.uniform(-1, 1, n)], [np.zeros(n)] * 3 + [np.zeros(n, np.int32)]


def _sw(x, y):
    return (y * 2.0, x) if x > y else (x, y * 3.0)


def test_tuple_return_forward(device):
    (x, y), outs = _tuple_inputs()
    r, t, s, flags = run(k_tuple, 5, [x, y], outs, device=device)
    np.testing.assert_allclose(r, np.hypot(x, y))
    np.testing.assert_allclose(t, np.arctan2(y, x))
    exp = []
    for xi, yi, ri, ti in zip(x, y, r, t):
        p, q = _sw(xi, yi)
        a, b = _sw(ri, ti)
        exp.append(p * q + a - b)
    np.testing.assert_allclose(s, exp)
    np.testing.assert_array_equal(flags, [(i + 3) % 2 for i in range(5)])


def test_tuple_return_adjoint():
    (x, y), outs = _tuple_inputs()
    check_grad(k_tuple, 5, [x, y], outs)


@tg.struct
class Particle:
    x: tg.vec3d
    m: tg.float64
    alive: int


@tg.struct
class Body:
    p: Particle
    w: tg.float64


@tg.func
def make_body(x: tg.vec3d, m: tg.float64) -> Body:
    b = Body()
    b.p = Particle(x=x, m=m, alive=1)
    b.w = m * 2.0
    return b


@tg.func
def energy(b: Body):
    return 0.5 * b.p.m * tg.dot(b.p.x, b.p.x) + b.w


@tg.kernel
def k_struct(pos: tg.array(dtype=tg.vec3d), mass: F64, out: F64, bodies: tg.array(dtype=Body)):
    i = tg.tid()
    b = make_body(pos[i], mass[i])
    b.p.x[1] = b.p.x[1] * 3.0
    b.p.m += 1.0
    q = Particle(pos[i], mass[i])      # positional, the rest zero
    q.x = q.x * q.m
    out[i] = energy(b) + q.x[0] + tg.float64(q.alive)
    bodies[i] = b
    bodies[i].w = out[i]


def _struct_expected(pos, mass):
    x = pos.copy()
    x[:, 1] *= 3
    m = mass + 1
    e = 0.5 * m * (x * x).sum(1) + 2 * mass
    return e + pos[:, 0] * mass


def test_struct_in_kernel_forward(device):
    rng = np.random.default_rng(2)
    n = 4
    pos, mass = rng.normal(size=(n, 3)), rng.uniform(1, 2, n)
    bodies = tg.zeros(n, dtype=Body, device=device)
    out = tg.zeros(n, dtype=tg.float64, device=device)
    tg.launch(k_struct, dim=n, inputs=[tg.array(pos, dtype=tg.vec3d, device=device),
                                       tg.array(mass, dtype=tg.float64, device=device), out, bodies], device=device)
    exp = _struct_expected(pos, mass)
    np.testing.assert_allclose(out.numpy(), exp)
    b = bodies.numpy()
    np.testing.assert_allclose(b["w"], exp)
    np.testing.assert_allclose(b["p"]["m"], mass + 1)
    np.testing.assert_array_equal(b["p"]["alive"], 1)
    np.testing.assert_allclose(b["p"]["x"][:, 1], pos[:, 1] * 3)


@tg.kernel
def k_struct_grad(px: F64, mass: F64, out: F64):
    i = tg.tid()
    b = make_body(tg.vec3d(px[i], px[i] * px[i], 1.0), mass[i])
    b.p.x[1] = b.p.x[1] * 3.0
    b.p.m += 1.0
    q = Particle(tg.vec3d(px[i]), mass[i])
    q.x = q.x * q.m
    out[i] = energy(b) + q.x[0]


def test_struct_in_kernel_adjoint():
    rng = np.random.default_rng(3)
    check_grad(k_struct_grad, 4, [rng.normal(size=4), rng.uniform(1, 2, 4)], [np.zeros(4)])


@tg.struct
class Spring:
    rest: tg.float64
    k: tg.float64


@tg.kernel
def k_struct_array_rw(springs: tg.array(dtype=Spring), x: F64, out: F64, upd: tg.array(dtype=Spring)):
    i = tg.tid()
    s = springs[i]
    d = x[i] - s.rest
    out[i] = 0.5 * s.k * d * d
    t = s
    t.k = s.k * x[i]
    upd[i] = t


def test_array_of_structs_read_write_adjoint():
    n = 3
    sp = np.zeros(n, dtype=tg.types.type_of(Spring).np_dtype)
    sp["rest"] = [0.5, 1.0, 1.5]
    sp["k"] = [2.0, 3.0, 4.0]
    springs = tg.zeros(n, dtype=Spring, requires_grad=True)
    springs.numpy()[...] = sp
    x = tg.array(np.array([0.1, 1.2, 2.0]), dtype=tg.float64, requires_grad=True)
    out = tg.zeros(n, dtype=tg.float64, requires_grad=True)
    upd = tg.zeros(n, dtype=Spring, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_struct_array_rw, dim=n, inputs=[springs, x, out, upd])
    np.testing.assert_allclose(upd.numpy()["k"], sp["k"] * x.numpy())
    gu = np.zeros(n, dtype=sp.dtype)
    gu["k"] = [1.0, -1.0, 0.5]
    gup = tg.zeros(n, dtype=Spring)
    gup.numpy()[...] = gu
    tape.backward(grads={out: tg.array(np.ones(n), dtype=tg.float64), upd: gup})
    xv = x.numpy()
    d = xv - sp["rest"]
    np.testing.assert_allclose(x.grad.numpy(), sp["k"] * d + gu["k"] * sp["k"])
    g = springs.grad.numpy()
    np.testing.assert_allclose(g["rest"], -sp["k"] * d)
    np.testing.assert_allclose(g["k"], 0.5 * d * d + gu["k"] * xv)


def test_struct_errors():
    @tg.kernel
    def bad_field(out: F64):
        s = Spring(stiff=1.0)
        out[0] = s.k

    with pytest.raises(tg.KernelError, match="no field 'stiff'"):
        tg.launch(bad_field, dim=1, inputs=[tg.zeros(1, dtype=tg.float64)])

    @tg.kernel
    def bad_type(out: F64):
        s = Spring()
        s.k = tg.vec3d(1.0)
        out[0] = s.k

    with pytest.raises(tg.KernelError, match="field 'k' of struct Spring is a float64, got vec3d"):
        tg.launch(bad_type, dim=1, inputs=[tg.zeros(1, dtype=tg.float64)])
