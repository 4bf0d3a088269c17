"""jax_kernel on the kernel ABI (issue 25, item 1): the XLA handler's grid is tg.launch's
(``tapegrad.abi.grid_blocks``, with the elementwise entry's lanes), its entry points come from
the kernel's loaded module (the kernel cache, not a second load), and a static scalar is
packed by tg.launch's packer (the same labelled errors)."""
import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import abi

from ._jax_kernels import scale, triple

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from tapegrad.bridges.jax import entry, ffi  # noqa: E402
from tapegrad.bridges.jax import plan as ffi_plan  # noqa: E402


@tg.kernel
def k_abi_int8(x: tg.array[float], n: tg.int8, y: tg.array[float]):
    i = tg.tid()
    y[i] = x[i] * float(n)


def _plan(launch, block_dim):
    spec = ffi_plan.PlanSpec(triple, (), 0, 0, tuple(launch), False, block_dim)
    return ffi_plan.Plan(spec, entry._LOADER)


@settings(max_examples=200, deadline=None)
@given(threads=st.integers(0, 2 ** 36), block_dim=st.integers(0, 1024), lanes=st.integers(1, 8),
       sms=st.sampled_from([0, 1, 132]))
def test_the_handler_grid_is_the_abi_grid(threads, block_dim, lanes, sms):
    """The handler used ceil(size / block_dim) capped blocks whatever the entry's lanes: an
    elementwise entry got `lanes` times the threads tg.launch gives it, capped where tg.launch
    leaves it uncapped."""
    lib = ffi.handler_library()
    p = _plan((threads,), block_dim)
    p.c.cuda_lanes[3], p.c.cuda_threads_cap[3] = lanes, abi.threads_cap(sms)
    assert lib.tgx_plan_blocks(p.address, 3) == abi.grid_blocks(threads, block_dim, lanes, 0, abi.threads_cap(sms))


def test_the_handler_grid_of_an_elementwise_entry():
    lib = ffi.handler_library()
    p = _plan((2 ** 24,), 256)
    cap = abi.threads_cap(132)
    p.c.cuda_lanes[0], p.c.cuda_threads_cap[0] = 4, cap
    assert lib.tgx_plan_blocks(p.address, 0) == 2 ** 24 // 4 // 256          # one CUDA thread per 4, uncapped
    p.c.cuda_lanes[0] = 1
    assert lib.tgx_plan_blocks(p.address, 0) == cap // 256                   # grid-stride: capped
    assert lib.tgx_plan_blocks(p.address, 16) == 0                           # no such device slot


def test_cpu_entries_come_from_the_kernel_module():
    cpu = tg.get_device("cpu")
    fwd, bwd, cap, lanes = entry.entries(scale, cpu)
    e = scale.module_for(cpu).fast_entry()
    assert (fwd, bwd, cap, lanes) == (e.forward, e.backward, 0, 1)
    x = jnp.arange(8, dtype=jnp.float32)
    (y,) = jax.jit(lambda v: tg.jax_kernel(scale)(v, 2.5))(x)
    np.testing.assert_allclose(np.asarray(y), 2.5 * np.arange(8))
    plans = [p for p in entry._plans.values() if p.spec.kernel is scale and not p.spec.adjoint]
    assert plans and all(p.c.cpu_entry == fwd for p in plans)


def test_an_int8_static_out_of_range_is_launchs_labelled_error():
    """jax_kernel raised numpy's bare OverflowError ('Python integer 300 out of bounds for
    int8'); tg.launch and jax_kernel now share one packer and one message."""
    x = np.ones(4, np.float32)
    with pytest.raises(OverflowError, match=r"argument 1 \('n'\): 300 is out of range for tapegrad\.int8 "
                                            r"\(-128\.\.127\)"):
        tg.launch(k_abi_int8, 4, [x, 300], [np.zeros(4, np.float32)])
    k = tg.jax_kernel(k_abi_int8)
    with pytest.raises(OverflowError, match=r"argument 'n': 300 is out of range for tapegrad\.int8 \(-128\.\.127\)"):
        k(jnp.ones(4, jnp.float32), 300)
    with pytest.raises(TypeError, match=r"argument 'n': expected an integer for tapegrad\.int8, got 2\.5"):
        k(jnp.ones(4, jnp.float32), 2.5)
    (y,) = k(jnp.ones(4, jnp.float32), -128)
    np.testing.assert_array_equal(np.asarray(y), -128.0)


def test_xla_dtype_codes_derive_from_the_scalar_table():
    from jaxlib.xla_client import PrimitiveType
    expect = {"bool": "PRED", "int8": "S8", "int16": "S16", "int32": "S32", "int64": "S64", "uint8": "U8",
              "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
              "float32": "F32", "float64": "F64"}
    assert set(expect) == set(tg.types.SCALARS)
    for name, xla in expect.items():
        assert ffi_plan.xla_dtype(tg.types.SCALARS[name]) == PrimitiveType[xla].value


@pytest.mark.cuda
def test_cuda_plan_takes_the_modules_entry_lanes_and_cap():
    """On a GPU: the plan's CUfunction is the one tg.launch uses (Kernel.module_for, no second
    load), with the elementwise entry's lanes and the device's cap, and the result is right."""
    gpu = next((d for d in jax.devices() if d.platform == "gpu"), None)
    if gpu is None:
        pytest.skip("no JAX GPU backend")
    dev = tg.get_device("cuda:0")
    n = 1 << 22
    x = jax.device_put(jnp.arange(n, dtype=jnp.float32), gpu)
    (y,) = jax.jit(tg.jax_kernel(triple))(x)
    np.testing.assert_allclose(np.asarray(y), 3.0 * np.arange(n, dtype=np.float32))
    e = triple.module_for(dev).fast_entry()
    assert e.lanes == triple.vector_lanes
    plans = [p for p in entry._plans.values() if p.spec.kernel is triple and not p.spec.adjoint
             and p.spec.launch == (n,)]
    assert plans
    for p in plans:
        assert p.c.cuda_fn[dev.ordinal] == e.forward
        assert (p.c.cuda_lanes[dev.ordinal], p.c.cuda_threads_cap[dev.ordinal]) == (e.lanes, e.threads_cap)
        assert ffi.handler_library().tgx_plan_blocks(p.address, dev.ordinal) == \
            abi.grid_blocks(n, p.spec.block_dim, e.lanes, 0, e.threads_cap)
    assert ctypes.sizeof(abi.LaunchBounds) == 48
