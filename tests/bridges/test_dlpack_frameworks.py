"""DLPack round trips with the real frameworks (CPU): numpy, torch, jax, paddle.

Both directions, protocol path (``from_dlpack(obj)``) and capsule path (``to_dlpack`` capsules),
aliasing checked by writes on either side wherever the framework allows writes.
"""
import gc
import weakref

import numpy as np
import pytest

import tapegrad as tg

from .._dlpack_util import Spy, capsule_name


def tg_arange(n, dt, shape=None):
    vals = (np.arange(n) % 2) if dt is tg.bool else np.arange(n)
    a = tg.array(vals.astype(dt.np_dtype), dtype=dt, device="cpu")
    return a.reshape(shape) if shape else a


ALL = [tg.types.SCALARS[n] for n in sorted(tg.types.SCALARS)]


# ---------------------------------------------------------------------------------- torch

@pytest.fixture(scope="module")
def torch():
    """The framework module; tests taking it are marked ``torch`` (skipped without it)."""
    import torch
    return torch


def _torch_dtypes(torch):
    return [d for d in ALL if getattr(torch, d.torch_name, None) is not None]


@pytest.mark.torch
def test_torch_export_protocol_and_capsule(torch):
    import torch.utils.dlpack as tud
    a = tg_arange(6, tg.float32)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.ptr and t.dtype == torch.float32
    t[0] = 7
    assert a.numpy()[0] == 7                          # torch writes, tapegrad sees
    a.numpy()[1] = 8
    assert t[1].item() == 8                           # tapegrad writes, torch sees
    t2 = tud.from_dlpack(tg.to_dlpack(a))
    assert t2.data_ptr() == a.ptr
    t2[2] = 9
    assert a.numpy()[2] == 9
    spy = Spy(a)
    torch.from_dlpack(spy)
    assert spy.calls[-1][0].get("max_version") == (1, 0) and spy.calls[-1][1] == "dltensor_versioned"


@pytest.mark.torch
def test_torch_import_protocol_and_capsule(torch):
    import torch.utils.dlpack as tud
    t = torch.arange(6, dtype=torch.float64)
    a = tg.from_dlpack(t)
    assert a.ptr == t.data_ptr() and a.dtype is tg.float64
    a.numpy()[0] = 5
    assert t[0].item() == 5
    t[1] = 6
    assert a.numpy()[1] == 6
    cap = tud.to_dlpack(t)
    b = tg.from_dlpack(cap)
    assert b.ptr == t.data_ptr() and capsule_name(cap) == "used_dltensor"
    cap = t.__dlpack__(max_version=(1, 0))
    c = tg.from_dlpack(cap)
    assert c.ptr == t.data_ptr() and capsule_name(cap) == "used_dltensor_versioned"


@pytest.mark.torch
def test_torch_every_dtype(torch):
    for dt in _torch_dtypes(torch):
        a = tg_arange(5, dt)
        t = torch.from_dlpack(a)
        assert t.dtype == getattr(torch, dt.torch_name) and t.data_ptr() == a.ptr, dt
        b = tg.from_dlpack(t)
        assert b.dtype is dt and b.ptr == a.ptr, dt
        np.testing.assert_array_equal(b.numpy(), a.numpy())
        c = tg.from_dlpack(torch.utils.dlpack.to_dlpack(t))
        assert c.dtype is dt and c.ptr == a.ptr


@pytest.mark.torch
@pytest.mark.parametrize("dt", [tg.vec2, tg.vec3, tg.vec4, tg.vec3d, tg.vec3h, tg.vec3i, tg.mat22, tg.mat33,
                                tg.mat44, tg.mat22d, tg.quat], ids=lambda d: d.name)
def test_torch_vec_mat(torch, dt):
    a = tg.zeros(5, dtype=dt, device="cpu")
    t = torch.from_dlpack(a)
    assert tuple(t.shape) == (5,) + dt.inner_shape and t.data_ptr() == a.ptr
    t.view(-1).copy_(torch.arange(t.numel()))
    b = tg.from_dlpack(t, dtype=dt)
    assert b.dtype is dt and b.shape == (5,) and b.ptr == a.ptr
    np.testing.assert_array_equal(b.numpy(), t.numpy())
    with pytest.raises(RuntimeError):
        tg.from_dlpack(t[..., :1], dtype=dt)           # trailing dims that do not fit


@pytest.mark.torch
def test_torch_strided_and_zero_stride(torch):
    tt = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    a = tg.from_dlpack(tt)
    assert a.shape == (4, 3) and a.strides == (4, 16) and a.ptr == tt.data_ptr()
    np.testing.assert_array_equal(a.numpy(), tt.numpy())
    z = torch.zeros(4).expand(3, 4)                   # zero-stride producer
    b = tg.from_dlpack(z)
    assert b.strides == (0, 4) and b.shape == (3, 4) and not b.readonly
    base = torch.zeros(4)
    zz = tg.from_dlpack(base.expand(3, 4))
    base[2] = 5
    assert zz.numpy()[1, 2] == 5
    sl = torch.arange(20, dtype=torch.int32)[3:15:3]  # storage offset + step
    c = tg.from_dlpack(sl)
    assert c.ptr == sl.data_ptr() and c.strides == (12,)
    np.testing.assert_array_equal(c.numpy(), sl.numpy())
    # tapegrad strided views export their strides
    g = tg_arange(12, tg.float32, (3, 4)).transpose()
    t = torch.from_dlpack(g)
    assert t.stride() == (1, 4) and t.data_ptr() == g.ptr
    np.testing.assert_array_equal(t.numpy(), g.numpy())


@pytest.mark.torch
def test_torch_copy(torch):
    a = tg_arange(4, tg.float32)
    t = torch.from_dlpack(a, copy=True)
    assert t.data_ptr() != a.ptr
    t[0] = 100
    assert a.numpy()[0] == 0
    b = tg.from_dlpack(torch.arange(3.0), copy=True)
    np.testing.assert_array_equal(b.numpy(), [0, 1, 2])


@pytest.mark.torch
def test_torch_consumed_capsule(torch):
    import torch.utils.dlpack as tud
    a = tg_arange(3, tg.float32)
    cap = tg.to_dlpack(a)
    tud.from_dlpack(cap)
    with pytest.raises(Exception):
        tud.from_dlpack(cap)
    with pytest.raises(RuntimeError, match="already consumed"):
        tg.from_dlpack(cap)


@pytest.mark.torch
def test_torch_views_outlive(torch):
    a = tg_arange(4, tg.float32)
    ref = weakref.ref(a)
    t = torch.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is not None and t.tolist() == [0, 1, 2, 3]
    del t
    gc.collect()
    assert ref() is None
    t = torch.arange(4.0)
    b = tg.from_dlpack(t)
    del t
    gc.collect()
    assert b.numpy().tolist() == [0, 1, 2, 3]          # the torch storage stays alive


# ------------------------------------------------------------------------------------ jax

@pytest.fixture(scope="module")
def jax():
    """The framework module; tests taking it are marked ``jax`` (skipped without it)."""
    import jax
    return jax


def _jax_ptr(x):
    return x.unsafe_buffer_pointer()


@pytest.mark.jax
def test_jax_export_protocol(jax):
    import jax.dlpack
    import jax.numpy as jnp
    a = tg_arange(8, tg.float32)
    j = jax.dlpack.from_dlpack(a)
    assert _jax_ptr(j) == a.ptr                        # zero-copy (tapegrad memory is 64-byte aligned)
    np.testing.assert_array_equal(np.asarray(j), a.numpy())
    a.numpy()[0] = 3                                   # JAX arrays are immutable: only tapegrad writes
    assert float(jnp.asarray(j)[0]) == 3


@pytest.mark.jax
def test_jax_import_protocol_and_capsule(jax):
    import jax.numpy as jnp
    j = jnp.arange(8, dtype=jnp.float32).reshape(2, 4)
    a = tg.from_dlpack(j)
    assert a.ptr == _jax_ptr(j) and a.shape == (2, 4)
    np.testing.assert_array_equal(a.numpy(), np.arange(8).reshape(2, 4))
    cap = j.__dlpack__()                               # JAX produces legacy capsules only
    assert capsule_name(cap) == "dltensor"
    b = tg.from_dlpack(cap)
    assert b.ptr == _jax_ptr(j) and capsule_name(cap) == "used_dltensor"


@pytest.mark.jax
def test_jax_every_dtype(jax):
    import jax.dlpack
    jax.config.update("jax_enable_x64", True)
    try:
        for dt in ALL:
            a = tg_arange(5, dt)
            j = jax.dlpack.from_dlpack(a)
            assert np.dtype(j.dtype) == dt.np_dtype, dt
            np.testing.assert_array_equal(np.asarray(j), a.numpy())
            b = tg.from_dlpack(j)
            assert b.dtype is dt and b.ptr == _jax_ptr(j), dt
    finally:
        jax.config.update("jax_enable_x64", False)


@pytest.mark.jax
def test_jax_vec(jax):
    import jax.dlpack
    import jax.numpy as jnp
    a = tg.zeros(4, dtype=tg.mat33, device="cpu")
    j = jax.dlpack.from_dlpack(a)
    assert j.shape == (4, 3, 3)
    v = tg.from_dlpack(jnp.ones((6, 3), jnp.float32), dtype=tg.vec3)
    assert v.shape == (6,) and v.dtype is tg.vec3


@tg.kernel
def _add_one(x: tg.array(dtype=float)):
    i = tg.tid()
    x[i] = x[i] + 1.0


@pytest.mark.jax
def test_jax_host_view_wraps_writable_as_from_jax(jax):
    # np.asarray(jax_array) is read-only (JAX arrays are immutable), yet JAX exports the same memory
    # writable through DLPack and from_jax wraps it writable: array(view, copy=False) agrees
    import jax.dlpack
    import jax.numpy as jnp
    jx = jnp.arange(8, dtype=jnp.float32)
    view = np.asarray(jx)
    assert not view.flags.writeable
    a = tg.array(view, dtype=tg.float32, copy=False)
    assert a.ptr == view.ctypes.data == _jax_ptr(jx)
    assert a.readonly is tg.from_jax(jx).readonly is False
    j1 = jax.dlpack.from_dlpack(a, copy=False)         # JAX asks for a legacy capsule
    j2 = tg.to_jax(a)
    assert _jax_ptr(j1) == _jax_ptr(j2) == a.ptr
    tg.launch(_add_one, dim=a.size, inputs=[a], device="cpu")
    tg.synchronize_device("cpu")
    want = np.arange(8, dtype=np.float64) + 1.0
    np.testing.assert_array_equal(a.numpy(), want)
    np.testing.assert_array_equal(np.asarray(j1 + 0), want)
    np.testing.assert_array_equal(np.asarray(j2 + 0), want)
    # the general path (a vector dtype folds the trailing dimension) decides the same way
    m = np.asarray(jnp.zeros((3, 2), jnp.float32))
    v = tg.array(m, dtype=tg.vec2, copy=False)
    assert v.shape == (3,) and v.ptr == m.ctypes.data and not v.readonly


@pytest.mark.jax
def test_read_only_numpy_stays_read_only(jax):
    import jax.numpy as jnp
    view = np.asarray(jnp.arange(8, dtype=jnp.float32))
    # numpy's own read-only views of it (a slice, a zero-stride broadcast) keep their flag
    assert tg.array(view[::2], copy=False).readonly
    assert tg.array(np.broadcast_to(view, (2, 8)), copy=False).readonly
    frozen = np.frombuffer(bytes(16), dtype=np.float32)   # memory of an immutable bytes object
    a = tg.array(frozen, copy=False)
    assert a.readonly and a.ptr == frozen.ctypes.data
    with pytest.raises(RuntimeError, match="read-only"):
        tg.launch(_add_one, dim=a.size, inputs=[a], device="cpu")
    with pytest.raises(BufferError, match="read-only"):
        a.__dlpack__()                                 # a legacy capsule could not say read-only
    assert bytes(frozen.tobytes()) == bytes(16)


# --------------------------------------------------------------------------------- paddle

@pytest.fixture(scope="module")
def paddle():
    """The framework module; tests taking it are marked ``paddle`` (skipped without it)."""
    import paddle
    return paddle


@pytest.mark.paddle
def test_paddle_export_protocol_and_capsule(paddle):
    import paddle.utils.dlpack as pud
    a = tg_arange(6, tg.float32)
    p = paddle.from_dlpack(a)
    assert p.data_ptr() == a.ptr
    p[0] = 7.0
    assert a.numpy()[0] == 7                           # paddle writes, tapegrad sees
    a.numpy()[1] = 8
    assert float(p[1]) == 8                            # tapegrad writes, paddle sees
    q = pud.from_dlpack(tg.to_dlpack(a))
    assert q.data_ptr() == a.ptr
    spy = Spy(a)
    paddle.from_dlpack(spy)
    assert spy.calls[-1][0].get("max_version") == (1, 2) and spy.calls[-1][1] == "dltensor_versioned"


@pytest.mark.paddle
def test_paddle_import_protocol_and_capsule(paddle):
    import paddle.utils.dlpack as pud
    p = paddle.arange(5, dtype="float32")
    a = tg.from_dlpack(p)
    assert a.ptr == p.data_ptr() and a.shape == (5,)
    a.numpy()[0] = 9
    assert float(p[0]) == 9
    p[1] = 4.0
    assert a.numpy()[1] == 4
    cap = pud.to_dlpack(p)
    b = tg.from_dlpack(cap)
    assert b.ptr == p.data_ptr() and capsule_name(cap) == "used_dltensor"


@pytest.mark.paddle
def test_paddle_every_dtype(paddle):
    for dt in ALL:
        if dt.paddle_name is None:
            continue
        a = tg_arange(5, dt)
        p = paddle.from_dlpack(a)
        assert p.data_ptr() == a.ptr, dt
        want = a.numpy().view(np.uint16) if dt is tg.bfloat16 else a.numpy()   # paddle's bf16 .numpy(): raw bits
        np.testing.assert_array_equal(p.numpy(), want)
        b = tg.from_dlpack(p)
        assert b.dtype is dt and b.ptr == a.ptr, dt


@pytest.mark.paddle
def test_paddle_vec_and_strided(paddle):
    a = tg.zeros(3, dtype=tg.vec4, device="cpu")
    p = paddle.from_dlpack(a)
    assert p.shape == [3, 4]
    b = tg.from_dlpack(p, dtype=tg.vec4)
    assert b.dtype is tg.vec4 and b.ptr == a.ptr
    g = tg_arange(6, tg.float32, (2, 3)).transpose()
    q = paddle.from_dlpack(g)
    np.testing.assert_array_equal(q.numpy(), g.numpy())


# ---------------------------------------------------------------------------------- numpy

def test_numpy_both_directions():
    a = tg_arange(6, tg.int64, (2, 3))
    n = np.from_dlpack(a)
    assert n.ctypes.data == a.ptr and n.shape == (2, 3)
    n[0, 0] = 11
    assert a.numpy()[0, 0] == 11
    m = np.arange(6, dtype=np.float32)
    b = tg.from_dlpack(m)
    b.numpy()[5] = -1
    assert m[5] == -1
    b2 = tg.from_dlpack(m.__dlpack__())
    assert b2.ptr == m.ctypes.data


# --------------------------------------------------------------------------- cross-framework

@pytest.mark.torch
@pytest.mark.jax
@pytest.mark.paddle
def test_chain_through_everyone(torch, jax, paddle):
    """torch -> tapegrad -> paddle -> tapegrad -> numpy, all one buffer."""
    import jax.dlpack
    t = torch.arange(4, dtype=torch.float32)
    a = tg.from_dlpack(t)
    p = paddle.from_dlpack(a)
    b = tg.from_dlpack(p)
    n = np.from_dlpack(b)
    assert n.ctypes.data == t.data_ptr() == p.data_ptr()
    n[3] = 30
    assert t[3].item() == 30
    j = jax.dlpack.from_dlpack(b)
    assert float(j[3]) == 30
