"""Adjoint launches accumulate into a descriptor's own gradient (issue 23 item 5, SPEC B19).

``launch(..., adjoint=True, adj_inputs=[None, ...])``: a ``None`` entry for an argument that
carries a gradient — a tapegrad array with ``.grad``, or a launch descriptor (``ArrayCtype``,
what ``from_torch(..., return_ctype=True)`` returns) whose ``grad`` pointer is set — accumulates
into that gradient, as Warp's kernels write through an array's gradient pointer. Before the
fix a descriptor's entry stayed 0. Checked on the native path (``tapegrad.launch.fastlaunch``) and the
Python path, against the analytic gradient, in float64.
"""
import ctypes

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.launch import ArrayCtype
from tests.core.test_fast_launch import counted, native_helper, python_path  # noqa: F401

F64 = tg.float64


@tg.kernel
def sq_into(x: tg.array(dtype=F64), s: F64, y: tg.array(dtype=F64)):
    i = tg.tid()
    y[i] = x[i] * x[i] * s


def ctype_of(a):
    """A launch descriptor of array ``a`` carrying its gradient pointer (what the bridges'
    ``return_ctype=True`` builds)."""
    d = ArrayCtype()
    src = a.descriptor()
    ctypes.memmove(ctypes.addressof(d), ctypes.addressof(src), ctypes.sizeof(d))
    return d.bind(a.dtype, a.device, refs=(a, a.grad))


X0 = np.array([0.5, -1.5, 2.0, 3.0])


def _case(device, as_ctype_x, as_ctype_y):
    x = tg.array(X0, dtype=F64, device=device, requires_grad=True)
    y = tg.zeros(4, dtype=F64, device=device, requires_grad=True)
    y.grad.fill_(1.0)
    xa = ctype_of(x) if as_ctype_x else x
    ya = ctype_of(y) if as_ctype_y else y
    return x, y, xa, ya


@pytest.mark.usefixtures("native_helper")
@pytest.mark.parametrize("path", ["native", "python"])
@pytest.mark.parametrize("which", ["x", "y", "both"])
def test_none_entry_accumulates_into_the_descriptors_gradient(which, path, device):
    x, y, xa, ya = _case(device, which in ("x", "both"), which in ("y", "both"))
    tg.launch(sq_into, dim=4, inputs=[xa, 3.0], outputs=[ya])            # forward (registers the module)
    if path == "native":
        with counted(fast=1, adjoint=True):
            tg.launch(sq_into, dim=4, inputs=[xa, 3.0], outputs=[ya], adjoint=True, adj_inputs=[None, None],
                      adj_outputs=[None])
    else:
        with python_path():
            tg.launch(sq_into, dim=4, inputs=[xa, 3.0], outputs=[ya], adjoint=True, adj_inputs=[None, None],
                      adj_outputs=[None])
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * X0, rtol=1e-15)
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)                 # the store consumed it


@pytest.mark.usefixtures("native_helper")
@pytest.mark.parametrize("path", ["native", "python"])
def test_descriptor_without_gradient_and_explicit_buffers(path, device):
    """A descriptor with no grad pointer gets nothing; an explicit buffer wins over the pointer."""
    x, y, _, _ = _case(device, False, False)
    bare = ctype_of(tg.array(X0, dtype=F64, device=device))             # no gradient
    other = tg.zeros(4, dtype=F64, device=device)
    xa = ctype_of(x)
    tg.launch(sq_into, dim=4, inputs=[bare, 3.0], outputs=[y])
    ctx = python_path() if path == "python" else counted(fast=2, adjoint=True)
    with ctx:
        tg.launch(sq_into, dim=4, inputs=[bare, 3.0], outputs=[y], adjoint=True, adj_inputs=[None, None],
                  adj_outputs=[None])
        y.grad.fill_(1.0)
        tg.launch(sq_into, dim=4, inputs=[xa, 3.0], outputs=[y], adjoint=True, adj_inputs=[other, None],
                  adj_outputs=[None])
    np.testing.assert_allclose(other.numpy(), 6.0 * X0, rtol=1e-15)
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)
