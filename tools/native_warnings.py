"""CI guard: every native helper compiles cleanly with ``-Wall -Werror`` (issue 25, item 6).

The helpers are built at install (setup.py) and, as a fallback, at first use (tapegrad/native.py,
bridges/jax/ffi.py) with the flags those builds choose; this check compiles each source once more,
syntax only, with every warning an error, so a warning introduced in a change fails CI instead of
hiding in a build log. The XLA FFI handler is checked the way ``bridges/jax/ffi.py`` builds it:
after the installed jaxlib's ``xla/ffi/api/c_api.h`` (skipped, with a line saying so, when no
jaxlib is installed).

Run: ``python tools/native_warnings.py`` from the repository root; exit status 1 on a warning.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_SOURCES = ["tapegrad/launch/fastlaunch.c", "tapegrad/dlpack/capsule_helper.c", "tapegrad/hostops.c"]
OPENMP_SOURCES = ["tapegrad/hostops.c"]   # built with -fopenmp too (setup.py's OPENMP_HELPERS): checked both ways
FLAGS = ["-Wall", "-Werror", "-fsyntax-only"]
INCLUDE = os.path.join(ROOT, "tapegrad", "include")   # the kernel ABI header (tapegrad/abi)


def _compile(cmd: list) -> bool:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stdout.write(r.stdout + r.stderr)
    return r.returncode == 0


def _ffi_handler_source():
    """The XLA handler as ``bridges/jax/ffi.py`` compiles it (jaxlib's C API header first), or None."""
    try:
        import jax.ffi
    except ImportError:
        return None
    header = os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")
    with open(header) as f, open(os.path.join(ROOT, "bridges/jax/ffi_handler.cpp")) as g:
        # inlined as bridges/jax/ffi.py does it (tapegrad.abi.inline_header), here through the include path
        return f.read() + "\n" + g.read()


def main() -> int:
    cc = os.environ.get("CC", "cc")
    cxx = os.environ.get("CXX", "c++")
    include = sysconfig.get_paths()["include"]
    ok = True
    for src, extra in [(s, []) for s in C_SOURCES] + [(s, ["-fopenmp"]) for s in OPENMP_SOURCES]:
        good = _compile([cc, *FLAGS, *extra, f"-I{include}", f"-I{INCLUDE}", os.path.join(ROOT, src)])
        print(f"{'ok  ' if good else 'FAIL'} {src} {' '.join(extra)}".rstrip())
        ok &= good
    handler = _ffi_handler_source()
    if handler is None:
        print("skip bridges/jax/ffi_handler.cpp (no jaxlib installed)")
    else:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ffi_handler.cpp")
            with open(path, "w") as f:
                f.write(handler)
            good = _compile([cxx, "-std=c++17", *FLAGS, f"-I{INCLUDE}", path])
        print(f"{'ok  ' if good else 'FAIL'} bridges/jax/ffi_handler.cpp")
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
