"""The kernel cache's own failures (issue 24 item 10): temporaries of interrupted builds are
cleaned up, a full or read-only cache directory and a ``TAPEGRAD_CACHE`` that names no
directory are clear errors naming the directory and the fix, and a FIFO or a directory where
an entry should be is rebuilt or refused, never a hang. Builds that are killed, or that run on
a tiny or read-only file system (a tmpfs in a private mount namespace), run in subprocesses."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

import tapegrad as tg
from tapegrad import build

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals, FIFOs and mounts")

_CHILD = textwrap.dedent('''
    import os, sys
    import numpy as np
    import tapegrad as tg

    @tg.kernel(key="cache_failures.k")
    def k(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = 2.0 * x[i] + SALT

    def run():
        x = tg.array(np.arange(8, dtype=np.float32))
        y = tg.zeros(8, dtype=tg.float32)
        tg.launch(k, 8, inputs=[x, y])
        assert np.array_equal(y.numpy(), 2 * np.arange(8) + SALT), y.numpy()

    try:
        run()
        print("CHILD OK")
    except Exception as e:
        print("CHILD ERROR", type(e).__name__, e)
        if len(sys.argv) > 1:                 # the process stays usable: another cache works
            os.environ["TAPEGRAD_CACHE"] = sys.argv[1]
            run()
            print("CHILD RECOVERED")
''')


def _script(tmp_path, salt: float):
    p = tmp_path / f"child_{str(salt).replace('.', '_')}.py"
    p.write_text(_CHILD.replace("SALT", repr(float(salt))))
    return p


def _env(cache, **extra):
    return dict(os.environ, TAPEGRAD_CACHE=str(cache), PYTHONWARNINGS="default", **extra)


def _temporaries(cache):
    return sorted(n for n in os.listdir(cache) if n.startswith(".tgtmp-"))


def _slow_compiler(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    w = tmp_path / "slow-cxx"
    w.write_text(f"#!/bin/sh\nsleep 120\nexec {cxx} \"$@\"\n")
    w.chmod(0o755)
    return str(w)


def _start_stalled_build(tmp_path, cache):
    """A child whose build stalls in the compiler, once its temporaries exist."""
    script = _script(tmp_path, 7.0)
    p = subprocess.Popen([sys.executable, str(script)], env=_env(cache, TAPEGRAD_CXX=_slow_compiler(tmp_path)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (cache.exists() and _temporaries(cache)):
        assert p.poll() is None, p.communicate()
        time.sleep(0.2)
    assert _temporaries(cache), "the build never wrote its temporaries"
    return p


# ------------------------------------------------------------------------------ temporaries

def test_a_killed_build_leaves_temporaries_the_next_build_removes(tmp_path):
    cache = tmp_path / "cache"
    p = _start_stalled_build(tmp_path, cache)
    os.killpg(p.pid, signal.SIGKILL)       # the whole group: the child and its compiler
    p.communicate(timeout=60)
    left = _temporaries(cache)
    assert left and all(n.startswith(f".tgtmp-{p.pid}.") for n in left), left   # named by the dead pid
    r = subprocess.run([sys.executable, str(_script(tmp_path, 3.0))], env=_env(cache), capture_output=True,
                       text=True, timeout=600)
    assert "CHILD OK" in r.stdout, r.stdout + r.stderr[-3000:]
    assert _temporaries(cache) == []


def test_ctrl_c_during_a_build_leaves_no_temporaries(tmp_path):
    cache = tmp_path / "cache"
    p = _start_stalled_build(tmp_path, cache)
    os.kill(p.pid, signal.SIGINT)          # Ctrl-C reaches the Python process
    out, err = p.communicate(timeout=120)
    os.killpg(p.pid, signal.SIGKILL) if _group_alive(p.pid) else None   # the orphaned `sleep`
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err[-3000:]
    assert _temporaries(cache) == []


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def test_sweep_removes_only_temporaries_of_dead_processes(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = build.host_tag()
    names = {f".tgtmp-{dead.pid}.{host}-tg_x-abc.so": False, f".tgtmp-{os.getpid()}.{host}-w-def.cpp": True,
             f".tgtmp-{dead.pid}.0badc0de-w-ghi.so": True,     # another host's: its pids are not ours
             f".tgtmp-{dead.pid}.0badc0de-w-jkl.so": False,    # ... unless a day old
             ".tmp-old.so": False, ".tmp-new.so": True, "tgk_f_0123.so": True, ".tapegrad.lock": True}
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    old = time.time() - 2 * 3600
    os.utime(tmp_path / ".tmp-old.so", (old, old))       # an older tapegrad's temporary, long abandoned
    older = time.time() - 2 * 86400
    os.utime(tmp_path / f".tgtmp-{dead.pid}.0badc0de-w-jkl.so", (older, older))
    assert build.sweep_temporaries(str(tmp_path), force=True) == 3
    assert {n: (tmp_path / n).exists() for n in names} == names


# ------------------------------------------------------------------------------ the directory

@pytest.mark.parametrize("what", ["file", "devnull", "under_file"])
def test_tapegrad_cache_that_names_no_directory_says_so(tmp_path, monkeypatch, what):
    f = tmp_path / "afile"
    f.write_text("x")
    target, words = {"file": (str(f), "it is a regular file"),
                     "devnull": ("/dev/null", "it is a character device"),
                     "under_file": (str(f / "cache"), "a part of its path is a file")}[what]
    monkeypatch.setenv("TAPEGRAD_CACHE", target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # no false "damaged entry" warning first
        with pytest.raises(tg.CacheDirError) as e:
            build.cache_dir()
    msg = str(e.value)
    assert target in msg and words in msg and "TAPEGRAD_CACHE=" in msg and "chmod" not in msg, msg


def _private_tmpfs_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=4k tmpfs $d"],
                       capture_output=True, timeout=60)
    return r.returncode == 0


def _run_on_tmpfs(tmp_path, options, fallback):
    d = tmp_path / "mnt"
    d.mkdir()
    script = _script(tmp_path, 5.0)
    cmd = f'mount -t tmpfs -o {options},mode=0700 tmpfs "{d}" && exec "{sys.executable}" "{script}" "{fallback}"'
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", cmd], env=_env(d), capture_output=True, text=True,
                       timeout=600)
    return str(d), r


@pytest.mark.skipif(not _private_tmpfs_works(), reason="needs `unshare -Urm` and tmpfs mounts (user namespaces)")
@pytest.mark.parametrize("options,words", [("size=4k", "no space left on device"), ("ro", "read-only")],
                         ids=["full", "read_only"])
def test_a_full_or_read_only_cache_is_a_clear_error_and_the_process_stays_usable(tmp_path, options, words):
    d, r = _run_on_tmpfs(tmp_path, options, tmp_path / "fallback")
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    line = next((x for x in out.splitlines() if x.startswith("CHILD ERROR")), "")
    assert line.startswith("CHILD ERROR CacheDirError"), out + r.stderr[-3000:]
    assert d in line and words in line and "TAPEGRAD_CACHE=" in line, line
    assert "CHILD RECOVERED" in out


@pytest.mark.skipif(os.getuid() == 0, reason="root writes into a mode-0500 directory")
def test_a_cache_dir_without_write_permission_is_a_clear_error(tmp_path):
    d = tmp_path / "ro"
    d.mkdir(mode=0o500)
    r = subprocess.run([sys.executable, str(_script(tmp_path, 6.0)), str(tmp_path / "fallback")], env=_env(d),
                       capture_output=True, text=True, timeout=600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("CHILD ERROR")), "")
    assert "CacheDirError" in line and str(d) in line and "permission denied" in line, r.stdout + r.stderr[-2000:]
    assert "CHILD RECOVERED" in r.stdout


# ------------------------------------------------------------------------------ entries

@pytest.fixture
def built_cache(tmp_path):
    cache = tmp_path / "cache"
    script = _script(tmp_path, 9.0)
    r = subprocess.run([sys.executable, str(script)], env=_env(cache), capture_output=True, text=True, timeout=600)
    assert "CHILD OK" in r.stdout, r.stdout + r.stderr[-3000:]
    return script, cache


def _kernel_files(cache, suffix):
    found = sorted(p for p in cache.iterdir() if p.name.startswith("tgk_k_") and p.name.endswith(suffix))
    assert found, sorted(p.name for p in cache.iterdir())
    return found


@pytest.mark.parametrize("which", [".so", ".so.sum", ".dep"], ids=["binary", "checksum", "manifest"])
def test_a_fifo_where_an_entry_should_be_is_rebuilt_without_hanging(built_cache, which):
    script, cache = built_cache
    for p in _kernel_files(cache, which):
        p.unlink()
        os.mkfifo(p, 0o600)
    r = subprocess.run([sys.executable, str(script)], env=_env(cache), capture_output=True, text=True,
                       timeout=300)      # opening a FIFO for reading used to block here forever
    assert "CHILD OK" in r.stdout, r.stdout + r.stderr[-3000:]
    if which != ".dep":                  # the binary and its record: warned and rebuilt as a file again
        assert "FIFO" in r.stderr and "rebuilding" in r.stderr, r.stderr[-3000:]
    for p in _kernel_files(cache, which):
        assert p.is_file() or (which == ".dep" and not p.exists())


def test_a_directory_where_an_entry_should_be_is_refused_naming_it(built_cache):
    script, cache = built_cache
    (so,) = _kernel_files(cache, ".so")
    so.unlink()
    so.mkdir()
    (so / "inside").write_text("keep me")
    r = subprocess.run([sys.executable, str(script)], env=_env(cache), capture_output=True, text=True, timeout=300)
    line = next((x for x in r.stdout.splitlines() if x.startswith("CHILD ERROR")), "")
    assert "CacheDirError" in line and str(so) in line and "is a directory" in line and "rm -r" in line, \
        r.stdout + r.stderr[-3000:]
    assert (so / "inside").read_text() == "keep me"     # nothing of the user's is deleted
