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
            tg.launch(read_through, dim=3, inputs=[ia, out])      # past the index array
        with pytest.raises(tg.KernelIndexError, match=r"read .* at index 9 is out of range for its shape \(6,\)"):
            tg.launch(read_through, dim=2, inputs=[tg.indexedarray(data, [tg.array([9, 0], dtype=tg.int32)]), out])
        tg.launch(read_through, dim=3, inputs=[tg.indexedarray(data, [None]), out])   # not indexed: no lookup
        assert out.numpy().tolist() == [0.0, 1.0, 2.0]
    finally:
        tg.config.mode = old
