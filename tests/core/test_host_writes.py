"""Host writes under a recording Tape are part of the program (issue 23 item 1, SPEC B19, s27 a).

``zero_``, ``fill_``, ``assign``, ``a[k] = v`` and ``tg.copy`` into memory the tape has seen are
recorded with exact adjoints: an overwrite stops the gradient to the values it replaced, a copy
passes the destination's gradient to the source, and values an earlier adjoint still needs are
saved. Each gradient is checked against float64 central finite differences of the whole program
(before the fix a ``zero_`` between two launches gave ``3x^2 + 2x`` instead of ``3x^2``).
"""
import typing
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.recording import FillRecord

F64 = tg.float64


@pytest.fixture(autouse=True)
def _default_cpu():
    with tg.ScopedDevice("cpu"):
        yield


@tg.kernel
def sq_sum(x: tg.array(dtype=typing.Any), f: tg.array(dtype=typing.Any)):
    i = tg.tid()
    tg.atomic_add(f, 0, x[i] * x[i])


@tg.kernel
def cube_sum(x: tg.array(dtype=typing.Any), f: tg.array(dtype=typing.Any)):
    i = tg.tid()
    tg.atomic_add(f, 0, x[i] * x[i] * x[i])


@tg.kernel
def sin_into(x: tg.array(dtype=typing.Any), y: tg.array(dtype=typing.Any)):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * x[i]


@tg.kernel
def grid_sum(m: tg.array(dtype=F64, ndim=2), f: tg.array(dtype=F64)):
    i, j = tg.tid()
    tg.atomic_add(f, 0, m[i, j] * m[i, j] * F64(i + 2 * j + 1))


@tg.kernel
def vec_sum(x: tg.array(dtype=tg.vec3d), f: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(f, 0, tg.dot(x[i], x[i]) * x[i][0])


def fd(program, x0, eps=1e-6):
    """Central differences of ``program(x) -> loss`` (float64), run without a tape."""
    g = np.zeros_like(x0)
    for idx in np.ndindex(x0.shape):
        p, m = x0.copy(), x0.copy()
        p[idx] += eps
        m[idx] -= eps
        g[idx] = (program(p) - program(m)) / (2 * eps)
    return g


def taped(program_arrays, x0, dtype=F64, device="cpu"):
    """``(x.grad, x, tape)`` of ``program_arrays(x) -> loss array`` recorded on a tape."""
    x = tg.array(x0, dtype=dtype, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        loss = program_arrays(x)
    tape.backward(loss=loss)
    return x.grad.numpy().copy(), x, tape


def both(program_arrays, x0, device, dtype=F64, rtol=1e-6):
    """The tape's gradient against central differences of the same program in float64."""
    ref_dtype = tg.vec3d if dtype is tg.vec3d else F64      # the differences in float64

    def value(xn):
        x = tg.array(xn, dtype=ref_dtype, device=device)
        return float(program_arrays(x).numpy()[0])
    g, x, tape = taped(program_arrays, x0, dtype, device)
    ref = fd(value, x0)
    np.testing.assert_allclose(g, ref, rtol=rtol, atol=rtol)
    return g, x, tape


X0 = np.array([0.7, 1.3, -0.4, 2.1])


def _loss_like(x):
    return tg.zeros(1, dtype=x.dtype, device=x.device, requires_grad=x.requires_grad)


@pytest.mark.parametrize("dtype", [tg.float32, F64])
@pytest.mark.parametrize("clear", ["zero_", "fill_"])
def test_clear_between_two_launches(clear, dtype, device):
    """The s27 (a) program: f accumulates x^2, is cleared, then accumulates x^3."""
    def prog(x):
        f = _loss_like(x)
        tg.launch(sq_sum, dim=4, inputs=[x], outputs=[f])
        f.zero_() if clear == "zero_" else f.fill_(5.0)
        tg.launch(cube_sum, dim=4, inputs=[x], outputs=[f])
        return f
    g, _, tape = both(prog, X0, device, dtype, rtol=1e-4 if dtype is tg.float32 else 1e-6)
    np.testing.assert_allclose(g, 3 * X0 ** 2, rtol=1e-5)          # not 3x^2 + 2x
    assert sum(isinstance(r, FillRecord) for r in tape.records) == 1


@pytest.mark.parametrize("dtype", [tg.float32, F64])
def test_fill_of_an_input_a_launch_read_saves_its_values(dtype, device):
    """y = sin(x) x; x.fill_(0.5); loss = sum(y^2) + sum(x^3): the first adjoint needs the
    values x had (saved), and nothing flows to them through the second launch."""
    def prog(x):
        y = tg.zeros(4, dtype=x.dtype, device=x.device, requires_grad=x.requires_grad)
        f = _loss_like(x)
        tg.launch(sin_into, dim=4, inputs=[x], outputs=[y])
        x.fill_(0.5)
        tg.launch(sq_sum, dim=4, inputs=[y], outputs=[f])
        tg.launch(cube_sum, dim=4, inputs=[x], outputs=[f])
        return f
    g, x, tape = both(prog, X0, device, dtype, rtol=1e-4 if dtype is tg.float32 else 1e-6)
    assert np.all(x.numpy() == 0.5)                                  # the forward's final values
    assert tape.saved_bytes > 0


def test_assign_cuts_the_gradient_and_passes_it_to_the_source(device):
    """f += x^2; f.assign(z) with z = x^3 (a recorded copy); f += x."""
    def prog(x):
        f = _loss_like(x)
        z = _loss_like(x)
        tg.launch(sq_sum, dim=4, inputs=[x], outputs=[f])
        tg.launch(cube_sum, dim=4, inputs=[x], outputs=[z])
        f.assign(z)
        tg.launch(sq_sum, dim=4, inputs=[x], outputs=[f])
        return f
    g, _, _ = both(prog, X0, device)
    np.testing.assert_allclose(g, 3 * X0 ** 2 + 2 * X0, rtol=1e-12)


@pytest.mark.parametrize("value", ["scalar", "array", "numpy"])
def test_setitem_with_a_slice(value, device):
    """y = sin(x) x; y[1:3] = ...; loss = sum(y^2): the overwritten entries give no gradient
    (or pass it to the array assigned)."""
    def prog(x):
        y = tg.zeros(4, dtype=F64, device=x.device, requires_grad=x.requires_grad)
        w = tg.zeros(2, dtype=F64, device=x.device, requires_grad=x.requires_grad)
        f = _loss_like(x)
        tg.launch(sin_into, dim=4, inputs=[x], outputs=[y])
        if value == "scalar":
            y[1:3] = 0.25
        elif value == "numpy":
            y[1:3] = np.array([0.25, -1.0])
        else:
            tg.launch(sin_into, dim=2, inputs=[x[2:4]], outputs=[w])
            y[1:3] = w
        tg.launch(sq_sum, dim=4, inputs=[y], outputs=[f])
        return f
    g, _, _ = both(prog, X0, device)
    if value != "array":
        assert g[1] == 0 and g[2] == 0


def test_int_index_setitem_and_a_strided_view(device):
    def prog(x):
        y = tg.zeros(4, dtype=F64, device=x.device, requires_grad=x.requires_grad)
        f = _loss_like(x)
        tg.launch(sin_into, dim=4, inputs=[x], outputs=[y])
        y[3] = 2.0
        y[::2].zero_()
        tg.launch(cube_sum, dim=4, inputs=[y], outputs=[f])
        return f
    g, _, _ = both(prog, X0, device)
    assert g[0] == 0 and g[2] == 0 and g[3] == 0 and g[1] != 0


@pytest.mark.parametrize("dtype", [tg.float32, F64])
def test_copy_into_a_view(dtype, device):
    """tg.copy(m[1], z) into a row of a 2-D array a launch read before, and into a transposed
    view; everything against finite differences."""
    def prog(x):
        m = tg.zeros((3, 4), dtype=x.dtype, device=x.device, requires_grad=x.requires_grad)
        z = tg.zeros(4, dtype=x.dtype, device=x.device, requires_grad=x.requires_grad)
        f = _loss_like(x)
        for r in range(3):
            tg.copy(m[r], x)
        tg.launch(sin_into, dim=4, inputs=[x], outputs=[z])
        tg.launch(sq_sum, dim=4, inputs=[m[1]], outputs=[f])      # reads row 1...
        tg.copy(m[1], z)                                         # ...then it is overwritten
        tg.launch(cube_sum, dim=4, inputs=[m[1]], outputs=[f])
        tg.copy(m.transpose()[0], z[1:4])                        # column 0 (strided)
        tg.launch(sq_sum, dim=3, inputs=[m.transpose()[0]], outputs=[f])
        return f
    both(prog, X0, device, dtype, rtol=2e-4 if dtype is tg.float32 else 1e-6)


def test_2d_zero_of_a_block_and_vector_dtype(device):
    m0 = np.random.default_rng(3).uniform(0.5, 1.5, (3, 4))

    def prog(m):
        f = _loss_like(m)
        tg.launch(grid_sum, dim=(3, 4), inputs=[m], outputs=[f])
        m[1:3, 1:3].zero_()
        tg.launch(grid_sum, dim=(3, 4), inputs=[m], outputs=[f])
        return f
    g, m, _ = both(prog, m0, device)
    assert np.all(m.numpy()[1:3, 1:3] == 0)

    v0 = np.random.default_rng(4).uniform(0.5, 1.5, (3, 3))

    def vprog(v):
        f = _loss_like(tg.zeros(1, dtype=F64, device=v.device, requires_grad=v.requires_grad))
        tg.launch(vec_sum, dim=3, inputs=[v], outputs=[f])
        v[1:2].fill_(tg.vec3d(0.5, 0.25, 2.0))
        tg.launch(vec_sum, dim=3, inputs=[v], outputs=[f])
        return f
    both(vprog, v0, device, tg.vec3d)


def test_retain_grad_keeps_the_gradient_through_a_fill(device):
    x = tg.array(X0, dtype=F64, device=device, requires_grad=True)
    f = tg.zeros(1, dtype=F64, device=device, requires_grad=True, retain_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=4, inputs=[x], outputs=[f])
        f.zero_()
        tg.launch(cube_sum, dim=4, inputs=[x], outputs=[f])
    tape.backward(loss=f)
    np.testing.assert_allclose(x.grad.numpy(), 3 * X0 ** 2 + 2 * X0)   # Warp's flag, as for a store


def test_writes_to_memory_the_tape_never_saw_are_not_recorded(device):
    """Arrays created and filled inside the tape (tg.full, a parameter set up in place) keep
    the gradient of the values filled in; an int array's fill changes no gradient."""
    tape = tg.Tape()
    with tape:
        x = tg.full(4, 0.5, dtype=F64, device=device, requires_grad=True)
        x.fill_(1.5)
        k = tg.zeros(4, dtype=tg.int32, device=device)
        k.fill_(3)
        f = tg.zeros(1, dtype=F64, device=device, requires_grad=True)
        tg.launch(cube_sum, dim=4, inputs=[x], outputs=[f])
        k.zero_()                                   # no gradient, no reader: nothing recorded
    assert not any(isinstance(r, FillRecord) for r in tape.records)
    tape.backward(loss=f)
    np.testing.assert_allclose(x.grad.numpy(), 3 * 1.5 ** 2)


def test_view_made_before_the_base_had_a_gradient(device):
    """A view taken before requires_grad was set has no .grad of its own: its zero_ still stops
    the gradient of the base's elements it overwrote."""
    y = tg.zeros(4, dtype=F64, device=device)
    head = y[0:2]
    y.requires_grad = True
    x = tg.array(X0, dtype=F64, device=device, requires_grad=True)
    f = tg.zeros(1, dtype=F64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sin_into, dim=4, inputs=[x], outputs=[y])
        head.zero_()
        tg.launch(sq_sum, dim=4, inputs=[y], outputs=[f])
    tape.backward(loss=f)
    expect = 2 * np.sin(X0) * X0 * (np.cos(X0) * X0 + np.sin(X0))
    expect[:2] = 0
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-12)


def test_host_writes_show_in_the_graph_and_warn_without_saving(device):
    x = tg.array(X0, dtype=F64, device=device, requires_grad=True)
    y = tg.zeros(4, dtype=F64, device=device, requires_grad=True)
    tape = tg.Tape(save_overwritten=False)
    with tape:
        tg.launch(sin_into, dim=4, inputs=[x], outputs=[y])
        with pytest.warns(tg.TapeWarning, match="zero_"):
            x.zero_()
    assert "zero_" in tape.visualize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tape2 = tg.Tape()
        with tape2:
            tg.launch(sin_into, dim=4, inputs=[x], outputs=[y])
            x.zero_()                               # saved: no warning


@pytest.mark.parametrize("write", ["setitem", "strided setitem", "fill_ of a view", "zero_ strided"])
def test_host_write_into_a_clone_made_under_the_tape(write, device):
    """A clone made while the tape records has its gradient before the recorded copy, so the tape
    has seen it: a later host write into it is recorded (before, the clone's gradient was set
    after the copy's record, the write was not recorded, and the gradient of the new values went
    back to the source: x.grad[1] = 3 * 0.3^2 instead of 0)."""
    def program(x):
        c = tg.clone(x)
        if write == "setitem":
            c[1] = 0.3
        elif write == "strided setitem":
            c[1::2][0] = 0.3
        elif write == "fill_ of a view":
            c[1:3].fill_(0.3)
        else:
            c[1::2].zero_()
        f = _loss_like(x)
        tg.launch(cube_sum, dim=4, inputs=[c], outputs=[f])
        return f
    g, x, tape = both(program, X0, device)
    assert g[1] == 0.0
    assert any(isinstance(r, FillRecord) for r in tape.records)


def test_array_of_an_array_with_a_gradient_is_a_recorded_copy(device):
    """``tg.array(x)`` copying an array with a gradient while a tape records is a recorded copy:
    the gradient passes back to ``x`` (an unrecorded copy gave x.grad = 0); a conversion to
    another dtype, which the tape cannot differentiate, raises; ``copy=False`` still aliases."""
    def program(x):
        c = tg.array(x, requires_grad=True)
        f = _loss_like(x)
        tg.launch(cube_sum, dim=4, inputs=[c], outputs=[f])
        return f
    g, x, tape = both(program, X0, device)
    np.testing.assert_allclose(g, 3 * X0 ** 2, rtol=1e-12)
    with tg.Tape():
        assert tg.array(x, copy=False).ptr == x.ptr
        with pytest.raises(RuntimeError, match=r"array\(data=...\).*float32.*tg.clone"):
            tg.array(x, dtype=tg.float32)
