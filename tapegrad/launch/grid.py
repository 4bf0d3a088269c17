"""The launch grid: ``dim`` checked into a ``LaunchBounds`` (validated once per distinct ``dim``),
and the check that a grid does not overrun an array every thread indexes by ``tid()`` unguarded."""
from __future__ import annotations

import numpy as np

from .. import types
from ..array import array
from ..indexedarray import indexedarray
from ..lang import facts

__all__ = ["MAX_LAUNCH_SIZE", "NARROW_LAUNCH_SIZE", "launch_bounds", "make_bounds", "check_grid"]


MAX_LAUNCH_SIZE = 2 ** 63 - 1       # threads in one launch: the grid loops' index is an int64
NARROW_LAUNCH_SIZE = 2 ** 31 - 1    # launches up to this size run the default build (int32 tid())


_BOUNDS: dict = {}   # dim -> (dim tuple, LaunchBounds bytes): validated once per distinct dim

def launch_bounds(dim):
    try:
        hit = _BOUNDS.get(dim)
    except TypeError:  # unhashable (a list)
        hit = None
    if hit is not None:
        return hit[0], types.LaunchBounds.from_buffer_copy(hit[1])
    dims, b = make_bounds(dim)
    if len(_BOUNDS) < 1024:
        try:
            _BOUNDS[dim] = (dims, bytes(b))
        except TypeError:
            pass
    return dims, b

def make_bounds(dim):
    if isinstance(dim, (int, np.integer)):
        dim = (int(dim),)
    try:
        if isinstance(dim, (str, bytes, float)) or any(isinstance(d, (str, bytes, float)) for d in dim):
            raise TypeError
        dim = tuple(int(d) for d in dim)
    except TypeError:
        raise TypeError(f"launch: dim must be an int or a tuple of up to {types.MAX_DIMS} ints, got {dim!r}") from None
    if not 1 <= len(dim) <= types.MAX_DIMS or any(d < 0 for d in dim):
        raise ValueError(f"launch: dim must have 1..{types.MAX_DIMS} non-negative entries, got {dim}")
    if any(d > MAX_LAUNCH_SIZE for d in dim):
        raise ValueError(f"launch: dim {dim} has an extent over {MAX_LAUNCH_SIZE} (2^63 - 1, the int64 launch bounds)")
    size = 1
    for d in dim:
        size *= d
    if size > MAX_LAUNCH_SIZE:
        # Python ints do not overflow: the product is exact, so (2^32, 2^32) is refused here
        # instead of wrapping to 0 threads in the int64 launch bounds
        raise ValueError(f"launch: dim {dim} has {size} threads; at most {MAX_LAUNCH_SIZE} (2^63 - 1, the "
                         "int64 thread index) are supported: split the launch, or loop inside the kernel")
    b = types.LaunchBounds()
    for k, d in enumerate(dim):
        b.shape[k] = d
    b.ndim = len(dim)
    b.size = size
    return dim, b

def check_grid(kernel, checks, dim, size, args, vals):
    """Raise ValueError when the grid ``dim`` (``size`` threads) overruns an array the kernel
    indexes by ``tid()`` unguarded (``checks``: its ``lang.facts.TidAccess``es). A tapegrad
    array's shape is read from the array (a descriptor's ctypes fields cost ~0.3 us a read)."""
    for a in checks:
        p, d = a.param, a.dim
        v = args[p]
        # a packed tapegrad array has its parameter's ndim, so dimension d exists
        if v.__class__ is array:
            n = v._shape[d]
        elif isinstance(v, indexedarray):     # its indexed shape (index arrays' lengths)
            n = v.shape[d] if v.data is not None and d < len(v.shape) else None
        else:
            n = vals[p].shape[d] if d < vals[p].ndim else None
        if n is not None:
            # a lone i = tid() takes every value of the grid
            ext = size if a.components == 1 else facts.tid_extent(a.component, a.components, dim)
            if ext > n:
                raise ValueError(facts.overrun_message(kernel, dim, (a, ext, n), "launch"))
