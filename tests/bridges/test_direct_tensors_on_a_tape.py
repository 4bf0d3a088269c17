"""A framework tensor that requires a gradient, passed directly to a recorded launch: the tape
refuses it (a tensor passed directly carries no gradient, so backward would leave its gradient
out without a word); converted with from_torch / from_paddle it gets its gradient."""
import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def scale(x: tg.array(dtype=tg.float32), w: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    y[i] = x[i] * w[i]


def _arrays():
    x = tg.array(np.arange(1, 4, dtype=np.float32), requires_grad=True)
    y = tg.zeros(3, dtype=tg.float32, requires_grad=True)
    return x, y


def _backward(tape, y):
    tape.backward(grads={y: tg.array(np.ones(3, np.float32))})


def test_a_torch_tensor_requiring_grad_passed_directly_is_refused_before_the_launch():
    torch = pytest.importorskip("torch")
    x, y = _arrays()
    w = torch.tensor([2.0, 3.0, 4.0], requires_grad=True)
    tape = tg.Tape()
    refused = r"requires a gradient directly as argument 1 \('w'\).*tg\.from_torch\(t\)"
    with tape, pytest.raises(RuntimeError, match=refused):
        tg.launch(scale, 3, inputs=[x, w], outputs=[y])
    assert y.numpy().tolist() == [0.0, 0.0, 0.0]      # refused before it ran
    assert len(tape.launches) == 0


def test_the_same_tensor_converted_gets_its_gradient_and_detached_is_accepted():
    torch = pytest.importorskip("torch")
    x, y = _arrays()
    w = torch.tensor([2.0, 3.0, 4.0], requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(scale, 3, inputs=[x, tg.from_torch(w)], outputs=[y])
    _backward(tape, y)
    assert w.grad.tolist() == [1.0, 2.0, 3.0]
    assert x.grad.numpy().tolist() == [2.0, 3.0, 4.0]
    x, y = _arrays()
    tape = tg.Tape()
    with tape:
        tg.launch(scale, 3, inputs=[x, w.detach()], outputs=[y])    # no gradient wanted: a value
    _backward(tape, y)
    assert x.grad.numpy().tolist() == [2.0, 3.0, 4.0]


def test_outside_a_tape_or_not_recorded_it_is_a_value():
    torch = pytest.importorskip("torch")
    x, y = _arrays()
    w = torch.tensor([2.0, 3.0, 4.0], requires_grad=True)
    tg.launch(scale, 3, inputs=[x, w], outputs=[y])
    assert y.numpy().tolist() == [2.0, 6.0, 12.0]
    with tg.Tape():
        tg.launch(scale, 3, inputs=[x, w], outputs=[y], record_tape=False)


def test_a_paddle_tensor_with_stop_gradient_false_passed_directly_is_refused():
    paddle = pytest.importorskip("paddle")
    x, y = _arrays()
    w = paddle.to_tensor(np.array([2.0, 3.0, 4.0], np.float32), stop_gradient=False)
    with tg.Tape(), pytest.raises(RuntimeError, match=r"paddle tensor that requires a gradient.*tg\.from_paddle"):
        tg.launch(scale, 3, inputs=[x, w], outputs=[y])
    with tg.Tape():
        tg.launch(scale, 3, inputs=[x, paddle.to_tensor(np.ones(3, np.float32))], outputs=[y])


@tg.kernel
def mix(x: tg.array(dtype=tg.float64), w: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * w[i] + tg.exp(w[i] * x[i])


@tg.kernel
def clear(w: tg.array(dtype=tg.float64)):
    i = tg.tid()
    w[i] = 0.0


def _mix_setup():
    x = tg.array(np.array([0.5, 1.0]), dtype=tg.float64, requires_grad=True)
    y = tg.zeros(2, dtype=tg.float64, requires_grad=True)
    return x, y


def test_a_tensor_passed_directly_keeps_exact_gradients_or_raises():
    """The adjoint of a launch given a tensor directly reads the tensor at backward: a recorded
    launch overwriting it, or an in-place change by torch, would give x.grad at the new values
    without a word (the tape keeps no copy of a tensor passed directly): both raise. Unchanged,
    the gradient is exact."""
    torch = pytest.importorskip("torch")
    xs, ws = np.array([0.5, 1.0]), np.array([2.0, 3.0])
    exact = ws + ws * np.exp(ws * xs)

    x, y = _mix_setup()
    w = torch.tensor(ws)
    tape = tg.Tape()
    with tape:
        tg.launch(mix, 2, inputs=[x, w], outputs=[y])
        with pytest.raises(RuntimeError, match=r"writes the torch tensor passed directly as argument 0 \('w'\) into "
                                               r"memory that launch #0 of kernel '.*mix' read"):
            tg.launch(clear, 2, inputs=[w])
    assert w.tolist() == ws.tolist()                  # refused before it ran

    x, y = _mix_setup()
    tape = tg.Tape()
    with tape:
        tg.launch(mix, 2, inputs=[x, w], outputs=[y])
    w.add_(1.0)
    with pytest.raises(RuntimeError, match=r"torch tensor passed directly to launch #0 .* was modified in place"):
        tape.backward(grads={y: tg.array(np.ones(2))})
    w.sub_(1.0)
    tape.zero()                                       # a new evaluation at the current values
    tape.backward(grads={y: tg.array(np.ones(2))})
    np.testing.assert_allclose(x.grad.numpy(), exact, rtol=1e-14)


def test_a_tensor_passed_directly_written_over_an_array_an_adjoint_reads_raises():
    torch = pytest.importorskip("torch")
    x, y = _mix_setup()
    t = torch.tensor([2.0, 3.0], dtype=torch.float64)
    w = tg.from_torch(t)                              # the same memory, as an array
    with tg.Tape():
        tg.launch(mix, 2, inputs=[x, w], outputs=[y])
        with pytest.raises(RuntimeError, match=r"into memory of array 'w' that launch #0 .* read"):
            tg.launch(clear, 2, inputs=[t])


def test_an_array_written_over_a_tensor_an_earlier_record_read_directly_raises():
    """The other direction: the tensor was passed directly to the reading launch, and a later
    recorded launch writes an array over its memory (natively recorded launches included: a tape
    holding such a tensor records through its checks until reset)."""
    torch = pytest.importorskip("torch")
    x, y = _mix_setup()
    t = torch.tensor([2.0, 3.0], dtype=torch.float64)
    w = tg.from_torch(t)
    other = tg.zeros(2, dtype=tg.float64)
    tape = tg.Tape()
    with tape:
        tg.launch(mix, 2, inputs=[x, t], outputs=[y])
        for _ in range(3):
            tg.launch(clear, 2, inputs=[other])       # unrelated memory: recorded
        with pytest.raises(RuntimeError, match=r"writes array 'w' over memory that launch #0 .* read from a torch "
                                               r"tensor passed directly"):
            tg.launch(clear, 2, inputs=[w])
    assert t.tolist() == [2.0, 3.0]
    assert len(tape.launches) == 4
    tape.reset()
    with tape:                                        # a fresh recording records natively again
        tg.launch(clear, 2, inputs=[w])
    assert len(tape.launches) == 1
