"""Issue 28 (arrays): Warp's indexed arrays in kernels — parameters and struct fields annotated
``tg.indexedarray[dtype, Literal[n]]``: reads, writes and atomics through the index arrays,
``a.shape``, views (``a[i]`` of a 2-D one), generic (``Any``) parameters, and exact gradients
into the data's gradient under a Tape (float64 references)."""
from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def double_plus_one(a: tg.indexedarray[float, Literal[2]], expected: tg.array2d(dtype=float)):
    i, j = tg.tid()
    tg.expect_eq(a[i, j], expected[i, j])
    tg.expect_eq(a[i][j], a[i, j])                 # a view of the remaining dimension
    a[i, j] = 2.0 * a[i, j]
    tg.atomic_add(a, i, j, 1.0)


@tg.kernel
def shapes(a: tg.indexedarray[float, Literal[3]], out: tg.array(dtype=tg.int32)):
    out[0] = a.shape[0]
    out[1] = a.shape[1]
    out[2] = a.shape[2]
    v = a[1]
    out[3] = v.shape[0]
    out[4] = v.shape[1]
    out[5] = len(a)
    out[6] = a.shape[3]        # past ndim: 0, as Warp's


def test_reads_writes_and_atomics_through_indices(device):
    np_data = np.arange(40, dtype=np.float32).reshape(5, 8)
    data = tg.array(np_data, device=device)
    rows, cols = np.array([4, 0]), np.array([1, 6, 7])
    a = tg.indexedarray2d(data, [tg.array(rows, dtype=tg.int32, device=device),
                                 tg.array(cols, dtype=tg.int32, device=device)])
    expected = tg.array(np_data[np.ix_(rows, cols)], device=device)
    tg.launch(double_plus_one, dim=a.shape, inputs=[a, expected], device=device)
    want = np_data.copy()
    want[np.ix_(rows, cols)] = 2.0 * want[np.ix_(rows, cols)] + 1.0
    np.testing.assert_array_equal(data.numpy(), want)


def test_shapes_and_views(device):
    data = tg.zeros((10, 20, 30), dtype=float, device=device)
    i = tg.array([3, 1, 2, 0], dtype=tg.int32, device=device)
    out = tg.zeros(7, dtype=tg.int32, device=device)
    tg.launch(shapes, dim=1, inputs=[tg.indexedarray(data, [None, i, None]), out], device=device)
    assert out.numpy().tolist() == [10, 4, 30, 4, 30, 10, 0]


@tg.kernel
def inc(a: Any):
    i, j = tg.tid()
    a[i, j] = a[i, j] + 1


def test_generic_parameters_take_indexed_arrays(device):
    data = tg.zeros((5, 5), dtype=int, device=device)
    idx = tg.array([0, 4], dtype=tg.int32, device=device)
    ia = tg.indexedarray(data, [idx, idx])
    tg.launch(inc, dim=ia.shape, inputs=[ia], device=device)
    tg.launch(inc, dim=data.shape, inputs=[data], device=device)
    want = np.ones((5, 5), np.int32)
    want[np.ix_([0, 4], [0, 4])] = 2
    np.testing.assert_array_equal(data.numpy(), want)


@tg.struct
class Holder:
    picked: tg.indexedarray[tg.float64]


@tg.struct
class Outer:
    inner: Holder


@tg.kernel
def cube_through_struct(o: Outer, y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    v = o.inner.picked[i]
    y[i] = v * v * v


@tg.kernel
def square(a: tg.indexedarray[tg.float64], y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = a[i] * a[i]


@tg.kernel
def scatter_scaled(x: tg.array(dtype=tg.float64), a: tg.indexedarray[tg.float64]):
    i = tg.tid()
    a[i] = 3.0 * x[i]


@tg.kernel
def accumulate_squares(x: tg.array(dtype=tg.float64), a: tg.indexedarray[tg.float64]):
    i = tg.tid()
    tg.atomic_add(a, i, x[i] * x[i])


def test_gradients_flow_into_the_data_gradient(device):
    np_data = np.array([0.5, -1.5, 2.0, 3.0, -0.25, 1.0])
    data = tg.array(np_data, dtype=tg.float64, device=device, requires_grad=True)
    picks = np.array([4, 1, 2])
    ia = tg.indexedarray(data, [tg.array(picks, dtype=tg.int32, device=device)])
    y = tg.zeros(3, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square, dim=3, inputs=[ia], outputs=[y], device=device)
    tape.backward(grads={y: np.array([1.0, 2.0, -1.0])})
    want = np.zeros(6)
    want[picks] = 2.0 * np_data[picks] * np.array([1.0, 2.0, -1.0])
    np.testing.assert_array_equal(data.grad.numpy(), want)
    g = tape.gradients[ia]                     # the same selection of the data's gradient
    np.testing.assert_array_equal(g.numpy(), want[picks])
    tape.zero()
    assert not data.grad.numpy().any()

    # a scatter then a read: the written elements pass the gradient to x (and keep none)
    x = tg.array([1.0, -2.0, 0.5], dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(scatter_scaled, dim=3, inputs=[x], outputs=[ia], device=device)
        tg.launch(square, dim=3, inputs=[ia], outputs=[y], device=device)
    tape.backward(grads={y: np.ones(3)})
    np.testing.assert_array_equal(y.numpy(), 9.0 * x.numpy() ** 2)
    np.testing.assert_array_equal(x.grad.numpy(), 18.0 * x.numpy())
    assert not data.grad.numpy()[picks].any()

    # atomics: the data's gradient at the picked elements reaches x
    x.grad.zero_()
    data.grad.zero_()
    tape = tg.Tape()
    with tape:
        tg.launch(accumulate_squares, dim=3, inputs=[x], outputs=[ia], device=device)
    seed = np.arange(6, dtype=np.float64)
    tape.backward(grads={data: seed})
    np.testing.assert_array_equal(x.grad.numpy(), 2.0 * x.numpy() * seed[picks])


def test_gradients_through_struct_fields(device):
    np_data = np.array([1.5, -0.5, 2.0, 0.25])
    data = tg.array(np_data, dtype=tg.float64, device=device, requires_grad=True)
    h = Holder()
    h.picked = tg.indexedarray(data, [tg.array([3, 0], dtype=tg.int32, device=device)])
    o = Outer()
    o.inner = h
    y = tg.zeros(2, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(cube_through_struct, dim=2, inputs=[o], outputs=[y], device=device)
    tape.backward(grads={y: np.ones(2)})
    np.testing.assert_array_equal(y.numpy(), np_data[[3, 0]] ** 3)
    want = np.zeros(4)
    want[[3, 0]] = 3.0 * np_data[[3, 0]] ** 2
    np.testing.assert_array_equal(data.grad.numpy(), want)


def test_launch_checks_the_indexed_type():
    ia = tg.indexedarray(tg.zeros(4, dtype=tg.float32), [tg.array([0, 1], dtype=tg.int32)])
    with pytest.raises(TypeError, match=r"expected a tg.indexedarray of float64 with 1 dimension\(s\), got one of "
                                        r"float32"):
        tg.launch(square, dim=2, inputs=[ia, tg.zeros(2, dtype=tg.float64)])
    with pytest.raises(TypeError, match="expected a tg.indexedarray"):
        tg.launch(square, dim=2, inputs=[tg.zeros(2, dtype=tg.float64), tg.zeros(2, dtype=tg.float64)])


@tg.kernel
def read_through(a: tg.indexedarray[float], out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = a[i]


@tg.kernel
def read_shifted(a: tg.indexedarray[float], out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = a[i + 1]        # not a plain tid() index: the launch's grid check cannot see it


def test_debug_builds_check_index_arrays_and_mapped_indices():
    data = tg.array(np.arange(6, dtype=np.float32))
    out = tg.zeros(3)
    old = tg.config.mode
    tg.config.mode = "debug"
    try:
        ia = tg.indexedarray(data, [tg.array([5, 0], dtype=tg.int32)])
        tg.launch(read_through, dim=2, inputs=[ia, out])
        assert out.numpy().tolist() == [5.0, 0.0, 0.0]
        with pytest.raises(tg.KernelIndexError, match=r"index-array read .* at index 2 is out of range for its "
                                                      r"shape \(2,\)"):
            tg.launch(read_shifted, dim=2, inputs=[ia, out])      # past the index array
        with pytest.raises(ValueError, match="larger than argument 'a' allows"):
            tg.launch(read_through, dim=3, inputs=[ia, out])      # the launch's grid check, first
        with pytest.raises(tg.KernelIndexError, match=r"read .* at index 9 is out of range for its shape \(6,\)"):
            tg.launch(read_through, dim=2, inputs=[tg.indexedarray(data, [tg.array([9, 0], dtype=tg.int32)]), out])
        tg.launch(read_through, dim=3, inputs=[tg.indexedarray(data, [None]), out])   # not indexed: no lookup
        assert out.numpy().tolist() == [0.0, 1.0, 2.0]
    finally:
        tg.config.mode = old


@tg.kernel
def gather_cubed(a: tg.indexedarray[tg.float64, Literal[2]], out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    v = a[i][1]                                   # through a view
    out[i] = v * v * a[i, 0]


@tg.kernel
def scatter_sine(x: tg.array(dtype=tg.float64), a: tg.indexedarray[tg.float64, Literal[2]]):
    i = tg.tid()
    a[i, 1] = tg.sin(x[i])
    tg.atomic_add(a, i, 0, x[i] * x[i])


def _indexed_run(x0, d0, rows, device):
    x = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
    data = tg.array(d0, dtype=tg.float64, device=device, requires_grad=True)
    ia = tg.indexedarray2d(data, [tg.array(rows, dtype=tg.int32, device=device)])
    out = tg.zeros(len(rows), dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(scatter_sine, dim=len(rows), inputs=[x], outputs=[ia], device=device)
        tg.launch(gather_cubed, dim=len(rows), inputs=[ia], outputs=[out], device=device)
    return x, data, ia, out, tape


def test_forward_mode_through_indexed_arrays(device):
    """Tangents through indexed arrays (a tangent launch, Tape.jvp, Tape.hvp): the tangent build
    did not compile (tg::index_map had no dual-array overload: a CompileError), and the tape's
    tangent struct of an indexed array was an annotation-only float32 one (a TypeError)."""
    rows = np.array([3, 0, -1], dtype=np.int32)
    rng = np.random.default_rng(7)
    x0, d0 = rng.normal(size=3), rng.normal(size=(5, 2))
    ux, ud = rng.normal(size=3), rng.normal(size=(5, 2))
    h = 1e-6

    def outputs(x, d):
        return _indexed_run(x, d, rows, device)[3].numpy().copy()

    fd = (outputs(x0 + h * ux, d0 + h * ud) - outputs(x0 - h * ux, d0 - h * ud)) / (2 * h)
    x, data, ia, out, tape = _indexed_run(x0, d0, rows, device)
    tans = tape.jvp({x: tg.array(ux, dtype=tg.float64, device=device),
                     data: tg.array(ud, dtype=tg.float64, device=device)})
    np.testing.assert_allclose(tans[out].numpy(), fd, rtol=1e-6, atol=1e-8)

    # a tangent launch given the tangent as an indexed array over the data's tangent
    d = tg.array(d0, dtype=tg.float64, device=device)
    ia2 = tg.indexedarray2d(d, [tg.array(rows, dtype=tg.int32, device=device)])
    tia = tg.indexedarray2d(tg.array(ud, dtype=tg.float64, device=device),
                            [tg.array(rows, dtype=tg.int32, device=device)])
    o, to = tg.zeros(3, dtype=tg.float64, device=device), tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(gather_cubed, dim=3, inputs=[ia2], outputs=[o], tangent=True, tan_inputs=[tia], tan_outputs=[to],
              device=device)
    r = d0[rows]
    dr = ud[rows]
    np.testing.assert_allclose(to.numpy(), 2 * r[:, 1] * dr[:, 1] * r[:, 0] + r[:, 1] ** 2 * dr[:, 0], rtol=1e-12)
    tg.launch(gather_cubed, dim=3, inputs=[ia2], outputs=[o], tangent=True, tan_inputs=[None], tan_outputs=[to],
              device=device)                                   # None: a zero tangent
    np.testing.assert_array_equal(to.numpy(), np.zeros(3))

    # a Hessian-vector product of sum(out) with respect to x
    def grad_x(xv):
        xx, _, _, o2, t2 = _indexed_run(xv, d0, rows, device)
        t2.backward(grads={o2: np.ones(3)})
        return xx.grad.numpy().copy()

    x, data, ia, out, tape = _indexed_run(x0, d0, rows, device)
    loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
    with tape:
        tg.launch(_sum_into, dim=3, inputs=[out], outputs=[loss], device=device)
    hv = tape.hvp(loss, {x: tg.array(ux, dtype=tg.float64, device=device)})
    np.testing.assert_allclose(hv[x].numpy(), (grad_x(x0 + h * ux) - grad_x(x0 - h * ux)) / (2 * h),
                               rtol=1e-5, atol=1e-7)


@tg.kernel
def _sum_into(a: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    tg.atomic_add(loss, 0, a[tg.tid()])


@tg.struct
class _Weights:
    w: tg.array(dtype=tg.float64)


@tg.kernel
def weighted_gather(x: tg.array(dtype=tg.float64), a: tg.indexedarray[tg.float64], s: _Weights,
                    out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    out[i] = a[i] * x[i] * s.w[i]


def test_jacobians_leave_the_callers_gradients_alone(device):
    """jacobian() of a kernel taking an indexed array or a struct of arrays: each row's adjoint
    launch accumulated into the data's and the struct arrays' own .grad (data.grad [0, 2, 0, 1]
    after the call: the caller's gradients changed); naming such an argument in input_indices
    returned {} (nothing computed, silently)."""
    from tapegrad.autograd import jacobian, jacobian_fd, jacobian_fwd
    data = tg.array(np.arange(4.0), dtype=tg.float64, device=device, requires_grad=True)
    ia = data[tg.array([3, 1], dtype=tg.int32, device=device)]
    s = _Weights()
    s.w = tg.array([0.5, -2.0], dtype=tg.float64, device=device, requires_grad=True)
    x = tg.array([1.0, 2.0], dtype=tg.float64, device=device, requires_grad=True)
    out = tg.zeros(2, dtype=tg.float64, device=device)
    for fn in (jacobian, jacobian_fwd, jacobian_fd):
        J = fn(weighted_gather, 2, inputs=[x, ia, s], outputs=[out], device=device)
        np.testing.assert_allclose(J[(0, 0)], np.diag([3.0 * 0.5, 1.0 * -2.0]), rtol=1e-8, atol=1e-9)
        assert set(J) == {(0, 0)}
        np.testing.assert_array_equal(data.grad.numpy(), np.zeros(4))
        np.testing.assert_array_equal(s.w.grad.numpy(), np.zeros(2))
        for bad in (1, 2):
            with pytest.raises(ValueError, match=rf"{fn.__name__}: input_indices names argument {bad}, a \w+, but "
                                                 r"Jacobians are taken with respect to floating-point tapegrad arrays"):
                fn(weighted_gather, 2, inputs=[x, ia, s], outputs=[out], device=device, input_indices=[bad])


@tg.kernel
def _squares(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def _triple_in_place(a: tg.indexedarray[tg.float64]):
    i = tg.tid()
    a[i] = a[i] * 3.0


@tg.kernel
def _dot_into(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(loss, 0, x[i] * y[i])


def test_in_place_writes_through_an_indexed_array_on_a_tape(device):
    """A launch writing data in place through an indexed array after another read it: the tape
    replays the adjoint on a private copy, rebuilt field by field; it called
    indexedarray(data=..., index0=...) and backward raised TypeError."""
    def run(x0):
        d = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
        y = tg.zeros(4, dtype=tg.float64, device=device, requires_grad=True)
        loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
        ia = d[tg.array([2, 0], dtype=tg.int32, device=device)]
        tape = tg.Tape()
        with tape:
            tg.launch(_squares, 4, inputs=[d], outputs=[y], device=device)
            tg.launch(_triple_in_place, 2, inputs=[ia], device=device)
            tg.launch(_dot_into, 4, inputs=[d, y], outputs=[loss], device=device)
        return d, loss, tape

    x0 = np.array([0.5, -1.0, 2.0, 1.5])
    d, loss, tape = run(x0)
    tape.backward(loss=loss)
    h = 1e-6
    fd = [(run(x0 + h * e)[1].numpy()[0] - run(x0 - h * e)[1].numpy()[0]) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(d.grad.numpy(), fd, rtol=1e-7, atol=1e-8)


@tg.kernel
def _sum_through(a: tg.indexedarray[tg.float32], out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    tg.atomic_add(out, 0, a[i])


@tg.kernel
def _copy_rows(a: tg.indexedarray[tg.float32, Literal[2]], out: tg.array2d(dtype=tg.float32)):
    i, j = tg.tid()
    out[i, j] = a[i, j]


def test_grid_past_the_indexed_shape_is_refused(device):
    """A grid larger than an indexed array's shape along a dimension the kernel indexes by tid()
    unguarded read past the index array (garbage indices: a wrong sum at dim=3, SIGSEGV at
    dim=1000); the launch refuses it as for a plain array (the indexed shape bounds it)."""
    data = tg.array(np.arange(10, dtype=np.float32), device=device)
    ia = data[tg.array([9, 1], dtype=tg.int32, device=device)]
    out = tg.zeros(1, device=device)
    tg.launch(_sum_through, dim=2, inputs=[ia, out], device=device)
    assert out.numpy().tolist() == [10.0]
    for dim in (3, 1000):
        with pytest.raises(ValueError, match=r"dim=\(\d+,\) is larger than argument 'a' allows: .* dimension 0 of 'a' "
                                             r"\(length 2\)"):
            tg.launch(_sum_through, dim=dim, inputs=[ia, out], device=device)
    d2 = tg.array(np.arange(20, dtype=np.float32).reshape(4, 5), device=device)
    ia2 = d2[tg.array([3, 0], dtype=tg.int32, device=device), :]
    o2 = tg.zeros((2, 5), device=device)
    tg.launch(_copy_rows, dim=(2, 5), inputs=[ia2, o2], device=device)
    np.testing.assert_array_equal(o2.numpy(), np.arange(20, dtype=np.float32).reshape(4, 5)[[3, 0]])
    for dim, k, n in (((2, 6), 1, 5), ((3, 5), 0, 2)):
        with pytest.raises(ValueError, match=rf"dimension {k} of 'a' \(length {n}\)"):
            tg.launch(_copy_rows, dim=dim, inputs=[ia2, tg.zeros(dim, device=device)], device=device)
    cmd = tg.launch(_sum_through, dim=2, inputs=[ia, out], device=device, record_cmd=True)
    cmd.set_dim(5)
    with pytest.raises(ValueError, match="larger than argument 'a' allows"):
        cmd.launch()
