"""DLPack producer/consumer: capsule contents, negotiation, dtypes, flags, errors, lifetime.

Framework round trips are in test_dlpack_frameworks.py, process-exit and leak tests in
test_dlpack_lifetime.py, CUDA tests in test_dlpack_cuda.py.
"""
import ctypes
import gc
import os
import sys
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import build, dlpack
from tapegrad.dlpack import capsules

from .._dlpack_util import Spy, capsule_name, get_name

# ------------------------------------------------------------------------------ helpers

_P = ctypes.PYFUNCTYPE
_api = ctypes.pythonapi
_get_ptr = _P(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_cap_new = _P(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_New", _api))
_cap_valid = _P(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_NAMES = {n: ctypes.create_string_buffer(n) for n in (b"dltensor", b"dltensor_versioned")}



def inspect_capsule(cap):
    """Read a (not yet consumed) capsule's DLTensor without consuming it."""
    name = get_name(cap)
    p = _get_ptr(cap, name)
    out = {"name": name.decode()}
    if name == b"dltensor_versioned":
        m = capsules._DLManagedTensorVersioned.from_address(p)
        out.update(version=(m.major, m.minor), flags=m.flags)
    else:
        m = capsules._DLManagedTensor.from_address(p)
        out.update(version=None, flags=0)
    t = m.dl_tensor
    out.update(data=t.data or 0, device=(t.device.device_type, t.device.device_id),
               dtype=(t.dtype.code, t.dtype.bits, t.dtype.lanes), ndim=t.ndim,
               shape=tuple(t.shape[i] for i in range(t.ndim)),
               strides=tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None,
               byte_offset=t.byte_offset)
    return out


class CapsuleFactory:
    """Hand-built producer capsules (any device, dtype, flags, version, NULL strides, byte_offset),
    with a deleter that counts its calls."""

    def __init__(self):
        self.deleted = []
        self._keep = {}
        self._deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._on_delete)
        self._dtor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._on_capsule_dtor)

    def _on_delete(self, addr):
        self.deleted.append(addr)
        self._keep.pop(addr, None)

    def _on_capsule_dtor(self, cap):
        for name in (b"dltensor_versioned", b"dltensor"):
            if _cap_valid(cap, name):
                self._on_delete(_P(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
                    ("PyCapsule_GetPointer", _api))(cap, name))

    def make(self, buf, shape, strides=None, byte_offset=0, device=(1, 0), dtype=(2, 32, 1), versioned=True,
             flags=0, major=1, data=None):
        m = capsules._DLManagedTensorVersioned() if versioned else capsules._DLManagedTensor()
        n = len(shape)
        sh = (ctypes.c_int64 * max(n, 1))(*shape)
        st = (ctypes.c_int64 * max(n, 1))(*strides) if strides is not None else None
        if versioned:
            m.major, m.minor, m.flags = major, 0, flags
        t = m.dl_tensor
        t.data = data if data is not None else (buf.ctypes.data if buf is not None else None)
        t.device.device_type, t.device.device_id = device
        t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype
        t.ndim = n
        t.shape = ctypes.cast(sh, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(st, ctypes.POINTER(ctypes.c_int64)) if st is not None else None
        t.byte_offset = byte_offset
        m.deleter = ctypes.cast(self._deleter, ctypes.c_void_p).value
        addr = ctypes.addressof(m)
        self._keep[addr] = (m, sh, st, buf)
        name = _NAMES[b"dltensor_versioned" if versioned else b"dltensor"]
        return _cap_new(addr, ctypes.addressof(name), ctypes.cast(self._dtor, ctypes.c_void_p).value)


@pytest.fixture(params=["native", "ctypes"])
def backend(request):
    """Run a test with the C helper and with the pure-ctypes fallback."""
    prev = capsules.use_backend(request.param)
    yield request.param
    capsules.use_backend(prev)



class LegacyProducer:
    """A pre-2023.12 producer: __dlpack__(stream=None) only (rejects max_version with TypeError)."""

    def __init__(self, arr):
        self.arr = arr
        self.calls = []

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def arange(n=6, dtype=tg.float32):
    return tg.array(np.arange(n).astype(tg.dtype_to_numpy(dtype)), dtype=dtype, device="cpu")


# ------------------------------------------------------------------------------ export

def test_device():
    a = arange()
    assert a.__dlpack_device__() == (1, 0)
    assert a.__dlpack_device__()[0] == dlpack.DLDeviceType.kDLCPU


def test_export_legacy_vs_versioned(backend):
    a = arange()
    legacy = a.__dlpack__()
    assert capsule_name(legacy) == "dltensor"
    v = a.__dlpack__(max_version=(1, 0))
    info = inspect_capsule(v)
    assert info["name"] == "dltensor_versioned" and info["version"] == (1, 0) and info["flags"] == 0
    assert capsule_name(a.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert inspect_capsule(a.__dlpack__(max_version=(1, 5)))["version"] == dlpack.DLPACK_VERSION
    assert inspect_capsule(a.__dlpack__(max_version=(2, 0)))["version"][0] == 1
    assert capsule_name(tg.to_dlpack(a)) == "dltensor"


def test_fake_consumers_negotiate():
    """A consumer that passes max_version gets a versioned capsule; one that does not, a legacy one."""
    a = arange()

    def new_consumer(obj):
        return capsule_name(obj.__dlpack__(stream=None, max_version=(1, 0)))

    def old_consumer(obj):
        return capsule_name(obj.__dlpack__(stream=None))

    assert new_consumer(a) == "dltensor_versioned"
    assert old_consumer(a) == "dltensor"
    spy = Spy(a)
    np.from_dlpack(spy)                               # numpy >= 2 passes max_version=(1, 0)
    assert spy.calls[-1][0]["max_version"] == (1, 0) and spy.calls[-1][1] == "dltensor_versioned"


def test_export_capsule_contents(backend):
    a = arange(12).reshape((3, 4))
    info = inspect_capsule(a.__dlpack__(max_version=(1, 0)))
    assert info["data"] == a.ptr and info["device"] == (1, 0) and info["dtype"] == (2, 32, 1)
    assert info["shape"] == (3, 4) and info["strides"] == (4, 1) and info["byte_offset"] == 0
    t = a.transpose()
    info = inspect_capsule(t.__dlpack__())
    assert info["shape"] == (4, 3) and info["strides"] == (1, 4)   # strides always filled, in elements
    s = a[:, 1:3]
    info = inspect_capsule(s.__dlpack__())
    assert info["data"] == a.ptr + 4 and info["shape"] == (3, 2) and info["strides"] == (4, 1)


@pytest.mark.parametrize("name", sorted(n for n in tg.types.SCALARS if n != "bfloat16"))  # numpy: no bf16 DLPack
def test_every_scalar_dtype_numpy_round_trip(name, backend):
    dt = tg.types.SCALARS[name]
    src = (np.arange(7) % 2).astype(dt.np_dtype) if name == "bool" else np.arange(7).astype(dt.np_dtype)
    a = tg.from_dlpack(src)
    assert a.dtype is dt and a.ptr == src.ctypes.data and a.shape == (7,)
    info = inspect_capsule(a.__dlpack__(max_version=(1, 0)))
    assert info["dtype"] == (dt.dl_code, dt.bits, 1)
    back = np.from_dlpack(a)
    assert back.dtype == src.dtype and back.ctypes.data == src.ctypes.data
    np.testing.assert_array_equal(back, src)


VEC_MAT = [tg.vec2, tg.vec3, tg.vec4, tg.vec3d, tg.vec4h, tg.vec2i, tg.mat22, tg.mat33, tg.mat44, tg.mat33d,
           tg.quat, tg.vector(5, tg.int64), tg.matrix((2, 3), tg.float64)]


@pytest.mark.parametrize("dt", VEC_MAT, ids=lambda d: d.name)
def test_vec_mat_export_inner_dims(dt, backend):
    a = tg.zeros(4, dtype=dt, device="cpu")
    n = np.from_dlpack(a)
    assert n.shape == (4,) + dt.inner_shape and n.dtype == dt.scalar.np_dtype
    assert n.ctypes.data == a.ptr
    n[...] = np.arange(n.size).reshape(n.shape)
    b = tg.from_dlpack(n, dtype=dt)                    # the vector/matrix dtype consumes trailing dims
    assert b.dtype is dt and b.shape == (4,) and b.ptr == a.ptr
    np.testing.assert_array_equal(b.numpy(), n)
    info = inspect_capsule(a.__dlpack__())
    k = len(dt.inner_shape)
    assert info["shape"][-k:] == dt.inner_shape


def test_vec_dtype_mismatch_raises():
    n = np.zeros((4, 3), np.float32)
    with pytest.raises(RuntimeError, match="trailing"):
        tg.from_dlpack(n, dtype=tg.vec4)
    with pytest.raises(RuntimeError, match="contiguous"):
        tg.from_dlpack(np.zeros((3, 4), np.float32).T, dtype=tg.vec3)


def test_struct_export_raises(backend):
    @tg.struct
    class Pair:
        a: float
        b: int

    s = tg.zeros(3, dtype=Pair, device="cpu")
    for f in (tg.to_dlpack, lambda x: x.__dlpack__(max_version=(1, 0))):
        with pytest.raises(TypeError, match="struct"):
            f(s)
        with pytest.raises(RuntimeError, match="struct"):
            f(s)


def test_stream_validation_cpu():
    a = arange()
    a.__dlpack__(stream=None)
    a.__dlpack__(stream=-1)
    for bad in (0, 1, 2, 12345):
        with pytest.raises(TypeError, match="None or -1 for CPU"):
            a.__dlpack__(stream=bad)
        with pytest.raises(BufferError):
            a.__dlpack__(stream=bad)
    with pytest.raises(TypeError):
        a.__dlpack__(stream="default")


def test_export_copy_flag(backend):
    a = arange()
    cap = a.__dlpack__(max_version=(1, 0), copy=True)
    info = inspect_capsule(cap)
    assert info["flags"] & dlpack.FLAG_IS_COPIED and info["data"] != a.ptr
    n = np.from_dlpack(a, copy=True)
    assert n.ctypes.data != a.ptr
    np.testing.assert_array_equal(n, a.numpy())
    n[0] = 99
    assert a.numpy()[0] == 0
    assert inspect_capsule(a.__dlpack__(max_version=(1, 0), copy=False))["flags"] == 0


def test_export_dl_device():
    a = arange()
    assert inspect_capsule(a.__dlpack__(dl_device=(1, 0)))["data"] == a.ptr
    if not tg.is_cuda_available():
        with pytest.raises(BufferError):
            a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(4, 0))
    with pytest.raises(TypeError):
        a.__dlpack__(dl_device="cpu")
    with pytest.raises(TypeError):
        a.__dlpack__(max_version="1.0")


def test_export_read_only(backend):
    src = np.arange(5, dtype=np.float32)
    src.flags.writeable = False
    a = tg.array(src, copy=False)
    assert a.readonly
    info = inspect_capsule(a.__dlpack__(max_version=(1, 0)))
    assert info["flags"] & dlpack.FLAG_READ_ONLY
    with pytest.raises(BufferError, match="read-only"):
        a.__dlpack__()                                  # legacy capsules cannot say read-only
    with pytest.raises(BufferError):
        tg.to_dlpack(a)
    n = np.from_dlpack(a)
    assert not n.flags.writeable and n.ctypes.data == a.ptr
    c = inspect_capsule(a.__dlpack__(copy=True))        # a copy is writable: legacy is fine
    assert c["data"] != a.ptr


# ------------------------------------------------------------------------------ import

def test_import_protocol_and_capsule(backend):
    n = np.arange(6, dtype=np.float64).reshape(2, 3)
    a = tg.from_dlpack(n)
    assert a.ptr == n.ctypes.data and a.shape == (2, 3) and a.strides == (24, 8) and a.dtype is tg.float64
    a.numpy()[0, 0] = 7
    assert n[0, 0] == 7
    cap = n.__dlpack__(max_version=(1, 0))
    b = tg.from_dlpack(cap)
    assert b.ptr == n.ctypes.data and capsule_name(cap) == "used_dltensor_versioned"
    cap = n.__dlpack__()
    c = tg.from_dlpack(cap)
    assert c.ptr == n.ctypes.data and capsule_name(cap) == "used_dltensor"


def test_import_legacy_only_producer(backend):
    n = np.arange(4, dtype=np.int32)
    p = LegacyProducer(n)
    a = tg.from_dlpack(p)                              # TypeError on max_version -> retried without it
    assert a.ptr == n.ctypes.data and p.calls == [None]


def test_import_versioned_first():
    spy = Spy(np.arange(3.0))
    tg.from_dlpack(spy)
    assert spy.calls[0][0] == {"max_version": (1, 0)} and spy.calls[0][1] == "dltensor_versioned"


def test_import_read_only(backend):
    src = np.arange(5, dtype=np.float32)
    src.flags.writeable = False                       # numpy >= 2 exports READ_ONLY in versioned capsules
    a = tg.from_dlpack(src)
    assert a.readonly and a.ptr == src.ctypes.data
    assert a.descriptor().flags & 1                   # launch refuses kernel writes to it
    with pytest.raises(RuntimeError, match="read-only"):
        a.fill_(1.0)
    with pytest.raises(RuntimeError, match="read-only"):
        a.assign(np.zeros(5, np.float32))
    with pytest.raises(RuntimeError, match="read-only"):
        a.zero_()
    assert not a.numpy().flags.writeable
    assert a[1:].readonly                             # views inherit it
    b = tg.from_dlpack(src, copy=True)
    assert not b.readonly and b.ptr != src.ctypes.data
    b.fill_(3.0)
    assert src[0] == 0
    f = CapsuleFactory()
    buf = np.zeros(3, np.float32)
    assert tg.from_dlpack(f.make(buf, (3,), flags=dlpack.FLAG_READ_ONLY)).readonly


def test_kernel_write_to_read_only_refused():
    try:
        @tg.kernel
        def write(x: tg.array(dtype=float)):
            i = tg.tid()
            x[i] = 1.0
    except Exception:
        pytest.skip("kernel compiler not available")
    src = np.zeros(4, np.float32)
    src.flags.writeable = False
    a = tg.from_dlpack(src)
    with pytest.raises(RuntimeError, match="read-only"):
        tg.launch(write, dim=4, inputs=[a], device="cpu")


def test_import_strided_and_zero_stride(backend):
    n = np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2]
    a = tg.from_dlpack(n)
    assert a.ptr == n.ctypes.data and a.strides == n.strides
    np.testing.assert_array_equal(a.numpy(), n)
    z = np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4))   # zero stride, read-only in numpy
    b = tg.from_dlpack(z)
    assert b.strides == (0, 4) and b.readonly
    np.testing.assert_array_equal(b.numpy(), z)


def test_import_negative_strides_copies():
    n = np.arange(5, dtype=np.float32)[::-1]
    a = tg.from_dlpack(n)
    np.testing.assert_array_equal(a.numpy(), n)
    with pytest.raises(ValueError, match="copy=False"):
        tg.from_dlpack(n, copy=False)


def test_import_zero_dim_and_empty(backend):
    a = tg.from_dlpack(np.array(3.5, dtype=np.float32))
    assert a.shape == (1,) and a.numpy()[0] == 3.5
    e = tg.from_dlpack(np.zeros((0, 3), np.int16))
    assert e.shape == (0, 3) and e.size == 0
    assert np.from_dlpack(e).shape == (0, 3)


def test_import_too_many_dims():
    with pytest.raises(RuntimeError, match="at most 4"):
        tg.from_dlpack(np.zeros((1, 2, 1, 2, 1), np.float32))


def test_import_dtype_aliases(backend):
    u8 = np.array([0, 1, 1, 0], np.uint8)
    b = tg.from_dlpack(u8, dtype=tg.bool)
    assert b.dtype is tg.bool and b.ptr == u8.ctypes.data
    assert b.numpy().tolist() == [False, True, True, False]
    i32 = np.arange(3, dtype=np.int32)
    assert tg.from_dlpack(i32, dtype=tg.uint32).dtype is tg.uint32
    bl = np.array([True, False])
    assert tg.from_dlpack(bl, dtype=tg.int8).dtype is tg.int8
    with pytest.raises(TypeError, match="Incompatible"):
        tg.from_dlpack(np.zeros(3, np.float32), dtype=tg.int32)
    with pytest.raises(RuntimeError, match="Incompatible"):
        tg.from_dlpack(np.zeros(3, np.int16), dtype=tg.int32)
    with pytest.raises(TypeError):
        tg.from_dlpack(np.zeros(3, np.float32), dtype=tg.float16)


def test_import_capsule_fields(backend):
    """byte_offset, NULL strides and lanes from a hand-built capsule."""
    f = CapsuleFactory()
    buf = np.arange(16, dtype=np.float32)
    a = tg.from_dlpack(f.make(buf, (2, 3), strides=None, byte_offset=8))
    assert a.ptr == buf.ctypes.data + 8 and a.strides == (12, 4)
    np.testing.assert_array_equal(a.numpy(), buf[2:8].reshape(2, 3))
    v = tg.from_dlpack(f.make(buf, (4,), strides=None, dtype=(2, 32, 4)))        # lanes -> trailing dim
    assert v.shape == (4, 4) and v.strides == (16, 4)
    np.testing.assert_array_equal(v.numpy(), buf.reshape(4, 4))
    v3 = tg.from_dlpack(f.make(buf, (2,), strides=(2,), dtype=(2, 32, 4)), dtype=tg.vec4)
    assert v3.shape == (2,) and v3.strides == (32,)
    np.testing.assert_array_equal(v3.numpy(), buf.reshape(4, 4)[::2])
    legacy = tg.from_dlpack(f.make(buf, (4, 4), strides=(1, 4), versioned=False))
    assert legacy.strides == (4, 16)
    del a, v, v3, legacy
    gc.collect()
    assert len(f.deleted) == 4


def test_deleter_called_exactly_once(backend):
    f = CapsuleFactory()
    buf = np.arange(8, dtype=np.float32)
    cap = f.make(buf, (8,))
    a = tg.from_dlpack(cap)
    del cap
    gc.collect()
    assert f.deleted == []                             # consumed: the capsule's destructor does nothing
    view = a[2:5]
    del a
    gc.collect()
    assert f.deleted == []                             # a view keeps the producer alive
    np.testing.assert_array_equal(view.numpy(), [2, 3, 4])
    del view
    gc.collect()
    assert len(f.deleted) == 1
    cap = f.make(buf, (8,))
    del cap                                            # dropped unconsumed: the producer's destructor
    assert len(f.deleted) == 2


def test_consumed_capsule_error(backend):
    a = arange()
    cap = tg.to_dlpack(a)
    tg.from_dlpack(cap)
    with pytest.raises(RuntimeError, match="already consumed"):
        tg.from_dlpack(cap)
    with pytest.raises(dlpack.ConsumedCapsuleError):
        tg.from_dlpack(cap)
    cap = np.arange(3.0).__dlpack__()
    np.from_dlpack(type("C", (), {"__dlpack__": lambda s, **k: cap, "__dlpack_device__": lambda s: (1, 0)})())
    with pytest.raises(RuntimeError, match="already consumed"):
        tg.from_dlpack(cap)


def test_not_a_capsule():
    with pytest.raises(TypeError, match="__dlpack__"):
        tg.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError, match="dltensor"):
        tg.from_dlpack(__import__("datetime").datetime_CAPI)


def test_unsupported_device_type(backend):
    class OpenCL:
        called = False

        def __dlpack__(self, **kw):
            OpenCL.called = True

        def __dlpack_device__(self):
            return (4, 0)

    with pytest.raises(TypeError, match="device_type=4"):
        tg.from_dlpack(OpenCL())
    assert not OpenCL.called                           # refused before asking for a capsule
    f = CapsuleFactory()
    buf = np.zeros(4, np.float32)
    cap = f.make(buf, (4,), device=(10, 0))            # ROCm
    with pytest.raises(TypeError, match="device_type=10"):
        tg.from_dlpack(cap)
    assert capsule_name(cap) == "dltensor_versioned"   # refused without consuming it
    del cap
    assert len(f.deleted) == 1


def test_unsupported_dtype_not_consumed(backend):
    f = CapsuleFactory()
    buf = np.zeros(4, np.float32)
    cap = f.make(buf, (2,), dtype=(5, 64, 1))          # complex64
    with pytest.raises(TypeError, match="code=5"):
        tg.from_dlpack(cap)
    assert capsule_name(cap) == "dltensor_versioned"
    cap = f.make(buf, (4,), dtype=(10, 8, 1))          # float8_e4m3fn
    with pytest.raises(TypeError, match="no tapegrad"):
        tg.from_dlpack(cap)


def test_unsupported_major_version(backend):
    f = CapsuleFactory()
    buf = np.zeros(4, np.float32)
    cap = f.make(buf, (4,), major=2)
    with pytest.raises(BufferError, match="version 2"):
        tg.from_dlpack(cap)
    assert len(f.deleted) == 1                         # a consumer may only call the deleter
    assert capsule_name(cap) == "used_dltensor_versioned"


@pytest.mark.skipif(tg.is_cuda_available(), reason="CPU-only behaviour")
def test_cuda_capsule_without_cuda(backend):
    f = CapsuleFactory()
    cap = f.make(None, (4,), device=(2, 0), data=0x1000)
    with pytest.raises(RuntimeError, match="CUDA device"):
        tg.from_dlpack(cap)
    gc.collect()
    assert len(f.deleted) == 1                         # the producer is released


def test_import_device_and_copy_args():
    n = np.arange(4.0)
    a = tg.from_dlpack(n, device="cpu")
    assert a.ptr == n.ctypes.data
    c = tg.from_dlpack(n, copy=True)
    assert c.ptr != n.ctypes.data
    np.testing.assert_array_equal(c.numpy(), n)
    assert tg.from_dlpack(n, copy=False).ptr == n.ctypes.data


def test_round_trip_self(backend):
    a = arange(5)
    b = tg.from_dlpack(a)
    assert b.ptr == a.ptr and b.dtype is a.dtype and b.shape == a.shape
    b.numpy()[1] = 42
    assert a.numpy()[1] == 42
    c = tg.from_dlpack(tg.to_dlpack(a))
    assert c.ptr == a.ptr


# ------------------------------------------------------------------------------ lifetime

def test_capsule_keeps_array_alive(backend):
    a = arange()
    ref = weakref.ref(a)
    cap = a.__dlpack__(max_version=(1, 0))
    del a
    gc.collect()
    assert ref() is not None
    del cap                                            # dropped unconsumed: the array is released
    gc.collect()
    assert ref() is None


def test_foreign_view_outlives_array(backend):
    a = arange(4)
    ref = weakref.ref(a)
    n = np.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(n, [0, 1, 2, 3])
    del n
    gc.collect()
    assert ref() is None


def test_refcounts_balanced(backend):
    a = arange()
    before = sys.getrefcount(a)
    for _ in range(100):
        tg.from_dlpack(a)
        a.__dlpack__()
        np.from_dlpack(a)
        tg.from_dlpack(tg.to_dlpack(a))
    gc.collect()
    assert sys.getrefcount(a) == before


def test_deleter_from_another_thread(backend):
    import threading
    a = arange()
    ref = weakref.ref(a)
    n = np.from_dlpack(a)
    del a
    th = threading.Thread(target=lambda: n.__setitem__(0, 1))   # noqa: F821  (runs before `del n`)
    th.start()
    th.join()
    box = [n]
    del n
    th = threading.Thread(target=box.clear)           # the last reference dies on another thread
    th.start()
    th.join()
    gc.collect()
    assert ref() is None


def test_native_helper_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path))
    path = capsules.build_helper()
    assert path.startswith(str(tmp_path)) and capsules.build_helper() == path
    # no temp files left: the library, its checksum record, the cache's lock file and, kept
    # beside it for debugging, its source
    name = os.path.basename(path)
    want = [name, name + ".sum", ".tapegrad.lock", name[:-3] + ".cpp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(want)


def test_no_compiler_falls_back_to_ctypes(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path))
    monkeypatch.setenv("TAPEGRAD_PREBUILT_HELPERS", "0")   # as installed without a compiler
    def no_compiler(*args, **kwargs):
        raise tg.CompileError("no C++ compiler found (test)")
    monkeypatch.setattr(build, "build_cpu", no_compiler)
    monkeypatch.setattr(capsules, "_backend", None)
    monkeypatch.setattr(capsules, "ENTRY_POINTS", [None, None])
    with pytest.warns(RuntimeWarning, match="ctypes fallback"):
        b = capsules.backend()
    assert b.name == "ctypes"
    n = np.arange(4.0)
    a = tg.from_dlpack(n)
    assert a.ptr == n.ctypes.data and np.from_dlpack(a).ctypes.data == n.ctypes.data


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_unsafe_cache_dir_refused(tmp_path, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setenv("TAPEGRAD_CACHE", str(d))
    with pytest.raises(PermissionError):
        capsules.build_helper()
