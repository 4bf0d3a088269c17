"""Launches past 2^31 threads and arrays past 2^31 elements (issue 14, fault 1).

Launches of at most 2^31 - 1 threads run the kernel's default build (``tid()`` int32, as in
Warp); larger ones run its *wide* build (``tid()`` int64, int32 operands promoted next to it),
compiled on the first such launch. A grid whose size passes int64 is a ValueError naming dim.
On the CPU the big launches run 2^31 threads of a compare each (about a second on two cores).
"""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lang import emit

BIG = 2 ** 31


@tg.kernel
def guarded(x: tg.array[float], out: tg.array[tg.int64], n: int):
    i = tg.tid()
    if i < n:          # int32 n next to the int64 tid(): promoted in the wide build
        x[i] = 1.0
        acc = i * 0    # an int64 local in the wide build (int32 in the default one)
        for j in range(n):
            acc += i * n + j
        out[i] = tg.int64(acc + tg.min(i, n - 1) + i % 3 + (i // 2 if i > 1 else i))


def _expected(n, count):
    i = np.arange(count)
    return (sum(i * n + j for j in range(n)) + np.minimum(i, n - 1) + i % 3 + np.where(i > 1, i // 2, i)).tolist()


@tg.kernel
def mark_last(x: tg.array[tg.int8], v: tg.int8):
    i = tg.tid()
    if i == len(x) - 1:
        x[i] = v


@tg.kernel
def read_at(x: tg.array[tg.int8], k: tg.int64, out: tg.array[tg.int8]):
    out[0] = x[k]


@tg.kernel
def write_at(x: tg.array[tg.int8], k: tg.int64, v: tg.int8):
    x[k] = v


@tg.kernel
def iota32(out: tg.array[tg.int32]):
    i = tg.tid()
    if i < len(out):
        out[i] = i


def test_guarded_launch_past_int32(device):
    x = tg.zeros(16, device=device)
    out = tg.zeros(16, dtype=tg.int64, device=device)
    tg.launch(guarded, dim=BIG + 8, inputs=[x, out, 8])
    assert x.numpy().tolist() == [1.0] * 8 + [0.0] * 8
    assert out.numpy().tolist() == _expected(8, 8) + [0] * 8      # loops, min, %, // with int32 operands
    # the default build still serves small launches (and is untouched: no 64-bit tid in it)
    y = tg.zeros(16, device=device)
    out = tg.zeros(16, dtype=tg.int64, device=device)
    tg.launch(guarded, dim=4, inputs=[y, out, 8])
    assert y.numpy().tolist() == [1.0] * 4 + [0.0] * 12
    assert out.numpy().tolist() == _expected(8, 4) + [0] * 12
    assert "tg::tid64" not in guarded.source() and "tg::tid(" in guarded.source()
    assert "tg::tid64" in emit.module_source(guarded.cpp_parts(None, emit.Variant(wide=True)))


def test_int8_array_past_int32(device):
    x = tg.zeros(BIG + 64, dtype=tg.int8, device=device)
    out = tg.zeros(1, dtype=tg.int8, device=device)
    last = BIG + 63
    tg.launch(write_at, dim=1, inputs=[x, last, 7])            # a 64-bit index in a small launch
    tg.launch(read_at, dim=1, inputs=[x, last, out])
    assert int(out.numpy()[0]) == 7
    tg.launch(mark_last, dim=BIG + 64, inputs=[x, 9])          # wide build: len(x) is an int64
    tg.launch(read_at, dim=1, inputs=[x, last, out])
    assert int(out.numpy()[0]) == 9
    if device == "cpu":
        view = x.numpy()
        assert view.shape == (BIG + 64,) and int(view[-1]) == 9 and int(view[BIG - 1]) == 0
        assert int(np.count_nonzero(view[-128:])) == 1


@pytest.mark.parametrize("dim", [(2 ** 32, 2 ** 32), (2 ** 63,), (2 ** 62, 2, 2), (2 ** 64, 0)])
def test_grid_past_int64_is_a_value_error_naming_dim(dim):
    x = tg.zeros(4)
    with pytest.raises(ValueError, match=r"launch: dim .*2\^63 - 1"):
        tg.launch(guarded, dim=dim, inputs=[x, tg.zeros(4, dtype=tg.int64), 8])
    assert x.numpy().tolist() == [0.0] * 4


def test_narrowing_store_in_the_wide_build_is_a_clear_error():
    out = tg.zeros(8, dtype=tg.int32)
    tg.launch(iota32, dim=8, inputs=[out])                     # fine at 32 bits (tid() is an int32)
    assert out.numpy().tolist() == list(range(8))
    with pytest.raises(tg.KernelError, match=r"kernel '.*iota32' cannot run over 2\^31 - 1 threads: .*int64.*"
                                             r"test_large_launch.py:\d+"):
        tg.launch(iota32, dim=BIG, inputs=[out])


def test_narrow_build_still_refuses_the_int_mix():
    @tg.kernel
    def mix(x: tg.array[float], n: tg.int64):
        i = tg.tid()
        if i < n:
            x[i] = 1.0

    with pytest.raises(tg.KernelError, match="int64"):
        tg.launch(mix, dim=4, inputs=[tg.zeros(4), 4])
