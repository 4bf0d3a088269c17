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
