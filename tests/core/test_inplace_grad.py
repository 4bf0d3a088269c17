"""Exact gradients for in-place kernels on a Tape (issue 14 fault 5, SPEC B12).

Every gradient is checked against float64 central finite differences of the whole recorded
computation, re-run from scratch for each perturbed input. Before the fix the tape's adjoints
read the already-overwritten values (``x[i] = x[i] * x[i]`` gave ``2 x_new`` instead of
``2 x``), and tapegrad only warned.
"""
import warnings

import numpy as np
import pytest

import tapegrad as tg

F64 = tg.float64


@pytest.fixture(autouse=True)
def _default_cpu():
    with tg.ScopedDevice("cpu"):
        yield


# ----------------------------------------------------------------------------------- kernels

@tg.kernel
def square_inplace(x: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] * x[i]


@tg.kernel
def double_inplace(x: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] * 2.0


@tg.kernel
def sin_sum(x: tg.array(dtype=F64), s: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(s, 0, tg.sin(x[i]))


@tg.kernel
def plain_sum(x: tg.array(dtype=F64), s: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(s, 0, x[i])


@tg.kernel
def mul(x: tg.array(dtype=F64), w: tg.array(dtype=F64), y: tg.array(dtype=F64)):
    i = tg.tid()
    y[i] = x[i] * w[i]


@tg.kernel
def set_zero(w: tg.array(dtype=F64)):
    i = tg.tid()
    w[i] = 0.0


@tg.kernel
def triple_of(y: tg.array(dtype=F64), x: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = 3.0 * y[i]


@tg.kernel
def euler_step(x: tg.array(dtype=F64), v: tg.array(dtype=F64), dt: F64):
    i = tg.tid()
    xi = x[i]
    vi = v[i]
    xn = xi + dt * vi * xi
    x[i] = xn
    v[i] = vi - dt * xn * xn


@tg.kernel
def drift(x: tg.array(dtype=F64), v: tg.array(dtype=F64), dt: F64):
    i = tg.tid()
    x[i] = x[i] + dt * v[i] * x[i]


@tg.kernel
def square_into(a: tg.array(dtype=F64), b: tg.array(dtype=F64)):
    i = tg.tid()
    b[i] = a[i] * a[i]


@tg.kernel
def write_then_read(x: tg.array(dtype=F64), y: tg.array(dtype=F64), z: tg.array(dtype=F64)):
    i = tg.tid()
    y[i] = tg.sin(x[i])
    z[i] = y[i] * y[i]


@tg.kernel
def read_write_read(x: tg.array(dtype=F64), z: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] * x[i]
    z[i] = x[i] * x[i]


@tg.kernel
def vec_inplace(x: tg.array(dtype=tg.vec3d)):
    i = tg.tid()
    x[i] = x[i] * tg.dot(x[i], x[i])


@tg.kernel
def vec_sum(x: tg.array(dtype=tg.vec3d), s: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(s, 0, tg.sin(x[i][0]) + 2.0 * x[i][1] * x[i][1] + tg.cos(x[i][2]))


@tg.kernel
def grid_inplace(x: tg.array(dtype=F64, ndim=2)):
    i, j = tg.tid()
    x[i, j] = x[i, j] * x[i, j] + tg.sin(x[i, j])


@tg.kernel
def grid_sum(x: tg.array(dtype=F64, ndim=2), s: tg.array(dtype=F64)):
    i, j = tg.tid()
    tg.atomic_add(s, 0, x[i, j] * F64(i + 2 * j + 1))


@tg.func
def square_at(x: tg.array(dtype=F64), i: int):
    x[i] = x[i] * x[i]


@tg.kernel
def square_through_func(x: tg.array(dtype=F64)):
    i = tg.tid()
    square_at(x, i)


@tg.kernel
def square_if_large(x: tg.array(dtype=F64)):
    i = tg.tid()
    if x[i] > 1.0:
        x[i] = x[i] * x[i]
    else:
        x[i] = tg.sin(x[i])


@tg.kernel
def square_in_a_loop(x: tg.array(dtype=F64), n: int):
    i = tg.tid()
    for _k in range(n):
        x[i] = x[i] * x[i]


@tg.kernel
def spring_velocity(x: tg.array(dtype=F64), v: tg.array(dtype=F64), k: F64, dt: F64):
    i = tg.tid()
    v[i] = v[i] - dt * k * x[i]


@tg.kernel
def spring_position(x: tg.array(dtype=F64), v: tg.array(dtype=F64), dt: F64):
    i = tg.tid()
    x[i] = x[i] + dt * v[i]


@tg.kernel
def shift_then_square(x: tg.array(dtype=F64), z: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] + 1.0
    z[i] = x[i] * x[i]


@tg.kernel
def halve_or_shift(x: tg.array(dtype=F64)):
    i = tg.tid()
    if x[i] > 1.0:
        x[i] = x[i] * 0.5
    else:
        x[i] = x[i] + 0.8


@tg.func
def shift_at(x: tg.array(dtype=F64), i: int):
    x[i] = x[i] + 0.5


@tg.kernel
def shift_through_func(x: tg.array(dtype=F64)):
    i = tg.tid()
    shift_at(x, i)


@tg.kernel
def bump_and_branch(x: tg.array(dtype=F64), w: tg.array(dtype=F64), z: tg.array(dtype=F64)):
    i = tg.tid()
    old = tg.atomic_add(x, i, 0.5)
    if old > 1.0:
        z[i] = w[i] * 2.0
    else:
        z[i] = w[i] * 3.0


@tg.struct
class Particles:
    pos: tg.array(dtype=F64)
    vel: tg.array(dtype=F64)
    dt: F64


@tg.kernel
def particles_step(p: Particles):
    i = tg.tid()
    x = p.pos[i]
    p.pos[i] = x + p.dt * p.vel[i] * x
    p.vel[i] = p.vel[i] * 0.9


@tg.kernel
def particles_energy(p: Particles, s: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(s, 0, tg.sin(p.pos[i]) + p.vel[i] * p.vel[i])


# in-place updates of x reading w, of every kind the analysis tells apart; launched as (x, w)
# and as (w, x), in sequences, against finite differences (test_mixed_sequences_of_updates)

@tg.kernel
def u_linear(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] + 0.5 * w[i]


@tg.kernel
def u_product(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] * w[i]


@tg.kernel
def u_affine(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = 2.0 * x[i] - w[i]


@tg.kernel
def u_sin(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = tg.sin(x[i]) + w[i]


@tg.kernel
def u_branch(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    if w[i] > 0.9:
        x[i] = x[i] * 0.5
    else:
        x[i] = x[i] + w[i]


@tg.kernel
def u_overwrite(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = w[i] * 1.5


@tg.kernel
def u_loop(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    s = F64(0.0)
    for k in range(3):
        s = s + w[i] * F64(k)
    x[i] = x[i] + s


@tg.kernel
def u_ratio(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] / (1.0 + w[i] * w[i])


@tg.kernel
def u_max(x: tg.array(dtype=F64), w: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = tg.max(x[i], w[i]) + 0.1 * x[i]


UPDATES = [u_linear, u_product, u_affine, u_sin, u_branch, u_overwrite, u_loop, u_ratio, u_max]


# ----------------------------------------------------------------------------------- helpers

def _arrays(values, device, grad):
    return [tg.array(v, dtype=d, device=device, requires_grad=grad) for v, d in values]


def _loss(device):
    return tg.zeros(1, dtype=F64, device=device, requires_grad=True)


def finite_differences(forward, values, device, eps=1e-6):
    """Central differences of ``forward(*arrays) -> loss``, re-running it from fresh arrays."""
    def f(vals):
        return float(forward(*_arrays(vals, device, False)).numpy()[0])

    grads = []
    for k, (v, d) in enumerate(values):
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            plus = [(w.copy(), dd) for w, dd in values]
            minus = [(w.copy(), dd) for w, dd in values]
            plus[k][0][idx] += eps
            minus[k][0][idx] -= eps
            g[idx] = (f(plus) - f(minus)) / (2 * eps)
        grads.append(g)
    return grads


def tape_gradients(forward, values, device, **tape_kw):
    """(gradients, arrays, tape, loss) from one recorded forward and ``backward(loss)``."""
    arrays = _arrays(values, device, True)
    tape = tg.Tape(**tape_kw)
    with tape:
        loss = forward(*arrays)
    tape.backward(loss=loss)
    return [a.grad.numpy().copy() for a in arrays], arrays, tape, loss


def check(forward, values, device):
    grads, arrays, tape, loss = tape_gradients(forward, values, device)
    for g, ref in zip(grads, finite_differences(forward, values, device)):
        np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-7)
    return grads, arrays, tape, loss


def _x(n=5, lo=0.3, hi=1.7, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, n)


def inplace_chain(*kernels):
    """forward(x): each in-place kernel on x in turn, then loss = sum(sin(x))."""
    def f(x):
        loss = _loss(x.device)
        for k in kernels:
            tg.launch(k, dim=x.shape[0], inputs=[x])
        tg.launch(sin_sum, dim=x.shape[0], inputs=[x, loss])
        return loss
    return f


f_square = inplace_chain(square_inplace)


# ------------------------------------------------------------------------------------- tests

def test_inplace_square_is_exact(device):
    grads, (x,), tape, _ = check(f_square, [(_x(), F64)], device)
    x0 = _x()
    np.testing.assert_allclose(grads[0], 2 * x0 * np.cos(x0 * x0), rtol=1e-12)
    np.testing.assert_allclose(x.numpy(), x0 * x0, rtol=1e-15)        # final forward values kept
    assert tape.saved_bytes == 2 * x.nbytes                          # one copy + the final values


def test_issue_example_sum_of_inplace_square_and_double(device):
    for k, truth in ((square_inplace, [2.0, 4.0, 6.0]), (double_inplace, [2.0, 2.0, 2.0])):
        x = tg.array(np.array([1.0, 2.0, 3.0]), dtype=F64, device=device, requires_grad=True)
        loss = _loss(device)
        tape = tg.Tape()
        with warnings.catch_warnings():
            warnings.simplefilter("error", tg.TapeWarning)       # saving on: nothing to warn about
            with tape:
                tg.launch(k, dim=3, inputs=[x])
                tg.launch(plain_sum, dim=3, inputs=[x, loss])
        tape.backward(loss=loss)
        assert x.grad.numpy().tolist() == truth


def test_inplace_double_is_exact(device):
    check(inplace_chain(double_inplace), [(_x(), F64)], device)


def test_overwrite_after_read_of_an_array_without_gradient(device):
    """y = x * w, then w = 0: d loss / d x needs w's old values although w has no gradient."""
    def f(x, w):
        y = tg.zeros(x.shape[0], dtype=F64, device=x.device, requires_grad=True)
        loss = _loss(x.device)
        tg.launch(mul, dim=x.shape[0], inputs=[x, w, y])
        tg.launch(set_zero, dim=w.shape[0], inputs=[w])
        tg.launch(sin_sum, dim=y.shape[0], inputs=[y, loss])
        return loss
    x0, w0 = _x(seed=1), _x(seed=2)
    x = tg.array(x0, dtype=F64, device=device, requires_grad=True)
    w = tg.array(w0, dtype=F64, device=device)                       # no gradient
    tape = tg.Tape()
    with tape:
        loss = f(x, w)
    tape.backward(loss=loss)
    np.testing.assert_allclose(x.grad.numpy(), w0 * np.cos(x0 * w0), rtol=1e-12)
    assert np.all(w.numpy() == 0.0)
    # and with w differentiable too, against finite differences
    grads, (_, w2), _, _ = check(f, [(x0, F64), (w0, F64)], device)
    np.testing.assert_allclose(grads[1], x0 * np.cos(x0 * w0), rtol=1e-12)


def test_overwrite_after_read_across_two_launches(device):
    """y = x*x reads x; then x = 3 y overwrites it; loss = sum(sin(x)) + sum(sin(y))."""
    def f(x):
        n = x.shape[0]
        y = tg.zeros(n, dtype=F64, device=x.device, requires_grad=True)
        loss = _loss(x.device)
        tg.launch(square_into, dim=n, inputs=[x, y])
        tg.launch(triple_of, dim=n, inputs=[y, x])
        tg.launch(sin_sum, dim=n, inputs=[x, loss])
        tg.launch(sin_sum, dim=n, inputs=[y, loss])
        return loss
    grads, (x,), _, _ = check(f, [(_x(seed=3), F64)], device)
    x0 = _x(seed=3)
    np.testing.assert_allclose(x.numpy(), 3 * x0 * x0)


def test_same_array_passed_as_input_and_output(device):
    """square_into(a=x, b=x): the kernel's alias makes it in place."""
    def f(x):
        loss = _loss(x.device)
        tg.launch(square_into, dim=x.shape[0], inputs=[x, x])
        tg.launch(sin_sum, dim=x.shape[0], inputs=[x, loss])
        return loss
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.TapeWarning)
        check(f, [(_x(seed=4), F64)], device)


def simulate(steps, dt=0.05):
    def f(x, v):
        loss = _loss(x.device)
        for _ in range(steps):
            tg.launch(euler_step, dim=x.shape[0], inputs=[x, v, dt])
        tg.launch(sin_sum, dim=x.shape[0], inputs=[x, loss])
        tg.launch(sin_sum, dim=v.shape[0], inputs=[v, loss])
        return loss
    return f


def test_simulation_loop_of_five_inplace_steps(device):
    values = [(_x(seed=5), F64), (_x(seed=6, lo=-1.0, hi=1.0), F64)]
    _, (x, v), tape, _ = check(simulate(5), values, device)
    assert tape.saved_bytes == (5 + 1) * (x.nbytes + v.nbytes)


def test_simulation_step_from_the_brief(device):
    """x[i] = x[i] + dt * v[i] * x[i], 5 steps; v is only read (saved: no)."""
    def f(x, v):
        loss = _loss(x.device)
        for _ in range(5):
            tg.launch(drift, dim=x.shape[0], inputs=[x, v, 0.1])
        tg.launch(sin_sum, dim=x.shape[0], inputs=[x, loss])
        return loss
    _, (x, v), tape, _ = check(f, [(_x(seed=7), F64), (_x(seed=8), F64)], device)
    assert tape.saved_bytes == (5 + 1) * x.nbytes


def test_linear_inplace_updates_save_nothing(device):
    """A spring integrated in place (v -= dt k x; x += dt v): every adjoint is linear in the
    overwritten values, so nothing is saved, nothing warns, and the gradients are exact."""
    def f(x, v):
        loss = _loss(x.device)
        for _ in range(5):
            tg.launch(spring_velocity, dim=x.shape[0], inputs=[x, v, 3.0, 0.1])
            tg.launch(spring_position, dim=x.shape[0], inputs=[x, v, 0.1])
        tg.launch(sin_sum, dim=x.shape[0], inputs=[x, loss])
        tg.launch(sin_sum, dim=v.shape[0], inputs=[v, loss])
        return loss
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.TapeWarning)
        _, _, tape, _ = check(f, [(_x(seed=25), F64), (_x(seed=26, lo=-1.0, hi=1.0), F64)], device)
    assert tape.saved_bytes == 0


def test_linear_read_then_needed_read_after_the_write(device):
    """x += 1 (its old value is not needed) then z = x * x (needs the new x): the copy taken
    for an earlier reader is restored after this launch's adjoint, and nothing warns."""
    def f(x):
        n = x.shape[0]
        z = tg.zeros(n, dtype=F64, device=x.device, requires_grad=True)
        loss = _loss(x.device)
        tg.launch(sin_sum, dim=n, inputs=[x, loss])                  # needs x's initial values
        tg.launch(shift_then_square, dim=n, inputs=[x, z])
        tg.launch(sin_sum, dim=n, inputs=[z, loss])
        tg.launch(sin_sum, dim=n, inputs=[x, loss])
        return loss
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.TapeWarning)
        _, (x,), tape, _ = check(f, [(_x(seed=27), F64)], device)
    assert tape.saved_bytes == 2 * x.nbytes


def test_a_value_deciding_a_branch_is_needed(device):
    """x *= 0.5 where x > 1, else x += 0.8: linear either way, but the replayed branch (so
    the slope) depends on the old x: 0.7 -> 1.5 -> 0.75 has slope 0.5, at the final 0.75
    the branch would say 1."""
    x0 = np.array([0.25, 0.7, 0.8, 1.3, 1.6])     # no value within reach of the threshold
    _, (x,), tape, _ = check(inplace_chain(halve_or_shift, halve_or_shift), [(x0, F64)], device)
    assert tape.saved_bytes == 3 * x.nbytes


@pytest.mark.parametrize("first", UPDATES, ids=lambda k: k.__name__)
def test_mixed_sequences_of_updates(first, device):
    """first(x, w), then each update on (w, x), then first(x, w) again, then a loss reading
    both: every pair of update kinds, with x and w overwritten in turn."""
    values = [(np.array([0.353, 0.812, 1.147]), F64), (np.array([0.617, 1.043, 0.457]), F64)]
    for second in UPDATES:
        def f(x, w, second=second):
            loss = _loss(x.device)
            tg.launch(first, dim=3, inputs=[x, w])
            tg.launch(second, dim=3, inputs=[w, x])
            tg.launch(first, dim=3, inputs=[x, w])
            tg.launch(sin_sum, dim=3, inputs=[x, loss])
            tg.launch(sin_sum, dim=3, inputs=[w, loss])
            return loss
        grads, _, _, _ = tape_gradients(f, values, device)
        for name, g, ref in zip("xw", grads, finite_differences(f, values, device)):
            np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-7,
                                       err_msg=f"d loss / d {name} for {first.__name__}, {second.__name__}")


def recorded_simulation(device, seeds):
    """(finite-difference gradients, x, v, tape, loss, final x and v) of ``simulate(3)``."""
    values = [(_x(seed=seeds[0]), F64), (_x(seed=seeds[1], lo=-1.0, hi=1.0), F64)]
    forward = simulate(3)
    ref = finite_differences(forward, values, device)
    x, v = _arrays(values, device, True)
    tape = tg.Tape()
    with tape:
        loss = forward(x, v)
    return ref, x, v, tape, loss, (x.numpy().copy(), v.numpy().copy())


def assert_exact_and_final(ref, x, v, final):
    np.testing.assert_allclose(x.grad.numpy(), ref[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v.grad.numpy(), ref[1], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(x.numpy(), final[0])
    np.testing.assert_array_equal(v.numpy(), final[1])


def test_repeated_backward_gives_the_same_gradients(device):
    ref, x, v, tape, loss, final = recorded_simulation(device, (9, 10))
    for _ in range(3):
        tape.backward(loss=loss)
        assert_exact_and_final(ref, x, v, final)
        tape.zero()
    seed = tg.array(np.ones(1), dtype=F64, device=device)
    for _ in range(2):                                   # the grads= form, and no seeding at all
        tape.backward(grads={loss: seed})
        assert_exact_and_final(ref, x, v, final)
        tape.zero()
    loss.grad.fill_(1.0)
    tape.backward()
    assert_exact_and_final(ref, x, v, final)


def test_off_switch_warns_and_gives_the_old_wrong_gradient(device):
    x0 = np.array([1.0, 2.0, 3.0])
    x = tg.array(x0, dtype=F64, device=device, requires_grad=True)
    loss = _loss(device)
    tape = tg.Tape(save_overwritten=False)
    with tape:
        with pytest.warns(tg.TapeWarning, match=r"square_inplace.*'x'.*may be wrong.*save_overwritten"):
            tg.launch(square_inplace, dim=3, inputs=[x])
        tg.launch(plain_sum, dim=3, inputs=[x, loss])
    tape.backward(loss=loss)
    assert x.grad.numpy().tolist() == (2 * x0 * x0).tolist()       # 2 * x_new: the adjoint saw x_new
    assert tape.saved_bytes == 0


def test_off_switch_from_the_config_and_strict_mode(device):
    x = tg.array(_x(), dtype=F64, device=device, requires_grad=True)
    w = tg.array(_x(seed=1), dtype=F64, device=device)
    y = tg.zeros(5, dtype=F64, device=device, requires_grad=True)
    tg.config.tape_save_overwritten = False
    try:
        tape = tg.Tape()
        assert tape.save_overwritten is False
        with tape:
            tg.launch(mul, dim=5, inputs=[x, w, y])
            with pytest.warns(tg.TapeWarning, match=r"set_zero.*launch #0.*'.*mul\.w'.*may be wrong"):
                tg.launch(set_zero, dim=5, inputs=[w])
        tg.config.strict_tape = True
        before = x.numpy().copy()
        with tg.Tape() as strict:
            with pytest.raises(RuntimeError, match="square_inplace"):
                tg.launch(square_inplace, dim=5, inputs=[x])
        assert strict.records == [] and strict.saved_bytes == 0      # nothing recorded, nothing ran
        np.testing.assert_array_equal(x.numpy(), before)
    finally:
        tg.config.tape_save_overwritten = True
        tg.config.strict_tape = False
    with tg.Tape() as t:                      # saving on: strict mode has nothing to object to
        tg.config.strict_tape = True
        try:
            tg.launch(square_inplace, dim=5, inputs=[x])
        finally:
            tg.config.strict_tape = False
    assert t.saved_bytes == 2 * x.nbytes


def test_bad_save_overwritten_values():
    with pytest.raises(TypeError, match=r"Tape\(save_overwritten=...\).*got str"):
        tg.Tape(save_overwritten="yes")
    tg.config.tape_save_overwritten = 1
    try:
        with pytest.raises(TypeError, match=r"tape_save_overwritten.*got int"):
            tg.Tape()
    finally:
        tg.config.tape_save_overwritten = True


def test_vec3_arrays(device):
    rng = np.random.default_rng(11)

    def f(x):
        loss = _loss(x.device)
        tg.launch(vec_inplace, dim=x.shape[0], inputs=[x])
        tg.launch(vec_inplace, dim=x.shape[0], inputs=[x])
        tg.launch(vec_sum, dim=x.shape[0], inputs=[x, loss])
        return loss
    _, (x,), tape, _ = check(f, [(rng.uniform(-0.8, 0.8, (4, 3)), tg.vec3d)], device)
    assert tape.saved_bytes == 3 * 4 * 3 * 8


def test_2d_array(device):
    def f(x):
        loss = _loss(x.device)
        tg.launch(grid_inplace, dim=x.shape, inputs=[x])
        tg.launch(grid_inplace, dim=x.shape, inputs=[x])
        tg.launch(grid_sum, dim=x.shape, inputs=[x, loss])
        return loss
    check(f, [(np.random.default_rng(12).uniform(0.1, 0.9, (3, 4)), F64)], device)


def test_strided_view_updated_in_place(device):
    def f(base):
        view = base[::2]
        loss = _loss(base.device)
        tg.launch(square_inplace, dim=view.shape[0], inputs=[view])
        tg.launch(square_inplace, dim=view.shape[0], inputs=[view])
        tg.launch(sin_sum, dim=base.shape[0], inputs=[base, loss])
        return loss
    grads, (base,), _, _ = check(f, [(_x(n=7, seed=23), F64)], device)
    b0 = _x(n=7, seed=23)
    expect = np.cos(b0)
    expect[::2] = np.cos(b0[::2] ** 4) * 4 * b0[::2] ** 3
    np.testing.assert_allclose(grads[0], expect, rtol=1e-12)


def test_write_through_a_view_of_an_array_a_launch_read(device):
    """sin_sum reads base; square_inplace then writes base[1:4] (another array object over the
    same memory): base is saved."""
    def f(base):
        loss = _loss(base.device)
        tg.launch(sin_sum, dim=base.shape[0], inputs=[base, loss])
        view = base[1:4]
        tg.launch(square_inplace, dim=3, inputs=[view])
        tg.launch(sin_sum, dim=base.shape[0], inputs=[base, loss])
        return loss
    _, (base,), tape, _ = check(f, [(_x(n=6, seed=30), F64)], device)
    assert tape.saved_bytes == 2 * base.nbytes


def test_write_to_the_base_of_a_view_a_launch_read(device):
    def f(base):
        loss = _loss(base.device)
        view = base[::2]
        tg.launch(sin_sum, dim=view.shape[0], inputs=[view, loss])
        tg.launch(square_inplace, dim=base.shape[0], inputs=[base])
        tg.launch(sin_sum, dim=base.shape[0], inputs=[base, loss])
        return loss
    check(f, [(_x(n=6, seed=31), F64)], device)


def test_one_launch_reading_an_array_and_writing_a_view_of_it(device):
    """square_into(a=base[0:3], b=base[3:6]) and then square_into(a=base, b=...): reads of
    base and writes of its views in one launch are in place too."""
    def f(base):
        loss = _loss(base.device)
        out = tg.zeros(6, dtype=F64, device=base.device, requires_grad=True)
        tg.launch(square_into, dim=6, inputs=[base, out])            # reads all of base
        tg.launch(square_into, dim=3, inputs=[base[0:3], base[3:6]])   # overwrites its upper half
        tg.launch(sin_sum, dim=6, inputs=[base, loss])
        tg.launch(sin_sum, dim=6, inputs=[out, loss])
        return loss
    check(f, [(_x(n=6, seed=32), F64)], device)


def test_arrays_inside_a_struct_updated_in_place(device):
    def f(x, v):
        p = Particles()
        p.pos, p.vel, p.dt = x, v, 0.1
        loss = _loss(x.device)
        for _ in range(3):
            tg.launch(particles_step, dim=x.shape[0], inputs=[p])
        tg.launch(particles_energy, dim=x.shape[0], inputs=[p, loss])
        return loss
    _, (x, v), tape, _ = check(f, [(_x(seed=33), F64), (_x(seed=34, lo=-1.0, hi=1.0), F64)], device)
    assert tape.saved_bytes > 0


def test_recorded_copies_into_part_of_an_array_a_launch_read(device):
    """copy(base[0:3], z) and copy(base, z, dest_offset=3, count=2) after a launch read base."""
    def f(base, z):
        n = base.shape[0]
        y = tg.zeros(n, dtype=F64, device=base.device, requires_grad=True)
        loss = _loss(base.device)
        tg.launch(square_into, dim=n, inputs=[base, y])
        tg.copy(base[0:3], z)
        tg.copy(base, z, dest_offset=3, count=2)
        tg.launch(sin_sum, dim=n, inputs=[base, loss])
        tg.launch(sin_sum, dim=n, inputs=[y, loss])
        return loss
    check(f, [(_x(n=6, seed=35), F64), (_x(n=3, seed=36), F64)], device)


def test_recorded_copy_over_an_array_a_launch_read(device):
    """tg.copy(x, z) inside the tape overwrites x, which square_into read: saved before the copy."""
    def f(x, z):
        n = x.shape[0]
        y = tg.zeros(n, dtype=F64, device=x.device, requires_grad=True)
        loss = _loss(x.device)
        tg.launch(square_into, dim=n, inputs=[x, y])
        tg.copy(x, z)
        tg.launch(square_inplace, dim=n, inputs=[x])
        tg.launch(sin_sum, dim=n, inputs=[x, loss])
        tg.launch(sin_sum, dim=n, inputs=[y, loss])
        return loss
    _, (x, z), _, _ = check(f, [(_x(seed=13), F64), (_x(seed=14), F64)], device)
    np.testing.assert_allclose(x.numpy(), _x(seed=14) ** 2)


def test_write_then_read_kernel_stays_exact(device):
    """A kernel that reads back what it wrote needs the values from *after* it: restored after
    its adjoint (here an earlier launch read y, so y is saved)."""
    def f(x, y):
        n = x.shape[0]
        z = tg.zeros(n, dtype=F64, device=x.device, requires_grad=True)
        loss = _loss(x.device)
        tg.launch(sin_sum, dim=n, inputs=[y, loss])              # reads y's initial values
        tg.launch(write_then_read, dim=n, inputs=[x, y, z])
        tg.launch(sin_sum, dim=n, inputs=[z, loss])
        return loss
    check(f, [(_x(seed=15), F64), (_x(seed=16), F64)], device)


def test_inplace_update_in_a_user_function_and_in_branches(device):
    _, _, tape, _ = check(inplace_chain(square_through_func, square_if_large), [(_x(seed=24), F64)], device)
    assert tape.saved_bytes == 3 * 5 * 8


def test_linear_update_in_a_user_function_saves_nothing(device):
    _, _, tape, _ = check(inplace_chain(shift_through_func), [(_x(seed=28), F64)], device)
    assert tape.saved_bytes == 0


def test_atomic_whose_old_value_is_used(device):
    """old = atomic_add(x, i, 0.5) decides a branch: the replayed atomic reads x from memory,
    so the old x is saved (at the final x, element 0 would take the other branch)."""
    def f(x, w):
        z = tg.zeros(3, dtype=F64, device=x.device, requires_grad=True)
        loss = _loss(x.device)
        tg.launch(bump_and_branch, dim=3, inputs=[x, w, z])
        tg.launch(bump_and_branch, dim=3, inputs=[x, w, z])
        tg.launch(sin_sum, dim=3, inputs=[z, loss])
        tg.launch(sin_sum, dim=3, inputs=[x, loss])
        return loss
    _, (x, _), tape, _ = check(f, [(np.array([0.3, 0.7, 1.3]), F64), (_x(n=3, seed=29), F64)], device)
    assert tape.saved_bytes == 3 * x.nbytes


def test_loop_that_reads_what_an_earlier_iteration_wrote_is_exact(device):
    """Iteration 2 loads what iteration 1 stored: the kernel keeps the element in a local
    (lang/inplace.py), so the adjoint's replay sees each iteration's value (it warned and was
    wrong before: issue 23 item 6)."""
    def f(x):
        loss = _loss(x.device)
        tg.launch(square_in_a_loop, dim=5, inputs=[x, 3])
        tg.launch(sin_sum, dim=5, inputs=[x, loss])
        return loss
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.TapeWarning)
        check(f, [(_x(), F64)], device)


def test_read_write_read_kernel_is_exact(device):
    def f(x):
        z = tg.zeros(5, dtype=F64, device=x.device, requires_grad=True)
        loss = _loss(x.device)
        tg.launch(read_write_read, dim=5, inputs=[x, z])
        tg.launch(sin_sum, dim=5, inputs=[x, loss])
        tg.launch(sin_sum, dim=5, inputs=[z, loss])
        return loss
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.TapeWarning)
        check(f, [(_x(), F64)], device)


def test_only_needed_arrays_are_saved(device):
    x = tg.array(_x(), dtype=F64, device=device)                          # no gradients anywhere
    tape = tg.Tape()
    with tape:
        tg.launch(square_inplace, dim=5, inputs=[x])
    assert tape.saved_bytes == 0
    a = tg.array(_x(), dtype=F64, device=device, requires_grad=True)
    b = tg.zeros(5, dtype=F64, device=device, requires_grad=True)
    c = tg.zeros(5, dtype=F64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square_into, dim=5, inputs=[a, b])      # b written, not read: nothing to keep
        tg.launch(square_into, dim=5, inputs=[a, b])      # b overwritten, but no one read it
        tg.copy(c, b)                                     # a copy's adjoint needs no values...
        tg.launch(set_zero, dim=5, inputs=[b])            # ...so overwriting b after it is free
    assert tape.saved_bytes == 0
    with tape:
        tg.launch(set_zero, dim=5, inputs=[a])            # a was read by differentiable launches
    assert tape.saved_bytes == 2 * a.nbytes
    tape.reset()
    assert tape.saved_bytes == 0


def test_record_func_sees_the_values_of_its_arrays(device):
    """A callback recorded with record_func sees its arrays as they were when it was recorded."""
    x0 = _x(seed=17)
    x = tg.array(x0, dtype=F64, device=device, requires_grad=True)
    seen = []
    tape = tg.Tape()
    with tape:
        tape.record_func(lambda: seen.append(x.numpy().copy()), [x])
        tg.launch(square_inplace, dim=5, inputs=[x])
    tape.backward(grads={x: np.ones(5)})
    np.testing.assert_array_equal(seen[0], x0)
    np.testing.assert_array_equal(x.numpy(), x0 * x0)


def test_final_values_come_back_when_an_adjoint_raises(device):
    x0 = _x(seed=18)
    x = tg.array(x0, dtype=F64, device=device, requires_grad=True)

    def fail():
        raise ArithmeticError("boom")
    tape = tg.Tape()
    with tape:
        tape.record_func(fail, [x])
        tg.launch(square_inplace, dim=5, inputs=[x])
    with pytest.raises(ArithmeticError):
        tape.backward(grads={x: np.ones(5)})
    np.testing.assert_array_equal(x.numpy(), x0 * x0)


def test_captured_backward_restores_inside_the_graph(device):
    """tape.backward inside a ScopedCapture (CPU or CUDA): the restores are recorded with the
    adjoints, so each replay of the graph is exact and leaves the final values in place."""
    ref, x, v, tape, loss, final = recorded_simulation(device, (19, 20))
    tape.backward(loss=loss)                      # loads the adjoint kernels outside the capture
    tape.zero()
    tg.synchronize_device(device)
    with tg.ScopedCapture(device=device) as cap:
        tape.backward(loss=loss)
    assert np.all(x.grad.numpy() == 0.0)
    for _ in range(2):
        tg.capture_launch(cap.graph)
        tg.synchronize_device(device)
        assert_exact_and_final(ref, x, v, final)
        tape.zero()
        tg.synchronize_device(device)
