"""CUDA device memory, pinned host memory and copies, through CuPy.

Allocations return an *owner* object with an integer ``ptr``; the memory lives as long as the
owner does. Which pool device memory comes from is a per-device allocator setting (see
``tapegrad.cuda.allocators``); the default is CuPy's memory pool. While the device's current
stream is being captured into a CUDA graph, allocations come from a capture-safe allocator
(stream-ordered, owned by the graph) whatever the setting.

Copies and fills are stream-ordered (``cudaMemcpyAsync`` / ``cudaMemsetAsync``), so device to
device copies and fills are captured into graphs; copies from pageable host memory are not
capturable.
"""
from __future__ import annotations

import ctypes

__all__ = ["alloc", "alloc_pinned", "memcpy", "memset", "SegmentZeroPlan"]

_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction inferred from unified addressing


def alloc(device, nbytes: int, stream=None):
    """Allocate ``nbytes`` on a CUDA device; returns the owner (``owner.ptr`` is the address).

    The memory comes from the device's allocator setting, or from a capture-safe allocator
    when ``stream`` (default: the device's current stream) is being captured.
    """
    from . import allocators
    return allocators.alloc(device, max(int(nbytes), 1), stream)


def alloc_pinned(nbytes: int):
    """Allocate page-locked host memory; returns CuPy's PinnedMemoryPointer (owner, ``.ptr``)."""
    import cupy
    return cupy.cuda.alloc_pinned_memory(max(int(nbytes), 1))


def memcpy(dst: int, src: int, nbytes: int, stream: int = 0) -> None:
    """Asynchronous copy of ``nbytes`` between any host/device pointers on ``stream``."""
    if nbytes <= 0:
        return
    import cupy
    cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, _MEMCPY_DEFAULT, stream)


def memset(dst: int, value: int, nbytes: int, stream: int = 0) -> None:
    """Asynchronous byte fill of ``nbytes`` at ``dst`` on ``stream``."""
    if nbytes <= 0:
        return
    import cupy
    cupy.cuda.runtime.memsetAsync(dst, value, nbytes, stream)


# one launch zeroes many buffers (Tape.zero() of every gradient): block row y is buffer y, whose
# 16-byte-aligned middle is written with 16-byte stores and its unaligned ends byte by byte
_ZERO_SEGMENTS_SOURCE = r"""
extern "C" __global__ void tg_zero_segments(const unsigned long long* ptrs, const unsigned long long* sizes,
                                            int first) {
    const int s = first + blockIdx.y;
    char* p = reinterpret_cast<char*>(ptrs[s]);
    const unsigned long long n = sizes[s];
    unsigned long long head = (16 - (reinterpret_cast<unsigned long long>(p) & 15)) & 15;
    if (head > n) head = n;
    const unsigned long long body = (n - head) / 16, tail = head + body * 16;
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    if (t < head) p[t] = 0;
    uint4* q = reinterpret_cast<uint4*>(p + head);
    for (unsigned long long i = t; i < body; i += step) q[i] = make_uint4(0, 0, 0, 0);
    if (t < n - tail) p[tail + t] = 0;
}
"""
_zero_kernels: dict = {}   # device ordinal -> cupy RawKernel (compiled once, CuPy's disk cache)
_MAX_ROWS = 65535          # gridDim.y limit


class SegmentZeroPlan:
    """Byte ranges ``[(ptr, nbytes), ...]`` on one CUDA device, zeroed by one kernel launch per
    ``run()`` (per 65,535 ranges) on a given stream: the cost of one launch, not one
    ``cudaMemsetAsync`` call (about 2 us of host time each) per range.

    The range table is copied to the device once, when the plan is built; build plans outside
    graph captures (the launch itself can be captured).
    """

    def __init__(self, device, regions):
        import cupy
        import numpy as np
        self.device = device
        self.count = len(regions)
        with device.context_guard():
            k = _zero_kernels.get(device.ordinal)
            if k is None:
                k = _zero_kernels[device.ordinal] = cupy.RawKernel(_ZERO_SEGMENTS_SOURCE, "tg_zero_segments")
            self._fn = k.kernel.ptr
            table = np.array([[p for p, _ in regions], [n for _, n in regions]], dtype=np.uint64)
            self._table = cupy.asarray(table)   # keeps the device copy alive with the plan
        ptrs, sizes = self._table.data.ptr, self._table.data.ptr + 8 * self.count
        largest = max((n for _, n in regions), default=0)
        sms = device.sm_count or 1
        # enough 256-thread blocks per range for its 16-byte words, capped so all ranges
        # together fill the GPU a few times over (the loop strides over the rest)
        self._grid_x = max(1, min((largest // 16 + 255) // 256, max(1, 8 * sms * 2048 // 256 // max(self.count, 1))))
        self._launches = []
        for first in range(0, self.count, _MAX_ROWS):
            vals = (ctypes.c_uint64(ptrs), ctypes.c_uint64(sizes), ctypes.c_int32(first))
            params = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in vals])
            self._launches.append((min(_MAX_ROWS, self.count - first), vals, params))

    def run(self, stream: int) -> None:
        """Zero every range, ordered on the CUDA stream handle ``stream``."""
        if not self.count:
            return
        from cupy.cuda import driver, runtime
        ordinal = self.device.ordinal
        prev = runtime.getDevice()
        if prev != ordinal:
            runtime.setDevice(ordinal)
        try:
            for rows, _vals, params in self._launches:
                driver.launchKernel(self._fn, self._grid_x, rows, 1, 256, 1, 1, 0, stream, ctypes.addressof(params), 0)
        finally:
            if prev != ordinal:
                runtime.setDevice(prev)
