"""In-place kernels whose arguments or locals alias one memory on a Tape: an array passed with a
view of it (``k(m, m[0])``), and a view made inside the kernel (``row = m[i]``).

The tape decides from the kernel's load/store order whether an adjoint needs an array's values
from before or after the launch. Arguments over one memory were grouped by identity and views
made in the kernel were not followed, so a load through one name after a store through the
other counted as a load "before": the adjoint read the old values, a silent wrong gradient.
Now such arguments are one group (as the same array passed twice) and in-kernel views share
their array's group: a kernel that only reads back what it wrote is exact, one that reads an
array both before and after writing it gets the tape's ``TapeWarning``. References: float64
central finite differences of the whole recorded computation, written out in NumPy.
"""
import warnings

import numpy as np
import pytest

import tapegrad as tg

F64 = tg.float64
A1 = tg.array(dtype=F64)
A2 = tg.array2d(dtype=F64)


@tg.kernel
def _write_row_then_read_view(x: A1, m: A2, r: A1, out: A1):
    i = tg.tid()
    m[0, i] = x[i] * x[i]
    out[i] = r[i] * r[i] * x[i]


@tg.kernel
def _weighted_squares(m: A2, out: A1):
    i, j = tg.tid()
    tg.atomic_add(out, 0, m[i, j] * m[i, j] * F64(i + j + 1))


@tg.kernel
def _cubes(x: A1, out: A1):
    i = tg.tid()
    tg.atomic_add(out, 0, x[i] * x[i] * x[i])


def _program(x, m, row):
    """out = r * r * x with r the chosen row of m after m[0] = x * x; loss = sum (i+j+1) m^2 + sum out^3."""
    out = tg.zeros(2, dtype=F64, requires_grad=True)
    tg.launch(_write_row_then_read_view, dim=2, inputs=[x, m, m[row], out])
    loss = tg.zeros(1, dtype=F64, requires_grad=True)
    tg.launch(_weighted_squares, dim=(2, 2), inputs=[m, loss])
    tg.launch(_cubes, dim=2, inputs=[out, loss])
    return loss


def _loss_np(x, m0, row):
    m = m0.copy()
    m[0] = x * x
    out = m[row] * m[row] * x
    w = np.add.outer(np.arange(2), np.arange(2)) + 1
    return float((w * m * m).sum() + (out ** 3).sum())


@pytest.mark.parametrize("row", [0, 1])
def test_a_view_argument_read_after_its_base_is_written(row):
    x0 = np.array([0.3, -0.8])
    m0 = np.array([[0.3, -0.8], [1.2, 0.5]])
    x = tg.array(x0, dtype=F64, requires_grad=True)
    m = tg.array(m0, dtype=F64, requires_grad=True)
    tape = tg.Tape()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tg.TapeWarning)      # exact: nothing to warn about
        with tape:
            mc = tg.clone(m)
            loss = _program(x, mc, row)
    assert loss.numpy()[0] == pytest.approx(_loss_np(x0, m0, row), rel=1e-12)
    tape.backward(loss=loss)
    h = 1e-6
    for arr, v0 in ((x, x0), (m, m0)):
        fd = np.zeros_like(v0)
        for k in np.ndindex(*v0.shape):
            e = np.zeros_like(v0)
            e[k] = h
            args = [(x0 + e, m0), (x0 - e, m0)] if arr is x else [(x0, m0 + e), (x0, m0 - e)]
            fd[k] = (_loss_np(*args[0], row) - _loss_np(*args[1], row)) / (2 * h)
        np.testing.assert_allclose(arr.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


@tg.kernel
def _view_then_base(m: A2, out: A1):
    i = tg.tid()
    row = m[i]
    row[0] = m[i, 0] * m[i, 0] * m[i, 1]
    out[i] = m[i, 0] * m[i, 0]


@tg.kernel
def _base_and_view_argument(m: A2, r: A1, out: A1):
    i = tg.tid()
    m[0, i] = m[0, i] * r[i]
    out[i] = r[i] * m[0, i]


def test_reading_before_and_after_a_write_through_an_alias_warns():
    """A kernel reading the same memory before and after writing it, through two names (an
    in-kernel view and its array; an array and a view argument), cannot be served by one
    saved copy: the tape warns (a silent wrong gradient before)."""
    m = tg.array(np.array([[0.3, -0.8], [1.2, 0.5]]), dtype=F64, requires_grad=True)
    out = tg.zeros(2, dtype=F64, requires_grad=True)
    with tg.Tape():
        with pytest.warns(tg.TapeWarning, match=r"_view_then_base.*'m' both before and after"):
            tg.launch(_view_then_base, dim=2, inputs=[m, out])
    m2 = tg.array(np.array([[0.3, -0.8], [1.2, 0.5]]), dtype=F64, requires_grad=True)
    with tg.Tape():
        with pytest.warns(tg.TapeWarning, match=r"_base_and_view_argument.*both before and after"):
            tg.launch(_base_and_view_argument, dim=2, inputs=[m2, m2[0], out])


@tg.kernel
def _mix(a: A1, b: A1, c: A1):
    i = tg.tid()
    c[i] = tg.sin(a[i]) * b[i] + c[i] * 0.5


def _two_readers_then_strided_write(xs):
    """w0[::2] and w0[0:3] read (their values needed), then w0[1::2] written: the write saves
    both readers' views; the contiguous w0[0:3] lies inside the span of w0[::2] but not in its
    elements (w0[1]), so neither save may be dropped for the other."""
    w0, w1, w2 = (tg.clone(x) for x in xs)
    tg.launch(_mix, dim=3, inputs=[w2[3:6], w0[::2], w1[2:5]])
    tg.launch(_mix, dim=3, inputs=[w2[0:3], w0[0:3], w1[0:3]])
    tg.launch(_mix, dim=3, inputs=[w2[::2], w1[2:5], w0[1::2]])
    out = tg.zeros(1, dtype=F64, requires_grad=True)
    for k, w in enumerate((w0, w1, w2)):
        tg.launch(_cubes, dim=6, inputs=[w, out])
    return out


def _two_readers_np(v0, v1, v2):
    w0, w1, w2 = v0.copy(), v1.copy(), v2.copy()
    w1[2:5] = np.sin(w2[3:6]) * w0[::2] + 0.5 * w1[2:5]
    w1[0:3] = np.sin(w2[0:3]) * w0[0:3] + 0.5 * w1[0:3]
    w0[1::2] = np.sin(w2[::2]) * w1[2:5] + 0.5 * w0[1::2]
    return float((w0 ** 3).sum() + (w1 ** 3).sum() + (w2 ** 3).sum())


def test_a_strided_save_does_not_stand_for_a_view_in_its_gaps():
    rng = np.random.default_rng(0)
    vals = [rng.uniform(-1, 1, 6) for _ in range(3)]
    xs = [tg.array(v, dtype=F64, requires_grad=True) for v in vals]
    tape = tg.Tape()
    with tape:
        out = _two_readers_then_strided_write(xs)
    assert out.numpy()[0] == pytest.approx(_two_readers_np(*vals), rel=1e-12)
    tape.backward(loss=out)
    h = 1e-6
    for k in range(3):
        fd = np.zeros(6)
        for e in range(6):
            p = [v.copy() for v in vals]
            m = [v.copy() for v in vals]
            p[k][e] += h
            m[k][e] -= h
            fd[e] = (_two_readers_np(*p) - _two_readers_np(*m)) / (2 * h)
        np.testing.assert_allclose(xs[k].grad.numpy(), fd, rtol=1e-6, atol=1e-8)


@tg.func_native("*tg::addr(a.data, a, i) = v;",
                adj_snippet="adj_v += *tg::addr(adj_a.data, adj_a, i); *tg::addr(adj_a.data, adj_a, i) = 0.0;")
def _native_put(a: A1, i: int, v: F64):
    ...


@tg.kernel
def _square_then_native_put(x: A1, y: A1):
    i = tg.tid()
    y[i] = x[i] * x[i]
    _native_put(x, i, F64(5.0))


def test_a_native_function_may_write_the_arrays_it_takes():
    """A @func_native's C++ body is not seen, so an array passed to it counts as loaded and stored:
    the kernel above overwrites x after reading it, and the tape saves x (it saved nothing, and
    the adjoint of y = x^2 read x = 5: [1.875, 151.875] for [0.1875, 45.5625])."""
    x0 = np.array([0.5, 1.5])
    x = tg.array(x0, dtype=F64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        xc = tg.clone(x)
        y = tg.zeros(2, dtype=F64, requires_grad=True)
        tg.launch(_square_then_native_put, dim=2, inputs=[xc, y])
        loss = tg.zeros(1, dtype=F64, requires_grad=True)
        tg.launch(_cubes, dim=2, inputs=[y, loss])
        tg.launch(_cubes, dim=2, inputs=[xc, loss])
    np.testing.assert_array_equal(xc.numpy(), [5.0, 5.0])
    tape.backward(loss=loss)
    np.testing.assert_allclose(x.grad.numpy(), 6 * x0 ** 5, rtol=1e-12)
