"""jax_kernel grids past 2^31 - 1 threads: the XLA handler runs the kernel's wide build (64-bit
tid()), as tg.launch does; past 2^63 - 1 threads, and in forward mode past 2^31 - 1, it refuses."""
import numpy as np
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pytestmark = pytest.mark.jax

NARROW = 2 ** 31 - 1
TID_DISABLED = False     # a module constant: the branch below is removed when the kernel is compiled


@tg.kernel
def _fill(out: tg.array(dtype=tg.float32, ndim=2)):
    i, j = tg.tid()
    out[i, j] = 1.0


@tg.kernel
def _last_threads(out: tg.array(dtype=tg.int64)):
    i = tg.tid()
    if i >= 2147483646:
        out[i - 2147483646] = tg.int64(i)


@tg.kernel
def _dead_tid(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    if TID_DISABLED:
        i = tg.tid()
        y[i] = x[i]


@tg.kernel
def _scale(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    if i < 4:
        y[i] = 2.0 * x[i]


def test_grid_past_int32_runs_the_wide_build():
    # the threads past 2^31 - 1 see their own 64-bit index (the 32-bit build would wrap them
    # to negative values and write nothing)
    jax.config.update("jax_enable_x64", True)
    try:
        op = tg.jax_kernel(_last_threads, launch_dims=(NARROW + 2,), output_dims=3)
        out = np.asarray(jax.jit(lambda: op()[0])())
    finally:
        jax.config.update("jax_enable_x64", False)
    np.testing.assert_array_equal(out, np.array([NARROW - 1, NARROW, NARROW + 1], dtype=np.int64))


def test_compile_time_dead_tid_kernel_lowers_and_runs_past_int32():
    op = tg.jax_kernel(_dead_tid, launch_dims=(NARROW + 2,), output_dims=1,
                       module_preload_mode=tg.JaxModulePreloadMode.NONE)
    run = jax.jit(lambda: op(jnp.ones(1, jnp.float32))[0])
    assert run.lower() is not None
    np.testing.assert_array_equal(np.asarray(run()), np.zeros(1, np.float32))


def test_grid_past_int64_is_refused():
    op = tg.jax_kernel(_fill, num_outputs=1, launch_dims=(2 ** 32, 2 ** 32), output_dims=(1, 1))
    with pytest.raises(ValueError, match=r"launch_dims \(4294967296, 4294967296\) has 18446744073709551616 threads"):
        op()


def test_forward_mode_past_int32_is_refused():
    op = tg.jax_kernel(_scale, launch_dims=(NARROW + 2,), output_dims=4, enable_backward=True)
    x = jnp.arange(4, dtype=jnp.float32)
    with pytest.raises(ValueError, match=r"forward mode .* at most 2\^31 - 1 threads"):
        jax.jvp(lambda v: op(v)[0], (x,), (jnp.ones_like(x),))


def test_gradient_past_int32_runs_the_wide_adjoint():
    op = tg.jax_kernel(_scale, launch_dims=(NARROW + 2,), output_dims=4, enable_backward=True)
    x = jnp.arange(4, dtype=jnp.float32)
    g = jax.jit(jax.grad(lambda v: jnp.sum(op(v)[0] * jnp.arange(1.0, 5.0))))(x)
    np.testing.assert_array_equal(np.asarray(g), 2.0 * np.arange(1.0, 5.0))


@pytest.mark.cuda
def test_grid_past_int32_cuda():
    gpu = next((d for d in jax.devices() if d.platform == "gpu"), None)
    if gpu is None:
        pytest.skip("JAX has no GPU backend")
    jax.config.update("jax_enable_x64", True)
    try:
        with jax.default_device(gpu):
            op = tg.jax_kernel(_last_threads, launch_dims=(NARROW + 2,), output_dims=3)
            out = np.asarray(jax.jit(lambda: op()[0])())
            sc = tg.jax_kernel(_scale, launch_dims=(NARROW + 2,), output_dims=4, enable_backward=True)
            x = jax.device_put(jnp.arange(4, dtype=jnp.float32), gpu)
            g = jax.jit(jax.grad(lambda v: jnp.sum(sc(v)[0] * jnp.arange(1.0, 5.0, dtype=jnp.float32))))(x)
    finally:
        jax.config.update("jax_enable_x64", False)
    np.testing.assert_array_equal(out, np.array([NARROW - 1, NARROW, NARROW + 1], dtype=np.int64))
    np.testing.assert_array_equal(np.asarray(g), 2.0 * np.arange(1.0, 5.0))
