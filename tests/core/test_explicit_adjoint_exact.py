"""Adjoint launches with explicit buffers (``launch(adjoint=True, adj_inputs=..., adj_outputs=...)``,
``tg.autograd.jacobian``) give the tape's exact gradients: the adjoint of a store consumes the
gradient element (final write wins) in a copy of the caller's buffer, which stays unchanged
(``tapegrad.launch.packers.exact_adjoint_buffers``). Before, an explicit buffer was only read, so an
element written twice counted twice (``d(sum y)/dw`` 3 instead of 2, silently). Every case runs on
the native helper's path and on the Python path; references are float64 finite differences and
the tape.
"""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.launch import core, fastlaunch
from tests.core.test_fast_launch import counted, python_path

PATHS = ("native", "python")


@pytest.fixture
def helper(request, path):
    """The native helper loaded for the "native" cases (the Python ones run without it too:
    ``TAPEGRAD_FAST_LAUNCH=0``)."""
    if path == "native":
        for _ in range(2):   # the kernel's first launch (the Python path) registers its module
            tg.launch(k_read_only, 1, inputs=[tg.zeros(1)], outputs=[tg.zeros(1)])
        if core._fast is None:
            pytest.skip(f"the native launch helper is not loaded: {fastlaunch.error()}")


@tg.kernel
def k_twice(w: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = w[i]
    y[i] = 2.0 * w[i]


@tg.kernel
def k_twice64(w: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = w[i] * w[i]
    y[i] = 2.0 * w[i] + tg.sin(w[i])


@tg.kernel
def k_store_then_max(w: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    y[0] = w[0]
    tg.atomic_max(y, 0, w[1])


@tg.kernel
def k_in_place(y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = 2.0 * y[i]


@tg.kernel
def k_read_only(w: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = 3.0 * w[i]


def _path(path):
    return python_path() if path == "python" else counted(adjoint=True)   # written + buffer: Python path


@pytest.mark.parametrize("path", PATHS)
def test_store_twice_counts_the_final_write(device, path, helper):
    for _ in range(2):   # the second launch: the module registered with the native helper
        w = tg.array(np.ones(3, np.float32), device=device)
        y = tg.zeros(3, device=device)
        wg = tg.zeros(3, device=device)
        yg = tg.array(np.ones(3, np.float32), device=device)
        with _path(path):
            tg.launch(k_twice, 3, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[yg])
        np.testing.assert_array_equal(wg.numpy(), [2, 2, 2])   # was 3 (both writes counted)
        np.testing.assert_array_equal(yg.numpy(), [1, 1, 1])   # the caller's buffer is unchanged


@pytest.mark.parametrize("path", PATHS)
def test_matches_the_tape(device, path, helper):
    w = tg.array(np.array([0.5, -1.0, 2.0], np.float32), device=device, requires_grad=True)
    y = tg.zeros(3, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_twice, 3, inputs=[w], outputs=[y])
    tape.backward(grads={y: tg.array(np.array([1.0, 2.0, 3.0], np.float32), device=device)})
    wg = tg.zeros(3, device=device)
    with _path(path):
        tg.launch(k_twice, 3, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg],
                  adj_outputs=[tg.array(np.array([1.0, 2.0, 3.0], np.float32), device=device)])
    np.testing.assert_array_equal(wg.numpy(), w.grad.numpy())
    np.testing.assert_array_equal(wg.numpy(), [2, 4, 6])


@pytest.mark.parametrize("path", PATHS)
def test_jacobian_matches_finite_differences(device, path, helper):
    w = tg.array(np.array([0.3, -0.7, 1.1, 2.0]), dtype=tg.float64, device=device)
    y = tg.zeros(4, dtype=tg.float64, device=device)
    with (python_path() if path == "python" else counted(adjoint=True)):
        jac = tg.autograd.jacobian(k_twice64, 4, inputs=[w], outputs=[y])[(0, 0)]
    fd = tg.autograd.jacobian_fd(k_twice64, 4, inputs=[w], outputs=[y], eps=1e-6)[(0, 0)]
    np.testing.assert_allclose(jac, fd, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(np.diag(jac), 2.0 + np.cos(w.numpy()), rtol=1e-12)   # was 2 + cos + 2w


@pytest.mark.parametrize("path", PATHS)
def test_atomic_max_after_a_store(device, path, helper):
    # y[0] = w[0], then atomic_max(y, 0, w[1]) with w[1] > w[0]: y[0] is w[1]; dy/dw = [0, 1]
    w = tg.array(np.array([1.0, 2.0]), dtype=tg.float64, device=device)
    y = tg.zeros(1, dtype=tg.float64, device=device)
    fd = tg.autograd.jacobian_fd(k_store_then_max, 1, inputs=[w], outputs=[y], eps=1e-6)[(0, 0)]
    np.testing.assert_allclose(fd, [[0.0, 1.0]], atol=1e-8)
    tg.launch(k_store_then_max, 1, inputs=[w], outputs=[y])   # the adjoint reads the slot's final value
    wg, yg = tg.zeros(2, dtype=tg.float64, device=device), tg.array(np.ones(1), dtype=tg.float64, device=device)
    with _path(path):
        tg.launch(k_store_then_max, 1, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[yg])
    np.testing.assert_allclose(wg.numpy()[None], fd, atol=1e-8)   # was [1, 1]
    np.testing.assert_array_equal(yg.numpy(), [1.0])


@pytest.mark.parametrize("path", PATHS)
def test_retain_grad_counts_each_write_as_the_tape(device, path, helper):
    w = tg.array(np.ones(3, np.float32), device=device, requires_grad=True)
    y = tg.zeros(3, device=device, requires_grad=True, retain_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_twice, 3, inputs=[w], outputs=[y])
    tape.backward(grads={y: tg.array(np.ones(3, np.float32), device=device)})
    np.testing.assert_array_equal(w.grad.numpy(), [3, 3, 3])   # retain_grad: each write counts
    wg, yg = tg.zeros(3, device=device), tg.array(np.ones(3, np.float32), device=device)
    with (python_path() if path == "python" else counted(fast=1, adjoint=True)):   # nothing to copy
        tg.launch(k_twice, 3, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[yg])
    np.testing.assert_array_equal(wg.numpy(), w.grad.numpy())
    np.testing.assert_array_equal(yg.numpy(), [1, 1, 1])


@pytest.mark.parametrize("path", PATHS)
def test_read_and_written_array_gets_the_gradient_of_its_old_values(device, path, helper):
    # y <- 2 y: the buffer ends as d(sum g * y_after)/d y_before = 2 g (as the tape's y.grad), was 3 g
    y = tg.array(np.array([1.0, 2.0, 3.0], np.float32), device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_in_place, 3, inputs=[y])
    g = np.array([1.0, -1.0, 0.5], np.float32)
    tape.backward(grads={y: tg.array(g, device=device)})
    yg = tg.array(g, device=device)
    with _path(path):
        tg.launch(k_in_place, 3, inputs=[y], adjoint=True, adj_inputs=[yg])
    np.testing.assert_array_equal(yg.numpy(), 2 * g)
    np.testing.assert_array_equal(yg.numpy(), y.grad.numpy())


@pytest.mark.parametrize("path", PATHS)
def test_strided_array_and_buffer(device, path, helper):
    base = tg.zeros(6, device=device)
    y = base[::2]                      # a strided output; its buffer contiguous, and the reverse
    w = tg.array(np.ones(3, np.float32), device=device)
    gbase = tg.array(np.arange(6, dtype=np.float32), device=device)
    for yg in (tg.array(np.ones(3, np.float32), device=device), gbase[1::2]):
        before = yg.numpy().copy()
        wg = tg.zeros(3, device=device)
        with _path(path):
            tg.launch(k_twice, 3, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[yg])
        np.testing.assert_array_equal(wg.numpy(), 2 * before)
        np.testing.assert_array_equal(yg.numpy(), before)
    np.testing.assert_array_equal(gbase.numpy(), np.arange(6))


@pytest.mark.parametrize("path", ["native"])
def test_buffers_of_read_only_arrays_and_own_grads_stay_native(device, path, helper):
    w = tg.array(np.ones(3, np.float32), device=device, requires_grad=True)
    y = tg.zeros(3, device=device, requires_grad=True)
    y.grad = tg.array(np.ones(3, np.float32), device=device)
    tg.launch(k_read_only, 3, inputs=[w], outputs=[y])   # registers the module
    wg = tg.zeros(3, device=device)
    with counted(fast=1, adjoint=True):
        tg.launch(k_read_only, 3, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[None])
    with counted(fast=1, adjoint=True):
        tg.launch(k_read_only, 3, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[y.grad])
    # its own .grad: consumed by the first launch (as on a tape), so the second adds nothing
    np.testing.assert_array_equal(wg.numpy(), [3, 3, 3])
    np.testing.assert_array_equal(y.grad.numpy(), [0, 0, 0])


def test_tangent_of_the_adjoint_with_buffers(device):
    # second order (launch(adjoint=True, tangent=True)), the bridges' double backward: the final
    # write y = 2 w + sin w alone counts; the tangent of w's gradient is g * -sin(w) * tw
    wv = np.array([0.3, -0.7, 1.1, 2.0])
    g, tw = np.array([1.0, -2.0, 0.5, 3.0]), np.array([0.5, 1.0, -1.0, 2.0])
    w = tg.array(wv, dtype=tg.float64, device=device)
    y = tg.zeros(4, dtype=tg.float64, device=device)
    wg, twg = tg.zeros(4, dtype=tg.float64, device=device), tg.zeros(4, dtype=tg.float64, device=device)
    yg = tg.array(g, dtype=tg.float64, device=device)
    tyg = tg.array(g * 0.25, dtype=tg.float64, device=device)   # the tangent of the incoming gradient
    tg.launch(k_twice64, 4, inputs=[w], outputs=[y], adjoint=True, tangent=True, adj_inputs=[wg], adj_outputs=[yg],
              tan_inputs=[tg.array(tw, dtype=tg.float64, device=device)], tan_outputs=[None],
              tan_adj_inputs=[twg], tan_adj_outputs=[tyg])
    np.testing.assert_allclose(wg.numpy(), g * (2 + np.cos(wv)), rtol=1e-12)   # was g * (2 + cos w + 2 w)
    np.testing.assert_allclose(twg.numpy(), g * -np.sin(wv) * tw + 0.25 * g * (2 + np.cos(wv)), rtol=1e-12)
    np.testing.assert_array_equal(yg.numpy(), g)          # the caller's buffers are unchanged
    np.testing.assert_array_equal(tyg.numpy(), g * 0.25)


def test_recorded_adjoint_launch_with_buffers(device):
    # tg.Launch (launch(record_cmd=True)): every replay consumes a fresh copy of the buffers
    w = tg.array(np.ones(3, np.float32), device=device)
    y = tg.zeros(3, device=device)
    wg, yg = tg.zeros(3, device=device), tg.array(np.ones(3, np.float32), device=device)
    cmd = tg.launch(k_twice, 3, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[yg],
                    record_cmd=True)
    cmd.launch()
    np.testing.assert_array_equal(wg.numpy(), [2, 2, 2])   # was 3
    cmd.launch()
    np.testing.assert_array_equal(wg.numpy(), [4, 4, 4])
    np.testing.assert_array_equal(yg.numpy(), [1, 1, 1])


def test_jacobian_of_atomic_max_after_a_store(device):
    # the adjoint of atomic_max reads the slot's final value: jacobian runs the forward first
    w = tg.array(np.array([1.0, 2.0]), dtype=tg.float64, device=device)
    y = tg.zeros(1, dtype=tg.float64, device=device)
    jac = tg.autograd.jacobian(k_store_then_max, 1, inputs=[w], outputs=[y])[(0, 0)]
    fd = tg.autograd.jacobian_fd(k_store_then_max, 1, inputs=[w], outputs=[y], eps=1e-6)[(0, 0)]
    np.testing.assert_allclose(jac, fd, atol=1e-8)   # was [[1, 0]] (the slot restored to 0)
    np.testing.assert_array_equal(y.numpy(), [0.0])   # the outputs are left as given


@pytest.mark.cuda
def test_buffers_copied_on_the_launch_stream():
    # the copies run on the stream given to launch (not the device's current one)
    s = tg.Stream("cuda:0")
    w = tg.array(np.ones(1 << 20, np.float32), device="cuda:0")
    y = tg.zeros(1 << 20, device="cuda:0")
    wg = tg.zeros(1 << 20, device="cuda:0")
    yg = tg.array(np.ones(1 << 20, np.float32), device="cuda:0")
    tg.synchronize()
    tg.launch(k_twice, 1 << 20, inputs=[w], outputs=[y], adjoint=True, adj_inputs=[wg], adj_outputs=[yg], stream=s)
    s.synchronize()
    np.testing.assert_array_equal(wg.numpy(), 2)
    np.testing.assert_array_equal(yg.numpy(), 1)
