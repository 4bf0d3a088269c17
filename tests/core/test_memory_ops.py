"""memory_ops: fill, zero, copy and accumulate on every device, contiguous and strided, against
NumPy; the copy record's adjoint (through accumulate) on offsets and reshapes."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory_ops
from tapegrad.recording import CopyRecord


def _arr(values, device, **kw):
    return tg.array(np.asarray(values, np.float32), device=device, **kw)


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_fill_and_zero_match_numpy(device, strided):
    base = _arr(np.arange(24.0).reshape(4, 6), device)
    a = base[:, ::2] if strided else base
    assert a.is_contiguous is (not strided)
    memory_ops.fill(a, 2.5)
    want = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    (want[:, ::2] if strided else want)[...] = 2.5
    np.testing.assert_array_equal(base.numpy(), want)
    memory_ops.zero(a)
    (want[:, ::2] if strided else want)[...] = 0
    np.testing.assert_array_equal(base.numpy(), want)


def test_fill_takes_a_vector_value(device):
    a = tg.zeros(3, dtype=tg.vec3, device=device)
    memory_ops.fill(a, (1.0, 2.0, 3.0))
    np.testing.assert_array_equal(a.numpy(), np.tile([1.0, 2.0, 3.0], (3, 1)))


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_copy_between_devices(device, strided):
    src_np = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    src = _arr(src_np, "cpu")
    dest_base = tg.zeros((3, 8), device=device)
    dest = dest_base[:, ::2] if strided else dest_base[:, :4]
    memory_ops.copy(dest, src)
    np.testing.assert_array_equal(dest.numpy(), src_np)
    back = tg.zeros((3, 4), device="cpu")
    memory_ops.copy(back, dest)                    # device -> host is visible on return
    np.testing.assert_array_equal(back.numpy(), src_np)


def test_copy_of_nothing_is_a_no_op(device):
    memory_ops.copy(tg.zeros(0, device=device), tg.zeros(0, device=device))


def test_accumulate_adds_and_moves_the_source(device):
    dest = _arr([1.0, 2.0, 3.0], device)
    memory_ops.accumulate(dest, _arr([10.0, 20.0, 30.0], "cpu"))
    np.testing.assert_array_equal(dest.numpy(), [11.0, 22.0, 33.0])
    host = _arr([1.0, 1.0, 1.0], "cpu")
    memory_ops.accumulate(host, dest)                # the other way: the source comes to the host
    np.testing.assert_array_equal(host.numpy(), [12.0, 23.0, 34.0])


def test_copy_record_replay_accumulates_the_range(device):
    src = _arr(np.zeros(6), device, requires_grad=True)
    dest = _arr(np.zeros(4), device, requires_grad=True)
    dest.grad.assign(np.array([1.0, 2.0, 3.0, 4.0], np.float32))
    rec = CopyRecord(dest, src, dest_offset=1, src_offset=2, count=2)
    assert [a.name for a in rec.accesses()] == ["dest", "src"]
    assert rec.label(7) == "copy #7"
    rec.replay()
    np.testing.assert_array_equal(src.grad.numpy(), [0, 0, 2, 3, 0, 0])   # d(src) += d(dest) over the range
    np.testing.assert_array_equal(dest.grad.numpy(), [1, 0, 0, 4])       # d(dest) consumed there


def test_copy_record_is_frozen():
    a, b = tg.zeros(2), tg.zeros(2)
    rec = CopyRecord(a, b, 0, 0, 0)
    with pytest.raises(AttributeError):
        rec.count = 3


def test_zero_plan_zeroes_host_buffers():
    bufs = [_arr(np.ones(n), "cpu") for n in (1, 7, 64)]
    memory_ops.ZeroPlan([(b.ptr, b.nbytes) for b in bufs]).run()
    assert all(not b.numpy().any() for b in bufs)
