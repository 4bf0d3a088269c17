"""jax_callable: graph modes, outputs, in-out, vmap, the graph cache and errors (CPU)."""
import numpy as np
import pytest

import tapegrad as tg

from ._jax_kernels import accum, scale, two_step

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def sums_and_copy(x: tg.array[float], total: tg.array[float], twice: tg.array[float]):
    tg.launch(accum, dim=x.shape, inputs=[x], outputs=[total])
    tg.launch(scale, dim=x.shape, inputs=[x, 2.0], outputs=[twice])


@pytest.mark.parametrize("mode", [tg.GraphMode.JAX, tg.GraphMode.NONE, 0, 1])
def test_modes_on_cpu(mode):
    fn = tg.jax_callable(two_step, graph_mode=mode)
    r = jax.jit(lambda x: fn(x, 2.0))(jnp.arange(16, dtype=jnp.float32))
    np.testing.assert_allclose(np.asarray(r[0]), 3.0 * np.arange(16))
    (r2,) = fn(jnp.ones(4, jnp.float32), 5.0)   # eager
    np.testing.assert_allclose(np.asarray(r2), 6.0)


def test_graph_mode_alias():
    assert tg.JaxCallableGraphMode is tg.GraphMode
    assert [m.name for m in tg.GraphMode] == ["NONE", "JAX", "WARP", "WARP_STAGED", "WARP_STAGED_EX"]


def test_several_outputs_dims_dict_and_in_out():
    fn = tg.jax_callable(sums_and_copy, num_outputs=2, output_dims={"total": 1, "twice": 6})
    total, twice = jax.jit(fn)(jnp.arange(6, dtype=jnp.float32))
    assert float(total[0]) == 15.0
    np.testing.assert_allclose(np.asarray(twice), 2 * np.arange(6))
    io = tg.jax_callable(sums_and_copy, num_outputs=2, in_out_argnames=["total"], output_dims={"twice": 6})
    total, twice = jax.jit(io)(jnp.arange(6, dtype=jnp.float32), jnp.full(1, 100.0, jnp.float32))
    assert float(total[0]) == 115.0


@pytest.mark.parametrize("method", ["broadcast_all", "expand_dims", "sequential", "legacy_vectorized"])
def test_vmap_per_batch(method):
    fn = tg.jax_callable(sums_and_copy, num_outputs=2, output_dims={"total": 1, "twice": 4}, vmap_method=method)
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    total, twice = jax.jit(jax.vmap(fn))(xs)
    np.testing.assert_allclose(np.asarray(total).ravel(), [6, 22, 38])
    np.testing.assert_allclose(np.asarray(twice), 2 * np.asarray(xs))


def test_cached_and_graph_cache_settings():
    a = tg.jax_callable(two_step, graph_cache_max=4)
    b = tg.jax_callable(two_step, graph_cache_max=8)
    assert a is b and a.graph_cache_max == 8 and a.graph_cache_size == 0
    with pytest.raises(ValueError):
        a.graph_cache_max = -1
    tg.clear_jax_callable_graph_cache(a)
    tg.clear_jax_callable_graph_cache()
    with pytest.raises(TypeError):
        tg.clear_jax_callable_graph_cache(42)


def test_errors():
    def unannotated(a, out: tg.array[float]):
        pass
    with pytest.raises(RuntimeError, match="annotation"):
        tg.jax_callable(unannotated)
    with pytest.raises(ValueError, match="graph_mode"):
        tg.jax_callable(two_step, graph_mode=9)
    with pytest.raises(ValueError, match="nope"):
        tg.jax_callable(two_step, stage_in_argnames=["nope"])
    fn = tg.jax_callable(two_step)
    with pytest.raises(ValueError, match="static"):
        jax.jit(fn)(jnp.ones(3, jnp.float32), 2.0)
    with pytest.raises(ValueError, match=r"expected 2 arguments \(a, s\), got 1"):   # tg.ArgumentCountError
        fn(jnp.ones(3, jnp.float32))


def test_error_inside_the_function_is_a_clear_xla_error():
    def broken(a: tg.array[float], out: tg.array[float]):
        raise ValueError("boom in user code")
    fn = tg.jax_callable(broken)
    with pytest.raises(Exception, match="boom in user code") as ei:
        jax.block_until_ready(jax.jit(fn)(jnp.ones(3, jnp.float32)))
    assert "broken" in str(ei.value)

    def returns(a: tg.array[float], out: tg.array[float]):
        return 1
    with pytest.raises(Exception, match="return None"):
        jax.block_until_ready(tg.jax_callable(returns)(jnp.ones(3, jnp.float32)))
    # the process is fine afterwards
    (r,) = tg.jax_callable(two_step)(jnp.ones(2, jnp.float32), 1.0)
    np.testing.assert_allclose(np.asarray(r), 2.0)


def test_warp_modes_refused_on_cpu():
    fn = tg.jax_callable(two_step, graph_mode=tg.GraphMode.WARP)
    with pytest.raises(Exception, match="needs CUDA"):
        jax.block_until_ready(fn(jnp.ones(3, jnp.float32), 1.0))


def test_inputs_are_read_only():
    def writes_input(a: tg.array[float], out: tg.array[float]):
        tg.launch(scale, dim=a.shape, inputs=[out, 2.0], outputs=[a])
    with pytest.raises(Exception, match="read-only"):
        jax.block_until_ready(tg.jax_callable(writes_input)(jnp.ones(3, jnp.float32)))
