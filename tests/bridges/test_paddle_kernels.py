"""PaddlePaddle bridge with kernels: tensors passed directly, descriptors, the tape with paddle
gradients, paddle's Adam over parameters declared on either side, and the lazy-grad patterns
(R1, R5, R12, R15, R20, B3). Real paddle on the CPU."""
import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import tapegrad as tg  # noqa: E402
from tapegrad.bridges._base import BridgeTypeError  # noqa: E402

from ._bridge_kernels import copy2d, saxpy, scale_vec3, square, sum_sq, trace22  # noqa: E402

pytestmark = pytest.mark.paddle


@pytest.fixture(autouse=True)
def _on_cpu():
    with tg.ScopedDevice("cpu"):
        yield


def T(x, dtype="float32", stop_gradient=True):
    return paddle.to_tensor(np.asarray(x, dtype=dtype), stop_gradient=stop_gradient)


# ------------------------------------------------------------------------ direct passing

def test_tensors_passed_directly_including_stop_gradient_false():
    x = T(np.arange(8))
    y = T(np.ones(8), stop_gradient=False)     # no gradient travels with a tensor passed directly
    tg.launch(saxpy, dim=8, inputs=[x, y, 2.0])
    tg.launch(saxpy, dim=8, inputs=[x, y, 1.0])
    assert y.numpy().tolist() == (3 * np.arange(8) + 1).tolist()
    assert y.grad is None


def test_launch_loads_the_bridge_on_its_first_paddle_tensor():
    import subprocess
    import sys
    code = """
import sys, paddle, tapegrad as tg
from tests.bridges._bridge_kernels import saxpy
y = paddle.zeros([4])
assert "tapegrad.bridges.paddle" not in sys.modules
tg.launch(saxpy, dim=4, inputs=[paddle.ones([4]), y, 2.0])      # no device=: taken from the tensors
assert y.numpy().tolist() == [2.0] * 4 and "tapegrad.bridges.paddle" in sys.modules
print("ok")
"""
    root = __file__.rsplit("/tests/", 1)[0]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=root)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_direct_vectors_matrices_and_strides():
    v = T(np.arange(12).reshape(4, 3))
    out = paddle.zeros([4, 3])
    tg.launch(scale_vec3, dim=4, inputs=[v, 2.0, out])
    assert np.array_equal(out.numpy(), 2 * v.numpy())
    m = T(np.arange(16).reshape(4, 2, 2))
    tr = paddle.zeros([4])
    tg.launch(trace22, dim=4, inputs=[m], outputs=[tr])
    assert np.array_equal(tr.numpy(), m.numpy()[:, 0, 0] + m.numpy()[:, 1, 1])
    a = T(np.arange(12).reshape(3, 4)).T        # strided, no copy
    b = paddle.zeros([4, 3])
    tg.launch(copy2d, dim=(4, 3), inputs=[a, b])
    assert np.array_equal(a.numpy(), b.numpy())
    e = paddle.as_strided(T(np.arange(3)), [4, 3], [0, 1])      # 0-strides
    tg.launch(copy2d, dim=(4, 3), inputs=[e, b])
    assert np.array_equal(b.numpy(), np.tile(np.arange(3), (4, 1)))


def test_direct_passing_errors_name_the_argument():
    with pytest.raises(BridgeTypeError, match=r"argument 0 \('x'\).*paddle.float64"):
        tg.launch(saxpy, dim=4, inputs=[paddle.zeros([4], dtype="float64"), paddle.zeros([4]), 1.0])
    with pytest.raises(TypeError, match="1-D"):
        tg.launch(saxpy, dim=4, inputs=[paddle.zeros([2, 2]), paddle.zeros([4]), 1.0])
    with pytest.raises(RuntimeError, match="trailing"):
        tg.launch(scale_vec3, dim=4, inputs=[paddle.zeros([4, 2]), 1.0, paddle.zeros([4, 3])])
    with pytest.raises(RuntimeError, match="contiguous"):        # a non-contiguous tensor with a vector dtype
        tg.launch(scale_vec3, dim=4, inputs=[paddle.zeros([3, 4]).T, 1.0, paddle.zeros([4, 3])])
    with pytest.raises(TypeError, match="complex64"):
        tg.launch(saxpy, dim=4, inputs=[paddle.zeros([4], dtype="complex64"), paddle.zeros([4]), 1.0])


@pytest.mark.skipif(not tg.is_cuda_available(), reason="needs a CUDA device for the launch")
def test_a_tensor_on_another_device_than_the_launch():
    with pytest.raises((TypeError, ValueError), match="device"):
        tg.launch(saxpy, dim=4, inputs=[paddle.zeros([4]), paddle.zeros([4]), 1.0], device="cuda:0")


def test_three_fast_paths_agree():
    n = 1024
    x = T(np.arange(n))
    ys = [paddle.ones([n]) for _ in range(3)]
    xw, yw = tg.from_paddle(x), tg.from_paddle(ys[0])
    for _ in range(5):
        tg.launch(saxpy, dim=n, inputs=[xw, yw, 1.0])
        tg.launch(saxpy, dim=n, inputs=[tg.from_paddle(x, return_ctype=True),
                                        tg.from_paddle(ys[1], return_ctype=True), 1.0])
        tg.launch(saxpy, dim=n, inputs=[x, ys[2], 1.0])
    assert np.array_equal(ys[0].numpy(), ys[1].numpy()) and np.array_equal(ys[1].numpy(), ys[2].numpy())
    assert np.array_equal(ys[0].numpy(), 5 * np.arange(n) + 1)


def test_descriptor_gradients_feed_an_adjoint_launch():
    a = T(np.arange(5), stop_gradient=False)
    out = paddle.zeros([5])
    out.stop_gradient = False
    out.grad_ = paddle.ones([5])
    da = tg.from_paddle(a, return_ctype=True)      # allocates a.grad with paddle
    do = tg.from_paddle(out, return_ctype=True)
    tg.launch(square, dim=5, inputs=[da], outputs=[do])
    tg.launch(square, dim=5, inputs=[da], outputs=[do], adjoint=True,
              adj_inputs=[tg.from_paddle(a.grad, requires_grad=False)],
              adj_outputs=[tg.from_paddle(out.grad, requires_grad=False)])
    assert np.array_equal(out.numpy(), a.numpy() ** 2)
    assert np.array_equal(a.grad.numpy(), 2 * a.numpy())


# -------------------------------------------------------------------------- tape and Adam

def test_tape_fills_paddle_grads_and_adam_optimizes_from_paddle():
    """Parameters declared in paddle; the tape writes their .grad; paddle's Adam steps them."""
    xs = T(np.random.default_rng(0).normal(size=(50, 2)), stop_gradient=False)
    opt = paddle.optimizer.Adam(learning_rate=0.1, parameters=[xs])
    w = tg.from_paddle(xs)
    assert w.grad.ptr == xs.grad.data_ptr()
    loss = tg.zeros(1, requires_grad=True)
    first = None
    for _ in range(200):
        loss.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(sum_sq, dim=50, inputs=[w], outputs=[loss])
        first = first if first is not None else float(loss.numpy()[0])
        tape.backward(loss=loss)
        assert np.allclose(xs.grad.numpy(), 2 * xs.numpy())        # what the tape wrote, seen by paddle
        opt.step()
        tape.zero()
    assert float(loss.numpy()[0]) < 1e-2 * first
    assert w.ptr == xs.data_ptr()                                   # Adam updated in place


def test_adam_over_tapegrad_parameters_to_paddle():
    """Parameters declared in tapegrad (s06): paddle's Adam reads the grads the tape wrote."""
    xs = tg.array(np.random.default_rng(1).normal(size=(50, 2)), dtype=tg.float32, requires_grad=True)
    loss = tg.zeros(1, dtype=tg.float32, requires_grad=True)
    p = tg.to_paddle(xs)
    opt = paddle.optimizer.Adam(learning_rate=0.1, parameters=[p])
    tape = tg.Tape()
    with tape:
        tg.launch(sum_sq, dim=50, inputs=[xs], outputs=[loss])
    first = float(loss.numpy()[0])
    for _ in range(300):
        tape.zero()
        tape.backward(loss=loss)
        assert p.grad.data_ptr() == xs.grad.ptr
        opt.step()
        loss.zero_()
        tg.launch(sum_sq, dim=50, inputs=[xs], outputs=[loss])
    assert float(loss.numpy()[0]) < 1e-2 * first and p.data_ptr() == xs.ptr


def test_to_paddle_of_a_grad_is_a_view_until_zeroed():
    x = tg.array(np.arange(4, dtype=np.float32), requires_grad=True)
    out = tg.zeros(4, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square, dim=4, inputs=[x], outputs=[out])
    tape.backward(grads={out: tg.ones(4)})
    g = tg.to_paddle(x.grad)
    kept = g.clone()
    tape.zero()
    assert g.numpy().tolist() == [0.0] * 4 and kept.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]


# ---------------------------------------------------------------------------- lazy grads

def _lazy_step(mode, a):
    """R20's patterns with paddle tensors (benchmarks/interop_paddle.py times them)."""
    if mode == "B":
        t = a.clone().detach()
        w = tg.from_paddle(t)
    else:
        t = a.clone().detach()
        t.stop_gradient = False
        if mode == "baseline":
            w = tg.from_paddle(t)
        elif mode == "A":
            w = tg.from_paddle(t, requires_grad=False)
        else:
            t.grad_ = paddle.zeros_like(t)
            w = tg.from_paddle(t, grad=t.grad)
    out = tg.zeros(a.shape[0], dtype=tg.float32, device=w.device)
    tg.launch(square, dim=a.shape[0], inputs=[w], outputs=[out])
    return t, w, tg.to_paddle(out).clone()


def test_lazy_grad_patterns_agree_and_share_paddle_grads():
    a = paddle.linspace(-1, 1, 100)
    ref = _lazy_step("baseline", a)[2]
    for mode in ("A", "B", "C"):
        assert np.array_equal(_lazy_step(mode, a)[2].numpy(), ref.numpy()), mode
    t, w, _ = _lazy_step("baseline", a)
    assert t.grad is not None and w.grad.ptr == t.grad.data_ptr()
    t, w, _ = _lazy_step("A", a)
    assert t.grad is None and w.grad is None
    t, w, _ = _lazy_step("C", a)
    assert w.grad.ptr == t.grad.data_ptr()
