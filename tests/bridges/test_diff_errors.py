"""Differentiation errors that tell the fix (issue 29 item 8): a gradient asked through a tapegrad
op that has none names the op and the kernel and says what gives one (``enable_backward=True``,
the supported transforms). Before, JAX said only "The FFI call to `tapegrad_kernel` cannot be
differentiated" and torch suggested ``register_autograd``."""
import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def cube(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    y[i] = x[i] * x[i] * x[i]


@tg.kernel(enable_backward=False)
def cube_fwd(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    y[i] = x[i] * x[i] * x[i]


def _cubes(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    tg.launch(cube, dim=x.shape, inputs=[x], outputs=[y])


@pytest.mark.jax
@pytest.mark.parametrize("kernel", [cube, cube_fwd], ids=["with_adjoint", "forward_only"])
def test_jax_grad_through_a_kernel_without_backward_names_it_and_the_fix(kernel):
    import jax
    import jax.numpy as jnp
    k = tg.jax_kernel(kernel)      # enable_backward=False, the default
    x = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    np.testing.assert_allclose(np.asarray(k(x)[0]), [1.0, 8.0, 27.0])
    f = lambda v: k(v)[0].sum()    # noqa: E731
    np.testing.assert_allclose(float(jax.jit(f)(x)), 36.0)                 # traced, not differentiated: runs
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda v: k(v)[0])(jnp.stack([x, 2 * x]))),
                               [[1.0, 8.0, 27.0], [8.0, 64.0, 216.0]])
    for transform in (jax.grad(f), jax.jit(jax.grad(f)), lambda v: jax.jvp(f, (v,), (v,))):
        with pytest.raises(ValueError, match=r"jax_kernel '.*cube.*'.*enable_backward=True.*jax\.grad") as e:
            transform(x)
        if kernel is cube_fwd:
            assert "Drop enable_backward=False" in str(e.value)
    # a gradient with respect to something else than the kernel's input is no error
    g = jax.grad(lambda a, v: a * jax.lax.stop_gradient(k(v)[0]).sum())(2.0, x)
    np.testing.assert_allclose(float(g), 36.0)


@pytest.mark.jax
def test_jax_grad_with_enable_backward_still_exact():
    import jax
    import jax.numpy as jnp
    k = tg.jax_kernel(cube, enable_backward=True)
    x = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda v: k(v)[0].sum())(x)), 3 * np.asarray(x) ** 2, rtol=1e-6)


@pytest.mark.jax
def test_jax_callable_grad_names_it_and_the_fix():
    import jax
    import jax.numpy as jnp
    fn = tg.jax_callable(_cubes)
    x = jnp.array([1.0, 2.0], jnp.float32)
    np.testing.assert_allclose(float(jax.jit(lambda v: fn(v)[0].sum())(x)), 9.0)
    with pytest.raises(ValueError, match=r"jax_callable.*no derivative.*enable_backward=True"):
        jax.grad(lambda v: fn(v)[0].sum())(x)


@pytest.mark.torch
def test_torch_op_backward_through_a_forward_only_kernel_names_it_and_the_fix():
    import torch
    op = tg.torch_op(cube_fwd)
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = op(x)
    assert y.tolist() == [1.0, 8.0]
    with pytest.raises(RuntimeError, match=r"torch_op '.*cube_fwd'.*enable_backward=False.*torch.no_grad"):
        y.sum().backward()
    with torch.no_grad():
        assert op(x).tolist() == [1.0, 8.0]
    y = tg.torch_op(cube)(x)                       # with the adjoint: exact
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert gx.tolist() == [3.0, 12.0]


@pytest.mark.paddle
def test_paddle_op_backward_through_a_forward_only_kernel_names_the_fix():
    import paddle
    op = tg.paddle_op(cube_fwd)
    x = paddle.to_tensor([1.0, 2.0], stop_gradient=False)
    with pytest.raises((RuntimeError, OSError), match=r"cube_fwd.*Drop enable_backward=False.*stop_gradient"):
        op(x).sum().backward()
