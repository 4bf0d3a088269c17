"""Allocators (R13): the per-device setting, its validation, the scoped form, the bookkeeping of
graph-owned memory, and — on a GPU — CuPy's pool, the stream-ordered pool and PyTorch's caching
allocator."""
import gc

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.bridges.torch_memory import TorchAllocator
from tapegrad.cuda import allocators

HAS_CUDA = tg.is_cuda_available()
cuda = pytest.mark.cuda


# ------------------------------------------------------------------------ CPU: validation

def test_names_resolve_to_the_three_allocators():
    assert isinstance(allocators.resolve_allocator("cupy"), allocators.CupyPoolAllocator)
    assert isinstance(allocators.resolve_allocator("async"), allocators.AsyncPoolAllocator)
    assert isinstance(allocators.resolve_allocator("torch"), TorchAllocator)   # the torch bridge registers it
    assert allocators.resolve_allocator(None) is allocators.resolve_allocator("cupy")
    assert allocators.resolve_allocator(" Torch ") is allocators.resolve_allocator("torch")
    assert allocators.resolve_allocator("async").name == "async"
    assert allocators.resolve_allocator("torch").name == "torch"
    assert allocators.resolve_allocator("cupy").name == "cupy"


def test_unknown_name_is_a_value_error_listing_the_choices():
    with pytest.raises(ValueError, match=r"unknown allocator 'bogus'.*'cupy'.*'async'.*'torch'"):
        allocators.resolve_allocator("bogus")
    with pytest.raises(ValueError, match="unknown allocator"):
        tg.set_allocator("bogus", device="cpu")  # the name is checked before the device


@pytest.mark.parametrize("bad", [42, 1.5, object(), ["torch"]])
def test_bad_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match="alloc\\(device, nbytes\\)"):
        allocators.resolve_allocator(bad)


def test_allocator_class_instead_of_instance_is_a_type_error():
    with pytest.raises(TypeError, match=r"call it: AsyncPoolAllocator\(\)"):
        allocators.resolve_allocator(allocators.AsyncPoolAllocator)


def test_custom_allocator_object_is_accepted():
    class Mine:
        def alloc(self, device, nbytes):
            raise AssertionError("not called on the CPU")

    m = Mine()
    assert allocators.resolve_allocator(m) is m


def test_set_allocator_on_cpu_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="device cpu is not a CUDA device"):
        tg.set_allocator("async", device="cpu")
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.set_allocator(None, device="cpu")


def test_scoped_allocator_validates_name_at_construction_and_device_at_entry():
    with pytest.raises(ValueError, match="unknown allocator"):
        tg.ScopedAllocator("nope")
    with pytest.raises(TypeError):
        tg.ScopedAllocator(3)
    scope = tg.ScopedAllocator("async", device="cpu")
    with pytest.raises(RuntimeError, match="ScopedAllocator: device cpu is not a CUDA device"):
        with scope:
            pass


def test_current_allocator_is_cupy_by_default():
    assert allocators.current_allocator("cpu").name == "cupy"
    assert allocators.get_allocator is allocators.current_allocator


def test_async_release_threshold_validation():
    with pytest.raises(ValueError, match="release_threshold"):
        allocators.AsyncPoolAllocator(release_threshold=-1)
    assert allocators.AsyncPoolAllocator(release_threshold=None).release_threshold is None


def test_without_cuda_setting_an_allocator_for_the_default_device_is_a_clear_error():
    if HAS_CUDA:
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.set_allocator("torch")


# ------------------------------------------------- CPU: bookkeeping of graph-owned memory

class _Recorder:
    def __init__(self):
        self.inside, self.outside = [], []

    def memory(self, foreign=False):
        return allocators.GraphMemory("dev", "capture-stream", foreign=foreign,
                             free_in_capture=lambda p, s: self.inside.append((p, s)),
                             free_outside=lambda p, s: self.outside.append((p, s)))


def test_graph_memory_free_during_capture_is_a_free_node():
    r = _Recorder()
    m = r.memory()
    m.track(0x100, 64)
    m.track(0x200, 64)
    m.release(0x100)
    assert r.inside == [(0x100, "capture-stream")] and r.outside == []
    assert set(m.live) == {0x200}
    m.end_capture(ok=True)
    assert m.escaped_bytes == 64


def test_graph_memory_escaped_allocation_never_launched_is_never_freed():
    r = _Recorder()
    m = r.memory()
    m.track(0x100, 64)
    m.end_capture(ok=True)
    m.release(0x100)              # the address was never backed: nothing to free
    assert r.inside == [] and r.outside == []


def test_graph_memory_escaped_allocation_freed_after_last_launch_and_after_relaunches():
    r = _Recorder()
    m = r.memory()
    m.track(0x100, 64)
    m.track(0x200, 32)
    m.end_capture(ok=True)
    m.after_launch("s1")
    assert m.outstanding == {0x100, 0x200} and r.outside == []
    m.release(0x100)              # owner died: free the instance the last launch made, on its stream
    assert r.outside == [(0x100, "s1")]
    m.after_launch("s2")          # the launch re-made it: nobody owns it, free it behind the launch
    assert r.outside == [(0x100, "s1"), (0x100, "s2")]
    assert m.outstanding == {0x200}
    m.release(0x200)
    assert r.outside[-1] == (0x200, "s2")
    m.release(0x200)              # idempotent
    assert len(r.outside) == 3


def test_graph_memory_failed_capture_frees_nothing():
    r = _Recorder()
    m = r.memory()
    m.track(0x100, 64)
    m.end_capture(ok=False)
    m.release(0x100)
    assert r.inside == [] and r.outside == [] and not m.live


def test_graph_memory_of_a_foreign_capture_frees_on_its_stream():
    r = _Recorder()
    m = r.memory(foreign=True)
    m.track(0x100, 64)
    m.release(0x100)
    assert r.inside == [(0x100, "capture-stream")]


def test_allocator_module_does_not_import_frameworks(tmp_path):
    import subprocess
    import sys
    code = (
        "import sys, tapegrad as tg\n"
        "from tapegrad.cuda import allocators\n"
        "tg.ScopedAllocator; tg.set_allocator\n"
        "allocators.resolve_allocator('torch'); allocators.resolve_allocator('async')\n"
        "try:\n    tg.set_allocator('torch', device='cpu')\nexcept RuntimeError:\n    pass\n"
        "assert 'cupy' not in sys.modules, 'cupy was imported'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('clean')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "clean" in out.stdout


# ------------------------------------------------------------------------------- CUDA

@cuda
def test_async_allocator_round_trip_and_owner_type():
    dev = tg.get_device("cuda:0")
    data = np.arange(1000, dtype=np.float32)
    with tg.ScopedAllocator("async", device=dev) as alloc:
        assert alloc.name == "async"
        assert allocators.current_allocator(dev).name == "async"
        a = tg.array(data, device=dev)
        z = tg.zeros(1000, device=dev)
    assert allocators.current_allocator(dev).name == "cupy"
    assert type(a.owner).__name__ == "_AsyncBlock"
    np.testing.assert_array_equal(a.numpy(), data)
    np.testing.assert_array_equal(z.numpy(), np.zeros(1000, np.float32))
    del a
    gc.collect()
    # the freed block goes back to the stream-ordered pool and is reusable on the same stream
    with tg.ScopedAllocator("async", device=dev):
        b = tg.zeros(1000, device=dev)
    assert b.ptr != 0
    np.testing.assert_array_equal(b.numpy(), np.zeros(1000, np.float32))


@cuda
def test_set_allocator_switches_and_resets():
    dev = tg.get_device("cuda:0")
    try:
        tg.set_allocator("async", device=dev)
        assert allocators.current_allocator(dev).name == "async"
        a = tg.zeros(16, device=dev)
        assert type(a.owner).__name__ == "_AsyncBlock"
        tg.set_allocator("cupy", device=dev)
        b = tg.zeros(16, device=dev)
        assert type(b.owner).__name__ != "_AsyncBlock"
    finally:
        tg.set_allocator(None, device=dev)
    assert allocators.current_allocator(dev).name == "cupy"


@cuda
def test_custom_allocator_object_is_used():
    import cupy
    dev = tg.get_device("cuda:0")
    calls = []

    class Counting:
        def alloc(self, device, nbytes):
            calls.append(nbytes)
            with cupy.cuda.Device(device.ordinal):
                return cupy.cuda.alloc(nbytes)

    with tg.ScopedAllocator(Counting(), device=dev):
        a = tg.zeros(10, dtype=tg.float64, device=dev)
    assert calls == [80]
    np.testing.assert_array_equal(a.numpy(), np.zeros(10))


@cuda
@pytest.mark.torch
def test_torch_allocator_memory_shows_in_torch_and_is_released():
    import torch
    dev = tg.get_device("cuda:0")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(0)
    nbytes = 4 << 20
    with tg.ScopedAllocator("torch", device=dev):
        a = tg.zeros(nbytes // 4, dtype=tg.float32, device=dev)
    assert type(a.owner).__name__ == "TorchBlock"
    assert torch.cuda.memory_allocated(0) - before >= nbytes
    np.testing.assert_array_equal(a.numpy()[:8], np.zeros(8, np.float32))
    tg.synchronize()
    del a
    gc.collect()
    assert torch.cuda.memory_allocated(0) == before


@cuda
@pytest.mark.torch
def test_set_allocator_torch_checks_torch():
    import torch
    dev = tg.get_device("cuda:0")
    try:
        tg.set_allocator("torch", device=dev)
        assert allocators.current_allocator(dev).name == "torch"
        t0 = torch.cuda.memory_allocated(0)
        a = tg.ones(1024, device=dev)
        assert torch.cuda.memory_allocated(0) > t0
        assert float(a.numpy()[3]) == 1.0
    finally:
        tg.set_allocator(None, device=dev)
