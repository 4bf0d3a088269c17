"""The JAX bridge on CUDA: zero-copy conversions, jax_kernel on XLA's stream (plain, vmap,
grad, inside XLA command buffers), jax_callable in every graph mode."""
import numpy as np
import pytest

import tapegrad as tg

from ._jax_kernels import accum, triple, two_step

pytestmark = [pytest.mark.jax, pytest.mark.cuda]

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture(scope="module")
def gpu():
    """JAX's first GPU (the module's jax + cuda markers skip it where JAX has no GPU backend)."""
    return next(d for d in jax.devices() if d.platform == "gpu")


def test_conversions_zero_copy(gpu):
    x = jax.device_put(jnp.arange(10, dtype=jnp.float32), gpu)
    a = tg.from_jax(x)
    assert a.device.is_cuda and a.ptr == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(a.numpy(), np.arange(10))
    b = tg.array(np.arange(5, dtype=np.float32), device="cuda:0")
    j = tg.to_jax(b)
    assert j.unsafe_buffer_pointer() == b.ptr and next(iter(j.devices())).platform == "gpu"
    np.testing.assert_array_equal(np.asarray(j), np.arange(5))
    assert tg.device_from_jax(gpu) == tg.get_device("cuda:0")
    assert tg.device_to_jax("cuda:0") == gpu


def test_kernel_jit_eager_large(gpu):
    k = tg.jax_kernel(triple)
    for n in (64, 1 << 22):
        x = jax.device_put(jnp.arange(n, dtype=jnp.float32), gpu)
        (y,) = jax.jit(k)(x)
        np.testing.assert_allclose(np.asarray(y), 3.0 * np.asarray(x))
    (y,) = k(jax.device_put(jnp.ones(7, jnp.float32), gpu))
    np.testing.assert_allclose(np.asarray(y), 3.0)


def test_block_dim(gpu):
    k = tg.jax_kernel(triple, block_dim=64)
    x = jax.device_put(jnp.arange(1000, dtype=jnp.float32), gpu)
    np.testing.assert_allclose(np.asarray(jax.jit(k)(x)[0]), 3.0 * np.arange(1000))


@pytest.mark.parametrize("method", ["broadcast_all", "expand_dims", "sequential", "legacy_vectorized"])
def test_vmap_atomics(gpu, method):
    k = tg.jax_kernel(accum, in_out_argnames=["sums"], vmap_method=method)
    xs = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), gpu)
    (r,) = jax.jit(jax.vmap(k))(xs, jnp.zeros((3, 1), jnp.float32))
    np.testing.assert_allclose(np.asarray(r).ravel(), [6, 22, 38])
    (r,) = jax.jit(jax.vmap(k, in_axes=(0, None)))(xs, jnp.ones(1, jnp.float32))
    np.testing.assert_allclose(np.asarray(r).ravel(), [7, 23, 39])


def test_grad(gpu):
    @tg.kernel
    def sq(x: tg.array[float], y: tg.array[float]):
        i = tg.tid()
        y[i] = x[i] * x[i] * 3.0
    k = tg.jax_kernel(sq, enable_backward=True)
    x = jax.device_put(jnp.linspace(-1.0, 1.0, 16, dtype=jnp.float32), gpu)
    g = jax.jit(jax.grad(lambda x: jnp.sum(k(x)[0])))(x)
    np.testing.assert_allclose(np.asarray(g), 6.0 * np.asarray(x), atol=1e-5)
    gb = jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(k(x)[0]))))(jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(np.asarray(gb), 6.0 * np.stack([x, 2 * x]), atol=1e-5)


def test_inside_a_loop_command_buffer(gpu):
    """XLA may record the FFI call into a CUDA graph (command buffer): repeated runs stay right."""
    k = tg.jax_kernel(triple)

    @jax.jit
    def f(x):
        return jax.lax.fori_loop(0, 5, lambda i, x: k(x)[0] / 3.0 + 1.0, x)
    x = jax.device_put(jnp.zeros(256, jnp.float32), gpu)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x)), 5.0)


@pytest.mark.parametrize("mode", list(tg.GraphMode))
def test_callable_graph_modes(gpu, mode):
    fn = tg.jax_callable(two_step, graph_mode=mode)
    f = jax.jit(lambda x: fn(x, 2.0)[0])
    for n in (16, 16, 32):          # a repeat (graph reuse) and another shape
        x = jax.device_put(jnp.arange(n, dtype=jnp.float32), gpu)
        for _ in range(2):
            np.testing.assert_allclose(np.asarray(f(x)), 3.0 * np.arange(n))
    if mode in (tg.GraphMode.WARP, tg.GraphMode.WARP_STAGED, tg.GraphMode.WARP_STAGED_EX):
        assert fn.graph_cache_size >= 1
        tg.clear_jax_callable_graph_cache(fn)
        assert fn.graph_cache_size == 0


def test_callable_graph_cache_bound(gpu):
    fn = tg.jax_callable(two_step, graph_mode=tg.GraphMode.WARP, graph_cache_max=2)
    for n in (8, 9, 10, 11):
        x = jax.device_put(jnp.arange(n, dtype=jnp.float32), gpu)
        np.testing.assert_allclose(np.asarray(jax.jit(lambda x: fn(x, 1.0)[0])(x)), 2.0 * np.arange(n))
    assert fn.graph_cache_size <= 2


def test_staged_in_out_names(gpu):
    fn = tg.jax_callable(two_step, graph_mode=tg.GraphMode.WARP_STAGED_EX, stage_in_argnames=["a"],
                         stage_out_argnames=["out"])
    x = jax.device_put(jnp.arange(8, dtype=jnp.float32), gpu)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: fn(x, 2.0)[0])(x)), 3.0 * np.arange(8))
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: fn(x, 2.0)[0])(x + 1)), 3.0 * (np.arange(8) + 1))


def test_vector_outputs_static_scalar_and_backward_with_launch_dims(gpu):
    @tg.kernel
    def scale_two(a: tg.array[float], s: float, b: tg.array[float], c: tg.array[tg.vec3]):
        i = tg.tid()
        b[i] = a[i] * s
        c[i] = tg.vec3(a[i], s, 0.0)
    k = tg.jax_kernel(scale_two, num_outputs=2)
    b, c = jax.jit(k, static_argnums=1)(jax.device_put(jnp.arange(8, dtype=jnp.float32), gpu), 2.0)
    np.testing.assert_allclose(np.asarray(b), 2 * np.arange(8))
    assert c.shape == (8, 3) and float(c[3, 1]) == 2.0

    @tg.kernel
    def row_sq(m: tg.array2d[float], out: tg.array[float]):
        i = tg.tid()
        s = float(0.0)
        for j in range(m.shape[1]):
            s += m[i, j] * m[i, j]
        out[i] = s
    kr = tg.jax_kernel(row_sq, launch_dims=lambda m: m.shape[0], enable_backward=True)
    m = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 10, gpu)
    g = jax.jit(jax.grad(lambda m: jnp.sum(kr(m)[0])))(m)
    np.testing.assert_allclose(np.asarray(g), 2 * np.asarray(m), rtol=1e-6)


def test_callable_vmap(gpu):
    def sums(x: tg.array[float], total: tg.array[float]):
        tg.launch(accum, dim=x.shape, inputs=[x], outputs=[total])
    fn = tg.jax_callable(sums, output_dims=1)
    xs = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), gpu)
    (t,) = jax.jit(jax.vmap(fn))(xs)
    np.testing.assert_allclose(np.asarray(t).ravel(), [6, 22, 38])
