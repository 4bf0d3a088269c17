"""Generic kernels (typing.Any) as framework ops: torch_op, paddle_op and jax_kernel specialize
per call from the inputs' types (one op per type combination), gradients included."""
import numpy as np
import pytest

import tapegrad as tg

from ._generic_kernels import scaled_square


@pytest.mark.torch
def test_torch_op_specializes_per_dtype_with_gradients():
    import torch
    op = tg.torch_op(scaled_square)
    assert tg.torch_op(scaled_square) is op
    r32 = op(torch.arange(3.0), 2.0)
    assert r32.dtype == torch.float32 and r32.tolist() == [0.0, 2.0, 8.0]
    r64 = op(torch.arange(3, dtype=torch.float64), 2.0)
    assert r64.dtype == torch.float64
    assert op.op_for(torch.arange(3.0), 2.0) is not op.op_for(torch.arange(3, dtype=torch.float64), 2.0)
    assert torch.autograd.gradcheck(lambda t: op(t, 1.5), (torch.rand(5, dtype=torch.float64, requires_grad=True),))
    with pytest.raises(TypeError, match="expected 2 arguments"):
        op(torch.arange(3.0))


@pytest.mark.paddle
def test_paddle_op_specializes_per_dtype():
    import paddle
    op = tg.paddle_op(scaled_square)
    x = paddle.to_tensor(np.arange(3.0, dtype=np.float64), stop_gradient=False)
    y = op(x, 3.0)
    assert y.dtype == paddle.float64
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * np.arange(3.0))


@pytest.mark.jax
def test_jax_kernel_specializes_per_dtype_with_grad():
    import jax
    import jax.numpy as jnp
    k = tg.jax_kernel(scaled_square)
    out = jax.jit(lambda x: k(x, 2.0)[0])(jnp.arange(3.0))
    np.testing.assert_allclose(np.asarray(out), [0.0, 2.0, 8.0])
    kb = tg.jax_kernel(scaled_square, enable_backward=True)
    g = jax.grad(lambda x: jnp.sum(kb(x, 3.0)[0]))(jnp.arange(4.0))
    np.testing.assert_allclose(np.asarray(g), 6.0 * np.arange(4.0))
    ki = tg.jax_kernel(scaled_square)
    np.testing.assert_array_equal(np.asarray(ki(jnp.arange(3, dtype=jnp.int32), 2)[0]), [0, 2, 8])
