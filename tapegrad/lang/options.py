"""Module options (Warp's ``set_module_options`` / ``get_module_options``): one table, keyed by
the Python module name kernels are defined in.

The kernel decorator reads ``enable_backward`` from it when the decorator is not given one;
kernel loads read ``mode`` (``"release"``/``"debug"``; None: ``tg.config.mode``), and a change
of it takes effect at the module's next launch (the other build is compiled or loaded then); the
other options are stored and returned for code that reads them back (tapegrad's compiler
flags do not depend on them). ``tapegrad.runtime`` exposes the public functions.
"""
from __future__ import annotations

import threading

from ..config import check_mode

__all__ = ["DEFAULTS", "module_options", "update_module_options", "add_options_listener"]

# Warp 1.19's option names and defaults (``wp.get_module_options()``)
DEFAULTS = {
    "max_unroll": 16, "enable_backward": True, "enable_mathdx_gemm": None, "enable_mathdx_solver": None,
    "enable_mathdx_fft": None, "fast_math": False, "fuse_fp": True, "lineinfo": False, "cuda_output": None,
    "mode": None, "optimization_level": None, "cpu_compiler_flags": None, "block_dim": 256,
    "compile_time_trace": False, "strip_hash": False, "extra_build_options": None, "deterministic": None,
    "deterministic_max_records": 0, "default_grid_stride": None,
}
_BOOLS = ("enable_backward", "fast_math", "fuse_fp", "lineinfo", "compile_time_trace", "strip_hash")

_lock = threading.Lock()
_TABLE: dict = {}   # module name -> its options (a full copy of DEFAULTS, updated)
_LISTENERS: list = []   # callables run after options change (the kernel loader's cached choices)


def add_options_listener(fn) -> None:
    """Call ``fn()`` after every ``update_module_options``."""
    _LISTENERS.append(fn)


def module_options(name: str) -> dict:
    """A copy of the options of the Python module ``name`` (the defaults when never set)."""
    with _lock:
        return dict(_TABLE.get(name, DEFAULTS))


def update_module_options(name: str, options: dict, who: str = "set_module_options") -> None:
    """Merge ``options`` into module ``name``'s options.

    Raises:
        TypeError: ``options`` is not a dict, or a boolean option is not a bool, or
            ``block_dim``/``max_unroll`` is not an int.
        ValueError: an option name Warp does not have; a non-positive ``block_dim``; a ``mode``
            other than None, "release" or "debug".
    """
    if not isinstance(options, dict):
        raise TypeError(f"{who}(options): expected a dict like {{'enable_backward': False}}, "
                        f"got {type(options).__name__}")
    unknown = sorted(k for k in options if k not in DEFAULTS)
    if unknown:
        raise ValueError(f"{who}(options): unknown option(s) {unknown}; expected some of {sorted(DEFAULTS)}")
    for k, v in options.items():
        if k in _BOOLS and not isinstance(v, bool):
            raise TypeError(f"{who}(options): '{k}' expects a bool, got {v!r}")
        if k in ("block_dim", "max_unroll") and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{who}(options): '{k}' expects an int, got {v!r}")
        if k == "block_dim" and v <= 0:
            raise ValueError(f"{who}(options): 'block_dim' expects a positive int, got {v}")
        if k == "mode" and v is not None:
            check_mode(v, f"{who}(options): 'mode'")
    with _lock:
        _TABLE.setdefault(name, dict(DEFAULTS)).update(options)
    for fn in list(_LISTENERS):
        fn()
