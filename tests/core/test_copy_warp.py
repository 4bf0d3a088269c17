"""Issue 28: ``tg.copy`` as Warp's ``wp.copy`` (the cases recorded from Warp 1.19): count 0 copies
all of ``src`` into a ``dest`` that may be larger (flat, row-major, strided 1-D views too), ranges
past either end and negative or non-integer offsets raise errors that are also Warp's
``RuntimeError`` with Warp's wording, and the adjoint of a copy into a larger array reaches only
the copied range."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import CopyArgumentError, CopyTypeError


def _f(*v):
    return tg.array(np.array(v, dtype=np.float32), dtype=float)


def test_count_zero_copies_all_of_src_into_a_larger_dest():
    d = tg.full(4, 9.0, dtype=float)
    tg.copy(d, _f(1, 2))
    assert d.numpy().tolist() == [1, 2, 9, 9]
    d = tg.full((2, 3), 9.0, dtype=float)
    tg.copy(d, _f(1, 2, 3, 4))
    assert d.numpy().tolist() == [[1, 2, 3], [4, 9, 9]]
    d = tg.full(6, 9.0, dtype=float)
    tg.copy(d, _f(1, 2, 3, 4), dest_offset=1)
    assert d.numpy().tolist() == [9, 1, 2, 3, 4, 9]
    # strided 1-D views (Warp's test_copy_offset_size_mismatch)
    src = tg.array(np.array([7, 0, 8, 0], dtype=np.float32), dtype=float)[::2]
    dst = tg.array(np.array([9, 0, 9, 0, 9, 0, 9, 0], dtype=np.float32), dtype=float)[::2]
    tg.copy(dst, src)
    assert dst.numpy().tolist() == [7, 8, 9, 9]
    d5 = tg.full(5, 9.0, dtype=float)
    tg.copy(d5, tg.array(np.arange(8.0, dtype=np.float32), dtype=float)[::2])
    assert d5.numpy().tolist() == [0, 2, 4, 6, 9]


@pytest.mark.parametrize("call,exc,text", [
    (lambda d, s: tg.copy(d, s, src_offset=-1), CopyArgumentError, "Source offset must be non-negative"),
    (lambda d, s: tg.copy(d, s, dest_offset=-1), CopyArgumentError, "Destination offset must be non-negative"),
    (lambda d, s: tg.copy(d, s, count=-1), CopyArgumentError, "count must be non-negative"),
    (lambda d, s: tg.copy(d, s, src_offset=1.5), CopyTypeError, "must be integers"),
    (lambda d, s: tg.copy(d, s, count=2.0), CopyTypeError, "must be integers"),
    (lambda d, s: tg.copy(d, s, src_offset=1), CopyArgumentError, "exceeds the source size"),
    (lambda d, s: tg.copy(d, s, dest_offset=1), CopyArgumentError, "exceeds the destination size"),
    (lambda d, s: tg.copy(tg.zeros(2, dtype=float), s), CopyArgumentError, "exceeds the destination size"),
    (lambda d, s: tg.copy(tg.zeros(4, dtype=tg.float64), s), CopyTypeError,
     "destination dtype=float64, source dtype=float32"),
])
def test_errors_are_warps_runtime_errors(call, exc, text):
    d, s = tg.zeros(4, dtype=float), _f(1, 2, 3, 4)
    with pytest.raises(exc, match=text) as info:
        call(d, s)
    assert isinstance(info.value, RuntimeError)
    assert d.numpy().tolist() == [0, 0, 0, 0]    # nothing copied


def test_several_dims_non_contiguous_with_a_range_refused():
    src = tg.array(np.arange(100, dtype=np.float32), dtype=float).reshape((10, 10))[1::2, 1::2]
    with pytest.raises(CopyArgumentError, match="only supported for 1-D non-contiguous arrays"):
        tg.copy(tg.zeros_like(src), src, count=2)
    strided = tg.array(np.arange(12.0, dtype=np.float32).reshape(3, 4), dtype=float)[:2, :3]
    with pytest.raises(CopyArgumentError, match="Incompatible array shapes"):
        tg.copy(tg.zeros((3, 2), dtype=float), strided)


def test_adjoint_of_a_copy_into_a_larger_array():
    src = tg.array(np.array([1.0, 2.0], dtype=np.float32), dtype=float, requires_grad=True)
    dst = tg.zeros(4, dtype=float, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.copy(dst, src)
    tape.backward(grads={dst: tg.array(np.array([10.0, 20.0, 30.0, 40.0], dtype=np.float32), dtype=float)})
    assert src.grad.numpy().tolist() == [10, 20]
