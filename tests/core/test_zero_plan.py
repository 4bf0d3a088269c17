"""BufferZeroPlan: many arrays zeroed by one native call (host) / one launch per device (CUDA)."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory_ops
from tapegrad.cuda import memory as cuda_memory


def _filled(shape, dtype, device, value=7):
    a = tg.full(shape, value, dtype=dtype, device=device)
    return a


def _check_plan(device):
    base = tg.full(1000, 5, dtype=tg.int8, device=device)
    arrays = [
        _filled(256, tg.float32, device),
        _filled((3, 5), tg.vec3, device),
        _filled(1, tg.float64, device),
        base[1:18],            # odd byte offset: unaligned head and tail
        base[300:301],         # a single byte
        base[::2][600 // 2:],  # strided: zeroed on its own path
        _filled(100_003, tg.float32, device),  # larger than one block row
    ]
    arrays.append(arrays[0])   # listed twice: zeroed once
    plan = memory_ops.BufferZeroPlan(arrays)
    plan.run()
    for a in arrays:
        assert not np.any(a.numpy()), a
    b = base.numpy()
    untouched = np.ones(1000, bool)
    untouched[1:18] = False
    untouched[300] = False
    untouched[600::2] = False
    assert (b[untouched] == 5).all()
    # run again after refilling: the plan is reusable
    arrays[0].fill_(3.0)
    plan.run()
    assert not np.any(arrays[0].numpy())


def test_buffer_zero_plan_cpu():
    _check_plan("cpu")


@pytest.mark.cuda
def test_buffer_zero_plan_cuda(device):
    if not device.startswith("cuda"):
        pytest.skip("CUDA only")
    _check_plan(device)


@pytest.mark.cuda
def test_segment_zero_plan_many_rows(device, monkeypatch):
    """More ranges than one launch's grid rows: one launch per block of rows."""
    if not device.startswith("cuda"):
        pytest.skip("CUDA only")
    monkeypatch.setattr(cuda_memory, "_MAX_ROWS", 7)
    base = tg.full(64, 9, dtype=tg.int32, device=device)
    views = [base[i:i + 1] for i in range(0, 60, 2)]
    memory_ops.BufferZeroPlan(views).run()
    want = np.full(64, 9, np.int32)
    want[0:60:2] = 0
    np.testing.assert_array_equal(base.numpy(), want)


@pytest.mark.cuda
def test_tape_zero_cuda_many_grads(device):
    if not device.startswith("cuda"):
        pytest.skip("CUDA only")
    xs = [tg.full(33, 1.0, dtype=tg.float32, device=device, requires_grad=True) for _ in range(101)]
    tape = tg.Tape()
    for x in xs:
        x.grad.fill_(2.0)
        tape.gradients[x] = x.grad
    tape.zero()
    assert all(not np.any(x.grad.numpy()) for x in xs)


def test_tape_zero_follows_gradient_changes():
    """Tape.zero() reuses its plan while nothing that decides the buffers changed, and sees
    every change that does: a grad replaced, dropped, a table entry set or removed."""
    xs = [tg.full(5, 1.0, dtype=tg.float32, requires_grad=True) for _ in range(3)]
    tape = tg.Tape()
    for x in xs:
        tape.gradients[x] = x.grad
    plain = tg.zeros(5, dtype=tg.float32)           # no grad: its table entry is the buffer
    side = tg.full(5, 4.0, dtype=tg.float32)
    tape.gradients[plain] = side
    for x in xs:
        x.grad.fill_(2.0)
    tape.zero()
    assert all(not x.grad.numpy().any() for x in xs) and not side.numpy().any()
    new = tg.full(5, 3.0, dtype=tg.float32)
    xs[0].grad = new                                 # replaced: the new buffer is zeroed
    tape.zero()
    assert not new.numpy().any()
    other = tg.full(5, 5.0, dtype=tg.float32)
    tape.gradients[plain] = other                    # the table's entry replaced
    side.fill_(6.0)
    tape.zero()
    assert not other.numpy().any() and (side.numpy() == 6.0).all()
    del tape.gradients[plain]
    other.fill_(7.0)
    tape.zero()
    assert (other.numpy() == 7.0).all()
    v0 = xs[1].grad.version
    tape.zero()
    assert xs[1].grad.version == v0 + 1              # the reused plan still bumps versions
