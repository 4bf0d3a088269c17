"""Build, cache and load native binaries: the system C++ compiler for the CPU, NVRTC for CUDA.

The one native build path of tapegrad: kernels (``tapegrad.lang.kernel``), the batched host
helpers (``tapegrad.memory_ops``) and the DLPack capsule helper (``tapegrad.dlpack.capsules``)
all compile here (``tapegrad.modules`` wraps a loaded kernel binary for launching). This module
knows toolchains, the cache and how to load a binary; it knows nothing about kernels.

Binaries are cached on disk under a content hash of (generated source, target, arch,
compiler identity and flags, tapegrad version) in ``$TAPEGRAD_CACHE`` or
``~/.cache/tapegrad``. The directory is per-user (mode 0700; a world-writable or foreign-owned
directory is refused: loading a shared library from it would run anyone's code). Builds write
to a temporary file in the same directory and ``os.replace`` it into place, so concurrent
processes compiling the same kernel never see a partial file.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import sys
import threading

from .errors import CacheDirError, CompileError
from .version import __version__

__all__ = ["CompileError", "CacheDirError", "cache_dir", "find_cxx", "build_cpu", "build_cuda", "load_cpu_library",
           "load_cuda_image", "CXXFLAGS"]

CXXFLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-fopenmp", "-fno-math-errno", "-fvisibility=hidden", "-w"]
NVRTC_FLAGS = ["-std=c++17", "-w"]
_lock = threading.Lock()
_checked_dirs: set = set()
_cxx = None


def cache_dir() -> str:
    """The kernel cache directory, created with mode 0700 if missing.

    Raises:
        CacheDirError: the directory is world-writable or owned by another user.
    """
    d = os.path.abspath(os.path.expanduser(os.environ.get("TAPEGRAD_CACHE") or "~/.cache/tapegrad"))
    if d in _checked_dirs:
        return d
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.stat(d)
    if st.st_mode & stat.S_IWOTH:
        raise CacheDirError(f"refusing to use kernel cache directory {d}: it is world-writable, so anyone could "
                            f"plant a library tapegrad would load. Run `chmod o-w {d}` or set TAPEGRAD_CACHE to a "
                            "private directory.")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheDirError(f"refusing to use kernel cache directory {d}: it is owned by uid {st.st_uid}, not you "
                            f"(uid {os.getuid()}). Set TAPEGRAD_CACHE to a directory you own.")
    _checked_dirs.add(d)
    return d


def find_cxx():
    """The C++ compiler command (a list) and an identity string for cache keys.

    Order: ``$TAPEGRAD_CXX`` (may contain arguments), ``c++``, ``g++``, ``clang++``, then
    ``python -m ziglang c++`` when the ``ziglang`` package is installed.

    Raises:
        CompileError: no compiler found (the message says how to get one).
    """
    global _cxx
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
    try:
        st = os.stat(os.path.realpath(exe))
        ident = f"{' '.join(cmd)}|{os.path.realpath(exe)}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        ident = " ".join(cmd)
    _cxx = (cmd, ident)
    return _cxx


def _flags_for(cmd):
    flags = list(CXXFLAGS)
    if "ziglang" in cmd:
        flags.remove("-fopenmp")      # zig's clang ships no OpenMP runtime: run single-threaded
    elif _is_gcc(cmd[0]):
        # GCC's -O2 cost model ("very-cheap") never vectorizes a loop that needs a run-time
        # overlap check, i.e. any kernel loop (clang's -O2 does): allow those checks
        flags.insert(1, "-fvect-cost-model=cheap")
    return flags


def _is_gcc(exe) -> bool:
    """Whether ``exe`` is GCC's driver by its resolved name (``c++`` -> ``x86_64-linux-gnu-g++-12``);
    a name that does not say (a ``c++`` that is clang, ccache) gets no GCC-only flags."""
    name = os.path.basename(os.path.realpath(shutil.which(exe) or exe))
    return ("g++" in name or "gcc" in name) and "clang" not in name


def _key(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x00")
    return h.hexdigest()


def _atomic_write(path, data: bytes):
    d = os.path.dirname(path)
    import tempfile  # only when writing a new binary: a cached load never pays for importing it
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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


def build_cpu(source: str, name: str, kernels=()) -> str:
    """Compile ``source`` into a shared library (cached); returns its path.

    Raises:
        CompileError: the compiler failed or none is available.
    """
    cmd, ident = find_cxx()
    flags = _flags_for(cmd)
    key = _key(source, "cpu", ident, " ".join(flags), __version__, sys.platform)
    d = cache_dir()
    path = os.path.join(d, f"{name}_{key[:24]}.so")
    if os.path.exists(path):
        return path
    import tempfile  # only when compiling (as subprocess below)
    fd, src_path = tempfile.mkstemp(dir=d, prefix=f".{name}-", suffix=".cpp")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    fd, out_tmp = tempfile.mkstemp(dir=d, prefix=f".{name}-", suffix=".so")
    os.close(fd)
    import subprocess  # only when compiling: a cached load never pays for importing it
    try:
        proc = subprocess.run(cmd + flags + [src_path, "-o", out_tmp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise _compile_error("C++ compilation", kernels, source, proc.stderr + proc.stdout, src_path)
        os.chmod(out_tmp, 0o700)
        os.replace(out_tmp, path)
        os.replace(src_path, path[:-3] + ".cpp")   # kept beside the binary for debugging
    finally:
        for p in (out_tmp, src_path):
            if os.path.exists(p):
                os.unlink(p)
    return path


def build_cuda(source: str, name: str, arch: int, kernels=()) -> tuple:
    """Compile ``source`` with NVRTC for ``sm_<arch>`` (cached); returns (image bytes, kind).

    Raises:
        CompileError: NVRTC failed.
    """
    from cupy_backends.cuda.libs import nvrtc  # only ever imported when compiling for CUDA
    try:
        ver = ".".join(map(str, nvrtc.getVersion()))
    except Exception:
        ver = "?"
    key = _key(source, "cuda", str(arch), ver, " ".join(NVRTC_FLAGS), __version__)
    d = cache_dir()
    for ext in (".cubin", ".ptx"):
        path = os.path.join(d, f"{name}_{key[:24]}{ext}")
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read(), ext[1:]
    image, kind = _nvrtc(nvrtc, source, arch, kernels)
    _atomic_write(os.path.join(d, f"{name}_{key[:24]}.{kind}"), image)
    return image, kind


def _nvrtc(nvrtc, source, arch, kernels):
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
    opts = NVRTC_FLAGS + [f"-arch={'sm' if use_cubin else 'compute'}_{arch}"]
    prog, err = run(opts)
    if prog is None and "architecture" in err.lower():
        use_cubin = False   # this NVRTC predates the GPU: ship PTX for the driver to JIT
        prog, err = run(NVRTC_FLAGS + [f"-arch=compute_{min(arch, 90)}"])
    if prog is None:
        raise _compile_error("NVRTC compilation", kernels, source, err, "tapegrad_kernel.cu")
    try:
        if use_cubin:
            return bytes(nvrtc.getCUBIN(prog)), "cubin"
        ptx = nvrtc.getPTX(prog)
        return (ptx.encode() if isinstance(ptx, str) else bytes(ptx)), "ptx"
    finally:
        nvrtc.destroyProgram(prog)


def load_cpu_library(path: str, python_api: bool = False):
    """Load a shared library built by ``build_cpu`` (serialised: concurrent ``dlopen`` of one new
    library from several threads is not safe on every libc).

    Args:
        python_api: load with ``ctypes.PyDLL`` (calls keep the GIL and propagate Python errors),
            for helpers that call the Python C API.
    """
    with _lock:
        return (ctypes.PyDLL if python_api else ctypes.CDLL)(path)


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
