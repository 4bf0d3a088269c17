"""Devices and streams (R25). CUDA parts run on the GPU machine."""
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg


def test_cpu_device():
    d = tg.get_device("cpu")
    assert d.is_cpu and not d.is_cuda and str(d) == "cpu"
    assert tg.get_device(d) is d and d == "cpu"
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        d.stream


def test_scoped_device_restores():
    before = tg.get_device()
    with tg.ScopedDevice("cpu") as d:
        assert tg.get_device() is d
    assert tg.get_device() is before


def test_bad_device_names():
    with pytest.raises(ValueError, match="expected 'cpu'"):
        tg.get_device("tpu:0")
    with pytest.raises(TypeError, match="device"):
        tg.get_device(3.5)


@pytest.mark.skipif(tg.is_cuda_available(), reason="CPU-only behaviour")
def test_no_cuda_gives_clear_error():
    assert tg.get_cuda_device_count() == 0
    with pytest.raises(RuntimeError, match="no CUDA device"):
        tg.get_device("cuda:0")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        tg.zeros(3, device="cuda")
    tg.synchronize()  # a no-op, not an error


def test_import_pulls_no_framework_or_cupy():
    code = ("import sys, tapegrad\n"
            "bad = [m for m in ('torch', 'jax', 'paddle', 'cupy') if m in sys.modules]\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.cuda
def test_cuda_arrays_round_trip():
    a = tg.array(np.arange(10, dtype=np.float32), device="cuda:0")
    assert a.device.is_cuda and a.numpy().tolist() == list(range(10))
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] not in (None, 0)
    b = a.to("cpu")
    assert b.device.is_cpu and b.numpy()[9] == 9
    c = tg.clone(a[::2])
    assert c.numpy().tolist() == [0, 2, 4, 6, 8]
    a.fill_(3.0)
    assert a.numpy().tolist() == [3.0] * 10
    a.zero_()
    assert not a.numpy().any()
    p = tg.zeros(4, device="cpu", pinned=True)
    assert p.pinned


@pytest.mark.cuda
def test_cuda_array_interface_import_waits_on_stream():
    import cupy as cp
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.arange(1 << 20, dtype=cp.float32)
        x *= 2
    a = tg.array(x)  # waits on x's stream through CAI v3 'stream'
    assert a.ptr == x.data.ptr
    assert a.numpy()[-1] == 2 * ((1 << 20) - 1)


@pytest.mark.cuda
def test_cuda_array_interface_rejects_mask():
    class Masked:
        __cuda_array_interface__ = {"version": 3, "shape": (2,), "typestr": "<f4", "data": (0, False),
                                    "strides": None, "mask": object(), "stream": None}
    with pytest.raises(ValueError, match="mask"):
        tg.array(Masked())


@pytest.mark.cuda
def test_streams_and_events():
    dev = tg.get_device("cuda:0")
    s = tg.Stream(dev)
    assert s.is_blocking
    nb = tg.Stream(dev, blocking=False)
    assert not nb.is_blocking
    with tg.ScopedStream(s):
        assert dev.stream is s
        a = tg.ones(1 << 16, device=dev)
    assert dev.stream is not s
    e = s.record_event()
    dev.stream.wait_event(e)
    dev.stream.wait_stream(s)
    ext = tg.Stream(dev, cuda_stream=s.cuda_stream)
    assert ext == s and not ext.owned
    assert a.numpy().sum() == 1 << 16
    with pytest.raises(TypeError, match="Event"):
        s.wait_event("nope")


def test_lazy_names_resolve_or_say_what_is_missing():
    assert "from_torch" in dir(tg) and "ScopedCapture" in dir(tg)
    assert callable(tg.from_dlpack)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        tg.no_such_name
