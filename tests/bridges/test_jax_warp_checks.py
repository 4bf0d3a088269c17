"""Warp's checks of jax_kernel / jax_callable arguments (issue 28): in_out_argnames naming a
parameter twice (tg.ArgnamesError, an AssertionError as Warp's) or no parameter, checked before
the wrapper cache; and the block_dim() builtin under jax_kernel."""
import numpy as np
import pytest

import tapegrad as tg

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@tg.kernel
def triple_into(inp: tg.array(dtype=float), output: tg.array(dtype=float)):
    i = tg.tid()
    output[i] = 3.0 * inp[i]


def triple_func(inp: tg.array(dtype=float), output: tg.array(dtype=float)):
    tg.launch(triple_into, dim=inp.shape, inputs=[inp], outputs=[output])


@pytest.mark.parametrize("make, obj", [(tg.jax_kernel, triple_into), (tg.jax_callable, triple_func)])
def test_in_out_argnames_checked_even_after_a_cached_wrapper(make, obj):
    first = make(obj, num_outputs=1, in_out_argnames=["output"])
    assert first is make(obj, num_outputs=1, in_out_argnames=["output"])
    with pytest.raises(AssertionError, match="must not contain duplicate names"):
        make(obj, num_outputs=1, in_out_argnames=["output", "output"])
    with pytest.raises(tg.ArgnamesError):
        make(obj, num_outputs=1, in_out_argnames=["output", "output"])
    with pytest.raises(ValueError, match="did not match any function argument names"):
        make(obj, num_outputs=1, in_out_argnames=["missing"])


@tg.kernel(module="unique")
def block_scaled(a: tg.array(dtype=float), b: tg.array(dtype=float)):
    i = tg.tid()
    b[i] = a[i] * float(tg.block_dim())


def test_block_dim_builtin_on_the_cpu():
    x = np.arange(8, dtype=np.float32)
    wrapper = tg.jax_kernel(block_scaled, num_outputs=1, block_dim=64, enable_backward=True)
    with jax.default_device(jax.devices("cpu")[0]):
        values = jnp.asarray(x)
        out = wrapper(values)[0]
        grad = jax.grad(lambda v: jnp.sum(wrapper(v)[0]))(values)
    np.testing.assert_allclose(np.asarray(out), x)      # a CPU launch runs blocks of one thread
    np.testing.assert_allclose(np.asarray(grad), np.ones(8))
    b = tg.zeros(8, dtype=float)
    tg.launch(block_scaled, dim=8, inputs=[tg.array(x, dtype=float), b])
    np.testing.assert_array_equal(b.numpy(), x)


@tg.struct
class Table:
    values: tg.array(dtype=tg.float32)
    scale: tg.float32


@tg.kernel
def scaled_fourth(t: Table, out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    out[i] = t.values[3] * t.scale


def test_jax_kernel_refuses_a_struct_static_with_a_none_array_field_it_reads():
    """A struct static value whose array field (None by default) the kernel reads untested: the
    XLA handler dereferenced the null pointer (the process died of SIGSEGV); now a TypeError
    naming the field, and a set field runs as tg.launch does."""
    jk = tg.jax_kernel(scaled_fourth, launch_dims=2)
    t = Table()
    t.scale = 2.0
    with pytest.raises(TypeError, match=r"jax_kernel .* argument 't': field t\.values is None \(Warp's null array"):
        jk(t)
    t.values = tg.array(np.array([1.0, 2.0, 3.0, 4.5], dtype=np.float32))
    (out,) = jk(t)
    np.testing.assert_array_equal(np.asarray(out), [9.0, 9.0])


@tg.kernel
def scaled_by_table(x: tg.array(dtype=tg.float32), t: Table, out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    out[i] = x[i] * t.values[i] * t.scale


@tg.kernel
def through_indexed(x: tg.array(dtype=tg.float32), a: tg.indexedarray[tg.float32], out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    out[i] = a[i] * x[i]


def test_jax_grad_leaves_the_arrays_of_struct_statics_alone():
    """jax.grad through a jax_kernel given a struct (or indexed array) static whose arrays have a
    tapegrad gradient: each backward added into that .grad (data.grad [0, 2, 0, 1] after one
    jax.grad), a side effect on the caller's tapegrad state; a static is a constant of the JAX
    program, so its arrays get nothing (the JAX gradient is unchanged)."""
    t = Table()
    t.values = tg.array(np.array([2.0, -1.0], dtype=np.float32), requires_grad=True)
    t.scale = 3.0
    data = tg.array(np.arange(4, dtype=np.float32), requires_grad=True)
    ia = data[tg.array(np.array([3, 1], dtype=np.int32))]
    x = jnp.array([1.0, 2.0], dtype=jnp.float32)
    jk = tg.jax_kernel(scaled_by_table, enable_backward=True)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda v: jk(v, t)[0].sum())(x)), [6.0, -3.0])
    ji = tg.jax_kernel(through_indexed, enable_backward=True)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(lambda v: ji(v, ia)[0].sum()))(x)), [3.0, 1.0])
    np.testing.assert_array_equal(t.values.grad.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(data.grad.numpy(), np.zeros(4))


@tg.kernel
def doubled_selection(x: tg.array(dtype=tg.float32), a: tg.indexedarray[tg.float32], out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    out[i] = a[i] * 2.0


def test_jax_kernel_grid_past_an_indexed_static_is_refused():
    """A jax_kernel grid larger than an indexed-array static's shape, indexed by tid() unguarded:
    the handler read past the index array (garbage indices into the data); refused as for an
    array argument."""
    data = tg.array(np.arange(10, dtype=np.float32))
    ia = data[tg.array([9, 1], dtype=tg.int32)]
    jk = tg.jax_kernel(doubled_selection, output_dims={"out": 64})
    np.testing.assert_array_equal(np.asarray(jk(jnp.zeros(1), ia, launch_dims=2)[0])[:2], [18.0, 2.0])
    with pytest.raises(ValueError, match=r"dim=\(64,\) is larger than argument 'a' allows: .*\(length 2\)"):
        jk(jnp.zeros(1), ia, launch_dims=64)
