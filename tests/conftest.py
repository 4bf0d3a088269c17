"""Test configuration: markers that skip by themselves, and the ``device`` fixture.

Markers (set them per test, or per module with ``pytestmark = pytest.mark.torch``):

    cuda     needs a CUDA GPU and cupy (``tg.is_cuda_available()``)
    torch    needs PyTorch            } with ``cuda`` as well: the framework's CUDA build
    paddle   needs PaddlePaddle       } (``torch.cuda.is_available()``, a paddle compiled with
    jax      needs JAX                }  CUDA, a JAX GPU backend)
    slow     long-running (fresh processes, 2^31-thread launches, training runs): left out of the
             default run; ``--full`` (or any explicit ``-m``, e.g. ``-m ""``) runs them too.
             Whole modules are listed in ``SLOW_MODULES`` below.

A test carrying a marker whose requirement is missing is skipped with the reason, so test files
hold no ``importorskip``/``skipif`` lines of their own for these. Two exceptions: a module that
imports a framework at its top keeps ``pytest.importorskip`` for that import (a marker cannot
skip a module that fails to import), and a test that needs tapegrad's GPU but the framework on
the CPU keeps ``skipif(not tg.is_cuda_available())`` instead of ``cuda`` (which, next to a
framework marker, asks for the framework's CUDA build). The checks import nothing
until a collected test carries the marker (``import tapegrad`` imports no framework either).

``device``: a test taking a ``device`` argument runs once per device, "cpu" and, on a machine
with a GPU, "cuda:0" (marked ``cuda``); the value is the device name.

``TAPEGRAD_CHECK_IR=1`` is set for the whole session: the kernel-language compiler checks its IR
between passes (`tapegrad.lang.check`), which production compiles skip.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys

import pytest

os.environ.setdefault("TAPEGRAD_CHECK_IR", "1")

import tapegrad as tg  # noqa: E402  (after TAPEGRAD_CHECK_IR: the language reads it at import)


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@functools.lru_cache(maxsize=None)
def _cuda() -> bool:
    try:
        return bool(tg.is_cuda_available())
    except Exception:  # noqa: BLE001  a broken driver/cupy means "no GPU" for the tests
        return False


def _torch_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _paddle_cuda() -> bool:
    import paddle
    return paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def _jax_cuda() -> bool:
    import jax
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:   # no GPU backend
        return False


# marker -> (available?, reason when not, the framework's own CUDA check for "marker + cuda")
_FRAMEWORKS = {
    "torch": (lambda: _importable("torch"), "needs PyTorch", _torch_cuda),
    "paddle": (lambda: _importable("paddle"), "needs PaddlePaddle", _paddle_cuda),
    "jax": (lambda: _importable("jax"), "needs JAX", _jax_cuda),
}


@functools.lru_cache(maxsize=None)
def _check(marker: str) -> str | None:
    """Why tests with ``marker`` cannot run here (None: they can). ``marker`` may be
    "<framework>+cuda" for the framework's CUDA build."""
    if marker == "cuda":
        return None if _cuda() else "needs a CUDA GPU and cupy"
    name, _, cuda = marker.partition("+")
    available, reason, cuda_check = _FRAMEWORKS[name]
    if not available():
        return reason
    if cuda and not cuda_check():
        return f"needs a CUDA-enabled {name}"
    return None


# test modules (relative to tests/) whose every test is slow: each spawns fresh Python processes,
# launches 2^31 threads or trains over several processes
SLOW_MODULES = frozenset({
    "bridges/test_jax_multidevice.py",    # child processes with 4 host devices (pmap, shard_map)
    "core/test_cache_healing.py",         # a child process per damaged cache entry
    "core/test_dlpack_lifetime.py",       # child processes that exit with live views
    "core/test_large_launch.py",          # 2^31-thread launches, arrays past 2^31 elements
    "lang/test_direct_cache.py",          # fresh processes loading kernels from the cache
    "examples/test_distributed.py",       # DistributedDataParallel and jax.distributed, 2 processes each
})
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="run the whole suite, the tests marked slow included (the default run leaves them out)")


def _runs_slow(config) -> bool:
    """--full, or an explicit -m (``-m ""`` selects everything, ``-m slow`` the slow tests)."""
    if config.getoption("--full") or config.option.markexpr:
        return True
    return any(a == "-m" or a.startswith("-m") for a in config.invocation_params.args)


def _mark_slow_modules(items) -> None:
    for item in items:
        rel = os.path.relpath(str(item.path), _TESTS_DIR).replace(os.sep, "/")
        if rel in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config, items):
    _mark_slow_modules(items)
    if not _runs_slow(config):
        slow = [item for item in items if item.get_closest_marker("slow") is not None]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]
            config.stash[_SLOW_LEFT_OUT] = len(slow)
    for item in items:
        names = {m.name for m in item.iter_markers()}
        needs = [m for m in ("cuda", "torch", "paddle", "jax") if m in names]
        if "cuda" in names:
            needs += [f"{m}+cuda" for m in ("torch", "paddle", "jax") if m in names]
        for need in needs:
            reason = _check(need)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


_SLOW_LEFT_OUT = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = config.stash.get(_SLOW_LEFT_OUT, 0)
    if n:
        terminalreporter.write_line(f"{n} slow tests left out (the default run); the full suite: "
                                    "python -m pytest --full")


def _devices():
    devs = ["cpu"]
    if _cuda():
        devs.append(pytest.param("cuda:0", marks=pytest.mark.cuda))
    return devs


@pytest.fixture(params=_devices())
def device(request) -> str:
    """The device a test runs on: "cpu", and "cuda:0" where a GPU is present."""
    return request.param


@pytest.fixture(autouse=True)
def _cpu_tests_stay_on_the_cpu(request, monkeypatch):
    """A test not marked ``cuda`` runs with the CPU as its default device, on a GPU machine too.

    Such tests are written for (and run by CI on) a CPU-only machine, where an array made
    without ``device=`` lands on the CPU; on a GPU machine Warp's rule makes ``cuda:0`` the
    default and the test would mix devices. Processes the test starts see no GPU either
    (``CUDA_VISIBLE_DEVICES`` is read once per process, when the driver starts: this process
    started it while collecting, so only the children are affected). Tests marked ``cuda`` (the
    ``device`` fixture's CUDA case among them) keep the machine's default. Threads a test starts
    keep the machine's default (a scoped device is per thread)."""
    if request.node.get_closest_marker("cuda") is not None or not _cuda():
        yield
        return
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with contextlib.ExitStack() as stack:
        stack.enter_context(tg.ScopedDevice("cpu"))
        if "jax" in sys.modules:     # JAX arrays made without a device land on the CPU too
            jax = sys.modules["jax"]
            stack.enter_context(jax.default_device(jax.devices("cpu")[0]))
        yield
