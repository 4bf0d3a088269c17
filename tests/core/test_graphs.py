"""CUDA graph capture (R14, R25): ScopedCapture / capture_begin / capture_end / capture_launch,
allocation inside a capture, a captured tape.backward(), joining torch.cuda.graph, and the
errors on the CPU and without a GPU."""
import functools
import gc
import importlib
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.cuda import graph as cuda_graph

HAS_CUDA = tg.is_cuda_available()
cuda = pytest.mark.cuda
N = 1024
DEV = "cuda:0"


@functools.lru_cache(maxsize=None)
def kernels():
    """The test kernels, defined on first use (CPU tests never need the compiler)."""

    @tg.kernel
    def inc(a: tg.array[float]):
        i = tg.tid()
        a[i] = a[i] + 1.0

    @tg.kernel
    def add_into(a: tg.array[float], b: tg.array[float]):
        i = tg.tid()
        a[i] = a[i] + b[i]

    @tg.kernel
    def scale(a: tg.array[float], s: float):
        i = tg.tid()
        a[i] = a[i] * s

    @tg.kernel
    def double(x: tg.array[float], y: tg.array[float]):
        i = tg.tid()
        y[i] = 2.0 * x[i]

    @tg.kernel
    def sum_squares(x: tg.array[float], loss: tg.array[float]):
        i = tg.tid()
        tg.atomic_add(loss, 0, x[i] * x[i])

    class K:
        pass

    k = K()
    k.inc, k.add_into, k.scale, k.double, k.sum_squares = inc, add_into, scale, double, sum_squares
    return k


def _warm(*pairs):
    """Launch each (kernel, args) once outside any capture, then undo nothing (callers reset)."""
    for k, args in pairs:
        tg.launch(k, dim=N, inputs=args, device=DEV)
    tg.synchronize()


def _warm_zeros(k):
    """A zeroed array of N floats on which ``k.inc`` has been loaded (run once, then reset)."""
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]))
    a.zero_()
    tg.synchronize()
    return a


def _value(a, i=0):
    return float(a.numpy()[i])


# ------------------------------------------------------------------------------- CPU

def test_capture_on_cpu_records_instead_of_failing():
    # Warp 1.19 captures CPU launches (tests/core/test_cpu_capture.py has the behaviour)
    with tg.ScopedCapture(device="cpu") as cap:
        pass
    assert isinstance(cap.graph, tg.cpu_capture.CpuGraph) and cap.graph.ops == ()
    with pytest.raises(RuntimeError, match="capture_end: graph capture is not active on the CPU"):
        tg.capture_end(device="cpu")


def test_scoped_capture_without_gpu_captures_the_cpu():
    if HAS_CUDA:
        pytest.skip("this machine has a GPU")
    with tg.ScopedCapture() as cap:      # the current device is the CPU
        pass
    assert isinstance(cap.graph, tg.cpu_capture.CpuGraph)


def test_capture_launch_rejects_non_graphs():
    with pytest.raises(TypeError, match="external capture"):
        tg.capture_launch(None)
    with pytest.raises(TypeError, match="expected a tapegrad Graph"):
        tg.capture_launch("graph")


def test_scoped_capture_argument_validation():
    with pytest.raises(TypeError, match="stream must be a tapegrad Stream"):
        tg.ScopedCapture(stream=123)
    with pytest.raises(ValueError, match="capture_mode"):
        tg.ScopedCapture(capture_mode="bogus")
    with pytest.raises(ValueError, match="capture_mode"):
        tg.ScopedCapture(capture_mode=7)
    with pytest.raises(TypeError, match="capture_mode"):
        tg.ScopedCapture(capture_mode=True)
    with pytest.raises(TypeError, match="stream must be a tapegrad Stream"):
        tg.capture_begin(stream="s")
    for mode, value in (("thread_local", 1), ("global", 0), ("relaxed", 2), (1, 1)):
        assert cuda_graph._parse_mode(mode) == value


def test_scoped_capture_is_not_active_before_entry():
    c = tg.ScopedCapture(device="cpu")
    assert c.graph is None and c.active is False
    c.__exit__(None, None, None)  # exiting a scope that never began is a no-op


def test_is_capturing_on_cpu_follows_the_cpu_capture():
    assert cuda_graph.is_capturing(device="cpu") is False
    tg.capture_begin(device="cpu")
    try:
        assert cuda_graph.is_capturing(device="cpu") is True
    finally:
        tg.capture_end(device="cpu")


def test_importing_graph_support_does_not_import_cupy_or_torch():
    code = (
        "import sys, tapegrad as tg\n"
        "import tapegrad.cuda.graph, tapegrad.cuda.allocators\n"
        "tg.ScopedCapture; tg.capture_begin; tg.capture_end; tg.capture_launch; tg.ScopedAllocator\n"
        "try:\n"
        "    with tg.ScopedCapture(device='cpu'):\n"
        "        pass\n"
        "except RuntimeError:\n"
        "    pass\n"
        "assert 'cupy' not in sys.modules, 'cupy was imported'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('clean')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "clean" in out.stdout


# ------------------------------------------------------------------------------ CUDA

@cuda
def test_capture_records_without_running_and_replays():
    k = kernels()
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]))
    a.zero_()
    with tg.ScopedCapture() as capture:
        tg.launch(k.inc, dim=N, inputs=[a])
    assert isinstance(capture.graph, cuda_graph.Graph)
    assert _value(a) == 0.0, "capturing must not run the kernel"
    for _ in range(3):
        tg.capture_launch(capture.graph)
    tg.synchronize()
    np.testing.assert_array_equal(a.numpy(), np.full(N, 3.0, np.float32))
    assert capture.graph.launches == 3


@cuda
def test_kernel_never_launched_is_loaded_before_the_capture():
    @tg.kernel
    def fresh(a: tg.array[float]):
        i = tg.tid()
        a[i] = a[i] + 5.0

    a = tg.zeros(N, device=DEV)
    with tg.ScopedCapture() as capture:      # force_module_load finds `fresh` in this frame
        tg.launch(fresh, dim=N, inputs=[a])
    assert _value(a) == 0.0
    tg.capture_launch(capture.graph)
    tg.synchronize()
    assert _value(a, 7) == 5.0


@cuda
def test_kernel_first_compiled_and_loaded_inside_a_capture():
    def make():
        @tg.kernel
        def hidden(a: tg.array[float]):
            i = tg.tid()
            a[i] = a[i] + 7.0
        return hidden

    box = {"k": make()}                      # not visible to force_module_load
    a = tg.zeros(N, device=DEV)
    with tg.ScopedCapture() as capture:      # compiled (host) and loaded at its first launch
        tg.launch(box["k"], dim=N, inputs=[a])
    assert _value(a) == 0.0
    tg.capture_launch(capture.graph)
    tg.synchronize()
    assert _value(a, 7) == 7.0


@cuda
def test_capture_begin_end_and_launch_on_a_stream():
    k = kernels()
    dev = tg.get_device(DEV)
    s = tg.Stream(dev)
    a = _warm_zeros(k)
    with tg.ScopedStream(s):
        tg.capture_begin()
        assert cuda_graph.is_capturing()
        tg.launch(k.inc, dim=N, inputs=[a])
        graph = tg.capture_end()
        assert not cuda_graph.is_capturing()
    tg.capture_launch(graph, stream=s)
    tg.capture_launch(graph, stream=s)
    tg.synchronize_stream(s)
    assert _value(a) == 2.0


@cuda
def test_scoped_capture_with_stream_makes_it_current():
    k = kernels()
    dev = tg.get_device(DEV)
    s = tg.Stream(dev)
    a = _warm_zeros(k)
    before = dev.stream
    with tg.ScopedCapture(stream=s) as capture:
        assert dev.stream is s
        tg.launch(k.inc, dim=N, inputs=[a])
    assert dev.stream is before
    tg.capture_launch(capture.graph, stream=s)
    tg.synchronize()
    assert _value(a) == 1.0


@cuda
@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_capture_modes(mode):
    k = kernels()
    a = tg.zeros(N, device=DEV)
    _warm((k.scale, [a, 2.0]))
    a.fill_(1.0)
    with tg.ScopedCapture(capture_mode=mode) as capture:
        tg.launch(k.scale, dim=N, inputs=[a, 2.0])
    tg.capture_launch(capture.graph)
    tg.capture_launch(capture.graph)
    tg.synchronize()
    assert _value(a, 5) == 4.0


@cuda
def test_nested_capture_and_end_without_begin_are_errors():
    with pytest.raises(RuntimeError, match="not active"):
        tg.capture_end(device=DEV)
    with tg.ScopedCapture():
        with pytest.raises(RuntimeError, match="already in progress"):
            tg.capture_begin(device=DEV)
    assert not cuda_graph.is_capturing(device=DEV)


@cuda
def test_illegal_call_inside_capture_fails_cleanly_and_stream_recovers():
    k = kernels()
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]))
    with pytest.raises(RuntimeError):
        with tg.ScopedCapture():
            tg.launch(k.inc, dim=N, inputs=[a])
            tg.synchronize_stream()        # synchronising a capturing stream is not capturable
    assert not cuda_graph.is_capturing(device=DEV)
    a.zero_()
    with tg.ScopedCapture() as capture:   # the stream can be captured again
        tg.launch(k.inc, dim=N, inputs=[a])
    tg.capture_launch(capture.graph)
    tg.synchronize()
    assert _value(a) == 1.0


@cuda
def test_exception_in_block_discards_the_capture():
    k = kernels()
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]))
    with pytest.raises(KeyError):
        with tg.ScopedCapture() as capture:
            tg.launch(k.inc, dim=N, inputs=[a])
            raise KeyError("boom")
    assert capture.graph is None
    assert not cuda_graph.is_capturing(device=DEV)


@cuda
def test_destroyed_graph_cannot_be_launched():
    k = kernels()
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]))
    with tg.ScopedCapture() as capture:
        tg.launch(k.inc, dim=N, inputs=[a])
    capture.graph.destroy()
    with pytest.raises(RuntimeError, match="destroyed"):
        tg.capture_launch(capture.graph)


@cuda
def test_capture_launch_on_another_device_is_an_error():
    if tg.get_cuda_device_count() < 2:
        pytest.skip("needs 2 GPUs")
    k = kernels()
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]))
    with tg.ScopedCapture() as capture:
        tg.launch(k.inc, dim=N, inputs=[a])
    with pytest.raises(RuntimeError, match="captured on cuda:0"):
        tg.capture_launch(capture.graph, stream=tg.get_stream("cuda:1"))


@cuda
def test_allocation_inside_capture_is_graph_memory_and_is_freed():
    k = kernels()
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]), (k.add_into, [a, a]))
    a.zero_()
    tg.synchronize()
    gc.collect()
    base = cuda_graph.graph_memory_in_use(DEV)
    with tg.ScopedCapture() as capture:
        tmp = tg.zeros(N, device=DEV)          # allocated and freed inside the graph
        tg.launch(k.inc, dim=N, inputs=[tmp])
        tg.launch(k.add_into, dim=N, inputs=[a, tmp])
        del tmp
        out = tg.zeros(N, device=DEV)          # outlives the capture: the graph's result buffer
        tg.launch(k.inc, dim=N, inputs=[out])
    graph = capture.graph
    assert graph.allocates
    tg.synchronize()
    assert cuda_graph.graph_memory_in_use(DEV) == base, "nothing is backed before the first launch"
    tg.capture_launch(graph)
    tg.capture_launch(graph)                   # relaunch while `out` is alive (auto-free on launch)
    tg.synchronize()
    assert cuda_graph.graph_memory_in_use(DEV) > base
    assert _value(a, 3) == 2.0
    assert _value(out, 3) == 1.0               # zeroed and incremented by every launch
    del out
    gc.collect()
    tg.synchronize()
    # allocations freed inside the graph stay associated with it (CUDA reserves them for the
    # next launch) until the graph is destroyed; what must not happen is growth per launch
    in_use = cuda_graph.graph_memory_in_use(DEV)
    tg.capture_launch(graph)                   # still launchable; the unowned buffer is freed behind it
    tg.synchronize()
    assert cuda_graph.graph_memory_in_use(DEV) <= in_use
    assert _value(a, 3) == 3.0
    del graph, capture
    gc.collect()
    tg.synchronize()
    after_one = cuda_graph.graph_memory_in_use(DEV)
    # destroying graphs gives their memory back to the driver's graph pool (which keeps a
    # granule reserved): capturing, launching and dropping more graphs must not grow it
    for _ in range(3):
        with tg.ScopedCapture() as cap:
            tmp = tg.zeros(N, device=DEV)
            tg.launch(k.add_into, dim=N, inputs=[a, tmp])
            del tmp
            res = tg.zeros(N, device=DEV)
            tg.launch(k.inc, dim=N, inputs=[res])
        tg.capture_launch(cap.graph)
        tg.synchronize()
        del res, cap
        gc.collect()
        tg.synchronize()
    assert cuda_graph.graph_memory_in_use(DEV) <= after_one


@cuda
def test_graph_result_buffer_outlives_the_graph():
    k = kernels()
    _warm((k.inc, [tg.zeros(N, device=DEV)]))
    gc.collect()
    base = cuda_graph.graph_memory_in_use(DEV)
    with tg.ScopedCapture() as capture:
        out = tg.zeros(N, device=DEV)
        tg.launch(k.inc, dim=N, inputs=[out])
    tg.capture_launch(capture.graph)
    capture.graph.destroy()
    del capture
    gc.collect()
    tg.synchronize()
    assert _value(out, 1) == 1.0               # still valid after the graph is gone
    del out
    gc.collect()
    tg.synchronize()
    assert cuda_graph.graph_memory_in_use(DEV) == base


@cuda
def test_captured_backward_accumulates_per_replay():
    k = kernels()
    x = tg.array(np.arange(N, dtype=np.float32), device=DEV, requires_grad=True)
    y = tg.zeros(N, device=DEV, requires_grad=True)
    seed = tg.array(np.ones(N, np.float32), device=DEV)
    tape = tg.Tape()
    with tape:
        tg.launch(k.double, dim=N, inputs=[x], outputs=[y])
    tape.backward(grads={y: seed})             # once outside: loads the adjoint kernel
    tape.zero()
    tg.synchronize()
    with tg.ScopedCapture() as capture:
        tape.backward(grads={y: seed})         # allocates nothing: y owns its gradient
    assert _value(x.grad) == 0.0
    tg.capture_launch(capture.graph)
    tg.synchronize()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(N, 2.0, np.float32))
    tg.capture_launch(capture.graph)
    tg.synchronize()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(N, 4.0, np.float32))
    np.testing.assert_array_equal(seed.numpy(), np.ones(N, np.float32))


@cuda
def test_captured_backward_from_a_loss():
    k = kernels()
    x = tg.array(np.full(N, 3.0, np.float32), device=DEV, requires_grad=True)
    loss = tg.zeros(1, device=DEV, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k.sum_squares, dim=N, inputs=[x], outputs=[loss])
    tape.backward(loss=loss)
    tape.zero()
    tg.synchronize()
    with tg.ScopedCapture() as capture:
        tape.backward(loss=loss)
    tg.capture_launch(capture.graph)
    tg.capture_launch(capture.graph)
    tg.synchronize()
    np.testing.assert_allclose(x.grad.numpy(), np.full(N, 12.0, np.float32))


@cuda
@pytest.mark.torch
def test_external_capture_inside_torch_cuda_graph():
    import torch

    # the torch bridge registers torch's allocator (its private graph pool inside torch's captures);
    # this test must not depend on another test having loaded the bridge first
    importlib.import_module("tapegrad.bridges.torch")
    k = kernels()
    dev = tg.get_device(DEV)
    a = tg.zeros(N, device=DEV)
    _warm((k.inc, [a]), (k.add_into, [a, a]))
    a.zero_()
    tg.synchronize()
    side = torch.cuda.Stream(device=0)
    ts = tg.Stream(dev, cuda_stream=side.cuda_stream, owner=side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        with tg.ScopedStream(ts, sync_enter=False):
            with tg.ScopedCapture(external=True) as capture:
                tg.launch(k.inc, dim=N, inputs=[a])
                tmp = tg.zeros(N, device=DEV)   # from torch's private graph pool
                tg.launch(k.inc, dim=N, inputs=[tmp])
                tg.launch(k.add_into, dim=N, inputs=[a, tmp])
    assert capture.graph is None
    assert type(tmp.owner).__name__ == "TorchBlock"
    assert _value(a) == 0.0
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    assert _value(a, 9) == 4.0
    del g


@cuda
@pytest.mark.torch
def test_external_capture_requires_a_capturing_stream():
    with pytest.raises(RuntimeError, match="not capturing"):
        with tg.ScopedCapture(device=DEV, external=True):
            pass


@cuda
@pytest.mark.torch
def test_torch_and_tapegrad_on_one_stream_both_directions():
    import torch
    k = kernels()
    dev = tg.get_device(DEV)
    # 1) a torch stream used by tapegrad, captured by tapegrad
    torch_stream = torch.cuda.Stream(device=0)
    tg_stream = tg.Stream(dev, cuda_stream=torch_stream.cuda_stream, owner=torch_stream)
    a = tg.ones(N, device=DEV)
    _warm((k.scale, [a, 1.0]))
    with tg.ScopedStream(tg_stream):
        with tg.ScopedCapture() as capture:
            tg.launch(k.scale, dim=N, inputs=[a, 2.0])
    tg.capture_launch(capture.graph, stream=tg_stream)
    tg.synchronize_stream(tg_stream)
    assert _value(a, 123) == 2.0
    tg.capture_launch(capture.graph, stream=tg_stream)
    tg.synchronize()
    assert _value(a) == 4.0
    # 2) tapegrad's stream used by torch: torch work inside tapegrad's graph
    b = tg.ones(N, device=DEV)
    tb = torch.as_tensor(b, device="cuda:0")
    tg.synchronize()
    ts = torch.cuda.ExternalStream(tg.get_stream(DEV).cuda_stream, device="cuda:0")
    with tg.ScopedDevice(DEV), torch.cuda.stream(ts):
        with tg.ScopedCapture() as capture:
            tg.launch(k.scale, dim=N, inputs=[b, 3.0])
            tb.add_(1.0)
    tg.capture_launch(capture.graph)
    tg.synchronize()
    assert _value(b, 5) == 4.0
