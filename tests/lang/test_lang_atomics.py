"""The remaining atomics (issue 16, item 8): atomic_exch, atomic_cas, atomic_and/or/xor,
atomic_min/max on every scalar type, and expect_eq / expect_neq."""

import numpy as np
import pytest

import tapegrad as tg

N = 256


def _cas_counter(dtype):
    @tg.kernel
    def k(a: tg.array(dtype=dtype)):
        tg.tid()
        while True:                       # a CAS retry loop: every thread adds one
            old = a[0]
            if tg.atomic_cas(a, 0, old, old + dtype(1)) == old:
                break
    return k


@pytest.mark.parametrize("dtype", [tg.int32, tg.uint32, tg.int64, tg.uint64, tg.float32, tg.float64, tg.int16],
                         ids=lambda t: t.name)
def test_atomic_cas_counter(dtype, device):
    a = tg.zeros(1, dtype=dtype, device=device)
    tg.launch(_cas_counter(dtype), dim=N, inputs=[a], device=device)
    assert a.numpy()[0] == N


@tg.kernel
def k_claim(owner: tg.array(dtype=int), won: tg.array(dtype=int), olds: tg.array(dtype=int)):
    i = tg.tid()
    if tg.atomic_cas(owner, i % 8, -1, i) == -1:
        tg.atomic_add(won, i % 8, 1)
    olds[i] = tg.atomic_exch(olds, i, i * 2) + 1


def test_atomic_cas_claims_once_and_exch(device):
    owner = tg.full(8, -1, dtype=int, device=device)
    won = tg.zeros(8, dtype=int, device=device)
    olds = tg.full(N, 5, dtype=int, device=device)
    tg.launch(k_claim, dim=N, inputs=[owner, won, olds], device=device)
    np.testing.assert_array_equal(won.numpy(), np.ones(8))
    o = owner.numpy()
    assert all(o[s] % 8 == s for s in range(8))
    np.testing.assert_array_equal(olds.numpy(), np.full(N, 6))


@tg.kernel
def k_exch_2d(a: tg.array2d(dtype=tg.float64), seen: tg.array(dtype=tg.float64)):
    i = tg.tid()
    seen[i] = tg.atomic_exch(a, 0, 1, tg.float64(i))


def test_atomic_exch_2d(device):
    a = tg.full((2, 2), -1.0, dtype=tg.float64, device=device)
    seen = tg.zeros(N, dtype=tg.float64, device=device)
    tg.launch(k_exch_2d, dim=N, inputs=[a, seen], device=device)
    vals = sorted(seen.numpy().tolist() + [a.numpy()[0, 1]])
    assert vals == [-1.0] + list(map(float, range(N)))


def _bitwise(dtype):
    @tg.kernel
    def k(ors: tg.array(dtype=dtype), ands: tg.array(dtype=dtype), xors: tg.array(dtype=dtype),
          old: tg.array(dtype=dtype)):
        i = tg.tid()
        bit = dtype(1) << dtype(i % 8)
        tg.atomic_or(ors, 0, bit)
        tg.atomic_and(ands, 0, ~bit if i % 8 == 3 else ~dtype(0))
        old[i] = tg.atomic_xor(xors, 0, bit)
    return k


@pytest.mark.parametrize("dtype", [tg.int8, tg.uint8, tg.int16, tg.int32, tg.uint32, tg.int64, tg.uint64],
                         ids=lambda t: t.name)
def test_atomic_bitwise(dtype, device):
    ors = tg.zeros(1, dtype=dtype, device=device)
    ands = tg.full(1, 0x7f, dtype=dtype, device=device)
    xors = tg.zeros(1, dtype=dtype, device=device)
    old = tg.zeros(16, dtype=dtype, device=device)
    tg.launch(_bitwise(dtype), dim=16, inputs=[ors, ands, xors, old], device=device)
    assert int(ors.numpy()[0]) & 0xff == 0xff
    assert int(ands.numpy()[0]) == 0x7f & ~8
    assert int(xors.numpy()[0]) == 0        # every bit flipped twice


def test_atomic_bitwise_refuses_floats():
    @tg.kernel
    def k(a: tg.array(dtype=float)):
        tg.atomic_or(a, 0, 1.0)

    with pytest.raises(tg.KernelError, match=r"atomic_or\(\) does not accept"):
        tg.launch(k, dim=1, inputs=[tg.zeros(1, dtype=float)])


def _minmax(dtype):
    @tg.kernel
    def k(x: tg.array(dtype=dtype), lo: tg.array(dtype=dtype), hi: tg.array(dtype=dtype)):
        i = tg.tid()
        tg.atomic_min(lo, 0, x[i])
        tg.atomic_max(hi, 0, x[i])
    return k


@pytest.mark.parametrize("dtype", [tg.int8, tg.uint8, tg.int16, tg.uint16, tg.int32, tg.uint32, tg.int64,
                                   tg.uint64, tg.float16, tg.float32, tg.float64], ids=lambda t: t.name)
def test_atomic_min_max_every_scalar(dtype, device):
    rng = np.random.default_rng(4)
    npt = dtype.np_dtype
    lo_v, hi_v = (0, 100) if dtype.kind == "uint" else (-100, 100)
    x = rng.integers(lo_v, hi_v, N).astype(npt)
    lo = tg.array(np.array([hi_v], dtype=npt), dtype=dtype, device=device)
    hi = tg.array(np.array([lo_v], dtype=npt), dtype=dtype, device=device)
    tg.launch(_minmax(dtype), dim=N, inputs=[tg.array(x, dtype=dtype, device=device), lo, hi], device=device)
    assert lo.numpy()[0] == x.min() and hi.numpy()[0] == x.max()


@tg.kernel
def k_expect(x: tg.array(dtype=float)):
    i = tg.tid()
    tg.expect_eq(x[i], 1.0)
    tg.expect_eq(tg.vec2(x[i], 2.0), tg.vec2(1.0, 2.0))
    tg.expect_neq(i, 1)


def test_expect_eq_prints_on_failure(capfd):
    tg.launch(k_expect, dim=2, inputs=[tg.array(np.array([1.0, 3.0], np.float32))])
    tg.synchronize()
    out = capfd.readouterr().out
    assert out.count("expect_eq() failed") == 2
    assert "test_lang_atomics.py:" in out and "Expected: 1" in out and "Actual: 3" in out
    assert out.count("expect_neq() failed") == 1

