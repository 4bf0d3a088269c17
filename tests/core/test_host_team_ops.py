"""Large host copies and memsets shared by a team of threads (hostops.c's tg_copy_many /
tg_zero_many, ``memory_ops.copy_regions``): exact bytes at every piece boundary, nothing
outside the regions touched, overlapping destinations refused, and the same results without
the native helper (one memmove per region)."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory_ops

PIECE = 1 << 18   # hostops.c's TG_HOST_PIECE


def _pool(nbytes, seed):
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


# sizes around the piece size, a single byte, and a total past the team threshold (2 MiB)
SIZES = [PIECE + 3, 1, 5 * PIECE - 1, 7, 3 * (1 << 20) + 5]


@pytest.fixture(params=["native", "memmove"])
def helper(request, monkeypatch):
    if request.param == "memmove":
        monkeypatch.setattr(memory_ops, "_hostops", False)
    else:
        assert memory_ops._load_hostops(), "the host ops helper must build wherever kernels build"
    return request.param


def test_copy_regions_is_exact_at_every_boundary(helper):
    total = sum(SIZES) + 64 * len(SIZES)
    src, dst = _pool(total, 1), _pool(total, 2)
    want = dst.copy()
    regions, at = [], 0
    for k, n in enumerate(SIZES):
        s_off, d_off = at + k % 5, at + 3 * (k % 2)   # unaligned starts, source and destination apart
        regions.append((dst.ctypes.data + d_off, src.ctypes.data + s_off, n))
        want[d_off:d_off + n] = src[s_off:s_off + n]
        at += n + 64
    memory_ops.copy_regions(regions)
    np.testing.assert_array_equal(dst, want)    # the regions copied, the gaps between them untouched


def test_copy_regions_sources_may_overlap_destinations_may_not(helper):
    a = _pool(4 << 20, 3)
    b = np.zeros(4 << 20, np.uint8)
    p, q = a.ctypes.data, b.ctypes.data
    # one source read by two regions: allowed
    memory_ops.copy_regions([(q, p, 1 << 20), (q + (2 << 20), p, 1 << 20)])
    np.testing.assert_array_equal(b[:1 << 20], a[:1 << 20])
    np.testing.assert_array_equal(b[2 << 20:3 << 20], a[:1 << 20])
    before = b.copy()
    bad = {
        "two destinations overlap": [(q, p, 1 << 20), (q + 100, p + (2 << 20), 10)],
        "a destination overlaps a source": [(q, p, 1 << 20), (p + 5, q + (2 << 20), 10)],
        "a region onto itself": [(q + 10, q + 10, 100)],
        "a shifted copy within one buffer": [(q + 1, q, 3 << 20)],
    }
    for what, regions in bad.items():
        with pytest.raises(ValueError, match="copy_regions.*overlaps") as e:
            memory_ops.copy_regions(regions)
        assert "memory_ops.copy" in str(e.value), what
        np.testing.assert_array_equal(b, before, err_msg=f"{what}: nothing is copied")
    memory_ops.copy_regions([])                     # nothing: no call
    memory_ops.copy_regions([(q, p, 0), (q, p, 0)])  # empty regions overlap nothing


def test_zero_plan_of_a_large_total_zeroes_exactly(helper):
    pool = _pool(sum(SIZES) + 64 * len(SIZES), 4)
    want = pool.copy()
    regions, at = [], 0
    for k, n in enumerate(SIZES):
        off = at + k % 3
        regions.append((pool.ctypes.data + off, n))
        want[off:off + n] = 0
        at += n + 64
    memory_ops.ZeroPlan(regions).run()
    np.testing.assert_array_equal(pool, want)


@pytest.mark.parametrize("n", [memory_ops.HOST_TEAM_COPY // 4 + 3, 1000])
def test_array_copy_large_and_small(helper, n):
    x = tg.array(np.arange(n, dtype=np.float32))
    y = tg.zeros(n, dtype=tg.float32)
    tg.copy(y, x)
    np.testing.assert_array_equal(y.numpy(), np.arange(n, dtype=np.float32))
    # a shifted copy within one allocation (overlapping: memmove, as before)
    tg.copy(x, x, dest_offset=1, src_offset=0, count=n - 1)
    want = np.arange(n, dtype=np.float32)
    want[1:] = np.arange(n - 1, dtype=np.float32)
    np.testing.assert_array_equal(x.numpy(), want)
