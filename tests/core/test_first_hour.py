"""A new user's first hour (issue 29): native helpers built at install, a word when kernels compile.

- The three native helpers (launch, DLPack capsules, host memset) are compiled by ``setup.py``
  into ``tapegrad/native_libs/``; a fresh process with an empty kernel cache launches three
  times and compiles nothing but the kernel (before: the second launch compiled the launch
  helper, 0.6 s here). An edited source does not match its installed library: the helper is
  then compiled into the kernel cache (the fallback).
- Every module build or load says one line on the ``"tapegrad"`` logger (compiled or cached),
  printed on stderr by default, silenced by ``tg.config.verbose = False`` or ``quiet = True``.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import native

_CHILD = textwrap.dedent('''
    import os, sys, time
    import numpy as np
    import tapegrad as tg
    from tapegrad import native
    from tapegrad.launch import fastlaunch
    if os.environ.get("TG_TEST_LIB_DIR"):   # the libraries setup.py built for this test
        native.LIB_DIR = os.environ["TG_TEST_LIB_DIR"]
    if sys.argv[1] == "quiet":
        tg.config.quiet = True
    elif sys.argv[1] == "silent":
        tg.config.verbose = False
    elif sys.argv[1] == "logging":
        import logging
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="ROOT %(name)s %(message)s")

    @tg.kernel(key="first_hour.scale")
    def scale(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32), a: float):
        i = tg.tid()
        y[i] = x[i] * a

    x = tg.array(np.arange(16, dtype=np.float32))
    y = tg.zeros(16, dtype=tg.float32)
    for _ in range(3):
        tg.launch(scale, dim=16, inputs=[x, y, 2.0])
    assert np.array_equal(y.numpy(), 2 * np.arange(16)), y.numpy()
    assert fastlaunch.error() is None and sum(fastlaunch.stats()) > 0, (fastlaunch.error(), fastlaunch.stats())
    a = tg.array(np.arange(5.0))
    assert np.from_dlpack(a).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    print("CHILD OK")
''')


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def lib_dir(tmp_path_factory):
    """The helper libraries ``setup.py build_ext`` makes of the checkout's sources, as an install
    does (into a temporary folder: the test does not depend on when the checkout was installed)."""
    out = tmp_path_factory.mktemp("build_ext")
    p = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "-b", str(out / "lib"), "-t", str(out / "tmp")],
                       cwd=_ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return str(out / "lib" / "tapegrad" / "native_libs")


def _child(tmp_path, mode, cache, **env):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    p = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TAPEGRAD_CACHE=str(cache), **env))
    assert p.returncode == 0 and "CHILD OK" in p.stdout, f"rc {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return p


@pytest.mark.parametrize("name", sorted(native.HELPERS))
def test_setup_builds_each_helper_from_the_source_as_it_is(lib_dir, name):
    path = native.prebuilt_path(name, native.helper_source(name), lib_dir)
    assert path is not None, (name, os.listdir(lib_dir))
    assert os.path.dirname(path) == lib_dir
    # an edited source is not run with a stale library
    assert native.prebuilt_path(name, native.helper_source(name) + "\n/* edited */\n", lib_dir) is None


def test_a_fresh_process_compiles_no_helper_when_launching(tmp_path, lib_dir):
    cache = tmp_path / "cache"
    p = _child(tmp_path, "default", cache, TG_TEST_LIB_DIR=lib_dir)
    built = sorted(f for f in os.listdir(cache) if f.endswith(".so"))
    assert [f for f in built if f.startswith("tg_")] == [], built       # no helper compiled on the fly
    assert any(f.startswith("tgk_") for f in built), built              # the kernel was
    assert "(compiled)" in p.stderr and "first_hour.scale" in p.stderr, p.stderr


@pytest.mark.slow   # a child process compiling the helpers / a second child run
def test_the_fallback_compiles_a_helper_when_no_installed_library_matches(tmp_path):
    cache = tmp_path / "cache"
    p = _child(tmp_path, "default", cache, TAPEGRAD_PREBUILT_HELPERS="0")
    built = os.listdir(cache)
    for name in ("tg_fastlaunch", "tg_dlpack"):
        assert any(f.startswith(name + "_") and f.endswith(".so") for f in built), (name, built)
    assert "tg_fastlaunch_" in p.stderr and "(compiled)" in p.stderr, p.stderr    # said, not silent


def test_one_line_per_module_build_then_cached_and_silenced_by_config(tmp_path):
    cache = tmp_path / "cache"
    first = _child(tmp_path, "default", cache).stderr.splitlines()
    compiled = [s for s in first if "first_hour.scale" in s]
    assert len(compiled) == 1 and compiled[0].startswith("tapegrad: module ") and \
        "on device 'cpu' took" in compiled[0] and compiled[0].endswith("(compiled)"), first
    again = [s for s in _child(tmp_path, "default", cache).stderr.splitlines() if "first_hour.scale" in s]
    assert len(again) == 1 and again[0].endswith("(cached)"), again
    for mode in ("quiet", "silent"):
        assert "tapegrad:" not in _child(tmp_path, mode, tmp_path / f"cache_{mode}").stderr, mode


@pytest.mark.slow   # a child process compiling the helpers / a second child run
def test_a_program_that_configures_logging_gets_each_line_once_through_its_handlers(tmp_path):
    p = _child(tmp_path, "logging", tmp_path / "cache")
    assert p.stdout.count("ROOT tapegrad module ") == 1, p.stdout
    assert "tapegrad: module" not in p.stderr, p.stderr      # not printed a second time


class _Records(logging.Handler):
    """Collects the "tapegrad" logger's records (whatever the handler policy: the test process may
    have had its first build before pytest's capture was on)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def records():
    h = _Records()
    logger = logging.getLogger("tapegrad")
    logger.addHandler(h)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield h.messages
    finally:
        logger.removeHandler(h)
        logger.setLevel(level)


def test_the_logger_records_hit_and_miss_in_process(tmp_path, monkeypatch, records):
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tg.config, "verbose", None)
    monkeypatch.setattr(tg.config, "quiet", False)

    @tg.kernel(key="first_hour.inproc")
    def add1(x: tg.array(dtype=tg.float64)):
        i = tg.tid()
        x[i] = x[i] + 1.0

    x = tg.array(np.zeros(4))
    tg.launch(add1, 4, inputs=[x])
    msgs = [m for m in records if "first_hour.inproc" in m]
    assert len(msgs) == 1 and msgs[0].endswith("(compiled)"), records
    np.testing.assert_array_equal(x.numpy(), np.ones(4))


def test_verbose_true_names_the_generated_source(tmp_path, monkeypatch, records):
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tg.config, "verbose", True)
    monkeypatch.setattr(tg.config, "quiet", False)

    @tg.kernel(key="first_hour.verbose")
    def neg(x: tg.array(dtype=tg.float64)):
        i = tg.tid()
        x[i] = -x[i]

    tg.launch(neg, 2, inputs=[tg.array(np.ones(2))])
    paths = [m.rsplit(" ", 1)[-1] for m in records if "generated source" in m]
    assert paths and all(os.path.isfile(p) and p.endswith(".cpp") for p in paths), records
    assert any("extern" in open(p).read() for p in paths)
