"""The memory operations that branch on the device: fill, zero, copy, accumulate.

One home for them, used by arrays (``fill_``, ``zero_``, ``assign``, ``copy``), by the tape's
copy adjoints and by DLPack, so the CUDA rules live in one function each:

* **stream order**: every CUDA operation runs on the device's *current* tapegrad stream (a
  ``cudaMemcpyAsync``/``cudaMemsetAsync`` on its handle, or a CuPy operation inside
  ``on_current_stream``), so it is ordered with the kernels launched there and is recorded into
  a CUDA graph while that stream is captured;
* **capture safety**: CuPy temporaries allocated inside ``on_current_stream`` during a capture
  come from the capture-safe allocator ``tapegrad.cuda.graph`` installs; copies that touch
  pageable host memory synchronise the stream before returning (they are not capturable, and
  the host side must see the data).

The functions take tapegrad arrays but only use their public attributes (``device``, ``ptr``,
``nbytes``, ``is_contiguous``, ``dtype``, ``size``, ``numpy()``, ``flat_layout()``), so this
module sits below ``array``. ``ZeroPlan`` zeroes many host buffers in one native call and
``BufferZeroPlan`` many arrays on any devices (``Tape.zero()``: one call, one CUDA launch per device).
"""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np

from . import cpu_capture, native
from .cuda import memory as cuda_memory  # imports CuPy only when a CUDA operation runs

__all__ = ["on_current_stream", "cupy_view", "fill", "zero", "copy", "accumulate", "ZeroPlan", "BufferZeroPlan",
           "load_zero_many", "copy_regions", "HOST_TEAM_COPY"]

# a host copy of this many bytes or more goes to copy_regions (hostops.c's TG_HOST_TEAM_MIN: the
# total from which its threads share the work); smaller ones are one memmove, with no ctypes arrays
HOST_TEAM_COPY = 1 << 21


@contextlib.contextmanager
def on_current_stream(device):
    """Make CUDA ``device`` and its current tapegrad stream current for CuPy inside the block.

    The one place that states tapegrad's ordering rule for CuPy work: it runs where the
    device's kernels run (and is captured with them). Never call ``cupy.cuda.Device`` directly.
    """
    with device.context_guard(), device.stream.cupy_stream:
        yield


def cupy_view(a):
    """A CuPy ndarray aliasing a CUDA array (scalar layout, component dims appended)."""
    import cupy
    shape, strides = a.flat_layout()
    extent = sum((n - 1) * s for n, s in zip(shape, strides)) + a.dtype.scalar.size if a.size else 0
    mem = cupy.cuda.UnownedMemory(a.ptr, max(extent, 1), a, a.device.ordinal)
    return cupy.ndarray(shape, dtype=a.dtype.scalar.np_dtype, memptr=cupy.cuda.MemoryPointer(mem, 0), strides=strides)


def fill(a, value) -> None:
    """Set every element of ``a`` to ``value`` (a scalar, or a vector/matrix value)."""
    if a.device.is_cpu:
        if cpu_capture.capturing():     # recorded into the CPU graph instead (Warp's CPU capture)
            value = np.array(value, copy=True)
            cpu_capture.record(lambda: fill(a, value), (a,))
            return
        a.numpy()[...] = value
        return
    with on_current_stream(a.device):
        view = cupy_view(a)
        value = np.asarray(value, dtype=a.dtype.scalar.np_dtype)
        # CuPy fills from a scalar, but broadcasts an array only from device memory
        if value.ndim:
            import cupy
            value = cupy.asarray(value)
        view[...] = value


def zero(a) -> None:
    """Set every byte of ``a`` to zero (one memset when contiguous)."""
    dev = a.device
    if dev.is_cpu and cpu_capture.capturing():
        cpu_capture.record(lambda: zero(a), (a,))
        return
    if a.is_contiguous:
        if dev.is_cpu:
            ctypes.memset(a.ptr, 0, a.nbytes)
        else:
            cuda_memory.memset(a.ptr, 0, a.nbytes, dev.stream.cuda_stream)
    elif dev.is_cpu:
        a.numpy()[...] = 0
    else:
        with on_current_stream(dev):
            cupy_view(a)[...] = 0


def share_bytes(a, b) -> bool:
    """Whether arrays ``a`` and ``b`` may share memory: same device and intersecting byte spans
    (interleaved views such as ``x[::2]`` and ``x[1::2]`` count as sharing)."""
    if a.device is not b.device or not a.size or not b.size:
        return False

    def span(x):
        if x.is_contiguous:
            return x.ptr, x.ptr + x.nbytes
        lo = hi = x.ptr
        for n, st in zip(x.shape, x.strides):
            lo += min(0, (n - 1) * st)
            hi += max(0, (n - 1) * st)
        return lo, hi + x.dtype.size
    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def copy(dest, src) -> None:
    """Copy the elements of ``src`` into ``dest`` (same shape and scalar type, any devices).

    CUDA copies are ordered on the current stream of the CUDA side; a copy to or from host
    memory synchronises that stream before returning.
    """
    if dest.size == 0:
        return
    if dest.device.is_cpu and src.device.is_cpu:
        if cpu_capture.capturing():
            cpu_capture.record(lambda: copy(dest, src), (dest, src))
            return
        if dest.is_contiguous and src.is_contiguous and dest.nbytes == src.nbytes and dest.dtype is src.dtype:
            d, s_, n = dest.ptr, src.ptr, dest.nbytes    # no numpy views (the tape saves small arrays often)
            if n >= HOST_TEAM_COPY and (d + n <= s_ or s_ + n <= d):
                copy_regions(((d, s_, n),))      # a large copy: split over a team of threads
            else:
                ctypes.memmove(d, s_, n)
            return
        values = src.numpy()
        if share_bytes(dest, src):
            # strided ranges of one allocation (copy(a[1::2], a[1:4])): NumPy's copyto reads
            # elements it already wrote ([0, 1, 2, 2, 4, 2] for [0, 1, 2, 2, 4, 3]); read them first
            values = values.copy()
        np.copyto(dest.numpy(), values, casting="no")
        return
    cuda_dev = dest.device if dest.device.is_cuda else src.device
    stream = cuda_dev.stream
    if share_bytes(dest, src):
        # a copy within one allocation (tg.copy(a, a, dest_offset=1, count=4)): cudaMemcpy and
        # CuPy's element-wise copy leave overlapping ranges undefined; read the source first
        import cupy
        with on_current_stream(cuda_dev):
            cupy.copyto(cupy_view(dest), cupy_view(src).copy())
        return
    if dest.is_contiguous and src.is_contiguous:
        cuda_memory.memcpy(dest.ptr, src.ptr, dest.nbytes, stream.cuda_stream)
        if dest.device.is_cpu or src.device.is_cpu:
            stream.synchronize()  # host memory is pageable: make the copy visible before returning
        return
    import cupy
    with on_current_stream(cuda_dev):
        if dest.device.is_cuda and src.device.is_cuda:
            cupy.copyto(cupy_view(dest), cupy_view(src))
        elif dest.device.is_cuda:
            cupy_view(dest)[...] = cupy.asarray(np.ascontiguousarray(src.numpy()))
        else:
            np.copyto(dest.numpy(), cupy.asnumpy(cupy_view(src)))


def accumulate(dest, src) -> None:
    """``dest += src`` elementwise (same shape); ``src`` is first moved to ``dest``'s device."""
    if src.device is not dest.device:
        src = src.to(dest.device)
    if dest.device.is_cpu:
        if cpu_capture.capturing():
            cpu_capture.record(lambda: accumulate(dest, src), (dest, src))
            return
        d = dest.numpy()
        d += src.numpy()
        return
    with on_current_stream(dest.device):
        v = cupy_view(dest)
        v += cupy_view(src)


# ------------------------------------------------------------------ batched host zeroing and copies

_hostops = None   # hostops.c's (tg_zero_many, tg_copy_many), or False when it cannot be built


def _load_hostops():
    global _hostops
    if _hostops is None:
        try:
            lib = native.load("tg_hostops")   # hostops.c: built at install, else compiled
            zero_many, copy_many = lib.tg_zero_many, lib.tg_copy_many
            zero_many.restype = copy_many.restype = None
            zero_many.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            copy_many.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            _hostops = (zero_many, copy_many)
        except Exception:  # no compiler: one memset / memmove per buffer
            _hostops = False
    return _hostops


def load_zero_many():
    """The native batched memset (built once), or False when no C++ compiler works."""
    ops = _load_hostops()
    return ops and ops[0]


def copy_regions(regions) -> None:
    """Copy host memory ``[(dst_ptr, src_ptr, nbytes), ...]`` in one native call, whose team of
    threads shares the pieces of a large total (2 MiB or more; one ``memmove`` each without a
    compiler).

    Raises:
        ValueError: a destination overlaps another region's source or destination (the pieces
            are copied in any order, by several threads).
    """
    _check_disjoint_destinations(regions)
    ops = _load_hostops()
    n = len(regions)
    if not ops or n == 0:
        for d, s_, size in regions:
            ctypes.memmove(d, s_, size)
        return
    ops[1]((ctypes.c_void_p * n)(*[r[0] for r in regions]), (ctypes.c_void_p * n)(*[r[1] for r in regions]),
           (ctypes.c_size_t * n)(*[r[2] for r in regions]), n)


def _check_disjoint_destinations(regions) -> None:
    spans = sorted([(d, d + n, True) for d, _, n in regions if n] + [(s_, s_ + n, False) for _, s_, n in regions if n])
    end_any = end_dst = None
    for start, end, is_dst in spans:
        if (end_dst is not None and start < end_dst) or (is_dst and end_any is not None and start < end_any):
            raise ValueError(f"copy_regions(regions=...): a destination overlaps another region near 0x{start:x}; "
                             "expected disjoint destinations (memory_ops.copy handles an overlapping copy)")
        end_any = end if end_any is None else max(end_any, end)
        if is_dst:
            end_dst = end if end_dst is None else max(end_dst, end)


class ZeroPlan:
    """Host buffers ``[(ptr, nbytes), ...]`` zeroed by one native call per ``run()`` (one
    ``memset`` per buffer when no C++ compiler is available)."""

    def __init__(self, regions):
        n = len(regions)
        self._regions = regions
        self._ptrs = (ctypes.c_void_p * n)(*[p for p, _ in regions])
        self._sizes = (ctypes.c_size_t * n)(*[s for _, s in regions])
        self._n = n

    def run(self):
        """Zero every region (inside a CPU capture: recorded, run at each replay)."""
        if not self._n:
            return
        if cpu_capture.capturing():
            # a native memset runs at once: a captured tape.zero() zeroed only while capturing,
            # so each replay of tape.zero(); tape.backward() accumulated into the last one's
            cpu_capture.record(self.run, (self,))
            return
        fn = load_zero_many()
        if fn:
            fn(self._ptrs, self._sizes, self._n)
        else:
            for p, s in self._regions:
                ctypes.memset(p, 0, s)


class BufferZeroPlan:
    """Many arrays zeroed together, planned once (``Tape.zero()`` of every gradient buffer).

    Contiguous writable host buffers go to one native ``memset`` call (``ZeroPlan``),
    contiguous CUDA buffers to one kernel launch per device on its current stream at ``run()``
    time (``tapegrad.cuda.memory.SegmentZeroPlan``), everything else (strided views, read-only
    arrays, annotation-only arrays) to its own ``zero_()`` (a read-only one raises there). An
    array listed twice is zeroed once.

    The plan holds the arrays (their memory stays valid while it lives). Build it outside a CUDA
    graph capture (it copies its range table to the device); ``run()`` may be captured.
    """

    def __init__(self, arrays):
        host, cuda, other, seen = [], {}, [], set()
        for a in arrays:
            if id(a) in seen:
                continue
            seen.add(id(a))
            if a.is_contiguous and not a.readonly and a.ptr:
                if a.device.is_cpu:
                    host.append((a.ptr, a.nbytes))
                    continue
                if a.device.is_cuda:
                    cuda.setdefault(a.device, []).append((a.ptr, a.nbytes))
                    continue
            other.append(a)
        self.arrays = tuple(arrays)
        self._host = ZeroPlan(host)
        self._cuda = [cuda_memory.SegmentZeroPlan(dev, regions) for dev, regions in cuda.items()]
        self._other = other

    def run(self) -> None:
        """Zero every array (CUDA work is queued on each device's current stream)."""
        self._host.run()
        for plan in self._cuda:
            plan.run(plan.device.stream.cuda_stream)
        for a in self._other:
            a.zero_()
