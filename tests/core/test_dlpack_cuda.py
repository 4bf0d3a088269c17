"""DLPack on CUDA: zero-copy with torch/cupy/numba/jax/paddle, the stream handshake in both
directions (a slow producer kernel on a second stream, the consumer reads correct data without a
host sync), dl_device/copy, pinned memory, exit and leak checks. Runs only on a GPU machine."""
import ctypes
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import dlpack
from tapegrad.dlpack import capsules

from .._dlpack_util import get_name

pytestmark = pytest.mark.cuda

_P = ctypes.PYFUNCTYPE
_get_ptr = _P(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))

SPIN_CYCLES = 400_000_000          # ~0.2 s at 2 GHz: long enough that a missing wait reads stale data


def inspect_capsule(cap):
    name = get_name(cap)
    p = _get_ptr(cap, name)
    if name == b"dltensor_versioned":
        m = capsules._DLManagedTensorVersioned.from_address(p)
        flags = m.flags
    else:
        m = capsules._DLManagedTensor.from_address(p)
        flags = 0
    t = m.dl_tensor
    return {"name": name.decode(), "flags": flags, "data": t.data or 0,
            "device": (t.device.device_type, t.device.device_id),
            "shape": tuple(t.shape[i] for i in range(t.ndim))}


@pytest.fixture(scope="module")
def cp():
    import cupy
    return cupy


@pytest.fixture(scope="module")
def torch():
    """torch with CUDA: tests taking it are marked ``torch`` (with the module's ``cuda``)."""
    import torch
    return torch


def cupy_view(cp, a):
    mem = cp.cuda.UnownedMemory(a.ptr, a.nbytes, a, a.device.ordinal)
    return cp.ndarray(a.shape, dtype=a.dtype.np_dtype, memptr=cp.cuda.MemoryPointer(mem, 0))


_SPIN_SRC = r"""
extern "C" __global__ void spin_write(float* x, int n, long long cycles, float v) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] = v;
}
"""


def spin_write(cp, a, value, stream):
    """A slow kernel on ``stream`` (a tapegrad Stream) that writes ``value`` into ``a`` at its end."""
    k = cp.RawKernel(_SPIN_SRC, "spin_write")
    with cp.cuda.Device(a.device.ordinal), stream.cupy_stream:
        k((4,), (256,), (cupy_view(cp, a), np.int32(a.size), np.int64(SPIN_CYCLES), np.float32(value)))


# ---------------------------------------------------------------------------------- basics

def test_cuda_device_and_capsule():
    a = tg.zeros(8, device="cuda:0")
    assert a.__dlpack_device__() == (2, 0)
    info = inspect_capsule(a.__dlpack__(stream=-1, max_version=(1, 0)))
    assert info["device"] == (2, 0) and info["data"] == a.ptr and info["name"] == "dltensor_versioned"
    assert inspect_capsule(tg.to_dlpack(a))["name"] == "dltensor"


def test_stream_argument_validation():
    a = tg.zeros(8, device="cuda:0")
    other = tg.Stream("cuda:0")
    for ok in (None, -1, 0, 1, 2, other.cuda_stream, a.device.stream.cuda_stream):
        a.__dlpack__(stream=ok)
    for bad in (-2, 1.5, "1", True):
        with pytest.raises(TypeError, match="stream"):
            a.__dlpack__(stream=bad)


@pytest.mark.torch
def test_torch_cuda_both_directions(torch):
    import torch.utils.dlpack as tud
    a = tg.array(np.arange(16, dtype=np.float32), device="cuda:0")
    t = torch.from_dlpack(a)
    assert t.is_cuda and t.data_ptr() == a.ptr
    t[0] = 5
    torch.cuda.synchronize()
    assert a.numpy()[0] == 5
    t2 = tud.from_dlpack(tg.to_dlpack(a))
    assert t2.data_ptr() == a.ptr
    tt = torch.arange(8, dtype=torch.float64, device="cuda:0")
    b = tg.from_dlpack(tt)
    assert b.device == "cuda:0" and b.ptr == tt.data_ptr() and b.dtype is tg.float64
    np.testing.assert_array_equal(b.numpy(), np.arange(8))
    c = tg.from_dlpack(tud.to_dlpack(tt))
    assert c.ptr == tt.data_ptr()
    v = tg.zeros(3, dtype=tg.vec3, device="cuda:0")
    assert tuple(torch.from_dlpack(v).shape) == (3, 3)


def test_cupy_both_directions(cp):
    a = tg.array(np.arange(16, dtype=np.float32), device="cuda:0")
    c = cp.from_dlpack(a)
    assert c.data.ptr == a.ptr
    c[...] = 3
    cp.cuda.runtime.deviceSynchronize()
    assert (a.numpy() == 3).all()
    assert cp.asarray(a).data.ptr == a.ptr                     # __cuda_array_interface__ v3
    x = cp.arange(10, dtype=cp.float32)
    b = tg.from_dlpack(x)
    assert b.ptr == x.data.ptr and b.device == "cuda:0"
    assert tg.from_dlpack(x.__dlpack__()).ptr == x.data.ptr    # capsule path
    w = tg.array(x)                                            # CAI wrap, zero-copy
    assert w.ptr == x.data.ptr


def test_numba_cai(cp):
    numba_cuda = pytest.importorskip("numba.cuda")
    if not numba_cuda.is_available():
        pytest.skip("numba without CUDA")
    a = tg.array(np.arange(16, dtype=np.float32), device="cuda:0")
    d = numba_cuda.as_cuda_array(a)
    assert d.copy_to_host()[5] == 5
    nd = numba_cuda.to_device(np.full(8, 7.0, dtype=np.float32))
    back = tg.array(nd, dtype=tg.float32)
    assert back.ptr == nd.__cuda_array_interface__["data"][0] and back.numpy()[3] == 7


# --------------------------------------------------------------------------- stream handshake

@pytest.mark.torch
def test_export_handshake_orders_consumer_stream(cp, torch):
    """tapegrad producer on a non-blocking stream, torch consumer on its own side stream."""
    a = tg.zeros(1 << 16, device="cuda:0")
    tg.synchronize()
    s = tg.Stream("cuda:0", blocking=False)
    ts = torch.cuda.Stream(device="cuda:0")
    with tg.ScopedStream(s, sync_enter=False):
        spin_write(cp, a, 7.0, s)
        with torch.cuda.stream(ts):
            t = torch.from_dlpack(a)                      # passes ts; ts must wait for s
            out = t.clone()                               # runs on ts, no host sync in between
    ts.synchronize()
    assert bool((out == 7.0).all())


@pytest.mark.torch
def test_import_handshake_orders_tapegrad_stream(cp, torch):
    """torch producer on a side stream, tapegrad consumer on a non-blocking stream."""
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("torch.cuda._sleep missing")
    ts = torch.cuda.Stream(device="cuda:0")
    s = tg.Stream("cuda:0", blocking=False)
    with torch.cuda.stream(ts):
        t = torch.zeros(1 << 16, device="cuda:0")
        torch.cuda._sleep(SPIN_CYCLES)
        t.fill_(5.0)
        with tg.ScopedStream(s, sync_enter=False):
            a = tg.from_dlpack(t)                         # passes s; torch makes s wait for ts
            b = tg.clone(a)                               # copy on s, no host sync in between
    s.synchronize()
    assert (b.numpy() == 5.0).all()


@pytest.mark.torch
def test_to_dlpack_orders_legacy_stream(cp, torch):
    """The capsule path makes the legacy default stream wait for tapegrad's current stream."""
    a = tg.zeros(1 << 16, device="cuda:0")
    tg.synchronize()
    s = tg.Stream("cuda:0", blocking=False)
    with tg.ScopedStream(s, sync_enter=False):
        spin_write(cp, a, 3.0, s)
        cap = tg.to_dlpack(a)
    t = torch.utils.dlpack.from_dlpack(cap)
    with torch.cuda.stream(torch.cuda.default_stream("cuda:0")):
        out = t.clone()
    torch.cuda.default_stream("cuda:0").synchronize()
    assert bool((out == 3.0).all())


# ------------------------------------------------------------------------- dl_device / copy

def test_dl_device_cpu_copies(cp):
    a = tg.array(np.arange(6, dtype=np.float32), device="cuda:0")
    info = inspect_capsule(a.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    assert info["device"] == (1, 0) and info["flags"] & dlpack.FLAG_IS_COPIED and info["data"] != a.ptr
    n = np.from_dlpack(a, device="cpu")
    np.testing.assert_array_equal(n, np.arange(6))
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(1, 0), copy=False)
    b = tg.from_dlpack(a, device="cpu")
    assert b.device == "cpu" and b.numpy().tolist() == list(range(6))
    with pytest.raises(ValueError):
        tg.from_dlpack(a, device="cpu", copy=False)


@pytest.mark.torch
def test_copy_true_cuda(torch):
    a = tg.array(np.arange(6, dtype=np.float32), device="cuda:0")
    info = inspect_capsule(a.__dlpack__(max_version=(1, 0), copy=True))
    assert info["flags"] & dlpack.FLAG_IS_COPIED and info["data"] != a.ptr
    t = torch.from_dlpack(a, copy=True)
    assert t.data_ptr() != a.ptr
    torch.cuda.synchronize()
    assert t.tolist() == list(range(6))


def test_pinned(cp):
    p = tg.zeros(4, device="cpu", pinned=True)
    if not p.pinned:
        pytest.skip("pinned allocation unavailable")
    assert p.__dlpack_device__() == (3, 0)
    assert inspect_capsule(p.__dlpack__())["device"] == (3, 0)
    assert inspect_capsule(p.__dlpack__(dl_device=(1, 0)))["device"] == (1, 0)   # host memory: no copy
    n = np.from_dlpack(p, device="cpu")
    assert n.ctypes.data == p.ptr
    q = tg.from_dlpack(p)
    assert q.pinned and q.ptr == p.ptr and q.device == "cpu"
    p.__dlpack__(stream=1)                                # pinned memory accepts a CUDA stream


# ------------------------------------------------------------------------------- frameworks

@pytest.mark.jax
def test_jax_gpu():
    import jax
    import jax.dlpack
    import jax.numpy as jnp
    a = tg.array(np.arange(8, dtype=np.float32), device="cuda:0")
    j = jax.dlpack.from_dlpack(a)
    np.testing.assert_array_equal(np.asarray(j), np.arange(8))
    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32), jax.devices("gpu")[0])
    b = tg.from_dlpack(x)
    assert b.device.is_cuda and b.ptr == x.unsafe_buffer_pointer()


@pytest.mark.paddle
def test_paddle_gpu():
    import paddle
    a = tg.array(np.arange(8, dtype=np.float32), device="cuda:0")
    p = paddle.from_dlpack(a)
    assert p.data_ptr() == a.ptr
    q = paddle.arange(4, dtype="float32").cuda()
    b = tg.from_dlpack(q)
    assert b.device.is_cuda and b.ptr == q.data_ptr()


# ------------------------------------------------------------------------ lifetime / leaks

EXIT_SCRIPT = textwrap.dedent("""
    import numpy as np, cupy as cp, torch, torch.utils.dlpack
    import tapegrad as tg
    keep = []
    for i in range(10):
        a = tg.array(np.arange(64, dtype=np.float32) + i, device="cuda:0")
        keep += [torch.from_dlpack(a), torch.utils.dlpack.from_dlpack(tg.to_dlpack(a)), cp.from_dlpack(a),
                 cp.asarray(a), tg.to_dlpack(a), a.__dlpack__(max_version=(1, 0)),
                 tg.from_dlpack(torch.arange(8.0, device="cuda:0")), tg.from_dlpack(cp.arange(8.0))]
        del a
    import sys
    sys.keep_late = keep[:4]
""")


@pytest.mark.torch
def test_exit_with_cuda_views_alive(cp, torch):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    for _ in range(5):
        r = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0 and not r.stderr.strip(), (r.returncode, r.stderr[-2000:])


@pytest.mark.torch
def test_no_leak_cuda_100k_cycles(cp, torch):
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    a = tg.zeros(256, device="cuda:0")
    t = torch.zeros(256, device="cuda:0")
    pool = cp.get_default_memory_pool()

    def cycle():
        torch.from_dlpack(a)
        tg.from_dlpack(t)
        tg.from_dlpack(tg.to_dlpack(a))
        cp.from_dlpack(a)

    for _ in range(5000):
        cycle()
    torch.cuda.synchronize()
    gc.collect()
    r0, g0, p0 = rss(), torch.cuda.memory_allocated(), pool.used_bytes()
    for _ in range(100000):
        cycle()
    torch.cuda.synchronize()
    gc.collect()
    r1, g1, p1 = rss(), torch.cuda.memory_allocated(), pool.used_bytes()
    assert r1 <= r0 * 1.05, (r0, r1)
    assert g1 <= g0 * 1.05 + 4096 and p1 <= p0 * 1.05 + 4096, (g0, g1, p0, p1)
