"""Issue 28 (arrays): Warp's indexed arrays on the host — ``tg.indexedarray(data, indices)`` and
``data[idx, ...]`` with int32 index arrays (each index array picks along its own dimension, as
Warp), gathers (``numpy``, ``list``, ``clone``, ``copy`` out), scatters (``fill_``, ``assign``,
``copy`` in), index checks, struct fields of (indexed) arrays checked on assignment as Warp."""
from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

import tapegrad as tg


def outer(np_data, *picks):
    """Warp's indexing: each pick indexes its own dimension (NumPy's np.ix_)."""
    return np_data[np.ix_(*picks)]


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_gather_and_scatter_by_index_arrays(device, ndim):
    np_data = np.arange(6 ** ndim, dtype=np.float64).reshape((6,) * ndim)
    data = tg.array(np_data, dtype=tg.float64, device=device)
    picks = np.array([1, 4, 5])
    idx = tg.array(picks, dtype=tg.int32, device=device)
    a = data[(idx,) * ndim]
    assert isinstance(a, tg.indexedarray) and not a.is_contiguous
    assert a.shape == (3,) * ndim and a.ndim == ndim and a.size == 3 ** ndim and a.dtype is tg.float64
    np.testing.assert_array_equal(a.numpy(), outer(np_data, *[picks] * ndim))
    b = tg.zeros_like(a)
    assert b.is_contiguous and isinstance(b, tg.array)
    tg.copy(b, a)
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    b.fill_(-1.0)
    tg.copy(a, b)                               # scatter back: only the picked elements change
    expected = np_data.copy()
    expected[np.ix_(*[picks] * ndim)] = -1.0
    np.testing.assert_array_equal(data.numpy(), expected)
    np.testing.assert_array_equal(tg.clone(a).numpy(), np.full((3,) * ndim, -1.0))


def test_mixed_keys_and_none_indices(device):
    np_data = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    data = tg.array(np_data, device=device)
    i = tg.array([0, 2], dtype=tg.int32, device=device)
    np.testing.assert_array_equal(data[1, i].numpy(), np_data[1][[0, 2]])        # an int drops its dimension
    np.testing.assert_array_equal(data[i, 1:3].numpy(), np_data[[0, 2]][:, 1:3])
    np.testing.assert_array_equal(data[:, :, i].numpy(), np_data[:, :, [0, 2]])
    ia = tg.indexedarray(data, [None, i])       # missing trailing entries are None
    assert ia.shape == (3, 2, 5) and ia.indices[0] is None and ia.indices[2] is None
    np.testing.assert_array_equal(ia.numpy(), np_data[:, [0, 2], :])
    assert tg.indexedarray3d(data, [i, i, i]).shape == (2, 2, 2)


def test_fill_assign_and_lists(device):
    data = tg.zeros((3, 4), dtype=tg.vec2, device=device)
    ia = tg.indexedarray(data, [tg.array([2, 0], dtype=tg.int32, device=device)])
    ia.fill_(tg.vec2(1.0, 2.0))
    got = data.numpy()
    assert got[0].tolist() == [[1, 2]] * 4 and got[2].tolist() == [[1, 2]] * 4 and not got[1].any()
    ia.assign(np.arange(16, dtype=np.float32).reshape(2, 4, 2))
    assert data.numpy()[2, 0].tolist() == [0, 1] and data.numpy()[0, 3].tolist() == [14, 15]
    ia.zero_()
    assert not data.numpy().any()
    assert len(ia.list()) == 8 and ia.list()[0] == tg.vec2(0, 0) and len(ia) == 2
    with pytest.raises(ValueError, match="expected shape"):
        ia.assign(tg.zeros(3, dtype=tg.vec2, device=device))


def test_bad_indices_are_errors():
    data = tg.zeros((3, 4))
    with pytest.raises(IndexError, match="index 3 of dimension 0 is out of range for the data's extent 3"):
        data[tg.array([0, 3], dtype=tg.int32)].numpy()      # Warp reads past the end here
    with pytest.raises(TypeError, match="Index array must use int32, got dtype int64"):
        tg.indexedarray(data, [tg.array([0], dtype=tg.int64)])
    with pytest.raises(ValueError, match="3 index arrays for data with 2 dimension"):
        tg.indexedarray(data, [None, None, None])
    with pytest.raises(RuntimeError, match="indexed or Fabric"):     # Warp's words
        tg.copy(tg.zeros(2), tg.indexedarray(tg.zeros(4), [tg.array([0, 1], dtype=tg.int32)]), src_offset=1, count=1)
    with pytest.raises(tg.CopyTypeError, match="Incompatible array data types"):
        tg.copy(tg.zeros(2, dtype=tg.float64), tg.indexedarray(tg.zeros(4), [tg.array([0, 1], dtype=tg.int32)]))


def test_annotations_and_introspection():
    assert repr(tg.indexedarray[tg.int32]) == "indexedarray(dtype=tapegrad.int32, ndim=1)"
    assert tg.indexedarray[float, Literal[3]].indexed == (tg.float32, 3)
    ann = tg.indexedarray(dtype=tg.float16)
    assert ann.ndim == 1 and ann.shape == (0,) and ann.data is None and ann.dtype is tg.float16
    assert tg.types.type_is_array(tg.indexedarray) and tg.types.is_array(ann)
    # Warp's annotation attributes, and the same subscript form for plain arrays
    assert tg.indexedarray[float].dtype is tg.float32 and tg.indexedarray[tg.float64, Literal[2]].ndim == 2
    assert tg.array[tg.float64, Literal[2]] == tg.array2d[tg.float64] and tg.array[float, 3].ndim == 3
    with pytest.raises(TypeError, match="Literal"):
        tg.array[float, "2"]


@tg.kernel
def fill_2d(a: tg.array[tg.float64, Literal[2]]):
    i, j = tg.tid()
    a[i, j] = tg.float64(i * 10 + j)


def test_array_subscript_with_literal_ndim_in_kernels(device):
    a = tg.zeros((2, 3), dtype=tg.float64, device=device)
    tg.launch(fill_2d, dim=a.shape, inputs=[a], device=device)
    np.testing.assert_array_equal(a.numpy(), [[0, 1, 2], [10, 11, 12]])


@tg.struct
class Holder:
    values: tg.array(dtype=tg.int32)
    grid: tg.array2d(dtype=tg.int32)
    picked: tg.indexedarray[tg.int32]
    picked2: tg.indexedarray[tg.int32, Literal[2]]


def test_struct_array_fields_are_checked_on_assignment():
    s = Holder()
    i = tg.array([0], dtype=tg.int32)
    with pytest.raises(TypeError, match="Struct field 'values' expects a Warp array, got list"):
        s.values = [1, 2, 3]
    with pytest.raises(TypeError, match="Struct field 'picked' expects a Warp indexed array, got list"):
        s.picked = [1, 2, 3]
    with pytest.raises(TypeError, match="Struct field 'values' expects dtype int32, got float32"):
        s.values = tg.zeros(1, dtype=tg.float32)
    with pytest.raises(TypeError, match="Struct field 'picked' expects dtype int32, got float32"):
        s.picked = tg.indexedarray1d(tg.zeros(1, dtype=tg.float32), [i])
    with pytest.raises(TypeError, match=r"Struct field 'grid' expects an array with 2 dimension\(s\), got 1"):
        s.grid = tg.zeros(1, dtype=tg.int32)
    with pytest.raises(TypeError, match=r"Struct field 'picked2' expects an array with 2 dimension\(s\), got 1"):
        s.picked2 = tg.indexedarray1d(tg.zeros(1, dtype=tg.int32), [i])
    s.values = tg.zeros(2, dtype=tg.int32)
    s.picked = tg.indexedarray1d(tg.zeros(3, dtype=tg.int32), [i])
    s.picked = None


@tg.kernel
def doubled(x: tg.array(dtype=tg.float64), a: tg.array(dtype=tg.float64)):
    i = tg.tid()
    a[i] = 2.0 * x[i]


@tg.kernel
def squared(a: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = a[i] * a[i]


def test_scatters_on_a_tape_consume_only_the_written_gradients(device):
    """A fill or copy into some elements stops the gradient there and nowhere else; a copy passes
    it to its source (each a recorded launch)."""
    x = tg.array([1.0, 2.0, 3.0], dtype=tg.float64, device=device, requires_grad=True)
    data = tg.zeros(3, dtype=tg.float64, device=device, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, device=device, requires_grad=True)
    src = tg.array([7.0], dtype=tg.float64, device=device, requires_grad=True)
    first = tg.array([0], dtype=tg.int32, device=device)
    for write in (lambda: data[first].fill_(5.0), lambda: tg.copy(data[first], src),
                  lambda: data[first].assign(src)):
        for a in (x, data, y, src):
            a.grad.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(doubled, dim=3, inputs=[x], outputs=[data], device=device)
            write()
            tg.launch(squared, dim=3, inputs=[data], outputs=[y], device=device)
        tape.backward(grads={y: np.ones(3)})
        # d y_k / d x_k = 8 x_k where data keeps 2 x_k; element 0 was overwritten
        np.testing.assert_array_equal(x.grad.numpy(), [0.0, 16.0, 24.0])
        assert src.grad.numpy().tolist() == ([0.0] if y.numpy()[0] == 25.0 else [14.0])


def test_gathers_on_a_tape_pass_the_gradient_back(device):
    data = tg.array([1.0, -2.0, 3.0, 0.5], dtype=tg.float64, device=device, requires_grad=True)
    ia = data[tg.array([3, 1], dtype=tg.int32, device=device)]
    dense = tg.zeros(2, dtype=tg.float64, device=device, requires_grad=True)
    y = tg.zeros(2, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.copy(dense, ia)
        tg.launch(squared, dim=2, inputs=[dense], outputs=[y], device=device)
    tape.backward(grads={y: np.ones(2)})
    np.testing.assert_array_equal(data.grad.numpy(), [0.0, -4.0, 0.0, 1.0])


@tg.kernel
def _sum_squares(a: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(loss, 0, a[i] * a[i])


def _fd_grad(f, x0: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of the scalar ``f`` at ``x0`` (float64)."""
    g = np.zeros_like(x0)
    for k in range(x0.size):
        e = np.zeros_like(x0)
        e[k] = h
        g[k] = (f(x0 + e) - f(x0 - e)) / (2 * h)
    return g


@pytest.mark.parametrize("gather", ["clone", "contiguous"])
def test_gathered_copies_carry_the_datas_gradient(device, gather):
    """tg.clone(ia) / ia.contiguous() of data that requires a gradient gives a copy that requires
    one (Warp's clone and empty_like default): the copy had none, so a loss computed from it
    passed nothing back to data (data.grad stayed 0, a silent wrong gradient)."""
    x0 = np.array([0.5, -1.5, 2.0, 3.0])
    picks = [3, 1, 3]

    def loss_of(x):
        data = tg.array(x, dtype=tg.float64, device=device, requires_grad=True)
        ia = data[tg.array(picks, dtype=tg.int32, device=device)]
        loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
        tape = tg.Tape()
        with tape:
            c = tg.clone(ia) if gather == "clone" else ia.contiguous()
            tg.launch(_sum_squares, dim=3, inputs=[c], outputs=[loss], device=device)
        return data, c, loss, tape

    data, c, loss, tape = loss_of(x0)
    assert c.requires_grad
    tape.backward(loss=loss)
    fd = _fd_grad(lambda x: float(loss_of(x)[2].numpy()[0]), x0)
    np.testing.assert_allclose(data.grad.numpy(), fd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fd, [0.0, -3.0, 0.0, 12.0], rtol=1e-7)
    # an explicit requires_grad still wins
    assert not tg.clone(data[tg.array([0], dtype=tg.int32, device=device)], requires_grad=False).requires_grad


def test_scatter_with_repeated_indices_is_refused(device):
    """assign / copy into an indexed array whose index array names an element twice: several
    source values for one element (which one lands depends on the threads' order; on a tape the
    gradient went to the other one: src.grad [2, 0, 3] where the forward kept src[1])."""
    data = tg.array(np.arange(4.0), dtype=tg.float64, device=device, requires_grad=True)
    src = tg.array([10.0, 20.0, 30.0], dtype=tg.float64, device=device, requires_grad=True)
    for picks in ([1, 1, 2], [3, 0, -1]):
        ia = data[tg.array(picks, dtype=tg.int32, device=device)]
        with pytest.raises(ValueError, match="dimension 0 selects element .* more than once"):
            ia.assign(src)
        with pytest.raises(ValueError, match="more than once"):
            tg.copy(ia, src)
        with pytest.raises(ValueError, match="more than once"):
            ia.assign([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(data.numpy(), np.arange(4.0))     # nothing written
    # a fill writes one value: repeats are fine; a gather reads each repeat (its adjoint adds)
    ia = data[tg.array([1, 1, 2], dtype=tg.int32, device=device)]
    ia.fill_(7.0)
    np.testing.assert_array_equal(data.numpy(), [0.0, 7.0, 7.0, 3.0])
    data2 = tg.array(np.zeros((2, 3)), dtype=tg.float64, device=device)
    data2[tg.array([1], dtype=tg.int32, device=device)].assign(np.ones((1, 3)))   # unindexed dims: distinct
    np.testing.assert_array_equal(data2.numpy(), [[0, 0, 0], [1, 1, 1]])


def test_host_indices_must_be_int32_integers():
    """Lists / NumPy indices are converted to int32 only where that changes nothing: 1.7 was
    truncated to 1 and 2**33 wrapped to 0 (a silent wrong selection); one index array not in a
    list is named as such (it was taken as one index array per element)."""
    data = tg.array(np.arange(6.0, dtype=np.float32))
    with pytest.raises(TypeError, match="dimension 0 must be integers, got float64"):
        tg.indexedarray(data, [np.array([1.7, 2.2])])
    with pytest.raises(TypeError, match="must be integers"):
        tg.indexedarray(data, [[1.0]])
    with pytest.raises(ValueError, match="index 8589934592 of dimension 0 does not fit"):
        tg.indexedarray(data, [[2 ** 33]])
    with pytest.raises(TypeError, match=r"expected a list .* pass \[indices\]"):
        tg.indexedarray(data, tg.array([1, 2], dtype=tg.int32))
    np.testing.assert_array_equal(tg.indexedarray(data, [np.array([5, -6], dtype=np.int64)]).numpy(), [5.0, 0.0])
    assert tg.indexedarray(data, [[]]).shape == (0,)


def test_copies_between_overlapping_selections_of_one_array(device):
    """A gather or scatter whose source and destination share memory (data[1:4] <- data[[0, 1, 2]]):
    one launch read elements another thread had already overwritten ([0, 0, 0, 0, 4, 5] for
    NumPy's [0, 0, 1, 2, 4, 5]); the source is gathered first now, and a tape's gradient through
    it matches finite differences."""
    def run(x0, record=False):
        d = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
        loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
        tape = tg.Tape()
        with tape:
            d[tg.array([1, 2, 3], dtype=tg.int32, device=device)].assign(d[tg.array([0, 1, 2], dtype=tg.int32,
                                                                                  device=device)])
            tg.copy(d[4:6], d[tg.array([3, 4], dtype=tg.int32, device=device)])
            tg.launch(_sum_squares, dim=6, inputs=[d], outputs=[loss], device=device)
        return d, loss, tape

    x0 = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 5.0])
    d, loss, tape = run(x0)
    ref = x0.copy()
    ref[[1, 2, 3]] = ref[[0, 1, 2]].copy()
    ref[4:6] = ref[[3, 4]].copy()
    np.testing.assert_array_equal(d.numpy(), ref)
    tape.backward(loss=loss)
    fd = _fd_grad(lambda x: float(run(x)[1].numpy()[0]), x0)
    np.testing.assert_allclose(d.grad.numpy(), fd, rtol=1e-7, atol=1e-8)


def test_clone_on_a_tape_starts_with_a_zero_gradient(device):
    """tg.clone(x) while a tape records copied x.grad into the clone, and the recorded copy then
    passed it back to x: x.grad [12, 14] where finite differences give [7, 9] (5 before, plus
    2x). Outside a tape the clone still carries a copy of the gradient (Warp's)."""
    x = tg.array([1.0, 2.0], dtype=tg.float64, device=device, requires_grad=True)
    x.grad.fill_(5.0)
    loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        y = tg.clone(x)
        tg.launch(_sum_squares, dim=2, inputs=[y], outputs=[loss], device=device)
    tape.backward(loss=loss)
    np.testing.assert_array_equal(x.grad.numpy(), [7.0, 9.0])
    assert tg.clone(x).grad.numpy().tolist() == [7.0, 9.0]
