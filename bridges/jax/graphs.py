"""CUDA graphs for ``jax_callable``'s WARP graph modes: a bounded cache of captures.

WARP captures the function's work on XLA's stream into a tapegrad graph, one per set of
buffer addresses (XLA hands out new buffers between calls; a graph bakes addresses in), kept in
an LRU of ``max`` graphs, and replays it. WARP_STAGED runs the function on persistent staging
arrays, in a graph that also holds the copies in and out (one graph per address set, in the
same LRU). WARP_STAGED_EX keeps a single graph over the staging arrays per call configuration
and issues the copies outside it. ``stage_in``/``stage_out`` (parameter names, None: all) limit
the per-call copies: unlisted inputs are copied once when the staging arrays are made,
unlisted outputs are never copied back.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import tapegrad

from . import plan as ffi_plan
from .ffi import cuda_copy, cuda_zero

__all__ = ["GraphCache", "copy_array", "zero_array"]


def copy_array(dst, src) -> None:
    """``dst[...] = src`` on the current stream (XLA's, inside a call). On CUDA a driver copy
    (``cuMemcpyDtoDAsync`` on the stream: capturable, no synchronization, no CuPy stream);
    arrays that are not both contiguous take tapegrad's copy."""
    if dst.device.is_cuda and src.device.is_cuda and dst.is_contiguous and src.is_contiguous \
            and dst.nbytes == src.nbytes:
        cuda_copy(dst.ptr, src.ptr, dst.nbytes, dst.device.stream.cuda_stream)
    else:
        tapegrad.copy(dst, src)


def zero_array(a) -> None:
    """Zero ``a`` on the current stream (XLA's, inside a call); on CUDA through the driver
    (``cuMemsetD32Async``/``cuMemsetD8Async`` on the stream)."""
    if a.device.is_cuda and a.is_contiguous:
        cuda_zero(a.ptr, a.nbytes, a.device.stream.cuda_stream)
    else:
        a.zero_()


class GraphCache:
    """The graphs of one ``jax_callable``.

    Args:
        max: most graphs kept (None: unbounded).
        stage_in, stage_out: frozensets of parameter names copied per call, or None (all).
        label: the callable's name, for messages.
    """

    def __init__(self, max, stage_in, stage_out, label):  # noqa: A002  Warp's name for the bound
        self._lock = threading.RLock()
        self._lru: OrderedDict = OrderedDict()     # (device, call, staged, addresses) -> (graph, staging)
        self._single: dict = {}                    # WARP_STAGED_EX: (call, device) -> (staging, graph)
        self.stage_in, self.stage_out, self.label = stage_in, stage_out, label
        self.max = max

    @property
    def max(self):
        return self._max

    @max.setter
    def max(self, n):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ValueError(f"{self.label}: graph_cache_max must be a non-negative int or None, got {n!r}")
        self._max = n
        self._trim()

    @property
    def size(self) -> int:
        return len(self._lru) + len(self._single)

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self._single.clear()

    def _trim(self):
        with self._lock:
            while self._max is not None and len(self._lru) > self._max:
                self._lru.popitem(last=False)

    # --------------------------------------------------------------------------- modes
    def run_captured(self, call, dev, stream, args, invoke) -> None:
        """WARP: replay the capture for these addresses (capture it on a miss)."""
        self._run_lru(call, dev, stream, args, invoke, staged=False)

    def run_staged(self, call, dev, stream, args, invoke) -> None:
        """WARP_STAGED: as WARP, with the function on staging arrays and the copies in the graph."""
        self._run_lru(call, dev, stream, args, invoke, staged=True)

    def _run_lru(self, call, dev, stream, args, invoke, staged):
        from tapegrad.cuda.graph import ScopedCapture, capture_launch
        key = (dev.alias, id(call), staged, tuple(getattr(a, "ptr", None) for a in args))
        with self._lock:
            hit = self._lru.get(key)
            if hit is not None:
                self._lru.move_to_end(key)
        if hit is None:
            staging = self._staging(call, args) if staged else None
            with ScopedCapture(stream=stream, force_module_load=False) as cap:
                if staged:
                    self._copies(call, args, staging, into=True)
                    invoke(staging)
                    self._copies(call, args, staging, into=False)
                else:
                    invoke(args)
            hit = (cap.graph, staging)
            with self._lock:
                self._lru[key] = hit
                self._trim()
        capture_launch(hit[0], stream=stream)

    def run_staged_ex(self, call, dev, stream, args, invoke) -> None:
        """WARP_STAGED_EX: one graph over the staging arrays; the copies run outside it."""
        from tapegrad.cuda.graph import ScopedCapture, capture_launch
        key = (id(call), dev.alias)
        hit = self._single.get(key)
        if hit is None:
            staging = self._staging(call, args)
            with ScopedCapture(stream=stream, force_module_load=False) as cap:
                invoke(staging)
            hit = self._single[key] = (staging, cap.graph)
        staging, graph = hit
        self._copies(call, args, staging, into=True)
        capture_launch(graph, stream=stream)
        self._copies(call, args, staging, into=False)

    # ------------------------------------------------------------------------- staging
    def _staging(self, call, args):
        """Persistent arrays the graph works on; unstaged inputs are copied in once, here."""
        staging = []
        for (kind, _, _, p, _), a in zip(call.slots, args):
            if kind == ffi_plan.VALUE:
                staging.append(a)
                continue
            s = tapegrad.empty(a.shape, dtype=a.dtype, device=a.device)
            if kind != ffi_plan.OUT and self.stage_in is not None and p.name not in self.stage_in:
                copy_array(s, a)
            staging.append(s)
        return staging

    def _copies(self, call, args, staging, into):
        for (kind, _, _, p, _), a, s in zip(call.slots, args, staging):
            if kind == ffi_plan.VALUE:
                continue
            if into and kind == ffi_plan.OUT:
                zero_array(s)                 # outputs start at zero, as without staging
            elif into and (self.stage_in is None or p.name in self.stage_in):
                copy_array(s, a)
            if not into and kind != ffi_plan.IN and (self.stage_out is None or p.name in self.stage_out):
                copy_array(a, s)
