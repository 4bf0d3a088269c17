"""tg.autograd's Jacobians start every run from the original contents of the input arrays the
kernel writes, and put them back. Before, each run started where the previous one left them:
an in-place input drifted (``[0.5, -1.2, 2.0]`` came back as ``[6.7e-09, 1.3e-28, -3.2e+09]``),
a slot counter bumped with ``atomic_add`` ran past its output array (the process died of heap
corruption) and ``jacobian`` replayed the adjoint at the drifted counter (a zero Jacobian).
The references are float64 derivatives written out by hand."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autograd import gradcheck, jacobian, jacobian_fd, jacobian_fwd

F64 = tg.float64


@tg.kernel
def _append_positive(x: tg.array(dtype=F64), counter: tg.array(dtype=int), out: tg.array(dtype=F64)):
    i = tg.tid()
    if x[i] > 0.0:
        slot = tg.atomic_add(counter, 0, 1)
        out[slot] = x[i] * x[i]


@tg.kernel
def _square_in_place_and_sum(x: tg.array(dtype=F64), w: tg.array(dtype=F64), total: tg.array(dtype=F64)):
    i = tg.tid()
    x[i] = x[i] * x[i] * w[i]
    tg.atomic_add(total, 0, x[i] * w[i])


@pytest.mark.parametrize("fn", [jacobian, jacobian_fwd, jacobian_fd])
def test_a_counter_the_kernel_bumps_starts_each_run_at_its_value(fn, device):
    x = tg.array(np.array([0.5, -1.2, 2.0]), dtype=F64, requires_grad=True, device=device)
    counter = tg.array(np.array([1], dtype=np.int32), dtype=int, device=device)
    out = tg.zeros(4, dtype=F64, requires_grad=True, device=device)
    J = fn(_append_positive, 1, inputs=[x, counter], outputs=[out])[(0, 0)]
    expect = np.zeros((4, 3))
    expect[1, 0] = 2 * 0.5          # thread 0 takes slot 1: d out[1] / d x[0]
    np.testing.assert_allclose(J, expect, atol=1e-6)
    assert counter.numpy().tolist() == [1]
    np.testing.assert_array_equal(out.numpy(), np.zeros(4))


@pytest.mark.parametrize("fn", [jacobian, jacobian_fwd, jacobian_fd])
def test_an_input_written_in_place_is_restored(fn, device):
    x0, w0 = np.array([0.5, -1.2, 2.0]), np.array([1.5, 0.3, -0.7])
    x = tg.array(x0, dtype=F64, requires_grad=True, device=device)
    w = tg.array(w0, dtype=F64, requires_grad=True, device=device)
    total = tg.zeros(1, dtype=F64, requires_grad=True, device=device)
    J = fn(_square_in_place_and_sum, 3, inputs=[x, w], outputs=[total])
    # total = sum(x^2 w^2): d/dx = 2 x w^2, d/dw = 2 x^2 w
    np.testing.assert_allclose(J[(0, 0)][0], 2 * x0 * w0 ** 2, rtol=1e-6)
    np.testing.assert_allclose(J[(1, 0)][0], 2 * x0 ** 2 * w0, rtol=1e-6)
    np.testing.assert_array_equal(x.numpy(), x0)
    np.testing.assert_array_equal(w.numpy(), w0)


def test_gradcheck_of_an_in_place_kernel(device):
    x = tg.array(np.array([0.5, -1.2, 2.0]), dtype=F64, requires_grad=True, device=device)
    w = tg.array(np.array([1.5, 0.3, -0.7]), dtype=F64, requires_grad=True, device=device)
    total = tg.zeros(1, dtype=F64, requires_grad=True, device=device)
    assert gradcheck(_square_in_place_and_sum, 3, inputs=[x, w], outputs=[total], eps=1e-6, atol=1e-7, rtol=1e-6)
    np.testing.assert_array_equal(x.numpy(), [0.5, -1.2, 2.0])


@tg.struct
class _Scratch:
    a: tg.array(dtype=F64)


@tg.kernel
def _through_a_struct_array(x: tg.array(dtype=F64), s: _Scratch, y: tg.array(dtype=F64)):
    i = tg.tid()
    s.a[i] = x[i] * x[i]            # written, then loaded back: y = x^3
    y[i] = s.a[i] * x[i]


@tg.kernel
def _write_then_read_output(x: tg.array(dtype=F64), y: tg.array(dtype=F64), z: tg.array(dtype=F64)):
    i = tg.tid()
    y[i] = tg.sin(x[i])
    z[i] = y[i] * y[i] * x[i]       # a load of y after its store


@pytest.mark.parametrize("fn", [jacobian, jacobian_fwd, jacobian_fd])
def test_a_value_stored_and_loaded_back(fn, device):
    """A kernel storing into an array (a struct's field, an output) and loading it back: the
    adjoint's replay skips stores, so it must read that array holding the forward's results, and
    forward mode must carry the struct array's tangent (jacobian gave 1 + 2x^2 for 3x^2, 1.5 and
    11 at x = 0.5, 2; jacobian_fwd x^2: 0.25 and 4)."""
    x0 = np.array([0.5, 2.0])
    x = tg.array(x0, dtype=F64, requires_grad=True, device=device)
    s = _Scratch()
    s.a = tg.array(np.array([1.0, 3.0]), dtype=F64, requires_grad=True, device=device)
    y = tg.zeros(2, dtype=F64, requires_grad=True, device=device)
    J = fn(_through_a_struct_array, 2, inputs=[x, s], outputs=[y])[(0, 0)]
    np.testing.assert_allclose(J, np.diag(3 * x0 ** 2), rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(s.a.numpy(), [1.0, 3.0])
    y2 = tg.zeros(2, dtype=F64, requires_grad=True, device=device)
    z = tg.zeros(2, dtype=F64, requires_grad=True, device=device)
    J = fn(_write_then_read_output, 2, inputs=[x], outputs=[y2, z])
    dz = 2 * np.sin(x0) * np.cos(x0) * x0 + np.sin(x0) ** 2
    np.testing.assert_allclose(J[(0, 1)], np.diag(dz), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(J[(0, 0)], np.diag(np.cos(x0)), rtol=1e-6, atol=1e-8)


@tg.kernel
def _read_before_and_after(x: tg.array(dtype=F64), s: _Scratch, y: tg.array(dtype=F64)):
    i = tg.tid()
    s.a[i] = s.a[i] * x[i]
    y[i] = x[i] * s.a[(i + 1) % 2]


def test_reading_an_argument_before_and_after_writing_it_warns():
    x = tg.array(np.array([0.5, 2.0]), dtype=F64, requires_grad=True)
    s = _Scratch()
    s.a = tg.array(np.array([1.0, 3.0]), dtype=F64, requires_grad=True)
    y = tg.zeros(2, dtype=F64, requires_grad=True)
    with pytest.warns(tg.TapeWarning, match="_read_before_and_after.*'s' both before and after"):
        jacobian(_read_before_and_after, 2, inputs=[x, s], outputs=[y])
