"""Issue 15, item 1: the names Warp code uses everywhere, checked against Warp's semantics."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.types as tgt


def test_f_suffixed_aliases_are_the_same_types():
    assert tg.vec2f is tg.vec2 and tg.vec3f is tg.vec3 and tg.vec4f is tg.vec4
    assert tg.mat22f is tg.mat22 and tg.mat33f is tg.mat33 and tg.mat44f is tg.mat44
    assert tg.quatf is tg.quat


def test_h_d_and_integer_families():
    for n in (2, 3, 4):
        assert getattr(tg, f"mat{n}{n}h").scalar is tg.float16
        assert getattr(tg, f"mat{n}{n}d").scalar is tg.float64
        for suffix, s in (("b", tg.int8), ("ub", tg.uint8), ("s", tg.int16), ("us", tg.uint16),
                          ("ui", tg.uint32), ("l", tg.int64), ("ul", tg.uint64), ("i", tg.int32)):
            t = getattr(tg, f"vec{n}{suffix}")
            assert t.scalar is s and t.length == n and repr(t) == f"tapegrad.vec{n}{suffix}"
    assert tg.quath.scalar is tg.float16 and tg.quatd.scalar is tg.float64
    assert tg.vector(3, tg.uint8) is tg.vec3ub


def test_arrays_of_new_types():
    a = tg.zeros(5, dtype=tg.mat22h)
    assert a.numpy().shape == (5, 2, 2) and a.numpy().dtype == np.float16
    b = tg.array(np.ones((2, 3), np.uint8), dtype=tg.vec3ub)
    assert b.shape == (2,) and b.dtype is tg.vec3ub


def test_dtype_attributes_read_by_warp_code():
    assert tg.float32._type_ is ctypes.c_float and tg.float32._length_ == 1
    assert tg.vec3f._type_ is ctypes.c_float and tg.vec3f._shape_ == (3,) and tg.vec3f._length_ == 3
    assert tg.mat22h._shape_ == (2, 2) and tg.mat22h._length_ == 4 and tg.mat22h._wp_scalar_type_ is tg.float16
    assert tg.quatd._wp_scalar_type_ is tg.float64 and tg.quatd._type_ is ctypes.c_double
    assert ctypes.sizeof(tg.float16._type_) == 2


def test_type_queries():
    assert tg.types.type_size_in_bytes(tg.vec3f) == 12
    assert tgt.type_size_in_bytes(tg.float64) == 8 and tgt.type_size_in_bytes(float) == 4
    assert tgt.type_length(tg.mat33) == 9 and tgt.type_length(tg.float32) == 1 and tgt.type_size(tg.mat33) == 9
    assert tgt.type_scalar_type(tg.vec3f) is tg.float32 and tgt.type_scalar_type(tg.float16) is tg.float16

    @tg.struct
    class S:
        a: float
        b: tg.vec3

    assert tgt.type_size_in_bytes(S) == 16
    with pytest.raises(TypeError, match=r"type_length\(dtype\).*struct S"):
        tgt.type_length(S)
    with pytest.raises(TypeError, match=r"type_size_in_bytes\(dtype\).*got 'x'"):
        tgt.type_size_in_bytes("x")


def test_constants_host_side():
    assert tg.pi == math.pi and tg.e == math.e and tg.tau == 2 * math.pi
    assert math.isinf(tg.inf) and math.isnan(tg.nan)
    assert tg.PI == tg.pi and tg.half_pi == math.pi / 2 and abs(tg.phi - 1.6180339887) < 1e-9
    assert tg.ln2 == math.log(2) and tg.log10e == math.log10(math.e)


@tg.kernel
def _uses_constants(y: tg.array(dtype=float), flags: tg.array(dtype=int)):
    i = tg.tid()
    y[i] = tg.pi + tg.tau - tg.e + tg.min(tg.inf, 1.0)
    n = tg.nan
    if n != n:
        flags[i] = 1


def test_constants_in_kernels():
    y = tg.zeros(2)
    f = tg.zeros(2, dtype=int)
    tg.launch(_uses_constants, dim=2, inputs=[y, f])
    np.testing.assert_allclose(y.numpy(), np.float32(math.pi + math.tau - math.e + 1.0), rtol=1e-6)
    assert f.numpy().tolist() == [1, 1]


def test_init_is_idempotent_and_returns_none():
    assert tg.init() is None and tg.init() is None
    assert tg.runtime.is_initialized()


def test_get_devices_and_availability():
    devs = tg.get_devices()
    assert devs[0] is tg.get_device("cpu") and devs[1:] == tg.get_cuda_devices()
    assert tg.is_device_available("cpu") and tg.is_device_available(devs[0])
    if not tg.is_cuda_available():
        assert not tg.is_device_available("cuda:0")
        with pytest.raises(RuntimeError, match="no CUDA device"):
            tg.get_cuda_device(0)
    with pytest.raises(TypeError, match=r"get_cuda_device\(ordinal\).*str"):
        tg.get_cuda_device("0")


def test_zeros_legacy_n_and_empty_default():
    assert tg.zeros(n=4).shape == (4,) and tg.empty(n=3, dtype=tg.vec3).shape == (3,)
    assert tg.full(n=2, value=5.0).numpy().tolist() == [5.0, 5.0]
    assert tg.empty().shape == (0,)
    with pytest.raises(TypeError, match="not both"):
        tg.zeros(3, n=3)
    with pytest.raises(TypeError, match=r"unexpected keyword.*'size'"):
        tg.zeros(size=3)


def test_module_options_roundtrip_and_enable_backward(tmp_path):
    opts = tg.get_module_options()
    assert opts["enable_backward"] is True and opts["block_dim"] == 256
    tg.set_module_options({"enable_backward": False}, module="tests_warp_surface_fake")
    assert tg.get_module_options("tests_warp_surface_fake")["enable_backward"] is False
    assert tg.get_module_options()["enable_backward"] is True   # the calling module is untouched

    def f(a: tg.array(dtype=float)):
        a[tg.tid()] = 1.0

    f.__module__ = "tests_warp_surface_fake"
    k = tg.kernel(f)
    assert k.enable_backward is False
    assert tg.kernel(enable_backward=True)(f).enable_backward is True   # the kernel's own option wins
    with pytest.raises(TypeError, match=r"set_module_options\(options\).*dict"):
        tg.set_module_options(["enable_backward"])
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['enable_backwards'\]"):
        tg.set_module_options({"enable_backwards": False})
    with pytest.raises(TypeError, match="'enable_backward' expects a bool"):
        tg.set_module_options({"enable_backward": 0})
    with pytest.raises(TypeError, match=r"get_module_options\(module\)"):
        tg.get_module_options(3)


@tg.kernel
def _surface_k(a: tg.array(dtype=float)):
    a[tg.tid()] = 2.0


def test_kernel_module_is_warps_module_object():
    m = _surface_k.module
    loaded = m.load("cpu")    # every kernel of this test file's module, by key
    assert loaded[_surface_k.key] is _surface_k.module_for(tg.get_device("cpu"))
    assert m.load(tg.get_device("cpu"), block_dim=128) == loaded
    assert m.name == __name__
    with pytest.raises(ValueError, match=r"Module.load\(block_dim=...\).*positive"):
        m.load("cpu", block_dim=0)
    with pytest.raises(TypeError, match=r"Module.load\(block_dim=...\)"):
        m.load("cpu", block_dim=True)


def test_load_module_and_force_load():
    tg.load_module(device="cpu")                    # the calling module: this test file's kernels
    assert tg.get_device("cpu").alias in _surface_k._modules
    tg.load_module(_surface_k.module, device=["cpu"])
    tg.load_module(__name__, device="cpu", recursive=True)
    tg.force_load(device="cpu", modules=[__name__])
    with pytest.raises(TypeError, match=r"load_module\(module\)"):
        tg.load_module(3.5)
    with pytest.raises(TypeError, match=r"force_load\(modules\)"):
        tg.force_load(modules="x")
    with pytest.raises(TypeError, match=r"load_module\(max_workers\)"):
        tg.load_module(max_workers=-1)


def test_clear_kernel_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path / "cache"))

    @tg.kernel
    def fresh(a: tg.array(dtype=float)):
        a[tg.tid()] = 3.0

    a = tg.zeros(2)
    tg.launch(fresh, dim=2, inputs=[a])
    assert any(p.suffix == ".so" for p in (tmp_path / "cache").iterdir())
    tg.clear_kernel_cache()
    assert list((tmp_path / "cache").iterdir()) == []
    tg.launch(fresh, dim=2, inputs=[a])              # the loaded kernel still runs
    assert a.numpy().tolist() == [3.0, 3.0]


def test_scoped_timer(capsys):
    times: dict = {}
    with tg.ScopedTimer("outer", dict=times, synchronize=True):
        with tg.ScopedTimer("inner", dict=times) as t:
            t.extra_msg = "(x)"
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("    inner took ") and out[0].endswith("ms (x)")
    assert out[1].startswith("outer took ")
    assert len(times["outer"]) == 1 and times["outer"][0] >= times["inner"][0] >= 0
    with tg.ScopedTimer("quiet", print=False, dict=times):
        pass
    with tg.ScopedTimer("off", active=False, dict=times) as off:
        pass
    assert capsys.readouterr().out == "" and times["off"] == [] and off.elapsed == 0.0
    with pytest.raises(TypeError, match=r"ScopedTimer\(name\)"):
        tg.ScopedTimer(3)
    with pytest.raises(TypeError, match=r"ScopedTimer\(dict\)"):
        tg.ScopedTimer("x", dict=[])


def test_mempool_queries_on_cpu():
    assert tg.is_mempool_supported("cpu") is False and tg.is_mempool_enabled("cpu") is False
    with pytest.raises(ValueError, match="only supported on CUDA devices"):
        tg.get_mempool_used_mem_current("cpu")
    with pytest.raises(TypeError, match=r"set_mempool_release_threshold\(threshold\)"):
        tg.set_mempool_release_threshold("cpu", "big")
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\]"):
        tg.set_mempool_release_threshold("cpu", 1.5)
    with pytest.raises(TypeError, match=r"set_mempool_enabled\(enable\)"):
        tg.set_mempool_enabled("cpu", 1)


@pytest.mark.cuda
def test_mempool_queries_on_cuda():
    dev = tg.get_device("cuda:0")
    assert tg.is_mempool_supported(dev)
    with tg.ScopedAllocator("async"):
        before = tg.get_mempool_used_mem_current(dev)
        a = tg.zeros(1 << 20, device=dev)
        assert tg.get_mempool_used_mem_current(dev) >= before + 4 * (1 << 20)
        assert tg.get_mempool_used_mem_high(dev) >= tg.get_mempool_used_mem_current(dev)
        del a
    old = tg.get_mempool_release_threshold(dev)
    tg.set_mempool_release_threshold(dev, 1 << 24)
    assert tg.get_mempool_release_threshold(dev) == 1 << 24
    tg.set_mempool_release_threshold(dev, old)
    tg.set_mempool_enabled(dev, False)
    assert not tg.is_mempool_enabled(dev)
    tg.set_mempool_enabled(dev, True)
    assert tg.is_mempool_enabled(dev)


def test_retain_grad_on_factories():
    for make in (lambda: tg.zeros(3, requires_grad=True, retain_grad=True),
                 lambda: tg.full(3, 1.0, requires_grad=True, retain_grad=True),
                 lambda: tg.ones_like(tg.zeros(3), requires_grad=True, retain_grad=True),
                 lambda: tg.from_numpy(np.ones(3, np.float32), requires_grad=True, retain_grad=True),
                 lambda: tg.array(np.ones(3, np.float32), requires_grad=True, retain_grad=True)):
        a = make()
        assert a.retain_grad is True
    a = tg.zeros(3, requires_grad=True, retain_grad=True)
    a.requires_grad = False
    assert a.retain_grad is False            # Warp: dropping requires_grad drops retain_grad
    with pytest.raises(ValueError, match="retain_grad: the array does not require gradients"):
        tg.zeros(3, retain_grad=True)
