"""Copies within one array under a tape: ``tg.copy(a, a, dest_offset=, src_offset=, count=)``
and assignments between overlapping views of one array. The adjoint moves the destination's
gradient to the source's range and zeroes the destination's; where the two ranges share
memory it must read the destination's gradient before adding into the source (the shifted
elements' gradient was lost: ``[3, 0, 0, 0, 0, 6]`` for ``[3, 3, 4, 5, 0, 6]``). Checked
against float64 finite differences of the forward, and in forward mode and second order.
"""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

F64 = tg.float64


@tg.kernel
def _weighted_cubes(x: tg.array(dtype=F64), out: tg.array(dtype=F64)):
    i = tg.tid()
    tg.atomic_add(out, 0, x[i] * x[i] * x[i] * F64(i + 1))


def _program(x, how, dest_offset, src_offset, count):
    c = tg.clone(x)
    if how == "copy":
        tg.copy(c, c, dest_offset=dest_offset, src_offset=src_offset, count=count)
    elif how == "assign":
        c[dest_offset:dest_offset + count].assign(c[src_offset:src_offset + count])
    else:   # setitem
        c[dest_offset:dest_offset + count] = c[src_offset:src_offset + count]
    out = tg.zeros(1, dtype=F64, requires_grad=True, device=c.device)
    tg.launch(_weighted_cubes, dim=c.shape[0], inputs=[c], outputs=[out])
    return c, out


def _loss(values, how, dest_offset, src_offset, count):
    """The loss from float64 NumPy alone: the copy as a memmove, then the weighted cubes."""
    c = values.copy()
    c[dest_offset:dest_offset + count] = values[src_offset:src_offset + count]
    return float(np.sum(c ** 3 * np.arange(1, c.size + 1)))


def _fd_grad(values, *args, h=1e-6):
    g = np.zeros_like(values)
    for k in range(values.size):
        e = np.zeros_like(values)
        e[k] = h
        g[k] = (_loss(values + e, *args) - _loss(values - e, *args)) / (2 * h)
    return g


@pytest.mark.parametrize("how", ["copy", "assign", "setitem"])
@pytest.mark.parametrize("offsets", [(1, 0, 4), (0, 1, 4), (0, 3, 3), (2, 0, 3)])
def test_overlapping_copy_gradient(how, offsets, device):
    values = np.array([0.3, -1.1, 0.7, 1.3, -0.4, 0.9])
    args = (how,) + offsets
    x = tg.array(values, dtype=F64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        c, out = _program(x, *args)
    d, s, n = offsets
    expect = values.copy()
    expect[d:d + n] = values[s:s + n]
    np.testing.assert_array_equal(c.numpy(), expect)      # a memmove, CUDA included
    assert out.numpy()[0] == pytest.approx(_loss(values, *args), rel=1e-12)
    tape.backward(loss=out)
    fd = _fd_grad(values, *args)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-8)
    # forward mode and second order through the same copy
    u = np.array([0.5, -0.2, 1.0, 0.3, -0.7, 0.1])
    jv = tape.jvp({x: u})[out].numpy()[0]
    assert jv == pytest.approx(float(fd @ u), rel=1e-6)
    hv = tape.hvp(out, {x: u})[x].numpy()
    h = 1e-5
    ref = (_fd_grad(values + h * u, *args) - _fd_grad(values - h * u, *args)) / (2 * h)
    np.testing.assert_allclose(hv, ref, rtol=1e-4, atol=1e-5)


def test_overlapping_copy_retain_grad(device):
    """With ``retain_grad`` the destination keeps its gradient and the source still gets the
    destination's gradient from before the adjoint (not the sum it just received)."""
    c = tg.array(np.zeros(6), dtype=F64, requires_grad=True, retain_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        c.zero_()          # the tape has seen c
        tg.copy(c, c, dest_offset=1, src_offset=0, count=4)
    g = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    c.grad.assign(g)
    tape.backward()
    expect = g.copy()
    expect[0:4] += g[1:5]
    np.testing.assert_array_equal(c.grad.numpy(), expect)


def test_setitem_of_a_row_from_another_row(device):
    """``a[1] = a[0]`` assigns the row ``a[1]`` reads (an array value of the row's shape was refused:
    'expected shape (1, 3), got (3,)'), recorded as a copy: the overwritten row passes no gradient
    and the source row gets both rows' gradients."""
    values = np.array([[0.3, -1.1, 0.7], [1.3, -0.4, 0.9]])
    x = tg.array(values, dtype=F64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        c = tg.clone(x)
        c[1] = c[0]
        flat = c.flatten()
        out = tg.zeros(1, dtype=F64, requires_grad=True, device=device)
        tg.launch(_weighted_cubes, dim=6, inputs=[flat], outputs=[out])
    np.testing.assert_array_equal(c.numpy(), [values[0], values[0]])
    tape.backward(loss=out)
    w = np.arange(1, 7, dtype=np.float64).reshape(2, 3)
    expect = np.zeros((2, 3))
    expect[0] = 3 * values[0] ** 2 * (w[0] + w[1])
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-12)


@pytest.mark.parametrize("how", ["copy", "assign"])
def test_overlapping_strided_ranges(how, device):
    """A copy between strided ranges of one array reads every source element before writing:
    ``copy(a[1::2], a[1:4])`` of [0..5] is [0, 1, 2, 2, 4, 3] (NumPy's copyto read an element it
    had already written: [0, 1, 2, 2, 4, 2]); the gradient follows the same memmove."""
    values = np.array([0.3, -1.1, 0.7, 1.3, -0.4, 0.9])
    x = tg.array(values, dtype=F64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        c = tg.clone(x)
        if how == "copy":
            tg.copy(c[1::2], c[1:4])
        else:
            c[1::2].assign(c[1:4])
        out = tg.zeros(1, dtype=F64, requires_grad=True, device=device)
        tg.launch(_weighted_cubes, dim=6, inputs=[c], outputs=[out])
    moved = values.copy()
    moved[1::2] = values[1:4].copy()
    np.testing.assert_array_equal(c.numpy(), moved)
    tape.backward(loss=out)
    w = np.arange(1, 7, dtype=np.float64)
    g_c = 3 * moved ** 2 * w                       # d loss / d c after the copy
    expect = g_c.copy()
    expect[1::2] = 0.0                             # overwritten
    expect[1:4] += g_c[1::2]                       # each source element gets its destination's
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-12)
