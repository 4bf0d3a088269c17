"""The build log, a word when kernels compile: one line per module build or load (``logging.getLogger("tapegrad")``).

Every time a kernel's module is built or loaded for a device, the ``"tapegrad"`` logger gets one
INFO record, as Warp prints one line per module::

    tapegrad: module loss_8a1f2c (kernel 'loss') on device 'cpu' took 812 ms (compiled)
    tapegrad: module loss_8a1f2c (kernel 'loss') on device 'cpu' took 3 ms (cached)

A compile outside a kernel module (a native helper built as a fallback, the JAX FFI handler)
gets one line too. ``tg.config`` decides what is said: ``verbose=None`` (the default) these
lines; ``verbose=True`` also DEBUG details (the generated source's path in the kernel cache,
the native helpers loaded); ``verbose=False`` or ``quiet=True`` nothing.

Where the lines go, decided at the first build of the process: a program that has configured
``logging`` by then (a handler on the root logger or on ``"tapegrad"``) gets them through its own
handlers; otherwise tapegrad prints them on ``sys.stderr`` itself (``tapegrad: ...``), as Warp
does, and keeps them off the root logger (``propagate = False``), so that a handler a library
installs later (paddle adds one to the root logger) neither repeats nor reformats them.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time

from .config import config

__all__ = ["logger", "module_load", "loaded", "compiled", "debug"]

logger = logging.getLogger("tapegrad")

_tls = threading.local()     # depth: module_load contexts open in this thread; compiles: count
_installed = False
_install_lock = threading.Lock()


class _StderrHandler(logging.Handler):
    """Prints on the ``sys.stderr`` of the moment (pytest's capture, a redirected stream)."""

    def emit(self, record):
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001  a closed stream must not fail a launch
            self.handleError(record)


def _enabled(level: int) -> bool:
    verbose = config.verbose
    if verbose is False or getattr(config, "quiet", False):
        return False
    return level >= logging.INFO or verbose is True


def _say(level: int, msg: str, *args) -> None:
    global _installed
    if not _enabled(level):
        return
    if not _installed:
        with _install_lock:
            if not _installed:
                if not logger.handlers and not logging.getLogger().handlers:
                    h = _StderrHandler()
                    h.setFormatter(logging.Formatter("tapegrad: %(message)s"))
                    logger.addHandler(h)
                    logger.propagate = False
                if logger.level == logging.NOTSET:
                    logger.setLevel(logging.DEBUG)   # what is said is chosen by _enabled (tg.config)
                _installed = True
    logger.log(level, msg, *args)


def _seconds(dt: float) -> str:
    return f"{dt * 1e3:.0f} ms" if dt < 10 else f"{dt:.1f} s"


def _device_name(device) -> str:
    return str(getattr(device, "alias", None) or device)


def _what(name: str, kernels) -> str:
    keys = [getattr(k, "key", "?") for k in kernels]
    if not keys:
        return f"module {name}"
    listed = ", ".join(f"'{k}'" for k in keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    return f"module {name} ({'kernel' if len(keys) == 1 else 'kernels'} {listed})"


@contextlib.contextmanager
def module_load(name: str, device, kernels=()):
    """Time a kernel module's build or load for ``device``; on success, one INFO line saying
    whether it was compiled (a compile ran inside, ``compiled``) or came from the cache."""
    depth = getattr(_tls, "depth", 0)
    n0 = getattr(_tls, "compiles", 0)
    _tls.depth = depth + 1
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _tls.depth = depth
    loaded(name, device, time.perf_counter() - t0, getattr(_tls, "compiles", 0) != n0, kernels)


def loaded(name: str, device, seconds: float, was_compiled: bool, kernels=()) -> None:
    """Say that module ``name`` was loaded for ``device`` in ``seconds`` (compiled or cached)."""
    _say(logging.INFO, "%s on device '%s' took %s (%s)", _what(name, kernels), _device_name(device),
         _seconds(seconds), "compiled" if was_compiled else "cached")


def compiled(build, path: str):
    """Run ``build()`` (a cache miss of ``tapegrad.build``: a compile writing ``path``) and count
    it; outside a module load, say so itself (native helpers, the JAX FFI handler)."""
    t0 = time.perf_counter()
    out = build()
    _tls.compiles = getattr(_tls, "compiles", 0) + 1
    dt = time.perf_counter() - t0
    stem = os.path.basename(path)
    if getattr(_tls, "depth", 0) == 0:
        device = "cuda" if path.endswith((".cubin", ".ptx")) else "cpu"
        _say(logging.INFO, "%s for device '%s' took %s (compiled)", stem, device, _seconds(dt))
    if path.endswith(".so"):
        _say(logging.DEBUG, "generated source of %s: %s", stem, path[:-3] + ".cpp")
    return out


def debug(msg: str, *args) -> None:
    """A DEBUG line (shown with ``tg.config.verbose = True``)."""
    _say(logging.DEBUG, msg, *args)
