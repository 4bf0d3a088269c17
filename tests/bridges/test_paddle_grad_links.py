"""Gradient links of ``from_paddle`` arrays through paddle's own habits (SPEC B19, issue 23
item 2): ``clear_grad(set_to_zero=False)`` (which frees the gradient's memory), a gradient
paddle's autograd allocates anew, and in-place modification between recording and backward."""
import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import tapegrad as tg  # noqa: E402

pytestmark = pytest.mark.paddle


@tg.kernel
def sq_sum(x: tg.array[tg.float64], f: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_add(f, 0, x[i] * x[i])


def _param(values, place):
    w = paddle.create_parameter([len(values)], dtype="float64")
    w.set_value(paddle.to_tensor(np.asarray(values, dtype=np.float64), place=place))
    return w


def _step(wa, loss, n):
    loss.zero_()
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=n, inputs=[wa], outputs=[loss])
    tape.backward(loss=loss)
    return tape


def _place(device):
    return paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_sgd_loop_with_clear_grad_to_none_trains(device):
    """paddle.optimizer.SGD with clear_grad(set_to_zero=False): the gradient is dropped (its
    memory freed) every step; the array converted once keeps delivering into w.grad."""
    w = _param(np.ones(4), _place(device))
    wa = tg.from_paddle(w)
    loss = tg.zeros(1, dtype=tg.float64, device=wa.device, requires_grad=True)
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=[w])
    for it in range(3):
        opt.clear_grad(set_to_zero=False)
        assert w.grad is None
        _step(wa, loss, 4)
        assert w.grad is not None, it
        assert w.grad.data_ptr() == wa.grad.ptr                      # zero-copy, the same memory
        np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=0, atol=0)
        opt.step()
    np.testing.assert_allclose(w.numpy(), np.full(4, 0.8 ** 3), rtol=1e-15)


def test_the_gradient_memory_outlives_clear_grad():
    """clear_grad(set_to_zero=False) frees the memory of the tensor installed as the gradient;
    the array's gradient holds its own alias of it, so it stays valid (no use after free)."""
    w = _param([1.0, 2.0], paddle.CPUPlace())
    wa = tg.from_paddle(w)
    ptr = wa.grad.ptr
    held = wa.grad.__dict__["_owner"]        # what the gradient array keeps alive
    w.clear_gradient(False)                  # Tensor.clear_grad takes no argument; this is its set_to_zero=False
    assert w.grad is None
    assert held._is_initialized() and held.data_ptr() == ptr
    np.testing.assert_array_equal(wa.grad.numpy(), [0.0, 0.0])
    assert wa.grad.ptr == ptr == w.grad.data_ptr()


def test_paddle_autograd_after_clear_and_the_tape_add_up():
    """paddle's own backward after clear_grad(set_to_zero=False) allocates a new gradient; the
    array follows it and the tape adds to it."""
    w = _param([1.0, 2.0, 3.0], paddle.CPUPlace())
    wa = tg.from_paddle(w)
    w.clear_gradient(False)
    (w * w * w).sum().backward()
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    _step(wa, loss, 3)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(w.grad.numpy(), 3 * x ** 2 + 2 * x, rtol=1e-15)
    assert w.grad.data_ptr() == wa.grad.ptr


def test_in_place_modification_before_backward_raises():
    """paddle's in-place version counter changed since the launch read w: backward refuses
    (the adjoint would read 10x the values)."""
    w = _param([1.0, 2.0, 3.0], paddle.CPUPlace())
    wa = tg.from_paddle(w)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=3, inputs=[wa], outputs=[loss])
    with paddle.no_grad():
        w.scale_(10.0)
    with pytest.raises(RuntimeError, match="paddle tensor behind an array of shape .* modified in place"):
        tape.backward(loss=loss)
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0, 0.0])


# ------------------------------------------------- return_ctype descriptors (issue 23 item 5, bridge half)

@tg.kernel
def sq_into(x: tg.array[tg.float64], s: tg.float64, y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i] * x[i] * s


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_adjoint_launch_accumulates_into_the_descriptors_gradients(device):
    x0 = np.array([0.5, -1.5, 2.0, 3.0])
    x = paddle.to_tensor(x0, place=_place(device), stop_gradient=False)
    y = paddle.zeros([4], dtype="float64").to(_place(device))
    y.stop_gradient = False
    xd, yd = tg.from_paddle(x, return_ctype=True), tg.from_paddle(y, return_ctype=True)
    assert xd.grad == x.grad.data_ptr() and isinstance(xd.grad, int)        # as Warp's array_t.grad
    assert tg.from_paddle(paddle.ones([2]), return_ctype=True).grad == 0
    tg.launch(sq_into, dim=4, inputs=[xd, 3.0], outputs=[yd])
    y.grad.fill_(1.0)
    tg.launch(sq_into, dim=4, inputs=[xd, 3.0], outputs=[yd], adjoint=True, adj_inputs=[None, None],
              adj_outputs=[None])
    tg.synchronize_device(tg.device_from_paddle(x.place))
    np.testing.assert_allclose(x.grad.numpy(), 6 * x0, rtol=1e-15)


# ------------------------------------------ tapegrad parameters stepped by paddle (to_paddle)

def test_to_paddle_parameters_train_through_clear_grad_to_none():
    """p is tapegrad's; paddle's SGD steps to_paddle(p), whose .grad views p.grad.
    clear_grad(set_to_zero=False) drops it (SGD then skipped the parameter); the view is zeroed
    and installed again when the tape uses the gradient."""
    p = tg.array(np.ones(4), dtype=tg.float64, requires_grad=True)
    tp = tg.to_paddle(p)
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=[tp])
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    for _ in range(3):
        opt.clear_grad(set_to_zero=False)
        assert tp.grad is None
        _step(p, loss, 4)
        assert tp.grad is not None and tp.grad.data_ptr() == p.grad.ptr
        opt.step()
    np.testing.assert_allclose(p.numpy(), np.full(4, 0.8 ** 3), rtol=1e-15)
