"""Build, cache and load native binaries: the system C++ compiler for the CPU, NVRTC for CUDA.

The one native build path of tapegrad: kernels (``tapegrad.lang.kernel``), the batched host
helpers (``tapegrad.memory_ops``), the DLPack capsule helper (``tapegrad.dlpack.capsules``) and
the JAX FFI handler all compile and load here, through ``load_cpu`` / ``load_cuda``
(``tapegrad.modules`` wraps a loaded kernel binary for launching). This module knows
toolchains, the cache and how to load a binary; it knows nothing about kernels.

Binaries are cached on disk under a content hash of (generated source, target, arch,
compiler identity and flags — for CUDA a fingerprint of the NVRTC found on disk —, tapegrad
version) in ``$TAPEGRAD_CACHE`` or ``~/.cache/tapegrad``. The directory is per-user (mode
0700; one writable by group or others, or owned by another user, is refused: loading a
shared library from it would run anyone's code; checked for every directory the process
builds into, again whenever ``$TAPEGRAD_CACHE`` changes).

Each binary has a sidecar ``<file>.sum`` with its size and sha256, checked before every load;
a damaged entry (truncated, altered, foreign-owned, writable by others, or refused by
``dlopen``) is rebuilt and ``tg.CacheWarning`` names it once. Builds write to a temporary file
in the same directory and ``os.replace`` it into place, under a per-entry lock (a thread lock,
and a POSIX record lock on the directory's ``.tapegrad.lock`` across processes), so threads
and processes asking for the same new binary compile it once and never see a partial file.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import stat
import sys
import threading

from . import buildlog
from .errors import CacheDirError, CacheWarning, CompileError
from .version import __version__

__all__ = ["CompileError", "CacheDirError", "CacheWarning", "cache_dir", "check_cache_dir", "find_cxx",
           "build_cpu", "load_cpu", "build_cuda", "load_cuda", "load_cpu_library", "load_cuda_image",
           "read_entry", "write_entry", "cached_entry", "entry_lock", "nvrtc_identity", "nvrtc_search_dirs",
           "cuda_image_base", "source_digest", "cpu_library_path", "find_cpu", "find_cuda",
           "sweep_temporaries", "host_tag", "CXXFLAGS", "headers_library_path"]

CXXFLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-fopenmp", "-fno-math-errno", "-fvisibility=hidden", "-w"]
NVRTC_FLAGS = ["-std=c++17", "-w"]
_lock = threading.Lock()
_current = (None, None)     # ($TAPEGRAD_CACHE as last seen, the checked directory it names)
_cxx = None
_cxx_real = None            # the path find_cxx()'s driver resolves to


def cache_dir() -> str:
    """The kernel cache directory (``$TAPEGRAD_CACHE`` or ``~/.cache/tapegrad``), created with
    mode 0700 if missing and checked by ``check_cache_dir`` whenever ``$TAPEGRAD_CACHE``
    differs from the previous call (the unchanged case is one environment lookup).

    Raises:
        CacheDirError: the directory is writable by group or others, or owned by another user.
    """
    global _current
    env = os.environ.get("TAPEGRAD_CACHE")
    last_env, last_dir = _current
    if last_dir is not None and env == last_env:
        return last_dir
    d = os.path.abspath(os.path.expanduser(env or "~/.cache/tapegrad"))
    check_cache_dir(d)
    _current = (env, d)
    return d


def check_cache_dir(d: str) -> None:
    """Create ``d`` (mode 0700) if missing and refuse it unless only its owner, you, can write it.

    Raises:
        CacheDirError: ``d`` is writable by group or others, or owned by another user; the
            message names the directory and the fix.
    """
    try:
        st = os.stat(d)
    except FileNotFoundError:
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            st = os.stat(d)
        except OSError as e:
            raise CacheDirError(f"cannot create kernel cache directory {d}: {_reason(e)}. {_FIX}") from None
    except NotADirectoryError:
        raise CacheDirError(f"kernel cache directory {d} cannot exist: a part of its path is a file, not a "
                            f"directory. {_FIX}") from None
    except OSError as e:
        raise CacheDirError(f"cannot use kernel cache directory {d}: {_reason(e)}. {_FIX}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheDirError(f"kernel cache directory {d} is not a directory: it is {_file_kind(st.st_mode)}. {_FIX}")
    if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
        who = "world-writable" if st.st_mode & stat.S_IWOTH else "group-writable"
        raise CacheDirError(f"refusing to use kernel cache directory {d}: it is {who} (mode "
                            f"{stat.S_IMODE(st.st_mode):o}), so another user could plant a library tapegrad "
                            f"would load. Run `chmod go-w {d}` or set TAPEGRAD_CACHE to a private directory.")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheDirError(f"refusing to use kernel cache directory {d}: it is owned by uid {st.st_uid}, not you "
                            f"(uid {os.getuid()}). Set TAPEGRAD_CACHE to a directory you own.")


_FIX = ("Set TAPEGRAD_CACHE to a directory of your own with free space (e.g. TAPEGRAD_CACHE=/tmp/tapegrad-$USER; "
        "it is created if missing), or unset it for ~/.cache/tapegrad")


def _reason(e: OSError) -> str:
    import errno
    what = {errno.ENOSPC: "the file system is full (no space left on device)",
            errno.EDQUOT: "your disk quota is exhausted",
            errno.EROFS: "the file system is read-only",
            errno.EACCES: "permission denied (the directory is not writable by you)",
            errno.EPERM: "operation not permitted"}.get(e.errno)
    return what or (e.strerror or str(e))


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return f"a special file (mode {mode:o})"


def find_cxx():
    """The C++ compiler command (a list) and an identity string for cache keys.

    Order: ``$TAPEGRAD_CXX`` (may contain arguments), ``c++``, ``g++``, ``clang++``, then
    ``python -m ziglang c++`` when the ``ziglang`` package is installed.

    Raises:
        CompileError: no compiler found (the message says how to get one).
    """
    global _cxx, _cxx_real
    if _cxx is not None:
        return _cxx
    env = os.environ.get("TAPEGRAD_CXX")
    cmd = None
    if env:
        import shlex
        cmd = shlex.split(env)
    else:
        for name in ("c++", "g++", "clang++"):
            p = shutil.which(name)
            if p:
                cmd = [p]
                break
    if cmd is None:
        try:
            import importlib.util
            if importlib.util.find_spec("ziglang") is not None:
                cmd = [sys.executable, "-m", "ziglang", "c++"]
        except (ImportError, ValueError):
            pass
    if cmd is None:
        raise CompileError("no C++ compiler found for CPU kernels: install one (e.g. `apt-get install g++`), "
                           "or `pip install ziglang` (tapegrad's [cpu] extra), or set TAPEGRAD_CXX")
    exe = shutil.which(cmd[0]) or cmd[0]
    real = os.path.realpath(exe)
    try:
        st = os.stat(real)
        ident = f"{' '.join(cmd)}|{real}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        ident = " ".join(cmd)
    _cxx = (cmd, ident)
    _cxx_real = real    # _flags_for reads the driver's name from it: no second PATH walk
    return _cxx


def _python_location(source: str, cpp_line: int, kernels) -> str:
    """Map a line of generated C++ back to the nearest ``// @file:line`` marker above it."""
    lines = source.splitlines()
    for k in range(min(cpp_line, len(lines)) - 1, -1, -1):
        text = lines[k].strip()
        if text.startswith("// @"):
            return text[4:]
    return ", ".join(f"{k.func.__code__.co_filename}:{k.func.__code__.co_firstlineno}" for k in kernels)


def _compile_error(what, kernels, source, log, path_hint):
    import re
    loc = None
    m = re.search(rf"{re.escape(path_hint)}\((\d+)\)|{re.escape(os.path.basename(path_hint))}:(\d+)", log)
    if m:
        loc = _python_location(source, int(m.group(1) or m.group(2)), kernels)
    names = ", ".join(f"'{k.key}' ({k.func.__code__.co_filename}:{k.func.__code__.co_firstlineno})" for k in kernels)
    near = f"\n  nearest Python line: {loc}" if loc else ""
    tail = log.strip()
    if len(tail) > 6000:
        tail = tail[:6000] + "\n... (truncated)"
    return CompileError(f"{what} failed for kernel {names}{near}\n{tail}")



def _flags_for(cmd):
    flags = list(CXXFLAGS)
    if "ziglang" in cmd:
        flags.remove("-fopenmp")      # zig's clang ships no OpenMP runtime: run single-threaded
    elif _is_gcc(cmd[0], _cxx_real if _cxx is not None and cmd is _cxx[0] else None):
        # GCC's -O2 cost model ("very-cheap") never vectorizes a loop that needs a run-time
        # overlap check, i.e. any kernel loop (clang's -O2 does): allow those checks; and
        # unswitch loops on invariant conditions (a kernel's `if momentum != 0.0:` inside its
        # while loop), which is what lets such a loop vectorize (tg.optim.SGD: 2.4x -> 1.8x
        # torch's CPU time per step); both only reorder work, results are bit-identical
        flags[1:1] = ["-fvect-cost-model=cheap", "-funswitch-loops"]
    return flags


def _is_gcc(exe, resolved=None) -> bool:
    """Whether ``exe`` is GCC's driver by its resolved name (``c++`` -> ``x86_64-linux-gnu-g++-12``);
    a name that does not say (a ``c++`` that is clang, ccache) gets no GCC-only flags.
    ``resolved``: the path ``exe`` resolves to, when known."""
    name = os.path.basename(resolved or os.path.realpath(shutil.which(exe) or exe))
    return ("g++" in name or "gcc" in name) and "clang" not in name


def _key(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x00")
    return h.hexdigest()


# Temporary files of a build live in the cache directory (renamed into place when finished)
# and are named ``.tgtmp-<pid>.<host>-<tag>-<random><ext>``: a process killed mid-build
# (SIGKILL, a power cut) leaves them behind, and the next build in that directory removes
# those whose process is gone (``sweep_temporaries``). ``<host>`` (a hash of the host name)
# keeps a cache shared by several machines or containers (other pid spaces) from judging
# another host's live build dead; such files are removed only once a day old.
_TMP = ".tgtmp-"
_LEGACY_TMP_AGE = 3600      # older tapegrads named temporaries without a pid: removed after an hour
_FOREIGN_TMP_AGE = 86400
_swept: set = set()


def host_tag() -> str:
    """The host part of this machine's build temporaries' names (a hash of its host name)."""
    return hashlib.sha256(os.uname().nodename.encode() if hasattr(os, "uname") else b"").hexdigest()[:8]


def _mkstemp(d: str, tag: str, suffix: str):
    import tempfile  # only when writing a new binary: a cached load never pays for importing it
    return tempfile.mkstemp(dir=d, prefix=f"{_TMP}{os.getpid()}.{host_tag()}-{tag}-", suffix=suffix)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True          # another user's process, or cannot tell: keep its files
    return True


def sweep_temporaries(d: str, force: bool = False) -> int:
    """Remove the temporary files that builds of processes no longer running left in cache
    directory ``d`` (once per directory and process unless ``force``). Returns how many."""
    if (d in _swept and not force) or sys.platform == "win32":
        return 0
    _swept.add(d)
    import time
    removed, now, host = 0, time.time(), host_tag()
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(d, name)
        if name.startswith(_TMP):
            pid, _, rest = name[len(_TMP):].partition(".")
            if not pid.isdigit():
                continue
            if rest.startswith(host + "-"):
                stale = not _pid_alive(int(pid))
            else:       # another host's (or container's) build: its pids are not ours to test
                try:
                    stale = now - os.lstat(path).st_mtime > _FOREIGN_TMP_AGE
                except OSError:
                    continue
        elif name.startswith(".tmp-") or (name.startswith(".") and name.endswith((".cpp", ".so"))
                                          and name.count("-") >= 1 and not name.startswith(".tapegrad")):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            stale = stat.S_ISREG(st.st_mode) and now - st.st_mtime > _LEGACY_TMP_AGE
        else:
            continue
        if stale:
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
    return removed


def _atomic_write(path, data: bytes):
    d = os.path.dirname(path)
    fd, tmp = _mkstemp(d, "w", os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------ verified cache entries
#
# Every binary in the cache has a sidecar ``<file>.sum`` (written atomically after the
# binary) holding its size and sha256. A load reads the binary, checks both, and only then
# hands the bytes to the driver (CUDA) or the path to dlopen (CPU): a truncated or altered
# file is rebuilt instead of crashing the process. The check costs a read and a hash of a
# file of a few dozen KB (see docs/kernels.md for the figure).

_SUM_MAGIC = "tapegrad-cache-entry 1"
_UNVERIFIED = "no checksum recorded"      # an entry written before checksums: rebuilt quietly
_warned: set = set()


def _unsafe_file(st) -> str | None:
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not you (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


class _NotAFile(OSError):
    """A cache entry's path holds something other than a regular file (a FIFO, a directory...)."""


def _read_file(path: str):
    # plain os calls: half the cost of open() and its buffered reader, per cached load;
    # O_NONBLOCK: opening a FIFO planted where an entry should be must not wait for a writer
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
                 | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotAFile(f"not a regular file but {_file_kind(st.st_mode)}")
        data = os.read(fd, st.st_size + 1)
        while len(data) < st.st_size:     # a short read (rare for regular files)
            more = os.read(fd, st.st_size - len(data) + 1)
            if not more:
                break
            data += more
        return st, data
    finally:
        os.close(fd)


def _read_own(path: str):
    """``(bytes, None)``; ``(None, None)`` when missing; else a problem: unreadable, or a file
    someone else could have written."""
    try:
        st, data = _read_file(path)
    except FileNotFoundError:
        return None, None
    except _NotAFile as e:
        return None, str(e)
    except IsADirectoryError:
        return None, "not a regular file but a directory"
    except OSError as e:
        return None, f"unreadable ({e})"
    return data, _unsafe_file(st)


def read_entry(path: str):
    """Read a cache entry and check it against its sidecar ``<path>.sum``.

    Returns:
        ``(data, problem)``: ``(None, None)`` when there is no entry; ``(bytes, None)`` when
        it is intact; otherwise ``problem`` says what is wrong (``data`` may be None).
    """
    data, problem = _read_own(path)
    if data is None or problem:
        return data, problem
    raw, problem = _read_own(path + ".sum")
    if problem:
        return data, f"its checksum record is {problem}"
    if raw is None:
        return data, _UNVERIFIED
    record = raw[:4096].decode("ascii", "replace")
    fields = dict(line.split(" ", 1) for line in record.splitlines()[1:] if " " in line)
    if not record.startswith(_SUM_MAGIC) or "size" not in fields or "sha256" not in fields:
        return data, "its checksum record is damaged"
    if str(len(data)) != fields["size"]:
        return data, f"{len(data)} bytes, {fields['size']} when it was built (truncated or extended)"
    if hashlib.sha256(data).hexdigest() != fields["sha256"]:
        return data, "its sha256 differs from the one recorded when it was built (altered)"
    return data, None


def write_entry(path: str, data: bytes, tmp: str | None = None, info: str = "") -> None:
    """Publish a cache entry: the binary (``tmp``, a finished file in the same directory, is
    renamed into place; else ``data`` is written atomically), then its sidecar ``.sum``."""
    if tmp is None:
        _atomic_write(path, data)
    else:
        os.replace(tmp, path)
    record = f"{_SUM_MAGIC}\nsize {len(data)}\nsha256 {hashlib.sha256(data).hexdigest()}\n"
    if info:
        record += f"info {info}\n"
    _atomic_write(path + ".sum", record.encode())


def _warn_damaged(path: str, problem: str) -> None:
    if path in _warned:
        return
    _warned.add(path)
    import warnings
    warnings.warn(CacheWarning(f"tapegrad cache entry {path} is damaged: {problem}; rebuilding it"),
                  stacklevel=4)


_entry_locks: dict = {}            # entry path -> threading.Lock (one build per entry in a process)
_lock_fds: dict = {}               # cache dir -> fd of its ".tapegrad.lock" (never closed)


@contextlib.contextmanager
def entry_lock(path: str):
    """Exclusive right to (re)build the cache entry ``path``: a thread lock per entry in this
    process and, where ``fcntl`` exists, a POSIX record lock on one byte of the cache
    directory's ``.tapegrad.lock`` (the byte is chosen by the entry's name) across processes.
    Two different entries never wait for each other (barring a 2^-31 hash collision)."""
    with _lock:
        lk = _entry_locks.get(path)
        if lk is None:
            lk = _entry_locks[path] = threading.Lock()
    with lk:
        fd = _lock_fd(os.path.dirname(path))
        if fd is None:
            yield
            return
        import fcntl
        offset = int(hashlib.sha256(os.path.basename(path).encode()).hexdigest()[:8], 16) & 0x7FFFFFFF
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX, 1, offset)
        except OSError:     # a file system without record locks (some NFS): atomic renames still hold
            yield
            return
        try:
            yield
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)


def _lock_fd(d):
    # One fd per lock file for the life of the process: closing any fd of a file drops every
    # POSIX record lock the process holds on it, so none is ever closed. A lock file deleted
    # since (tg.clear_kernel_cache) is opened anew: other processes lock the new one.
    if sys.platform == "win32":
        return None
    lock_path = os.path.join(d, ".tapegrad.lock")
    with _lock:
        fd = _lock_fds.get(d)
        if fd is not None and fd >= 0:
            try:
                if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except OSError:
                pass
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            fd = -1          # a read-only cache: builds in this process are serialised only
        _lock_fds[d] = fd
    return fd if fd >= 0 else None


def cached_entry(paths, build, force: bool = False):
    """The verified bytes of the first intact entry among ``paths`` (the same entry under its
    possible names, e.g. ``.cubin`` and ``.ptx``), building it with ``build() -> (path, data)``
    when none is intact: missing, damaged (warned once, naming the file) or written before
    checksums. CPU libraries and CUDA images both come through here.

    Args:
        force: rebuild even when an entry verifies (its load failed).
    Returns:
        ``(path, data)``.
    """
    if not force:
        for p in paths:
            data, problem = read_entry(p)
            if problem is None and data is not None:
                return p, data
            if problem is not None:
                break
    with entry_lock(paths[0]):
        for p in paths:
            if os.path.isdir(p) and not os.path.islink(p):   # a build cannot rename a file over it
                raise CacheDirError(f"tapegrad cache entry {p} is a directory, where the cache keeps a file: "
                                    f"remove it (`rm -r {p}`), or set TAPEGRAD_CACHE to another directory")
        if not force:   # re-check under the lock: another thread or process may have just built it
            for p in paths:
                data, problem = read_entry(p)
                if problem is None and data is not None:
                    return p, data
                if problem is not None and problem != _UNVERIFIED:
                    _warn_damaged(p, problem)
        d = os.path.dirname(paths[0])
        sweep_temporaries(d)
        try:
            return buildlog.compiled(build, paths[0])   # one 'tapegrad' log line per compile
        except CacheDirError:
            raise
        except OSError as e:
            import errno
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
                raise CacheDirError(f"cannot write to kernel cache directory {d}: {_reason(e)}. {_FIX}") from e
            raise


# ----------------------------------------------------------------------------------- CPU

def build_cpu(source: str, name: str, kernels=(), include_dirs=()) -> str:
    """Compile ``source`` into a shared library (cached, verified); returns its path.

    A cached entry that fails its check is rebuilt (``tg.CacheWarning`` names it).
    ``include_dirs``: extra ``-I`` folders (a module's ``extra_build_options``; the source names
    them, so its digest, the cache key, follows them).

    Raises:
        CompileError: the compiler failed or none is available.
        CacheDirError: the cache directory is unsafe.
    """
    return _build_cpu(source, name, kernels, False, include_dirs)


def _build_cpu(source, name, kernels, force, include_dirs=()):
    base = cpu_library_path(source_digest(source), name)
    path = headers_library_path(base)
    if path is None:       # a header the last build read is gone: the compile says what now
        path, force = base, True
    cmd, _, flags = _toolchain()
    flags = list(flags) + [f"-I{d}" for d in include_dirs]
    return cached_entry([path], lambda: _compile_cpu(cmd, flags, source, name, kernels, base), force)[0]


# ------------------------------------------------------------ headers a CPU build read
#
# A unit's text names its include folders, not what they hold: a preamble's `#include
# "addon.h"` found in an include folder (or by an absolute path) is not part of the source
# digest, so an edited header would load the binary built from its old text. The compiler
# lists the headers it read outside the system folders (-MMD); those outside tapegrad's own
# package are recorded beside the entry (``<entry>.hdr``, their paths) and the binary is named
# by their contents as well (``<entry>_h<digest>.so``): a lookup hashes the listed headers
# again, so an edited header selects another file name (a rebuild, and a fresh dlopen) and
# the stale binary is never loaded. Units without such headers (every kernel without
# extra_build_options) keep the plain name and pay one stat per lookup.

_HDR_MAGIC = "tapegrad-headers 1"
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _headers_digest(paths) -> str | None:
    h = hashlib.sha256()
    for p in paths:
        try:
            with open(p, "rb") as f:
                h.update(p.encode() + b"\x00" + hashlib.sha256(f.read()).digest())
        except OSError:
            return None
    return h.hexdigest()[:16]


def headers_library_path(base: str) -> str | None:
    """The path of the CPU library of cache entry ``base`` (``cpu_library_path``) for the
    current contents of the headers its last build read (``base`` when it read none); None
    when one of those headers can no longer be read (the caller rebuilds)."""
    raw, problem = _read_own(base[:-3] + ".hdr")
    if raw is None:
        return base
    lines = raw.decode("utf-8", "replace").splitlines()
    if problem or not lines or lines[0] != _HDR_MAGIC:
        return None
    digest = _headers_digest(lines[1:])
    return None if digest is None else f"{base[:-3]}_h{digest}.so"


def _read_headers(dep_file: str, source_path: str) -> list:
    """The headers a compile read (its -MMD make rule), without the unit itself and tapegrad's
    own files."""
    import re
    with open(dep_file, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read().replace("\\\n", " ")
    _, _, deps = text.partition(": ")
    out = []
    for tok in re.findall(r"(?:\\.|[^\s\\])+", deps):
        p = os.path.abspath(re.sub(r"\\(.)", r"\1", tok).replace("$$", "$"))   # make's escapes
        if p != os.path.abspath(source_path) and not p.startswith(_OWN_DIR) and p not in out:
            out.append(p)
    return out


def source_digest(source: str) -> str:
    """The sha256 of a translation unit: what its cache entries are keyed by (with the toolchain),
    so a caller that knows the digest (``lang/direct.py``) finds the binary without the source."""
    return hashlib.sha256(source.encode()).hexdigest()


def cpu_library_path(digest: str, name: str) -> str:
    """The cache path of the library ``build_cpu`` makes of the source with ``source_digest``
    ``digest`` (the compiler, its flags and tapegrad's version are part of the key).

    Raises:
        CacheDirError: the cache directory is unsafe.
    """
    _, ident, flags = _toolchain()
    key = _key(digest, "cpu", ident, " ".join(flags), __version__, sys.platform)
    return os.path.join(cache_dir(), f"{name}_{key[:24]}.so")


def find_cpu(digest: str, name: str):
    """The verified cached library of the source with ``source_digest`` ``digest``, loaded, or
    None when it is missing, damaged (warned and left for the next build to replace) or refused
    by ``dlopen``: the caller then builds from the source.

    Raises:
        CacheDirError: the cache directory is unsafe.
    """
    path = headers_library_path(cpu_library_path(digest, name))
    if path is None:
        return None
    data, problem = read_entry(path)
    if data is None or problem is not None:
        return None
    try:
        return load_cpu_library(path)
    except OSError:
        return None


def _toolchain():
    global _flags
    cmd, ident = find_cxx()
    if _flags is None or _flags[0] is not cmd:
        _flags = (cmd, _flags_for(cmd))
    return cmd, ident, _flags[1]


_flags = None


_WRITE_FAILURES = (("No space left on device", "ENOSPC"), ("Disk quota exceeded", "EDQUOT"),
                   ("Read-only file system", "EROFS"))


def _compile_cpu(cmd, flags, source, name, kernels, path):
    """Compile ``source`` for cache entry ``path`` (``cpu_library_path``); returns ``(the
    library's path, its bytes)``: ``path``, or its headers-named twin when the compile read
    headers outside the system folders (``headers_library_path``)."""
    d = os.path.dirname(path)
    src_path = out_tmp = dep_tmp = None
    import subprocess  # only when compiling: a cached load never pays for importing it
    try:   # from the first temporary on: an interrupt (Ctrl-C) anywhere leaves none behind
        fd, src_path = _mkstemp(d, name, ".cpp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        fd, out_tmp = _mkstemp(d, name, ".so")
        os.close(fd)
        fd, dep_tmp = _mkstemp(d, name, ".d")
        os.close(fd)
        proc = subprocess.run(cmd + flags + ["-MMD", "-MF", dep_tmp, src_path, "-o", out_tmp], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            log = proc.stderr + proc.stdout
            for text, code in _WRITE_FAILURES:   # the compiler could not write its output: not the code's fault
                if text in log:
                    import errno
                    raise OSError(getattr(errno, code), f"{text} (the C++ compiler writing {out_tmp})")
            raise _compile_error("C++ compilation", kernels, source, log, src_path)
        os.chmod(out_tmp, 0o700)
        with open(out_tmp, "rb") as f:
            data = f.read()
        headers = _read_headers(dep_tmp, src_path) if os.path.getsize(dep_tmp) else []
        digest = _headers_digest(headers) if headers else None
        hdr = path[:-3] + ".hdr"
        if digest is not None:
            path = f"{path[:-3]}_h{digest}.so"
        write_entry(path, data, tmp=out_tmp)
        if digest is not None:   # after the binary: a lookup between the two rebuilds, never loads a stale one
            _atomic_write(hdr, ("\n".join([_HDR_MAGIC, *headers]) + "\n").encode())
        elif os.path.exists(hdr):
            os.unlink(hdr)
        os.replace(src_path, path[:-3] + ".cpp")   # kept beside the binary for debugging
    finally:
        for p in (out_tmp, src_path, dep_tmp):
            if p is not None and os.path.exists(p):
                os.unlink(p)
    return path, data


def load_cpu(source: str, name: str, kernels=(), python_api: bool = False, include_dirs=()):
    """Build (or find in the cache), verify and load a CPU library: the one entry point for
    kernels and the native helpers.

    A cache entry that fails its size/sha256 check, or that ``dlopen`` refuses, is rebuilt
    once (warning ``tg.CacheWarning`` naming the file) and loaded again.

    Args:
        source: the C++ translation unit. name: the file name's prefix.
        kernels: the kernels in ``source`` (named in compile errors).
        python_api: load with ``ctypes.PyDLL`` (calls keep the GIL, Python errors propagate).
        include_dirs: extra ``-I`` folders (``build_cpu``).
    Returns:
        The ``ctypes`` library.
    Raises:
        CompileError: the compiler failed. CacheDirError: the cache directory is unsafe.
        OSError: a freshly rebuilt library still cannot be loaded.
    """
    path = build_cpu(source, name, kernels, include_dirs=include_dirs)
    try:
        return load_cpu_library(path, python_api)
    except OSError as e:
        _warn_damaged(path, f"it cannot be loaded ({e})")
    return load_cpu_library(_build_cpu(source, name, kernels, True, include_dirs), python_api)


def load_cpu_library(path: str, python_api: bool = False):
    """Load a shared library built by ``build_cpu`` (serialised: concurrent ``dlopen`` of one new
    library from several threads is not safe on every libc). Prefer ``load_cpu``, which also
    heals a damaged cache entry.

    Args:
        python_api: load with ``ctypes.PyDLL`` (calls keep the GIL and propagate Python errors),
            for helpers that call the Python C API.
    """
    with _lock:
        lib = (ctypes.PyDLL if python_api else ctypes.CDLL)(path)
        _watch_forks()
        return lib


_forks_watched = False


def _watch_forks() -> None:
    """Once a CPU library is loaded (kernels and helpers run OpenMP teams): a forked child runs
    its OpenMP regions on one thread (``_openmp_after_fork``)."""
    global _forks_watched
    if not _forks_watched and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_openmp_after_fork)
        _forks_watched = True


def _openmp_after_fork() -> None:
    # The child of a fork keeps libgomp's record of the parent's thread pool but not its threads:
    # the next parallel region of the forking thread would wait for them forever (measured: a
    # kernel launch or a 4 MiB host copy in a multiprocessing child hung). One thread per region
    # there instead, as torch does in its forked workers; threads the child starts later get
    # pools of their own. (dlopen by soname: the libgomp the kernels linked, or none to change.)
    try:
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(1)
    except (OSError, AttributeError):   # no GNU OpenMP runtime (another platform, a build without it)
        pass


# ---------------------------------------------------------------------------------- CUDA

_NVRTC_SONAMES = ("libnvrtc.so", "libnvrtc.so.11.2", "libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so.14")
_NVRTC_WHEEL_DIRS = ("nvidia/cuda_nvrtc/lib", "nvidia/cu12/lib", "nvidia/cu13/lib", "nvidia/cu14/lib")
_nvrtc_id = None


def nvrtc_search_dirs() -> list:
    """Where the NVRTC a CUDA compile would load can live, in the dynamic loader's order:
    ``$LD_LIBRARY_PATH``, the CUDA toolkit (``$CUDA_PATH``, ``$CUDA_HOME``, ``/usr/local/cuda``),
    the NVIDIA pip wheels and CuPy's extension directory on ``sys.path``, the environment's
    ``lib``, and the system library directories."""
    dirs = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    for var in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(var)
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    dirs += ["/usr/local/cuda/lib64"]
    for p in sys.path:
        if p and os.path.isdir(os.path.join(p, "nvidia")):
            dirs += [os.path.join(p, w) for w in _NVRTC_WHEEL_DIRS]
        if p and os.path.isdir(os.path.join(p, "cupy_backends")):
            dirs.append(os.path.join(p, "cupy_backends", "cuda", "libs"))
    dirs += [os.path.join(sys.prefix, "lib"), "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
             "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    return dirs


def nvrtc_identity(refresh: bool = False) -> str:
    """A fingerprint of the NVRTC this process would compile with, found without loading it
    (no CuPy import, no dlopen): file identity, size and mtime of every ``libnvrtc`` and CuPy NVRTC
    binding in ``nvrtc_search_dirs()`` (in order), plus the loader cache ``/etc/ld.so.cache``
    (rewritten whenever a library is installed). Any change — an upgrade, another toolkit
    first on the path — gives another fingerprint, so a cached CUDA image is never reused
    with a different NVRTC; a cache hit touches no NVRTC. Computed once per process (again
    with ``refresh=True``)."""
    global _nvrtc_id
    if _nvrtc_id is None or refresh:
        seen = []
        for d in nvrtc_search_dirs():
            # os.access answers a miss without raising: most candidate paths do not exist,
            # and a raised OSError per miss was most of this function's cost
            if not os.access(d, os.F_OK):
                continue
            names = _NVRTC_SONAMES
            if d.endswith(os.path.join("cupy_backends", "cuda", "libs")):
                try:
                    names = sorted(n for n in os.listdir(d) if n.startswith("nvrtc"))
                except OSError:
                    continue
            for n in names:
                p = d + "/" + n
                if not os.access(p, os.F_OK):
                    continue
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                # os.stat follows links: the target's identity (device, inode), size and mtime
                # say what realpath would (a retargeted link is another inode), without its
                # lstat per path component
                seen.append(f"{p}>{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
        try:
            st = os.stat("/etc/ld.so.cache")
            seen.append(f"ld.so.cache:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            pass
        _nvrtc_id = _key(*seen)
    return _nvrtc_id


def build_cuda(source: str, name: str, arch: int, kernels=(), include_dirs=()) -> tuple:
    """Compile ``source`` with NVRTC for ``sm_<arch>`` (cached, verified); returns (image bytes, kind).
    ``include_dirs``: extra ``-I`` folders (as ``build_cpu``).

    A cache hit reads and checks the image and loads no NVRTC (the key holds
    ``nvrtc_identity()``); a damaged image is rebuilt (``tg.CacheWarning`` names it).

    Raises:
        CompileError: NVRTC failed.
    """
    base = cuda_image_base(source_digest(source), name, arch)
    path, data = cached_entry([base + ".cubin", base + ".ptx"],
                              lambda: _compile_cuda(source, arch, kernels, base, include_dirs))
    return data, path.rsplit(".", 1)[1]


def cuda_image_base(digest: str, name: str, arch: int) -> str:
    """The cache path, without its ``.cubin``/``.ptx`` extension, of the image ``build_cuda``
    makes for ``sm_<arch>``, with the NVRTC ``nvrtc_identity()`` describes, of the source
    whose ``source_digest`` is ``digest``.

    Raises:
        CacheDirError: the cache directory is unsafe.
    """
    key = _key(digest, "cuda", str(arch), nvrtc_identity(), " ".join(NVRTC_FLAGS), __version__)
    return os.path.join(cache_dir(), f"{name}_{key[:24]}")


def find_cuda(digest: str, name: str, arch: int):
    """The verified cached image (bytes) of the source with ``source_digest`` ``digest`` for
    ``sm_<arch>``, or None when there is no intact one (the caller then builds from the source).

    Raises:
        CacheDirError: the cache directory is unsafe.
    """
    base = cuda_image_base(digest, name, arch)
    for p in (base + ".cubin", base + ".ptx"):
        data, problem = read_entry(p)
        if problem is not None:
            return None
        if data is not None:
            return data
    return None


def _compile_cuda(source, arch, kernels, base, include_dirs=()):
    from cupy_backends.cuda.libs import nvrtc  # only ever imported when compiling for CUDA
    try:
        ver = ".".join(map(str, nvrtc.getVersion()))
    except Exception:
        ver = "?"
    image, kind = _nvrtc(nvrtc, source, arch, kernels, include_dirs)
    path = f"{base}.{kind}"
    write_entry(path, image, info=f"nvrtc {ver}")
    other = f"{base}.{'ptx' if kind == 'cubin' else 'cubin'}"
    if os.path.exists(other):   # a damaged image of the other kind must not shadow this one
        os.unlink(other)
    return path, image


def _nvrtc(nvrtc, source, arch, kernels, include_dirs=()):
    def run(opts):
        prog = nvrtc.createProgram(source, "tapegrad_kernel.cu", (), ())
        try:
            try:
                nvrtc.compileProgram(prog, tuple(opts))
            except nvrtc.NVRTCError as e:
                log = ""
                try:
                    log = nvrtc.getProgramLog(prog)
                except Exception:
                    pass
                return None, f"{e}\n{log}"
            return prog, None
        except BaseException:
            nvrtc.destroyProgram(prog)
            raise

    use_cubin = hasattr(nvrtc, "getCUBIN")
    includes = [f"-I{d}" for d in include_dirs]
    opts = NVRTC_FLAGS + includes + [f"-arch={'sm' if use_cubin else 'compute'}_{arch}"]
    prog, err = run(opts)
    if prog is None and "architecture" in err.lower():
        use_cubin = False   # this NVRTC predates the GPU: ship PTX for the driver to JIT
        prog, err = run(NVRTC_FLAGS + includes + [f"-arch=compute_{min(arch, 90)}"])
    if prog is None:
        raise _compile_error("NVRTC compilation", kernels, source, err, "tapegrad_kernel.cu")
    try:
        if use_cubin:
            return bytes(nvrtc.getCUBIN(prog)), "cubin"
        ptx = nvrtc.getPTX(prog)
        return (ptx.encode() if isinstance(ptx, str) else bytes(ptx)), "ptx"
    finally:
        nvrtc.destroyProgram(prog)


def load_cuda_image(image: bytes, device):
    """Load a cubin/PTX image built by ``build_cuda`` on CUDA ``device``; returns the
    ``CUmodule`` handle."""
    from cupy.cuda import driver, runtime
    with device.context_guard():
        if not driver.ctxGetCurrent():
            # create the primary context; never reached during a capture (which needs
            # one), where cudaFree would invalidate the capture
            runtime.free(0)
        return driver.moduleLoadData(image)


def load_cuda(source: str, name: str, device, kernels=(), include_dirs=()):
    """Build (or find in the cache), verify and load a CUDA module on ``device``: the CUDA
    twin of ``load_cpu``; returns the ``CUmodule`` handle. ``include_dirs``: as ``build_cuda``.

    Raises:
        CompileError: NVRTC failed.
    """
    image, _ = build_cuda(source, name, int(device.arch), kernels, include_dirs)
    return load_cuda_image(image, device)
