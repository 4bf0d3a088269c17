"""Issue 28, item 5: jax_kernel with launch_dims of fewer dims than an output (a kernel looping
over an outer axis itself): the output takes the first array input's shape, as Warp's does, with
and without enable_backward, under jax.grad and vmap (float64 references, check_grads)."""
import numpy as np
import pytest

import tapegrad as tg

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax.test_util import check_grads  # noqa: E402


@pytest.fixture
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


@tg.kernel
def cube_outer(a: tg.array4d[tg.float64], b: tg.array4d[tg.float64]):
    i, j, k = tg.tid()
    for m in range(a.shape[0]):
        b[m, i, j, k] = a[m, i, j, k] * a[m, i, j, k] * (1.0 + tg.float64(m))


@tg.kernel
def scale_outer(a: tg.array3d[tg.float64], b: tg.array3d[tg.float64]):
    i, j = tg.tid()
    for m in range(a.shape[0]):
        b[m, i, j] = a[m, i, j] * 3.0


@tg.kernel
def to_2d(a: tg.array[tg.float64], b: tg.array2d[tg.float64]):
    i = tg.tid()
    b[i, 0] = a[i]


def _ref(a):
    w = 1.0 + np.arange(a.shape[0]).reshape(-1, 1, 1, 1)
    return a * a * w


@pytest.mark.parametrize("backward", [False, True])
def test_output_takes_the_first_inputs_shape(x64, backward):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 2, 4, 5))
    k = tg.jax_kernel(cube_outer, launch_dims=(2, 4, 5), enable_backward=backward)
    (out,) = k(jnp.asarray(a))
    assert out.shape == (3, 2, 4, 5)
    np.testing.assert_allclose(np.asarray(out), _ref(a), rtol=1e-14)
    (out,) = jax.jit(lambda x: k(x))(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(out), _ref(a), rtol=1e-14)


def test_gradient_through_the_outer_loop(x64):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 2, 4, 5))
    k = tg.jax_kernel(cube_outer, launch_dims=(2, 4, 5), enable_backward=True)

    def loss(x):
        return jnp.sum(k(x)[0] ** 2)

    g = jax.grad(loss)(jnp.asarray(a))
    w = 1.0 + np.arange(3).reshape(-1, 1, 1, 1)
    # d/da sum((w a^2)^2) = 4 w^2 a^3: counted once per element (no over-accumulation per outer index)
    np.testing.assert_allclose(np.asarray(g), 4.0 * w * w * a ** 3, rtol=1e-12)
    check_grads(lambda x: k(x)[0], (jnp.asarray(a),), order=2, modes=["rev", "fwd"], eps=1e-4)


def test_under_vmap(x64):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 3, 4, 4))        # vmap axis, outer axis, launch grid
    k = tg.jax_kernel(scale_outer, launch_dims=(4, 4), enable_backward=True)
    batched = jax.vmap(lambda x: k(x)[0])
    np.testing.assert_allclose(np.asarray(batched(jnp.asarray(a))), 3.0 * a, rtol=1e-15)
    g = jax.grad(lambda x: jnp.sum(batched(x)))(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(g), np.full_like(a, 3.0), rtol=1e-15)


def test_no_input_of_the_outputs_rank_still_raises(x64):
    k = tg.jax_kernel(to_2d)
    with pytest.raises(ValueError, match=r"output 'b' .* needs 2 non-negative output dims, got \(4,\)"):
        k(jnp.ones(4, dtype=jnp.float64))


@pytest.mark.cuda
def test_output_takes_the_first_inputs_shape_on_cuda(x64):
    gpu = next((d for d in jax.devices() if d.platform == "gpu"), None)
    if gpu is None:
        pytest.skip("JAX has no GPU backend here")
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 2, 4, 5))
    k = tg.jax_kernel(cube_outer, launch_dims=(2, 4, 5), enable_backward=True)
    x = jax.device_put(jnp.asarray(a), gpu)
    (out,) = jax.jit(lambda v: k(v))(x)
    np.testing.assert_allclose(np.asarray(out), _ref(a), rtol=1e-14)
    g = jax.grad(lambda v: jnp.sum(k(v)[0]))(x)
    np.testing.assert_allclose(np.asarray(g), 2.0 * a * (1.0 + np.arange(3).reshape(-1, 1, 1, 1)), rtol=1e-13)


@tg.kernel
def _triple(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = 3.0 * x[i]


def test_block_dim_checks_and_attribute_as_warp():
    for bad in (0, -1):
        with pytest.raises(ValueError, match="block_dim must be positive"):
            tg.jax_kernel(_triple, block_dim=bad)
    with pytest.raises(ValueError, match="block_dim must be at most 1024"):
        tg.jax_kernel(_triple, block_dim=2048)
    for bad in (True, False, 1.5):
        with pytest.raises(TypeError, match="block_dim must be an integer or None"):
            tg.jax_kernel(_triple, block_dim=bad)
    assert tg.jax_kernel(_triple).block_dim is None
    assert tg.jax_kernel(_triple, enable_backward=True).block_dim is None
    assert tg.jax_kernel(_triple, block_dim=np.int64(64)).block_dim == 64
    k = tg.jax_kernel(_triple, block_dim=32)
    (y,) = k(jnp.arange(100, dtype=jnp.float32))       # runs with the default 256 and with 32
    np.testing.assert_array_equal(np.asarray(y), 3.0 * np.arange(100))
    (y,) = tg.jax_kernel(_triple)(jnp.arange(100, dtype=jnp.float32))
    np.testing.assert_array_equal(np.asarray(y), 3.0 * np.arange(100))
