"""Negative array element indices count from the end, as in Warp and Python: ``a[-1]`` is the
last element (it used to address memory before the array). Loads, stores, atomics and their
adjoints; debug mode still reports an index past either end."""
import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def k_neg_1d(a: tg.array[tg.float64], out: tg.array[tg.float64]):
    i = tg.tid()
    out[-1 - i] = a[-1 - i] * a[-1 - i]        # reversed indices: out[n-1-i] = a[n-1-i]^2


@tg.kernel
def k_neg_2d(m: tg.array2d[tg.float64], out: tg.array[tg.float64]):
    tg.atomic_add(out, -1, m[-1, -2] * 3.0)    # the last element of out, element (R-1, C-2) of m


@tg.kernel
def k_neg_runtime(a: tg.array[tg.float64], k: int, out: tg.array[tg.float64]):
    out[0] = a[k]


def test_loads_stores_and_gradients_from_the_end(device):
    x = np.array([1.0, 2.0, 3.0, 4.0])
    a = tg.array(x, dtype=tg.float64, device=device, requires_grad=True)
    out = tg.zeros(4, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_neg_1d, 4, inputs=[a], outputs=[out], device=device)
    np.testing.assert_array_equal(out.numpy(), x ** 2)
    tape.backward(grads={out: tg.array(np.ones(4), dtype=tg.float64, device=device)})
    np.testing.assert_allclose(a.grad.numpy(), 2 * x, rtol=1e-12)


def test_two_negative_indices_and_an_atomic(device):
    mx = np.arange(12, dtype=np.float64).reshape(3, 4)
    m = tg.array(mx, dtype=tg.float64, device=device, requires_grad=True)
    out = tg.zeros(2, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_neg_2d, 5, inputs=[m], outputs=[out], device=device)
    np.testing.assert_array_equal(out.numpy(), [0.0, 5 * 3.0 * mx[-1, -2]])
    tape.backward(grads={out: tg.array(np.array([0.0, 1.0]), dtype=tg.float64, device=device)})
    expect = np.zeros((3, 4))
    expect[-1, -2] = 15.0
    np.testing.assert_allclose(m.grad.numpy(), expect, rtol=1e-12)


@pytest.mark.parametrize("k", [-1, -3, -4, 0, 3])
def test_a_runtime_index_from_the_end(device, k):
    x = np.array([10.0, 20.0, 30.0, 40.0])
    a = tg.array(x, dtype=tg.float64, device=device)
    out = tg.zeros(1, dtype=tg.float64, device=device)
    tg.launch(k_neg_runtime, 1, inputs=[a, k, out], device=device)
    assert out.numpy()[0] == x[k]


def test_debug_mode_reports_an_index_past_the_front(device):
    a = tg.array(np.arange(4.0), dtype=tg.float64, device=device)
    out = tg.zeros(1, dtype=tg.float64, device=device)
    old = tg.config.mode
    tg.config.mode = "debug"
    try:
        tg.launch(k_neg_runtime, 1, inputs=[a, -4, out], device=device)   # the first element: fine
        tg.synchronize_device(device)
        assert out.numpy()[0] == 0.0
        with pytest.raises(tg.KernelIndexError, match="out of range"):
            tg.launch(k_neg_runtime, 1, inputs=[a, -5, out], device=device)
            tg.synchronize_device(device)
    finally:
        tg.config.mode = old
