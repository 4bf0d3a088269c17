"""The launch hot path's shortcuts stay exact: the count of recording threads
(``recording.tapes_active``), which lets a launch skip the thread-local tape read, and the
descriptor each parameter remembers (``fastlaunch.c``'s ``seen_t``), which lets it skip an
array's dtype and device reads.

A wrong count would leave launches unrecorded (a zero gradient, silently); a wrong remembered
descriptor would launch an array of another dtype, or with a gradient pointer it no longer has.
Each test checks values (gradients, errors), and that the native helper took the launches
(``fastlaunch.stats()``), so the shortcut under test is the one that ran.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import recording
from tapegrad.launch import fastlaunch

L = sys.modules["tapegrad.launch.core"]


@tg.kernel
def k_square(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def k_sum(y: tg.array(dtype=tg.float32), s: tg.array(dtype=tg.float32)):
    i = tg.tid()
    tg.atomic_add(s, 0, y[i])


@tg.kernel
def k_double(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    y[i] = 2.0 * x[i]


@pytest.fixture(autouse=True)
def native_helper():
    # each kernel's first launch on a device (the Python path) registers its module: done here,
    # so a test's count of native launches does not depend on which tests ran before it
    for k in (k_square, k_sum, k_double):
        tg.launch(k, 1, inputs=[tg.zeros(1)], outputs=[tg.zeros(1)])
    if L._fast is None:
        pytest.skip(f"the native launch helper is not loaded: {fastlaunch.error()}")
    assert recording_count() == 0, "a test left a tape active"


def native_launches():
    return fastlaunch.stats(False)[0]


def square_sum_grad(x_np, tape_thread_barrier=None):
    """d/dx sum(x^2) through a tape on the calling thread (2 x)."""
    x = tg.array(x_np, dtype=tg.float32, requires_grad=True)
    y = tg.zeros(len(x_np), requires_grad=True)
    s = tg.zeros(1, requires_grad=True)
    tape = tg.Tape()
    with tape:
        if tape_thread_barrier is not None:
            tape_thread_barrier.wait()
        tg.launch(k_square, len(x_np), inputs=[x], outputs=[y])
        tg.launch(k_sum, len(x_np), inputs=[y], outputs=[s])
        if tape_thread_barrier is not None:
            tape_thread_barrier.wait()
    tape.backward(loss=s)
    return x.grad.numpy()


def recording_count():
    """recording.tapes_active, checked against the copy the native helper reads."""
    assert recording.TAPES_ACTIVE_CELL.value == recording.tapes_active
    return recording.tapes_active


# ------------------------------------------------------------------ the count of recording threads

def test_count_follows_enter_and_exit_and_a_refused_nested_tape():
    outer = tg.Tape()
    with outer:
        assert recording_count() == 1
        with pytest.raises(RuntimeError):
            with tg.Tape():
                pass
        assert recording_count() == 1 and recording.active_tape() is outer
    assert recording_count() == 0 and recording.active_tape() is None


def test_launches_with_no_tape_anywhere_are_native_and_unrecorded():
    x = tg.array(np.arange(4, dtype=np.float32))
    y = tg.zeros(4)
    n0 = native_launches()
    for _ in range(5):
        tg.launch(k_square, 4, inputs=[x], outputs=[y])
    assert native_launches() - n0 == 5
    np.testing.assert_array_equal(y.numpy(), np.arange(4, dtype=np.float32) ** 2)


def test_a_tape_on_another_thread_records_its_launches_exactly_while_this_one_has_none():
    """Two threads: one records under its tape while the other launches with none. The count is
    1 during that, so the tapeless thread reads its own (empty) thread-local: its launches must
    land on no tape, and the recording thread's gradient must be exact."""
    barrier = threading.Barrier(2)
    got = {}

    def worker():
        got["grad"] = square_sum_grad(np.array([1, 2, 3], np.float32), barrier)

    t = threading.Thread(target=worker)
    t.start()
    barrier.wait()              # the worker's tape is active now
    assert recording_count() == 1 and recording.active_tape() is None
    x = tg.array(np.ones(3, np.float32))
    y = tg.zeros(3)
    n0 = native_launches()
    tg.launch(k_square, 3, inputs=[x], outputs=[y])
    assert native_launches() - n0 == 1
    barrier.wait()
    t.join()
    np.testing.assert_allclose(got["grad"], [2, 4, 6])
    assert recording_count() == 0


def test_many_threads_entering_and_leaving_tapes_leave_the_count_at_zero_and_gradients_exact():
    errors = []

    def worker(k):
        try:
            for r in range(20):
                g = square_sum_grad(np.full(3, k + r, np.float32))
                np.testing.assert_allclose(g, np.full(3, 2.0 * (k + r)))
        except Exception as e:  # noqa: BLE001  reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert recording_count() == 0


def test_a_thread_that_ends_inside_a_tape_leaves_the_count_high_and_launches_right():
    """Only slower: the main thread keeps reading its own thread-local, which holds no tape."""
    tape = tg.Tape()

    def worker():
        tape.__enter__()        # never exited: the thread ends recording

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    try:
        assert recording_count() == 1
        np.testing.assert_allclose(square_sum_grad(np.array([3, 4], np.float32)), [6, 8])
        x = tg.array(np.ones(2, np.float32))
        tg.launch(k_square, 2, inputs=[x], outputs=[tg.zeros(2)])
        assert len(tape.launches) == 0   # nothing of this thread landed on the dead thread's tape
    finally:
        with recording._count_lock:     # the dead thread's tape, as if it had exited
            recording.tapes_active -= 1
            recording.TAPES_ACTIVE_CELL.value = recording.tapes_active


# ------------------------------------------------------------------ the remembered descriptor

def test_a_gradient_given_after_a_launch_is_the_one_the_adjoint_writes():
    """The array's descriptor object is replaced when its gradient changes: the parameter's
    remembered one no longer matches, and the new gradient pointer is launched."""
    x = tg.array(np.array([1, 2, 3], np.float32))
    y = tg.zeros(3)
    for _ in range(3):
        tg.launch(k_square, 3, inputs=[x], outputs=[y])   # remembered without a gradient
    x.requires_grad = True
    y.requires_grad = True
    s = tg.zeros(1, requires_grad=True)
    n0 = native_launches()
    tape = tg.Tape()
    with tape:
        tg.launch(k_square, 3, inputs=[x], outputs=[y])
        tg.launch(k_sum, 3, inputs=[y], outputs=[s])
    assert native_launches() - n0 == 2
    tape.backward(loss=s)
    np.testing.assert_allclose(x.grad.numpy(), [2, 4, 6])
    x.grad = tg.zeros(3)        # another gradient array: the next backward writes it
    tape.zero()
    tape.backward(loss=s)
    np.testing.assert_allclose(x.grad.numpy(), [2, 4, 6])


def test_arrays_of_another_dtype_or_ndim_are_refused_between_remembered_ones():
    x = tg.array(np.array([1, 2], np.float32))
    y = tg.zeros(2)
    tg.launch(k_square, 2, inputs=[x], outputs=[y])
    for bad in (tg.array(np.array([1, 2], np.float64)), tg.array(np.array([1, 2], np.int32)),
                tg.zeros((2, 1)), x.view(tg.int32)):
        with pytest.raises(TypeError):
            tg.launch(k_square, 2, inputs=[bad], outputs=[y])
        tg.launch(k_square, 2, inputs=[x], outputs=[y])   # the remembered one still launches
    np.testing.assert_array_equal(y.numpy(), [1, 4])


def test_short_lived_arrays_in_one_parameter_launch_their_own_memory():
    """Each new array brings a new descriptor object (the remembered one is held, so its address
    is never reused): every launch reads its own array's values."""
    y = tg.zeros(4)
    n0 = native_launches()
    for k in range(50):
        x = tg.array(np.full(4, k, np.float32))
        tg.launch(k_square, 4, inputs=[x], outputs=[y])
        assert y.numpy()[0] == k * k
        del x
    assert native_launches() - n0 == 50


def test_a_read_only_array_written_is_refused_after_its_writable_twin_was_remembered():
    x = tg.array(np.ones(2, np.float32))
    y = tg.zeros(2)
    tg.launch(k_square, 2, inputs=[x], outputs=[y])
    ro_np = np.zeros(2, np.float32)
    ro_np.flags.writeable = False
    ro = tg.array(ro_np, copy=False)
    with pytest.raises(RuntimeError):
        tg.launch(k_square, 2, inputs=[x], outputs=[ro])
    tg.launch(k_square, 2, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(ro_np, [0, 0])


@pytest.mark.cuda
def test_cuda_the_device_of_a_remembered_array_decides_the_launch():
    xc = tg.array(np.array([1, 2], np.float32), device="cuda:0")
    yc = tg.zeros(2, device="cuda:0")
    for _ in range(3):
        tg.launch(k_square, 2, inputs=[xc], outputs=[yc])
    np.testing.assert_array_equal(yc.numpy(), [1, 4])
    xh = tg.array(np.array([3, 4], np.float32), device="cpu")
    with pytest.raises(RuntimeError):      # a CPU array beside a CUDA one
        tg.launch(k_square, 2, inputs=[xh], outputs=[yc])
    with pytest.raises(RuntimeError):
        tg.launch(k_square, 2, inputs=[xc], outputs=[tg.zeros(2, device="cpu")])
    yh = tg.zeros(2, device="cpu")
    tg.launch(k_square, 2, inputs=[xh], outputs=[yh])   # the same parameters on the CPU
    np.testing.assert_array_equal(yh.numpy(), [9, 16])
    tg.launch(k_square, 2, inputs=[xc], outputs=[yc])
    np.testing.assert_array_equal(yc.numpy(), [1, 4])


# ------------------------------------------------------------------ the remembered launch plan

def test_kernels_alternating_and_a_replaced_plan_launch_their_own_code():
    """The helper remembers the last LaunchPlan object it read: alternating kernels each launch
    their own entry, and a kernel whose plan is replaced (a new object) launches through the new one."""
    x = tg.array(np.array([1, 2, 3], np.float32))
    tg.launch(k_double, 3, inputs=[x], outputs=[tg.zeros(3)])   # its module registered
    f0 = native_launches()
    for _ in range(3):
        ys, yd = tg.zeros(3), tg.zeros(3)
        tg.launch(k_square, 3, inputs=[x], outputs=[ys])
        tg.launch(k_double, 3, inputs=[x], outputs=[yd])
        np.testing.assert_array_equal(ys.numpy(), [1, 4, 9])
        np.testing.assert_array_equal(yd.numpy(), [2, 4, 6])
    assert native_launches() - f0 == 6
    old = k_double.launch_plan
    k_double.launch_plan = None          # the next launch builds a new plan (the Python path)
    yd = tg.zeros(3)
    tg.launch(k_double, 3, inputs=[x], outputs=[yd])
    assert k_double.launch_plan is not old and k_double.launch_plan.native is not old.native
    del old                              # the helper's reference alone keeps the old plan now
    f1 = native_launches()
    for _ in range(2):
        yd = tg.zeros(3)
        tg.launch(k_double, 3, inputs=[x], outputs=[yd])
        np.testing.assert_array_equal(yd.numpy(), [2, 4, 6])
    assert native_launches() - f1 == 2
