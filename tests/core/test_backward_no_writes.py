"""``Tape.backward`` never writes the forward's arrays (issue 24 item 5, SPEC B21).

In-place steps save the values they overwrite; backward used to copy them back into the arrays
themselves and restore the final values at the end, so another thread reading an array during
backward saw old values (98% of reads in the issue's probe) and its own writes were reverted.
Now the adjoints read a private copy: the forward's arrays are bit-identical throughout, and
the gradients stay exact (checked against float64 central differences).
"""
import sys
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory_ops, tape_saves

F64 = tg.float64


@pytest.fixture(autouse=True)
def _default_cpu():
    with tg.ScopedDevice("cpu"):
        yield


@tg.kernel
def step(x: tg.array(dtype=F64), v: tg.array(dtype=F64), dt: F64):
    i = tg.tid()
    v[i] = v[i] - dt * tg.sin(x[i]) * x[i]
    x[i] = x[i] + dt * v[i] * x[i]


@tg.kernel
def energy(x: tg.array(dtype=F64), v: tg.array(dtype=F64), e: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(e, 0, tg.cos(x[i]) * v[i] + v[i] * v[i] * x[i])


@tg.kernel
def square_inplace(x: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] * x[i]


@tg.kernel
def sin_sum(x: tg.array(dtype=F64), s: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(s, 0, tg.sin(x[i]))


N, STEPS, DT = 6, 20, 0.05
X0 = np.linspace(0.3, 1.4, N)
V0 = np.linspace(-0.5, 0.4, N)


def simulate(x0, v0, device, tape=None):
    x = tg.array(x0, dtype=F64, device=device, requires_grad=tape is not None)
    v = tg.array(v0, dtype=F64, device=device, requires_grad=tape is not None)
    e = tg.zeros(1, dtype=F64, device=device, requires_grad=tape is not None)
    if tape is None:
        for _ in range(STEPS):
            tg.launch(step, dim=N, inputs=[x, v, DT])
        tg.launch(energy, dim=N, inputs=[x, v, e])
        return x, v, e
    with tape:
        for _ in range(STEPS):
            tg.launch(step, dim=N, inputs=[x, v, DT])
        tg.launch(energy, dim=N, inputs=[x, v, e])
    return x, v, e


def fd_grad(device, eps=1e-6):
    gx, gv = np.zeros(N), np.zeros(N)
    for k in range(N):
        for g, which in ((gx, 0), (gv, 1)):
            p = [X0.copy(), V0.copy()]
            m = [X0.copy(), V0.copy()]
            p[which][k] += eps
            m[which][k] -= eps
            g[k] = (simulate(*p, device)[2].numpy()[0] - simulate(*m, device)[2].numpy()[0]) / (2 * eps)
    return gx, gv


def test_forward_arrays_are_bit_identical_and_never_written(device, monkeypatch):
    tape = tg.Tape()
    x, v, e = simulate(X0, V0, device, tape)
    before = [a.numpy().tobytes() for a in (x, v, e)]
    spans = [tape_saves.memory_range(a) for a in (x, v, e)]
    written = []
    real_copy = memory_ops.copy

    def spy(dest, src):                  # every copy backward makes: none may land in x, v or e
        r = tape_saves.memory_range(dest)
        written.extend(s for s in spans if tape_saves.overlaps(r, s))
        real_copy(dest, src)
    monkeypatch.setattr(memory_ops, "copy", spy)
    tape.backward(loss=e)
    monkeypatch.setattr(memory_ops, "copy", real_copy)
    assert written == []
    assert [a.numpy().tobytes() for a in (x, v, e)] == before
    gx, gv = fd_grad(device)
    # the gradient reaches x0 and v0 through the saved values of every step
    np.testing.assert_allclose(tape.gradients[x].numpy(), gx, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tape.gradients[v].numpy(), gv, rtol=1e-6, atol=1e-8)
    assert tape.saved_bytes > 0
    tape.zero()
    tape.backward(loss=e)                # again: the same gradients, the same forward values
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
    assert [a.numpy().tobytes() for a in (x, v, e)] == before


def test_a_reader_thread_sees_only_the_final_values(device):
    tape = tg.Tape()
    x, v, e = simulate(X0, V0, device, tape)
    final = x.numpy().copy()
    stop = threading.Event()
    reads, stale = [0], [0]

    def reader():
        while not stop.is_set():
            seen = x.numpy()
            reads[0] += 1
            if not np.array_equal(seen, final):
                stale[0] += 1
    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(30):
            tape.zero()
            tape.backward(loss=e)
    finally:
        stop.set()
        t.join()
    assert reads[0] > 0 and stale[0] == 0, (reads[0], stale[0])


def test_a_write_made_during_backward_is_kept(device):
    """A write made to a forward array while backward runs (here by a callback the tape runs
    last, as another thread could at any time) is not reverted when backward ends."""
    x = tg.array(X0, dtype=F64, device=device, requires_grad=True)
    s = tg.zeros(1, dtype=F64, device=device, requires_grad=True)
    marker = tg.array(np.full(N, 7.0), dtype=F64, device=device)
    tape = tg.Tape()
    with tape:
        tape.record_func(lambda: tg.copy(x, marker), [s])
        for _ in range(3):
            tg.launch(square_inplace, dim=N, inputs=[x])
        tg.launch(sin_sum, dim=N, inputs=[x, s])
    tape.backward(loss=s)
    assert np.all(x.numpy() == 7.0)
    np.testing.assert_allclose(tape.gradients[x].numpy(), np.cos(X0 ** 8) * 8 * X0 ** 7, rtol=1e-12)


def test_views_and_record_func_still_exact(device):
    """Saved views of one allocation share one private copy; a record_func callback still sees
    its arrays' recorded values (the one place backward writes forward memory, and puts the
    final values back)."""
    base = tg.array(np.linspace(0.2, 1.1, 8), dtype=F64, device=device, requires_grad=True)
    s = tg.zeros(1, dtype=F64, device=device, requires_grad=True)
    seen = []
    tape = tg.Tape()
    with tape:
        tg.launch(sin_sum, dim=8, inputs=[base, s])
        tape.record_func(lambda: seen.append(base.numpy().copy()), [base])
        tg.launch(square_inplace, dim=4, inputs=[base[::2]])
        tg.launch(square_inplace, dim=3, inputs=[base[1:4]])
        tg.launch(sin_sum, dim=8, inputs=[base, s])
    final = base.numpy().copy()
    tape.backward(loss=s)
    b0 = np.linspace(0.2, 1.1, 8)
    np.testing.assert_array_equal(seen[0], b0)
    np.testing.assert_array_equal(base.numpy(), final)
    b1 = b0.copy()
    b1[::2] = b1[::2] ** 2
    d1 = np.ones(8)
    d1[::2] = 2 * b0[::2]
    b2 = b1.copy()
    b2[1:4] = b2[1:4] ** 2
    d2 = np.ones(8)
    d2[1:4] = 2 * b1[1:4]
    expect = np.cos(b0) + np.cos(b2) * d2 * d1
    np.testing.assert_allclose(base.grad.numpy(), expect, rtol=1e-12)


def test_more_records_after_a_backward_and_a_replaced_gradient(device):
    """The private copy is re-planned when the tape records more, and its views follow a
    gradient buffer replaced between backward calls."""
    x = tg.array(X0, dtype=F64, device=device, requires_grad=True)
    s = tg.zeros(1, dtype=F64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square_inplace, dim=N, inputs=[x])
        tg.launch(sin_sum, dim=N, inputs=[x, s])
    tape.backward(loss=s)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X0 ** 2) * 2 * X0, rtol=1e-12)
    with tape:
        tg.launch(square_inplace, dim=N, inputs=[x])
        tg.launch(sin_sum, dim=N, inputs=[x, s])
    x.grad = tg.zeros(N, dtype=F64, device=device)        # a new buffer: the views must use it
    tape.zero()
    tape.backward(loss=s)
    expect = np.cos(X0 ** 2) * 2 * X0 + np.cos(X0 ** 4) * 4 * X0 ** 3
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-12)
    np.testing.assert_array_equal(x.numpy(), (X0 ** 2) ** 2)


def test_backward_allocates_nothing(device, monkeypatch):
    """The private copy is allocated when recording stops (a captured backward must not
    allocate); saved_bytes counts it from then on."""
    array_module = sys.modules["tapegrad.array"]
    tape = tg.Tape()
    x, v, e = simulate(X0, V0, device, tape)
    copies = sum(s.nbytes for saves in tape._saves.values() for s in saves)
    assert copies > 0 and tape.saved_bytes == copies + x.nbytes + v.nbytes     # + one private copy of each
    real = array_module.alloc
    calls = []
    monkeypatch.setattr(array_module, "alloc", lambda *a, **k: calls.append(a) or real(*a, **k))
    tape.backward(loss=e)
    assert calls == []


def test_an_allocation_saved_after_a_backward_maps_earlier_records(device):
    """A record scanned by an earlier backward reads memory that gets its first saved copy only
    later: its adjoint then reads the private copy too (the saved values, not the final ones)."""
    x = tg.array(X0, dtype=F64, device=device, requires_grad=True)
    y = tg.array(V0 + 1.0, dtype=F64, device=device, requires_grad=True)
    s = tg.zeros(1, dtype=F64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sin_sum, dim=N, inputs=[y, s])
        tg.launch(square_inplace, dim=N, inputs=[x])
        tg.launch(sin_sum, dim=N, inputs=[x, s])
    tape.backward(loss=s)
    y0 = V0 + 1.0
    np.testing.assert_allclose(y.grad.numpy(), np.cos(y0), rtol=1e-12)
    with tape:
        tg.launch(square_inplace, dim=N, inputs=[y])
        tg.launch(sin_sum, dim=N, inputs=[y, s])
    tape.zero()
    tape.backward(loss=s)
    np.testing.assert_allclose(y.grad.numpy(), np.cos(y0) + np.cos(y0 ** 2) * 2 * y0, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X0 ** 2) * 2 * X0, rtol=1e-12)
    np.testing.assert_array_equal(y.numpy(), y0 ** 2)
