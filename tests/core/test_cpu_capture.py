"""Issue 15, item 4: graph capture on the CPU records the block's launches and memory
operations and replays them, as Warp 1.19 does (its CPU behaviour checked side by side)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.cpu_capture import CpuGraph


@tg.kernel
def inc(a: tg.array(dtype=float)):
    a[tg.tid()] += 1.0


@tg.kernel
def axpy(x: tg.array(dtype=float), y: tg.array(dtype=float), alpha: float):
    i = tg.tid()
    y[i] = alpha * x[i] + y[i]


@tg.kernel
def scale(x: tg.array(dtype=float), y: tg.array(dtype=float), alpha: float):
    i = tg.tid()
    y[i] = alpha * x[i]


def test_scoped_capture_records_and_replays():
    a = tg.zeros(3, device="cpu")
    with tg.ScopedCapture(device="cpu") as cap:
        tg.launch(inc, dim=3, inputs=[a], device="cpu")
        tg.copy(a, a)
    assert a.numpy().tolist() == [0.0] * 3            # recorded, not run (Warp: the same)
    assert isinstance(cap.graph, CpuGraph) and len(cap.graph.ops) == 2
    tg.capture_launch(cap.graph)
    assert a.numpy().tolist() == [1.0] * 3
    for _ in range(3):
        tg.capture_launch(cap.graph)
    assert a.numpy().tolist() == [4.0] * 3 and cap.graph.launches == 4


def test_begin_end_and_memory_ops_order():
    x = tg.array(np.arange(3, dtype=np.float32))
    y = tg.zeros(3)
    b = tg.zeros(3)
    tg.capture_begin(device="cpu")
    try:
        c = tg.zeros(3)                                # allocations happen at once (zero-filled)
        tg.launch(axpy, dim=3, inputs=[x, y, 2.0])
        c.fill_(5.0)
        tg.copy(b, c)
        y.zero_()
        tg.launch(axpy, dim=3, inputs=[x, y, 10.0])    # scalars are captured by value
        inside = y.numpy().copy()
    finally:
        g = tg.capture_end(device="cpu")
    assert inside.tolist() == [0.0] * 3 and b.numpy().tolist() == [0.0] * 3 and c.numpy().tolist() == [0.0] * 3
    g.launch()
    assert y.numpy().tolist() == [0.0, 10.0, 20.0] and b.numpy().tolist() == [5.0] * 3


def test_replay_sees_new_values_of_the_same_arrays():
    x = tg.array(np.ones(2, np.float32))
    y = tg.zeros(2)
    with tg.ScopedCapture(device="cpu") as cap:
        tg.launch(axpy, dim=2, inputs=[x, y, 1.0])
    x.numpy()[:] = [3.0, 4.0]                          # the graph holds pointers, like CUDA graphs
    tg.capture_launch(cap.graph)
    assert y.numpy().tolist() == [3.0, 4.0]


def test_captured_arrays_stay_alive_with_the_graph():
    with tg.ScopedCapture(device="cpu") as cap:
        tmp = tg.zeros(4)
        tg.launch(inc, dim=4, inputs=[tmp])
        keep = tmp
    del tmp
    tg.capture_launch(cap.graph)
    assert keep.numpy().tolist() == [1.0] * 4


def test_a_tape_inside_a_cpu_capture_records_a_replayable_backward():
    x = tg.array(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = tg.zeros(2, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(scale, dim=2, inputs=[x, y, 3.0])
    with tg.ScopedCapture(device="cpu") as cap:
        tape.backward(grads={y: np.ones(2, np.float32)})
    assert x.grad.numpy().tolist() == [0.0, 0.0]
    tg.capture_launch(cap.graph)
    assert x.grad.numpy().tolist() == [3.0, 3.0]
    tg.capture_launch(cap.graph)                        # gradients accumulate, as eager backward
    assert x.grad.numpy().tolist() == [6.0, 6.0]


def test_a_captured_tape_zero_zeroes_at_every_replay():
    """``tape.zero()`` inside a CPU capture is replayed: its native batched memset ran only while
    capturing, so each replay of ``zero(); backward()`` added to the last (x.grad 3x, then 6x...)."""
    x = tg.array(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = tg.zeros(2, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(scale, dim=2, inputs=[x, y, 3.0])
    tape.backward(grads={y: np.ones(2, np.float32)})      # the zero plan exists before capturing
    with tg.ScopedCapture(device="cpu") as cap:
        tape.zero()
        tape.backward(grads={y: np.ones(2, np.float32)})
    for _ in range(3):
        x.grad.fill_(7.0)
        tg.capture_launch(cap.graph)
        assert x.grad.numpy().tolist() == [3.0, 3.0]


def test_graph_launched_inside_another_capture_is_recorded():
    a = tg.zeros(1)
    with tg.ScopedCapture(device="cpu") as inner:
        tg.launch(inc, dim=1, inputs=[a])
    with tg.ScopedCapture(device="cpu") as outer:
        tg.capture_launch(inner.graph)
        tg.capture_launch(inner.graph)
    assert a.numpy()[0] == 0.0
    tg.capture_launch(outer.graph)
    assert a.numpy()[0] == 2.0


def test_cpu_capture_is_per_thread():
    a = tg.zeros(1)
    seen = []
    with tg.ScopedCapture(device="cpu"):
        t = threading.Thread(target=lambda: (tg.launch(inc, dim=1, inputs=[a]), seen.append(float(a.numpy()[0]))))
        t.start()
        t.join()
    assert seen == [1.0]                                # the other thread's launch ran at once


def test_errors():
    tg.capture_begin(device="cpu")
    try:
        with pytest.raises(RuntimeError, match="already in progress on the CPU"):
            tg.capture_begin(device="cpu")
    finally:
        tg.capture_end(device="cpu")
    with pytest.raises(RuntimeError, match="not active on the CPU"):
        tg.capture_end(device="cpu")
    with pytest.raises(RuntimeError, match=r"external=True.*CPU"):
        tg.capture_begin(device="cpu", external=True)
    with pytest.raises(ValueError, match="capture_mode"):
        tg.capture_begin(device="cpu", capture_mode="bogus")
    with tg.ScopedCapture(device="cpu") as cap:
        pass
    with pytest.raises(TypeError, match="CPU graph takes no stream"):
        tg.capture_launch(cap.graph, stream=3)


def test_a_block_that_raises_discards_the_capture():
    a = tg.zeros(1)
    with pytest.raises(ZeroDivisionError):
        with tg.ScopedCapture(device="cpu") as cap:
            tg.launch(inc, dim=1, inputs=[a])
            1 / 0
    assert cap.graph is None and not tg.cuda.graph.is_capturing(device="cpu")
    tg.launch(inc, dim=1, inputs=[a])                   # eager again
    assert a.numpy()[0] == 1.0


def test_force_module_load_compiles_before_capturing():
    @tg.kernel
    def fresh(a: tg.array(dtype=float)):
        a[tg.tid()] = 7.0

    assert not fresh._modules
    with tg.ScopedCapture(device="cpu") as cap:
        assert fresh._modules                           # loaded when the capture began
        a = tg.zeros(2)
        tg.launch(fresh, dim=2, inputs=[a])
    tg.capture_launch(cap.graph)
    assert a.numpy().tolist() == [7.0, 7.0]


def test_the_same_capture_code_runs_on_either_device(device):
    """Code written for capture (Warp's idiom) runs unchanged on the CPU and on CUDA."""
    x = tg.array(np.arange(4, dtype=np.float32), device=device)
    y = tg.zeros(4, device=device)
    tg.launch(axpy, dim=4, inputs=[x, y, 1.0], device=device)   # loaded before capturing
    with tg.ScopedCapture(device=device) as cap:
        tg.launch(axpy, dim=4, inputs=[x, y, 1.0], device=device)
    for _ in range(3):
        tg.capture_launch(cap.graph)
    assert y.numpy().tolist() == [0.0, 4.0, 8.0, 12.0]
