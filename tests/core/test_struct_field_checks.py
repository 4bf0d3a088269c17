"""Read-only arrays reached through struct fields, indexed arrays and arrays of structs: a kernel
writing them is refused at launch as a read-only array parameter is (the write went through
silently: a read-only NumPy array changed)."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg


@tg.struct
class Box:
    a: tg.array(dtype=tg.float32)


@tg.kernel
def store_through_indexed(a: tg.indexedarray[tg.float32]):
    a[tg.tid()] = 5.0


@tg.func
def bump(b: Box, i: int):
    tg.atomic_add(b.a, i, 1.0)


@tg.kernel
def update_through_field(b: Box):
    bump(b, tg.tid())


@tg.kernel
def read_through_field(b: Box, out: tg.array(dtype=tg.float32)):
    out[tg.tid()] = b.a[tg.tid()]


@tg.kernel
def store_through_elements(bs: tg.array(dtype=Box)):
    i = tg.tid()
    bs[i].a[0] = 3.0


def _read_only(n=4):
    src = np.arange(n, dtype=np.float32)
    src.setflags(write=False)
    return src, tg.array(src, copy=False)


def test_writes_through_fields_to_read_only_arrays_are_refused():
    src, ro = _read_only()
    assert ro.readonly
    with pytest.raises(RuntimeError, match=r"argument 0 \('a'\): the kernel writes field a\.data, but that array is "
                                           r"read-only"):
        tg.launch(store_through_indexed, dim=2, inputs=[ro[tg.array([0, 1], dtype=tg.int32)]])
    b = Box()
    b.a = ro
    with pytest.raises(RuntimeError, match=r"the kernel writes field b\.a, but that array is read-only"):
        tg.launch(update_through_field, dim=2, inputs=[b])
    with pytest.raises(RuntimeError, match=r"element \(1,\): the kernel writes field a, but that array is read-only"):
        w = Box()
        w.a = tg.zeros(4)
        tg.launch(store_through_elements, dim=2, inputs=[tg.array([w, b], dtype=Box)])
    np.testing.assert_array_equal(src, np.arange(4, dtype=np.float32))     # untouched
    out = tg.zeros(4)
    tg.launch(read_through_field, dim=4, inputs=[b, out])                   # reading is fine
    np.testing.assert_array_equal(out.numpy(), src)
    b.a = tg.zeros(4)
    tg.launch(update_through_field, dim=2, inputs=[b])
    np.testing.assert_array_equal(b.a.numpy(), [1.0, 1.0, 0.0, 0.0])
