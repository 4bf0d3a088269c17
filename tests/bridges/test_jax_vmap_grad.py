"""jax_kernel under vmap (every vmap_method: a batched call equals stacked unbatched calls) and
under jax.grad (enable_backward: check_grads, jax.numpy references)."""
import numpy as np
import pytest

import tapegrad as tg

from ._jax_kernels import accum

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax.test_util import check_grads  # noqa: E402

METHODS = ["broadcast_all", "expand_dims", "sequential", "sequential_unrolled", "legacy_vectorized"]


@pytest.fixture
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


@tg.kernel
def elementwise(x: tg.array[float], s: float, y: tg.array[float]):
    i = tg.tid()
    y[i] = x[i] * s + 1.0


@tg.kernel
def write_first(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    if i == 0:
        y[0] = x[0] + x[1]


@tg.kernel
def rowsum_kernel(matrix: tg.array2d[float], sums: tg.array1d[float]):
    i, j = tg.tid()
    tg.atomic_add(sums, i, matrix[i, j])


@tg.kernel
def lookup(table: tg.array[float], idx: tg.array[int], out: tg.array[float]):
    i = tg.tid()
    out[i] = table[idx[i]]


def _loop(fn, *batched):
    """The reference: a Python loop of unbatched calls, stacked."""
    n = len(batched[0])
    outs = [fn(*(b[i] for b in batched)) for i in range(n)]
    return np.stack([np.asarray(o) for o in outs])


@pytest.mark.parametrize("method", METHODS)
def test_elementwise(method):
    k = tg.jax_kernel(elementwise, vmap_method=method)
    f = lambda x: k(x, 2.0)[0]  # noqa: E731
    xs = jnp.arange(15, dtype=jnp.float32).reshape(3, 5)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(f))(xs)), _loop(f, xs))


@pytest.mark.parametrize("method", METHODS)
def test_fixed_element_and_output_atomics(method):
    k = tg.jax_kernel(write_first, vmap_method=method)
    ka = tg.jax_kernel(accum, output_dims=1, vmap_method=method)
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    for fn in (lambda x: k(x)[0], lambda x: ka(x)[0]):
        np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(fn))(xs)), _loop(fn, xs))
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda x: ka(x)[0])(xs)).ravel(), [6, 22, 38])


@pytest.mark.parametrize("method", METHODS)
def test_in_out_atomics(method):
    k = tg.jax_kernel(accum, in_out_argnames=["sums"], vmap_method=method)
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    s0 = jnp.full((3, 1), 10.0, jnp.float32)
    fn = lambda x, s: k(x, s)[0]  # noqa: E731
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(fn))(xs, s0)), _loop(fn, xs, s0))
    # an unbatched in-out operand is broadcast to every batch element
    got = jax.jit(jax.vmap(fn, in_axes=(0, None)))(xs, jnp.ones(1, jnp.float32))
    np.testing.assert_allclose(np.asarray(got).ravel(), [7, 23, 39])


@pytest.mark.parametrize("method", METHODS)
def test_warp_rowsum_cases(method):
    k = tg.jax_kernel(rowsum_kernel, in_out_argnames=["sums"], vmap_method=method)
    m = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
    mn = np.asarray(m)
    (o0,) = jax.jit(jax.vmap(k, in_axes=(0, 0)))(m, jnp.zeros((2, 3), jnp.float32))
    np.testing.assert_allclose(np.asarray(o0), mn.sum(axis=2))
    (o1,) = jax.jit(jax.vmap(k, in_axes=(1, 0)))(m, jnp.zeros((3, 2), jnp.float32))
    np.testing.assert_allclose(np.asarray(o1), mn.sum(axis=2).T)
    (o2,) = jax.jit(jax.vmap(k, in_axes=(2, 0)))(m, jnp.zeros((4, 2), jnp.float32))
    np.testing.assert_allclose(np.asarray(o2), mn.sum(axis=1).T)


@pytest.mark.parametrize("method", METHODS)
def test_explicit_launch_dims_lookup(method):
    k = tg.jax_kernel(lookup, launch_dims=5, vmap_method=method)
    table = jnp.arange(40, dtype=jnp.float32).reshape(4, 10)
    idx = jnp.array([[9, 8, 7, 6, 5]] * 4, dtype=jnp.int32)
    fn = lambda t, i: k(t, i)[0]  # noqa: E731
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(fn))(table, idx)), _loop(fn, table, idx))
    # unbatched index array shared by every batch element
    got = jax.jit(jax.vmap(fn, in_axes=(0, None)))(table, idx[0])
    np.testing.assert_allclose(np.asarray(got), _loop(lambda t: fn(t, idx[0]), table))


@pytest.mark.parametrize("method", ["broadcast_all", "expand_dims", "sequential"])
def test_nested_vmap(method):
    k = tg.jax_kernel(accum, output_dims=1, vmap_method=method)
    fn = lambda x: k(x)[0]  # noqa: E731
    xs = jnp.arange(2 * 3 * 4, dtype=jnp.float32).reshape(2, 3, 4)
    got = jax.jit(jax.vmap(jax.vmap(fn)))(xs)
    np.testing.assert_allclose(np.asarray(got)[..., 0], np.asarray(xs).sum(-1))
    # inner axis mapped over one argument only, outer over the other
    ke = tg.jax_kernel(elementwise, vmap_method=method)
    g = lambda a, b: ke(a + b, 1.0)[0]  # noqa: E731
    a, b = jnp.arange(2 * 4, dtype=jnp.float32).reshape(2, 4), jnp.arange(3 * 4, dtype=jnp.float32).reshape(3, 4)
    got = jax.jit(jax.vmap(jax.vmap(g, in_axes=(None, 0)), in_axes=(0, None)))(a, b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(a)[:, None] + np.asarray(b)[None] + 1)


def test_per_call_vmap_method():
    k = tg.jax_kernel(accum, output_dims=1)
    xs = jnp.ones((4, 3), jnp.float32)
    got = jax.vmap(lambda x: k(x, vmap_method="sequential")[0])(xs)
    np.testing.assert_allclose(np.asarray(got).ravel(), 3.0)


# ------------------------------------------------------------------------------- gradients

@tg.kernel
def poly(x: tg.array[tg.float64], s: tg.float64, y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = s * x[i] * x[i] + tg.sin(x[i])


@tg.kernel
def two_in_two_out(a: tg.array[tg.float64], b: tg.array[tg.float64], idx: tg.array[tg.int32],
                   c: tg.array[tg.float64], d: tg.array[tg.float64]):
    i = tg.tid()
    j = idx[i]
    c[i] = a[i] * b[j]
    d[i] = a[i] + 2.0 * b[j] * b[j]


@tg.kernel
def row_norms(m: tg.array2d[tg.float64], out: tg.array[tg.float64]):
    i = tg.tid()
    s = tg.float64(0.0)
    for j in range(m.shape[1]):
        s += m[i, j] * m[i, j]
    out[i] = tg.sqrt(s)


@tg.kernel
def atomic_sum_sq(x: tg.array[tg.float64], total: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_add(total, 0, x[i] * x[i])


def test_grad_matches_jnp(x64):
    k = tg.jax_kernel(poly, enable_backward=True)
    x = jnp.linspace(-1.0, 1.0, 9)
    f = lambda x: jnp.sum(k(x, 3.0)[0] ** 2)  # noqa: E731
    ref = lambda x: jnp.sum((3.0 * x * x + jnp.sin(x)) ** 2)  # noqa: E731
    np.testing.assert_allclose(np.asarray(jax.grad(f)(x)), np.asarray(jax.grad(ref)(x)), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(f))(x)), np.asarray(jax.grad(ref)(x)), rtol=1e-10)
    v, g = jax.value_and_grad(f)(x)
    np.testing.assert_allclose(float(v), float(ref(x)))
    check_grads(lambda x: k(x, 3.0)[0], (x,), order=1, modes=["rev"])


def test_vmap_of_grad(x64):
    k = tg.jax_kernel(poly, enable_backward=True)
    xs = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    f = lambda x: jnp.sum(k(x, 2.0)[0])  # noqa: E731
    got = jax.jit(jax.vmap(jax.grad(f)))(xs)
    np.testing.assert_allclose(np.asarray(got), 4.0 * np.asarray(xs) + np.cos(np.asarray(xs)), rtol=1e-10)


def test_several_inputs_outputs_and_integer_input(x64):
    k = tg.jax_kernel(two_in_two_out, num_outputs=2, enable_backward=True)
    a = jnp.linspace(0.5, 1.5, 5)
    b = jnp.linspace(-1.0, 1.0, 5)
    idx = jnp.array([4, 3, 2, 1, 0], jnp.int32)

    def ref(a, b):
        bj = b[idx]
        return a * bj, a + 2.0 * bj * bj

    def loss(fn):
        return lambda a, b: jnp.sum(fn(a, b)[0] * 3.0 + fn(a, b)[1] ** 2)

    ours = lambda a, b: k(a, b, idx)  # noqa: E731
    ga, gb = jax.grad(loss(ours), argnums=(0, 1))(a, b)
    ra, rb = jax.grad(loss(ref), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(np.asarray(ga), np.asarray(ra), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(gb), np.asarray(rb), rtol=1e-10)
    check_grads(ours, (a, b), order=1, modes=["rev"])


def test_more_array_dims_than_launch(x64):
    """Warp #1380: launch over rows of a 2-D input; the gradient must not over-accumulate."""
    k = tg.jax_kernel(row_norms, launch_dims=lambda m: m.shape[0], enable_backward=True)
    m = jnp.arange(1.0, 13.0).reshape(3, 4) / 10
    w = jnp.array([1.0, 2.0, 3.0])
    g = jax.grad(lambda m: jnp.sum(k(m)[0] * w))(m)
    r = jax.grad(lambda m: jnp.sum(jnp.sqrt(jnp.sum(m * m, axis=1)) * w))(m)
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-10)
    check_grads(lambda m: k(m)[0], (m,), order=1, modes=["rev"])


def test_output_dims_with_backward(x64):
    k = tg.jax_kernel(atomic_sum_sq, output_dims=1, enable_backward=True)
    x = jnp.linspace(-2.0, 2.0, 7)
    g = jax.jit(jax.grad(lambda x: k(x)[0][0]))(x)
    np.testing.assert_allclose(np.asarray(g), 2.0 * np.asarray(x), rtol=1e-12)
    check_grads(lambda x: k(x)[0], (x,), order=1, modes=["rev"])


def test_static_scalar_gets_no_gradient(x64):
    k = tg.jax_kernel(poly, enable_backward=True)
    x = jnp.ones(3)
    with pytest.raises(ValueError, match="static"):
        jax.grad(lambda s: jnp.sum(k(x, s)[0]))(2.0)


def test_float32_grad_s18():
    @tg.kernel
    def sq(x: tg.array[float], y: tg.array[float]):
        i = tg.tid()
        y[i] = x[i] * x[i] * 3.0
    k = tg.jax_kernel(sq, enable_backward=True)
    x = jnp.linspace(-1.0, 1.0, 16, dtype=jnp.float32)
    g = jax.jit(jax.grad(lambda x: jnp.sum(k(x)[0])))(x)
    np.testing.assert_allclose(np.asarray(g), 6.0 * np.asarray(x), atol=1e-5)


def test_backward_per_batch_with_atomics(x64):
    k = tg.jax_kernel(atomic_sum_sq, output_dims=1, enable_backward=True)
    xs = jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)
    got = jax.vmap(jax.grad(lambda x: k(x)[0][0]))(xs)
    np.testing.assert_allclose(np.asarray(got), 2.0 * np.asarray(xs), rtol=1e-12)
