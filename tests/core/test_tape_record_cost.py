"""What makes a recorded launch cheap (issue 30 item 3) changes no gradient: the plain-launch
record's deferred gradient tracking, and the saved copies carved from the tape's arena (reused
after ``reset``). Float64 references: closed forms and plain numpy."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.tape_saves import SaveArena


@tg.kernel
def _step(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * 0.5 + x[i]


@tg.kernel
def _drift(x: tg.array(dtype=tg.float64), v: tg.array(dtype=tg.float64), dt: tg.float64):
    i = tg.tid()
    x[i] = x[i] + dt * v[i] * x[i]


@tg.kernel
def _total(x: tg.array(dtype=tg.float64), s: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(s, 0, x[i])


def test_gradients_list_every_array_in_first_touch_order_and_backward_is_exact(device):
    """tape.gradients is filled when read (not at each record): every array a launch touched,
    in the order they were first touched, and the chain's gradient is the product of the
    steps' derivatives."""
    n, steps = 16, 5
    x0 = np.linspace(-1.0, 1.0, n)
    xs = [tg.array(x0, dtype=tg.float64, requires_grad=True, device=device)]
    xs += [tg.zeros(n, dtype=tg.float64, requires_grad=True, device=device) for _ in range(steps)]
    plain = tg.zeros(n, dtype=tg.float64, device=device)       # no gradient: not listed
    tape = tg.Tape()
    with tape:
        for k in range(steps):
            tg.launch(_step, dim=n, inputs=[xs[k]], outputs=[xs[k + 1]], device=device)
        tg.launch(_step, dim=n, inputs=[xs[-1]], outputs=[plain], device=device)
        assert list(tape.gradients) == xs                       # read inside the block
    tape.backward(grads={xs[-1]: tg.array(np.ones(n), dtype=tg.float64, device=device)})
    expect, v = np.ones(n), x0.copy()
    for _ in range(steps):
        expect *= 0.5 * np.cos(v) + 1.0
        v = 0.5 * np.sin(v) + v
    np.testing.assert_allclose(xs[0].grad.numpy(), expect, rtol=1e-13)
    assert all(tape.gradients[a] is a.grad for a in xs)


def test_a_fill_after_plain_launches_is_recorded(device):
    """record_write needs the tracked gradients of the launches before it: x.fill_ inside the
    tape, after a launch read x, cuts x's gradient (the fill's adjoint) and keeps the read's."""
    n = 8
    x = tg.array(np.linspace(0.0, 1.0, n), dtype=tg.float64, requires_grad=True, device=device)
    y = tg.zeros(n, dtype=tg.float64, requires_grad=True, device=device)
    z = tg.zeros(n, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(_step, dim=n, inputs=[x], outputs=[y], device=device)
        x.fill_(0.25)
        tg.launch(_step, dim=n, inputs=[x], outputs=[z], device=device)
    assert type(tape.records[1]).__name__ == "FillRecord"
    tape.backward(grads={y: tg.array(np.ones(n), dtype=tg.float64, device=device),
                         z: tg.array(np.ones(n), dtype=tg.float64, device=device)})
    np.testing.assert_allclose(x.grad.numpy(), 0.5 * np.cos(np.linspace(0.0, 1.0, n)) + 1.0, rtol=1e-13)


def _inplace_grad(tape, x, v, loss, x0, steps, dt):
    x.assign(x0)
    loss.zero_()
    with tape:
        for _ in range(steps):
            tg.launch(_drift, dim=len(x), inputs=[x, v, dt], device=x.device)
        tg.launch(_total, dim=len(x), inputs=[x, loss], device=x.device)
    tape.backward(loss=loss)
    return v.grad.numpy().copy()


@pytest.mark.parametrize("n", [64, 5000])   # many saves in one arena buffer / one or two per buffer
def test_inplace_saves_from_the_arena_are_exact_and_reused_after_reset(n, device):
    """Each in-place step saves the array it overwrites; the copies are carved from the tape's
    arena, and after reset() the next recording carves from the same buffers (CPU). The
    gradient matches the closed form d sum(x_T) / d v = T dt x_0 (1 + dt v)^(T - 1) both times."""
    steps, dt = 40, 0.01
    rng = np.random.default_rng(0)
    x0, v0 = rng.uniform(0.5, 1.5, n), rng.uniform(-1.0, 1.0, n)
    x = tg.array(x0, dtype=tg.float64, requires_grad=True, device=device)
    v = tg.array(v0, dtype=tg.float64, requires_grad=True, device=device)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True, device=device)
    truth = steps * dt * x0 * (1.0 + dt * v0) ** (steps - 1)
    tape = tg.Tape()
    first = _inplace_grad(tape, x, v, loss, x0, steps, dt)
    np.testing.assert_allclose(first, truth, rtol=1e-12)
    assert tape.saved_bytes >= steps * n * 8
    saved = [s.values for saves in tape._saves.values() for s in saves]
    assert all(isinstance(c.owner, tg.array) for c in saved)    # views into the arena's buffers
    owners = {id(c.owner) for c in saved}
    if 2 * n * 8 <= SaveArena.CHUNK:
        assert len(owners) < steps        # carved from shared buffers, not one allocation per save
    tape.reset()
    second = _inplace_grad(tape, x, v, loss, x0, steps, dt)
    np.testing.assert_array_equal(second, first)
    if tg.get_device(device).is_cpu:
        again = {id(s.values.owner) for saves in tape._saves.values() for s in saves}
        assert again <= owners             # the same host buffers
