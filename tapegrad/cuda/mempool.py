"""CUDA memory-pool queries and settings (Warp's ``get_mempool_used_mem_current`` and friends).

The pool is the device's default ``cudaMemPool_t`` (what ``cudaMallocAsync`` and tapegrad's
``"async"`` allocator draw from). Warp's rules: the query functions raise ``ValueError`` for the
CPU, the ``is_*`` functions return False there.
"""
from __future__ import annotations

from ..device import get_device

__all__ = ["is_mempool_supported", "is_mempool_enabled", "set_mempool_enabled",
           "get_mempool_used_mem_current", "get_mempool_used_mem_high",
           "get_mempool_release_threshold", "set_mempool_release_threshold"]

_enabled: dict = {}   # ordinal -> False when a user turned the pool off (set_mempool_enabled)


def _cuda(device, who):
    dev = get_device(device)
    if not dev.is_cuda:
        raise ValueError(f"{who}(device): memory pools are only supported on CUDA devices, got {dev}")
    return dev


def _pool_attr(device, who, attr_name, value=None):
    dev = _cuda(device, who)
    import cupy
    rt = cupy.cuda.runtime
    with dev.context_guard():
        pool = rt.deviceGetMemPool(dev.ordinal)
        attr = getattr(rt, attr_name)
        if value is None:
            return int(rt.memPoolGetAttribute(pool, attr))
        rt.memPoolSetAttribute(pool, attr, int(value))
        return None


def is_mempool_supported(device=None) -> bool:
    """Whether the device supports stream-ordered allocation (False for the CPU)."""
    dev = get_device(device)
    if not dev.is_cuda:
        return False
    import cupy
    rt = cupy.cuda.runtime
    with dev.context_guard():
        return bool(rt.deviceGetAttribute(rt.cudaDevAttrMemoryPoolsSupported, dev.ordinal))


def is_mempool_enabled(device=None) -> bool:
    """Whether tapegrad may allocate from the device's pool (supported and not turned off)."""
    dev = get_device(device)
    return is_mempool_supported(dev) and _enabled.get(dev.ordinal, True)


def set_mempool_enabled(device, enable: bool) -> None:
    """Record whether the pool is to be used on ``device``.

    Raises:
        TypeError: ``enable`` is not a bool. ValueError: a CPU device, or ``enable=True`` on a
            device without pool support.
    """
    if not isinstance(enable, bool):
        raise TypeError(f"set_mempool_enabled(enable): expected a bool, got {type(enable).__name__}")
    dev = _cuda(device, "set_mempool_enabled")
    if enable and not is_mempool_supported(dev):
        raise ValueError(f"set_mempool_enabled: {dev} does not support memory pools")
    _enabled[dev.ordinal] = enable


def get_mempool_used_mem_current(device=None) -> int:
    """Bytes of the device's pool currently in use."""
    return _pool_attr(device, "get_mempool_used_mem_current", "cudaMemPoolAttrUsedMemCurrent")


def get_mempool_used_mem_high(device=None) -> int:
    """The high-water mark of the pool's used bytes."""
    return _pool_attr(device, "get_mempool_used_mem_high", "cudaMemPoolAttrUsedMemHigh")


def get_mempool_release_threshold(device=None) -> int:
    """Bytes the pool keeps reserved instead of releasing them at a synchronisation."""
    return _pool_attr(device, "get_mempool_release_threshold", "cudaMemPoolAttrReleaseThreshold")


def set_mempool_release_threshold(device, threshold) -> None:
    """Set the pool's release threshold: bytes (int >= 0), or a fraction of the device's
    memory (a float in [0, 1], as in Warp).

    Raises:
        TypeError: ``threshold`` is not a number. ValueError: negative, or a float above 1;
            a CPU device.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"set_mempool_release_threshold(threshold): expected an int (bytes) or a float "
                        f"fraction in [0, 1], got {type(threshold).__name__}")
    if threshold < 0 or (isinstance(threshold, float) and threshold > 1.0):
        raise ValueError(f"set_mempool_release_threshold(threshold): expected bytes >= 0 or a fraction in "
                         f"[0, 1], got {threshold}")
    dev = _cuda(device, "set_mempool_release_threshold")
    if isinstance(threshold, float):
        import cupy
        with dev.context_guard():
            total = cupy.cuda.runtime.memGetInfo()[1]
        threshold = int(threshold * total)
    _pool_attr(dev, "set_mempool_release_threshold", "cudaMemPoolAttrReleaseThreshold", threshold)
