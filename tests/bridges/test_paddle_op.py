"""``tg.paddle_op``: a kernel as a ``paddle.autograd.PyLayer`` in one call (B2) — values and
gradients against float64 finite differences under ``loss.backward()`` and ``paddle.grad``,
scalars, several outputs, integer inputs, shapes, ``paddle.jit.to_static``, errors."""
import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import tapegrad as tg  # noqa: E402
from tapegrad.bridges._base import BridgeTypeError  # noqa: E402

from . import _bridge_checks as checks  # noqa: E402
from ._bridge_kernels import count_pos, fwd_only, gather, outer, rosenbrock, row_sums, scale_vec, sincos  # noqa: E402,E501

pytestmark = pytest.mark.paddle


def T(x, stop_gradient=False, dtype="float64"):
    return paddle.to_tensor(np.asarray(x, dtype=dtype), stop_gradient=stop_gradient)


def fd_check(f, xs, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0):
    """Gradients of ``sum(w * f(*xs))`` (random w) from loss.backward() and from paddle.grad
    against central finite differences in float64, for every input with stop_gradient=False."""
    rng = np.random.default_rng(seed)
    outs = f(*xs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    ws = [rng.normal(size=o.shape) for o in outs]

    def loss_np(vals):
        with paddle.no_grad():
            r = f(*[T(v, stop_gradient=True, dtype=str(x.dtype).split(".")[-1]) for v, x in zip(vals, xs)])
        r = r if isinstance(r, (tuple, list)) else (r,)
        return sum(float((w * o.numpy()).sum()) for w, o in zip(ws, r))

    def loss():
        r = f(*xs)
        r = r if isinstance(r, (tuple, list)) else (r,)
        return sum((paddle.to_tensor(w) * o).sum() for w, o in zip(ws, r))

    diff = [x for x in xs if not x.stop_gradient]
    for x in diff:
        x.clear_gradient()
    loss().backward()
    by_backward = [x.grad.numpy().copy() for x in diff]
    by_grad = [g.numpy() for g in paddle.grad(loss(), diff)]
    vals = [x.numpy().astype(np.float64) for x in xs]
    for k, x in enumerate(diff):
        idx = next(i for i, y in enumerate(xs) if y is x)
        num = np.zeros(vals[idx].size)
        flat = vals[idx].reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            hi = loss_np(vals)
            flat[j] = old - eps
            lo = loss_np(vals)
            flat[j] = old
            num[j] = (hi - lo) / (2 * eps)
        num = num.reshape(vals[idx].shape)
        np.testing.assert_allclose(by_backward[k], num, rtol=rtol, atol=atol)
        np.testing.assert_allclose(by_grad[k], num, rtol=rtol, atol=atol)


def _rb_ref(xy):
    x = xy.numpy()
    return (1 - x[:, 0]) ** 2 + 100 * (x[:, 1] - x[:, 0] ** 2) ** 2


# ---------------------------------------------------------------------------------- basics

def test_values_and_gradients_against_finite_differences():
    op = tg.paddle_op(rosenbrock)
    xy = T(np.random.default_rng(0).normal(size=(8, 2)))
    z = op(xy)
    assert isinstance(z, paddle.Tensor) and list(z.shape) == [8] and z.dtype == paddle.float64
    assert not z.stop_gradient and np.allclose(z.numpy(), _rb_ref(xy))
    fd_check(op, [xy])


def test_same_configuration_same_op():
    assert tg.paddle_op(rosenbrock) is tg.paddle_op(rosenbrock)
    assert tg.paddle_op(outer, output_dims={"out": (3, 4)}, launch_dims=(3, 4)) is \
        tg.paddle_op(outer, output_dims={"out": (3, 4)}, launch_dims=(3, 4))
    op = tg.paddle_op(rosenbrock)
    assert op.kernel is rosenbrock and issubclass(op.pylayer, paddle.autograd.PyLayer)


def test_several_outputs_and_a_scalar():
    op = tg.paddle_op(sincos, num_outputs=2)
    x = T(np.linspace(-2, 2, 7))
    a, b = op(x, 3.0)
    assert np.allclose(a.numpy(), 3 * np.sin(x.numpy())) and np.allclose(b.numpy(), np.cos(x.numpy()))
    fd_check(lambda t: op(t, 3.0), [x])
    (g,) = paddle.grad(op(x, 3.0)[1].sum(), [x])      # one output used: the other's gradient is zero
    assert np.allclose(g.numpy(), -np.sin(x.numpy()))


def test_integer_inputs_get_no_gradient():
    op = tg.paddle_op(gather)
    idx = paddle.to_tensor([2, 0, 2, 1], dtype="int32")
    table = T([1.0, 2.0, 3.0])
    out = op(idx, table)
    assert out.numpy().tolist() == [6.0, 2.0, 6.0, 4.0]
    out.sum().backward()
    assert table.grad.numpy().tolist() == [2.0, 2.0, 4.0]    # atomically accumulated adjoint reads
    assert idx.grad is None
    fd_check(lambda t: op(idx, t), [table])


def test_integer_outputs_are_not_differentiable():
    op = tg.paddle_op(count_pos, output_dims=1)
    x = T([-1.0, 2.0, 3.0])
    n = op(x)
    assert n.dtype == paddle.int32 and n.numpy().tolist() == [2] and n.stop_gradient


def test_launch_dims_and_output_dims_functions():
    op = tg.paddle_op(row_sums, launch_dims=lambda m: m.shape[0])
    m = T(np.random.default_rng(1).normal(size=(5, 7)))
    assert np.allclose(op(m).numpy(), (m.numpy() ** 2).sum(1))
    fd_check(op, [m])
    for rows in (3, 6):
        t = T(np.ones((rows, 4)))
        assert op(t).numpy().tolist() == [4.0] * rows
    op2 = tg.paddle_op(outer, launch_dims=lambda a, b: (a.shape[0], b.shape[0]),
                       output_dims={"out": lambda a, b: (a.shape[0], b.shape[0])})
    a, b = T([1.0, 2.0, 3.0]), T([1.0, -1.0, 0.5, 2.0])
    assert np.allclose(op2(a, b).numpy(), np.outer(a.numpy(), b.numpy()))
    fd_check(op2, [a, b])
    op3 = tg.paddle_op(outer, launch_dims=(3, 4), output_dims=(3, 4))
    assert np.allclose(op3(a, b).numpy(), np.outer(a.numpy(), b.numpy()))


def test_vector_outputs_int_scalars_and_non_contiguous_inputs():
    op = tg.paddle_op(scale_vec)
    v = T(np.random.default_rng(2).normal(size=(6, 3)))
    out = op(v, 0.5, 4)
    assert list(out.shape) == [6, 3] and np.allclose(out.numpy(), 2 * v.numpy())
    fd_check(lambda t: op(t, 0.5, 4), [v])
    vt = T(np.random.default_rng(3).normal(size=(3, 6)), stop_gradient=True).T   # component dim not contiguous
    vt.stop_gradient = False
    assert np.allclose(op(vt, 1.0, 1).numpy(), vt.numpy())
    (g,) = paddle.grad(op(vt, 3.0, 1).sum(), [vt])
    assert np.array_equal(g.numpy(), np.full((6, 3), 3.0))


def test_stop_gradient_inputs_and_no_grad():
    op = tg.paddle_op(rosenbrock)
    xy = T(np.ones((3, 2)), stop_gradient=True)
    z = op(xy)
    assert z.stop_gradient
    with paddle.no_grad():
        z2 = op(T(np.ones((3, 2))))
    assert z2.stop_gradient and np.allclose(z2.numpy(), 0.0)


def test_a_stop_gradient_float_input_next_to_a_trainable_one():
    """Issue 23 item 8: a float input with stop_gradient=True (paddle's default for plain
    tensors) next to a trainable one; paddle requires None for it in backward (it refused the
    op's zero gradient before: "backward function should return None at 1 position")."""
    op2 = tg.paddle_op(outer, launch_dims=lambda a, b: (a.shape[0], b.shape[0]),
                       output_dims={"out": lambda a, b: (a.shape[0], b.shape[0])})
    a, b = T([1.0, 2.0, 3.0]), T([1.0, -1.0, 0.5, 2.0], stop_gradient=True)
    op2(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.full(3, b.numpy().sum()))   # d/da_i sum_j a_i b_j
    assert b.grad is None
    fd_check(op2, [a, b])                                        # paddle.grad too, against float64 FD
    a2, b2 = T([1.0, 2.0, 3.0], stop_gradient=True), T([1.0, -1.0, 0.5, 2.0])   # the other way round
    (gb,) = paddle.grad(op2(a2, b2).sum(), [b2])
    np.testing.assert_array_equal(gb.numpy(), np.full(4, 6.0))


def test_forward_only_kernel():
    op = tg.paddle_op(fwd_only)
    assert op(paddle.zeros([3])).numpy().tolist() == [1.0, 1.0, 1.0]
    x = paddle.zeros([3])
    x.stop_gradient = False
    with pytest.raises((RuntimeError, OSError), match="enable_backward=False"):   # paddle re-raises
        op(x).sum().backward()                                                   # backward errors as OSError


def test_under_jit_to_static():
    op = tg.paddle_op(rosenbrock)

    def loss(t):
        return op(t).sum() * 2.0

    xy = T(np.random.default_rng(4).normal(size=(4, 2)))
    sot = paddle.jit.to_static(loss)                       # the default (SOT) mode: the op runs eagerly
    r = sot(xy)
    assert np.allclose(float(r), 2 * _rb_ref(xy).sum())
    r.backward()
    ref = xy.detach()
    ref.stop_gradient = False
    (2 * ((1 - ref[:, 0]) ** 2 + 100 * (ref[:, 1] - ref[:, 0] ** 2) ** 2).sum()).backward()
    assert np.allclose(xy.grad.numpy(), ref.grad.numpy())
    whole = paddle.jit.to_static(loss, full_graph=True)    # a whole static program: a clear error
    with pytest.raises(RuntimeError, match="static graph"):
        whole(xy)


# ---------------------------------------------------------------------------------- errors

def test_construction_errors():
    checks.op_construction_errors(tg.paddle_op)


def test_call_errors_name_the_argument():
    op = tg.paddle_op(rosenbrock)
    with pytest.raises(BridgeTypeError, match="'xy'.*paddle.float32"):
        op(paddle.zeros([4, 2], dtype="float32"))
    with pytest.raises(TypeError, match="'xy'.*2-D"):
        op(paddle.zeros([8], dtype="float64"))
    with pytest.raises(RuntimeError, match="'xy'.*trailing"):
        op(paddle.zeros([4, 3], dtype="float64"))
    with pytest.raises(TypeError, match=r"expected 1 arguments \(xy\), got 2"):
        op(paddle.zeros([4, 2], dtype="float64"), 1.0)
    with pytest.raises(TypeError, match="'xy': expected a paddle tensor for .*, got ndarray"):
        op(np.zeros((4, 2)))
    with pytest.raises(TypeError, match="complex64"):
        op(paddle.zeros([4, 2], dtype="complex64"))
    big = tg.paddle_op(rosenbrock, launch_dims=8)             # the grid would read xy past its end
    with pytest.raises(ValueError, match="launch grid"):
        big(paddle.zeros([4, 2], dtype="float64"))


def test_an_input_modified_in_place_after_the_forward_raises():
    """paddle checks the inplace versions of what its own ops save, not of a PyLayer's: an input
    scaled in place between the op and backward gave the gradient at the new values, silently."""
    op = tg.paddle_op(sincos, num_outputs=2)
    x = T([0.1, 0.2, 0.3])
    b = x * 1.0
    a, _ = op(b, 2.0)
    b.scale_(10.0)                       # as paddle.sin(b) then b.scale_(10.0) would, raise
    with pytest.raises(Exception, match="paddle_op '.*sincos' argument 'x' was modified by an inplace operation"):
        a.sum().backward()
    a, c = op(x * 1.0, 2.0)              # untouched: the gradient is right
    (a.sum() + c.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * np.cos([0.1, 0.2, 0.3]) - np.sin([0.1, 0.2, 0.3]), rtol=1e-12)
