"""JAX bridge: conversions, devices, dtypes, and every jax_kernel option on the CPU."""
from functools import partial

import numpy as np
import pytest

import tapegrad as tg

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


# ------------------------------------------------------------------------------ conversions

def test_from_jax_aliases_cpu_memory():
    x = jnp.arange(10, dtype=jnp.float32)
    a = tg.from_jax(x)
    assert a.shape == (10,) and a.dtype is tg.float32 and a.device.is_cpu
    assert a.ptr == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(a.numpy(), np.arange(10))


def test_to_jax_aliases_cpu_memory():
    a = tg.array(np.arange(6, dtype=np.float32))
    j = tg.to_jax(a)
    assert isinstance(j, jax.Array) and j.unsafe_buffer_pointer() == a.ptr
    np.testing.assert_array_equal(np.asarray(j), np.arange(6))
    a.fill_(2.0)                                   # one memory: JAX sees tapegrad's writes
    np.testing.assert_array_equal(np.asarray(j), 2.0)


def test_to_jax_copies_layouts_xla_cannot_import():
    """A slice with gaps, a 0-stride broadcast and a read-only array raised JAX's 'UNIMPLEMENTED:
    Only DLPack tensors with trivial (compact) striding' or a BufferError about legacy capsules
    (to_jax offers no copy= to pass): they are copied; compact layouts stay views."""
    base = tg.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    cases = {"column gaps": base[:, 1:3], "strided 1-D": tg.array(np.arange(10, dtype=np.float32))[::2],
             "broadcast": tg.array(np.broadcast_to(np.arange(3, dtype=np.float32), (2, 3)), copy=False),
             "vec3 rows": tg.array(np.arange(12, dtype=np.float32).reshape(4, 3), dtype=tg.vec3)[::2]}
    for name, a in cases.items():
        j = tg.to_jax(a)
        np.testing.assert_array_equal(np.asarray(j), a.numpy(), err_msg=name)
    t = base.transpose()                           # a transposition: XLA imports it as is
    assert tg.to_jax(t).unsafe_buffer_pointer() == base.ptr
    np.testing.assert_array_equal(np.asarray(tg.to_jax(t)), np.arange(12).reshape(3, 4).T)
    tape = tg.Tape()                               # the copy is no gradient path: nothing recorded
    g = tg.array(np.arange(6.0), requires_grad=True)
    with tape:
        np.testing.assert_array_equal(np.asarray(tg.to_jax(g[::2])), [0.0, 2.0, 4.0])
    assert not tape.records


def test_vector_dtypes_round_trip():
    v = tg.from_jax(jnp.ones((5, 3), jnp.float32), dtype=tg.vec3)
    assert v.shape == (5,) and v.dtype is tg.vec3
    j = tg.to_jax(tg.zeros(4, dtype=tg.mat22))
    assert j.shape == (4, 2, 2)


def test_to_jax_keeps_array_alive():
    j = tg.to_jax(tg.full(1000, 7.0, dtype=tg.float32))
    import gc
    gc.collect()
    assert float(jnp.sum(j)) == 7000.0


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                                  "uint16", "uint32", "uint64", "bool", "bfloat16"])
def test_dtype_maps(name):
    t = getattr(tg, name) if name != "bool" else tg.bool
    jd = tg.dtype_to_jax(t)
    assert tg.dtype_from_jax(jd) is t
    assert tg.dtype_from_jax(np.dtype(jd)) is t


def test_dtype_errors():
    with pytest.raises(TypeError):
        tg.dtype_from_jax(jnp.complex64)
    with pytest.raises(TypeError):
        tg.dtype_to_jax("not a dtype")


def test_bfloat16_conversion():
    x = jnp.arange(4, dtype=jnp.bfloat16)
    a = tg.from_jax(x)
    assert a.dtype is tg.bfloat16 and a.ptr == x.unsafe_buffer_pointer()


def test_devices():
    assert tg.device_from_jax(jax.devices("cpu")[0]) == tg.get_device("cpu")
    assert tg.device_to_jax("cpu") == jax.devices("cpu")[0]
    with pytest.raises(TypeError):
        tg.device_from_jax("cpu")


def test_from_jax_errors():
    with pytest.raises(TypeError, match="jax.Array"):
        tg.from_jax(np.ones(3))
    with pytest.raises(TypeError, match="traced"):
        jax.jit(lambda x: tg.from_jax(x) and x)(jnp.ones(3))
    with pytest.raises(TypeError, match="tapegrad array"):
        tg.to_jax(jnp.ones(3))


def test_launch_takes_jax_arrays_directly():
    @tg.kernel
    def double(x: tg.array[tg.float32], y: tg.array[tg.float32]):
        i = tg.tid()
        y[i] = 2.0 * x[i]
    y = tg.zeros(5, dtype=tg.float32)
    tg.launch(double, dim=5, inputs=[jnp.arange(5, dtype=jnp.float32)], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), 2.0 * np.arange(5))


# ------------------------------------------------------------------------------- jax_kernel

@tg.kernel
def triple(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = 3.0 * x[i]


@tg.kernel
def scale_two(a: tg.array[float], s: float, b: tg.array[float], c: tg.array[tg.vec3]):
    i = tg.tid()
    b[i] = a[i] * s
    c[i] = tg.vec3(a[i], s, 0.0)


@tg.kernel
def fill_rows(out: tg.array2d[float]):
    i, k = tg.tid()
    out[i, k] = float(i * 10 + k)


@tg.kernel
def lookup(table: tg.array[float], idx: tg.array[int], out: tg.array[float]):
    i = tg.tid()
    out[i] = table[idx[i]]


@tg.kernel
def add_into(x: tg.array[float], acc: tg.array[float], extra: tg.array[float]):
    i = tg.tid()
    acc[i] = acc[i] + x[i]
    extra[i] = 2.0 * x[i]


def test_jit_and_eager():
    k = tg.jax_kernel(triple)
    x = jnp.arange(64, dtype=jnp.float32)
    (y,) = jax.jit(lambda x: k(x))(x)
    np.testing.assert_allclose(np.asarray(y), 3 * np.arange(64))
    (y2,) = k(x)
    np.testing.assert_allclose(np.asarray(y2), 3 * np.arange(64))
    assert isinstance(k(x), list)


def test_outputs_scalars_vectors():
    k = tg.jax_kernel(scale_two, num_outputs=2)
    b, c = jax.jit(k, static_argnums=1)(jnp.arange(8, dtype=jnp.float32), 2.0)
    np.testing.assert_allclose(np.asarray(b), 2 * np.arange(8))
    assert c.shape == (8, 3)
    np.testing.assert_allclose(np.asarray(c)[:, 1], 2.0)
    # a different static value gives a different (correct) call
    b5, _ = jax.jit(k, static_argnums=1)(jnp.arange(8, dtype=jnp.float32), 5.0)
    np.testing.assert_allclose(np.asarray(b5), 5 * np.arange(8))


def test_launch_and_output_dims():
    k = tg.jax_kernel(fill_rows, launch_dims=(3, 4), output_dims=(3, 4))
    (r,) = jax.jit(lambda: k())()
    np.testing.assert_array_equal(np.asarray(r), np.add.outer(10 * np.arange(3), np.arange(4)))


def test_per_call_overrides():
    k = tg.jax_kernel(lookup)
    table = jnp.arange(100, dtype=jnp.float32)
    idx = jnp.arange(50, dtype=jnp.int32)[::-1]
    (r,) = jax.jit(partial(k, launch_dims=50))(table, idx)
    assert r.shape == (50,) and float(r[0]) == 49.0
    (r2,) = k(table, idx, launch_dims=10, output_dims=10)
    np.testing.assert_array_equal(np.asarray(r2), np.arange(49, 39, -1))
    (r3,) = k(table, idx, launch_dims=20, output_dims={"out": 20})
    assert r3.shape == (20,)


def test_default_launch_from_first_array():
    k = tg.jax_kernel(lookup)   # the grid (and out) follow table, the first array
    table = jnp.arange(30, dtype=jnp.float32)
    idx = jnp.arange(30, dtype=jnp.int32)
    (r,) = k(table, idx)
    np.testing.assert_array_equal(np.asarray(r), np.arange(30))


def test_in_out_and_output():
    k = tg.jax_kernel(add_into, num_outputs=2, in_out_argnames=["acc"])
    x = jnp.arange(6, dtype=jnp.float32)
    acc = jnp.ones(6, jnp.float32)
    acc2, extra = jax.jit(k)(x, acc)
    np.testing.assert_allclose(np.asarray(acc2), 1 + np.arange(6))
    np.testing.assert_allclose(np.asarray(extra), 2 * np.arange(6))
    np.testing.assert_allclose(np.asarray(acc), 1.0)    # the JAX input is unchanged (functional)


def test_outputs_are_zeroed():
    @tg.kernel
    def count(x: tg.array[float], n: tg.array[float]):
        i = tg.tid()
        tg.atomic_add(n, 0, x[i] * 0.0 + 1.0)
    k = tg.jax_kernel(count, output_dims=1)
    f = jax.jit(lambda x: k(x)[0])
    for _ in range(3):
        assert float(f(jnp.ones(7, jnp.float32))[0]) == 7.0


def test_same_configuration_same_wrapper():
    a = tg.jax_kernel(triple, launch_dims=None, in_out_argnames=None)
    assert tg.jax_kernel(triple) is a
    assert tg.jax_kernel(add_into, num_outputs=2, in_out_argnames=["acc"]) is \
        tg.jax_kernel(add_into, num_outputs=2, in_out_argnames=["acc"])
    assert tg.jax_kernel(triple, block_dim=128) is not a
    assert tg.jax_kernel(triple, block_dim=128).block_dim == 128 and a.block_dim is None   # Warp: None = default


def test_has_side_effect_and_preload_modes():
    for mode in (0, 1, 2):
        k = tg.jax_kernel(triple, has_side_effect=True, module_preload_mode=mode)
        (y,) = jax.jit(k)(jnp.ones(4, jnp.float32))
        np.testing.assert_allclose(np.asarray(y), 3.0)


def test_integer_and_float64_kernels():
    jax.config.update("jax_enable_x64", True)
    try:
        @tg.kernel
        def inc(x: tg.array[tg.int64], y: tg.array[tg.int64]):
            i = tg.tid()
            y[i] = x[i] + tg.int64(1)
        (y,) = tg.jax_kernel(inc)(jnp.arange(5, dtype=jnp.int64))
        np.testing.assert_array_equal(np.asarray(y), np.arange(1, 6))
    finally:
        jax.config.update("jax_enable_x64", False)


def test_large_launch_parallel():
    k = tg.jax_kernel(triple)
    x = jnp.arange(1 << 20, dtype=jnp.float32)
    (y,) = jax.jit(k)(x)
    np.testing.assert_allclose(np.asarray(y), 3 * np.asarray(x))


def test_jax_kernel_matches_jnp_in_a_larger_graph():
    k = tg.jax_kernel(triple)
    f = jax.jit(lambda x: jnp.sin(k(jnp.cos(x))[0]) + 1)
    x = jnp.linspace(0, 1, 33, dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(f(x)), np.sin(3 * np.cos(np.asarray(x))) + 1, rtol=1e-6)


# ------------------------------------------------------------------------------- bad input

def test_traced_scalar_refused():
    k = tg.jax_kernel(scale_two, num_outputs=2)
    with pytest.raises(ValueError, match="static"):
        jax.jit(k)(jnp.ones(8, jnp.float32), 2.0)


def test_construction_errors():
    with pytest.raises(ValueError, match="num_outputs"):
        tg.jax_kernel(triple, num_outputs=0)
    with pytest.raises(ValueError, match="num_outputs"):
        tg.jax_kernel(triple, num_outputs=3)
    with pytest.raises(ValueError, match="nope"):
        tg.jax_kernel(triple, in_out_argnames=["nope"])
    with pytest.raises(ValueError, match="'x'"):
        tg.jax_kernel(triple, in_out_argnames=["x"])
    with pytest.raises(ValueError, match="duplicates"):
        tg.jax_kernel(add_into, num_outputs=2, in_out_argnames=["acc", "acc"])
    with pytest.raises(TypeError, match="array"):
        tg.jax_kernel(scale_two, num_outputs=3)
    with pytest.raises(TypeError, match="block_dim"):
        tg.jax_kernel(triple, block_dim=True)
    with pytest.raises(ValueError, match="block_dim"):
        tg.jax_kernel(triple, block_dim=0)
    with pytest.raises(ValueError, match="vmap_method"):
        tg.jax_kernel(triple, vmap_method="magic")
    with pytest.raises(NotImplementedError):
        tg.jax_kernel(add_into, num_outputs=2, in_out_argnames=["acc"], enable_backward=True)


def test_call_errors_name_kernel_and_argument():
    k = tg.jax_kernel(lookup)
    table = jnp.arange(10, dtype=jnp.float32)
    with pytest.raises(ValueError, match=r"expected 2 arguments \(table, idx\), got 1"):   # also a TypeError
        k(table)
    with pytest.raises(TypeError, match="'idx'"):
        k(table, jnp.arange(10, dtype=jnp.float32))            # dtype
    with pytest.raises(TypeError, match="'table'"):
        k(table.reshape(2, 5), jnp.arange(10, dtype=jnp.int32))  # ndim
    with pytest.raises(TypeError, match="'table'"):
        k([1.0] * 10, jnp.arange(10, dtype=jnp.int32))           # not an array
    with pytest.raises(ValueError, match="launch_dims"):
        k(table, jnp.arange(10, dtype=jnp.int32), launch_dims=(1, 2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"launch_dims \(9223372036854775808,\) has 9223372036854775808 threads.*"
                       r"2\^63 - 1"):
        k(table, jnp.arange(10, dtype=jnp.int32), launch_dims=2 ** 63)
    with pytest.raises(ValueError, match="larger than argument 'idx'"):       # idx[i] past its end
        k(table, jnp.arange(5, dtype=jnp.int32), launch_dims=8)
    with pytest.raises(ValueError, match="larger than argument 'idx'"):       # the default grid (table's)
        k(table, jnp.arange(5, dtype=jnp.int32))
    with pytest.raises(ValueError, match="larger than argument 'out'"):
        k(table, jnp.arange(10, dtype=jnp.int32), output_dims=4)
    k2 = tg.jax_kernel(scale_two, num_outputs=2, output_dims={"b": 8})
    with pytest.raises(ValueError, match="'c'"):
        k2(jnp.ones(8, jnp.float32), 1.0)
    with pytest.raises(ValueError, match="output"):
        tg.jax_kernel(triple, output_dims={"zzz": 3})
    with pytest.raises(ValueError, match="output dims"):
        tg.jax_kernel(triple)(jnp.ones(3, jnp.float32), output_dims=(3, 3))
    with pytest.raises(TypeError, match="argument 's'.*: expected a scalar of tapegrad.float32, got 'two'"):
        tg.jax_kernel(scale_two, num_outputs=2)(jnp.ones(8, jnp.float32), "two")
    with pytest.raises(RuntimeError, match="launch dim"):
        tg.jax_kernel(fill_rows)()


def test_inner_dims_checked():
    @tg.kernel
    def norm3(v: tg.array[tg.vec3], n: tg.array[float]):
        i = tg.tid()
        n[i] = tg.length(v[i])
    k = tg.jax_kernel(norm3)
    (n,) = k(jnp.ones((4, 3), jnp.float32))
    np.testing.assert_allclose(np.asarray(n), np.sqrt(3.0), rtol=1e-6)
    with pytest.raises(RuntimeError, match="trailing"):
        k(jnp.ones((4, 2), jnp.float32))


def test_kernel_without_adjoint_refuses_backward():
    """As torch_op and paddle_op (the one op policy): the op runs forward, a derivative raises."""
    @tg.kernel(enable_backward=False)
    def fwd_only(x: tg.array[float], y: tg.array[float]):
        i = tg.tid()
        y[i] = x[i]
    k = tg.jax_kernel(fwd_only, enable_backward=True)
    x = jnp.ones(3, jnp.float32)
    np.testing.assert_allclose(np.asarray(k(x)[0]), 1.0)
    with pytest.raises(ValueError, match="enable_backward=False"):    # tg.NotDifferentiableError
        jax.grad(lambda v: k(v)[0].sum())(x)


def test_kernel_writing_an_input_is_refused():
    @tg.kernel
    def clobber(x: tg.array[float], y: tg.array[float]):
        i = tg.tid()
        x[i] = 0.0
        y[i] = 1.0
    with pytest.raises(ValueError, match="writes its input array 'x'"):
        tg.jax_kernel(clobber)
    k = tg.jax_kernel(clobber, num_outputs=2)     # both outputs: fine
    assert len(k(launch_dims=3)) == 2
