"""``jax_callable`` and ``jax_kernel`` under every ``vmap_method`` inside ``jax.jit``, also
inside a loop (issue 24 item 8). On CUDA, XLA records such calls into command buffers (CUDA
graphs; a ``while`` body as a conditional node): every operation of the handlers must be
capturable on XLA's stream — outputs zeroed and unaliased in-out arrays seeded through the
driver, no stream-flag query (refused during a capture, which it invalidates), no CuPy work on
another stream. Before, ``vmap_method="sequential"`` under ``jit`` failed on CUDA with
``cudaErrorStreamCaptureInvalidated``. Each test runs on the CPU and (marked ``cuda``) on the GPU,
against NumPy."""
import numpy as np
import pytest

import tapegrad as tg

from ._jax_kernels import add_into, scale

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from tapegrad.bridges.jax.kernel import VMAP_METHODS  # noqa: E402

_PLATFORMS = [pytest.param("cpu", id="cpu"), pytest.param("gpu", id="cuda", marks=pytest.mark.cuda)]


@tg.kernel
def acc_and_double(x: tg.array[float], acc: tg.array[float], out: tg.array[float]):
    i = tg.tid()
    acc[i] = acc[i] + x[i]
    out[i] = out[i] + 2.0 * x[i]      # reads the output: it must start at zero


def acc_and_double_fn(x: tg.array[float], acc: tg.array[float], out: tg.array[float]):
    """The callable twin: acc += x (in-out), out = 2 x (a zeroed output), in two launches."""
    tg.launch(add_into, dim=x.shape, inputs=[x], outputs=[acc])
    tg.launch(scale, dim=x.shape, inputs=[x, 2.0], outputs=[out])


def _put(platform, a):
    return jax.device_put(jnp.asarray(a), jax.devices(platform)[0])


def _check(op, platform):
    """``op(xs, acc)`` batched with vmap under jit, with the accumulator batched or not, and
    inside a fori_loop (a while loop: XLA records its body as a command buffer on CUDA)."""
    xs_np = np.arange(48, dtype=np.float32).reshape(3, 16) / 8
    xs, acc_b, acc_1 = _put(platform, xs_np), _put(platform, np.ones((3, 16), np.float32)), \
        _put(platform, np.ones(16, np.float32))
    batched = jax.jit(jax.vmap(op))
    shared = jax.jit(jax.vmap(op, in_axes=(0, None)))
    for _ in range(3):        # repeated runs replay what XLA recorded
        acc, out = batched(xs, acc_b)
        np.testing.assert_allclose(np.asarray(acc), xs_np + 1, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out), 2 * xs_np, rtol=1e-6)
        acc, out = shared(xs, acc_1)
        np.testing.assert_allclose(np.asarray(acc), xs_np + 1, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out), 2 * xs_np, rtol=1e-6)

    @jax.jit
    def loop(xs, acc):
        def body(i, carry):
            acc, tot = carry
            acc, out = jax.vmap(op)(xs, acc)
            return acc, tot + out
        return jax.lax.fori_loop(0, 4, body, (acc, jnp.zeros_like(xs)))
    for _ in range(2):
        acc, tot = loop(xs, acc_b)
        np.testing.assert_allclose(np.asarray(acc), 1 + 4 * xs_np, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(tot), 8 * xs_np, rtol=1e-6)


@pytest.mark.parametrize("platform", _PLATFORMS)
@pytest.mark.parametrize("method", VMAP_METHODS)
def test_jax_kernel_every_vmap_method_under_jit(platform, method):
    k = tg.jax_kernel(acc_and_double, num_outputs=2, in_out_argnames=["acc"], vmap_method=method)
    _check(lambda x, acc: k(x, acc), platform)


@pytest.mark.parametrize("platform", _PLATFORMS)
@pytest.mark.parametrize("mode", [tg.GraphMode.JAX, tg.GraphMode.NONE], ids=["graph_jax", "graph_none"])
@pytest.mark.parametrize("method", VMAP_METHODS)
def test_jax_callable_every_vmap_method_under_jit(platform, mode, method):
    fn = tg.jax_callable(acc_and_double_fn, num_outputs=2, in_out_argnames=["acc"], vmap_method=method,
                         graph_mode=mode)
    _check(lambda x, acc: fn(x, acc), platform)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", [tg.GraphMode.WARP, tg.GraphMode.WARP_STAGED, tg.GraphMode.WARP_STAGED_EX],
                         ids=["warp", "warp_staged", "warp_staged_ex"])
@pytest.mark.parametrize("method", ["sequential", "broadcast_all", "expand_dims"])
def test_jax_callable_warp_graph_modes_under_vmap_and_jit(mode, method):
    fn = tg.jax_callable(acc_and_double_fn, num_outputs=2, in_out_argnames=["acc"], vmap_method=method,
                         graph_mode=mode)
    _check(lambda x, acc: fn(x, acc), "gpu")


@pytest.mark.cuda
def test_the_handler_reads_the_capture_status_and_never_queries_stream_flags_under_capture():
    """The stream wrapper a call makes for XLA's stream takes the handler's reading of its
    flags (none during a capture) and asks the driver nothing itself."""
    seen = []

    def spy(x: tg.array[float], acc: tg.array[float], out: tg.array[float]):
        s = x.device.stream
        seen.append((s.cuda_stream, s._blocking))
        acc_and_double_fn(x, acc, out)

    fn = tg.jax_callable(spy, num_outputs=2, in_out_argnames=["acc"], vmap_method="sequential")
    _check(lambda x, acc: fn(x, acc), "gpu")
    assert seen and all(b is not None for _, b in seen)    # known: no lazy cudaStreamGetFlags later
